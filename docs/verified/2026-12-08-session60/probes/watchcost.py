# ruff: noqa
"""The harness's per-job checks between jobs (workers.harness ``_serve``), timed in a process
that imported the harness as a CPU harness does: the watch's size, and per call (ms, the
median of 50): rewritten, c_swapped, RefThreads.left, open_files."""
import statistics, sys, time, types
sys.path.insert(0, ".")
from workers import harness as H
watch = tuple(H.watched(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
c_watch = types.MappingProxyType(H.c_taken(watch))
th = H.RefThreads(); th.update()
print("watch", len(watch), "c_watch", len(c_watch))
for name, f in (("rewritten", lambda: H.rewritten(watch)), ("c_swapped", lambda: H.c_swapped(c_watch)),
                ("threads.left", th.left), ("open_files", H.open_files),
                ("_left_here", lambda: H._left_here(watch, c_watch, th))):
    ts = []
    for _ in range(50):
        t = time.perf_counter(); f(); ts.append((time.perf_counter() - t) * 1e3)
    print(f"{name}: {statistics.median(ts):.3f} ms")
# the same with workers.audit's hook installed, as every harness has it (writing to a pipe)
import os
from workers import audit
r, w = os.pipe()
assert audit.install(w)
counts = {}
sys.addaudithook  # (a second hook is refused: count events by wrapping nothing; time only)
for name, f in (("rewritten", lambda: H.rewritten(watch)), ("c_swapped", lambda: H.c_swapped(c_watch)),
                ("open_files", H.open_files), ("_left_here", lambda: H._left_here(watch, c_watch, th))):
    ts = []
    for _ in range(50):
        t = time.perf_counter(); f(); ts.append((time.perf_counter() - t) * 1e3)
    print(f"hooked {name}: {statistics.median(ts):.3f} ms")
