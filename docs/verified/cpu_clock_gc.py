"""How often Python's full garbage collection falls inside a clock block (workers.harness
``Harness.clock``), and what it costs there: 16 blocks of 2000 calls and 16 of the 2000
preparations alone of the fault pack's honest MODE 0 kernel (N=4096), in this process's
Harness on the CPU. A gen-2 collection counts when it runs between the block's "go" and its
"clocked" (the two waits for the sandbox's word, stubbed here).

    PYTHONPATH=$PWD python docs/verified/cpu_clock_gc.py
"""
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from test_faults import PACK, artifact, job  # noqa: E402

from workers.harness import Harness  # noqa: E402

full = {"n": 0, "ms": 0.0, "t": 0.0}


def watch(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            full["t"] = time.process_time()
        else:
            full["n"] += 1
            full["ms"] += (time.process_time() - full["t"]) * 1e3


gc.callbacks.append(watch)
marks = []
h = Harness("cpu")
h.await_go = lambda: marks.append((full["n"], full["ms"]))
src = PACK / "faults.cpp"
j = job(artifact(Path(tempfile.mkdtemp()), src, {"MODE": 0}), src, PACK / "ref.py",
        {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]})
inside = []
for rep in range(16):
    for loads_only in (True, False):
        del marks[:]
        res = h.run({**j, "clock_calls": 2000, "clock_loads_only": loads_only})
        (n0, ms0), (n1, ms1) = marks[0], marks[1]
        inside.append((loads_only, round(res["inside_ms"], 1), n1 - n0, round(ms1 - ms0, 1)))
        print(rep, "preparations alone" if loads_only else "calls", res["status"],
              f"block {res['inside_ms']:.1f} ms", f"gen-2 collections in it: {n1 - n0}",
              f"({ms1 - ms0:.1f} ms)", flush=True)
print("blocks with a full collection inside:", sum(1 for x in inside if x[2]), "of", len(inside))
print("full collections in the whole run:", full["n"], f"({full['ms']:.1f} ms)")
