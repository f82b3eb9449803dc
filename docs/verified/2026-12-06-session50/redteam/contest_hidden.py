# ruff: noqa
# red-team review of 956b164 (session 50), as run then; its paths are /tmp/rt50 (a clone)
"""Contest in turns (workers.turns.run_in_turns, as tests/test_turns.py does) with NO cgroup
(cgroup.make -> None, as the test's 'namespace' mode): attacker (argv[1], defines from argv[2]
as JSON) first, honest fault-pack MODE 0 second. Prints the combined verdict, what
left_running saw, and the attacker's processes afterwards."""
import os, sys, json, time
sys.path.insert(0, "/tmp/rt50/tests")
from pathlib import Path
from workers import cgroup, hold, turns
cgroup.make = lambda: (None, "none (red-team: no cgroup)")
from workers.sandbox import Sandbox
from test_turns import contender, PACK, ROUNDS, in_turns
tmp = Path(sys.argv[3] if len(sys.argv) > 3 else "/tmp/rt50-work"); tmp.mkdir(exist_ok=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
src, defines = Path(sys.argv[1]), json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
a, _ = contender(tmp, src, defines, "attacker")
h, _ = contender(tmp, PACK / "faults.cpp", {"MODE": 0}, "honest")
seen = {}
real = Sandbox.left_running
def spy(self):
    pids = real(self)
    ns = self.pid_ns
    allns = [q for q in hold._pids() if hold._ns(q) == ns]
    seen.setdefault(self.host_pid, []).append({"left_running": pids, "pid_ns": ns,
        "all_in_ns": {q: (hold._fields(f"/proc/{q}/stat") or ["?"])[0] + "/threads=" + str(len(os.listdir(f"/proc/{q}/task"))) for q in allns if os.path.exists(f"/proc/{q}")}})
    return pids
Sandbox.left_running = spy
given = []
give = turns.Turns.give
turns.Turns.give = lambda self, i: (given.append(i), give(self, i))[1]
boxes = [Sandbox("cpu", {"OMP_NUM_THREADS": "1"}) for _ in range(2)]
t = time.time()
answers = in_turns(boxes, [a, h])
res = turns.combined([a, h], answers)
print("wall", round(time.time() - t, 1))
print("turns given", given)
print(json.dumps({k: v for k, v in res.items() if k not in ("results",)}, indent=1, default=str)[:2500])
for ans in answers:
    r = (ans.get("results") or [{}])
    print("answer", ans.get("status"), str(ans.get("error"))[:300])
for k, v in seen.items():
    print("left_running looks of harness", k, "first:", v[0], "last:", v[-1], "n:", len(v))
print("file-nr", open("/proc/sys/fs/file-nr").read().strip())
