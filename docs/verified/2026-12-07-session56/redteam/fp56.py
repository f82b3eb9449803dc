# ruff: noqa
"""False positives: honest faults MODE 0/4 jobs whose ref.py starts threads, several in one
Sandbox (run_retrying, like the device actor). usage: python ../redteam56/fp56.py REFNAME...
(REFNAME: a file redteam56/fp/ref_REFNAME.py; from /tmp/rt56/tests)"""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_faults import PACK, artifact, job
from workers.sandbox import Sandbox
HERE = Path(__file__).resolve().parent / "fp"
tmp = Path(tempfile.mkdtemp(prefix="rt56-fp-"))
src = PACK / "faults.cpp"
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
for name in sys.argv[1:]:
    ref = HERE / f"ref_{name}.py"
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        for mode, n, tr in ((0, 4096, 0), (0, 4096, 0), (4, 4096, 0), (0, 2048, 0), (0, 4096, 1), (4, 8192, 0), (0, 4096, 0)):
            j = job(artifact(tmp, src, {"MODE": mode}), src, ref, {"N": n}, ARGS)
            if tr: j["time_reference"] = True
            r = sb.run_retrying(j, timeout_s=120)
            print(f"{name:12s} MODE {mode} N={n}{' timeref' if tr else ''} restarts={sb.restarts}",
                  json.dumps({k: r.get(k) for k in ("status", "median_ms", "error")})[:300], flush=True)
    finally:
        sb.close()
