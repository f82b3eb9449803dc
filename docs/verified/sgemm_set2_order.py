"""Does a candidate run earlier in the same harness change the check of sgemm's cp.async
family without thread coarsening on input set 2? One harness, candidates in this order, each
checked on both sets. Usage: python3 docs/verified/sgemm_set2_order.py"""
import subprocess

from kopt.pipeline import job_base
from kopt.spec import load_sweep
from workers.harness import Harness

PIPE = "-DTILED=1 -DUSE_CP_ASYNC=1 -DSTAGES=2 -DBK=16 -DBX=16 -DBY=16"
ORDER = [("pipe TM1 first", PIPE), ("naive", ""), ("pipe TM8", PIPE + " -DTM=8 -DTN=8"),
         ("bf16x3", PIPE + " -DMP=1 -DTM=8 -DTN=8 -DMIN_BLOCKS=2"),
         ("pipe TM1 again (new build)", PIPE + " -DMIN_BLOCKS=4"),
         ("pipe BK32 BX32 BY8 TM1", "-DTILED=1 -DUSE_CP_ASYNC=1 -DSTAGES=3 -DBK=32 -DBX=32 "
          "-DBY=8")]
sw = load_sweep("sweeps/sgemm")
sp = sw.space("cuda")
h = Harness("cuda")
for i, (name, defs) in enumerate(ORDER):
    so = f"/tmp/sg_order_{i}.so"
    subprocess.run(f"nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90,"
                   f"code=sm_90 --pre-include workers/kopt_shim.h {defs} -o {so} "
                   "sweeps/sgemm/sgemm.cu", shell=True, check=True)
    job = {**job_base(sw, sp), "artifact": so, "job_key": name, "dims": sp.dims[0]}
    r = h.run(job)
    print(f"{name}: {r['status']} median {r.get('median_ms')} {(r.get('error') or '')[:200]}",
          flush=True)
