"""Reference for vector_add: out = x + y (float32 in, float32 out)."""
import torch


def inputs(seed: int, N: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g), "y": torch.randn(N, generator=g)}


def stress_inputs(seed: int, N: int) -> dict[str, torch.Tensor]:
    # the contests' second distribution: heavy-tailed magnitudes (log-normal, up to ~1e7)
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g) * torch.exp(3 * torch.randn(N, generator=g)),
            "y": torch.randn(N, generator=g) * torch.exp(3 * torch.randn(N, generator=g))}


def reference(x: torch.Tensor, y: torch.Tensor, N: int) -> torch.Tensor:
    # float64 then rounded: the exact float32 sum, which the kernel must match
    return (x.double() + y.double()).float()


def contender(x: torch.Tensor, y: torch.Tensor, N: int) -> torch.Tensor:
    # timed as the reference row (sweep.yaml reference_timing): what torch does in float32
    return x + y
