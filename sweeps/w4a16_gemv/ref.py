"""Reference for w4a16_gemv: y = x @ W^T with int4 weights W[n][k] = (q[n][k] - 8) *
scales[n][k // 128] (symmetric, group size 128), fp16 activations x [M, K], fp16 y [M, N].

qweight is int32 [N, K/8]: word j of row n holds q[n][8j + e] in bits 4e .. 4e+3. The
reference dequantizes and multiplies in float64 (returned unrounded); the contender is what a
user without a w4a16 kernel runs: dequantize to fp16, then torch.matmul (cuBLAS).
"""
import torch

GROUP = 128


def inputs(seed: int, M: int, N: int, K: int) -> dict[str, torch.Tensor]:
    """Uniform int4 codes, scales ~ 0.01-0.02 (|W| up to ~0.16, a 7B model's projection
    scale), x ~ N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    return {"qweight": torch.randint(-2**31, 2**31, (N, K // 8), generator=g, dtype=torch.int32),
            "scales": (0.01 + 0.01 * torch.rand(N, K // GROUP, generator=g)).half(),
            "x": torch.randn(M, K, generator=g).half()}


def unpack(qweight: torch.Tensor) -> torch.Tensor:
    """The codes q in [0, 15], int32 [N, K]."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=qweight.device)
    return ((qweight[..., None] >> shifts) & 0xF).reshape(qweight.shape[0], -1)


def reference(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor, M: int, N: int,
              K: int) -> torch.Tensor:
    """y in float64."""
    w = (unpack(qweight) - 8).double() * scales.double().repeat_interleave(GROUP, dim=1)
    return x.double() @ w.T


def contender(qweight: torch.Tensor, scales: torch.Tensor, x: torch.Tensor, M: int, N: int,
              K: int) -> torch.Tensor:
    """What a user calls: dequantize to fp16, then torch.matmul in fp16 (cuBLAS)."""
    w = (unpack(qweight) - 8).half() * scales.repeat_interleave(GROUP, dim=1)
    return torch.matmul(x, w.T)
