# ruff: noqa
import os, sys, time, tempfile
from pathlib import Path
sys.path.insert(0, "/tmp/rt51b/tests")
mode = sys.argv[1] if len(sys.argv) > 1 else "cgroup"
tmp = Path(tempfile.mkdtemp())
os.environ["KOPT_CACHE"] = str(tmp / "cache")
from workers import cgroup
if mode == "namespace":
    cgroup.make = lambda: (None, "none")
from test_faults import artifact as built, job as pack_job, PACK
from workers.device_actor import DeviceActor
from workers.records import RunJob
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
seq = [(Path("/tmp/rt51b/rt/idle_fork.cpp"), {}, 4096), (PACK / "faults.cpp", {"MODE": 0}, 4096), (PACK / "faults.cpp", {"MODE": 0}, 8192)] if len(sys.argv) > 2 and sys.argv[2] == "AB" else [(Path(sys.argv[2]), {}, 4096), (Path(sys.argv[2]), {}, 8192), (PACK / "faults.cpp", {"MODE": 0}, 4096)] \
    if len(sys.argv) > 2 else [(Path("/tmp/rt51b/rt/idle_fork.cpp"), {}, 4096), (Path("/tmp/rt51b/rt/idle_fork.cpp"), {}, 8192), (PACK / "faults.cpp", {"MODE": 0}, 4096)]
actor = DeviceActor("cpu", spares=0)
try:
    for i, (src, d, n) in enumerate(seq):
        print('  before job', i, 'left_running:', actor._own().left_running() if actor._own() else None, flush=True)
        art = Path(built(tmp, src, d))
        payload = pack_job(str(art), PACK / "faults.cpp", PACK / "ref.py", {"N": n}, ARGS)
        common = {k: v for k, v in payload.items() if k not in ("artifact", "dims", "job_key")}
        o = actor.run(RunJob(f"k{i}-{src.stem}", art.parent.name, {"N": n}, common), art.read_bytes())
        box = actor._own()
        print(i, src.name, n, o.status, repr((o.error or "")[:200]), o.median_ms,
              "restarts", actor.stats()["restarts"], "left_now", box.left_running(), flush=True)
        time.sleep(1.0)
finally:
    actor.shutdown()
