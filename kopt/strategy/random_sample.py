"""``--strategy random``: a uniform sample of the space, drawn with ``--seed``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from kopt.core.expand import Candidate, cap
from kopt.strategy.exhaustive import Exhaustive

RANDOM_FRACTION = 0.25  # --strategy random without --max-candidates: a quarter of the space


class RandomSample(Exhaustive):
    """``max_candidates`` candidates (default: ``RANDOM_FRACTION`` of the space, at least
    2), the baseline plus a sample chosen by a hash of ``seed`` and the candidate id."""

    name = "random"

    @classmethod
    def create(cls, max_candidates: int | None, seed: int, timing: dict[str, Any]
               ) -> RandomSample:
        """A sample of ``max_candidates`` drawn with ``seed``."""
        return cls(max_candidates, seed)

    def __init__(self, max_candidates: int | None = None, seed: int = 0):
        super().__init__(max_candidates)
        self.seed = seed

    def select(self, cands: Iterable[Candidate]) -> list[Candidate]:
        if self.max_candidates:
            return cap(cands, self.max_candidates, seed=self.seed)
        pool = list(cands)
        return cap(pool, max(2, math.ceil(RANDOM_FRACTION * len(pool))), seed=self.seed)

    def sample_reason(self) -> str:
        if self.max_candidates:
            return super().sample_reason()
        return f"--strategy random samples {RANDOM_FRACTION:.0%}"
