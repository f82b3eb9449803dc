"""torch.matmul (cuBLAS) on the GEMM of sweeps/gemm_cutlass (bf16) or gemm_cutlass_fp32 (fp32,
TF32 off: cuBLAS's plain FP32 path, what issue 17's table measured), timed as kopt's harness
times a candidate: the L2 flushed (a buffer of 2x the L2 zeroed) before every sample, CUDA
events around the call alone, median of 50 samples after a 25 ms warm-up. Prints one line,
``torch_matmul_DTYPE M N K median_ms tflops``, and with a kopt winner's median (ms) the
winner's TFLOP/s and its speed relative to torch.matmul.
Usage: python3 h200_cutlass_matmul.py M N K [WINNER_MEDIAN_MS [bf16|fp32]]"""
import statistics
import sys
import time

import torch

M, N, K = (int(x) for x in sys.argv[1:4])
dtype = sys.argv[5] if len(sys.argv) > 5 else "bf16"
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # as ref.py
torch.backends.cuda.matmul.allow_tf32 = False  # fp32: the plain FP32 path
g = torch.Generator().manual_seed(0)
A = torch.randn(M, K, generator=g)
B = torch.randn(K, N, generator=g)
A, B = (A.bfloat16().cuda(), B.bfloat16().cuda()) if dtype == "bf16" else (A.cuda(), B.cuda())
flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.int8,
                    device="cuda")
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.025:
    torch.matmul(A, B)
    torch.cuda.synchronize()
ms = []
for _ in range(50):
    flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.matmul(A, B)
    end.record()
    end.synchronize()
    ms.append(start.elapsed_time(end))
med = statistics.median(ms)
tflops = 2 * M * N * K / med / 1e9
print(f"torch_matmul_{dtype} {M} {N} {K} median_ms {med:.4f} tflops {tflops:.1f}")
try:
    win = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
except ValueError:  # no correct candidate: kopt query printed no number
    win = 0.0
if win > 0:
    print(f"kopt_winner median_ms {win:.4f} tflops {2 * M * N * K / win / 1e9:.1f} "
          f"speed_vs_torch_matmul {med / win:.3f}x (issue 17's target: "
          f"{'>= 0.95x' if dtype == 'bf16' else '>= 3x'})")
