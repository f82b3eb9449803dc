# ruff: noqa
# red-team review of 956b164 (session 50), as run then; its paths are /tmp/rt50 (a clone)
"""As tests/test_turns.py test_processes_a_job_left_running_end_with_its_harness, no cgroup:
honest job alone (baseline), then the attacker's job (argv[1], defines argv[2]) then
end_leftovers (as DeviceActor._through_shortage does) then the honest job in the same box."""
import os, sys, json, time
sys.path.insert(0, "/tmp/rt50/tests")
from pathlib import Path
from workers import cgroup, hold
cgroup.make = lambda: (None, "none (red-team: no cgroup)")
from workers.sandbox import Sandbox
from test_faults import artifact as built, job as pack_job, PACK
from test_turns import ARGS
tmp = Path("/tmp/rt50-work"); tmp.mkdir(exist_ok=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
src = Path(sys.argv[1]); defines = json.loads(sys.argv[2])
honest = PACK / "faults.cpp"
hj = pack_job(built(tmp, honest, {"MODE": 0}), honest, PACK / "ref.py", {"N": 4096}, ARGS)
aj = pack_job(built(tmp, src, defines), src, PACK / "ref.py", {"N": 4096}, ARGS)
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
def show(tag, r):
    print(tag, r.get("status"), "median_ms", r.get("median_ms"), "n", r.get("n_samples"), str(r.get("error"))[:200], flush=True)
try:
    box.start()
    show("honest alone #1:", box.run_retrying(hj, 30)); box.end_leftovers()
    show("honest alone #2:", box.run_retrying(hj, 30)); box.end_leftovers()
    first = box.host_pid
    show("attacker:", box.run_retrying(aj, 30))
    ns = box.pid_ns
    print("left_running after attacker:", box.left_running())
    print("in its namespace:", {q: hold._fields(f"/proc/{q}/stat")[0] for q in hold._pids() if hold._ns(q) == ns})
    ended = box.end_leftovers()
    print("end_leftovers ended the harness:", ended, "same harness:", box.host_pid == first)
    for i in range(2):
        show(f"honest after attacker #{i+1}:", box.run_retrying(hj, 30)); box.end_leftovers()
finally:
    box.close()
