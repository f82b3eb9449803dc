"""Measurement observers: hooks around a candidate's timed batches whose results become
columns of its row (Kernel Tuner's ``BenchmarkObserver``, ``kernel_tuner/observers/
observer.py``: ``before_start`` / ``after_finish`` around each benchmarked run, then
``get_results`` once per configuration).

The harness (workers.harness ``Harness.time``) calls, per candidate timing:
:meth:`Observer.begin` once, then around every batch of samples :meth:`Observer.before_batch`
and :meth:`Observer.after_batch`, and at the end :meth:`Observer.results`, whose keys are
merged into the job's outcome (and stored as ``candidates`` columns of the same names).
``after_batch`` may also say that the batch was disturbed (e.g. the GPU throttled): its
samples are set aside and re-measured.

A :class:`ProfilingObserver` (Kernel Tuner's ``PrologueObserver``, which its
``NCUObserver`` is) is not called around the timed batches: the device actor
(workers.device_actor ``profile_many``) calls its :meth:`ProfilingObserver.profile` hook,
which wraps an untimed, profiled launch of each candidate of a batch; its results per
candidate are columns of the ``profiles`` table. :class:`NcuObserver` is Nsight Compute's.

A new measurement source is one class here: it says which ``table`` its results go to,
declares their ``columns`` (name -> Arrow type) and which ``devices`` it measures, and is
registered (:func:`register` in this process; the ``kopt.observers`` entry-point group for
an installed package, seen by every process of every node). The harness and the device
actor make their observers from :func:`registered`; the driver stores every declared
column (kopt.store.files ``table_schema``) without knowing the observer.

Node side: this module imports nothing beyond the standard library (nvidia-ml-py only
when an :class:`NvmlObserver` is made, and it is optional; workers.ncu only when an
:class:`NcuObserver` profiles).
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import asdict, dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol

from workers import ncu, ncu_warm

ENTRY_POINT_GROUP = "kopt.observers"

# NVML clocks-event reasons that mean thermal or power throttling (nvml.h:
# SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40,
# HwPowerBrakeSlowdown 0x80); idle, application-clock and sync-boost bits do not count
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


class Observer:
    """A measurement observer; every hook is a no-op here (subclass and override).

    Kernel Tuner's hooks map as: ``register_configuration`` -> :meth:`begin`,
    ``before_start`` -> :meth:`before_batch`, ``after_finish`` -> :meth:`after_batch`
    (per batch of samples, not per launch: a reading costs far more than a short kernel),
    ``get_results`` -> :meth:`results`. There is no ``during`` (no thread polls while a
    batch runs).

    Class attributes (what the registry and the store read):
        table: the store table its results are columns of (``candidates``).
        columns: result key -> Arrow type name (``float64``, ``int64``, ``bool``,
            ``string``); a key not declared is kept in the outcome's ``extra`` only.
        devices: the backends it measures (``cuda``, ``cpu``).
    """

    table: ClassVar[str] = "candidates"
    columns: ClassVar[dict[str, str]] = {}
    devices: ClassVar[tuple[str, ...]] = ("cuda", "cpu")

    def begin(self) -> None:
        """A candidate's timing starts: forget the previous candidate's readings."""

    def before_batch(self) -> None:
        """Just before a batch of timed samples."""

    def after_batch(self, samples_ms: list[float]) -> bool:
        """Just after a batch (its samples, ms). Returns True when the batch was disturbed
        and its samples are to be set aside (kept only if nothing else can be measured)."""
        return False

    def results(self) -> dict[str, Any]:
        """The columns this observer adds to the candidate's row (None: not known)."""
        return {}


class NvmlReader(Protocol):
    """One reading of the device: ``sm_clock_mhz``, ``temperature_c``,
    ``throttle_reasons`` (bits), ``power_w``; each None when NVML cannot give it."""

    def sample(self) -> dict[str, Any]: ...


