"""The search-strategy interface and the job it plans (TVM: ``MeasureCandidate``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kopt.core.expand import Candidate


@dataclass
class Job:
    """One run: a candidate on one device class for one problem size."""

    job_key: str
    candidate: Candidate
    device_class: str
    dims_index: int
    dims: dict[str, int]
    build_id: str
    iteration: int = 1
    rung: int = 0  # successive-halving rung (0: the screen, or the only rung)
    timing: dict[str, Any] | None = None  # overrides the spec's timing (screening rungs)
    # lineage columns of its row (parent_id, source_hash, submitter, claimed_methods, note);
    # None: the sweep's own source (kopt.driver.sweep.Driver's defaults)
    lineage: dict[str, Any] | None = None


class SearchStrategy(ABC):
    """Which candidates one iteration measures, and how, batch by batch.

    Per iteration the driver asks :meth:`select` for each device class's candidates,
    plans their jobs (with :meth:`first_timing`), hands them to :meth:`start`, then runs
    :meth:`generate`'s batches until it returns None, calling :meth:`notify` with each
    batch's ranking while :meth:`needs_ranking` says so. By default the selection is
    measured once, with the spec's timing.

    Args:
        max_candidates: cap per device class and iteration (None: no cap).
    """

    name = "base"

    @classmethod
    def create(cls, max_candidates: int | None, seed: int, timing: dict[str, Any]
               ) -> SearchStrategy:
        """This strategy for one sweep: ``max_candidates`` per device class and iteration
        (None: no cap), ``seed`` for those that draw at random, ``timing`` the space's (a
        dict of kopt.core.spec.Timing) for those that shorten it. The registry
        (:data:`kopt.strategy.REGISTRY`) makes every strategy through this."""
        return cls(max_candidates)

    def __init__(self, max_candidates: int | None = None):
        self.max_candidates = max_candidates
        self._next: list[Job] | None = None
        self.ranked: dict[str, list[dict[str, Any]]] = {}

    @abstractmethod
    def select(self, cands: Iterable[Candidate]) -> list[Candidate]:
        """The candidates to measure out of ``cands`` (the baseline first; a generator is
        fine: kopt.core.expand.Tally)."""

    def sample_reason(self) -> str:
        """Why an iteration measures fewer candidates than its space holds."""
        return "capped by --max-candidates"

    def first_timing(self) -> dict[str, Any] | None:
        """The timing of the first batch's jobs (None: the spec's)."""
        return None

    def start(self, jobs: list[Job]) -> None:
        """Begin an iteration with its planned ``jobs`` (the first batch)."""
        self._next = jobs

    def generate(self) -> list[Job] | None:
        """The next batch to measure, or None when the iteration is done."""
        out, self._next = self._next, None
        return out

    def needs_ranking(self) -> bool:
        """Whether :meth:`notify` wants the ranking of the batch just measured."""
        return False

    def notify(self, ranked: dict[str, list[dict[str, Any]]]) -> None:
        """The batch just measured, per device class: its correct candidates, best first
        (kopt.loop.state.rank rows: ``candidate_id``, ``is_baseline``, ``speedup``, ...)."""
        self.ranked = ranked
