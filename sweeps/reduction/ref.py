"""Reference for reduction: out[0] = sum(x), accumulated in float64, returned as float32 [1]."""
import torch


def inputs(seed: int, N: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g)}


def reference(x: torch.Tensor, N: int) -> torch.Tensor:
    return x.double().sum().float().reshape(1)


def contender(x: torch.Tensor, N: int) -> torch.Tensor:
    # timed as the reference row (sweep.yaml reference_timing): torch's float32 sum
    return x.sum().reshape(1)
