# ruff: noqa
"""An honest ref.py that uses torch.compile (backend eager), torch.manual_seed,
torch.set_num_threads, torch.use_deterministic_algorithms and imports torch submodules."""
import torch
import torch.nn.functional as F
import torch.fft, torch.linalg, torch.distributions, torch.special, torch.utils.data
torch.set_num_threads(1)

def _poly(xd):
    acc = torch.zeros_like(xd)
    for _ in range(16):
        acc = acc * xd + 0.5
    return acc

_cpoly = torch.compile(_poly, backend="eager")

def inputs(seed, N):
    torch.manual_seed(seed)
    return {"x": torch.rand(N) - 0.5, "buf": torch.exp(torch.randn(N) * 3.0)}

def reference(x, buf, N):
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    _ = F.relu(x) + torch.special.expit(x)
    y = _cpoly(x.double()).float()
    return {"y": y, "buf": torch.sort(buf).values}
