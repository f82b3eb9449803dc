"""Progress callbacks for a running sweep (kept free of heavy imports: the CLI loads it).

These are callbacks, not measurements (TVM MetaSchedule calls its kind
``MeasureCallback``): they hear what the driver did. Measurement observers in Kernel
Tuner's sense, whose readings become columns of a candidate's row, are node-side:
workers.observers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kopt.core.bottleneck import Evidence
    from kopt.core.winner import Verdict
    from kopt.driver.sweep import RunSummary
    from kopt.loop.review import Verdict as Review
    from kopt.loop.state import IterState
    from workers.build import BuildResult


class ProgressCallback:
    """Hooks the driver calls as a sweep progresses (phases, builds, results, iterations,
    faults, contests, a winner the review gate rejected, the end). Every hook is a no-op
    here; subclass and override the ones you need. Formerly ``Observer``, still importable
    under that name."""

    def on_run(self, run_id: str, store: Path) -> None: ...
    def on_phase(self, label: str) -> None: ...
    def on_start(self, n_builds: int, n_jobs: int, devices: list[dict]) -> None: ...
    def on_build(self, result: BuildResult, n_jobs: int) -> None: ...
    def on_result(self, row: dict[str, Any]) -> None: ...
    def on_metrics(self, device_class: str, aliased: dict[str, str],
                   missing: list[str]) -> None: ...
    def on_evidence(self, device_class: str, evidence: Evidence,
                    triggered: dict[str, bool | None] | None) -> None: ...
    def on_iteration(self, device_class: str, state: IterState) -> None: ...
    def on_fault(self, message: str) -> None: ...
    def on_note(self, message: str) -> None: ...
    def on_contest(self, device_class: str, verdict: Verdict) -> None: ...
    def on_review(self, device_class: str, iteration: int, verdict: Review) -> None: ...
    def on_finish(self, summary: RunSummary) -> None: ...


Observer = ProgressCallback  # the old name, for code written before the rename
