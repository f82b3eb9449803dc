"""Measurement observers (workers.observers): hooks around a candidate's timed batches whose
results become its row's columns; NVML's readings (clock, temperature, throttle, power) as
one of them, each figure optional."""

from __future__ import annotations

import re
import sys
import types

import pytest

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


def test_process_bytes_is_this_process_own_figure(monkeypatch):
    """NVML's list of compute processes on the GPU: the figure of the process asked for
    (bytes), never another's; None when it is not listed (a container's own process ids),
    when the GPU gives no per-process figure, or without the call."""
    import pynvml as real

    procs = [types.SimpleNamespace(pid=11, usedGpuMemory=600 << 20),
             types.SimpleNamespace(pid=22, usedGpuMemory=3 << 30),
             types.SimpleNamespace(pid=33, usedGpuMemory=None)]
    m = fake_nvml([], [], [], [])
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: procs
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setitem(sys.modules, "pynvml", m)
    nv = Nvml()
    assert nv.process_bytes(11) == 600 << 20 and nv.process_bytes(22) == 3 << 30
    assert nv.process_bytes(44) is None and nv.process_bytes(33) is None

    def refuse(h):
        raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)

    m.nvmlDeviceGetComputeRunningProcesses = refuse
    assert Nvml().process_bytes(11) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert Nvml().process_bytes(11) is None


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
    batches, samples = [], h.samples
    # each batch's picks, and the seen sets: those past them are never-seen ones
    h.samples = lambda calls, d, flush, picks=None: (batches.append((picks, len(d.sets))),
                                                     samples(calls, d, flush, picks))[1]
    res = h.run(job(artifact(tmp_path, src, 0), src, ref, timing=TIMING))
    # the first batch's samples (its calls on never-seen sets are no samples) set aside
    first = sum(k < batches[0][1] for k in batches[0][0])
    assert len(batches[0][0]) == 5 and res["status"] == "ok" and res["throttled_samples"] == first
    # every sample each observer saw: the figure's, and those set aside or past it
    assert res["samples_seen"] == res["timed_calls"] - len(res["unseen_ms"])
    assert res["samples_seen"] >= res["n_samples"] + first and res["batches"] >= 2
    assert res["power_w"] == 250.5 and res["throttle_reasons"] == 0
    assert res["sm_clock_mhz"] == 1980.0 and res["temperature_c"] == 50.0


class _Readings:
    """An NVML reader stand-in: a steady device (1980 MHz, 50 C, 250.5 W, no throttle)."""

    def sample(self):
        return {"sm_clock_mhz": 1980.0, "temperature_c": 50.0, "throttle_reasons": 0,
                "power_w": 250.5}


def test_the_progress_callback_is_not_an_observer():
    """kopt.run.callbacks's hooks are progress callbacks (TVM: MeasureCallback), not
    measurement observers: one class, no second ``Observer`` name beside workers.observers'."""
    import kopt.run.callbacks
    from kopt.run.callbacks import ProgressCallback

    assert not hasattr(kopt.run.callbacks, "Observer")
    assert ProgressCallback().on_note("x") is None


