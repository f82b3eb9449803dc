"""The same sgemm config inside kopt's harness (check only) and by hand, in its order
(set 0 in buffers 0, then set 1 in fresh buffers 1).
Usage: python3 docs/verified/sgemm_set2_harness.py"""
import ctypes
import subprocess
import sys

import torch

sys.path.insert(0, "sweeps/sgemm")
from ref import inputs  # noqa: E402

from kopt.pipeline import job_base  # noqa: E402
from kopt.spec import load_sweep  # noqa: E402
from workers.harness import Harness  # noqa: E402

defs = "-DTILED=1 -DUSE_CP_ASYNC=1 -DSTAGES=2 -DBK=16 -DBX=16 -DBY=16"
so = "/tmp/sg_fail.so"
subprocess.run(f"nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -gencode=arch=compute_90,"
               f"code=sm_90 --pre-include workers/kopt_shim.h {defs} -o {so} "
               "sweeps/sgemm/sgemm.cu", shell=True, check=True)
lib = ctypes.CDLL(so)
bufs = []
for seed in (0, 1):
    t = inputs(seed, 4096, 4096, 4096)
    A, B = t["A"].cuda(), t["B"].cuda()
    C = torch.full((4096, 4096), float("nan"), device="cuda")
    bufs.append((A, B, C))
    lib.solve(ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()),
              ctypes.c_void_p(C.data_ptr()), 4096, 4096, 4096)
    torch.cuda.synchronize()
    ref = A.double() @ B.double()
    print(f"by hand seed {seed}: C[612][594] {float(C[612, 594]):.7f} fp64 "
          f"{float(ref[612, 594]):.7f}; A ptr % 256 = {A.data_ptr() % 256}", flush=True)
sw = load_sweep("sweeps/sgemm")
sp = sw.space("cuda")
h = Harness("cuda")
job = {**job_base(sw, sp), "artifact": so, "job_key": "x", "dims": sp.dims[0],
       "check_only": True}
print("harness check_only:", {k: v for k, v in h.run(job).items() if k != "samples_ms"})
d = next(iter(h.data.values()))
for k, s in enumerate(d.sets[:2]):
    b = d.bufs[k]
    same = {n: bool(torch.equal(b.inputs[n], s.inputs[n])) for n in s.inputs}
    print(f"set {k}: buffers hold the set's inputs {same}; C[612][594] "
          f"{float(b.outputs['C'][612, 594]):.7f} expected {float(s.expected['C'][612, 594]):.7f};"
          f" A[612][47] buf {float(b.inputs['A'][612, 47]):.6f} "
          f"set {float(s.inputs['A'][612, 47]):.6f} B[47][594] buf "
          f"{float(b.inputs['B'][47, 594]):.6f} set {float(s.inputs['B'][47, 594]):.6f}")
