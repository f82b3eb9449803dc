"""Reference for rotary: RoPE in the rotate_half (GPT-NeoX / Llama) layout, applied in place to
q [T, HQ, D] and k [T, HK, D] (bf16) at each token's position, with a bf16 cos/sin cache
[MAXPOS, D] (cos in the first D/2 columns, sin in the last: vLLM's layout).

The reference rotates in float64 from the bf16 inputs and cache (returned unrounded); the
contender is the Hugging Face formulation a user would write (cat, rotate_half, two products
and a sum, all in bf16).
"""
import torch


def inputs(seed: int, T: int, HQ: int, HK: int, D: int, MAXPOS: int) -> dict[str, torch.Tensor]:
    """q, k ~ N(0, 1); random positions (a decode batch holds sequences at any position);
    the cache of Llama's base 10000: inv_freq_j = 10000^(-2j/D), angle = position * inv_freq."""
    g = torch.Generator().manual_seed(seed)
    inv_freq = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(MAXPOS, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return {"positions": torch.randint(0, MAXPOS, (T,), generator=g, dtype=torch.int64),
            "q": torch.randn(T, HQ, D, generator=g).bfloat16(),
            "k": torch.randn(T, HK, D, generator=g).bfloat16(),
            "cos_sin_cache": torch.cat([ang.cos(), ang.sin()], dim=-1).bfloat16()}


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] rotated by cos, sin [T, D/2] (neox layout), in x's dtype."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def reference(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
              cos_sin_cache: torch.Tensor, T: int, HQ: int, HK: int, D: int,
              MAXPOS: int) -> dict[str, torch.Tensor]:
    """The rotated q and k in float64."""
    cs = cos_sin_cache.double()[positions]
    cos, sin = cs[:, : D // 2], cs[:, D // 2:]
    return {"q": _rotate(q.double(), cos, sin), "k": _rotate(k.double(), cos, sin)}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's rotate_half: [-x2, x1]."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def contender(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
              cos_sin_cache: torch.Tensor, T: int, HQ: int, HK: int, D: int,
              MAXPOS: int) -> dict[str, torch.Tensor]:
    """What a user calls: apply_rotary_pos_emb of Hugging Face transformers, in bf16."""
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
    cos = torch.cat((cos, cos), dim=-1)[:, None, :]  # [T, 1, D]
    sin = torch.cat((sin, sin), dim=-1)[:, None, :]
    return {"q": q * cos + rotate_half(q) * sin, "k": k * cos + rotate_half(k) * sin}
