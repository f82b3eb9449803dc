"""Reference for lm_head_top1: greedy decoding's LM head, idx[b] = argmax_v (W @ h[b])[v] and
val[b] = that logit, for bf16 W [V, K] (nn.Linear's layout) and bf16 hidden vectors h [B, K].

The reference takes the logits in float64 (in row chunks: a float64 copy of the whole W would
be 5 GB) and torch.argmax's index (the first largest); the contender is what a user calls:
torch.matmul in bf16 (cuBLAS), then torch.max over the bf16 logits.

inputs() makes the argmax unambiguous: the largest logit of every batch row exceeds the second
largest by at least GAP of its magnitude, far above the bf16 rounding of the contender's logits
(2^-9 relative) and fp32 accumulation error (~1e-6), so every correct kernel and the contender
name the same index (a row that falls short draws its hidden vector again, from a seed derived
from the input seed).
"""
import torch

GAP = 0.02  # the top logit's lead over the runner-up, relative to its magnitude
CHUNK = 16384  # rows of W per float64 block in the reference


def _logits64(W: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """(W @ h.T).T in float64, [B, V], computed in row blocks of W."""
    hd = h.double()
    return torch.cat([hd @ W[i:i + CHUNK].double().T for i in range(0, W.shape[0], CHUNK)],
                     dim=1)


def _gap_ok(logits: torch.Tensor) -> torch.Tensor:
    """Per batch row: whether the top logit leads the second by GAP of its magnitude."""
    top2 = logits.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1]) >= GAP * top2[:, 0].abs()


def inputs(seed: int, B: int, V: int, K: int) -> dict[str, torch.Tensor]:
    """W ~ 0.02 N(0, 1) (an LM head's scale), h ~ N(0, 1) (a normalized hidden state), bf16;
    generated on the GPU when there is one (1.2 GB of W at the sweep's size)."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(seed)
    W = (0.02 * torch.randn(V, K, generator=g, device=dev)).bfloat16()
    h = torch.randn(B, K, generator=g, device=dev).bfloat16()
    for _ in range(100):  # P(a row falls short) ~ 0.4: 100 tries never run out
        bad = ~_gap_ok(_logits64(W, h))
        if not bool(bad.any()):
            break
        h[bad] = torch.randn(int(bad.sum()), K, generator=g, device=dev).bfloat16()
    else:
        raise RuntimeError("no hidden vector with an unambiguous argmax in 100 draws")
    return {"W": W, "h": h}


def reference(W: torch.Tensor, h: torch.Tensor, B: int, V: int,
              K: int) -> dict[str, torch.Tensor]:
    """idx (int64) and val (float64) of the largest float64 logit per batch row."""
    val, idx = _logits64(W, h).max(dim=1)
    return {"idx": idx, "val": val}


def contender(W: torch.Tensor, h: torch.Tensor, B: int, V: int,
              K: int) -> dict[str, torch.Tensor]:
    """What a user calls: the bf16 logits through torch.matmul (cuBLAS), then torch.max."""
    val, idx = torch.matmul(h, W.T).max(dim=1)
    return {"idx": idx, "val": val.float()}
