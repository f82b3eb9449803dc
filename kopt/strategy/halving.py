"""``--strategy halving``: successive halving. Every candidate is screened with
``HALVING_SAMPLES[0]`` samples, the best 1/``HALVING_ETA`` of each rung are measured again
with more, the last rung with the spec's own timing; the baseline is in every rung."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kopt.core.expand import stable_hash
from kopt.strategy.base import Job
from kopt.strategy.exhaustive import Exhaustive

HALVING_SAMPLES = (5, 15)  # samples per candidate in the screening rungs; the last rung
HALVING_ETA = 3  # uses the spec's timing; each rung keeps the best 1/ETA of the last
HALVING_MIN = 3  # ... but never fewer than this many (besides the baseline)


class SuccessiveHalving(Exhaustive):
    """Successive halving over rungs ``0 .. len(HALVING_SAMPLES)``.

    Args:
        max_candidates: cap per device class for rung 0 (chosen as :class:`Exhaustive`).
        timing: the space's timing (kopt.core.spec.Timing as a dict); screening rungs take
            its fields with a fixed sample count and the warm-up capped at 2 ms.
    """

    name = "halving"

    @classmethod
    def create(cls, max_candidates: int | None, seed: int, timing: dict[str, Any]
               ) -> SuccessiveHalving:
        """Rungs screened with a shortened ``timing``."""
        return cls(max_candidates, timing)

    def __init__(self, max_candidates: int | None, timing: dict[str, Any]):
        super().__init__(max_candidates)
        self.timing = timing
        self.rung = 0
        self.jobs: list[Job] = []

    def rung_timing(self, rung: int) -> dict[str, Any] | None:
        """A screening rung's timing; None (the spec's) for the last rung."""
        if rung >= len(HALVING_SAMPLES):
            return None
        n = HALVING_SAMPLES[rung]
        return {**self.timing, "min_samples": n, "max_samples": n,
                "warmup_ms": min(self.timing["warmup_ms"], 2.0)}

    def first_timing(self) -> dict[str, Any] | None:
        return self.rung_timing(0)

    def start(self, jobs: list[Job]) -> None:
        super().start(jobs)
        self.rung, self.jobs = 0, jobs

    def needs_ranking(self) -> bool:
        return bool(self.jobs) and self.rung < len(HALVING_SAMPLES)

    def notify(self, ranked: dict[str, list[dict[str, Any]]]) -> None:
        """Keep, per device class, the best 1/HALVING_ETA (at least HALVING_MIN) of the
        rung's correct candidates, and the baseline (also when it failed in this rung: the
        last rung's ranking needs it), for the next rung; a class with no correct
        candidate is dropped."""
        r = self.rung + 1
        nxt: list[Job] = []
        for dc in sorted({j.device_class for j in self.jobs}):
            rows = ranked.get(dc, [])
            n_keep = max(math.ceil(len(rows) / HALVING_ETA), min(len(rows), HALVING_MIN))
            keep = {x["candidate_id"] for x in rows[:n_keep] if not x["is_baseline"]}
            if rows:
                keep |= {j.candidate.candidate_id for j in self.jobs
                         if j.device_class == dc and j.candidate.is_baseline}
            nxt += [dataclasses.replace(j, job_key=stable_hash({"job": j.job_key, "rung": r}),
                                        rung=r, timing=self.rung_timing(r))
                    for j in self.jobs if j.device_class == dc
                    and j.candidate.candidate_id in keep]
        self.rung, self.jobs = r, nxt
        self._next = nxt or None
