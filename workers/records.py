"""Typed records that cross the driver -> device actor -> sandbox boundary.

Small and node-side (standard library only): the driver (``kopt``) and the node side
(``workers``) both import it; every record is a dataclass, so it pickles through Ray and
through the sandbox's pipe. In TVM MetaSchedule's terms: :class:`BuildJob` /
:class:`BuildResult` are the builder's input and result, :class:`RunJob` /
:class:`RunOutcome` the runner's, :class:`TuningRecord` the database's row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.deps import sha256_file
from workers.observers import observer_columns
from workers.status import Status

# a job's key naming the ref.py function its inputs come from (default "inputs"); a contest's
# contenders are also checked on sets from STRESS_INPUTS where ref.py defines it, and the
# driver makes sets from it once before anything is built (kopt.driver.sweep)
INPUTS_FN = "inputs_fn"
STRESS_INPUTS = "stress_inputs"
# a prepare-only job's key: the driver's probe of what contests draw from, made and dropped
# by the harness without touching its cached sets (workers.harness ``Harness.prepare``)
PROBE = "probe"


@dataclass
class BuildJob:
    """What to build. ``source`` is the text (it travels to any node).

    Attributes:
        build_id: content address (see kopt.run.builder.build_id).
        backend: ``cuda`` or ``cpu``.
        source: kernel source text; ``source_name`` its file name (suffix matters).
        source_dir: the sweep folder, added as ``-I`` for relative includes.
        defines: ``-DNAME=value`` pairs.
        flags: extra compiler flags from the spec.
        target: ``sm_90``, ``sm_90a``, ... or ``host``.
        include_dirs: extra ``-I`` folders.
        mode: ``solve`` (nvcc / c++ -> a shared object) or ``kernel`` (NVRTC -> a cubin).
        launch: kernel mode's launch block (kopt.core.spec.Space.launch_spec): the kernel name
            and the geometry expressions, stored in the artifact for the harness.
    """

    build_id: str
    backend: str
    source: str
    source_name: str
    source_dir: str
    defines: dict[str, Any]
    flags: list[str] = field(default_factory=list)
    target: str = "host"
    include_dirs: list[str] = field(default_factory=list)
    mode: str = "solve"
    launch: dict[str, Any] | None = None


@dataclass
class BuildResult:
    """A build's outcome (a value: ``ok`` False carries the compiler's error text).

    Units: compile_s in seconds; registers per thread; bytes for smem/spills. ``note``:
    why a cache entry of the same build id was not used (a damaged artifact, a changed
    local header), empty otherwise.
    """

    build_id: str
    ok: bool
    error: str = ""
    compile_s: float = 0.0
    cached: bool = False
    registers: int | None = None
    smem_bytes: int | None = None
    spill_bytes: int | None = None
    kernels: list[dict] = field(default_factory=list)
    command: str = ""
    log: str = ""
    note: str = ""


def band_of(tol: dict[str, Any], name: str) -> dict[str, float]:
    """The band (``{"atol", "rtol"}``) output ``name`` is checked with, from a run job's
    ``tolerance`` (kopt.core.spec.Tolerance as a dict): its own under ``outputs``, else the
    sweep's ``atol`` and ``rtol``."""
    own = (tol.get("outputs") or {}).get(name) or tol
    return {"atol": float(own["atol"]), "rtol": float(own["rtol"])}


@dataclass
class RunJob:
    """One run of one build on one device for one problem size.

    Attributes:
        job_key: the job's content address (the ``job_key`` column).
        build_id: the build whose artifact it runs.
        dims: the problem size (``{"N": 4096}``).
        common: the part every job of the sweep shares (kopt.run.builder.job_base: reference,
            seed, args, scalars, tolerance, timing, signature).
        timing: overrides ``common["timing"]`` (a successive-halving screening rung).
        artifact: the artifact's path on the device's node, once the device side has it
            (it crosses the sandbox's pipe with the job).
    """

    job_key: str
    build_id: str
    dims: dict[str, int]
    common: dict[str, Any]
    timing: dict[str, Any] | None = None
    artifact: str | None = None

    def payload(self) -> dict[str, Any]:
        """The harness's job dict (workers.harness.Harness.run)."""
        out = {**self.common, "build_id": self.build_id, "job_key": self.job_key,
               "dims": self.dims}
        if self.timing:
            out["timing"] = self.timing
        if self.artifact is not None:
            out["artifact"] = self.artifact
        return out

    @property
    def timeout_s(self) -> float:
        """The job's budget in seconds (``timing.timeout_s``)."""
        return float((self.timing or self.common["timing"])["timeout_s"])


