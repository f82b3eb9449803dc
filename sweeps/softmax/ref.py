"""Reference for softmax: row-wise softmax of x [ROWS, COLS], computed in float64."""
import torch


def inputs(seed: int, ROWS: int, COLS: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # scaled randn: exponents spread over ~[-25, 0], so a missing max
    # subtraction or a wrong rescale shows up
    return {"x": 3.0 * torch.randn(ROWS, COLS, generator=g)}


def reference(x: torch.Tensor, ROWS: int, COLS: int) -> torch.Tensor:
    return torch.softmax(x.double(), dim=1).float()


def contender(x: torch.Tensor, ROWS: int, COLS: int) -> torch.Tensor:
    # timed as the reference row (sweep.yaml reference_timing): torch's float32 softmax
    return torch.softmax(x, dim=1)
