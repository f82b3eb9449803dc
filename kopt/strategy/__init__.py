"""Search strategies (TVM MetaSchedule's ``SearchStrategy``): which candidates a sweep
measures, batch by batch. :func:`make` picks one by its ``--strategy`` name."""

from __future__ import annotations

from typing import Any

from kopt.strategy.base import STRATEGIES, Job, SearchStrategy
from kopt.strategy.exhaustive import Exhaustive
from kopt.strategy.halving import SuccessiveHalving
from kopt.strategy.random_sample import RandomSample


def make(name: str, max_candidates: int | None, seed: int, timing: dict[str, Any]
         ) -> SearchStrategy:
    """The strategy called ``name`` (one of ``STRATEGIES``); ``timing``: the space's timing
    (a dict of kopt.core.spec.Timing), which the screening rungs of ``halving`` shorten.

    Raises:
        ValueError: an unknown name.
    """
    if name == "exhaustive":
        return Exhaustive(max_candidates)
    if name == "random":
        return RandomSample(max_candidates, seed)
    if name == "halving":
        return SuccessiveHalving(max_candidates, timing)
    raise ValueError(f"strategy {name!r}: expected one of {', '.join(STRATEGIES)}")


__all__ = ["STRATEGIES", "Exhaustive", "Job", "RandomSample", "SearchStrategy",
           "SuccessiveHalving", "make"]
