# ruff: noqa
import sys, os, time, ctypes, collections, multiprocessing as mp
from workers import audit
cnt = collections.Counter()
if len(sys.argv) > 1 and sys.argv[1] == "count":
    sys.addaudithook(lambda e, a: cnt.update([e]))
r, w = mp.Pipe(duplex=False)
if len(sys.argv) > 1 and sys.argv[1] in ("count", "hook"):
    print("installed", audit.install(w.fileno()))
libc = ctypes.CDLL(None)
f = audit.bound(libc.getpid)
a, b = mp.Pipe()
post = b.send_bytes
def loop(n):
    for _ in range(n):
        a.send(("go", None)); b.recv()
        t0 = time.perf_counter_ns(); f(); ms = (time.perf_counter_ns() - t0) / 1e6
        b.send_bytes(b'{"progress": true, "stage": "witnessed", "ms": %r}' % ms); a.recv_bytes()
loop(1000); cnt.clear()
t = time.perf_counter(); loop(20000); dt = time.perf_counter() - t
print(sys.argv[1:], "us/turn", round(dt / 20000 * 1e6, 2), dict(cnt.most_common(8)))
