"""Edge boards: NVML lists the GPU but refuses memory, clock,
temperature and compute-capability reads with NVML_ERROR_NOT_SUPPORTED (Jetson). Every
NVML figure is optional: `kopt env` and the sweep's environment probe show them as
unknown, with a note, and never raise. The stand-in NVML (fixtures/jetson_nvml) raises
the real nvidia-ml-py error class."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from conftest import FIXTURES, ROOT

STAND_IN = FIXTURES / "jetson_nvml"


def _load_stand_in():
    import pynvml  # noqa: F401  the real library first: the stand-in shares its errors

    spec = importlib.util.spec_from_file_location("pynvml", STAND_IN / "pynvml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_stand_in_raises_the_libraries_not_supported_error():
    import pynvml

    fake = _load_stand_in()
    try:
        fake.nvmlDeviceGetMemoryInfo(fake.nvmlDeviceGetHandleByIndex(0))
    except pynvml.NVMLError as e:
        assert e.value == pynvml.NVML_ERROR_NOT_SUPPORTED
    else:
        raise AssertionError("the stand-in's memory read did not raise")


def test_sweep_environment_probe_on_a_jetson(monkeypatch):
    """The probe every sweep runs (workers.build.identity_and_env -> envinfo.collect), also
    with --backend cpu, keeps the GPU with unknown figures and notes each refused read."""
    from workers.build import identity_and_env

    monkeypatch.setitem(sys.modules, "pynvml", _load_stand_in())
    ident, env = identity_and_env("cpu")
    assert ident  # the compiler identity is unaffected
    assert env["gpus"] == [{"index": 0, "name": "Orin (nvgpu)", "sm": None,
                            "memory_bytes": None}]
    assert env["driver"] == "540.4.0"
    assert env["notes"] == [
        "NVML GPU 0 compute capability: Not Supported; shown as unknown",
        "NVML GPU 0 memory: Not Supported; shown as unknown"]


def test_kopt_env_on_a_jetson_exits_0_with_unknown_figures():
    """`kopt env` end to end: its Ray task on the node imports the stand-in NVML (first on
    PYTHONPATH, which the embedded Ray instance's workers inherit)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STAND_IN), str(ROOT)]),
           "RAY_USAGE_STATS_ENABLED": "0"}
    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "env"], capture_output=True,
                       text=True, env=env, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert "0: Orin (nvgpu) sm unknown memory unknown" in p.stdout
    assert "NVML GPU 0 memory: Not Supported; shown as unknown" in p.stdout
    assert "540.4.0" in p.stdout


def test_the_harness_nvml_observer_on_a_jetson(monkeypatch):
    """The timing harness's NVML observer (workers.observers) on the stand-in: every read
    is refused, so every figure is unknown (None), no batch counts as throttled, nothing
    raises."""
    from workers.observers import NvmlObserver

    monkeypatch.setitem(sys.modules, "pynvml", _load_stand_in())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    obs = NvmlObserver()
    assert obs.reader.sample() == {"sm_clock_mhz": None, "temperature_c": None,
                                   "throttle_reasons": None, "power_w": None}
    obs.before_batch()
    assert obs.after_batch([1.0, 1.1]) is False
    assert obs.results() == {"sm_clock_mhz": None, "temperature_c": None,
                             "throttle_reasons": 0, "power_w": None}
