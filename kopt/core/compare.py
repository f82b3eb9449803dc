"""kopt's one noise model: when two timings differ beyond noise (FASTER / SLOWER / TIED),
and the one geometric mean used to summarise problem sizes.

The rule is NVBench's comparison rule (``scripts/nvbench_compare.py`` in
https://github.com/NVIDIA/nvbench: ``min_noise = min(ref_noise, cmp_noise)``; a
pair is the same -- PASS -- when ``abs(frac_diff) <= min_noise``, with ``frac_diff =
(cmp_time - ref_time) / ref_time`` and each noise the relative standard deviation NVBench
also stops sampling on, ``nvbench/detail/stdrel_criterion.cxx``): the relative
difference of the two centres counts only when it exceeds the smaller of the two relative
noises; otherwise the pair is TIED. kopt's figures differ in three ways, each its own:

- robust figures: the median as the centre and ``sigma = IQR / 1.349`` as the noise,
  relative to the median (``IQR_PER_SIGMA``: the interquartile range of a normal
  distribution is 1.349 standard deviations; workers.timing uses the same ratio);
- a floor, ``MIN_REL_NOISE`` = 1%: no difference below it is called real (clock and L2
  state alone move GPU medians that much between runs). NVBench has no floor, and its
  script takes a zero or missing noise as unknown: it uses the other side's, or reports the
  pair "unknown" when both are; kopt counts no noise as none, and the floor decides;
- ``inclusive``: the larger of the two noises instead of the smaller, to choose which
  candidates to re-measure side by side (kopt.core.winner's screening): timings taken at
  different times also differ by drift, and there a wider net costs only a re-measurement.
  A verdict (a contest's, the loop's gain test) uses NVBench's smaller noise.

Every "beyond noise" of the product goes through :func:`label` (or
:func:`speedup_label`, the same rule on a speedup and two relative IQRs); nothing else
defines a noise threshold.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Literal

Label = Literal["FASTER", "SLOWER", "TIED"]
MIN_REL_NOISE = 0.01  # no difference below 1% is called real
IQR_PER_SIGMA = 1.349  # IQR of a normal distribution in standard deviations
# the rule in words, for reports
RULE = (f"two timings differ beyond noise when their medians differ by more than "
        f"max({MIN_REL_NOISE:.0%}, the smaller relative sigma, IQR / {IQR_PER_SIGMA}) "
        "(NVBench's comparison rule); by the larger of the two only to choose the contenders "
        "re-measured side by side")


def rel_noise(median_ms: float, iqr_ms: float | None) -> float:
    """Robust relative noise of a sample set: ``(IQR / 1.349) / median`` (dimensionless);
    an unknown IQR (None) counts as no noise.

    Raises:
        ValueError: ``median_ms`` is not positive.
    """
    if not median_ms or median_ms <= 0:
        raise ValueError(f"median must be positive, got {median_ms!r} ms")
    return (iqr_ms or 0.0) / IQR_PER_SIGMA / median_ms


def threshold(ref_noise: float, cmp_noise: float, inclusive: bool = False) -> float:
    """The relative difference a pair must exceed to differ beyond noise:
    ``max(MIN_REL_NOISE, min(ref_noise, cmp_noise))`` (NVBench's ``min_noise`` with kopt's
    1% floor); ``inclusive`` takes the larger of the two noises (timings not side by side).
    Both noises are relative standard deviations (:func:`rel_noise`)."""
    pick = max if inclusive else min
    return max(MIN_REL_NOISE, pick(ref_noise, cmp_noise))


def label(ref: tuple[float, float | None], cmp: tuple[float, float | None],
          inclusive: bool = False) -> Label:
    """How ``cmp`` compares with ``ref``; each is ``(median_ms, iqr_ms)``.

    FASTER: cmp's median is lower by more than :func:`threshold` (relative to ref's median);
    SLOWER: higher by more; TIED otherwise (a difference equal to the threshold ties, as
    NVBench's ``<=`` does). ``inclusive``: see :func:`threshold`.

    Raises:
        ValueError: a median is not positive.
    """
    diff = (cmp[0] - ref[0]) / ref[0]
    noise = threshold(rel_noise(*ref), rel_noise(*cmp), inclusive)
    if abs(diff) <= noise:
        return "TIED"
    return "FASTER" if diff < 0 else "SLOWER"


def speedup_label(speedup: float, ref_rel_iqr: float | None, cmp_rel_iqr: float | None,
                  inclusive: bool = False) -> Label:
    """:func:`label` of a candidate given as its ``speedup`` over a reference (reference
    median / candidate median) and each side's relative IQR (``iqr_ms / median_ms``; None:
    unknown, counted as no noise): the reference is ``(1, ref_rel_iqr)`` and the candidate
    ``(1 / speedup, cmp_rel_iqr / speedup)``, so a speedup counts when ``1 - 1 / speedup``
    exceeds the threshold.

    Raises:
        ValueError: ``speedup`` is not positive.
    """
    if not speedup or speedup <= 0:
        raise ValueError(f"speedup must be positive, got {speedup!r}")
    return label((1.0, ref_rel_iqr), (1.0 / speedup, (cmp_rel_iqr or 0.0) / speedup),
                 inclusive)


def speedup_threshold(ref_rel_iqr: float | None, cmp_rel_iqr: float | None,
                      inclusive: bool = False) -> float:
    """The threshold :func:`speedup_label` applies (a relative difference of medians)."""
    return threshold((ref_rel_iqr or 0.0) / IQR_PER_SIGMA, (cmp_rel_iqr or 0.0) / IQR_PER_SIGMA,
                     inclusive)


def speedup_threshold_cause(ref_rel_iqr: float | None, cmp_rel_iqr: float | None,
                            ref_name: str = "the baseline", cmp_name: str = "the winner"
                            ) -> str:
    """What set :func:`speedup_threshold` (NVBench's smaller noise, not inclusive): the
    side whose noise it is, named ``ref_name`` / ``cmp_name``, with that side's relative
    IQR (``iqr_ms / median_ms``, in %) and the other's; or the 1 % floor when both sides'
    sigma is below it. Relative IQRs as :func:`speedup_threshold` takes them (None:
    unknown, counted as no noise). E.g. ``"set by the baseline's own noise: its IQR is 120% of
    its median, sigma = IQR / 1.349; the winner's IQR is 150%"``."""
    ref, cmp_ = ref_rel_iqr or 0.0, cmp_rel_iqr or 0.0
    if min(ref, cmp_) / IQR_PER_SIGMA <= MIN_REL_NOISE:
        return (f"the {MIN_REL_NOISE:.0%} floor: {ref_name}'s IQR is {ref:.1%} of its median, "
                f"{cmp_name}'s {cmp_:.1%}")
    (name, own), (other, theirs) = sorted([(ref_name, ref), (cmp_name, cmp_)],
                                          key=lambda side: side[1])
    return (f"set by {name}'s own noise: its IQR is {own:.0%} of its median, sigma = IQR / "
            f"{IQR_PER_SIGMA}; {other}'s IQR is {theirs:.0%}")


def noise_line(ref_rel_iqr: float | None, cmp_rel_iqr: float | None,
               ref_name: str = "the baseline", cmp_name: str = "the winner") -> str:
    """:func:`speedup_threshold` in % and its cause (:func:`speedup_threshold_cause`), with
    what narrows it when a side's noise set it: ``"89.0% (set by the baseline's own noise:
    ...; re-measure on an idle device to narrow it)"``."""
    t = speedup_threshold(ref_rel_iqr, cmp_rel_iqr)
    fix = "; re-measure on an idle device to narrow it" if t > MIN_REL_NOISE else ""
    return (f"{t:.3%} ({speedup_threshold_cause(ref_rel_iqr, cmp_rel_iqr, ref_name, cmp_name)}"
            f"{fix})")


def geo_mean(xs: Iterable[float]) -> float:
    """Geometric mean of positive numbers (e.g. medians or speedups across problem sizes);
    the one geometric mean of kopt (``statistics.geometric_mean``).

    Raises:
        ValueError: empty input or a non-positive value.
    """
    xs = list(xs)
    if not xs or any(x <= 0 for x in xs):
        raise ValueError(f"geometric mean needs positive values, got {xs!r}")
    return statistics.geometric_mean(xs)


def across_sizes(xs: Sequence[tuple[float, float | None]]) -> tuple[float, float]:
    """One ``(median_ms, iqr_ms)`` for a candidate measured on several problem sizes: the
    geometric mean of the medians, with the worst relative IQR across the sizes.

    Raises:
        ValueError: no size, or a non-positive median.
    """
    med = geo_mean([m for m, _ in xs])
    return med, max((iqr or 0.0) / m for m, iqr in xs) * med
