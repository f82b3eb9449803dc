# ruff: noqa
import sys
sys.path.insert(0, "/work/main/tests")
from pathlib import Path
from test_faults import PACK, artifact, job
from workers import sandbox as S
import tempfile
tmp = Path(tempfile.mkdtemp())
R = Path("/tmp/redteam56")
orig = S.Sandbox._threads_left
def names(sb, tids):
    out = []
    for t in sorted(tids):
        try: out.append(Path(f"/proc/{sb.host_pid}/task/{t}/comm").read_text().strip())
        except OSError: out.append("?")
    return out
def tl(self, res):
    print("   known", names(self, self.threads_known or ()), "now", names(self, self.threads()), flush=True)
    return orig(self, res)
S.Sandbox._threads_left = tl
sb = S.Sandbox("cpu", {"OMP_NUM_THREADS": sys.argv[1]})
def omp(n):
    return job(artifact(tmp, R/"omp.cpp", {}), R/"omp.cpp", R/"omp_ref.py", {"N": n}, {"x": ["N"], "y": ["N"]})
def f(n):
    src = PACK/"faults.cpp"
    return job(artifact(tmp, src, {"MODE": 0}), src, PACK/"ref.py", {"N": n}, {"x": ["N"], "buf": ["N"], "y": ["N"]})
try:
    for name, j in [("f1k", f(1024)), ("f4M", f(1 << 22)), ("f1k", f(1024)), ("omp64k", omp(1 << 16)), ("omp4M", omp(1 << 22)), ("f1k", f(1024))]:
        r = sb.run(j, timeout_s=120)
        print(name, r["status"], round(r.get("median_ms") or 0, 4), sb.restarts, (r.get("error") or "")[:100], flush=True)
finally:
    sb.close()
