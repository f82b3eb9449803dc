"""Outside kopt's harness: does sgemm.cu's FP32 cp.async path (no thread coarsening) get
C[612][594] wrong on seed 1 (issue 11's second input set)? Builds the configs with nvcc,
runs solve through ctypes on fresh torch tensors, compares with an fp64 matmul.
Usage (repo root, GPU host): python3 docs/verified/sgemm_set2_probe.py"""
import ctypes
import subprocess
import sys

import torch

sys.path.insert(0, "sweeps/sgemm")
from ref import inputs  # noqa: E402

PIPE = "-DTILED=1 -DUSE_CP_ASYNC=1 -DSTAGES=2 -DBK=16 "
CONFIGS = {
    "pipe BX16 BY16 (fails in kopt)": PIPE + "-DBX=16 -DBY=16",
    "pipe BX16 BY8 TM8 TN8 (passes)": PIPE + "-DBX=16 -DBY=8 -DTM=8 -DTN=8",
    "tiled BX16 BY16, no cp.async": "-DTILED=1 -DBK=16 -DBX=16 -DBY=16",
    "naive": "",
}
for seed in (0, 1):
    t = inputs(seed, 4096, 4096, 4096)
    A, B = t["A"].cuda(), t["B"].cuda()
    ref = (A.double() @ B.double())
    for name, defs in CONFIGS.items():
        so = f"/tmp/sg_{abs(hash(defs))}.so"
        subprocess.run(f"nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC "
                       f"-gencode=arch=compute_90,code=sm_90 {defs} -o {so} "
                       "sweeps/sgemm/sgemm.cu", shell=True, check=True)
        lib = ctypes.CDLL(so)
        C = torch.full((4096, 4096), float("nan"), device="cuda")
        lib.solve(ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()),
                  ctypes.c_void_p(C.data_ptr()), 4096, 4096, 4096)
        torch.cuda.synchronize()
        err = (C.double() - ref).abs()
        bad = (err > 1e-2 + 1e-3 * ref.abs()).nonzero().tolist()
        print(f"seed {seed} {name}: max err {float(err.max()):.3g}, out of tolerance {bad[:5]}"
              f"{' ...' if len(bad) > 5 else ''} ({len(bad)}); C[612][594] = "
              f"{float(C[612, 594]):.7f} (fp64 {float(ref[612, 594]):.7f})", flush=True)
