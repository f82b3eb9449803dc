# ruff: noqa
"""A1 in a contest: contender 'attacker' (hijack.cpp) turns its sandbox's ref.py process
into a spinner; rival honest. Before the change both would be `escaped` (ref.py's process);
the control: leaver.cpp (a process of its own) must still be `escaped`."""
import sys, tempfile
from pathlib import Path
from common import *
if len(sys.argv) > 1 and sys.argv[1] == "ns": no_cgroup()
tmp = Path(tempfile.mkdtemp(prefix="rt-"))
ref = worker_ref(tmp)
seen = {}
real = Sandbox.left_running
def spy(self):
    pids = real(self); seen.setdefault(id(self), []).append(pids); return pids
Sandbox.left_running = spy
for label, src, d in [("hijack", RT / "hijack.cpp", {}), ("control leaver", PACK / "leaver.cpp", {"LEADER_EXITS": 0})]:
    jobs = [cjob(tmp, src, ref, "attacker", d), cjob(tmp, PACK / "faults.cpp", ref, "honest", {"MODE": 0})]
    boxes = [Sandbox("cpu", {"OMP_NUM_THREADS": "1"}) for _ in range(2)]
    cpu = {}
    try:
        answers = turns.run_in_turns(boxes, [{**j, "contest": [j], "rounds": 15, "turns": True} for j in jobs], 60)
        for b in boxes:
            print("   log:", [l for l in b.tail(0, 4000).splitlines() if "HIJACK" in l])
            cpu[b.host_pid] = {p: open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] for p in b.infra if hold.alive(p)}
    finally:
        for b in boxes: b.close()
    res = turns.combined(jobs, answers)
    print(f"{label}: status={res['status']} failed={res.get('failed')} failed_status={res.get('failed_status')} err={str(res.get('error',''))[:200]!r}")
    print("   per contender:", [(a.get('status'), a.get('median_ms')) for a in answers], "infra states at end:", cpu)
