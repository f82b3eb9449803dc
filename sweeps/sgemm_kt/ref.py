"""Reference for sgemm_kt (same problem as sweeps/sgemm): C = A @ B, row-major float32, computed
in float64."""
import torch


def inputs(seed: int, M: int, N: int, K: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"A": torch.randn(M, K, generator=g), "B": torch.randn(K, N, generator=g)}


def reference(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    # float64 on whatever device the inputs live on (the GPU for the CUDA
    # backend: 4096^3 in fp64 is a few ms there; 256^3 on the CPU).
    return (A.double() @ B.double()).float()


def contender(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    # timed as the reference row (sweep.yaml reference_timing): cuBLAS's plain FP32 GEMM on
    # the GPU (torch's default: TF32 off), the CPU BLAS on the CPU
    return A @ B
