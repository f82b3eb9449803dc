# ruff: noqa
"""Per attack mode: honest job (harness's first: ref.py's worker becomes infra), attacker job,
honest job, each followed by end_leftovers; prints status, leftovers, harness restarts, infra."""
import sys, tempfile
from pathlib import Path
from common import *
mode, counted = int(sys.argv[1]), sys.argv[2]
if counted == "namespace": no_cgroup()
tmp = Path(tempfile.mkdtemp(prefix="rt52-"))
ref = worker_ref(tmp)
H = PACK / "faults.cpp"; A = RT / "atk.cpp"
jobs = [("honest1", cjob(tmp, H, ref, "h1", {"MODE": 0})), (f"atk{mode}", cjob(tmp, A, ref, "a", {"ATK": mode})),
        ("honest2", cjob(tmp, H, ref, "h2", {"MODE": 0}))]
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    box.start()
    for label, j in jobs:
        pos = box.log.stat().st_size if box.log.exists() else 0
        r = box.run_retrying(j, 30)
        infra = sorted(box.infra); alive = {p: hold.alive(p) for p in infra}
        left = box.end_leftovers()
        print(f"[{counted}] {label}: status={r['status']} median_ms={r.get('median_ms')} err={str(r.get('error',''))[:200]!r} "
              f"held_against={left} restarts={box.restarts} infra_alive={alive}", flush=True)
    print(open(box.log, errors="replace").read()[-3000:] if box.log.exists() else "", flush=True)
finally:
    box.close()
