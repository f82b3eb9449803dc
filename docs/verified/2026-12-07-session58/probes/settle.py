# ruff: noqa
# how long the sandbox's team check waits after an honest OpenMP job (workers.teams.strays)
import sys, time
sys.path.insert(0, "/tmp/rt58/redteam58"); sys.path.insert(0, "/tmp/rt58/tests")
sys.argv = ["x", "noop"]; import importlib.util as _u; _s = _u.spec_from_file_location("run58m", "/tmp/rt58/redteam58/run58.py"); run58 = _u.module_from_spec(_s); _src = open("/tmp/rt58/redteam58/run58.py").read().replace("\nmain()", "\n"); exec(compile(_src, "run58.py", "exec"), run58.__dict__)
from pathlib import Path
import tempfile
import workers.teams as teams
from workers.sandbox import Sandbox
orig = teams.strays
took = []
def timed(pid, waits, settle_s=teams.SETTLE_S):
    t = time.perf_counter(); r = orig(pid, waits, settle_s); took.append((time.perf_counter() - t) * 1e3); return r
teams.strays = timed
tmp = Path(tempfile.mkdtemp())
for omp in ("1", "2"):
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": omp})
    try:
        for kind in ("mode0", "omp", "omp", "vadd", "omp"):
            took.clear()
            r = sb.run_retrying(run58.later_job(tmp, kind), timeout_s=60)
            print(f"OMP_NUM_THREADS={omp} {kind:5s} {r['status']} median {r.get('median_ms'):.4g} ms, team workers {len(sb.team_known)}, check {', '.join(f'{x:.1f}' for x in took)} ms, restarts {sb.restarts}")
    finally:
        sb.close()
