"""Reference for gemm_cutlass: C = A @ B in bf16 with fp32 accumulation (cuBLAS through
torch.matmul on the GPU), the result rounded once to bf16 as CUTLASS's epilogue does."""
import torch


def inputs(seed: int, M: int, N: int, K: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"A": torch.randn(M, K, generator=g).bfloat16(),
            "B": torch.randn(K, N, generator=g).bfloat16()}


def reference(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    # cuBLAS may otherwise reduce split-K partial sums in bf16 (torch's default allows it):
    # keep its accumulation in fp32, like the kernel's
    keep = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    try:
        return torch.matmul(A, B)
    finally:
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = keep
