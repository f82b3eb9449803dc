"""The sweep pipeline on Ray: expand -> build (CPU tasks) -> run (one actor per device) -> store.

Builds are Ray tasks of one CPU each, all submitted up front so that Ray runs
as many at once as there are CPUs; each GPU starts on the first finished
build (no compile phase to wait for). CPU devices wait for the batch's builds:
they would share the cores the compilers use, and a timing taken next to a
compiler measures the compiler. Every device actor holds at most
``inflight`` jobs (backpressure), so one slow device never hoards work.
Results are rows appended to the store as they arrive; a compile error, wrong
result, crash or timeout is a row with its status, never an exception.

The pieces, in TVM MetaSchedule's terms: kopt.run.builder (Builder: build inputs -> build
results), kopt.run.runner (Runner: run inputs -> futures of run results, on Ray device actors
or in process), kopt.run.scheduler (moves one batch between them), kopt.strategy (search
strategies: exhaustive, random, halving; the NCU-guided loop, its contests and profiles);
workers.records holds the typed records that cross processes. This module attaches to
Ray, checks what can be checked first, and drives a run (:class:`Driver`).
"""
from __future__ import annotations

import json
import os
import platform
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt import __version__
from kopt.core.bottleneck import triggers
from kopt.core.catalog import Catalog, load_catalog
from kopt.core.expand import (
    Context,
    SampleInfo,
    iter_candidates,
    space_digest,
    stable_hash,
)
from kopt.core.plausible import implausible
from kopt.core.spec import Space, Sweep, ref_functions
from kopt.driver.checks import (
    check_before_ray,
    classes_for,
    pick_backend,
    realtime_notes,
    resumable_run,
    spec_parts,
)
from kopt.loop.guided import (
    NcuLoop,
    close_iteration_on_devices,
    close_loop_on_devices,
    write_state,
)
from kopt.loop.profiling import profile, resolve
from kopt.loop.profiling import warm_up as warm_ncu
from kopt.loop.state import IterState, rank_rung
from kopt.run.builder import (
    RayBuilder,
    build_id,
    build_job,
    job_base,
)
from kopt.run.callbacks import ProgressCallback
from kopt.run.cluster import (
    cluster_address,
    cluster_total,
    prestart_sandboxes,
    ray_timeline,
    start_ray,
    working_dir_travels,
)
from kopt.run.context import RunContext
from kopt.run.devices import build_nodes, peaks, predicted_target
from kopt.run.runner import DeviceError, RayRunner, SweepError
from kopt.run.scheduler import Scheduler
from kopt.run.service import (
    QueueRunner,
    queue_backend,
    recorded_address,
    service_config,
    use_token,
)
from kopt.run.signals import received, signals_held, terminate
from kopt.store.database import Database, Writer, done_job_keys, interrupted, iteration_states
from kopt.store.files import RunLock, dumps, now, stored_json, unfit, warm_arrow
from kopt.strategy import STRATEGIES, Job, SearchStrategy, make
from kopt.util.phases import PhaseRecorder, adopted
from kopt.util.words import counted
from workers import build as wbuild
from workers import ncu as wncu
from workers.prestart import Prestarted
from workers.records import (
    INPUTS_FN,
    PROBE,
    REF_CHANGED,
    STRESS_INPUTS,
    RunJob,
    RunOutcome,
    TuningRecord,
    file_sha256,
)
from workers.status import Status

# tables whose rows a run keeps adding to, each a part file or more per process (a submitted
# try is one): merged, every row kept, once a run has HISTORY_PARTS of one, so that a loop
# of hundreds of tries does not make every query read hundreds of small files (a view reads
# each file's footer when it is made; on the H200 a submitted try's start grew from 0.65 s
# to 0.87 s over 12 tries, 2026-12-02)
HISTORY_TABLES = ("runs", "iterations", "versions", "provenance", "sources", "evidence",
                  "profiles", "reviews", "phases")
HISTORY_PARTS = 8


class ReferenceChanged(SweepError):
    """ref.py changed while the run measured (the driver's check of its digest, or a
    harness that refused a job for it): the run stops, interrupted, with every row measured
    before the change stored; the message is the one line to print."""


@dataclass
class RunSummary:
    """What a finished (or interrupted) sweep did. Times in seconds."""

    run_id: str
    sweep: str
    backend: str
    n_candidates: int
    n_jobs: int
    n_skipped: int
    status_counts: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    compile_cpu_s: float = 0.0
    device_busy_s: dict[str, float] = field(default_factory=dict)
    # actor -> seconds it sat idle, nothing ready for it, while builds of its class were
    # still compiling (the share of the run a device waited for the compilers)
    device_wait_build_s: dict[str, float] = field(default_factory=dict)
    devices: list[dict] = field(default_factory=list)
    interrupted: bool = False
    states: dict[str, IterState] = field(default_factory=dict)
    rungs: dict[int, dict[int, int]] = field(default_factory=dict)  # it -> rung -> candidates
    # the run's time breakdown (kopt.util.phases rows, as stored in ``phases``)
    phases: list[dict[str, Any]] = field(default_factory=list)


