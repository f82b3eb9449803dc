"""The sweep pipeline on Ray: expand -> build (CPU tasks) -> run (one actor per device) -> store.

Builds are Ray tasks of one CPU each, all submitted up front so that Ray runs
as many at once as there are CPUs; each GPU starts on the first finished
build (no compile phase to wait for). CPU devices wait for the batch's builds:
they would share the cores the compilers use, and a timing taken next to a
compiler measures the compiler. Every device actor holds at most
``inflight`` jobs (backpressure), so one slow device never hoards work.
Results are rows appended to the store as they arrive; a compile error, wrong
result, crash or timeout is a row with its status, never an exception.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kopt import __version__
from kopt.bottleneck import Evidence, aggregate, analyze, resolve_metrics, triggers, wanted_metrics
from kopt.catalog import Catalog, load_catalog
from kopt.contest import CONTEST_ROUNDS, Verdict, close_loop, contenders, decide
from kopt.database import Database
from kopt.devices import (
    Slot,
    actor_options,
    alive_nodes,
    build_nodes,
    local_gpu_count,
    plan_slots,
    predicted_target,
)
from kopt.expand import Candidate, Context, Tally, cap, iter_candidates, space_digest, stable_hash
from kopt.loop import IterState, close_iteration, rank
from kopt.observer import Observer
from kopt.spec import Space, SpecError, Sweep
from kopt.store import (
    RunLock,
    Writer,
    done_job_keys,
    dumps,
    iteration_states,
    now,
    run_record,
)
from workers import build as wbuild
from workers.device_actor import remote_actor

STRATEGIES = ("exhaustive", "random", "halving")
RANDOM_FRACTION = 0.25  # --strategy random without --max-candidates: a quarter of the space
HALVING_SAMPLES = (5, 15)  # samples per candidate in the screening rungs; the last rung
HALVING_ETA = 3  # uses the spec's timing; each rung keeps the best 1/ETA of the last
HALVING_MIN = 3  # ... but never fewer than this many (besides the baseline)
SOLO_ROUNDS = 3  # samples of a contender run alone to find which one failed a contest
MAX_JOB_ATTEMPTS = 3  # runs of one job when its device actor dies under it
MAX_BUILD_SUBMITS = 3  # submissions of one build whose node dies (routed builds)
ACTOR_START_TIMEOUT_S = 120.0  # a replacement actor that has not started by then is dropped


class SweepError(RuntimeError):
    """The sweep cannot start (no device for the backend, a bad --resume, ...)."""


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


def new_run_id(sweep: str) -> str:
    """``YYYYmmdd-HHMMSS-<6 hex>`` (UTC), sortable by start time."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


def ensure_ray(address: str | None = None, runtime_env: dict | None = None) -> None:
    """Attach to ``address`` or start an embedded local Ray instance (once per process)."""
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR",
                              "log_to_driver": False}
    if runtime_env:
        kwargs["runtime_env"] = runtime_env
    # no address: a new embedded instance ("local"), never a `ray start` cluster that
    # happens to run on this machine (--address auto attaches to that one)
    ray.init(address=address or "local", **kwargs)


def cluster_address(path: str | Path) -> str:
    """The head address (``HEAD_IP:PORT``) of a Ray cluster-launcher file: the local
    provider's ``head_ip`` and the ``--port`` of ``head_start_ray_commands`` (default 6379).

    Raises:
        SweepError: the file is missing or has no ``provider.head_ip``.
    """
    import yaml

    from kopt.contract import check_plain_file

    p = Path(path)
    check_plain_file(p, lambda why: SweepError(f"--cluster {why}"))
    try:
        cfg = yaml.safe_load(p.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SweepError(f"--cluster {p}: cannot read it ({first}); pass the Ray "
                         "cluster-launcher YAML you brought up with `ray up`") from None
    if cfg is not None and not isinstance(cfg, dict):
        raise SweepError(f"--cluster {p}: expected a mapping (provider:, head_start_ray_commands:"
                         f", ...), got a YAML {type(cfg).__name__}; pass the Ray "
                         "cluster-launcher YAML you brought up with `ray up`")
    provider = (cfg or {}).get("provider") or {}
    head = provider.get("head_ip") if isinstance(provider, dict) else None
    if not head:
        raise SweepError(f"--cluster {p}: field 'provider.head_ip' is missing; kopt attaches "
                         "to the head of a local-provider cluster (or pass --address HOST:PORT)")
    if not isinstance(head, str) or not re.fullmatch(r"[\w.-]+", head):
        raise SweepError(f"--cluster {p}: field 'provider.head_ip' is {head!r}; expected one "
                         "host name or IPv4 address (e.g. 10.0.0.5)")
    cmds = cfg.get("head_start_ray_commands") or []
    if not isinstance(cmds, list) or not all(isinstance(c, str) for c in cmds):
        raise SweepError(f"--cluster {p}: field 'head_start_ray_commands' is {cmds!r}; "
                         "expected a list of shell commands (- ray start --head --port=6379)")
    port = 6379
    for cmd in cmds:
        m = re.search(r"--port[= ](\S+)", str(cmd))
        if m:
            if not m.group(1).isdigit() or not 0 < int(m.group(1)) < 65536:
                raise SweepError(f"--cluster {p}: head_start_ray_commands has --port "
                                 f"{m.group(1)!r}; expected a port from 1 to 65535")
            port = int(m.group(1))
    return f"{head}:{port}"


# files larger than this stay behind when a sweep folder travels to a cluster: Ray's
# upload limit is 512 MiB for the whole (zipped) folder, and a sweep needs its sources
UPLOAD_FILE_LIMIT = 100 * 2**20
UPLOAD_EXCLUDES = ["kopt-store", "report-*", "__pycache__", "*.parquet", ".git"]
IGNORE_FILE = ".koptignore"


def _gitignore_literal(rel: str) -> str:
    """``rel`` (a path under the sweep folder) as a gitignore pattern matching only it."""
    return "/" + re.sub(r"([\\\[\]*?!# ])", r"\\\1", rel)


def cluster_runtime_env(sweep: Sweep) -> tuple[dict[str, Any], list[str]]:
    """What travels to every node of a cluster, and notes on what stays behind.

    The sweep folder travels as the working_dir (sources, ref.py, headers), without kopt's
    own outputs (``UPLOAD_EXCLUDES``), the patterns of the folder's ``.koptignore``
    (gitignore syntax; Ray also honours ``.gitignore`` and ``.rayignore``) and any file
    over ``UPLOAD_FILE_LIMIT`` bytes (a note names each); kopt's own packages (``kopt``,
    ``workers``) travel as py_modules.
    """
    import fnmatch

    import kopt
    import workers

    excludes = list(UPLOAD_EXCLUDES)
    ignore = sweep.root / IGNORE_FILE
    if ignore.is_file():
        excludes += [ln for ln in ignore.read_text().splitlines()
                     if ln.strip() and not ln.startswith("#")]
    big = []
    for folder, dirs, files in os.walk(sweep.root):
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, x) for x in UPLOAD_EXCLUDES)]
        for f in files:
            path = Path(folder) / f
            if (not any(fnmatch.fnmatch(f, x) for x in UPLOAD_EXCLUDES) and path.is_file()
                    and path.stat().st_size > UPLOAD_FILE_LIMIT):
                big.append((path.relative_to(sweep.root).as_posix(), path.stat().st_size))
    excludes += [_gitignore_literal(rel) for rel, _ in big]
    notes = [f"{sweep.root / rel} ({size / 2**20:.0f} MiB) stays behind: files over "
             f"{UPLOAD_FILE_LIMIT // 2**20} MiB do not travel to cluster nodes; if ref.py "
             f"reads it, copy it to every node and read it by absolute path (list files the "
             f"sweep does not need in {ignore})" for rel, size in sorted(big)]
    return {"working_dir": str(sweep.root),
            "py_modules": [str(Path(kopt.__file__).parent), str(Path(workers.__file__).parent)],
            "excludes": excludes}, notes