class Nvml:
    """Readings of the harness's GPU (the first of ``CUDA_VISIBLE_DEVICES``, by index or
    UUID) through nvidia-ml-py. Every figure is optional: without the library, without a
    GPU NVML knows, or for a read it answers with an error (e.g. ``NOT_SUPPORTED`` on a
    Jetson, power on some boards) that figure is None and the others still come."""

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
            self.h = (pynvml.nvmlDeviceGetHandleByUUID(vis) if vis.startswith("GPU-")
                      else pynvml.nvmlDeviceGetHandleByIndex(int(vis or 0)))
            self.nv: Any = pynvml
        except Exception:
            self.nv = None

    def _read(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nv, fn)(self.h, *args)
        except Exception:  # NVMLError (NOT_SUPPORTED, ...), or a library without ``fn``
            return None

    def process_bytes(self, pid: int) -> int | None:
        """Device memory (bytes) process ``pid`` holds on this GPU, from NVML's list of its
        compute processes (``nvmlDeviceGetComputeRunningProcesses``: framebuffer memory per
        process, its context included). None without NVML, when the GPU does not report
        per-process memory, or when ``pid`` is not in the list (e.g. a container whose
        process ids are not the host's, which NVML lists)."""
        procs = self._read("nvmlDeviceGetComputeRunningProcesses")
        for p in procs or []:
            if p.pid == pid:
                used = p.usedGpuMemory
                return int(used) if isinstance(used, int) and used >= 0 else None
        return None

    def sample(self) -> dict[str, Any]:
        """``sm_clock_mhz`` (MHz), ``temperature_c`` (C), ``throttle_reasons`` (NVML's
        clocks-event bits) and ``power_w`` (W, ``nvmlDeviceGetPowerUsage``'s milliwatts;
        on Ampere and newer a one-second running average); {} without NVML."""
        nv = self.nv
        if nv is None:
            return {}
        clock = self._read("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM)
        temp = self._read("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU)
        bits = self._read("nvmlDeviceGetCurrentClocksEventReasons")
        power = self._read("nvmlDeviceGetPowerUsage")
        return {"sm_clock_mhz": None if clock is None else float(clock),
                "temperature_c": None if temp is None else float(temp),
                "throttle_reasons": None if bits is None else int(bits),
                "power_w": None if power is None else power / 1000.0}


class NvmlObserver(Observer):
    """SM clock, temperature, throttle reasons and power around each batch (NVML).

    Reads the device before and after every batch; a batch during which a thermal or
    power throttle reason (``THROTTLE_MASK``) was set is disturbed. Results:
    ``sm_clock_mhz`` (mean of the readings), ``temperature_c`` (the last), ``power_w``
    (mean of the readings after each batch, the device busy; W), ``throttle_reasons``
    (every bit seen, OR-ed; 0 when none was or NVML could not say). A figure NVML never
    gave is None.

    Args:
        reader: where readings come from (default :class:`Nvml`; tests pass a stand-in).
    """

    columns: ClassVar[dict[str, str]] = {"sm_clock_mhz": "float64", "temperature_c": "float64",
                                         "throttle_reasons": "int64", "power_w": "float64"}
    devices: ClassVar[tuple[str, ...]] = ("cuda",)

    def __init__(self, reader: NvmlReader | None = None):
        self.reader = reader if reader is not None else Nvml()
        self.begin()

    def begin(self) -> None:
        self.clocks: list[float] = []
        self.powers: list[float] = []
        self.temp: float | None = None
        self.reasons = 0
        self._before: dict[str, Any] = {}

    def before_batch(self) -> None:
        self._before = self.reader.sample()

    def after_batch(self, samples_ms: list[float]) -> bool:
        after = self.reader.sample()
        bits = (self._before.get("throttle_reasons") or 0) | (after.get("throttle_reasons")
                                                               or 0)
        self.reasons |= bits
        self.clocks += [c for c in (self._before.get("sm_clock_mhz"),
                                    after.get("sm_clock_mhz")) if c]
        if after.get("temperature_c") is not None:
            self.temp = after["temperature_c"]
        if after.get("power_w") is not None:
            self.powers.append(after["power_w"])
        return bool(bits & THROTTLE_MASK)

    def results(self) -> dict[str, Any]:
        return {"sm_clock_mhz": sum(self.clocks) / len(self.clocks) if self.clocks else None,
                "throttle_reasons": self.reasons, "temperature_c": self.temp,
                "power_w": sum(self.powers) / len(self.powers) if self.powers else None}


@dataclass
class ProfileTarget:
    """One candidate of a profiled pass: its harness job (with ``artifact`` and ``device``)
    and the mangled names of the ``__global__`` kernels its build reported."""

    job: dict[str, Any]
    kernels: list[str] = field(default_factory=list)


class ProfilingObserver(Observer):
    """An observer of an untimed, profiled pass (Kernel Tuner's ``PrologueObserver``): the
    harness does not call it around timed batches; the device actor calls :meth:`profile`
    once per batch of candidates, one device at a time. Its results are ``profiles``
    columns (``table``), one dict per candidate.

    Args:
        **options: what the driver asked for this pass (NCU: ``metrics``, ``sections``);
            an observer ignores the options it does not know.
    """

    table: ClassVar[str] = "profiles"
    devices: ClassVar[tuple[str, ...]] = ("cuda",)

    def __init__(self, **options: Any):
        self.options = options

    def profile(self, batch: list[ProfileTarget]) -> list[dict[str, Any]]:
        """Launch every candidate of ``batch`` once under the profiler. Returns, per
        candidate in order, the columns it adds (as :meth:`Observer.results` does for a
        timed candidate); never raises for a failed profile (a status column says it)."""
        return [{} for _ in batch]


class NcuObserver(ProfilingObserver):
    """Nsight Compute (workers.ncu): the batch in one ``ncu`` process (``capture_many``),
    or each candidate in its own when their launches cannot be told apart (``capture``).

    Results per candidate: ``profile_status`` (ok, no_ncu, no_permission, no_kernels,
    crashed, timeout), ``profile_error`` (None when none), ``ncu_rows`` (the metric rows
    of every profiled launch: ``kernel``, ``launch``, ``metric``, ``value``, ``unit``; the
    driver writes them to the ``metrics`` table and scores them), ``ncu_command`` and
    ``ncu_seconds`` (s).

    Args:
        metrics: metric names to collect (``--metrics``) and read.
        sections: extra ``--section`` identifiers (the sweep's ``ncu.sections``).
        warm: an ncu process started ahead (workers.ncu_warm.WarmNcu) collecting the same
            metrics and sections: the batch goes to it first (cold when it cannot serve).
    """

    columns: ClassVar[dict[str, str]] = {"profile_status": "string", "profile_error": "string"}

    def __init__(self, metrics: list[str] | None = None, sections: list[str] | None = None,
                 **options: Any):
        super().__init__(metrics=metrics, sections=sections, **options)
        self.metrics, self.sections = list(metrics or []), sections

    def profile(self, batch: list[ProfileTarget]) -> list[dict[str, Any]]:

        items = [(t.job, t.kernels) for t in batch]
        warm = self.options.get("warm")  # a started ncu (workers.ncu_warm), used up here
        res = None
        if warm is not None and warm.key == ncu_warm.key_of(self.metrics, self.sections):
            res = ncu_warm.capture(warm, items, self.metrics)
        elif warm is not None:
            warm.close()
        if res is None:
            res = ncu.capture_many(items, self.metrics, self.sections)
        if res is None:  # one capture per candidate
            res = [ncu.capture(j, ks, self.metrics, self.sections) for j, ks in items]
        return [{"profile_status": r.status, "profile_error": r.error or None,
                 "ncu_command": r.command, "ncu_seconds": r.seconds,
                 "ncu_rows": [asdict(x) for x in r.rows]} for r in res]


BUILTIN: tuple[type[Observer], ...] = (NvmlObserver, NcuObserver)
_registered: list[type[Observer]] = []


def register(cls: type[Observer]) -> type[Observer]:
    """Add a measurement observer class to this process's :func:`registered` list (usable
    as a class decorator). Another process (a sandbox, an actor on another node) sees it
    only through the ``kopt.observers`` entry-point group of an installed package.

    Raises:
        TypeError: ``cls`` is not an :class:`Observer` subclass.
    """
    if not (isinstance(cls, type) and issubclass(cls, Observer)):
        raise TypeError(f"{cls!r} is not a workers.observers.Observer subclass")
    if cls not in _registered:
        _registered.append(cls)
    return cls


@functools.lru_cache(maxsize=8)
def _plugins(path: tuple[str, ...]) -> tuple[type[Observer], ...]:
    """The observer classes of the ``kopt.observers`` entry points found on ``path``."""
    out: list[type[Observer]] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
        except Exception as e:  # any import error of the plug-in's module
            raise RuntimeError(f"measurement observer plug-in {ep.name} = {ep.value} (entry "
                               f"point group {ENTRY_POINT_GROUP}) cannot be loaded: {e!r}; "
                               "fix or uninstall its package") from None
        if not (isinstance(cls, type) and issubclass(cls, Observer)):
            raise RuntimeError(f"measurement observer plug-in {ep.name} = {ep.value} is not "
                               "a workers.observers.Observer subclass; fix its entry point")
        out.append(cls)
    return tuple(out)


def registered() -> list[type[Observer]]:
    """Every measurement observer class, in order: the built-ins (:data:`BUILTIN`), those
    :func:`register` added, then the ``kopt.observers`` entry points (each once).

    Raises:
        RuntimeError: an entry point cannot be loaded or is not an Observer (the message
            names it).
    """
    out: list[type[Observer]] = []
    for cls in (*BUILTIN, *_registered, *_plugins(tuple(sys.path))):
        if cls not in out:
            out.append(cls)
    return out


def timing_observers(device: str) -> list[Observer]:
    """New instances of the observers of a timed candidate on ``device`` (``cuda`` or
    ``cpu``): the registered non-profiling classes whose ``devices`` hold it."""
    return [cls() for cls in registered()
            if not issubclass(cls, ProfilingObserver) and device in cls.devices]


def profiling_observers(device: str, **options: Any) -> list[ProfilingObserver]:
    """New instances of the profiling observers for ``device``, each given ``options``."""
    return [cls(**options) for cls in registered()
            if issubclass(cls, ProfilingObserver) and device in cls.devices]


def observer_columns(table: str) -> dict[str, str]:
    """Column name -> Arrow type name of every registered observer whose results go to
    ``table`` (``candidates`` or ``profiles``), in registration order."""
    out: dict[str, str] = {}
    for cls in registered():
        if cls.table == table:
            for name, typ in cls.columns.items():
                out.setdefault(name, typ)
    return out
