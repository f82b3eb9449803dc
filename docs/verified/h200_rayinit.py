"""Issue 14 on one H200: what an embedded ``ray.init`` (as kopt.pipeline.ensure_ray starts it)
and the first task after it take, with Ray's defaults and with settings a sweep's driver
could use: a small object store (``object_store_memory``; the default is 30 % of the
host's memory), no worker processes started ahead for the first driver
(``RAY_prestart_worker_first_driver=0``), and both. Each variant in a fresh process, three
times, interleaved. Run from the repo root on the GPU host (docs/verified/h200_rayinit.sh).
"""
import json
import os
import subprocess
import sys

CHILD = r'''
import json, os, sys, time
t0 = time.time()
import ray
t1 = time.time()
kw = json.loads(sys.argv[1])
ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False,
         **kw)
t2 = time.time()

@ray.remote(num_cpus=1)
def f():
    return 1

ray.get(f.remote())
t3 = time.time()
from kopt.raystop import leave_ray
leave_ray()
print(json.dumps({"import_s": round(t1 - t0, 2), "init_s": round(t2 - t1, 2),
                  "first_task_s": round(t3 - t2, 2)}))
'''

VARIANTS = {
    "default": ({}, {}),
    "store_2g": ({"object_store_memory": 2 << 30}, {}),
    "no_prestart": ({}, {"RAY_prestart_worker_first_driver": "0"}),
    "both": ({"object_store_memory": 2 << 30}, {"RAY_prestart_worker_first_driver": "0"}),
}


def main() -> None:
    for rep in range(3):
        for name, (kw, env) in VARIANTS.items():
            p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(kw)], text=True,
                               capture_output=True, env={**os.environ, **env}, timeout=120)
            last = (p.stdout.strip().splitlines() or [p.stderr[-300:]])[-1]
            print(f"{name} rep {rep}: {last}", flush=True)


if __name__ == "__main__":
    main()
