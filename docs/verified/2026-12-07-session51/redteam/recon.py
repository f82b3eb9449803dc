# ruff: noqa
import sys, tempfile
from pathlib import Path
from common import *
if len(sys.argv) > 1 and sys.argv[1] == "ns": no_cgroup()
tmp = Path(tempfile.mkdtemp(prefix="rt-"))
ref = worker_ref(tmp)
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
try:
    box.start(); print("host_pid", box.host_pid, "infra0", box.infra, "counted", box.counted, "pid_ns", box.pid_ns, "iso", box.isolation.kind, box.limits)
    pos = box.log.stat().st_size
    r = box.run_retrying(cjob(tmp, RT / "recon.cpp", ref), 30)
    print("status", r["status"], "infra", box.infra, "left", box.left_running())
    print(box.tail(pos, 6000))
finally:
    box.close()
