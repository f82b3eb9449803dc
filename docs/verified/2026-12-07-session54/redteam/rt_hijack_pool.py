# ruff: noqa
"""Attack: a candidate takes over ref.py's multiprocessing pool worker (infra) through the
pool's task pipe; the worker outlives the job and slows the next (honest) candidate's job in
the same harness; nothing ends it."""
import sys, time, shutil
from pathlib import Path
sys.path[:0] = ["/tmp/rt54", "/tmp/rt54/tests"]
from test_faults import artifact, job, PACK
from test_turns import worker_ref, POOL_REF, ARGS
from workers.sandbox import Sandbox
from workers import hold

tmp = Path("/tmp/rt54/rt/work"); shutil.rmtree(tmp, ignore_errors=True); tmp.mkdir(parents=True)
ref = worker_ref(tmp, POOL_REF)
N = {"N": 1 << 18}
honest_art = artifact(tmp, PACK / "faults.cpp", {"MODE": 0})
evil_src = Path("/tmp/rt54/rt/hijack.cpp")
evil_art = artifact(tmp, evil_src, {})
hj = lambda: job(honest_art, PACK / "faults.cpp", ref, N, ARGS, job_key="honest")
ej = lambda: job(evil_art, evil_src, ref, N, ARGS, job_key="evil")

def cpu(p):
    f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])

# baseline: honest job alone in a box of its own, twice
base = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    b = [base.run_retrying(hj(), 60) for _ in range(2)]
finally:
    base.close()
print("baseline honest:", [(r["status"], round(r.get("median_ms", 0), 3)) for r in b])

box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    e = box.run_retrying(ej(), 60)
    print("evil:", e["status"], round(e.get("median_ms", 0), 3), (e.get("error") or "")[:300])
    pid0, r0 = box.host_pid, box.restarts
    left, strays = box.end_leftovers(), box.end_strays()
    print("after evil: end_leftovers ->", left, "end_strays ->", strays,
          "harness kept:", box.host_pid == pid0, "restarts", box.restarts - r0)
    print("infra:", sorted(box.infra), "states:", {p: hold.state(p) for p in box.infra})
    c0 = {p: cpu(p) for p in box.infra}
    time.sleep(1.0)
    print("infra CPU ticks in 1 s idle:", {p: cpu(p) - c0[p] for p in box.infra})
    h = [box.run_retrying(hj(), 60) for _ in range(2)]
    print("honest after evil, same harness:", [(r["status"], round(r.get("median_ms", 0), 3),
          (r.get("error") or "")[:200]) for r in h])
    print("end_leftovers ->", box.end_leftovers(), "harness kept:", box.host_pid == pid0)
finally:
    box.close()
