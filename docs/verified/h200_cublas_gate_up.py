"""cuBLAS's share of sweeps/gate_up_prefill's contender on one GPU: per prefill size, the two
bf16 torch.matmul calls alone and the whole contender (two matmuls, F.silu, a multiply), each
timed as kopt's harness times a call (CUDA events around it, L2 flushed before every sample by
writing a 2x-L2 buffer; median of 50 samples, ms). Prints one line per size.
    python docs/verified/h200_cublas_gate_up.py"""
import statistics

import torch
import torch.nn.functional as F


def median_ms(fn, flush: torch.Tensor, n: int = 50) -> float:
    for _ in range(3):
        fn()
    xs = []
    for _ in range(n):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        xs.append(s.elapsed_time(e))
    return statistics.median(xs)


def main() -> None:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
    N, K = 11008, 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    Wg = 0.02 * torch.randn(N, K, device="cuda", generator=g).bfloat16()
    Wu = 0.02 * torch.randn(N, K, device="cuda", generator=g).bfloat16()
    for M in (512, 2048):
        x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        mm = median_ms(lambda x=x: (torch.matmul(x, Wg.T), torch.matmul(x, Wu.T)), flush)
        full = median_ms(lambda x=x: F.silu(torch.matmul(x, Wg.T)) * torch.matmul(x, Wu.T),
                         flush)
        tflops = 4 * M * N * K / (mm * 1e-3) / 1e12
        print(f"M {M}: two matmuls {mm:.4f} ms ({tflops:.0f} TFLOP/s), contender {full:.4f} ms")


if __name__ == "__main__":
    main()
