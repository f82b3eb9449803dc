"""``--strategy exhaustive``: every candidate (or the first ``--max-candidates`` by id),
fully measured, once."""

from __future__ import annotations

from collections.abc import Iterable

from kopt.core.expand import Candidate, cap
from kopt.strategy.base import SearchStrategy


class Exhaustive(SearchStrategy):
    """Every admissible candidate of the space (or the baseline plus the first
    ``max_candidates - 1`` by id), measured with the spec's timing."""

    name = "exhaustive"

    def select(self, cands: Iterable[Candidate]) -> list[Candidate]:
        return cap(cands, self.max_candidates)
