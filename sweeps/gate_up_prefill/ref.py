"""Reference for gate_up_prefill: y = SiLU(x @ Wg^T) * (x @ Wu^T) for bf16 x [M, K] and bf16
Wg, Wu [N, K] (a Llama MLP's gate and up projections), bf16 y [M, N].

The reference computes both projections and the SiLU product in float64 (returned unrounded);
the contender is the unfused PyTorch code of Hugging Face's LlamaMLP: two torch.matmul calls
(cuBLAS, bf16 out), F.silu and a multiply, each rounding to bf16.
"""
import torch
import torch.nn.functional as F


def inputs(seed: int, M: int, N: int, K: int) -> dict[str, torch.Tensor]:
    """x ~ N(0, 1) (a normalized hidden state), Wg, Wu ~ 0.02 N(0, 1) (a 7B model's init
    scale), bf16."""
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(M, K, generator=g).bfloat16(),
            "Wg": (0.02 * torch.randn(N, K, generator=g)).bfloat16(),
            "Wu": (0.02 * torch.randn(N, K, generator=g)).bfloat16()}


def reference(x: torch.Tensor, Wg: torch.Tensor, Wu: torch.Tensor, M: int, N: int,
              K: int) -> torch.Tensor:
    """y in float64."""
    xd = x.double()
    g, u = xd @ Wg.double().T, xd @ Wu.double().T
    return g * torch.sigmoid(g) * u


def contender(x: torch.Tensor, Wg: torch.Tensor, Wu: torch.Tensor, M: int, N: int,
              K: int) -> torch.Tensor:
    """What a user calls: F.silu(x @ Wg.T) * (x @ Wu.T) in bf16."""
    return F.silu(torch.matmul(x, Wg.T)) * torch.matmul(x, Wu.T)
