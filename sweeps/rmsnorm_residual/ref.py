"""Reference for rmsnorm_residual: vLLM's fused_add_rms_norm on bf16 [ROWS, H] rows.

residual <- bf16(x + residual) (in place); out = residual * w / sqrt(mean(residual^2) + eps).
The reference computes out in float64 from the rounded sums (returned unrounded: the check
compares the kernel's bf16 against the exact value); the contender is the unfused PyTorch code
a user would write (a bf16 add, then torch.nn.functional.rms_norm).
"""
import torch
import torch.nn.functional as F


def inputs(seed: int, ROWS: int, H: int) -> dict[str, torch.Tensor]:
    """x and residual ~ N(0, 1) (the residual stream), weight ~ 1 + 0.25 N(0, 1), bf16."""
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(ROWS, H, generator=g).bfloat16(),
            "residual": torch.randn(ROWS, H, generator=g).bfloat16(),
            "weight": (1.0 + 0.25 * torch.randn(H, generator=g)).bfloat16()}


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
              ROWS: int, H: int) -> dict[str, torch.Tensor]:
    """The new residual (bf16, exact: one rounding of the fp32 sum of two bf16 values) and
    the normalized output in float64."""
    s = (x.float() + residual.float()).bfloat16()
    sd = s.double()
    inv = torch.rsqrt(sd.pow(2).mean(dim=-1, keepdim=True) + eps)
    return {"residual": s, "out": sd * inv * weight.double()}


def contender(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
              ROWS: int, H: int) -> dict[str, torch.Tensor]:
    """What a user calls: x + residual in bf16, then F.rms_norm in bf16."""
    s = x + residual
    return {"residual": s, "out": F.rms_norm(s, (H,), weight, eps)}
