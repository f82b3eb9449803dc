# ruff: noqa
"""A1 harm, device-actor style (run_retrying then end_leftovers per job), the sandbox on one
core (taskset -c 0): an honest rival's figures before and after the hijacker's job."""
import tempfile
from pathlib import Path
from common import *
tmp = Path(tempfile.mkdtemp(prefix="rt-"))
ref = worker_ref(tmp)
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
def show(label, r): print(f"{label}: {r['status']} median_ms={r.get('median_ms')} outside_ms={r.get('outside_ms')} harness_ended={box.end_leftovers()}")
try:
    box.start(); first = box.host_pid
    hj = cjob(tmp, PACK / "faults.cpp", ref, "honest", {"MODE": 0})
    hc = {**hj, "clock_calls": 50}
    for i in range(2): show("honest before", box.run_retrying(hj, 30)); show("honest clock before", box.run_retrying(hc, 30))
    show("hijacker", box.run_retrying(cjob(tmp, RT / "hijack.cpp", ref, "attacker"), 30))
    for i in range(2): show("honest after", box.run_retrying(hj, 30)); show("honest clock after", box.run_retrying(hc, 30))
    print("same harness throughout:", box.host_pid == first)
finally:
    box.close()
