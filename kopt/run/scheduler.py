"""The scheduler: moves one batch of jobs between the Builder and the Runner.

It only moves work (TVM MetaSchedule's task scheduler, for one batch): builds are
pipelined (every build submitted up front; each GPU starts on the first finished build,
while CPU devices wait for the batch's builds: a timing taken next to a compiler measures
the compiler), each job goes to the least-loaded live device of its class (at most
``inflight`` jobs each: backpressure), a device that dies puts its job back at the head
of its class's queue (at most ``MAX_JOB_ATTEMPTS`` runs each) and is replaced on its node
when that node lives, and a class with no live device left turns its jobs into ``lost``
outcomes. Every job ends as one call of ``emit`` (outcome or fault, never an exception).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import ray

from kopt.run.builder import Builder, BuildFuture
from kopt.run.callbacks import ProgressCallback
from kopt.run.runner import ACTOR_START_TIMEOUT_S, RunFuture, RunInput, Runner
from kopt.strategy.base import Job
from kopt.util.phases import PhaseRecorder
from workers.records import BuildJob, BuildResult, RunJob, RunOutcome
from workers.status import Status

MAX_JOB_ATTEMPTS = 3  # runs of one job when its device actor dies under it

# emit(job, outcome, device info or None) -> None: the job's row
Emit = Callable[[Job, RunOutcome, "dict | None"], None]


class Scheduler:
    """Builds, dispatches and collects one batch until every job has been emitted.

    Args:
        builder, runner: where builds and runs happen.
        common: the sweep-wide part of every run job (kopt.run.builder.job_base).
        emit: called once per job with its outcome (and its device's info when it ran).
        observers: progress hooks (on_build, on_fault).
        inflight: jobs queued per device (backpressure).
        wait_build_s: device -> seconds it sat idle while builds of its class compiled
            (accumulated across batches).
        hold_for_builds: dispatch nothing while builds are pending (CPU devices).
        lost_why: device class -> why its jobs could not run (kept across batches).
        tick: called once per turn of the wait loop (the store's time-based flush).
        phases: the run's time breakdown: builds, device busy and build-wait intervals.

    Attributes:
        compile_cpu_s: compiler seconds of the batch's builds (cache hits count 0).
    """

    def __init__(self, builder: Builder, runner: Runner, common: dict[str, Any], emit: Emit,
                 observers: list[ProgressCallback], inflight: int, wait_build_s: dict[int, float],
                 hold_for_builds: bool, lost_why: dict[str, str],
                 tick: Callable[[], None] | None = None,
                 phases: PhaseRecorder | None = None):
        self.builder, self.runner, self.common, self.emit = builder, runner, common, emit
        self.observers, self.inflight_max = observers, inflight
        self.wait_build_s, self.hold, self.lost_why = wait_build_s, hold_for_builds, lost_why
        self.by_build: dict[str, list[Job]] = {}
        self.pending: dict[Any, BuildFuture] = {}  # ref -> build under way
        self.hits: list[BuildFuture] = []  # finished without a task (cache hits)
        self.ready: dict[str, deque[Job]] = {}  # device class -> jobs ready to run
        self.inflight = {i: 0 for i in range(len(runner.infos))}
        self.running: dict[Any, RunFuture] = {}
        self.starting: dict[Any, tuple[int, float]] = {}  # replacement ref -> (device, t0)
        self.attempts: dict[str, int] = {}
        self.sent: dict[int, int] = {}  # device -> jobs sent in this batch
        self.waiting: set[int] = set()
        self.t_mark = time.perf_counter()
        self.tick = tick
        self.compile_cpu_s = 0.0
        self.phases = phases or PhaseRecorder()
        self.sent_at: dict[int, float] = {}  # id of a run future -> when it was sent

    # -- the batch ------------------------------------------------------------------------
    def run(self, todo: list[Job], builds: dict[str, BuildJob]) -> None:
        """Build, dispatch and collect ``todo`` (``builds``: the builds they need)."""
        for j in todo:
            self.by_build.setdefault(j.build_id, []).append(j)
        # baseline builds first: their timings are every speedup's denominator
        for b in sorted(builds, key=lambda b: not any(j.candidate.is_baseline
                                                      for j in self.by_build[b])):
            if self.builder.built_ok(b):  # built in an earlier rung
                self._enqueue(self.by_build[b])
            else:
                self._submit(builds[b])
        for fut in self.hits:  # in build order: the baseline first
            self._built(fut.build_id, fut.result)
        self._dispatch()
        self.waiting, self.t_mark = self._starved(), time.perf_counter()
        while self.pending or self.running or self.starting or any(self.ready.values()):
            self._step()

    def _step(self) -> None:
        waitables = list(self.pending) + list(self.running) + list(self.starting)
        done = ray.wait(waitables, num_returns=1, timeout=1.0)[0] if waitables else []
        t_now = time.perf_counter()
        for i in self.waiting:
            self.wait_build_s[i] = self.wait_build_s.get(i, 0.0) + t_now - self.t_mark
            self.phases.waited(i, self.runner.infos[i], self.t_mark, t_now)
        self.t_mark = t_now
        for ref in done:
            if ref in self.pending:
                self._collect_build(self.pending.pop(ref))
            elif ref in self.starting:
                self._collect_start(ref)
            else:
                self._collect_run(self.running.pop(ref))
        self._expire_starts()
        self._drain_orphans()
        self._dispatch()
        self.waiting = self._starved()
        if self.tick is not None:
            self.tick()

    # -- builds ---------------------------------------------------------------------------
    def _submit(self, job: BuildJob) -> None:
        fut = self.builder.submit(job)
        if fut.ref is None:
            self.hits.append(fut)
        else:
            self.pending[fut.ref] = fut

    def _collect_build(self, fut: BuildFuture) -> None:
        res = self.builder.collect(fut)
        if res is None:  # lost with its node: submitted again
            self.pending[fut.ref] = fut
            return
        self._built(fut.build_id, res)

    def _built(self, b: str, res: BuildResult) -> None:
        self.compile_cpu_s += 0.0 if res.cached else res.compile_s
        self.phases.build_done(res.compile_s or 0.0, bool(res.cached), b)
        for o in self.observers:
            if res.note:  # a cache entry that failed its check
                o.on_fault(f"build {b}: {res.note}")
            o.on_build(res, len(self.by_build[b]))
        if not res.ok:
            for job in self.by_build[b]:
                self.emit(job, RunOutcome.fault(Status.COMPILE_ERROR, res.error), None)
            return
        self._enqueue(sorted(self.by_build[b], key=lambda j: not j.candidate.is_baseline))

    def _enqueue(self, jobs: list[Job]) -> None:
        for job in jobs:
            self.ready.setdefault(job.device_class, deque()).append(job)

    # -- runs -----------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """One job at a time to the least-loaded device of its class (fewest in flight, then
        fewest sent), so that builds finishing one by one spread over the devices."""
        if self.hold and self.pending:
            return  # CPU devices share the cores the compilers use: time nothing meanwhile
        held = {k for k, _ in self.starting.values()}
        infos = self.runner.infos
        while True:
            free = [i for i in range(len(infos))
                    if i not in self.runner.dead and i not in held
                    and self.inflight[i] < self.inflight_max
                    and self.ready.get(infos[i]["device_class"])]
            if not free:
                return
            i = min(free, key=lambda k: (self.inflight[k], self.sent.get(k, 0)))
            job = self.ready[infos[i]["device_class"]].popleft()
            run = RunJob(job.job_key, job.build_id, job.dims, self.common, job.timing)
            sent = self.phases.job_sent()
            fut = self.runner.run([RunInput(i, run, self.builder.artifacts[job.build_id],
                                            job)])[0]
            if fut.ref is None:
                self.phases.job_done(i, infos[i], sent)
                self._finish_run(fut)
                continue
            self.sent_at[id(fut)] = sent
            self.running[fut.ref] = fut
            self.inflight[i] += 1
            self.sent[i] = self.sent.get(i, 0) + 1

    def _collect_run(self, fut: RunFuture) -> None:
        self.inflight[fut.device] -= 1
        self.runner.collect(fut)
        self.phases.job_done(fut.device, self.runner.infos[fut.device],
                             self.sent_at.pop(id(fut)), ok=fut.died is None)
        self._finish_run(fut)

    def _finish_run(self, fut: RunFuture) -> None:
        job: Job = fut.tag
        outcome = fut.outcome
        assert outcome is not None
        if fut.died is not None:
            self._device_died(fut.device, fut.died)
            n = self.attempts[job.job_key] = self.attempts.get(job.job_key, 1) + 1
            if n <= MAX_JOB_ATTEMPTS:
                self.ready.setdefault(job.device_class, deque()).appendleft(job)
                return
            outcome = RunOutcome.fault(Status.LOST, f"device actor died on each of "
                                       f"{MAX_JOB_ATTEMPTS} attempts; last: {fut.died}")
        self.emit(job, outcome, self.runner.infos[fut.device])

    # -- devices --------------------------------------------------------------------------
    def _device_died(self, i: int, err: BaseException) -> None:
        if i in self.runner.dead:
            return
        self.runner.dead.add(i)
        info = self.runner.infos[i]
        dc = info["device_class"]
        why = f"device actor {dc}#{i} on node {info.get('node_ip')} died: {type(err).__name__}"
        self.lost_why[dc] = why + "; no live device of that class was left to rerun it"
        for o in self.observers:
            o.on_fault(why)
        ref = self.runner.replace(i)
        if ref is not None:
            self.starting[ref] = (i, time.perf_counter())

    def _collect_start(self, ref: Any) -> None:
        i, _ = self.starting.pop(ref)
        if self.runner.started(i, ref):
            self.inflight[i] = 0
            for o in self.observers:
                o.on_fault(f"device actor {self.runner.infos[i]['device_class']}#{i} replaced")

    def _expire_starts(self) -> None:
        now_t = time.perf_counter()
        for ref, (i, t0) in list(self.starting.items()):
            if now_t - t0 > ACTOR_START_TIMEOUT_S:  # its node went away meanwhile
                self.starting.pop(ref)
                self.runner.abandon(i)

    def _orphaned(self, dc: str) -> bool:
        return not self.runner.live(dc) and not any(
            self.runner.infos[i]["device_class"] == dc for i, _ in self.starting.values())

    def _drain_orphans(self) -> None:
        for dc, q in self.ready.items():
            if q and self._orphaned(dc):
                while q:
                    why = self.lost_why.get(dc, f"no live device of class {dc}")
                    self.emit(q.popleft(), RunOutcome.fault(Status.LOST, why), None)

    def _starved(self) -> set[int]:
        """Live devices with nothing in flight that wait for builds: nothing ready while
        their class still compiles, or (``hold``: CPU devices, which share the compilers'
        cores) jobs ready but held until every pending build is done. Those held waits were
        missed: a CPU run's ``build_wait`` read 0.07 s where the device sat 20 s."""
        compiling = {j.device_class for f in self.pending.values()
                     for j in self.by_build[f.build_id]}
        held = self.hold and bool(self.pending)
        busy = {k for k, _ in self.starting.values()}
        out = set()
        for i, info in enumerate(self.runner.infos):
            if i in self.runner.dead or i in busy or self.inflight[i]:
                continue
            ready = bool(self.ready.get(info["device_class"]))
            if (ready and held) or (not ready and info["device_class"] in compiling):
                out.add(i)
        return out
