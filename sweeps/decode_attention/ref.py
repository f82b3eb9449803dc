"""Reference for decode_attention: one decoding step of multi-head attention over a contiguous
KV cache, o[b, h] = softmax(q[b, h] . K[b, h]^T / sqrt(D)) @ V[b, h], for bf16 q [B, H, D]
(one query token per sequence) and bf16 K, V [B, H, L, D] (every head's L cached keys and
values, row-major), bf16 o [B, H, D].

The reference computes the scores, the softmax and the weighted sum in float64 (returned
unrounded: the check compares the kernel's bf16 against the exact value); the contender is what
a user calls: torch.nn.functional.scaled_dot_product_attention on the bf16 tensors, q as
[B, H, 1, D] (on the GPU a FlashAttention, cuDNN or memory-efficient kernel: fp32 softmax, the
probabilities rounded to bf16 for the P @ V product as FlashAttention does, o rounded to bf16).
"""
import math

import torch
import torch.nn.functional as F

Q_STD = 2.0  # scores q . k / sqrt(D) ~ N(0, Q_STD^2): a moderately peaked head


def inputs(seed: int, B: int, H: int, L: int, D: int) -> dict[str, torch.Tensor]:
    """q ~ Q_STD N(0, 1), K and V ~ N(0, 1), bf16: with K's rows of norm ~sqrt(D) the scores
    are ~N(0, Q_STD^2), so the softmax puts sum p^2 ~ e^(Q_STD^2) / L on the keys (~L / 55
    keys carry the weight, as in a head that attends to a few dozen to hundreds of tokens);
    generated on the GPU when there is one (0.5 GB of K and V at the largest size)."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(seed)
    return {"q": (Q_STD * torch.randn(B, H, D, generator=g, device=dev)).bfloat16(),
            "k": torch.randn(B, H, L, D, generator=g, device=dev).bfloat16(),
            "v": torch.randn(B, H, L, D, generator=g, device=dev).bfloat16()}


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, B: int, H: int, L: int,
              D: int) -> torch.Tensor:
    """o in float64, one batch row at a time (a float64 copy of all of K and V would be 4x
    their size)."""
    out = []
    for b in range(B):
        s = torch.einsum("hd,hld->hl", q[b].double(), k[b].double()) / math.sqrt(D)
        out.append(torch.einsum("hl,hld->hd", torch.softmax(s, dim=-1), v[b].double()))
    return torch.stack(out)


def contender(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, B: int, H: int, L: int,
              D: int) -> torch.Tensor:
    """What a user calls: F.scaled_dot_product_attention in bf16 (scale 1 / sqrt(D))."""
    return F.scaled_dot_product_attention(q.unsqueeze(2), k, v).squeeze(2)
