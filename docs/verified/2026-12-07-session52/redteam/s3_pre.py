# ruff: noqa
"""Honest false positive? A warm device actor serves the same honest artifact twice: first with
the plain fault-pack ref.py (starts nothing), then with an edited ref.py (another file version:
imported again) that starts a lasting process at import (a user who switched reference() to a
multiprocessing/torch.compile pool between sweeps). Also: a third job, a different honest artifact."""
import os, sys, tempfile
from pathlib import Path
from common_pre import *
counted = sys.argv[1]
if counted == "namespace": no_cgroup()
from workers.device_actor import DeviceActor
from workers.records import RunJob
tmp = Path(tempfile.mkdtemp(prefix="rt52-"))
os.environ["KOPT_CACHE"] = str(tmp / "cache")
refdir = tmp / "r"; refdir.mkdir()
ref = refdir / "ref.py"; ref.write_text((PACK / "ref.py").read_text())
H = PACK / "faults.cpp"
art = Path(artifact(tmp, H, {"MODE": 0}))
art2 = Path(artifact(tmp / "b", H, {"MODE": 0, "X": 1}))
def rj(a, key):
    payload = job(str(a), H, ref, {"N": 4096}, ARGS)
    common = {k: v for k, v in payload.items() if k not in ("artifact", "dims", "job_key")}
    return RunJob(key, a.parent.name, {"N": 4096}, common)
actor = DeviceActor("cpu", spares=0)
try:
    o1 = actor.run(rj(art, "k1"), art.read_bytes())
    print(f"[{counted}] honest, plain ref.py: {o1.status} {o1.error[:200]!r}", flush=True)
    import time; time.sleep(1.1)
    ref.write_text((PACK / "ref.py").read_text() + WORKER_REF)  # edited in place
    o2 = actor.run(rj(art, "k2"), art.read_bytes())
    print(f"[{counted}] same honest artifact, ref.py edited to start a pool: {o2.status} {o2.error[:300]!r}", flush=True)
    o3 = actor.run(rj(art2, "k3"), art2.read_bytes())
    print(f"[{counted}] another honest artifact after: {o3.status} {o3.error[:300]!r} restarts={actor.stats()['restarts']}", flush=True)
finally:
    actor.shutdown()
