# ruff: noqa
import sys, threading, time; from pathlib import Path; sys.path.insert(0, str(Path(__file__).parent)); from _base import inputs, _ref
_calls = [0]
def reference(x, buf, N):
    _calls[0] += 1
    if _calls[0] == 2:
        threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
    return _ref(x, buf)
