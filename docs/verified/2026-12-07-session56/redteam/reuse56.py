# ruff: noqa
"""Ident reuse: ref.py (fp/ref_timer.py, honest) starts a one-off threading.Timer at import;
it is alive at the import's end, so its ident is allowlisted, then it ends. The attacker (same
task, same ref.py) starts a plain threading.Thread spinner (no gc tampering): glibc hands it the
Timer's cached stack, so the same ident. usage (from /tmp/rt56/tests): python ../redteam56/reuse56.py"""
import json, sys, tempfile, time
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE)); sys.path.insert(0, str(HERE.parent / "tests"))
sys.argv = ["x", "noop"]
import importlib.util
from test_faults import PACK, artifact, job
from workers.sandbox import Sandbox
spec = importlib.util.spec_from_file_location("r56", HERE / "run56.py")
src_text = (HERE / "run56.py").read_text().replace("\nmain()\n", "\n")
r56 = {"__file__": str(HERE / "run56.py")}; exec(compile(src_text, "run56", "exec"), r56)
REF = HERE / "fp" / "ref_timer.py"
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
PY = """
import threading, gc, sys
def _rt_spin():
    x = 0
    while True:
        x += 1
t = threading.Thread(target=_rt_spin, daemon=True); t.start()
h = [o for o in gc.get_objects() if type(o).__name__ == 'Harness'][0]
print('rt: spinner ident', t.ident, 'in known:', t.ident in h.ref_threads.known, file=sys.stderr, flush=True)
"""
tmp = Path(tempfile.mkdtemp(prefix="rt56-reuse-"))
src = PACK / "faults.cpp"
honest = lambda n=4096: job(artifact(tmp, src, {"MODE": 0}), src, REF, {"N": n}, ARGS)
asrc = r56["attacker_src"](tmp / "att", {"py": PY})
att = job(artifact(tmp, asrc, {"MODE": 0}), asrc, REF, {"N": 4096}, ARGS)
for label, first in (("without", honest()), ("with", att)):
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        rows = [("honest0", sb.run_retrying(honest(), timeout_s=60), sb.restarts)]
        time.sleep(0.6)  # the Timer ends
        rows.append(("first", sb.run_retrying(first, timeout_s=60), sb.restarts))
        for k in ("later", "later"):
            rows.append((k, sb.run_retrying(honest(), timeout_s=60), sb.restarts))
    finally:
        log = sb.log.read_text(errors="replace") if sb.log.exists() else ""
        sb.close()
    print("--", label, [l for l in log.splitlines() if "rt:" in l])
    for k, r, rs in rows:
        print(f"   {k:8s} restarts={rs}", json.dumps({x: r.get(x) for x in ("status", "median_ms", "error")})[:300])