def attach(address: str, source: str, runtime_env: dict | None = None) -> None:
    """Attach to a running Ray cluster; fail fast, naming ``source`` and ``ray up``.

    Raises:
        SweepError: ``address`` is not HOST:PORT, no head answers there, or Ray cannot
            ship ``runtime_env`` (e.g. the sweep folder is over Ray's upload limit).
    """
    import socket

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or ":" in host:
        raise SweepError(f"{source}: {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379)")
    up = (f"`ray up {source.split(' ', 1)[1]}`" if source.startswith("--cluster")
          else "`ray up ray_cluster.yaml`")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        raise SweepError(f"{source}: no Ray head answers at {address}; bring the cluster up "
                         f"with {up} (or start one with `ray start --head`)") from None
    try:
        ensure_ray(address, runtime_env)
    except ConnectionError as e:
        raise SweepError(f"{source}: {e}; is the cluster up (`ray up ray_cluster.yaml`, "
                         "`ray status`)?") from None
    except ray.exceptions.RuntimeEnvSetupError as e:
        wd = (runtime_env or {}).get("working_dir", "the sweep folder")
        m = re.search(r"Package size \(([^)]*)\) exceeds the maximum size of ([\d.]+ ?\w+)",
                      str(e))
        if m:
            raise SweepError(
                f"{source}: the sweep folder {wd} packs to {m.group(1)}, over Ray's upload "
                f"limit of {m.group(2)}; list the files the sweep does not need in "
                f"{Path(wd) / IGNORE_FILE} (gitignore syntax)") from None
        last = [ln for ln in str(e).splitlines() if ln.strip()][-1:] or [type(e).__name__]
        raise SweepError(f"{source}: Ray could not ship the sweep folder {wd}: "
                         f"{last[0]}") from None


def pick_backend(sweep: Sweep, backend: str) -> str:
    """Resolve ``auto``: CUDA when the cluster has a GPU and the sweep a .cu source, else CPU.

    Raises:
        SweepError: the requested backend has no source or no device.
    """
    gpus = ray.cluster_resources().get("GPU", 0)
    if backend == "auto":
        if gpus and "cuda" in sweep.spaces:
            return "cuda"
        if "cpu" in sweep.spaces:
            return "cpu"
        raise SweepError(
            f"{sweep.spec_path}: no GPU is visible and the sweep has no C++ source for the CPU "
            "backend; run it on a GPU node, or add a `cpu:` block with `kernel: NAME.cpp`")
    if backend == "cuda" and not gpus:
        raise SweepError("--backend cuda: no GPU in the Ray cluster (ray.cluster_resources() "
                         "shows none); use --backend cpu or run on a GPU node")
    sweep.space(backend)  # SpecError when missing
    return backend


def _build_remote(job: wbuild.BuildJob) -> tuple[dict, bytes | None]:
    res, data = wbuild.build(job)
    return dataclasses.asdict(res), data


def _identity_remote(backend: str) -> tuple[str, dict]:
    from workers.envinfo import collect

    return wbuild.compiler_identity(backend), collect()


def job_base(sweep: Sweep, space: Space, rel_paths: bool = False) -> dict[str, Any]:
    """The part of every harness job that is the same for the whole sweep and backend
    (reference, seed, shapes, scalars, tolerance, timing, signature). ``rel_paths``: ref.py
    relative to the sweep folder (it travels to cluster nodes as the working_dir)."""
    ref = sweep.reference.relative_to(sweep.root) if rel_paths else sweep.reference
    return {"reference": str(ref), "seed": sweep.seed, "args": sweep.args,
            "scalars": sweep.scalars, "tolerance": sweep.tolerance.model_dump(),
            "timing": space.timing.model_dump(),
            "signature": [dataclasses.asdict(a) for a in space.signature.args]}


def build_id(space: Space, cand: Candidate, digest: str, compiler_id: str,
             platform: str = "") -> str:
    """Content address of a build: source digest (kopt.expand.space_digest: the source and
    the local headers it includes), defines, flags, target, compiler identity
    (of ``space.toolchain``), the host platform (x86_64 / aarch64) it is built on and for
    and, in kernel mode, the launch block."""
    key = {"source": digest, "defines": cand.defines, "flags": space.flags,
           "include_dirs": space.include_dirs, "target": cand.target,
           "compiler": compiler_id, "backend": space.backend}
    if platform:
        key["platform"] = platform
    if space.launch is not None:  # kernel mode: the artifact carries the launch geometry
        key["launch"] = space.launch_spec()
    return stable_hash(key, 20)


