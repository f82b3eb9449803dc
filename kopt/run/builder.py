"""The Builder: candidate build inputs -> build results (TVM MetaSchedule's ``Builder``).

A build result is a value (workers.records.BuildResult): a compile error, a lost build
task or a damaged cache entry is ``ok`` False with the error text, never an exception.
:class:`RayBuilder` builds on Ray tasks of one CPU each (all submitted up front, so Ray
runs as many at once as there are CPUs), takes cache hits of the driver node's
content-addressed cache without a task, and routes builds to nodes of the target's
platform on a mixed cluster. :class:`LocalBuilder` builds in this process (tests).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kopt.core.expand import Candidate, stable_hash
from kopt.core.spec import Space, Sweep
from kopt.util.phases import PhaseRecorder
from workers import build as wbuild
from workers.records import BuildJob, BuildResult, file_sha256

MAX_BUILD_SUBMITS = 3  # submissions of one build whose node dies (routed builds)
INLINE_BYTES = 100 * 1024  # artifacts under Ray's inlining limit travel as an argument


def job_base(sweep: Sweep, space: Space, rel_paths: bool = False) -> dict[str, Any]:
    """The part of every harness job that is the same for the whole sweep and backend
    (reference, seed, shapes, scalars, tolerance, timing, the problem sizes contests check
    on: ``check_dims``, signature). ``rel_paths``: ref.py
    relative to the sweep folder (it travels to cluster nodes as the working_dir).
    ``reference_sha256``: ref.py's digest now; a harness refuses a job whose ref.py no
    longer has it (workers.harness ``_same_reference``)."""
    ref = sweep.reference.relative_to(sweep.root) if rel_paths else sweep.reference
    return {"reference": str(ref), "reference_sha256": file_sha256(sweep.reference),
            "seed": sweep.seed, "args": sweep.args,
            "scalars": sweep.scalars, "tolerance": sweep.tolerance.model_dump(),
            "timing": space.timing.model_dump(), "check_dims": space.check_dims,
            "signature": [dataclasses.asdict(a) for a in space.signature.args]}


def build_id(space: Space, cand: Candidate, digest: str, compiler_id: str,
             platform: str = "") -> str:
    """Content address of a build: source digest (kopt.core.expand.space_digest: the source and
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


def build_job(space: Space, cand: Candidate, bid: str, source: str) -> BuildJob:
    """The build input of candidate ``cand`` of ``space`` (``source``: its text)."""
    return BuildJob(build_id=bid, backend=space.backend, source=source,
                    source_name=space.source.name, source_dir=str(space.source.parent),
                    defines=cand.defines, flags=space.flags, target=cand.target,
                    include_dirs=space.include_dirs, mode=space.mode,
                    launch=space.launch_spec())


@dataclasses.dataclass
class BuildFuture:
    """A build under way. ``ref``: what to wait on (a Ray ObjectRef of the result), None
    once ``result`` is known (a cache hit, or collected); ``attempt``: its submissions."""

    build_id: str
    ref: Any = None
    result: BuildResult | None = None
    attempt: int = 1
    artifact: Any = None  # the artifact's Ray ref, while the task runs


class Builder(ABC):
    """Build inputs -> build results; every result carries its error instead of raising.

    ``artifacts`` (build id -> the artifact: bytes, or a reference the runner resolves) and
    ``results`` (build id -> BuildResult) hold every build of the run so far; ``phases``
    (kopt.util.phases) hears when the first build was submitted.
    """

    def __init__(self, phases: PhaseRecorder | None = None) -> None:
        self.phases = phases or PhaseRecorder()
        self.artifacts: dict[str, Any] = {}
        self.results: dict[str, BuildResult] = {}
        self.jobs: dict[str, BuildJob] = {}  # every build planned in this run

    @abstractmethod
    def submit(self, job: BuildJob) -> BuildFuture:
        """Start building ``job``; its artifact is in ``artifacts`` from now on."""

    @abstractmethod
    def collect(self, fut: BuildFuture) -> BuildResult | None:
        """The result of a finished ``fut`` (recorded in ``results``), or None when the
        build was lost and submitted again (wait on ``fut.ref`` once more)."""

    def build(self, jobs: list[BuildJob]) -> list[BuildResult]:
        """Build a batch to the end (blocking); results in the order of ``jobs``."""
        futs = [self.submit(j) for j in jobs]
        out = []
        for f in futs:
            res = f.result
            while res is None:
                res = self.collect(f)
            out.append(res)
        return out

    def built_ok(self, b: str) -> bool:
        """Build ``b`` finished in this run, correctly, and its artifact is at hand."""
        res = self.results.get(b)
        return b in self.artifacts and res is not None and res.ok

    def ensure(self, b: str) -> None:
        """Make sure the artifact of a planned build ``b`` is at hand (a build measured
        before a --resume: rebuilt, a cache hit)."""
        if b not in self.artifacts and b in self.jobs:
            self.submit(self.jobs[b])


class LocalBuilder(Builder):
    """Builds in this process with workers.build (no Ray): for tests and tools."""

    def submit(self, job: BuildJob) -> BuildFuture:
        self.phases.build_submitted()
        res, data = wbuild.build(job)
        self.jobs[job.build_id] = job
        self.results[job.build_id] = res
        if data is not None:
            self.artifacts[job.build_id] = data
        return BuildFuture(job.build_id, None, res)

    def collect(self, fut: BuildFuture) -> BuildResult | None:
        return fut.result


class RayBuilder(Builder):
    """Builds as Ray tasks (one CPU each; a retry covers a lost node, not a compile that
    kills its worker every time). ``routes``: platform -> node ids that build for it on a
    mixed-platform cluster (kopt.run.devices.build_nodes), None on a single-platform one."""

    def __init__(self, phases: PhaseRecorder | None = None) -> None:
        super().__init__(phases)
        self.platform: dict[str, str] = {}  # build id -> platform it targets
        self.routes: dict[str, list[str]] | None = None
        self._early: dict[str, BuildFuture] = {}  # started before the devices were up
        self._task = ray.remote(num_cpus=1, num_returns=2, max_retries=1)(wbuild.build)
        self.actors: list[Any] = []  # a warm service's builders (use_actors)
        self._next = 0  # the builder the next build goes to
        self.owner = ""  # HOST:PID of this driver, as the builders check it (use_actors)

    def use_actors(self, actors: list[Any], owner: str = "") -> None:
        """Send every build and the compiler identity to ``actors`` (handles of
        workers.build_actor.BuildActor: a warm service's builders, kopt.run.service) in turn,
        instead of starting Ray tasks (whose fresh worker processes a sweep on a service
        would wait for). A build lost with its builder goes to the next one. ``owner``:
        this driver's ``HOST:PID``; a builder skips the builds of an owner that is gone (an
        interrupted sweep's builds would keep the shared builders busy)."""
        self.actors, self.owner = list(actors), owner

    def plan(self, job: BuildJob, platform: str) -> BuildJob:
        """Record a build of this run and the platform it targets; returns ``job``."""
        self.platform[job.build_id] = platform
        return self.jobs.setdefault(job.build_id, job)

    def set_routes(self, routes: dict[str, list[str]] | None) -> None:
        """Route builds by platform (None: anywhere); a routed build is resubmitted by the
        driver on another node, not retried by Ray."""
        self.routes = routes
        if routes is not None:  # a mixed-platform cluster: tasks routed, not a service's builders
            self._task = self._task.options(max_retries=0)
            self.actors = []

    def start_early(self, builds: dict[str, BuildJob]) -> None:
        """Start builds now, while the devices start: :meth:`submit` takes over their refs
        instead of building again. Cache hits are left to :meth:`submit` (no task)."""
        for b, job in builds.items():
            if self.routes is None and wbuild.cached(job) is not None:
                continue
            self._early[b] = self._launch(b, job, 1)

    def _launch(self, b: str, job: BuildJob, attempt: int) -> BuildFuture:
        self.phases.build_submitted()
        if self.actors:
            actor = self.actors[self._next % len(self.actors)]
            self._next += 1
            meta_ref, art_ref = actor.build.remote(job, self.owner)
            return BuildFuture(b, meta_ref, None, attempt, art_ref)
        opts: dict[str, Any] = {}
        if self.routes is not None:  # the next node of the platform on each attempt
            ids = self.routes[self.platform[b]]
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                ids[(hash(b) + attempt) % len(ids)], soft=False)
        meta_ref, art_ref = self._task.options(**opts).remote(job)
        return BuildFuture(b, meta_ref, None, attempt, art_ref)

    def submit(self, job: BuildJob) -> BuildFuture:
        """An early build's future, a cache hit of the driver node (content-addressed, so
        valid on every node of a single-platform cluster; small artifacts inline, larger
        ones put once), or a new build task."""
        b = job.build_id
        self.jobs.setdefault(b, job)
        fut = self._early.pop(b, None)
        hit = wbuild.cached(job) if fut is None and self.routes is None else None
        if hit is None:
            fut = fut or self._launch(b, job, 1)
            self.artifacts[b] = fut.artifact
            return fut
        self.phases.build_submitted()
        self.artifacts[b] = hit[1] if len(hit[1]) < INLINE_BYTES else ray.put(hit[1])
        self.results[b] = hit[0]
        return BuildFuture(b, None, hit[0])

    def collect(self, fut: BuildFuture) -> BuildResult | None:
        """The finished task's result; a task lost with its node is submitted again on
        another node of its platform (routed builds, at most ``MAX_BUILD_SUBMITS``)."""
        if fut.result is not None:
            return fut.result
        try:
            res = ray.get(fut.ref)
        except ray.exceptions.RayError as e:
            if ((self.routes is not None or self.actors) and fut.attempt < MAX_BUILD_SUBMITS
                    and not isinstance(e, ray.exceptions.RayTaskError)):
                again = self._launch(fut.build_id, self.jobs[fut.build_id], fut.attempt + 1)
                fut.ref, fut.attempt, fut.artifact = again.ref, again.attempt, again.artifact
                self.artifacts[fut.build_id] = again.artifact
                return None
            res = BuildResult(fut.build_id, False, f"build task: {_task_error(e)}")
        fut.result, fut.ref = res, None
        self.results[fut.build_id] = res
        return res

    def start_identity(self, toolchain: str) -> Any:
        """Start reading the compiler identity and the node's environment: a Ray ref of
        ``(identity, environment)``, from a builder (use_actors) or a task of no CPU."""
        if self.actors:
            return self.actors[0].identity.remote(toolchain)
        return ray.remote(num_cpus=0)(wbuild.identity_and_env).remote(toolchain)

    def identities(self, toolchain: str, platforms: set[str], early_ref: Any = None
                   ) -> tuple[dict[str, str], dict]:
        """Compiler identity per device platform (each from a node of that platform, or
        from ``early_ref``, a task started earlier, when builds are not routed) and the
        environment of the first."""
        if self.actors and not early_ref:
            early_ref = self.start_identity(toolchain)
        task = ray.remote(num_cpus=0)(wbuild.identity_and_env)
        if self.routes is None:
            ident, env = ray.get(early_ref or task.remote(toolchain))
            return {p: ident for p in platforms}, env
        out, env = {}, {}
        for p, ids in self.routes.items():
            ident, e = ray.get(task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
                ids[0], soft=False)).remote(toolchain))
            out[p], env = ident, env or e
        return out, env




def _task_error(e: Exception) -> str:
    """One line for a build task that raised (e.g. a full disk): the exception the task
    raised, not Ray's whole remote traceback; Ray's own error's first line otherwise."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0][:500]
    return (str(e).splitlines() or [type(e).__name__])[0][:500]
