# ruff: noqa
import sys
sys.path.insert(0, "/work/main/tests")
from pathlib import Path
from test_faults import PACK, artifact, job
from workers import sandbox as S
import tempfile
tmp = Path(tempfile.mkdtemp())
R = Path("/tmp/redteam56")
sb = S.Sandbox("cpu", {"OMP_NUM_THREADS": sys.argv[1]})
def omp(n, nt):
    return job(artifact(tmp, Path("/tmp/probe57/omp_nt.cpp"), {"NT": nt}), Path("/tmp/probe57/omp_nt.cpp"), R/"omp_ref.py", {"N": n}, {"x": ["N"], "y": ["N"]})
def f(n):
    src = PACK/"faults.cpp"
    return job(artifact(tmp, src, {"MODE": 0}), src, PACK/"ref.py", {"N": n}, {"x": ["N"], "buf": ["N"], "y": ["N"]})
try:
    for name, j in [("f1k", f(1024)), ("nt2", omp(1<<16, 2)), ("nt1", omp(1<<16, 1)), ("nt2", omp(1<<16, 2)), ("f1k", f(1024)), ("nt2", omp(1<<16, 2))]:
        r = sb.run(j, timeout_s=120)
        print(name, r["status"], round(r.get("median_ms") or 0, 4), "restarts", sb.restarts, "threads", len(sb.threads()), (r.get("error") or "")[:90], flush=True)
finally:
    sb.close()