class Driver:
    """Runs one sweep on the attached Ray cluster, for one or more iterations.

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

    Raises:
        ValueError: an unknown strategy.
    """

    def __init__(self, sweep: Sweep, store: Path, backend: str = "auto",
                 max_candidates: int | None = None, resume: str | None = None,
                 cpu_devices: int = 1, inflight: int = 2, iterations: int | None = None,
                 observers: list[Observer] | None = None, catalog: Catalog | None = None,
                 strategy: str | None = None, seed: int | None = None):
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
        self.catalog = catalog or load_catalog()
        self.rows: dict[str, dict[str, Any]] = {}
        self._agg: dict[tuple[int, str, str], dict[str, float]] = {}
        self._artifacts: dict[str, Any] = {}  # build id -> ObjectRef of the .so bytes
        self._build_meta: dict[str, dict] = {}  # build id -> BuildResult as a dict
        self._job_common: dict[str, Any] = {}
        self._build_platform: dict[str, str] = {}  # build id -> platform it targets
        self._build_jobs: dict[str, wbuild.BuildJob] = {}  # every build planned in this run
        self._routes: dict[str, list[str]] | None = None  # platform -> build node ids
        self._lost: dict[str, str] = {}  # device class -> why its jobs could not run
        self.dead: set[int] = set()
        self.wait_build_s: dict[int, float] = {}  # device slot -> s idle waiting for builds
        self._early_builds: dict[str, tuple[Any, Any]] = {}  # build id -> (meta, art) refs
        self._ident_ref: Any = None  # the compiler-identity task started with the devices
        # paths relative to the sweep folder when it travels as the runtime_env working_dir
        self.rel_paths = bool((ray.get_runtime_context().runtime_env or {}).get("working_dir")
                              ) if ray.is_initialized() else False
        # retries cover a lost node, not a compile that kills its worker every time
        self._build_task = ray.remote(num_cpus=1, num_returns=2, max_retries=1)(_build_remote)

    # -- setup ---------------------------------------------------------------------------
    def _start_devices(self, backend: str, toolchain: str,
                       on_launch: Callable[[], None] | None = None
                       ) -> tuple[list[Any], list[dict]]:
        """One actor per device slot (kopt.devices.plan_slots), each pinned to its node;
        ``on_launch`` runs once the actors are asked for, before their start is awaited."""
        self.nodes = alive_nodes()
        self.slots = plan_slots(self.nodes, backend, self.cpu_devices)
        cpus = ray.cluster_resources().get("CPU", 0)
        if backend == "cpu" and len(self.slots) >= cpus:
            per_node = max(1, len(self.slots) // self.cpu_devices)
            most = max(0, int((cpus - 1) // per_node))
            raise SweepError(f"--cpu-devices {self.cpu_devices}: {len(self.slots)} CPU device "
                             f"actors take every one of the cluster's {cpus:g} CPUs and leave "
                             f"none for builds; use --cpu-devices {most}"
                             f"{' or fewer' if most > 1 else ''}" if most else
                             f"--cpu-devices {self.cpu_devices}: the cluster's {cpus:g} CPUs "
                             "leave none for builds beside its CPU devices; add CPUs")
        actors = [self._new_actor(backend, s) for s in self.slots]
        if len({n.platform for n in self.nodes}) <= 1:  # the compiler identity, meanwhile
            self._ident_ref = ray.remote(num_cpus=0)(_identity_remote).remote(toolchain)
        if on_launch is not None:  # work that needs no device info, while the actors start
            on_launch()
        infos = []
        for a, slot in zip(actors, self.slots):
            try:
                infos.append(ray.get(a.info.remote(), timeout=600))
            except (ray.exceptions.RayError, TimeoutError) as e:
                where = f" on node {slot.node_id}" if slot.node_id else ""
                raise SweepError(f"a {backend} device actor{where} failed to start: {e}") from None
        self.dead: set[int] = set()
        return actors, infos

    def _new_actor(self, backend: str, slot: Slot) -> Any:
        cls = remote_actor("cuda") if backend == "cuda" else remote_actor("cpu", threads=1)
        return cls.options(**actor_options(slot)).remote(backend, 1, slot.device_class)

    def _compilers(self, backend: str, platforms: set[str]) -> tuple[dict[str, str], dict]:
        """Compiler identity per device platform (each from a node of that platform) and
        the environment of the first; routes builds by platform on a mixed cluster."""
        try:
            self._routes = build_nodes(self.nodes, platforms)
        except ValueError as e:
            raise SweepError(f"cannot build for every device: {e}") from None
        task = ray.remote(num_cpus=0)(_identity_remote)
        if self._routes is None:
            ident, env = ray.get(self._ident_ref or task.remote(backend))
            return {p: ident for p in platforms}, env
        self._build_task = self._build_task.options(max_retries=0)
        out, env = {}, {}
        for p, ids in self._routes.items():
            ident, e = ray.get(task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                ids[0], soft=False)).remote(backend))
            out[p], env = ident, env or e
        return out, env

    def _live(self, dc: str, infos: list[dict]) -> list[int]:
        """Indices of the live device actors of class ``dc``."""
        return [i for i, info in enumerate(infos)
                if info["device_class"] == dc and i not in self.dead]

    def _plan(self, space: Space, classes: dict[str, dict], compilers: dict[str, str],
              digest: str, iteration: int, ctxs: dict[str, Context], baseline_only: bool = False
              ) -> tuple[list[Job], dict[str, wbuild.BuildJob], dict[str, int]]:
        jobs: list[Job] = []
        builds: dict[str, wbuild.BuildJob] = {}
        counts: dict[str, int] = {}
        source = space.source_text()
        for dc, info in classes.items():
            # a generator: with a cap, only the sample is held (kopt.expand.cap)
            tally = Tally(iter_candidates(space, self.catalog, info["sm"], source_digest=digest,
                                          ctx=ctxs[dc]))
            if baseline_only:
                cands = [next(iter(tally))]  # the baseline comes first
            elif self.strategy == "random":
                pool = tally if self.max_candidates else list(tally)
                n = self.max_candidates or max(2, math.ceil(RANDOM_FRACTION * tally.n))
                cands = cap(pool, n, seed=self.seed)
            else:
                cands = cap(tally, self.max_candidates)
            counts[dc] = len(cands)
            self.space_sizes[dc] = tally.n
            plat = info.get("platform") or ""
            for c in cands:
                bid = build_id(space, c, digest, compilers[plat], plat)
                self._build_platform[bid] = plat
                self._build_jobs[bid] = builds.setdefault(bid, wbuild.BuildJob(
                    build_id=bid, backend=space.backend, source=source,
                    source_name=space.source.name, source_dir=str(space.source.parent),
                    defines=c.defines, flags=space.flags, target=c.target,
                    include_dirs=space.include_dirs, mode=space.mode,
                    launch=space.launch_spec()))
                for di in c.dims_ok:
                    key = stable_hash({"candidate": c.candidate_id, "dims": space.dims[di],
                                       "device_class": dc, "iteration": iteration,
                                       "build": bid})
                    job = Job(key, c, dc, di, space.dims[di], bid, iteration)
                    if self.strategy == "halving" and not baseline_only:
                        job.timing = self._rung_timing(space, 0)
                    jobs.append(job)
        return jobs, builds, counts

    def _note_sample(self, iteration: int, counts: dict[str, int]) -> None:
        """A note per device class whose iteration runs a sample of its space (`_plan`'s
        counts against the space's size): how large the space was and what capped it."""
        for dc, n in counts.items():
            total = self.space_sizes.get(dc, n)
            if total <= n:
                continue
            why = ("capped by --max-candidates" if self.max_candidates
                   else f"--strategy random samples {RANDOM_FRACTION:.0%}")
            where = f" ({dc})" if len(counts) > 1 else ""
            for o in self.observers:
                o.on_note(f"iteration {iteration}{where}: {n:,} of {total:,} candidates ({why})")

    # -- the run -------------------------------------------------------------------------
    def run(self) -> RunSummary:
        """Run the sweep to the end, holding the run's lock (one run, one writer); returns
        its summary.

        Raises:
            kopt.store.RunLocked: another process is writing the run (--resume).
            SweepError / SpecError: before anything is measured.
            KeyboardInterrupt: after flushing every measured row (resume with --resume).
        """
        run_id = self.resume or new_run_id(self.sweep.name)
        with RunLock(self.store, run_id):
            return self._run(run_id)

    def _run(self, run_id: str) -> RunSummary:
        t_start = time.perf_counter()
        sweep = self.sweep
        done: set[str] = set()
        stored_states: dict[tuple[int, str], IterState] = {}
        prev: dict[str, Any] = {}  # the resumed run's last record: its figures add up
        if self.resume:
            rec = prev = resumable_run(self.store, self.resume, sweep)
            if self.backend_req == "auto":
                self.backend_req = rec["backend"]
            opts = json.loads(rec.get("options") or "{}")
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
            done = done_job_keys(self.store, self.resume)
            stored_states = {(it, dc): IterState.from_json(js)
                             for it, dc, js in iteration_states(self.store, self.resume)}
        backend = pick_backend(sweep, self.backend_req)
        space = sweep.space(backend)
        digest = space_digest(space)
        early = not self.resume and not (backend == "cuda" and self.sweep.ncu.profile_baseline)
        predicted: list[dict[str, Any]] = []

        def build_before_devices() -> None:
            # one node: its devices' arch is known before they start (nvidia-smi), so
            # iteration 1 compiles while the actors import torch and the reference runs
            target = predicted_target(backend, self.nodes) if early else None
            if target is not None:  # the driver's node is the one node: its compilers
                ident = wbuild.compiler_identity(space.toolchain)
                self._start_early_builds(self._plan(
                    space, {"predicted": target}, {target["platform"]: ident}, digest, 1,
                    {"predicted": IterState().context()})[1])
                predicted.append(target)

        actors, infos = self._start_devices(backend, space.toolchain, build_before_devices)
        classes: dict[str, dict] = {}
        for info in infos:
            classes.setdefault(info["device_class"], info)
        compilers, env = self._compilers(space.toolchain,
                                         {i.get("platform") or "" for i in infos})
        env = {**env, "cluster_cpus": ray.cluster_resources().get("CPU")}
        if early and not all({"sm": i.get("sm"), "platform": i.get("platform")} in predicted
                             for i in infos):
            # iteration 1's plan is known now: compile while the devices compute the reference
            self._start_early_builds(self._plan(space, classes, compilers, digest, 1, {
                dc: IterState().context() for dc in classes})[1])
        self._check_reference(space, actors, infos)
        writer = Writer(self.store, sweep.name, run_id)
        options = {"backend": backend, "max_candidates": self.max_candidates,
                   "strategy": self.strategy, "seed": self.seed,
                   "cpu_devices": self.cpu_devices, "resume": self.resume,
                   "iterations": self.iterations}
        run_row = {"run_id": run_id, "sweep": sweep.name, "spec_hash": sweep.spec_hash,
                   "sweep_dir": str(sweep.root), "backend": backend, "devices": dumps(infos),
                   "options": dumps(options), "host": platform.node(), "env": dumps(env),
                   "kopt_version": __version__}
        writer.add("runs", [{**run_row, "event": "running", "created_at": now()}])
        writer.flush()
        for o in self.observers:
            o.on_run(run_id, self.store)
        summary = RunSummary(run_id, sweep.name, backend, 0, 0, 0, devices=infos)
        states = {dc: IterState() for dc in classes}
        ncu_names = self._resolve_metrics(actors, infos) if backend == "cuda" else {}
        try:
            if ncu_names and self.sweep.ncu.profile_baseline and not stored_states:
                self._profile_baseline(space, classes, compilers, digest, actors, infos,
                                       writer, summary, run_id, ncu_names, states, done)
            for it in range(1, self.iterations + 1):
                active = {dc: i for dc, i in classes.items() if not states[dc].stop}
                if not active:
                    break
                ctxs = {dc: states[dc].context() for dc in active}
                jobs, builds, counts = self._plan(space, active, compilers, digest, it, ctxs)
                self._note_sample(it, counts)
                for dc, n in counts.items():
                    if it > 1 and n <= 1:
                        states[dc] = dataclasses.replace(
                            states[dc], stop=f"no admissible triple for iteration {it}: "
                            "every realized method is selected, skipped or in conflict "
                            "(`kopt propose` shows why)")
                jobs = [j for j in jobs if not states[j.device_class].stop]
                if not jobs:
                    break
                summary.n_candidates += sum(n for dc, n in counts.items()
                                            if not states[dc].stop)
                self._run_batch(f"it {it}", jobs, builds, done, space, actors, infos, writer,
                                summary, run_id)
                summary.rungs.setdefault(it, {})[0] = len(
                    {(j.device_class, j.candidate.candidate_id) for j in jobs})
                if self.strategy == "halving":
                    self._halving(it, jobs, builds, space, actors, infos, writer, summary,
                                  run_id, done)
                for dc in [d for d in active if not states[d].stop]:
                    if (it, dc) in stored_states:
                        states[dc] = stored_states[(it, dc)]
                        continue
                    states[dc] = self._close(it, dc, states[dc], space, actors, infos,
                                             writer, run_id, ncu_names.get(dc))
                    writer.add("iterations", [{
                        "run_id": run_id, "sweep": sweep.name, "iteration": it,
                        "device_class": dc, "state": states[dc].to_json(),
                        "created_at": now()}])
                    writer.flush()
                    for o in self.observers:
                        o.on_iteration(dc, states[dc])
            self._close_loop(states, actors, infos, writer, run_id)
        except KeyboardInterrupt:
            summary.interrupted = True
            with _signals_held():  # a second Ctrl-C must not cut the flush: nothing lost
                writer.flush()
                writer.add("runs", [{**run_row, "event": "interrupted", "created_at": now(),
                                     "n_candidates": summary.n_candidates,
                                     "n_jobs": summary.n_jobs,
                                     "wall_s": time.perf_counter() - t_start
                                     + (prev.get("wall_s") or 0.0)}])
                writer.flush()
            raise
        finally:
            for i, a in enumerate(actors):
                if i in self.dead:
                    continue
                try:
                    st = ray.get(a.stats.remote(), timeout=30)
                    summary.device_busy_s[f"{infos[i]['device_class']}#{i}"] = st["busy_s"]
                    summary.device_wait_build_s[f"{infos[i]['device_class']}#{i}"] = round(
                        self.wait_build_s.get(i, 0.0), 3)
                    ray.get(a.shutdown.remote(), timeout=30)
                except Exception:
                    pass
                ray.kill(a, no_restart=True)
        summary.states = states
        summary.wall_s = time.perf_counter() - t_start
        if not (prev.get("status") == "finished" and summary.n_skipped == summary.n_jobs):
            # a resumed run's record covers all its parts: seconds and busy times add up
            # (resuming a finished run with nothing left to do leaves its record alone)
            def total(key: str, mine: dict[str, float]) -> str:
                out = dict(json.loads(prev.get(key) or "{}"))
                for k, v in mine.items():
                    out[k] = out.get(k, 0.0) + v
                return dumps(out)

            writer.add("runs", [{
                **run_row, "event": "finished", "created_at": now(),
                "n_candidates": summary.n_candidates, "n_jobs": summary.n_jobs,
                "wall_s": summary.wall_s + (prev.get("wall_s") or 0.0),
                "compile_cpu_s": summary.compile_cpu_s + (prev.get("compile_cpu_s") or 0.0),
                "device_busy": total("device_busy", summary.device_busy_s),
                "device_wait_build": total("device_wait_build", summary.device_wait_build_s)}])
        writer.compact("candidates", ["run_id", "job_key"])
        writer.compact("contests", ["run_id", "iteration", "device_class", "dims",
                                    "candidate_id"])
        writer.compact("metrics", ["run_id", "iteration", "candidate_id", "device_class", "dims",
                                   "kernel", "launch", "metric"])
        writer.flush()
        for o in self.observers:
            o.on_finish(summary)
        return summary

    def _check_reference(self, space: Space, actors: list[Any], infos: list[dict]) -> None:
        """Run ref.py's inputs() and reference() once per dims on one device of each class
        before anything is built; a failure stops the sweep with an error naming ref.py."""
        common = {**job_base(self.sweep, space, self.rel_paths), "build_id": "",
                  "job_key": "reference"}
        seen = set()
        for a, info in zip(actors, infos):
            if info["device_class"] in seen:
                continue
            seen.add(info["device_class"])
            for d in space.dims:
                res = ray.get(a.prepare.remote({**common, "dims": d}))
                if res["status"] != "ok":
                    raise SweepError(f"{self.sweep.reference}: inputs()/reference() failed for "
                                     f"dims {d} on {info['device_class']} ({res['status']}): "
                                     f"{res.get('error')}; nothing was built or measured")
                for note in res.get("notes") or []:
                    if note not in seen:
                        seen.add(note)
                        for o in self.observers:
                            o.on_note(note)

    # -- NCU and the end of an iteration ---------------------------------------------------
    def _profile_baseline(self, space: Space, classes: dict[str, dict], compilers: dict[str, str],
                          digest: str, actors: list[Any], infos: list[dict], writer: Writer,
                          summary: RunSummary, run_id: str, ncu_names: dict[str, list[str]],
                          states: dict[str, IterState], done: set[str]) -> None:
        """Measure and profile the baseline before iteration 1, so that its NCU evidence
        (bottleneck, triggers) prunes iteration 1's scan as it does later ones'."""
        jobs, builds, _ = self._plan(space, classes, compilers, digest, 1,
                                     {dc: Context() for dc in classes}, baseline_only=True)
        for o in self.observers:
            o.on_phase("baseline")
            o.on_start(len(builds), len(jobs), infos)
        self._loop(jobs, builds, space, actors, infos, writer, summary, run_id)
        done.update(j.job_key for j in jobs)
        writer.flush()
        for dc in classes:
            base = [j for j in jobs if j.device_class == dc]
            row = self.rows.get(base[0].job_key) if base else None
            if row is None or row["status"] != "ok":
                continue
            ev = self._profile(1, dc, [{"candidate_id": row["candidate_id"],
                                        "build_id": row["build_id"], "is_baseline": True}],
                               space, actors, infos, writer, run_id, ncu_names.get(dc))
            e = ev.get(row["candidate_id"])
            if e is not None and e.scores:
                agg = self._agg[(1, dc, row["candidate_id"])]
                states[dc] = IterState(bottleneck_before=e.bottleneck, scores_before=e.scores,
                                       triggered=triggers(agg, self.catalog, e))
                for o in self.observers:
                    o.on_evidence(dc, e, states[dc].triggered)

    def _resolve_metrics(self, actors: list[Any], infos: list[dict]) -> dict[str, list[str]]:
        """Per device class, the metric names its ncu knows (aliases applied); missing
        names are reported once."""
        wanted = wanted_metrics(self.sweep.ncu.metrics or [], self.catalog)
        out: dict[str, list[str]] = {}
        for a, info in zip(actors, infos):
            dc = info["device_class"]
            if dc in out or self.sweep.ncu.top_k <= 0:
                continue
            try:
                avail = ray.get(a.query_metrics.remote(), timeout=600)
            except ray.exceptions.RayError:
                avail = None
            keep, aliased, missing = resolve_metrics(wanted, set(avail) if avail else None)
            out[dc] = keep
            for o in self.observers:
                o.on_metrics(dc, aliased, missing)
        return out

    def _profile(self, it: int, dc: str, ranked: list[dict[str, Any]], space: Space,
                 actors: list[Any], infos: list[dict], writer: Writer, run_id: str,
                 metrics: list[str] | None) -> dict[str, Evidence]:
        """Profile the baseline and the top-k of one iteration on one device of class ``dc``;
        write metrics rows and the candidates' profile status and axis scores."""
        k = self.sweep.ncu.top_k
        picks = [r for r in ranked if r["is_baseline"]] + [r for r in ranked[:k]
                                                          if not r["is_baseline"]]
        evidence: dict[str, Evidence] = {}
        live = self._live(dc, infos)
        if not live:
            return evidence
        idx = live[0]
        todo = []  # (ranked row, its job rows, the row of its first dims)
        for r in picks:
            if (it, dc, r["candidate_id"]) in self._agg:  # profiled already (the baseline)
                evidence[r["candidate_id"]] = analyze(self._agg[(it, dc, r["candidate_id"])],
                                                      self.catalog)
                continue
            job_rows = [row for row in self.rows.values()
                        if row["iteration"] == it and row["candidate_id"] == r["candidate_id"]
                        and row["device_class"] == dc]
            if job_rows:
                todo.append((r, job_rows, min(job_rows, key=lambda row: row["dims"])))
        if not todo:
            return evidence
        if space.backend != "cuda" or not metrics or k <= 0:
            statuses = [{"status": "not_profiled", "error": "NCU needs the cuda backend" if
                         space.backend != "cuda" else "ncu unavailable or top_k is 0",
                         "rows": []} for _ in todo]
        else:  # one ncu process for the baseline and the top-k
            payloads = [{**self._job_common, "build_id": r["build_id"],
                         "job_key": first["job_key"], "dims": json.loads(first["dims"])}
                        for r, _, first in todo]
            kernels = [[kk["name"] for kk in self._build_meta.get(r["build_id"], {})
                        .get("kernels", [])] for r, _, _ in todo]
            statuses = ray.get(actors[idx].profile_many.remote(
                payloads, kernels, metrics, self.sweep.ncu.sections,
                *[self._artifacts[r["build_id"]] for r, _, _ in todo]))
        for (r, job_rows, first), status in zip(todo, statuses):
            rows = status.get("rows") or []
            if rows:
                writer.add("metrics", [{
                    "run_id": run_id, "sweep": self.sweep.name, "iteration": it,
                    "candidate_id": r["candidate_id"], "device_class": dc,
                    "dims": first["dims"], "kernel": x["kernel"], "launch": x["launch"],
                    "metric": x["metric"], "value": x["value"], "unit": x["unit"],
                    "created_at": now()} for x in rows])
            agg = aggregate(rows)
            ev = analyze(agg, self.catalog) if rows else Evidence()
            evidence[r["candidate_id"]] = ev
            self._agg[(it, dc, r["candidate_id"])] = agg
            writer.add("profiles", [{
                "run_id": run_id, "job_key": row["job_key"], "profile_status": status["status"],
                "profile_error": status.get("error") or None,
                "compute_score": ev.scores.get("compute"),
                "memory_score": ev.scores.get("memory"),
                "latency_score": ev.scores.get("latency"),
                "bottleneck": ev.bottleneck, "created_at": now()} for row in job_rows])
        return evidence

    def _close(self, it: int, dc: str, prev: IterState, space: Space, actors: list[Any],
               infos: list[dict], writer: Writer, run_id: str, metrics: list[str] | None
               ) -> IterState:
        """The state after iteration ``it`` on class ``dc``: contest, NCU profiles, verdict."""
        ranked = rank(self.store, run_id, it, dc)
        verdict, dropped = self._contest(it, dc, ranked, actors, infos, writer, run_id)
        ranked = [r for r in ranked if r["candidate_id"] not in dropped]  # they cannot win
        if verdict is not None:  # the contest's winner leads the ranking
            ranked.sort(key=lambda r: r["candidate_id"] != verdict.winner)
        ev = self._profile(it, dc, ranked, space, actors, infos, writer, run_id, metrics)
        base = next((r for r in ranked if r["is_baseline"]), None)
        before = ev.get(base["candidate_id"]) if base else None
        st = close_iteration(prev, ranked, it, (before.scores if before else {}),
                             before.bottleneck if before else prev.bottleneck_after)
        win = ranked[0] if ranked else None
        after = ev.get(win["candidate_id"]) if win else None
        if after is not None and after.scores:
            st.scores_after, st.bottleneck_after = after.scores, after.bottleneck
            st.triggered = triggers(self._agg[(it, dc, win["candidate_id"])], self.catalog,
                                    after)
        st.dropped = dropped
        if verdict is not None:
            st.tie = verdict.tied if len(verdict.tied) > 1 else []
            st.contest = {c: {"label": verdict.labels[c], "median_ms": verdict.medians_ms[c]}
                          for c in verdict.labels}
        if not st.stop and it == self.iterations:
            st.stop = f"reached --iterations {self.iterations}"
        return st

    def _run_batch(self, label: str, jobs: list[Job], builds: dict[str, wbuild.BuildJob],
                   done: set[str], space: Space, actors: list[Any], infos: list[dict],
                   writer: Writer, summary: RunSummary, run_id: str) -> None:
        """Run the ``jobs`` not already stored (``done``) through :meth:`_loop` and flush the
        store; counts them in ``summary`` and announces the batch to the observers."""
        summary.n_jobs += len(jobs)
        todo = [j for j in jobs if j.job_key not in done]
        summary.n_skipped += len(jobs) - len(todo)
        need = {j.build_id for j in todo}
        for o in self.observers:
            o.on_phase(label)
            o.on_start(len(need - set(self._artifacts)), len(todo), infos)
        self._loop(todo, {b: builds[b] for b in need}, space, actors, infos, writer, summary,
                   run_id)
        writer.flush()

    def _rung_timing(self, space: Space, rung: int) -> dict[str, Any] | None:
        """Timing of a halving rung: a fixed, small sample count for the screening rungs
        (warm-up capped at 2 ms), the spec's own timing (None) for the last rung."""
        if rung >= len(HALVING_SAMPLES):
            return None
        t = space.timing.model_dump()
        n = HALVING_SAMPLES[rung]
        return {**t, "min_samples": n, "max_samples": n, "warmup_ms": min(t["warmup_ms"], 2.0)}

    def _halving(self, it: int, jobs: list[Job], builds: dict[str, wbuild.BuildJob],
                 space: Space, actors: list[Any], infos: list[dict], writer: Writer,
                 summary: RunSummary, run_id: str, done: set[str]) -> None:
        """Successive halving after rung 0 of iteration ``it`` (see the class docstring):
        each rung keeps, per device class, the best 1/HALVING_ETA of the last rung's correct
        candidates (by geometric-mean speedup; the baseline always) and measures them again."""
        for r in range(1, len(HALVING_SAMPLES) + 1):
            nxt: list[Job] = []
            for dc in sorted({j.device_class for j in jobs}):
                ranked = rank(self.store, run_id, it, dc, rung=r - 1)
                n_keep = max(math.ceil(len(ranked) / HALVING_ETA), min(len(ranked), HALVING_MIN))
                keep = {x["candidate_id"] for x in ranked[:n_keep] if not x["is_baseline"]}
                keep |= {x["candidate_id"] for x in ranked if x["is_baseline"]}
                for j in jobs:
                    if j.device_class == dc and j.candidate.candidate_id in keep:
                        key = stable_hash({"job": j.job_key, "rung": r})
                        nxt.append(dataclasses.replace(j, job_key=key, rung=r,
                                                       timing=self._rung_timing(space, r)))
            if not nxt:
                return
            summary.rungs[it][r] = len({(j.device_class, j.candidate.candidate_id)
                                        for j in nxt})
            self._run_batch(f"it {it} rung {r}", nxt, builds, done, space, actors, infos,
                            writer, summary, run_id)
            jobs = nxt

    def _ok_rows(self, run_id: str, dc: str, iteration: int | None = None
                 ) -> dict[str, dict[str, tuple[str, str, float, float]]]:
        """Candidate id -> dims (JSON) -> ``(job_key, build_id, median_ms, iqr_ms)`` of the
        correct, final-rung rows of class ``dc`` (of ``iteration``; None: the earliest
        iteration that measured each candidate)."""
        rows = Database(self.store).final_ok(run_id, dc, iteration)  # halving: the last rung's
        out: dict[str, dict[str, tuple[str, str, float, float]]] = {}
        for c, dims, key, b, med, iqr in rows:
            out.setdefault(c, {})[dims] = (key, b, med, iqr)
        return out

    def _side_by_side(self, actor: Any, dc: str, by_cand: dict[str, dict[str, tuple]],
                      ) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, str], str]:
        """Re-measure the candidates of ``by_cand`` (id -> dims -> ``(job_key, build_id,
        ...)``) side by side on ``actor``, one contest per problem size (workers.harness
        ``contest``: each checked, then ``CONTEST_ROUNDS`` interleaved samples each).

        A contender that fails a check (or crashes, or times out) is dropped, and the contest
        is run again without it: when the contest's error does not name the contender, each
        is run alone to find it. A dropped contender's measurements of other sizes are
        dropped too (it must be correct on all of them).

        Returns:
            ``(results, dropped, error)``: candidate id -> dims -> the harness's result
            (``median_ms``, ``iqr_ms``, ``n_samples``, ``samples_ms``) plus ``job_key``, for
            the contenders that passed every check; candidate id -> ``"status: error"`` for
            the dropped ones; and a reason when the contest could not run at all (the device
            actor failed, or it fails while every contender passes alone), else "".
        """
        for rows in by_cand.values():  # measured before a --resume: rebuild (cache hit)
            for _key, b, *_ in rows.values():
                if b not in self._artifacts and b in self._build_jobs:
                    self._artifacts[b] = self._submit_build(b, self._build_jobs[b])[1]

        def contest(cids: list[str], dims: str, rounds: int) -> dict[str, Any]:
            entries = [by_cand[c][dims] for c in cids]
            jobs = [{**self._job_common, "build_id": e[1], "job_key": e[0],
                     "dims": json.loads(dims)} for e in entries]
            try:
                return ray.get(actor.contest.remote(jobs, rounds,
                                                    *[self._artifacts[e[1]] for e in entries]))
            except ray.exceptions.RayError as e:
                return {"status": "lost", "error": f"device actor failed: {e}", "actor": True}

        alive = list(by_cand)
        results: dict[str, dict[str, dict[str, Any]]] = {}
        dropped: dict[str, str] = {}
        for dims in sorted({d for rows in by_cand.values() for d in rows}):
            while alive:
                cids = [c for c in alive if dims in by_cand[c]]
                if not cids:
                    break
                res = contest(cids, dims, CONTEST_ROUNDS)
                if res.get("status") == "ok":
                    for c, st in zip(cids, res["results"]):
                        results.setdefault(c, {})[dims] = {**st, "job_key": by_cand[c][dims][0]}
                    break
                why = f"{res.get('status')}: {res.get('error') or ''}".strip()
                if res.get("actor"):
                    return results, dropped, why
                named = [c for c in cids if by_cand[c][dims][0] in (res.get("error") or "")]
                bad = {c: why for c in named} if len(cids) > 1 else {cids[0]: why}
                if not bad:  # the error names nobody: run each contender alone
                    for c in cids:
                        solo = contest([c], dims, SOLO_ROUNDS)
                        if solo.get("actor"):
                            return results, dropped, why
                        if solo.get("status") != "ok":
                            bad[c] = f"{solo.get('status')}: {solo.get('error') or ''}".strip()
                if not bad:
                    return results, dropped, (f"{why} (yet every contender passes alone; "
                                              "nothing was dropped)")
                for c, w in bad.items():
                    dropped[c] = w
                    alive.remove(c)
                    results.pop(c, None)
                    for o in self.observers:
                        o.on_fault(f"contest on {dc}: candidate {c} failed its check "
                                   f"({w.splitlines()[0][:300]}); dropped: it cannot win")
        return results, dropped, ""

    def _contest_rows(self, run_id: str, it: int, dc: str, results: dict[str, dict[str, dict]],
                      dropped: dict[str, str], by_cand: dict[str, dict[str, tuple]],
                      labels: dict[str, str], winner: str | None) -> list[dict[str, Any]]:
        """``contests`` rows: every re-measured sample set, and one row per dropped
        contender and size with its status (``label``: e.g. ``wrong_result``) and no figure."""
        out = [{"run_id": run_id, "sweep": self.sweep.name, "iteration": it,
                "device_class": dc, "dims": dims, "candidate_id": c, "job_key": st["job_key"],
                "median_ms": st["median_ms"], "iqr_ms": st["iqr_ms"],
                "n_samples": st["n_samples"], "samples_ms": st["samples_ms"],
                "label": labels.get(c), "winner": c == winner, "created_at": now()}
               for c, per in results.items() for dims, st in per.items()]
        out += [{"run_id": run_id, "sweep": self.sweep.name, "iteration": it,
                 "device_class": dc, "dims": dims, "candidate_id": c, "job_key": e[0],
                 "label": why.split(":", 1)[0], "winner": False, "created_at": now()}
                for c, why in dropped.items() for dims, e in by_cand[c].items()]
        return out

    def _contest(self, it: int, dc: str, ranked: list[dict[str, Any]], actors: list[Any],
                 infos: list[dict], writer: Writer, run_id: str
                 ) -> tuple[Verdict | None, dict[str, str]]:
        """Re-measure the leader and the candidates within noise of it side by side on one
        device of ``dc`` (kopt.contest, :meth:`_side_by_side`). Returns the verdict (None when
        the leader is clear, no device is left or the contest could not run) and the
        contenders dropped for failing a check, which the caller must not name. Writes every
        re-measured sample set and every dropped contender to the ``contests`` table."""
        by_cand = self._ok_rows(run_id, dc, it)
        per_dims = {c: [(r[2], r[3]) for r in rows.values()] for c, rows in by_cand.items()}
        cands = contenders(ranked, per_dims)
        live = self._live(dc, infos)
        if len(cands) < 2 or not live:
            return None, {}
        ids = [c["candidate_id"] for c in cands]
        results, dropped, error = self._side_by_side(actors[live[0]], dc,
                                                     {c: by_cand[c] for c in ids})
        left = [c for c in cands if c["candidate_id"] in results]
        verdict = None
        if error or not left:
            why = error or "every contender failed its check"
            for o in self.observers:
                o.on_fault(f"contest on {dc} could not finish ({why}); the best-ranked "
                           "contender that did not fail a check wins")
        else:
            verdict = decide(left, {c: [(st["median_ms"], st["iqr_ms"]) for st in per.values()]
                                    for c, per in results.items()})
        writer.add("contests", self._contest_rows(
            run_id, it, dc, results if verdict else {}, dropped, by_cand,
            verdict.labels if verdict else {}, verdict.winner if verdict else None))
        if verdict is not None:
            for o in self.observers:
                o.on_contest(dc, verdict)
        return verdict, dropped

    def _close_loop(self, states: dict[str, IterState], actors: list[Any], infos: list[dict],
                    writer: Writer, run_id: str) -> None:
        """The loop's closing, per device class: re-measure side by side the first baseline,
        every iteration's winner and the final winner (kopt.contest.close_loop), write the
        sample sets as ``contests`` rows with iteration 0 and the verdict as the ``closing``
        of the class's last state (a new ``iterations`` row for its iteration)."""
        writer.flush()
        by_it: dict[str, dict[int, IterState]] = {}
        for it, dc, js in iteration_states(self.store, run_id):
            by_it.setdefault(dc, {})[it] = IterState.from_json(js)
        for o in self.observers:
            o.on_phase("closing")
        for dc, st in states.items():
            hist = [by_it.get(dc, {})[k] for k in sorted(by_it.get(dc, {}))]
            first = next((h.baseline for h in hist if h.iteration == 1 and h.baseline), None)
            if not hist or first is None or not st.best:
                continue  # nothing measured, or the first baseline failed
            winner_of = {first["candidate_id"]: 0}
            for h in hist:
                if h.best and h.best["candidate_id"] not in winner_of:
                    winner_of[h.best["candidate_id"]] = h.iteration
            final = st.best["candidate_id"]
            rows = self._ok_rows(run_id, dc)
            by_cand = {c: rows[c] for c in winner_of if c in rows}
            live = self._live(dc, infos)
            if not live or not by_cand:
                continue
            if list(by_cand) == [first["candidate_id"]]:  # no winner beyond the first baseline
                states[dc] = dataclasses.replace(st, closing={
                    "speedup": 1.0, "first_baseline": final, "final_winner": final,
                    "best": {"iteration": 1, **first}, "winner_of": winner_of, "dropped": {},
                    "note": "no iteration beat the first baseline beyond noise"})
                writer.add("iterations", [{
                    "run_id": run_id, "sweep": self.sweep.name, "iteration": st.iteration,
                    "device_class": dc, "state": states[dc].to_json(), "created_at": now()}])
                continue
            results, dropped, error = self._side_by_side(actors[live[0]], dc, by_cand)
            try:
                if error:
                    raise ValueError(error)
                closing = close_loop(first["candidate_id"], final, winner_of, {
                    c: [(x["median_ms"], x["iqr_ms"]) for x in per.values()]
                    for c, per in results.items()}, dropped)
            except ValueError as e:
                for o in self.observers:
                    o.on_fault(f"the closing contest on {dc} could not run ({e}); the loop's "
                               "total speedup is not known")
                closing = {"speedup": None, "note": f"the closing contest failed: {e}",
                           "dropped": dropped, "final_winner": final, "winner_of": winner_of}
            best_id = closing.pop("best_id", None)
            if best_id is not None:
                src = next((h.best for h in hist if h.best and h.best["candidate_id"] == best_id),
                           None) or first
                closing["best"] = {"iteration": 1, **src}
            writer.add("contests", self._contest_rows(
                run_id, 0, dc, results, dropped, by_cand, closing.get("labels") or {}, best_id))
            states[dc] = dataclasses.replace(st, closing=closing)
            writer.add("iterations", [{
                "run_id": run_id, "sweep": self.sweep.name, "iteration": st.iteration,
                "device_class": dc, "state": states[dc].to_json(), "created_at": now()}])
            writer.flush()
            for o in self.observers:
                o.on_iteration(dc, states[dc])

    def _submit_build(self, b: str, job: wbuild.BuildJob, attempt: int = 1) -> tuple[Any, Any]:
        """Start the Ray build task of build ``b``; returns its (meta, artifact) refs. On a
        mixed-platform cluster it runs on a node of the target's platform (the next one on
        each ``attempt``)."""
        opts: dict[str, Any] = {}
        if self._routes is not None:
            ids = self._routes[self._build_platform[b]]
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                ids[(hash(b) + attempt) % len(ids)], soft=False)
        return self._build_task.options(**opts).remote(job)

    def _start_early_builds(self, builds: dict[str, wbuild.BuildJob]) -> None:
        """Start iteration 1's builds now, while the devices compute the reference outputs
        and query ncu: :meth:`_loop` takes over their refs instead of building again. Cache
        hits are left to the loop (they need no task)."""
        for b, job in builds.items():
            if self._routes is None and wbuild.cached(job) is not None:
                continue
            self._early_builds[b] = self._submit_build(b, job)

    def _loop(self, todo: list[Job], builds: dict[str, wbuild.BuildJob], space: Space,
              actors: list[Any], infos: list[dict], writer: Writer, summary: RunSummary,
              run_id: str) -> None:
        """Build, dispatch and collect ``todo`` until every job has its row.

        Faults: a build task lost with its node is resubmitted (on another node of its
        platform when builds are routed); a device actor that dies puts its in-flight jobs
        back at the head of its class's queue (at most ``MAX_JOB_ATTEMPTS`` runs each) and
        is replaced on the same node when that node is still alive; when a class has no
        live device left, its remaining jobs are rows with status ``lost`` and the reason.
        """
        sweep = self.sweep
        by_build: dict[str, list[Job]] = {}
        for j in todo:
            by_build.setdefault(j.build_id, []).append(j)
        # baseline builds first: their timings are every speedup's denominator
        order = sorted(builds, key=lambda b: not any(j.candidate.is_baseline
                                                     for j in by_build[b]))
        pending_builds: dict[Any, str] = {}
        build_tries: dict[str, int] = {}
        artifacts, metas = self._artifacts, self._build_meta

        hits: dict[str, dict] = {}

        def submit_build(b: str) -> None:
            # a build the driver node's cache holds needs no task: content-addressed, so
            # valid on every node of a single-platform cluster; small artifacts go inline
            # as an argument (under Ray's 100 KiB inlining limit), larger ones are put once
            # an early build (started while the actors started) is this run's compile even
            # when it has already written the cache: take its refs before looking there
            early = self._early_builds.pop(b, None) if b not in build_tries else None
            hit = (wbuild.cached(builds[b]) if early is None and self._routes is None
                   else None)
            if hit is not None:
                hits[b] = dataclasses.asdict(hit[0])
                artifacts[b] = hit[1] if len(hit[1]) < 100 * 1024 else ray.put(hit[1])
                return
            n = build_tries[b] = build_tries.get(b, 0) + 1
            meta_ref, art_ref = early or self._submit_build(b, builds[b], n)
            pending_builds[meta_ref] = b
            artifacts[b] = art_ref

        ready: dict[str, deque[Job]] = {}
        for b in order:
            if b in artifacts and (metas.get(b) or {}).get("ok"):  # built in an earlier rung
                for job in by_build[b]:
                    ready.setdefault(job.device_class, deque()).append(job)
            else:
                submit_build(b)
        inflight: dict[int, int] = {i: 0 for i in range(len(actors))}
        running: dict[Any, tuple[int, Job]] = {}
        starting: dict[Any, tuple[int, float]] = {}  # info ref of a replacement -> (slot, t0)
        attempts: dict[str, int] = {}
        sent: dict[int, int] = {}  # device slot -> jobs sent in this batch
        self._job_common = job_common = job_base(sweep, space, self.rel_paths)

        def emit(job: Job, outcome: dict[str, Any], info: dict | None) -> None:
            if job.job_key in self.rows:  # one row per job key, whatever Ray retried
                return
            row = self._row(job, outcome, metas.get(job.build_id, {}), info, space, run_id)
            self.rows[job.job_key] = row
            writer.add("candidates", [row])
            summary.status_counts[row["status"]] = summary.status_counts.get(row["status"], 0) + 1
            for o in self.observers:
                o.on_result(row)

        def built(b: str, meta: dict[str, Any]) -> None:
            metas[b] = meta
            res = wbuild.BuildResult(**meta)
            summary.compile_cpu_s += 0.0 if res.cached else res.compile_s
            for o in self.observers:
                if res.note:  # a cache entry that failed its check
                    o.on_fault(f"build {b}: {res.note}")
                o.on_build(res, len(by_build[b]))
            if not res.ok:
                for job in by_build[b]:
                    emit(job, {"status": "compile_error", "error": res.error}, None)
                return
            for job in sorted(by_build[b], key=lambda j: not j.candidate.is_baseline):
                ready.setdefault(job.device_class, deque()).append(job)

        def orphaned(dc: str) -> bool:
            return not self._live(dc, infos) and not any(
                infos[i]["device_class"] == dc for i, _ in starting.values())

        def drain_orphans() -> None:
            for dc, q in ready.items():
                if q and orphaned(dc):
                    while q:
                        job = q.popleft()
                        emit(job, {"status": "lost", "error": self._lost.get(
                            dc, f"no live device of class {dc}")}, None)

        def dispatch() -> None:
            if space.backend == "cpu" and pending_builds:
                # CPU devices share the cores the compilers use: time nothing while building
                return
            # one job at a time to the least-loaded device of its class (fewest in flight,
            # then fewest sent), so that builds finishing one by one spread over the devices
            held = {k for k, _ in starting.values()}
            while True:
                free = [i for i in range(len(actors))
                        if i not in self.dead and i not in held and inflight[i] < self.inflight
                        and ready.get(infos[i]["device_class"])]
                if not free:
                    return
                i = min(free, key=lambda k: (inflight[k], sent.get(k, 0)))
                job = ready[infos[i]["device_class"]].popleft()
                payload = {**job_common, "build_id": job.build_id, "job_key": job.job_key,
                           "dims": job.dims}
                if job.timing:
                    payload["timing"] = job.timing
                ref = actors[i].run.remote(payload, artifacts[job.build_id])
                running[ref] = (i, job)
                inflight[i] += 1
                sent[i] = sent.get(i, 0) + 1

        def actor_died(i: int, err: Exception) -> None:
            if i in self.dead:
                return
            self.dead.add(i)
            dc = infos[i]["device_class"]
            why = (f"device actor {dc}#{i} on node {infos[i].get('node_ip')} died: "
                   f"{type(err).__name__}")
            self._lost[dc] = why + "; no live device of that class was left to rerun it"
            for o in self.observers:
                o.on_fault(why)
            slot = self.slots[i]
            alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
            if slot.node_id is None or slot.node_id in alive:  # the node lives: replace
                actors[i] = self._new_actor(space.backend, slot)
                starting[actors[i].info.remote()] = (i, time.perf_counter())

        def starved() -> set[int]:
            # live actors with nothing in flight or ready while their class still compiles
            compiling = {j.device_class for b in pending_builds.values() for j in by_build[b]}
            busy_slots = {k for k, _ in starting.values()}
            return {i for i in range(len(actors))
                    if i not in self.dead and i not in busy_slots and not inflight[i]
                    and infos[i]["device_class"] in compiling
                    and not ready.get(infos[i]["device_class"])}

        for b, meta in hits.items():  # in build order: the baseline first
            built(b, meta)
        dispatch()
        waiting, t_mark = starved(), time.perf_counter()
        while pending_builds or running or starting or any(ready.values()):
            waitables = list(pending_builds) + list(running) + list(starting)
            done_refs = (ray.wait(waitables, num_returns=1, timeout=1.0)[0] if waitables
                         else [])
            t_now = time.perf_counter()
            for i in waiting:
                self.wait_build_s[i] = self.wait_build_s.get(i, 0.0) + t_now - t_mark
            t_mark = t_now
            for ref in done_refs:
                if ref in pending_builds:
                    b = pending_builds.pop(ref)
                    try:
                        meta = ray.get(ref)
                    except ray.exceptions.RayError as e:
                        if (self._routes is not None and build_tries[b] < MAX_BUILD_SUBMITS
                                and not isinstance(e, ray.exceptions.RayTaskError)):
                            submit_build(b)  # its node died: another node of the platform
                            continue
                        meta = dataclasses.asdict(wbuild.BuildResult(b, False, f"build task: {e}"))
                    built(b, meta)
                elif ref in starting:
                    i, _ = starting.pop(ref)
                    try:
                        infos[i] = {**ray.get(ref), "device_class": infos[i]["device_class"]}
                        self.dead.discard(i)
                        inflight[i] = 0
                        for o in self.observers:
                            o.on_fault(f"device actor {infos[i]['device_class']}#{i} replaced")
                    except ray.exceptions.RayError:
                        pass  # stays dead
                else:
                    i, job = running.pop(ref)
                    inflight[i] -= 1
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayActorError as e:
                        actor_died(i, e)
                        attempts[job.job_key] = attempts.get(job.job_key, 1) + 1
                        if attempts[job.job_key] <= MAX_JOB_ATTEMPTS:
                            ready.setdefault(job.device_class, deque()).appendleft(job)
                            continue
                        outcome = {"status": "lost", "error": f"device actor died on each of "
                                   f"{MAX_JOB_ATTEMPTS} attempts; last: {e}"}
                    except ray.exceptions.RayError as e:
                        outcome = {"status": "lost", "error": f"device actor failed: {e}"}
                    emit(job, outcome, infos[i])
            now_t = time.perf_counter()
            for ref, (i, t0) in list(starting.items()):
                if now_t - t0 > ACTOR_START_TIMEOUT_S:  # its node went away meanwhile
                    starting.pop(ref)
                    ray.kill(actors[i], no_restart=True)
            drain_orphans()
            dispatch()
            waiting = starved()
            writer.add("candidates", [])  # time-based flush

    def _row(self, job: Job, outcome: dict[str, Any], meta: dict, info: dict | None,
             space: Space, run_id: str) -> dict[str, Any]:
        c = job.candidate
        info = info or {}
        work = self.sweep.work(job.dims)
        return {
            "run_id": run_id, "sweep": self.sweep.name, "iteration": job.iteration,
            "rung": job.rung, "job_key": job.job_key,
            "candidate_id": c.candidate_id, "build_id": job.build_id,
            "compute_method": c.triple[0], "memory_method": c.triple[1],
            "latency_method": c.triple[2], "is_baseline": c.is_baseline,
            "params": dumps(c.params), "defines": dumps(c.defines), "dims": dumps(job.dims),
            "backend": space.backend, "arch": c.target, "device_class": job.device_class,
            "device_name": info.get("name"), "node": info.get("node_ip"),
            "node_id": info.get("node_id"), "device_id": info.get("device_id"),
            "status": outcome.get("status", "error"), "error": outcome.get("error") or None,
            "compile_s": meta.get("compile_s"), "build_cached": meta.get("cached"),
            "registers": meta.get("registers"), "smem_bytes": meta.get("smem_bytes"),
            "spill_bytes": meta.get("spill_bytes"), "max_abs_err": outcome.get("max_abs_err"),
            "median_ms": outcome.get("median_ms"), "min_ms": outcome.get("min_ms"),
            "iqr_ms": outcome.get("iqr_ms"), "mean_ms": outcome.get("mean_ms"),
            "n_samples": outcome.get("n_samples"), "samples_ms": outcome.get("samples_ms"),
            "sm_clock_mhz": outcome.get("sm_clock_mhz"),
            "temperature_c": outcome.get("temperature_c"),
            "throttle_reasons": outcome.get("throttle_reasons"),
            "throttled_samples": outcome.get("throttled_samples"),
            "throttled": outcome.get("throttled"),
            "power_w": outcome.get("power_w"),
            "wall_s": outcome.get("wall_s"), "flops": work[0], "bytes": work[1],
            "input_sets": outcome.get("input_sets"), "full_ms": outcome.get("full_ms"),
            "escaped_ms": outcome.get("escaped_ms"),
            "leaked_bytes": outcome.get("leaked_bytes"),
            "created_at": now(),
        }


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored inside (main thread only): what runs there finishes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def resumable_run(store: Path, run_id: str, sweep: Sweep) -> dict[str, Any]:
    """The latest ``runs`` record of ``run_id``, checked to be a run of ``sweep`` with the
    same spec and sources (what ``--resume`` needs).

    Raises:
        SweepError: no such run in ``store``, a run of another sweep, or the spec changed.
    """
    rec = run_record(store, run_id)
    if not rec:
        raise SweepError(f"--resume {run_id}: no such run in {store} "
                         "(`kopt query \"select run_id, sweep, status from runs\"` lists runs)")
    if rec["sweep"] != sweep.name:
        raise SweepError(f"--resume {run_id}: that run is of sweep {rec['sweep']!r}, "
                         f"not {sweep.name!r}")
    if rec["spec_hash"] != sweep.spec_hash:
        raise SweepError(f"--resume {run_id}: the sweep's spec or sources changed "
                         "since that run; start a new run instead")
    return rec


