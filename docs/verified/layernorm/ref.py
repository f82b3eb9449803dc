"""Reference for the layer-norm sweep: y = LayerNorm(x) over the last dimension of a float32
[ROWS, COLS] matrix with an affine weight and bias (torch.nn.functional.layer_norm, biased
variance, eps inside the square root). The kernels compute in float32; the reference is
computed in float64 and rounded to float32 once, so the tolerance band only has to cover the
kernels' own rounding."""
import torch


def inputs(seed: int, ROWS: int, COLS: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # a per-row offset (up to a few units) on top of spread values: a kernel that forgets to
    # subtract the mean, or lets idle threads add (0 - mean)^2 to the variance, is far off
    x = 2.0 * torch.randn(ROWS, COLS, generator=g) + 3.0 * torch.randn(ROWS, 1, generator=g)
    return {"x": x,
            "weight": 1.0 + 0.1 * torch.randn(COLS, generator=g),
            "bias": 0.1 * torch.randn(COLS, generator=g)}


def reference(x, weight, bias, ROWS, COLS, eps):
    return torch.nn.functional.layer_norm(x.double(), (COLS,), weight.double(),
                                          bias.double(), eps).float()
