# ruff: noqa
# red-team review of 956b164 (session 50), as run then; its paths are /tmp/rt50 (a clone)
"""DeviceActor('cpu').run of a candidate's job (argv[1], defines argv[2]) through the real
_through_shortage (SHORTAGE_RETRY_S as shipped unless argv[3] given)."""
import os, sys, json, time
sys.path.insert(0, "/tmp/rt50/tests")
from pathlib import Path
tmp = Path("/tmp/rt50-work"); tmp.mkdir(exist_ok=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
from workers import device_actor as da
from workers.device_actor import DeviceActor
from workers.records import RunJob
from test_turns import contender
from test_faults import PACK
src = Path(sys.argv[1]); defines = json.loads(sys.argv[2])
j, art = contender(tmp, src, defines, "cand")
common = {k: v for k, v in j.items() if k not in ("job_key", "build_id", "dims", "artifact")}
job = RunJob("cand", j["build_id"], j["dims"], common)
print("SHORTAGE_RETRY_S", da.SHORTAGE_RETRY_S, flush=True)
actor = DeviceActor("cpu", spares=0)
try:
    t = time.time()
    calls = []
    real = actor.sandbox.run_retrying.__func__
    from workers.sandbox import Sandbox
    def counted(self, job, timeout_s):
        r = real(self, job, timeout_s); calls.append((round(time.time() - t, 2), r.get("status"), str(r.get("error"))[-160:].replace("\n", " | "))); return r
    Sandbox.run_retrying = counted
    out = actor.run(job, art)
    print("wall_s", round(time.time() - t, 1))
    for c in calls: print("run_retrying answered", c)
    print("VERDICT", out.status, "|", out.error[:600])
finally:
    actor.shutdown()