def check_store_path(store: Path) -> None:
    """Refuse a ``--store`` that is not a folder and cannot become one.

    Raises:
        SweepError: ``store`` (or the nearest existing folder above it) is a file, or is
            not writable.
    """
    if store.exists() and not store.is_dir():
        raise SweepError(f"--store {store}: that is a file, not a store folder; pass a "
                         "folder (a missing one is created)")
    above = next(p for p in [store, *store.absolute().parents] if p.exists())
    if not above.is_dir():
        raise SweepError(f"--store {store}: {above} is a file, so the folder cannot be "
                         "created; pass a path under a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise SweepError(f"--store {store}: {above} is not writable by this user; pass a "
                         "folder you can write to")


def check_before_ray(sweep: Sweep, store: Path, backend: str, resume: str | None,
                     local: bool) -> None:
    """What can be checked before Ray starts (which takes seconds): the store path, the
    ``--resume`` run, the backend's source and, on an embedded local instance
    (``local``), a GPU on this machine for the CUDA backend.

    Raises:
        SweepError: see :func:`check_store_path`, :func:`resumable_run`; no GPU here.
        SpecError: the sweep has no source for the requested backend.
    """
    check_store_path(store)
    if resume:
        rec = resumable_run(store, resume, sweep)
        backend = rec["backend"] if backend == "auto" else backend
    if backend != "auto":
        sweep.space(backend)  # SpecError when the sweep has no source for it
    if not local or backend == "cpu" or local_gpu_count():
        return
    if backend == "cuda":
        raise SweepError("--backend cuda: this machine has no GPU (NVML sees none"
                         + (f" with CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}"
                            if "CUDA_VISIBLE_DEVICES" in os.environ else "")
                         + "); use --backend cpu, or --address/--cluster for a GPU cluster")
    if "cpu" not in sweep.spaces:
        raise SweepError(f"{sweep.spec_path}: this machine has no GPU and the sweep has no "
                         "C++ source for the CPU backend; run it on a GPU node, or add a "
                         "`cpu:` block with `kernel: NAME.cpp`")