def new_run_id(sweep: str) -> str:
    """``YYYYmmdd-HHMMSS-<6 hex>`` (UTC), sortable by start time."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()
















class Driver:
    """Runs one sweep on the attached Ray cluster, for one or more iterations: the NCU-guided
    loop (kopt.loop.guided) over batches that a search strategy (kopt.strategy)
    chooses, moved by the scheduler (kopt.run.scheduler) between the builder (kopt.run.builder)
    and the device actors (kopt.run.runner).

    Args:
        sweep: the validated sweep.
        store: the store root.
        backend: ``auto``, ``cuda`` or ``cpu``.
        max_candidates: cap per device class and iteration (baseline always kept).
        resume: a run id to finish instead of starting a new run.
        cpu_devices: how many CPU device actors for the CPU backend.
        inflight: jobs queued per device actor (backpressure).
        iterations: loop iterations (default: the spec's ``iterations``).
        observers: progress hooks.
        catalog: the method catalog (default: the shipped one).
        strategy: ``exhaustive`` (every candidate, fully measured), ``random`` (a uniform
            sample: ``max_candidates``, or a quarter of the space, drawn with ``seed``) or
            ``halving`` (successive halving: every candidate screened with
            ``HALVING_SAMPLES[0]`` samples, the best 1/``HALVING_ETA`` re-measured with more,
            the last rung with the spec's timing; the baseline is in every rung).
        seed: the random strategy's sample.
        phases: the run's time breakdown so far (kopt.util.phases; default: a new one).
        prestarted: harnesses started before Ray (workers.prestart.Prestarter.started),
            offered to the device actors of the embedded instance.
        attach: the command's ``address`` and ``cluster`` as given (None: neither), kept
            in the run's ``options`` so that a resume command keeps its Ray head
            (kopt.store.files.recorded_resume_command).

    Raises:
        ValueError: an unknown strategy.
    """

    def __init__(self, sweep: Sweep, store: Path, backend: str = "auto",
                 max_candidates: int | None = None, resume: str | None = None,
                 cpu_devices: int = 1, inflight: int = 2, iterations: int | None = None,
                 observers: list[ProgressCallback] | None = None, catalog: Catalog | None = None,
                 strategy: str | None = None, seed: int | None = None,
                 submission: Any = None, phases: PhaseRecorder | None = None,
                 queue: dict[str, Any] | None = None,
                 prestarted: dict[str, Prestarted] | None = None,
                 attach: dict[str, str | None] | None = None):
        self.phases = phases or PhaseRecorder()
        self.attach = attach or {}  # --address / --cluster as given: kept in the run's options
        self.prestarted = prestarted
        self.queue = queue  # the warm service's config (kopt.run.service): its devices are used
        self.submission = submission  # kopt.loop.submitted.Submitted: one more iteration
        if strategy is not None and strategy not in STRATEGIES:
            raise ValueError(f"strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}")
        self._strategy_req, self._seed_req = strategy, seed
        self.strategy, self.seed = strategy or "exhaustive", seed or 0
        self.sweep, self.store = sweep, Path(store)
        self.backend_req, self.max_candidates = backend, max_candidates
        self.resume, self.cpu_devices, self.inflight = resume, cpu_devices, inflight
        self._iterations_req = iterations
        self.iterations = iterations or sweep.iterations
        self.observers = observers or []
        self.space_sizes: dict[str, int] = {}  # device class -> candidates in its last space
        # device class -> how its last space's sample was drawn by index (None: walked)
        self.samples: dict[str, SampleInfo | None] = {}
        self.catalog = catalog or load_catalog()
        self.search: SearchStrategy | None = None
        self.builder = RayBuilder(self.phases)
        self._lost: dict[str, str] = {}  # device class -> why its jobs could not run
        self.wait_build_s: dict[int, float] = {}  # device slot -> s idle waiting for builds
        self._ident_ref: Any = None  # the compiler-identity task started with the devices
        self._predicted: list[dict[str, Any]] = []  # device targets built for early
        # paths relative to the sweep folder when it travels as the runtime_env working_dir
        # (a warm service's devices read the sweep where this driver does: absolute paths)
        self.rel_paths = working_dir_travels() if not queue else False

    # -- planning ------------------------------------------------------------------------
    def _plan(self, space: Space, classes: dict[str, dict], compilers: dict[str, str],
              digest: str, iteration: int, ctxs: dict[str, Context], baseline_only: bool = False
              ) -> tuple[list[Job], dict[str, wbuild.BuildJob], dict[str, int]]:
        """Iteration ``iteration``'s jobs and builds on each device class of ``classes``
        (the search strategy's choice of its space), and the candidates per class."""
        search = self.search or make(self.strategy, self.max_candidates, self.seed,
                                     space.timing.model_dump())
        jobs: list[Job] = []
        builds: dict[str, wbuild.BuildJob] = {}
        counts: dict[str, int] = {}
        source = space.source_text()
        for dc, info in classes.items():
            # lazy: with a cap, only the sample is held, and a space too large to walk is
            # sampled by index (kopt.core.expand.cap)
            stream = iter_candidates(space, self.catalog, info["sm"], source_digest=digest,
                                     ctx=ctxs[dc])
            cands = [next(stream)] if baseline_only else search.select(stream)
            counts[dc] = len(cands)
            self.space_sizes[dc] = stream.n
            self.samples[dc] = stream.sampled
            plat = info.get("platform") or ""
            timing = None if baseline_only else search.first_timing()
            for c in cands:
                bid = build_id(space, c, digest, compilers[plat], plat)
                builds[bid] = self.builder.plan(build_job(space, c, bid, source), plat)
                jobs += [Job(stable_hash({"candidate": c.candidate_id, "dims": space.dims[di],
                                          "device_class": dc, "iteration": iteration,
                                          "build": bid}),
                             c, dc, di, space.dims[di], bid, iteration, timing=timing)
                         for di in c.dims_ok]
        return jobs, builds, counts

    def _note_sample(self, iteration: int, counts: dict[str, int]) -> None:
        """A note per device class whose iteration runs a sample of its space (`_plan`'s
        counts against the space's size): how large the space was and what capped it."""
        for dc, n in counts.items():
            drawn = self.samples.get(dc)
            total = self.space_sizes.get(dc, n)
            if drawn is None and total <= n:
                continue
            why = self.search.sample_reason() if self.search else "capped by --max-candidates"
            where = f" ({dc})" if len(counts) > 1 else ""
            line = (f"{n:,} of {total:,} candidates ({why})" if drawn is None else
                    f"{n:,} of {drawn.configs:,} launch configs before restrictions ({why}; "
                    f"drawn at random, too many to walk: {drawn.passed:,} of {drawn.draws:,} "
                    "draws passed the restrictions)")
            for o in self.observers:
                o.on_note(f"iteration {iteration}{where}: {line}")

    # -- the run -------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """Run the sweep to the end, holding the run's lock (one run, one writer); returns
        its summary.

        Raises:
            kopt.store.files.RunLocked: another process is writing the run (--resume).
            SweepError / SpecError: before anything is measured.
            ReferenceChanged (a SweepError): ref.py was edited mid-run; the run is stored
                as interrupted.
            KeyboardInterrupt: after flushing every measured row (resume with --resume).
        """
        run_id = self.resume or new_run_id(self.sweep.name)
        # a submission's process holds the lock from its record on (a concurrent retry that
        # the lock refused once used up a try)
        with RunLock(self.store, run_id, reuse=self.submission is not None):
            return self._run(run_id)

    def _run(self, run_id: str) -> RunSummary:
        t_start = time.perf_counter()
        self.phases.begin("run")
        prev, stored = self._resume()
        backend = pick_backend(self.sweep, self.backend_req)
        self.space = space = self.sweep.space(backend)
        self.digest = space_digest(space)
        self.search = make(self.strategy, self.max_candidates, self.seed,
                           space.timing.model_dump())
        env = self._start(backend)
        self._open_run(run_id, backend, env)
        summary = self.summary
        self.loop = NcuLoop(list(self.classes), self.iterations, stored)
        self.ncu_names = resolve(self.ctx) if backend == "cuda" else {}
        # a sweep with a CUDA form (the decode sweeps) keeps `ncu:` for it: no note on its
        # CPU runs, where it said the same on every run
        if backend != "cuda" and "ncu" in self.sweep.raw and "cuda" not in self.sweep.spaces:
            for o in self.observers:
                o.on_note(f"{self.sweep.spec_path}: `ncu:` is for CUDA candidates; the "
                          f"{backend} backend takes no NCU profile, so the loop picks the next "
                          "methods without a measured bottleneck")
        warm_ncu(self.ctx, self.ncu_names)
        try:
            self._iterate(bool(stored))
            self._time_references()  # an iteration that measured nothing left them
            close_loop_on_devices(self.ctx, self.loop)
        except ReferenceChanged:
            self._interrupted(t_start, prev)
            raise
        except (KeyboardInterrupt, Exception) as e:  # Exception: DuckDB's form of a Ctrl-C
            if not interrupted(e):
                raise
            self._interrupted(t_start, prev)
            if isinstance(e, KeyboardInterrupt):
                raise
            # Ctrl-C inside a DuckDB query comes out as DuckDB's error: one interrupt
            raise KeyboardInterrupt() from e
        finally:
            self.phases.begin("stop_devices")
            self._stop_devices()
            self.phases.end("stop_devices")
        summary.states = self.loop.states
        summary.wall_s = time.perf_counter() - t_start
        self._finish(prev)
        return summary

    def _resume(self) -> tuple[dict[str, Any], dict[tuple[int, str], IterState]]:
        """Take a resumed run's options (refusing ones that differ), the jobs it stored and
        its iterations' states; returns its last record (its figures add up) and those
        states."""
        self.done: set[str] = set()
        if not self.resume:
            return {}, {}
        rec = resumable_run(self.store, self.resume, self.sweep)
        if self.backend_req == "auto":
            self.backend_req = rec["backend"]
        opts = stored_json(rec.get("options"), "options")
        for name, mine in (("max_candidates", self.max_candidates),
                           ("iterations", self._iterations_req),
                           ("strategy", self._strategy_req), ("seed", self._seed_req)):
            if mine is not None and mine != opts.get(name):
                raise SweepError(f"--resume {self.resume}: that run was started with "
                                 f"{name} {opts.get(name)}, not {mine}; resume without "
                                 f"the option (the run keeps its own)")
        self.max_candidates = opts.get("max_candidates")
        self.strategy = opts.get("strategy") or "exhaustive"
        self.seed = opts.get("seed") or 0
        self.iterations = opts.get("iterations") or self.iterations
        self.cpu_devices = opts.get("cpu_devices") or self.cpu_devices
        self.done = done_job_keys(self.store, self.resume)
        return rec, {(it, dc): IterState.from_json(js)
                     for it, dc, js in iteration_states(self.store, self.resume)}

    def _start(self, backend: str) -> dict[str, Any]:
        """Start the devices (and, meanwhile, iteration 1's builds where its plan is known),
        find the compilers and check the reference; returns the run's environment."""
        space = self.space
        self._early = not self.resume and not (backend == "cuda"
                                               and self.sweep.ncu.profile_baseline)
        self.runner = (QueueRunner(backend, self.queue) if self.queue
                       else RayRunner(backend, self.cpu_devices,
                                      self.prestarted if not self.resume else None))
        if isinstance(self.runner, QueueRunner):
            self.builder.use_actors(self.runner.builders(), self.runner.who)
        self.phases.begin("devices")
        infos = self.runner.start(self._while_devices_start, self.phases)
        self.phases.end("devices", detail=counted(len(infos), "device actor") + (
            f" (warm: kopt service at {self.queue['address']})" if self.queue else ""))
        if isinstance(self.runner, QueueRunner):
            self.runner.check_reads(self.sweep.reference)
        self.classes, left = classes_for(space, self.runner.classes())
        for note in left + realtime_notes(space, infos):
            for o in self.observers:
                o.on_note(note)
        platforms = {i.get("platform") or "" for i in infos}
        try:
            self.builder.set_routes(build_nodes(self.runner.nodes, platforms))
        except ValueError as e:
            raise SweepError(f"cannot build for every device: {e}") from None
        self.compilers, env = self.builder.identities(space.toolchain, platforms,
                                                      self._ident_ref)
        if self._early and not all({"sm": i.get("sm"), "platform": i.get("platform")}
                                   in self._predicted for i in infos):
            # iteration 1's plan is known now: compile while the devices compute the reference
            self.builder.start_early(self._plan(space, self.classes, self.compilers,
                                                self.digest, 1, {dc: IterState().context()
                                                                 for dc in self.classes})[1])
        self._common = job_base(self.sweep, space, self.rel_paths)
        self._check_reference()
        return {**env, "cluster_cpus": cluster_total("CPU")}

    def _while_devices_start(self) -> None:
        """Work that needs no device info, while the actors import torch and run the
        reference: the compiler identity and, on one node (its devices' arch is known from
        nvidia-smi), iteration 1's builds."""
        nodes = self.runner.nodes
        if len({n.platform for n in nodes}) <= 1:
            self._ident_ref = self.builder.start_identity(self.space.toolchain)
        target = predicted_target(self.runner.backend, nodes) if self._early else None
        if target is None:
            return
        ident = wbuild.identity(self.space.toolchain)  # the driver's node's (run_sweep began it)
        self.builder.start_early(self._plan(
            self.space, {"predicted": target}, {target["platform"]: ident}, self.digest, 1,
            {"predicted": IterState().context()})[1])
        self._predicted.append(target)

    def _check_reference(self) -> None:
        """Run ref.py's inputs() and reference() once per dims on one device of each class
        before anything is built; a failure stops the sweep with an error naming ref.py.
        The same for what contests check contenders on later (:meth:`_reference_probes`):
        ``stress_inputs()`` at every dims where ref.py defines it, and inputs() at each of
        sweep.yaml's ``check_dims``; a ref.py failing there would otherwise drop every
        contender of the run's first contest. The probes make the check's two sets each and
        leave the harness's cached sets alone (those a prestarted harness made ahead stay).
        With ``reference_timing`` (the default), the reference is timed where this run has
        no ``reference`` row for the class and problem size yet (a resumed run, a submitted
        iteration reuse the one stored) once the first iteration's candidates are measured
        (:meth:`_time_references`)."""
        seen: set[str] = set()
        self.phases.begin("reference")
        self._ref_todo: list[tuple[str, dict[str, int]]] = []
        timed = Database(self.store).timed_references(self.resume) if self.resume else set()
        # (dims, job change, what runs, whether the reference is timed at these dims)
        checks = [(*p, False) for p in self._reference_probes()] + [
            (d, {}, "inputs()/reference()", True) for d in self.space.dims]
        for dc in self.classes:
            i = self.runner.live(dc)[0]
            self.phases.begin("reference", self.runner.infos[i])
            for d, change, what, tuned in checks:
                res = self._prepare_reference(i, dc, d, change)
                if res["status"] != Status.OK:
                    raise SweepError(f"{self.sweep.reference}: {what} failed for dims {d} on "
                                     f"{dc} ({res['status']}): {res.get('error')}; nothing "
                                     "was built or measured")
                for note in res.get("notes") or []:
                    if note not in seen:
                        seen.add(note)
                        for o in self.observers:
                            o.on_note(note)
                if tuned and self.sweep.reference_timing and (dc, dumps(d)) not in timed:
                    self._ref_todo.append((dc, d))
            self.phases.end("reference", self.runner.infos[i])
        self.phases.end("reference")

    def _reference_probes(self) -> list[tuple[dict[str, int], dict[str, Any], str]]:
        """``(dims, job change, what runs)`` for each extra check of ref.py before anything
        is built: its ``stress_inputs()`` with reference() at every dims (where ref.py
        defines it; seed 0, the contests draw theirs), and inputs() with reference() at
        each of the space's ``check_dims`` not among its dims."""
        probes = [(alt, {PROBE: True}, "inputs()/reference() at sweep.yaml's check_dims")
                  for alt in self.space.check_dims if alt not in self.space.dims]
        if STRESS_INPUTS in ref_functions(self.sweep.reference):
            probes += [(d, {INPUTS_FN: STRESS_INPUTS, "seed": 0, PROBE: True},
                        f"{STRESS_INPUTS}()/reference()") for d in self.space.dims]
        return probes

    def _prepare_reference(self, i: int, dc: str, dims: dict[str, int],
                           change: dict[str, Any]) -> dict[str, Any]:
        """Device ``i`` (class ``dc``) makes ref.py's input sets and reference outputs at
        ``dims`` with ``change`` applied to the job (workers.device_actor ``prepare``); its
        outcome dict. Raises SweepError when the device was lost doing it."""
        try:
            return self.runner.call(i, "prepare", {
                **RunJob("reference", "", dims, self._common).payload(), **change})
        except DeviceError as e:  # its node died before anything was built
            raise SweepError(f"the {dc} device checking ref.py at dims {dims} was lost "
                             f"({e}); nothing was built or measured: run the sweep "
                             "again") from None

    def _time_references(self) -> None:
        """Time the references :meth:`_check_reference` left to do, on a live device of
        each class, and write their ``reference`` rows: after the first iteration's
        candidates, so that the first result does not wait for them (0.2 s of an H200
        host's queued sweep, docs/verified/2026-12-01-h200-targets.md). A device lost while
        it times one (its node died) leaves a ``lost`` row and the next live device of the
        class times it; a class with no live device left gets a note instead."""
        todo, self._ref_todo = self._ref_todo, []
        rows = []
        for dc, d in todo:
            live = self.runner.live(dc)
            if not live:
                for o in self.observers:
                    o.on_note(f"the reference could not be timed at dims {d} on {dc}: no "
                              "device of the class is left")
            for i in live:
                info = self.runner.infos[i]
                self.phases.begin("reference", info)
                rows.append(self._time_reference(i, d))
                self.phases.end("reference", info, detail="ref.py timed")
                if rows[-1]["status"] != Status.LOST:
                    break
        if rows:
            self.ctx.writer.add("reference", [{**r, "run_id": self.ctx.run_id,
                                               "created_at": now()} for r in rows])
            self.ctx.writer.flush()

    def _time_reference(self, i: int, dims: dict[str, int]) -> dict[str, Any]:
        """The ``reference`` row of device ``i``'s class at ``dims``: ref.py's contender (else
        reference) timed by the harness as candidates are (workers.harness
        ``Harness.time_reference``), with the sweep's work and the device's peaks for the
        dtype of solve's first output (kopt.run.devices.peaks). A failure is a row with its
        status and a note, never a stop."""
        info = self.runner.infos[i]
        job = {**RunJob("reference", "", dims, self._common).payload(), "job_key": "reference"}
        try:
            res = self.runner.call(i, "time_reference", job)
        except DeviceError as e:  # its node died (test_cluster: killed mid-sweep)
            res = {"status": Status.LOST, "error": str(e)}
        dtype = next((a.dtype for a in self.space.signature.outputs), None)
        flops, nbytes = self.sweep.work(dims)
        peak_tflops, peak_gbps = peaks(info.get("name"), dtype)
        if res.get("status") != Status.OK:
            for o in self.observers:
                o.on_note(f"the reference could not be timed at dims {dims} on "
                          f"{info['device_class']} ({res.get('status')}): {res.get('error')}")
        cols = ("median_ms", "min_ms", "iqr_ms", "mean_ms", "n_samples", "samples_ms",
                "warmup_runs", "throttled", "sm_clock_mhz", "max_abs_err", "max_rel_err",
                "impl", "error", "wall_s")
        return {"sweep": self.sweep.name, "dims": dumps(dims), "backend": self.space.backend,
                "device_class": info["device_class"], "device_name": info.get("name"),
                "node": info.get("node_ip"), "device_id": info.get("device_id"),
                "status": str(res.get("status") or Status.ERROR),
                **{c: res.get(c) for c in cols}, "flops": flops, "bytes": nbytes,
                "dtype": dtype, "peak_tflops": peak_tflops, "peak_gbps": peak_gbps}

    def _open_run(self, run_id: str, backend: str, env: dict[str, Any]) -> None:
        """The run's writer, context, summary and ``running`` record."""
        sweep, infos = self.sweep, self.runner.infos
        writer = Writer(self.store, sweep.name, run_id)
        options = {"backend": backend, "max_candidates": self.max_candidates,
                   "strategy": self.strategy, "seed": self.seed,
                   "cpu_devices": self.cpu_devices, "resume": self.resume,
                   "iterations": self.iterations,
                   "queue": self.queue["address"] if self.queue else None,
                   "address": self.attach.get("address"),
                   "cluster": self.attach.get("cluster"),
                   # the kopt service's ready driver (kopt.cli.launchpad) or the command's own
                   "driver": "launchpad" if adopted() else "command"}
        self.run_row = {"run_id": run_id, "sweep": sweep.name, "spec_hash": sweep.spec_hash,
                        "spec_parts": dumps(spec_parts(sweep)),
                        "sweep_dir": str(sweep.root), "backend": backend,
                        "devices": dumps(infos), "options": dumps(options),
                        "host": platform.node(), "env": dumps(env), "kopt_version": __version__}
        writer.add("runs", [{**self.run_row, "event": "running", "created_at": now()}])
        writer.add("sources", [{"source_hash": self.digest, "name": self.space.source.name,
                                "text": self.space.source_text(), "created_at": now()}])
        writer.flush()
        for o in self.observers:
            o.on_run(run_id, self.store)
        self.summary = RunSummary(run_id, sweep.name, backend, 0, 0, 0, devices=infos)
        self.ctx = RunContext(sweep, self.store, run_id, writer, self.builder, self.runner,
                              self.catalog, backend, self.observers, self._common,
                              phases=self.phases)

    # -- iterations ----------------------------------------------------------------------
    def _iterate(self, resumed_states: bool) -> None:
        """The baseline's profile (when the spec asks for it), then every iteration."""
        if self.submission is not None:
            self._submitted(self.submission)
            return
        if self.ncu_names and self.sweep.ncu.profile_baseline and not resumed_states:
            self._profile_baseline()
        for it in range(1, self.iterations + 1):
            if not self._iteration(it):
                break

    def _iteration(self, it: int) -> bool:
        """Plan, measure and close iteration ``it``; False when the loop has stopped."""
        loop = self.loop
        active = loop.active()
        if not active:
            return False
        jobs, builds, counts = self._plan(self.space, {dc: self.classes[dc] for dc in active},
                                          self.compilers, self.digest, it,
                                          loop.contexts(active))
        self._note_sample(it, counts)
        loop.exhausted(it, counts)
        jobs = [j for j in jobs if not loop.states[j.device_class].stop]
        if not jobs:
            return False
        self.summary.n_candidates += sum(n for dc, n in counts.items()
                                         if not loop.states[dc].stop)
        self._measure(it, jobs, builds)
        self._time_references()
        self._close(it, [d for d in active if not loop.states[d].stop])
        return True

    def _submitted(self, sub: Any) -> None:
        """One more iteration of a stored run: the versions of ``sub``
        (kopt.loop.submitted.Submitted) against their parent, closed as any iteration."""
        self.search = sub
        it, classes = sub.iteration, list(self.classes)
        sub.prepare(self.loop, classes)
        jobs, builds = sub.plan_jobs(self, classes)
        self.summary.n_candidates += len({(j.device_class, j.candidate.candidate_id)
                                          for j in jobs})
        self._measure(it, jobs, builds)
        self._time_references()
        self.builder.build(list(sub.prebuilds.values()))  # what its contests re-measure
        self._close(it, classes)

    def _close(self, it: int, classes: list[str]) -> None:
        """Close iteration ``it`` of each class (a resumed run's stored state where it has
        one), write its state and tell the observers."""
        loop = self.loop
        for dc in classes:
            if loop.resumed(it, dc):
                continue
            st = close_iteration_on_devices(self.ctx, loop, it, dc, self.ncu_names.get(dc))
            write_state(self.ctx, dc, st)
            self.ctx.writer.flush()
            for o in self.observers:
                o.on_iteration(dc, st)

    def _measure(self, it: int, jobs: list[Job], builds: dict[str, wbuild.BuildJob]) -> None:
        """Measure iteration ``it``'s batches as the search strategy generates them
        (successive halving: one per rung, each ranked for the next)."""
        search = self.search
        assert search is not None
        search.start(jobs)
        while (batch := search.generate()) is not None:
            rung = batch[0].rung
            self.summary.rungs.setdefault(it, {})[rung] = len(
                {(j.device_class, j.candidate.candidate_id) for j in batch})
            self._run_batch(f"it {it} rung {rung}" if rung else f"it {it}", batch, builds)
            if search.needs_ranking():
                search.notify({dc: rank_rung(self.store, self.ctx.run_id, it, dc, rung)
                               for dc in sorted({j.device_class for j in batch})})

    def _profile_baseline(self) -> None:
        """Measure and profile the baseline before iteration 1, so that its NCU evidence
        (bottleneck, triggers) prunes iteration 1's scan as it does later ones'."""
        jobs, builds, _ = self._plan(self.space, self.classes, self.compilers, self.digest, 1,
                                     {dc: Context() for dc in self.classes}, baseline_only=True)
        for o in self.observers:
            o.on_phase("baseline")
            o.on_start(len(builds), len(jobs), self.runner.infos)
        self._loop(jobs, builds)
        self.done.update(j.job_key for j in jobs)
        self.ctx.writer.flush()
        for dc in self.classes:
            base = [j for j in jobs if j.device_class == dc]
            row = self.ctx.rows.get(base[0].job_key) if base else None
            if row is not None and row["status"] == Status.OK:
                self._baseline_evidence(dc, row)

    def _baseline_evidence(self, dc: str, row: dict[str, Any]) -> None:
        cid = row["candidate_id"]
        ev = profile(self.ctx, 1, dc, [{"candidate_id": cid, "build_id": row["build_id"],
                                        "is_baseline": True}], self.ncu_names.get(dc)).get(cid)
        if ev is None or not ev.scores:
            return
        st = IterState(bottleneck_before=ev.bottleneck, scores_before=ev.scores,
                       triggered=triggers(self.ctx.agg[(1, dc, cid)], self.catalog, ev))
        self.loop.states[dc] = st
        for o in self.observers:
            o.on_evidence(dc, ev, st.triggered)

    # -- batches -------------------------------------------------------------------------
    def _run_batch(self, label: str, jobs: list[Job], builds: dict[str, wbuild.BuildJob]
                   ) -> None:
        """Run the ``jobs`` not already stored (``done``) through :meth:`_loop` and flush the
        store; counts them in the summary and announces the batch to the observers."""
        self.summary.n_jobs += len(jobs)
        todo = [j for j in jobs if j.job_key not in self.done]
        self.summary.n_skipped += len(jobs) - len(todo)
        need = {j.build_id for j in todo}
        for o in self.observers:
            o.on_phase(label)
            o.on_start(len(need - set(self.builder.artifacts)), len(todo), self.runner.infos)
        self._loop(todo, {b: builds[b] for b in need})
        self.ctx.writer.flush()

    def _loop(self, todo: list[Job], builds: dict[str, wbuild.BuildJob]) -> None:
        """Build, dispatch and collect ``todo`` until every job has its row (kopt.run.scheduler:
        lost builds resubmitted, dead devices replaced, orphaned jobs ``lost``)."""
        sched = Scheduler(self.builder, self.runner, self._common, self._emit, self.observers,
                          self.inflight, self.wait_build_s, self.space.backend == "cpu",
                          self._lost, self._tick, self.phases)
        sched.run(todo, builds)
        self.summary.compile_cpu_s += sched.compile_cpu_s

    def _tick(self) -> None:
        self.ctx.writer.add("candidates", [])  # time-based flush
        if self._ref_moved():
            raise ReferenceChanged(self._ref_changed())

    def _ref_moved(self) -> bool:
        """Whether ref.py's digest is no longer the one the run started with."""
        return file_sha256(self.sweep.reference) != self._common["reference_sha256"]

    def _ref_changed(self) -> str:
        """The one line a run stopped by an edited ref.py ends with."""
        return (f"{self.sweep.reference}: {REF_CHANGED}; rows judged against two "
                "references would not compare, so the run stops here with every row "
                f"measured before the change stored (run {self.ctx.run_id}, interrupted): "
                "put ref.py back and resume it (`kopt sweep --resume "
                f"{self.ctx.run_id}`), or start a new run")

    def _emit(self, job: Job, outcome: RunOutcome, info: dict | None) -> None:
        """Store the row of ``job`` (one per job key, whatever Ray retried)."""
        if job.job_key in self.ctx.rows:
            return
        # a harness that refused the job for a changed ref.py: the driver's own digest of
        # the file decides (candidate code can print that text too); not stored, so that
        # --resume measures the job again
        if outcome.error and REF_CHANGED in outcome.error and self._ref_moved():
            raise ReferenceChanged(self._ref_changed())
        row = self._record(job, outcome, info).row(outcome.observed())
        bad = unfit("candidates", row)
        if bad:  # candidate code can write the harness's answer: one bad figure (n_samples
            # 2**40, red-team round 10) failed the Parquet write and lost the run's rows
            row = self._record(job, RunOutcome.fault(Status.ERROR, (
                f"the harness answered {bad}, which the candidates table cannot hold (a "
                "figure of another type or out of range: candidate code can write the "
                "harness's answer pipe); none of its figures are kept")), info).row()
        self.ctx.writer.add("candidates", [row])  # buffered first: a signal between the two
        self.ctx.rows[job.job_key] = row  # must not leave a row counted but never written
        counts = self.summary.status_counts
        counts[row["status"]] = counts.get(row["status"], 0) + 1
        for o in self.observers:
            o.on_result(row)

    def _record(self, job: Job, o: RunOutcome, info: dict | None) -> TuningRecord:
        """The tuning record of ``job``: its candidate, build, device and outcome."""
        c, info = job.candidate, info or {}
        meta = self.builder.results.get(job.build_id)
        work = self.sweep.work(job.dims)
        status, error = o.status, o.error or None
        if status == Status.OK:  # the physical plausibility gate
            dtype = next((a.dtype for a in self.space.signature.outputs), None)
            why = implausible(o.median_ms, work[1], peaks(info.get("name"), dtype)[1])
            status, error = (Status.SUSPECT, why) if why else (status, error)
        return TuningRecord(
            run_id=self.ctx.run_id, sweep=self.sweep.name, iteration=job.iteration,
            rung=job.rung, job_key=job.job_key, candidate_id=c.candidate_id,
            build_id=job.build_id, compute_method=c.triple[0], memory_method=c.triple[1],
            latency_method=c.triple[2], is_baseline=c.is_baseline, params=dumps(c.params),
            defines=dumps(c.defines), dims=dumps(job.dims), backend=self.space.backend,
            arch=c.target, device_class=job.device_class, device_name=info.get("name"),
            node=info.get("node_ip"), node_id=info.get("node_id"),
            device_id=info.get("device_id"), status=status, error=error,
            compile_s=meta.compile_s if meta else None,
            build_cached=meta.cached if meta else None,
            registers=meta.registers if meta else None,
            smem_bytes=meta.smem_bytes if meta else None,
            spill_bytes=meta.spill_bytes if meta else None, max_abs_err=o.max_abs_err,
            max_rel_err=o.max_rel_err,
            median_ms=o.median_ms, min_ms=o.min_ms, iqr_ms=o.iqr_ms, mean_ms=o.mean_ms,
            n_samples=o.n_samples, samples_ms=o.samples_ms, sm_clock_mhz=o.sm_clock_mhz,
            temperature_c=o.temperature_c, throttle_reasons=o.throttle_reasons,
            throttled_samples=o.throttled_samples, throttled=o.throttled, power_w=o.power_w,
            wall_s=o.wall_s,
            flops=work[0], bytes=work[1], input_sets=o.input_sets, full_ms=o.full_ms,
            escaped_ms=o.escaped_ms, leaked_bytes=o.leaked_bytes, created_at=now(),
            device_start=_utc(o.started_at), device_end=_utc(o.ended_at),
            isolation=info.get("isolation"),
            **(job.lineage or {"source_hash": self.digest, "submitter": "sweep"}))

    # -- the end -------------------------------------------------------------------------
    def _stop_devices(self) -> None:
        """Stop every device actor; their busy and build-wait seconds go to the summary."""
        for i, busy in self.runner.close().items():
            name = f"{self.runner.infos[i]['device_class']}#{i}"
            self.summary.device_busy_s[name] = busy
            self.summary.device_wait_build_s[name] = round(self.wait_build_s.get(i, 0.0), 3)

    def _interrupted(self, t_start: float, prev: dict[str, Any]) -> None:
        """Flush every measured row and mark the run interrupted (resumable)."""
        s, writer = self.summary, self.ctx.writer
        s.interrupted = True
        with signals_held():  # a second Ctrl-C must not cut the flush: nothing lost
            writer.flush()
            writer.add("runs", [{**self.run_row, "event": "interrupted", "created_at": now(),
                                 "n_candidates": s.n_candidates, "n_jobs": s.n_jobs,
                                 "wall_s": time.perf_counter() - t_start
                                 + (prev.get("wall_s") or 0.0)}])
            self._write_phases()

    def _finish(self, prev: dict[str, Any]) -> None:
        """The ``finished`` record (a resumed run's figures add up), the store compacted,
        the observers told."""
        self.phases.begin("store")
        s, writer = self.summary, self.ctx.writer
        if not (prev.get("status") == "finished" and s.n_skipped == s.n_jobs):
            # resuming a finished run with nothing left to do leaves its record alone
            writer.add("runs", [{
                **self.run_row, "event": "finished", "created_at": now(),
                "n_candidates": s.n_candidates, "n_jobs": s.n_jobs,
                "wall_s": s.wall_s + (prev.get("wall_s") or 0.0),
                "compile_cpu_s": s.compile_cpu_s + (prev.get("compile_cpu_s") or 0.0),
                "device_busy": _totals(prev, "device_busy", s.device_busy_s),
                "device_wait_build": _totals(prev, "device_wait_build",
                                             s.device_wait_build_s)}])
        writer.compact("candidates", ["run_id", "job_key"])
        writer.compact("contests", ["run_id", "iteration", "device_class", "dims",
                                    "candidate_id"])
        writer.compact("reference", ["run_id", "device_class", "dims"])
        writer.compact("metrics", ["run_id", "iteration", "candidate_id", "device_class", "dims",
                                   "kernel", "launch", "metric"])
        for table in HISTORY_TABLES:  # every row kept: a long loop's parts merged now and then
            writer.compact(table, min_parts=HISTORY_PARTS)
        writer.flush()
        self.phases.end("store")
        self._write_phases()
        for o in self.observers:
            o.on_finish(s)

    def _write_phases(self) -> None:
        """Close the run's phases (``run`` and the ``end`` point) and write them as the
        ``phases`` rows of this process (also the summary's)."""
        self.phases.end("run")
        t = self.phases.now()
        self.phases.span("end", t, t)
        self.summary.phases = self.phases.table_rows(self.ctx.run_id, self.sweep.name)
        self.ctx.writer.add("phases", self.summary.phases)
        self.ctx.writer.flush()




def _totals(prev: dict[str, Any], key: str, mine: dict[str, float]) -> str:
    """A resumed run's ``key`` (JSON: name -> seconds) plus this part's ``mine``."""
    out = dict(json.loads(prev.get(key) or "{}"))
    for k, v in mine.items():
        out[k] = out.get(k, 0.0) + v
    return dumps(out)


def _utc(epoch_s: float | None) -> Any:
    """Epoch seconds as a UTC datetime (the store's timestamps); None stays None."""
    import datetime as dt

    return None if epoch_s is None else dt.datetime.fromtimestamp(epoch_s, dt.timezone.utc)


























def run_sweep(sweep: Sweep, store: Path, *, backend: str = "auto",
              max_candidates: int | None = None, resume: str | None = None,
              cpu_devices: int = 1, address: str | None = None, iterations: int | None = None,
              observers: list[ProgressCallback] | None = None, cluster: str | None = None,
              strategy: str | None = None, seed: int | None = None,
              queue: bool = False) -> RunSummary:
    """Attach to (or start) Ray and run ``sweep``; see :class:`Driver`.

    ``cluster`` (a cluster-launcher YAML) or ``address`` attach to a running cluster;
    neither starts an embedded local Ray instance. ``queue``: run on the warm kopt service
    (kopt.run.service) of that cluster -- or, with neither, of the one ``kopt serve start``
    recorded -- with its devices (its backend and CPU devices). Everything
    :func:`check_before_ray` can check fails before Ray starts. The run's phases
    (kopt.util.phases) count from the process's start.
    """
    phases = PhaseRecorder()
    phases.span("startup", 0.0, phases.now())
    attach = {"address": address, "cluster": str(cluster) if cluster else None}
    phases.begin("checks")
    if resume:
        RunLock(store, resume).check()  # before Ray starts: one run has one writer
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (timeout, a scheduler, systemd) stops a sweep the way Ctrl-C does: every
        # finished measurement flushed, the run marked interrupted, resumable
        received.clear()  # stop_signal: this sweep's, not an earlier one's in this process
        signal.signal(signal.SIGTERM, terminate)
    if queue and not (cluster or address):
        address = recorded_address()
    if queue and address:
        use_token(address)  # the service's own Ray head (kopt serve start): its token
    local = not cluster and address in (None, "local")
    check_before_ray(sweep, Path(store), backend, resume, local=local,
                     max_candidates=max_candidates)
    phases.end("checks")
    pre = prestart_sandboxes(sweep, backend, cpu_devices) if local and not resume else None
    if pre is not None:  # this node builds early: its compiler identity, while Ray starts
        wbuild.start_identity(sweep.space(pre.device).toolchain)
        if pre.device == "cuda" and sweep.ncu.top_k > 0:  # and its ncu's metric list
            wncu.start_query()
    # pandas, off the critical path, once the checks pass: a refused run that exited while
    # this thread imported aborted the interpreter (SIGABRT, a loaded CI run). Not joined:
    # a SIGTERM amid the main thread's own imports left the two waiting on each other
    threading.Thread(target=warm_arrow, daemon=True, name="kopt-warm-arrow").start()
    try:
        phases.begin("ray")
        start_ray(sweep, cluster, address, observers)
        phases.end("ray")
        svc = (service_config(cluster_address(cluster) if cluster else str(address))
               if queue else None)
        if svc is not None:
            backend, cpu_devices = queue_backend(svc, backend), int(svc.get("cpu_devices") or 1)
        return Driver(sweep, store, backend, max_candidates, resume, cpu_devices,
                      iterations=iterations, observers=observers, strategy=strategy,
                      seed=seed, phases=phases, queue=svc,
                      prestarted=pre.started if pre is not None else None,
                      attach=attach).run()
    finally:
        if pre is not None:
            pre.close()
        ray_timeline(os.environ.get("KOPT_RAY_TIMELINE"))







