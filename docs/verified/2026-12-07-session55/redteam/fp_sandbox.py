# ruff: noqa
"""False positives: honest faults MODE 0 (and MODE 4, another artifact) jobs, whose ref.py
uses torch.compile etc., several in one Sandbox: restarts and rows' errors.
usage: python fp_sandbox.py eager|inductor  (from /tmp/rt55/tests)"""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_faults import PACK, artifact, job
from workers.sandbox import Sandbox
HERE = Path(__file__).resolve().parent
ref = HERE / f"fp_ref_{sys.argv[1]}.py"
tmp = Path(tempfile.mkdtemp(prefix="rt55-fp-"))
src = PACK / "faults.cpp"
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1", **dict(a.split("=", 1) for a in sys.argv[2:])})
try:
    for mode, n in ((0, 4096), (0, 4096), (4, 4096), (0, 2048), (0, 4096)):
        r = sb.run(job(artifact(tmp, src, {"MODE": mode}), src, ref, {"N": n}, ARGS), timeout_s=120)
        print(f"MODE {mode} N={n} restarts={sb.restarts}",
              json.dumps({k: r.get(k) for k in ("status", "median_ms", "error")})[:300], flush=True)
finally:
    sb.close()
