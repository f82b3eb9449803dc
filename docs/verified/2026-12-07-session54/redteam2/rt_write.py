# ruff: noqa
"""What can candidate Python in the harness write that outlives the harness?"""
import base64, os, sys, tempfile, glob
from pathlib import Path
sys.path[:0] = ["/tmp/rt54b", "/tmp/rt54b/tests"]
tmp = Path(tempfile.mkdtemp(prefix="rt54b-w-")); os.environ["KOPT_CACHE"] = str(tmp / "cache")
from conftest import faults_running_python
from test_faults import artifact, job, PACK
from workers.sandbox import Sandbox
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}; DIMS = {"N": 1 << 12}
CODE = r'''
import os, sys, glob, tempfile, json
res = {}
cands = ["/tmp", "/dev/shm", os.path.expanduser("~"), os.getcwd(), tempfile.gettempdir(),
         os.environ.get("KOPT_CACHE", "/nonexistent"), "%s", "%s", "%s", "%s", "/tmp/rt54b/workers/__pycache__",
         "/tmp/rt54b/tests/fixtures/faultpack/__pycache__", "/var/tmp", "/root/.cache"]
for d in cands:
    try:
        p = os.path.join(d, "rt54b_probe_%%d" %% os.getpid())
        open(p, "w").write("x"); res[d] = "WROTE " + p
    except Exception as e:
        res[d] = repr(e)[:80]
res["env"] = {k: v for k, v in os.environ.items() if "KOPT" in k or k in ("HOME", "TMPDIR")}
res["cwd"] = os.getcwd()
res["argv"] = sys.argv
res["mods"] = [m for m in sys.modules if m.startswith("workers")][:80]
open("/proc/self/fd/2", "w").write("RTPROBE " + json.dumps(res) + "\n")
'''
art_dir = str(tmp / "cache")
CODE = CODE % (str(PACK), str(tmp), art_dir, "/tmp/rt54b/tests/fixtures/faultpack")
py = "import base64\nexec(base64.b64decode('%s').decode(), {})\n" % base64.b64encode(CODE.encode()).decode()
src = faults_running_python(tmp / "w", py)
aj = job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", DIMS, ARGS)
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    a = box.run_retrying(aj, 30)
    print("A:", a["status"], a.get("error"))
    print("log tail:", [l for l in box.tail(0, 200000).splitlines() if "RTPROBE" in l][:1] if hasattr(box, "tail") else "")
finally:
    box.close()
print("files left on host:", [p for p in glob.glob("/**/rt54b_probe_*", recursive=False)] + glob.glob("/tmp/rt54b*/**/rt54b_probe_*", recursive=True)+glob.glob("/tmp/rt54b_probe_*")+glob.glob("/dev/shm/rt54b_probe_*")+glob.glob("/root/rt54b_probe*")+glob.glob("/tmp/rt54b/tests/fixtures/faultpack/**/rt54b_probe*", recursive=True))
