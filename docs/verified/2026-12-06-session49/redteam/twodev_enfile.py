# ruff: noqa -- the red-team helper's script as it ran (paths under /tmp/rt49), kept as evidence
"""Two devices of one host (as two device actors, each a Sandbox whose harness has run in
its sandbox): device 1 runs enfile.cpp's own job; while its children hold every file of
the host, device 2 runs an honest candidate's job with run_retrying, as DeviceActor.run
does (device 2's harness had run another honest job before)."""
import os, sys, time, threading
sys.path.insert(0, "/tmp/rt49/kopt"); sys.path.insert(0, "/tmp/rt49/kopt/tests")
os.chdir("/tmp/rt49/kopt")
from pathlib import Path
from test_turns import contender, PACK
from workers.sandbox import Sandbox
tmp = Path("/tmp/rt49/work"); tmp.mkdir(exist_ok=True)
os.environ["KOPT_CACHE"] = str(tmp / "cache")
a, _ = contender(tmp, Path("/tmp/rt49/cand/enfile.cpp"), {"HOLD_S": 120, "WAIT_S": 12}, "attacker")
h0, _ = contender(tmp, PACK / "faults.cpp", {"MODE": 0}, "honest-earlier")
b, _ = contender(tmp, PACK / "faults.cpp", {"MODE": 0, "VICTIM": 1}, "honest-victim")
d1, d2 = Sandbox("cpu", {"OMP_NUM_THREADS": "1"}), Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
out = {}
try:
    d1.start(); d2.start()
    print("earlier honest job on device 2:", d2.run_retrying(h0, 30)["status"])
    th = threading.Thread(target=lambda: out.setdefault("a", d1.run(a, 30)))
    th.start()
    while int(open("/proc/sys/fs/file-nr").read().split()[0]) < 2_460_000 and th.is_alive():
        time.sleep(0.05)
    print("file-nr when the victim's job starts", open("/proc/sys/fs/file-nr").read().strip())
    try:  # workers.device_actor.DeviceActor.run's wrapper
        rb = d2.run_retrying(b, 30)
    except Exception as e:
        rb = {"status": "error", "error": f"device actor: {e!r}"}
    th.join()
    print("attacker (device 1):", out["a"]["status"])
    print("victim (device 2):", rb["status"], "|", (rb.get("error") or "")[:700])
    print("device 2 isolation", d2.isolation.kind, "running", d2.running, "restarts", d2.restarts, {k: rb.get(k) for k in ("wall_s","n_samples","median_ms")}); print(d2.tail()[-800:])
finally:
    d1.close(); d2.close()
print("file-nr after", open("/proc/sys/fs/file-nr").read().strip())
