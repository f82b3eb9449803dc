"""Noise-aware comparison of two timing distributions: FASTER / SLOWER / TIED.

The rule is NVBench's (``scripts/nvbench_compare.py``): the relative difference
of the two centres counts only when it exceeds the smaller of the two relative
noises; otherwise the pair is TIED. kopt uses robust figures -- the median as
the centre and ``sigma = IQR / 1.349`` (the IQR of a normal distribution is
1.349 sigma) as the noise, relative to the median -- and a floor of 1% below
which no difference on a GPU is treated as real (clock and L2 state alone move
medians that much between runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Label = Literal["FASTER", "SLOWER", "TIED"]
MIN_REL_NOISE = 0.01  # no difference below 1% is called real


def rel_noise(median_ms: float, iqr_ms: float | None) -> float:
    """Robust relative noise of a sample set: ``(IQR / 1.349) / median`` (dimensionless).

    Raises:
        ValueError: ``median_ms`` is not positive.
    """
    if not median_ms or median_ms <= 0:
        raise ValueError(f"median must be positive, got {median_ms!r} ms")
    return (iqr_ms or 0.0) / 1.349 / median_ms


def label(ref: tuple[float, float | None], cmp: tuple[float, float | None],
          inclusive: bool = False) -> Label:
    """How ``cmp`` compares with ``ref``; each is ``(median_ms, iqr_ms)``.

    FASTER: cmp's median is lower by more than the noise; SLOWER: higher by more;
    TIED otherwise. Noise: ``max(1%, min(rel_noise(ref), rel_noise(cmp)))`` (NVBench);
    ``inclusive`` takes the larger of the two noises instead, for screening: samples taken
    at different times also differ by drift, which only a side-by-side run removes.
    """
    diff = (cmp[0] - ref[0]) / ref[0]
    pick = max if inclusive else min
    noise = max(MIN_REL_NOISE, pick(rel_noise(*ref), rel_noise(*cmp)))
    if abs(diff) <= noise:
        return "TIED"
    return "FASTER" if diff < 0 else "SLOWER"


def geo_mean(xs: Sequence[float]) -> float:
    """Geometric mean of positive numbers (e.g. medians across problem sizes, ms).

    Raises:
        ValueError: empty input or a non-positive value.
    """
    if not xs or any(x <= 0 for x in xs):
        raise ValueError(f"geometric mean needs positive values, got {list(xs)!r}")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
