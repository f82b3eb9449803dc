# ruff: noqa
import sys
sys.path.insert(0, "/work/main/tests")
from pathlib import Path
from test_faults import PACK, artifact, job
from workers import sandbox as S
import tempfile
tmp = Path(tempfile.mkdtemp())
def f(n):
    src = PACK/"faults.cpp"
    return job(artifact(tmp, src, {"MODE": 0}), src, PACK/"ref.py", {"N": n}, {"x": ["N"], "buf": ["N"], "y": ["N"]})
out = []
sb = S.Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    for i in range(8):
        r = sb.run(f(1024), timeout_s=120)
        out.append(r["status"][:3] + f"{r.get('median_ms') or 0:.4f}")
        sb.end()
finally:
    sb.close()
print(sys.argv[1], out)
