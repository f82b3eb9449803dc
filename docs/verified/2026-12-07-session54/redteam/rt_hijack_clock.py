# ruff: noqa
"""The closing's outside clock: the attacker's block, then an honest rival's, in the device's
own harness (DeviceActor.clock), then kopt.core.clock.clock_suspect on the rival's figures."""
import os, sys, shutil
from pathlib import Path
sys.path[:0] = ["/tmp/rt54", "/tmp/rt54/tests"]
tmp = Path("/tmp/rt54/rt/work_clock"); shutil.rmtree(tmp, ignore_errors=True); tmp.mkdir(parents=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
from test_faults import artifact, job, PACK
from test_turns import worker_ref, POOL_REF, ARGS
from workers.device_actor import DeviceActor
from workers.records import RunJob
from kopt.core.clock import clock_suspect, outside_blocks

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
    base = a.run(hon, hon_b); med = base.median_ms
    print("honest median (clean harness):", round(med, 3))
    def clock_of(rjob, b):
        p = rjob.payload()
        return lambda n, loads_only, paced=False: a.clock(p, n, b, loads_only, paced)
    blocks, fault = outside_blocks(clock_of(hon, hon_b), med, paced=True)
    print("honest clocked before attack:", [round(x / n, 3) for x, n, _ in blocks], fault, "->", clock_suspect(med, blocks) or "not suspect")
    e = a.clock(evil.payload(), 3, evil_b)          # the attacker's own block
    print("evil block:", e.get("status"), (e.get("error") or "")[:150])
    blocks, fault = outside_blocks(clock_of(hon, hon_b), med, paced=True)
    print("honest clocked after attack:", [round(x / n, 3) for x, n, _ in blocks], fault, "->", clock_suspect(med, blocks) or "not suspect")
    print("stats:", a.stats())
finally:
    a.shutdown()
