# ruff: noqa
import sys, threading, time; from pathlib import Path; sys.path.insert(0, str(Path(__file__).parent)); from _base import inputs, _ref
import queue
_q = queue.Queue()
def _bg():   # a daemon thread from import that, asked, starts a helper thread of its own
    while True:
        _q.get()
        threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
threading.Thread(target=_bg, daemon=True).start()
_calls = [0]
def reference(x, buf, N):
    _calls[0] += 1
    if _calls[0] == 3:
        _q.put(1)   # the helper starts a little later, maybe after the window closed
    return _ref(x, buf)
