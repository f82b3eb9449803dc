# ruff: noqa
"""Do files candidate A writes in the harness's TMPDIR (scratch) and /dev/shm outlive a harness restart
in the same sandbox (seen by the next candidate's harness)?"""
import base64, os, sys, tempfile
from pathlib import Path
sys.path[:0] = ["/tmp/rt54b", "/tmp/rt54b/tests"]
tmp = Path(tempfile.mkdtemp(prefix="rt54b-p-")); os.environ["KOPT_CACHE"] = str(tmp / "cache")
from conftest import faults_running_python
from test_faults import artifact, job, PACK
from workers.sandbox import Sandbox
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}; DIMS = {"N": 1 << 12}
W = "import os\nfor d in (os.environ['TMPDIR'], '/dev/shm'):\n  open(os.path.join(d, 'rt54b_left'), 'w').write('A')\n"
R = ("import os\nopen('/proc/self/fd/2','w').write('RTSEEN ' + repr({d: os.listdir(d) for d in (os.environ['TMPDIR'], '/dev/shm')}) + chr(10))\n")
def mk(name, code):
    py = "import base64\nexec(base64.b64decode('%s').decode(), {})\n" % base64.b64encode(code.encode()).decode()
    src = faults_running_python(tmp / name, py)
    return job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", DIMS, ARGS)
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    print("A:", box.run_retrying(mk("w", W), 30)["status"])
    box.end(); print("restarts", box.restarts)
    print("B:", box.run_retrying(mk("r", R), 30)["status"])
    print([l for l in box.tail(0, 100000).splitlines() if "RTSEEN" in l])
finally:
    box.close()
