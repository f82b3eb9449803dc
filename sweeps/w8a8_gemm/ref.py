"""Reference for w8a8_gemm: y = (A @ W^T) * sa[:, None] * sw[None, :] for int8 activations A
[M, K] with per-row (per-token) fp32 scales sa [M] and int8 weights W [N, K] (nn.Linear's
layout) with per-output-channel fp32 scales sw [N]; fp16 y [M, N] (SmoothQuant-style W8A8).

The reference takes the integer products in float64 (exact: |A @ W^T| <= K * 127^2 < 2^27)
and applies both scales in float64 (returned unrounded). The contender is what a user calls on
the GPU: torch._int_mm (cuBLAS/cuBLASLt int8 tensor cores, int32 out), then the two scale
multiplies in fp32 and a cast to fp16, the way torchao's int8 dynamic-quant linear runs.
"""
import torch

QMAX = 127
MIN_INT_MM_ROWS = 17  # CUDA torch._int_mm refuses self.size(0) <= 16


def _quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: codes round(x / s) in [-127, 127] with s = absmax / 127 (fp32)."""
    s = x.abs().amax(dim=1).clamp_min(1e-8) / QMAX
    q = torch.round(x / s[:, None]).clamp_(-QMAX, QMAX).to(torch.int8)
    return q, s.float()


def inputs(seed: int, M: int, N: int, K: int) -> dict[str, torch.Tensor]:
    """Per-token quantized activations (x ~ N(0, 1), a normalized hidden state) and per-channel
    quantized weights (0.02 N(0, 1), a 7B model's init scale), as SmoothQuant/torchao make them:
    codes spread over most of [-127, 127], sa ~ 0.03, sw ~ 6e-4."""
    g = torch.Generator().manual_seed(seed)
    A, sa = _quantize_rows(torch.randn(M, K, generator=g))
    W, sw = _quantize_rows(0.02 * torch.randn(N, K, generator=g))
    return {"A": A, "sa": sa, "W": W, "sw": sw}


def reference(A: torch.Tensor, sa: torch.Tensor, W: torch.Tensor, sw: torch.Tensor, M: int,
              N: int, K: int) -> torch.Tensor:
    """y in float64."""
    return (A.double() @ W.double().T) * sa.double()[:, None] * sw.double()[None, :]


def contender(A: torch.Tensor, sa: torch.Tensor, W: torch.Tensor, sw: torch.Tensor, M: int,
              N: int, K: int) -> torch.Tensor:
    """What a user calls: torch._int_mm(A, W.T) (int32, exact), times sa and sw in fp32, cast to
    fp16. CUDA's _int_mm needs more than 16 rows (and K, N multiples of 8): at M <= 16 A is
    padded with zero rows to 32 first (an extra copy a user pays too; the padded rows are
    sliced off, so the result is the same). On the CPU torch._int_mm exists as well (checked
    on torch 2.13) and accepts any M; the padding there changes nothing but the work."""
    if M < MIN_INT_MM_ROWS:
        A = torch.nn.functional.pad(A, (0, 0, 0, 32 - M))
    acc = torch._int_mm(A, W.T)[:M]
    return (acc * sa[:, None] * sw[None, :]).half()
