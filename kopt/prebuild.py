"""Iteration 1's builds started before Ray, on this machine (issue 14.2).

A cold ``kopt sweep`` on the embedded Ray used to submit its first builds only once Ray had
started (3.4-4.9 s on an H200 host) and then wait for Ray's fresh worker processes: its
first build result came 2-2.5 s after Ray was up, while the device, ready by then, waited.
When the devices are this machine's and the plan of iteration 1 is known before Ray (the
``predicted`` target of kopt.pipeline), :class:`PreBuilder` starts those builds at once in
a pool of local processes (``concurrent.futures``; workers.build does the work, into the
content-addressed build cache as any build). Once Ray is up the builder takes them over
(kopt.builder.RayBuilder.take_ahead): builds not started yet are cancelled and go to Ray,
the running ones are waited for, the finished ones are results of this run.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial

from kopt.phases import PhaseRecorder
from workers import build as wbuild
from workers.records import BuildJob, BuildResult

SPARE_CPUS = 3  # left to Ray's start, the prestarted harness and the driver


def ahead_workers(cpus: int | None = None) -> int:
    """Processes for the builds before Ray: this machine's CPUs less :data:`SPARE_CPUS`,
    at least 1."""
    return max(1, (cpus if cpus is not None else os.cpu_count() or 1) - SPARE_CPUS)


class PreBuilder:
    """Builds ``jobs`` in ``workers`` local processes from now on (spawned: the driver has
    threads by then); ``phases`` hears each submission and when each build finished.

    Never raises for a build: a compile error is a result, a build that cannot run (a
    worker that died) is simply not offered, and Ray builds it.
    """

    def __init__(self, jobs: list[BuildJob], phases: PhaseRecorder, workers: int):
        self.phases = phases
        self.results: dict[str, BuildResult] = {}
        self.jobs = {j.build_id: j for j in jobs}
        self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            max_workers=max(1, workers), mp_context=multiprocessing.get_context("spawn"))
        for j in self.jobs.values():
            phases.build_submitted()
            fut = self._pool.submit(wbuild.build_result, j)
            fut.add_done_callback(partial(self._done, j.build_id))

    def _done(self, b: str, fut: Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        self.phases.built_at(b)
        self.results[b] = fut.result()

    def finish(self) -> dict[str, BuildResult]:
        """Cancel the builds not started, wait for the running ones; returns every finished
        build's result by build id (their artifacts are in the build cache). Idempotent."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        return dict(self.results)
