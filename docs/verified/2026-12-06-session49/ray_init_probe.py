"""Where an embedded ``ray.init`` spends its time on this host: one start per arm, the wall
of ``ray.init`` and of the first task, and the node's own log lines (GCS up, raylet started,
node registered, driver connected, job registered) as seconds after ``ray.init`` was called.

Arms: ``plain`` (kopt's arguments: no dashboard, ERROR logging, no log_to_driver) and
``noapi`` (the same with Ray's API-server process not started: ``Node.start_api_server``
replaced by a no-op, a probe of that process's share only, not something kopt does).
Usage: python ray_init_probe.py [plain|noapi] ...
"""
import glob
import os
import re
import sys
import time
from datetime import datetime

import ray

MARKS = [("gcs_server.out", "GCS storage type", "gcs up"),
         ("raylet.out", r"main.cc:\d+: Setting cluster ID", "raylet exec"),
         ("raylet.out", "Monitor agent process with name dashboard_agent", "agents started"),
         ("raylet.out", "Metrics agent not available|Raylet of id", "raylet ready"),
         ("gcs_server.out", "Registering new node", "node registered"),
         ("python-core-driver-*", "Constructing CoreWorkerProcess", "driver core worker"),
         ("gcs_server.out", "Registering job", "job registered"),
         ("raylet.out", "Started worker process", "first worker started")]


def stamp(line: str) -> float | None:
    m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None


def arm(name: str) -> None:
    if name == "noapi":
        from ray._private import node
        node.Node.start_api_server = lambda self, **kw: None
    t0 = time.time()
    ray.init(address="local", include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    t1 = time.time()
    ray.get(ray.remote(lambda: 1).remote())
    t2 = time.time()
    logs = ray._private.worker._global_node.get_logs_dir_path()
    ray.shutdown()
    print(f"{name}: ray.init {t1 - t0:.2f} s, first task {t2 - t1:.2f} s (pid {os.getpid()})")
    for pattern, text, label in MARKS:
        for f in sorted(glob.glob(os.path.join(logs, pattern))):
            for line in open(f, errors="replace"):
                if re.search(text, line) and (s := stamp(line)):
                    print(f"   {label:22} {s - t0:6.2f} s")
                    break
            else:
                continue
            break


if __name__ == "__main__":
    import subprocess
    if len(sys.argv) == 2 and sys.argv[1].startswith("-"):
        arm(sys.argv[1][1:])
    else:
        for a in sys.argv[1:] or ["plain", "noapi", "plain", "noapi"]:
            subprocess.run([sys.executable, __file__, "-" + a], check=False)
