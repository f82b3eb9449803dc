# ruff: noqa -- contest_enfile.py with this tree's paths, run at e6c45bb (section 4)
"""Contest of the attacker (enfile.cpp, leader: first load turn) against the honest fault
pack kernel, in turns, on the CPU device actor, as kopt.loop.contests runs it."""
import os, sys, json, time
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/work/main/tests")
os.chdir("/work/main")
from pathlib import Path
from test_turns import contender, PACK, ROUNDS
from workers.device_actor import DeviceActor
tmp = Path("/tmp/v49/work"); tmp.mkdir(exist_ok=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
a, art_a = contender(tmp, Path("/work/main/docs/verified/2026-12-06-session49/redteam/enfile.cpp"), {}, "attacker")
h, art_h = contender(tmp, PACK / "faults.cpp", {"MODE": 0}, "honest")
actor = DeviceActor("cpu")
try:
    t = time.time()
    res = actor.contest([a, h], ROUNDS, art_a, art_h)
    print("wall", round(time.time() - t, 1))
    print(json.dumps({k: v for k, v in res.items() if k != "results"}, indent=1)[:3000])
    for r in res.get("results") or []:
        print("result median", r.get("median_ms"), r.get("n_samples"))
finally:
    actor.shutdown()
print("file-nr", open("/proc/sys/fs/file-nr").read())
