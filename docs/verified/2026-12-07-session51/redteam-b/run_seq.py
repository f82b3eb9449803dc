# ruff: noqa
# usage: run_seq.py MODE SRC[:DEFINE=V][@N] ...   (faults.cpp is PACK's; others relative to rt/)
import os, sys, time, tempfile
from pathlib import Path
sys.path.insert(0, "/tmp/rt51b/tests")
mode = sys.argv[1]
tmp = Path(tempfile.mkdtemp())
os.environ["KOPT_CACHE"] = str(tmp / "cache")
from workers import cgroup
if mode == "namespace":
    cgroup.make = lambda: (None, "none")
from test_faults import artifact as built, job as pack_job, PACK
if os.environ.get("TRACE"): sys.path.insert(0, "/tmp/rt51b/rt"); import trace as _t
from workers.device_actor import DeviceActor
from workers.records import RunJob
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
actor = DeviceActor("cpu", spares=0)
try:
    for i, spec in enumerate(sys.argv[2:]):
        spec, _, n = spec.partition("@"); n = int(n or 4096)
        name, _, defs = spec.partition(":")
        d = {k: int(v) for k, v in (x.split("=") for x in defs.split(",") if x)}
        src = PACK / name if (PACK / name).exists() else Path("/tmp/rt51b/rt") / name
        art = Path(built(tmp, src, d))
        payload = pack_job(str(art), PACK / "faults.cpp", PACK / "ref.py", {"N": n}, ARGS)
        common = {k: v for k, v in payload.items() if k not in ("artifact", "dims", "job_key")}
        b = actor._own(); print("  pre", b.host_pid if b else None, b.left_running() if b else None, flush=True)
        t0 = time.time()
        o = actor.run(RunJob(f"k{i}-{src.stem}", art.parent.name, {"N": n}, common), art.read_bytes())
        print(i, name, d, n, o.status, repr((o.error or "")[:220]), o.median_ms,
              "restarts", actor.stats()["restarts"], "wall %.1f" % (time.time() - t0), flush=True)
finally:
    actor.shutdown()
