# ruff: noqa
"""The same attack through DeviceActor.run (the device's own harness, _attributed)."""
import os, sys, shutil
from pathlib import Path
sys.path[:0] = ["/tmp/rt54", "/tmp/rt54/tests"]
tmp = Path("/tmp/rt54/rt/work_actor"); shutil.rmtree(tmp, ignore_errors=True); tmp.mkdir(parents=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
from test_faults import artifact, job, PACK
from test_turns import worker_ref, POOL_REF, ARGS
from workers.device_actor import DeviceActor
from workers.records import RunJob

ref = worker_ref(tmp, POOL_REF)
def rj(src, defines, key):
    art = Path(artifact(tmp / key, src, defines))
    j = job(str(art), src, ref, {"N": 1 << 18}, ARGS)
    common = {k: v for k, v in j.items() if k not in ("artifact", "dims", "job_key")}
    return RunJob(key, art.parent.name, {"N": 1 << 18}, common), art.read_bytes()
hon, hon_b = rj(PACK / "faults.cpp", {"MODE": 0}, "honest")
evil, evil_b = rj(Path("/tmp/rt54/rt/hijack12.cpp"), {}, "evil")
a = DeviceActor("cpu", spares=0)
try:
    r0 = a.run(hon, hon_b); print("honest first:", r0.status, round(r0.median_ms or 0, 3), r0.error[:200])
    r1 = a.run(evil, evil_b); print("evil:", r1.status, round(r1.median_ms or 0, 3), r1.error[:200])
    for i in range(2):
        r2 = a.run(hon, hon_b); print("honest after:", r2.status, round(r2.median_ms or 0, 3), r2.error[:200])
    print("stats:", a.stats())
finally:
    a.shutdown()
