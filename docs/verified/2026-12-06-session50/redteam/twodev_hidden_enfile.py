# ruff: noqa
# red-team review of 956b164 (session 50), as run then; its paths are /tmp/rt50 (a clone)
"""Two 'devices' on one host, no cgroup: device A's sandbox runs the attacker's job
(enfile_hidden.cpp: its hidden children hold the host's open files) as the device actor
does (run_retrying, then end_leftovers); device B's actor (DeviceActor.run, i.e.
_through_shortage; waits shortened to (0.5, 1.0) to keep the machine usable) then runs an
honest job. Box A closed at the end (its namespace dies)."""
import os, sys, json, time, threading
sys.path.insert(0, "/tmp/rt50/tests")
from pathlib import Path
tmp = Path("/tmp/rt50-work"); tmp.mkdir(exist_ok=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
from workers import cgroup, hold
cgroup.make = lambda: (None, "none (red-team: no cgroup)")
from workers import device_actor as da
da.SHORTAGE_RETRY_S = (0.5, 1.0)
from workers.device_actor import DeviceActor
from workers.records import RunJob
from workers.sandbox import Sandbox
from test_turns import contender, ARGS
from test_faults import PACK, artifact as built, job as pack_job
src = Path("/tmp/rt50-cand/enfile_hidden.cpp")
aj = pack_job(built(tmp, src, {"HOLD_S": 60}), src, PACK / "ref.py", {"N": 4096}, ARGS)
hj, hart = contender(tmp, PACK / "faults.cpp", {"MODE": 0}, "honest")
common = {k: v for k, v in hj.items() if k not in ("job_key", "build_id", "dims", "artifact")}
honest = RunJob("honest", hj["build_id"], hj["dims"], common)
actor_b = DeviceActor("cpu", spares=0)
box_a = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
def fnr(): return open("/proc/sys/fs/file-nr").read().split()[0]
try:
    t = time.time()
    ra = box_a.run_retrying(aj, 60)
    print(f"[{time.time()-t:.1f}s] device A attacker:", ra.get("status"), str(ra.get("error"))[:200], "file-nr", fnr(), flush=True)
    print("A left_running:", box_a.left_running(), "end_leftovers ended A's harness:", box_a.end_leftovers(), flush=True)
    rb = actor_b.run(honest, hart)
    print(f"[{time.time()-t:.1f}s] device B honest: VERDICT", rb.status, "|", rb.error[:400].replace("\n", " | "), "file-nr", fnr(), flush=True)
finally:
    box_a.close()
    actor_b.shutdown()
    print("after close file-nr", fnr())
