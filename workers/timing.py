"""Sample statistics and the stopping rule for timing a candidate.

A candidate is timed sample by sample (one launch of ``solve`` each, the L2
flushed before each); sampling stops once the median is stable: the standard
error of the median, estimated as ``1.2533 * sigma / sqrt(n)`` with the
robust ``sigma = IQR / 1.349`` (both the asymptotic efficiency of the median
for normal data and the IQR-to-sigma ratio of the normal distribution), is
below ``target_rel_error`` of the median -- or the sample or time budget is
spent. NVBench stops on a similar relative-noise criterion.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted data."""
    if not sorted_xs:
        raise ValueError("no samples")
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Stats:
    """Summary of samples (ms): median, min, IQR (q75 - q25), mean, count."""

    median_ms: float
    min_ms: float
    iqr_ms: float
    mean_ms: float
    n_samples: int

    @property
    def rel_se_median(self) -> float:
        """Relative standard error of the median (see the module docstring)."""
        if self.n_samples < 2 or self.median_ms <= 0:
            return math.inf
        sigma = self.iqr_ms / 1.349
        return 1.2533 * sigma / math.sqrt(self.n_samples) / self.median_ms


def summarize(samples_ms: Sequence[float]) -> Stats:
    """Stats of ``samples_ms`` (milliseconds). Raises ValueError when empty."""
    xs = sorted(samples_ms)
    return Stats(
        median_ms=quantile(xs, 0.5), min_ms=xs[0],
        iqr_ms=quantile(xs, 0.75) - quantile(xs, 0.25), mean_ms=sum(xs) / len(xs),
        n_samples=len(xs))


def should_stop(samples_ms: Sequence[float], min_samples: int, max_samples: int,
                max_time_ms: float, target_rel_error: float) -> bool:
    """True when sampling can stop: enough samples and a stable median, or a budget spent."""
    n = len(samples_ms)
    if n >= max_samples:
        return True
    if n < min_samples:
        return False
    if sum(samples_ms) >= max_time_ms:
        return True
    return summarize(samples_ms).rel_se_median <= target_rel_error


def lap(parts: dict[str, float], part: str, t0: float) -> float:
    """The wall time since ``t0`` (``time.perf_counter``, s) added to ``parts[part]`` (ms);
    returns the time now (the next part's ``t0``). Where a job's or a contest's wall time
    went (workers.harness ``Harness.lap``, workers.device_actor): a breakdown, never a
    verdict."""
    now = time.perf_counter()
    parts[part] = parts.get(part, 0.0) + (now - t0) * 1e3
    return now
