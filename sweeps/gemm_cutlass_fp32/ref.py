"""Reference for gemm_cutlass_fp32: C = A @ B, row-major float32, computed in float64."""
import torch


def inputs(seed: int, M: int, N: int, K: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"A": torch.randn(M, K, generator=g), "B": torch.randn(K, N, generator=g)}


def reference(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    return (A.double() @ B.double()).float()


def contender(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    # timed as the reference row (sweep.yaml reference_timing): cuBLAS's plain FP32 GEMM on
    # the GPU, TF32 off (torch's default, kept whatever the caller set), the target's yardstick
    keep = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return A @ B
    finally:
        torch.backends.cuda.matmul.allow_tf32 = keep