@dataclass
class RunOutcome:
    """What one run measured (a value: faults are a ``status`` and an ``error``, never an
    exception). Times in milliseconds, ``wall_s`` in seconds; ``extra`` keeps what the harness
    said beyond these fields (e.g. ``notes``, ``outputs``)."""

    status: Status
    error: str = ""
    job_key: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    median_ms: float | None = None
    min_ms: float | None = None
    iqr_ms: float | None = None
    mean_ms: float | None = None
    n_samples: int | None = None
    samples_ms: list[float] | None = None
    sm_clock_mhz: Any = None
    temperature_c: Any = None
    throttle_reasons: Any = None
    throttled_samples: Any = None
    throttled: Any = None
    power_w: float | None = None
    wall_s: float | None = None
    input_sets: int | None = None
    full_ms: float | None = None
    escaped_ms: float | None = None
    leaked_bytes: int | None = None
    # when the device actor began and ended the job (epoch seconds, the device's clock)
    started_at: float | None = None
    ended_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunOutcome:
        """An outcome from the harness's dict (a missing or unknown status is ``error``)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "status"}
        try:
            status = Status(d.get("status") or "error")
        except ValueError:
            status = Status.ERROR
        return cls(status=status, **{k: v for k, v in d.items() if k in names},
                   extra={k: v for k, v in d.items() if k not in names and k != "status"})

    def observed(self) -> dict[str, Any]:
        """What registered measurement observers (workers.observers) declared as
        ``candidates`` columns and have no field here (a plug-in's results, kept in
        ``extra``): column name -> value."""
        cols = observer_columns("candidates")
        return {k: v for k, v in self.extra.items() if k in cols}

    @classmethod
    def fault(cls, status: Status, error: str) -> RunOutcome:
        """An outcome with no figures: the job could not run (``lost``, ``compile_error``)."""
        return cls(status=status, error=error)


# the error text a harness gives a job whose ref.py is not the one the run started with
# (workers.harness ``Harness.prepare``); the driver stops the run on it (kopt.driver.sweep)
REF_CHANGED = "changed since the run started"


def file_sha256(path: str | Path) -> str | None:
    """The sha256 (hex) of the file at ``path`` (workers.deps ``sha256_file``: hashed again
    only when its inode, size or times change); None when it cannot be read."""
    try:
        return sha256_file(path)
    except OSError:
        return None


@dataclass
class TuningRecord:
    """One row of the ``candidates`` table (kopt.store.files's schema): a job, its build and its
    outcome. Times: ``compile_s``/``wall_s`` in seconds, ``*_ms`` in milliseconds.

    Every field is a column of the ``candidates`` table (kopt.store.files.SCHEMAS); stores
    written before a column existed read it as NULL. A measurement observer plug-in's
    columns (:meth:`RunOutcome.observed`) go into the row beside these fields (kopt.store.files
    ``table_schema`` adds their columns)."""

    run_id: str
    sweep: str
    iteration: int
    rung: int
    job_key: str
    candidate_id: str
    build_id: str
    compute_method: str
    memory_method: str
    latency_method: str
    is_baseline: bool
    params: str  # JSON
    defines: str  # JSON
    dims: str  # JSON
    backend: str
    arch: str
    device_class: str
    device_name: str | None
    node: str | None
    node_id: str | None
    device_id: str | None
    status: Status
    error: str | None
    compile_s: float | None
    build_cached: bool | None
    registers: int | None
    smem_bytes: int | None
    spill_bytes: int | None
    max_abs_err: float | None
    median_ms: float | None
    min_ms: float | None
    iqr_ms: float | None
    mean_ms: float | None
    n_samples: int | None
    samples_ms: list[float] | None
    sm_clock_mhz: Any
    temperature_c: Any
    throttle_reasons: Any
    throttled_samples: Any
    throttled: Any
    power_w: float | None
    wall_s: float | None
    flops: float | None
    bytes: float | None
    input_sets: int | None
    full_ms: float | None
    escaped_ms: float | None
    leaked_bytes: int | None
    created_at: Any
    # lineage: parent candidate id, source digest, submitter, claimed methods
    # (comma-separated), analysis text
    parent_id: str | None = None
    source_hash: str | None = None
    submitter: str | None = None
    claimed_methods: str | None = None
    note: str | None = None
    max_rel_err: float | None = None  # the check's largest |out - ref| / |ref|
    # when the device actor began and ended the job (UTC timestamps): jobs on
    # one device never overlap, whichever sweeps shared it
    device_start: Any = None
    device_end: Any = None
    # the sandbox the candidate ran in (workers.isolation): namespaces, user-namespaces,
    # or none (NULL in stores written before it was recorded)
    isolation: str | None = None

    def row(self, observed: dict[str, Any] | None = None) -> dict[str, Any]:
        """The store row (``status`` as its plain string), with ``observed`` (plug-in
        observers' columns, :meth:`RunOutcome.observed`) beside the fields, never over
        one."""
        out = dataclasses.asdict(self)
        out["status"] = Status(self.status).value
        return {**(observed or {}), **out}
