# ruff: noqa
"""Selective profile hook: A (honest faults.cpp MODE 0 code + hook installed once from solve)
slows every later job in the harness but its own; then honest B. Through DeviceActor.run,
then the closing's outside clock on B."""
import base64, os, sys, tempfile
from pathlib import Path
sys.path[:0] = ["/tmp/rt54b", "/tmp/rt54b/tests"]
tmp = Path(tempfile.mkdtemp(prefix="rt54b-sel-")); os.environ["KOPT_CACHE"] = str(tmp / "cache")
from conftest import faults_running_python
from test_faults import artifact, job, PACK
from workers.device_actor import DeviceActor
from workers.records import RunJob
from kopt.core.clock import clock_suspect, outside_blocks
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}; DIMS = {"N": 1 << 16}
HOOK = """import gc, sys, time
h=[o for o in gc.get_objects() if type(o).__name__=='Harness'][0]
mine=list(h.libs)[-1]
def p(f,e,a):
  if e=='call' and f.f_code.co_name=='call':
    lib=f.f_locals.get('lib')
    if getattr(lib,'_name',None)!=mine: time.sleep(0.003)
sys.setprofile(p)
"""
py = "import base64\nexec(base64.b64decode('%s').decode(), {})\n" % base64.b64encode(HOOK.encode()).decode()
def rj(src, key):
    art = Path(artifact(tmp / key, src, {"MODE": 0}))
    j = job(str(art), src, PACK / "ref.py", DIMS, ARGS)
    common = {k: v for k, v in j.items() if k not in ("artifact", "dims", "job_key")}
    return RunJob(key, art.parent.name, DIMS, common), art.read_bytes()
hon, hon_b = rj(PACK / "faults.cpp", "honest")
evil, evil_b = rj(faults_running_python(tmp / "evilsrc", py), "evil")
a = DeviceActor("cpu", spares=0)
try:
    base = a.run(hon, hon_b); print("B honest, clean harness:", base.status, round(base.median_ms, 3))
    r = a.run(evil, evil_b); print("A (hook):", r.status, round(r.median_ms, 3), r.error)
    b = a.run(hon, hon_b); print("B honest after A:", b.status, round(b.median_ms, 3), b.error)
    r2 = a.run(evil, evil_b); print("A again:", r2.status, round(r2.median_ms, 3), r2.error)
    p = hon.payload()
    blocks, fault = outside_blocks(lambda n, lo, paced=False: a.clock(p, n, hon_b, lo, paced), b.median_ms, paced=True)
    print("outside clock of B vs its figure:", [round(x / n, 3) for x, n, _ in blocks], fault, "->", clock_suspect(b.median_ms, blocks) or "not suspect")
    print("stats:", a.stats())
finally:
    a.shutdown()
