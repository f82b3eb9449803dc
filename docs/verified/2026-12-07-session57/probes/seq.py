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
sb = S.Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    for i in range(4):
        r = sb.run(f(1024), timeout_s=120)
        at = set(r.get("unseen_at") or [])
        print(r["status"], " ".join(("*" if j in at else "") + f"{x*1000:.0f}" for j, x in enumerate(r.get("calls_ms") or [])))
        sb.end()
finally:
    sb.close()
