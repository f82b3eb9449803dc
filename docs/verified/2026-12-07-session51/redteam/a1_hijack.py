# ruff: noqa
"""A1: a candidate that leaves no process of its own but makes ref.py's lasting process
(infra since the harness's first "prepared") spin: end_leftovers keeps the harness; the
next honest job runs beside the spinner."""
import sys, tempfile, time
from pathlib import Path
from common import *
mode = sys.argv[1] if len(sys.argv) > 1 else "cgroup"
if mode == "ns": no_cgroup()
tmp = Path(tempfile.mkdtemp(prefix="rt-"))
ref = worker_ref(tmp)
def cpu_s(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / 100
    except OSError: return None
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    box.start(); first = box.host_pid
    pos = box.log.stat().st_size
    hj = cjob(tmp, PACK / "faults.cpp", ref, "honest", {"MODE": 0})
    r0 = box.run_retrying(hj, 30); e0 = box.end_leftovers()
    print("honest before:", r0["status"], "median_ms", r0.get("median_ms"), "ended:", e0)
    workers = box.infra - {first}
    print("infra:", sorted(box.infra), "cpu(s) of infra:", {p: cpu_s(p) for p in workers})
    ra = box.run_retrying(cjob(tmp, RT / "hijack.cpp", ref, "attacker"), 30)
    ended = box.end_leftovers()
    print("attacker:", ra["status"], ra.get("error", "")[:200], "| end_leftovers ended harness:", ended,
          "| same harness:", box.host_pid == first, "| left_running:", box.left_running())
    time.sleep(2)
    print("cpu(s) of infra 2 s later:", {p: cpu_s(p) for p in workers})
    r1 = box.run_retrying(hj, 30); e1 = box.end_leftovers()
    print("honest after:", r1["status"], "median_ms", r1.get("median_ms"), "ended:", e1)
    print("cpu(s) of infra at end:", {p: cpu_s(p) for p in workers}, "wall_s", r1.get("wall_s"))
    for p in workers:
        try: print(p, open(f"/proc/{p}/stat").read().rsplit(")",1)[1].split()[0])
        except OSError as e: print(p, e)
    time.sleep(2); print("cpu 2 s after honest:", {p: cpu_s(p) for p in workers})
    for i in range(3):
        r = box.run_retrying(hj, 30); print("honest again:", r["status"], r.get("median_ms"), "ended:", box.end_leftovers(), "cpu", {p: cpu_s(p) for p in workers})
    print(box.tail(pos, 3000))
finally:
    box.close()
