# ruff: noqa
import sys, threading, time; from pathlib import Path; sys.path.insert(0, str(Path(__file__).parent)); from _base import inputs, _ref
threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
def reference(x, buf, N):
    return _ref(x, buf)
