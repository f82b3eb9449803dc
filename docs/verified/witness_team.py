"""Honest two-thread OpenMP kernels (tests/fixtures/honest MODE 16-19: num_threads(2)) on a
device of one thread, each alone in a contest with witness turns: per turn the harness's own
time of its call (ms), the turn's wall time by the device actor's clock and the CPU figures;
with the device actor's cache eviction after it writes an input set (workers.witness
``evict_caches`` at d977d6d, EVICT=1) and without it (EVICT=0). The eviction changed no
verdict there and was taken out after d977d6d: at later commits EVICT has no effect.
Usage (repo root): EVICT=0|1 PYTHONPATH=.:tests python docs/verified/witness_team.py 16 17 18 19
"""
import os
import sys
import tempfile
from pathlib import Path

from test_faults import artifact, job
from test_honest import ALL_SIZES, HONEST

from workers import judge, witness
from workers.device_actor import DeviceActor

if os.environ.get("EVICT") == "0":
    witness.evict_caches = lambda: None
orig = witness.judged


def spy(res, t, verdicts):
    out = orig(res, t, verdicts)
    if t is not None and t.records:
        med = res["results"][0]["median_ms"] if res.get("results") else None
        print(f"median {med} null {t.plan.null}")
        for r in t.records:
            print(f"  ms {r.ms:.4f} wall {r.wall_ms:.4f} main {r.main_cpu_ms:.4f} "
                  f"thread {r.thread_cpu_ms:.4f} cgroup {r.cpu_ms} read {r.read_ms:.4f}")
    print("->", out["status"], out.get("error", "")[:160], flush=True)
    return out


judge.witness.judged = spy
tmp = Path(tempfile.mkdtemp())
src = HONEST / "honest.cpp"
art = artifact(tmp, src, {})
actor = DeviceActor("cpu", threads=1)
try:
    for m in [int(x) for x in sys.argv[1:]]:
        j = job(art, src, HONEST / "ref.py", {"N": ALL_SIZES[m], "MODE": m},
                {"x": ["N"], "y": ["N"]}, tolerance={"atol": 1e-5, "rtol": 1e-4},
                job_key=f"m{m}")
        j = {**j, "build_id": os.path.basename(os.path.dirname(art))}
        print(f"MODE {m} EVICT {os.environ.get('EVICT', '1')}")
        actor.contest([j], 8, open(art, "rb").read())
finally:
    actor.shutdown()
