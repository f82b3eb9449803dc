"""torch.matmul (cuBLAS) on the bf16 GEMM of sweeps/gemm_cutlass, timed as kopt's harness
times a candidate: the L2 flushed (a buffer of 2x the L2 zeroed) before every sample, CUDA
events around the call alone, median of 50 samples after a 25 ms warm-up. Prints one line,
``torch_matmul_bf16 M N K median_ms tflops``, and with a kopt winner's median (ms) the
winner's TFLOP/s and its speed relative to torch.matmul.
Usage: python3 h200_cutlass_matmul.py M N K [WINNER_MEDIAN_MS]"""
import statistics
import sys
import time

import torch

M, N, K = (int(x) for x in sys.argv[1:4])
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # as ref.py
g = torch.Generator().manual_seed(0)
A = torch.randn(M, K, generator=g).bfloat16().cuda()
B = torch.randn(K, N, generator=g).bfloat16().cuda()
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
print(f"torch_matmul_bf16 {M} {N} {K} median_ms {med:.4f} tflops {2 * M * N * K / med / 1e9:.1f}")
if len(sys.argv) > 4 and sys.argv[4].strip():
    win = float(sys.argv[4])
    print(f"kopt_winner median_ms {win:.4f} tflops {2 * M * N * K / win / 1e9:.1f} "
          f"speed_vs_torch_matmul {med / win:.3f}x (target >= 0.95)")
