# ruff: noqa
import sys, time
from pathlib import Path
sys.path.insert(0, "/tmp/rt52-pre/tests"); sys.path.insert(0, "/tmp/rt52-pre")
from test_faults import PACK, artifact, job
from workers.sandbox import Sandbox
from workers import hold, turns
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
RT = Path("/tmp/rt52-rt")
WORKER_REF = ("\nimport subprocess as _sp\nimport sys as _sys\n"
              "_WORKER = _sp.Popen([_sys.executable, '-c', 'import time; time.sleep(600)'])\n")
def worker_ref(tmp: Path, extra: str = WORKER_REF) -> Path:
    ref = tmp / "wref" / "ref.py"; ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text((PACK / "ref.py").read_text() + extra); return ref
def cjob(tmp, src, ref, key="k", defines=None, **kw):
    art = artifact(tmp / key, src, defines or {})
    return {**job(art, src, ref, {"N": 4096}, ARGS, job_key=key, **kw), "build_id": Path(art).parent.name}
def no_cgroup():
    from workers import cgroup
    cgroup.make = lambda: (None, "none (rt)")
