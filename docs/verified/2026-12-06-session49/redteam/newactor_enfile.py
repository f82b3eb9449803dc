# ruff: noqa -- the red-team helper's script as it ran (paths under /tmp/rt49), kept as evidence
"""Device 1 runs enfile.cpp's own job (its load holds every file of the host for ~12 s);
meanwhile a fresh process starts a CPU DeviceActor, as the driver's replacement of a dead
device actor (kopt.run.runner RayRunner.replace) or any device actor started late does:
what isolation does its harness get, and what do its rows record?"""
import os, sys, time, threading, subprocess
sys.path.insert(0, "/tmp/rt49/kopt"); sys.path.insert(0, "/tmp/rt49/kopt/tests")
os.chdir("/tmp/rt49/kopt")
from pathlib import Path
from test_turns import contender
from workers.sandbox import Sandbox
tmp = Path("/tmp/rt49/work"); tmp.mkdir(exist_ok=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
a, _ = contender(tmp, Path("/tmp/rt49/cand/enfile.cpp"), {"HOLD_S": 120, "WAIT_S": 12}, "attacker")
NEW = r'''
import sys; sys.path.insert(0, "/tmp/rt49/kopt")
from workers.device_actor import DeviceActor
from workers import sandbox as sbmod
d = DeviceActor("cpu")
print("new actor: isolation", d.sandbox.info.get("isolation"), "| why:", d.sandbox.info.get("isolation_why"), "| limits:", d.sandbox.limits, "| worked:", sbmod._SANDBOX_WORKED)
print("new actor: harness uid-0 caps (CapEff):", [l.split()[1] for l in open(f"/proc/{d.sandbox.host_pid}/status") if l.startswith("CapEff")])
d.shutdown()
'''
d1 = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
out = {}
try:
    d1.start()
    th = threading.Thread(target=lambda: out.setdefault("a", d1.run(a, 30))); th.start()
    while int(open("/proc/sys/fs/file-nr").read().split()[0]) < 2_460_000 and th.is_alive():
        time.sleep(0.05)
    print("file-nr", open("/proc/sys/fs/file-nr").read().strip())
    p = subprocess.run([sys.executable, "-c", NEW], capture_output=True, text=True, timeout=300,
                       cwd="/tmp/rt49/kopt")
    print(p.stdout[-2000:], p.stderr[-1500:])
    th.join()
    print("attacker's job:", out["a"]["status"])
finally:
    d1.close()
print("file-nr after", open("/proc/sys/fs/file-nr").read().strip())
