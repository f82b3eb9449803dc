"""Reference for gemm_cutlass_fp32: C = A @ B, row-major float32, computed in float64."""
import torch


def inputs(seed: int, M: int, N: int, K: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"A": torch.randn(M, K, generator=g), "B": torch.randn(K, N, generator=g)}


def reference(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    return (A.double() @ B.double()).float()
