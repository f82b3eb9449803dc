# ruff: noqa
"""Rebind workers.timing.quantile (a function the harness's summarize calls through
workers.timing's globals, not harness's) from a candidate's solve via Python's C API."""
import sys; sys.path.insert(0, "/work/main/tests")
import tempfile
from pathlib import Path
from test_faults import PACK, artifact, job
from test_turns import ARGS
from workers.sandbox import Sandbox
PATCH = r'''
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char*);
static void patch_q() {
  static bool done = false;
  if (done) return;
  done = true;
  int g = PyGILState_Ensure();
  PyRun_SimpleString("import workers.timing as _t\n_q = _t.quantile\n"
                     "_t.quantile = lambda xs, q: _q(xs, q) / 100\n");
  PyGILState_Release(g);
}
'''
head = 'extern "C" void solve(const float* x, float* buf, float* y, int N) {'
tmp = Path(tempfile.mkdtemp())
src = tmp / "q" / "faults.cpp"; src.parent.mkdir()
src.write_text((PACK / "faults.cpp").read_text().replace(head, PATCH + head + "\n  patch_q();"))
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    honest = box.run_retrying(job(artifact(tmp, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp", PACK / "ref.py", {"N": 65536}, ARGS), 30)
    att = box.run_retrying(job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 65536}, ARGS), 30)
    after = box.run_retrying(job(artifact(tmp, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp", PACK / "ref.py", {"N": 65536}, ARGS), 30)
finally:
    box.close()
for name, r in (("honest", honest), ("attacker", att), ("honest after", after)):
    print(name, r["status"], r.get("median_ms"), (r.get("error") or "")[:200])
