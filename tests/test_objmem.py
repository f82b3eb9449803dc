"""workers.objmem: the harness's per-job check of what its watched functions run
(workers.harness ``c_swapped``), read from memory with no audit event per read, still sees
what a candidate's Python changes."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# in a fresh interpreter: an audit hook cannot be removed from this one
CHECK = r'''
import collections, json, sys
from workers import harness as H, objmem, timing
watch = H.watched("cpu")
taken = H.c_taken(watch)
fns = [n for n in taken if n not in H.STATES]
read = [n for n in fns if taken[n][2] is not None]
events = collections.Counter()
sys.addaudithook(lambda e, a: events.update([e]))
clean = H.c_swapped(taken)
n_events = sum(events.values())
def other(a, q):
    return 0.0
timing.quantile.__code__ = other.__code__
H.Harness.__init__.__defaults__ = (None,) * len(H.Harness.__init__.__defaults__)
cell = next(n for n in read if taken[n][2][0] and len(taken[n][2][2]) > 4)
taken[cell][0].__closure__[0].cell_contents = object()
changed = H.c_swapped(taken)
objmem.MEMORY = memoryview(bytes(64))  # the view it reads through, rebound
print(json.dumps({"fns": len(fns), "read": len(read), "clean": clean, "events": n_events,
                  "cell": cell, "changed": changed, "replaced": H.rewritten(watch)}))
'''


def test_the_per_job_check_reads_memory_without_audit_events_and_sees_each_change():
    """Read through ``__code__``, ``__defaults__``, ``id`` and ``ctypes``' ``from_address``,
    one check of the CPU harness's watch raised about 4,000 audit events, and workers.audit's
    hook (every harness has it) walked the stack for each: 7 ms a check, two a job (about
    16 ms a job, bench/check_cost.py on this project's CI machine). Read from memory, it
    raises at most 200; a function's code, its defaults and a closure cell's content, each
    changed as Python run by a candidate would, are named, and so is the view of memory
    it reads through, rebound (a module's attribute set through the C API raises no
    event)."""
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["read"] >= 0.95 * got["fns"], got
    assert got["clean"] == [] and got["events"] <= 200, got
    assert {"workers.timing.quantile", "Harness.__init__", got["cell"]} <= set(got["changed"]), got
    assert got["replaced"] == ["workers.objmem.MEMORY"], got
