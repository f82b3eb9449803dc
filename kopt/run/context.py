"""What the NCU-guided loop's device work shares within one run (the run's builder,
runner, store writer and rows), so that each piece takes one argument."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.core.catalog import Catalog
from kopt.core.spec import Sweep
from kopt.run.builder import Builder
from kopt.run.callbacks import ProgressCallback
from kopt.run.runner import Runner
from kopt.store.database import Writer
from kopt.util.phases import PhaseRecorder


@dataclass
class RunContext:
    """One run's shared parts.

    Attributes:
        rows: job key -> the ``candidates`` row written in this run.
        agg: ``(iteration, device class, candidate id)`` -> aggregated NCU metrics of a
            candidate profiled in this run.
        unprofiled: the same keys -> why its profile holds no metric (the profiler's
            status and error; e.g. no NCU on the CPU backend).
        common: the sweep-wide part of every run job (kopt.run.builder.job_base).
        phases: the run's time breakdown (NCU captures and contests are device phases).
    """

    sweep: Sweep
    store: Path
    run_id: str
    writer: Writer
    builder: Builder
    runner: Runner
    catalog: Catalog
    backend: str = "cpu"
    observers: list[ProgressCallback] = field(default_factory=list)
    common: dict[str, Any] = field(default_factory=dict)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    agg: dict[tuple[int, str, str], dict[str, float]] = field(default_factory=dict)
    # (iteration, device class, candidate id) -> why a profile of it holds no metrics
    unprofiled: dict[tuple[int, str, str], str] = field(default_factory=dict)
    phases: PhaseRecorder = field(default_factory=PhaseRecorder)

    def fault(self, message: str) -> None:
        """Tell every observer about a fault."""
        for o in self.observers:
            o.on_fault(message)