def run_sweep(sweep: Sweep, store: Path, *, backend: str = "auto",
              max_candidates: int | None = None, resume: str | None = None,
              cpu_devices: int = 1, address: str | None = None, iterations: int | None = None,
              observers: list[Observer] | None = None, cluster: str | None = None,
              strategy: str | None = None, seed: int | None = None) -> RunSummary:
    """Attach to (or start) Ray and run ``sweep``; see :class:`Driver`.

    ``cluster`` (a cluster-launcher YAML) or ``address`` attach to a running cluster;
    neither starts an embedded local Ray instance. Everything :func:`check_before_ray`
    can check fails before Ray starts.
    """
    if resume:
        RunLock(store, resume).check()  # before Ray starts: one run has one writer
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (timeout, a scheduler, systemd) stops a sweep the way Ctrl-C does: every
        # finished measurement flushed, the run marked interrupted, resumable
        signal.signal(signal.SIGTERM, _terminate)
    check_before_ray(sweep, Path(store), backend, resume,
                     local=not cluster and address in (None, "local"))
    if cluster or (address and address != "auto"):
        renv, notes = cluster_runtime_env(sweep)
        for o in observers or []:
            for n in notes:
                o.on_note(n)
        attach(cluster_address(cluster) if cluster else address,
               f"--cluster {cluster}" if cluster else f"--address {address}", renv)
    else:
        ensure_ray(address)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)  # again: ray.init installs its own
    return Driver(sweep, store, backend, max_candidates, resume, cpu_devices,
                  iterations=iterations, observers=observers, strategy=strategy,
                  seed=seed).run()


__all__ = ["Driver", "Job", "Observer", "RunSummary", "SweepError", "SpecError", "run_sweep"]
