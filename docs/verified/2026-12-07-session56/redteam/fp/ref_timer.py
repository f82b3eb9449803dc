# ruff: noqa
import sys, threading, time; from pathlib import Path; sys.path.insert(0, str(Path(__file__).parent)); from _base import inputs, _ref
threading.Timer(0.3, lambda: None).start()   # a one-off timer alive at import's end
def reference(x, buf, N):
    return _ref(x, buf)
