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

Node side: this module imports nothing beyond the standard library (nvidia-ml-py only
when an :class:`NvmlObserver` is made, and it is optional).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

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
    """

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
