# ruff: noqa
"""Red-team 53 (beside attack C): a thread left by redteam53/forger.cpp SPIN=1 spins in the
harness after its job; the next honest job's median there vs in a fresh sandbox.
Run: cd /tmp/rt53 && PYTHONPATH=/tmp/rt53 timeout 300 python redteam53/spin_next.py"""
import sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "/tmp/rt53/tests")
from test_faults import PACK, artifact, job
from test_turns import ARGS
from workers.sandbox import Sandbox

HERE = Path(__file__).resolve().parent
tmp = Path(tempfile.mkdtemp(prefix="rt53spin-"))
hon = job(artifact(tmp, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp", PACK / "ref.py",
          {"N": 4096}, ARGS)
spin = job(artifact(tmp, HERE / "forger.cpp", {"SPIN": 1}), HERE / "forger.cpp",
           PACK / "ref.py", {"N": 4096}, ARGS)
for label, pre in (("fresh", None), ("after spinner", spin), ("fresh", None),
                   ("after spinner", spin)):
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        if pre:
            a = box.run_retrying(pre, 30)
            box.end_leftovers()
            time.sleep(0.5)
        r = box.run_retrying(hon, 30)
        print(label, r["status"], round(r.get("median_ms") or 0, 4), "restarts", box.restarts,
              str(r.get("error"))[:150])
    finally:
        box.close()
