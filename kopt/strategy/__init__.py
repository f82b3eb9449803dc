"""Search strategies (TVM MetaSchedule's ``SearchStrategy``, Kernel Tuner's strategies as
modules): which candidates a sweep measures, batch by batch. One module per strategy, each a
:class:`SearchStrategy` subclass with a ``name``; :data:`REGISTRY` is the closed list that
``--strategy`` offers, and :func:`make` builds one by name. A new strategy is a module here
and one entry in :data:`REGISTRY`: nothing in the driver changes."""

from __future__ import annotations

from typing import Any

from kopt.strategy.base import Job, SearchStrategy
from kopt.strategy.exhaustive import Exhaustive
from kopt.strategy.halving import SuccessiveHalving
from kopt.strategy.random_sample import RandomSample

REGISTRY: dict[str, type[SearchStrategy]] = {
    cls.name: cls for cls in (Exhaustive, RandomSample, SuccessiveHalving)}
STRATEGIES: tuple[str, ...] = tuple(REGISTRY)  # --strategy's choices, the default first


def make(name: str, max_candidates: int | None, seed: int, timing: dict[str, Any]
         ) -> SearchStrategy:
    """The strategy called ``name`` (one of :data:`STRATEGIES`); ``timing``: the space's
    timing (a dict of kopt.core.spec.Timing), which the screening rungs of ``halving``
    shorten.

    Raises:
        ValueError: an unknown name.
    """
    if name not in REGISTRY:
        raise ValueError(f"strategy {name!r}: expected one of {', '.join(STRATEGIES)}")
    return REGISTRY[name].create(max_candidates, seed, timing)


__all__ = ["REGISTRY", "STRATEGIES", "Exhaustive", "Job", "RandomSample", "SearchStrategy",
           "SuccessiveHalving", "make"]
