# ruff: noqa
"""ref.py with a multiprocessing Pool (started at import, used by reference()): honest1,
attacker (ATK 6 stop / 7 kill the pool worker), honest2 on new sizes (reference() runs again)."""
import sys, tempfile
from pathlib import Path
from common_pre import *
mode, counted = int(sys.argv[1]), sys.argv[2]
if counted == "namespace": no_cgroup()
tmp = Path(tempfile.mkdtemp(prefix="rt52-"))
POOL = ("\nimport multiprocessing as _mp\n_POOL = _mp.get_context('fork').Pool(1)\n_ref0 = reference\n"
        "def reference(x, buf, N):\n    assert _POOL.apply(int, (7,)) == 7\n    return _ref0(x, buf, N)\n")
ref = worker_ref(tmp, POOL)
H = PACK / "faults.cpp"; A = Path("/tmp/rt52-rt/atk.cpp")
def j(src, key, d, n): 
    jj = cjob(tmp, src, ref, key, d); jj["dims"] = {"N": n}; return jj
jobs = [("honest1", j(H, "h1", {"MODE": 0}, 4096)), (f"atk{mode}", j(A, "a", {"ATK": mode}, 4096)),
        ("honest2", j(H, "h2", {"MODE": 0}, 2048))]
import workers.sandbox as _ws
import inspect
PT = float(sys.argv[3]) if len(sys.argv) > 3 else 600.0
_orig = Sandbox.run
Sandbox.run = lambda self, job, t, prepare_timeout_s=PT, **kw: _orig(self, job, t, prepare_timeout_s, **kw)
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    box.start()
    for label, jb in jobs:
        r = box.run_retrying(jb, 20)
        infra = sorted(box.infra); alive = {p: hold.alive(p) for p in infra}
        left = box.end_leftovers()
        print(f"[{counted}] {label}: status={r['status']} median_ms={r.get('median_ms')} err={str(r.get('error',''))[:300]!r} "
              f"held_against={left} restarts={box.restarts} infra_alive={alive}", flush=True)
    print(open(box.log, errors="replace").read()[-1500:] if box.log.exists() else "", flush=True)
finally:
    box.close()
