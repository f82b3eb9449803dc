"""Measurement observers (workers.observers): hooks around a candidate's timed batches whose
results become its row's columns; NVML's readings (clock, temperature, throttle, power) as
one of them, each figure optional."""

from __future__ import annotations

import sys
import types

from conftest import FIXTURES
from workers.observers import Nvml, NvmlObserver, Observer

TIMING = {"warmup_ms": 5, "min_samples": 5, "max_samples": 15, "max_time_ms": 500,
          "target_rel_error": 0.01, "timeout_s": 10}


def fake_nvml(clocks, temps, reasons, powers_mw, unsupported=()):
    """A stand-in for nvidia-ml-py answering one reading after another from the lists (as
    the real library's calls do: MHz, C, clocks-event bits, mW); the calls named in
    ``unsupported`` raise the real library's NVML_ERROR_NOT_SUPPORTED."""
    import pynvml as real

    it = {"clock": iter(clocks), "temp": iter(temps), "bits": iter(reasons),
          "power": iter(powers_mw)}
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_TEMPERATURE_GPU = real.NVML_CLOCK_SM, real.NVML_TEMPERATURE_GPU
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    m.nvmlDeviceGetHandleByUUID = lambda u: ("gpu", u)

    def read(key, name):
        def f(h, *args):
            if name in unsupported:
                raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
            assert h == ("gpu", 0)
            return next(it[key])
        return f

    m.nvmlDeviceGetClockInfo = read("clock", "nvmlDeviceGetClockInfo")
    m.nvmlDeviceGetTemperature = read("temp", "nvmlDeviceGetTemperature")
    m.nvmlDeviceGetCurrentClocksEventReasons = read("bits",
                                                    "nvmlDeviceGetCurrentClocksEventReasons")
    m.nvmlDeviceGetPowerUsage = read("power", "nvmlDeviceGetPowerUsage")
    return m


def test_nvml_observer_columns_from_the_readings(monkeypatch):
    """Two batches: readings before and after each (clock, temperature, bits), power after
    each; the second batch hit SW thermal slowdown (0x20) and is set aside."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(
        clocks=[1980, 1980, 1755, 1500], temps=[40, 44, 47, 52], reasons=[0x1, 0x0, 0x0, 0x20],
        powers_mw=[0, 310500, 0, 402250]))
    obs = NvmlObserver()
    obs.begin()
    obs.before_batch()
    assert obs.after_batch([1.0, 1.1]) is False
    obs.before_batch()
    assert obs.after_batch([1.3, 1.4]) is True  # thermal slowdown: disturbed
    assert obs.results() == {"sm_clock_mhz": (1980 + 1980 + 1755 + 1500) / 4,
                             "temperature_c": 52.0, "throttle_reasons": 0x21,
                             "power_w": (310.5 + 402.25) / 2}
    obs.begin()  # the next candidate starts from nothing
    assert obs.results() == {"sm_clock_mhz": None, "temperature_c": None,
                             "throttle_reasons": 0, "power_w": None}


def test_power_not_supported_leaves_the_other_figures(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(
        clocks=[1410, 1410], temps=[60, 61], reasons=[0, 0], powers_mw=[],
        unsupported={"nvmlDeviceGetPowerUsage"}))
    obs = NvmlObserver()
    obs.before_batch()
    assert obs.after_batch([2.0]) is False
    assert obs.results() == {"sm_clock_mhz": 1410.0, "temperature_c": 61.0,
                             "throttle_reasons": 0, "power_w": None}


def test_without_nvml_every_figure_is_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    assert Nvml().sample() == {}
    obs = NvmlObserver()
    obs.before_batch()
    assert obs.after_batch([1.0]) is False
    assert obs.results() == {"sm_clock_mhz": None, "temperature_c": None,
                             "throttle_reasons": 0, "power_w": None}


def test_the_harness_merges_every_observers_results_into_the_outcome(tmp_path):
    """Harness.time calls the hooks around each batch; the results are the outcome's
    columns; a batch an observer calls disturbed is set aside (``throttled_samples``)."""
    from test_harness import artifact, job

    from workers.harness import Harness

    class Count(Observer):
        def begin(self):
            self.n = self.k = 0

        def before_batch(self):
            self.k += 1

        def after_batch(self, samples_ms):
            self.n += len(samples_ms)
            return self.k == 1  # the first batch is disturbed

        def results(self):
            return {"batches": self.k, "samples_seen": self.n}

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    h = Harness("cpu")
    assert h.observers == []  # CPU: no NVML observer, no NVML columns
    h.observers = [Count(), NvmlObserver(_Readings())]
    res = h.run(job(artifact(tmp_path, src, 0), src, ref, timing=TIMING))
    assert res["status"] == "ok" and res["throttled_samples"] == 5
    assert res["samples_seen"] == res["n_samples"] + 5 and res["batches"] >= 2
    assert res["power_w"] == 250.5 and res["throttle_reasons"] == 0
    assert res["sm_clock_mhz"] == 1980.0 and res["temperature_c"] == 50.0


class _Readings:
    """An NVML reader stand-in: a steady device (1980 MHz, 50 C, 250.5 W, no throttle)."""

    def sample(self):
        return {"sm_clock_mhz": 1980.0, "temperature_c": 50.0, "throttle_reasons": 0,
                "power_w": 250.5}


def test_the_progress_callback_keeps_its_old_name():
    """kopt.observer's hooks are progress callbacks (TVM: MeasureCallback), not measurement
    observers; code written against the old name still imports it."""
    from kopt.observer import Observer, ProgressCallback

    assert Observer is ProgressCallback
    assert ProgressCallback().on_note("x") is None


def test_power_is_a_stored_column_null_in_older_stores(tmp_path):
    """``power_w`` is a ``candidates`` column: a row from before it (a file without the
    column, as an existing store has) reads as NULL; a new row keeps its watts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kopt.store import query, write_table

    folder = tmp_path / "candidates" / "sweep=s" / "run=r0"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"run_id": ["r0"], "job_key": ["old"], "status": ["ok"],
                             "median_ms": [2.0], "sm_clock_mhz": [1980.0]}),
                   folder / "part-00000000000000000001-abcd.parquet")
    write_table(tmp_path, "candidates", "s", "r1", [
        {"run_id": "r1", "job_key": "new", "status": "ok", "median_ms": 1.0,
         "sm_clock_mhz": 1755.0, "power_w": 402.25}])
    _, rows = query("select job_key, sm_clock_mhz, power_w from candidates order by job_key",
                    tmp_path)
    assert rows == [("new", 1755.0, 402.25), ("old", 1980.0, None)]
