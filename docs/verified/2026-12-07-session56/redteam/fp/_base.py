# ruff: noqa
import torch
def inputs(seed, N):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.rand(N, generator=g) - 0.5,
            "buf": torch.exp(torch.randn(N, generator=g) * 3.0)}
def _ref(x, buf):
    acc = torch.zeros_like(x, dtype=torch.float64)
    xd = x.double()
    for _ in range(16):
        acc = acc * xd + 0.5
    return {"y": acc.float(), "buf": torch.sort(buf).values}