def test_power_is_a_stored_column_null_in_older_stores(tmp_path):
    """``power_w`` is a ``candidates`` column: a row from before it (a file without the
    column, as an existing store has) reads as NULL; a new row keeps its watts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kopt.store.database import query
    from kopt.store.files import write_table

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


# -- measurement plug-ins: NCU as a profiling observer, a registry, columns --

METRICS = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
SGEMM_ROWS = [("matmul_kernel", 0, "gpu__time_duration.sum", 935424.0, "ns"),
              ("matmul_kernel", 0, "sm__throughput.avg.pct_of_peak_sustained_elapsed",
               66.1024209, "%")]


def _fake_ncu(tmp_path, monkeypatch, prof):
    """tests/test_ncu.py's stand-in ncu (it runs the real target and writes a real H200
    report of one sgemm launch) on $NCU; ``prof``: the jobs it says it profiled."""
    import test_ncu

    from workers import ncu

    fake = tmp_path / "ncu"
    fake.write_text(test_ncu.FAKE_NCU.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    monkeypatch.setenv("FAKE_REPORT", str(test_ncu.DATA / "sgemm_full.ncu-rep"))
    monkeypatch.setenv("FAKE_PROF", prof)
    monkeypatch.setattr(ncu, "LOCK_PATH", tmp_path / "lock")


def _rows(res):
    import pytest

    return [(r["kernel"], r["launch"], r["metric"], pytest.approx(r["value"]), r["unit"])
            for r in res["ncu_rows"]]


def _built(tmp_path, build_id):
    """faulty.cpp's honest mode built for the CPU as ``build_id``: the artifact's bytes and
    the sweep-wide part of a run job for it (kopt.run.builder.job_base's fields)."""
    from test_harness import job

    from workers import build as wb

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    bj = wb.BuildJob(build_id, "cpu", src.read_text(), src.name, str(src.parent), {"MODE": 0})
    res, data = wb.build(bj, cache=tmp_path / "built")
    assert res.ok, res.error
    return data, {k: v for k, v in job("", src, ref, timing=TIMING).items()
                  if k not in ("artifact", "dims")}


def test_ncu_is_a_profiling_observer_whose_results_are_its_columns(tmp_path, monkeypatch):
    """NcuObserver.profile wraps a profiled launch of each candidate of a batch (one ncu
    process; each on its own when the launches cannot be told apart) and returns, per
    candidate, the columns it declares (``profile_status``, ``profile_error``) and the
    metric rows; a stand-in ncu, the real target, a real H200 report."""
    from test_harness import artifact, job

    from workers.observers import NcuObserver, ProfileTarget, ProfilingObserver

    assert issubclass(NcuObserver, ProfilingObserver) and NcuObserver.table == "profiles"
    assert NcuObserver.columns == {"profile_status": "string", "profile_error": "string"}
    assert NcuObserver.devices == ("cuda",)
    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    batch = [ProfileTarget({**job(artifact(tmp_path, src, 0), src, ref), "device": "cpu"},
                           ["matmul_kernel"]) for _ in range(2)]
    obs = NcuObserver(metrics=METRICS, sections=None, unknown_option=1)

    _fake_ncu(tmp_path, monkeypatch, "1")  # one ncu process; the launch is job 1's
    res = obs.profile(batch)
    assert [(r["profile_status"], r["profile_error"]) for r in res] == [
        ("no_kernels", "ncu profiled no kernel matching ['matmul_kernel']"), ("ok", None)]
    assert res[0]["ncu_rows"] == [] and _rows(res[1]) == SGEMM_ROWS
    assert "--many" in res[1]["ncu_command"] and res[1]["ncu_seconds"] > 0

    _fake_ncu(tmp_path, monkeypatch, "0,1")  # two launches claimed, one in the report:
    res = obs.profile(batch)  # each candidate then gets its own ncu process
    assert [(r["profile_status"], r["profile_error"]) for r in res] == [("ok", None)] * 2
    assert [_rows(r) for r in res] == [SGEMM_ROWS] * 2
    assert not any("--many" in r["ncu_command"] for r in res)


@pytest.mark.parametrize("devices", [1, 2])
def test_the_profiling_step_drives_the_registered_observers(tmp_path, monkeypatch, devices):
    """kopt.loop.profiling through the device actor (kopt.run.runner.LocalRunner: the
    device side in this process): every profiling observer registered for the device
    wraps the pass; NCU's rows become ``metrics`` rows, and every declared column -- NCU's
    status and error and a third, toy observer's -- a ``profiles`` column, with no change
    in the driver."""
    import json
    import types

    import pytest

    from kopt.core.catalog import load_catalog
    from kopt.core.spec import load_sweep
    from kopt.loop import profiling
    from kopt.run.context import RunContext
    from kopt.run.runner import LocalRunner
    from kopt.store.database import Database, query
    from workers import observers
    from workers.observers import NcuObserver, ProfilingObserver, register
    from workers.records import BuildResult

    class CpuNcu(NcuObserver):  # the stand-in ncu runs the target on the CPU
        devices = ("cpu",)

    class KernelCount(ProfilingObserver):
        columns = {"toy_kernels": "int64"}
        devices = ("cpu",)

        def profile(self, batch):
            return [{"toy_kernels": len(t.kernels) + len(self.options["metrics"])}
                    for t in batch]

    monkeypatch.setattr(observers, "_registered", [])
    register(CpuNcu)
    register(KernelCount)
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    _fake_ncu(tmp_path, monkeypatch, "1")
    data, common = _built(tmp_path, "t-prof")
    builder = types.SimpleNamespace(
        results={"t-prof": BuildResult("t-prof", True, kernels=[{"name": "matmul_kernel"}])},
        artifacts={"t-prof": data})
    sweep = load_sweep(FIXTURES.parent.parent / "sweeps" / "vector_add")
    rows = {f"j{i}": {"iteration": 1, "candidate_id": f"c{i}", "device_class": "cpu-test",
                      "dims": json.dumps({"N": 4096}), "job_key": f"j{i}"} for i in (0, 1)}
    ranked = [{"candidate_id": f"c{i}", "build_id": "t-prof", "is_baseline": i == 0}
              for i in (0, 1)]
    store = tmp_path / "store"
    runner = LocalRunner("cpu", devices, "cpu-test")
    try:
        ctx = RunContext(sweep, store, "r1", Database(store).writer(sweep.name, "r1"),
                         builder, runner, load_catalog(), backend="cuda", common=common,
                         rows=rows)
        ev = profiling.profile(ctx, 1, "cpu-test", ranked, METRICS)
        ctx.writer.flush()
    finally:
        runner.close()
    # with two devices of the class each profiles one of the two candidates
    ncu = [r for r in ctx.phases.table_rows("r1", "s") if r["phase"] == "ncu"]
    assert sorted((r["device"], r["detail"].split(";")[0]) for r in ncu) == sorted(
        (f"local/cpu-{k}", "1 candidate" if devices == 2 else "2 candidates")
        for k in range(devices))
    # and how long its profiler processes ran, within the phase
    for r in ncu:
        secs = float(re.fullmatch(r"\d candidates?; ncu processes (\d+\.\d\d) s",
                                  r["detail"]).group(1))
        assert 0 < secs <= r["end_s"] - r["start_s"] + 0.01
    _, prof = query("select job_key, profile_status, profile_error, toy_kernels "
                    "from profiles_raw order by job_key", store)
    _, met = query("select candidate_id, kernel, launch, metric, value, unit from metrics "
                   "order by candidate_id, metric", store)
    assert set(ev) == {"c0", "c1"}
    if devices == 1:  # one ncu for both: the stand-in's one launch is c1's (see --many)
        assert ev["c0"].scores == {}
        assert prof == [("j0", "no_kernels", "ncu profiled no kernel matching "
                         "['matmul_kernel']", 3), ("j1", "ok", None, 3)]
        assert met == [("c1", k, n, m, pytest.approx(v), u) for k, n, m, v, u in SGEMM_ROWS]
    else:  # an ncu per device, a candidate each: each reads the stand-in's report
        assert prof == [("j0", "ok", None, 3), ("j1", "ok", None, 3)]
        assert met == [(c, k, n, m, pytest.approx(v), u) for c in ("c0", "c1")
                       for k, n, m, v, u in SGEMM_ROWS]


TOY_PLUGIN = '''
from workers.observers import Observer


class SamplesSeen(Observer):
    """A toy measurement source: the samples of every batch around which it was called."""

    columns = {"toy_samples": "int64"}
    devices = ("cpu", "cuda")

    def begin(self):
        self.n = 0

    def after_batch(self, samples_ms):
        self.n += len(samples_ms)
        return False

    def results(self):
        return {"toy_samples": self.n}
'''


def _install_plugin(tmp_path, monkeypatch, module, module_text, entry):
    """An installed package on sys.path and $PYTHONPATH (so the sandbox sees it): module
    ``module`` and the ``kopt.observers`` entry point ``entry`` (``name = module:Class``)."""
    import os

    (tmp_path / "plug").mkdir()
    (tmp_path / "plug" / f"{module}.py").write_text(module_text)
    meta = tmp_path / "plug" / f"{module}-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(f"[kopt.observers]\n{entry}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plug"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path / "plug"), *filter(None, [os.environ.get("PYTHONPATH")])]))


def test_a_plugged_in_observer_adds_a_stored_column(tmp_path, monkeypatch):
    """A third measurement source, installed as a package with a ``kopt.observers`` entry
    point and changing nothing in kopt/ or workers/: the sandboxed harness calls it around
    every batch, its result reaches the run outcome, and the store keeps it as a
    ``candidates`` column of its declared type."""
    import dataclasses
    import json

    from kopt.run.runner import LocalRunner, RunInput
    from kopt.store.database import Database, query
    from kopt.store.files import now, table_schema
    from workers.observers import observer_columns, registered
    from workers.records import RunJob, TuningRecord
    from workers.status import Status

    _install_plugin(tmp_path, monkeypatch, "kopt_toy_observer", TOY_PLUGIN,
                    "samples_seen = kopt_toy_observer:SamplesSeen")
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    assert [c.__name__ for c in registered()] == ["NvmlObserver", "NcuObserver", "SamplesSeen"]
    assert observer_columns("candidates")["toy_samples"] == "int64"
    assert str(table_schema("candidates").field("toy_samples").type) == "int64"
    data, common = _built(tmp_path, "t-toy")
    runner = LocalRunner("cpu", 1, "cpu-test")
    try:
        fut = runner.run([RunInput(0, RunJob("j-toy", "t-toy", {"N": 4096}, common), data)])[0]
        o = runner.collect(fut)
    finally:
        runner.close()
    assert o.status == Status.OK and o.throttled_samples == 0
    # every sample, each seen once: the figure's and any past it (no call on a new set)
    seen = o.extra["timed_calls"] - len(o.extra["unseen_ms"])
    assert o.observed() == {"toy_samples": seen} and seen >= o.n_samples
    blank = {f.name: None for f in dataclasses.fields(TuningRecord)}
    rec = TuningRecord(**{**blank, "run_id": "r1", "sweep": "s", "job_key": "j-toy",
                          "status": o.status, "median_ms": o.median_ms, "params": json.dumps({}),
                          "created_at": now()})
    Database(tmp_path / "store").commit("candidates", "s", "r1", [rec.row(o.observed())])
    _, got = query("select job_key, toy_samples, typeof(toy_samples) from candidates",
                   tmp_path / "store")
    assert got == [("j-toy", seen, "BIGINT")]  # what the observer saw, as stored


def test_the_builtin_observers_add_no_column_and_bad_plugins_are_named(tmp_path, monkeypatch):
    """NVML's and NCU's declared columns are the store's existing ones (same names, same
    types: the schema is unchanged); registering a non-observer, a plug-in that cannot be
    loaded or a column type Arrow does not know each fail with a message naming it."""
    import pyarrow as pa
    import pytest

    from kopt.store.files import SCHEMAS, table_schema
    from workers import observers
    from workers.observers import register, registered

    for table in ("candidates", "profiles"):
        assert table_schema(table) == SCHEMAS[table]
        for name, typ in observers.observer_columns(table).items():
            assert SCHEMAS[table].field(name).type == pa.type_for_alias(typ)
    assert observers.timing_observers("cpu") == []
    assert [type(o).__name__ for o in observers.timing_observers("cuda")] == ["NvmlObserver"]
    assert [type(o).__name__ for o in observers.profiling_observers("cuda", metrics=["m"])
            ] == ["NcuObserver"]
    with pytest.raises(TypeError, match="is not a workers.observers.Observer subclass"):
        register(dict)

    class Odd(Observer):
        columns = {"odd": "float65"}

    monkeypatch.setattr(observers, "_registered", [])
    register(Odd)
    with pytest.raises(ValueError, match="column 'odd' of 'candidates': 'float65' is not an "
                                         "Arrow type name"):
        table_schema("candidates")
    monkeypatch.setattr(observers, "_registered", [])
    _install_plugin(tmp_path, monkeypatch, "kopt_broken_observer",
                    "raise ImportError('no such library')\n",
                    "broken = kopt_broken_observer:Nothing")
    with pytest.raises(RuntimeError, match=r"plug-in broken = kopt_broken_observer:Nothing "
                                           r"\(entry point group kopt.observers\) cannot be "
                                           r"loaded: ImportError\('no such library'\)"):
        registered()
