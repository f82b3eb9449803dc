"""What the seed workflow's environment check reported, for one node: GPUs and SM arch,
driver, nvcc, ncu and whether it may read counters, CUTLASS headers, torch, ray, and the
sandbox candidates run in (workers.isolation)."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

from workers import build_cache, build_confine, cgroup, isolation, ncu, witness, zygote


def _first_line(cmd: list[str], pattern: str | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if pattern:
        lines = [ln for ln in lines if re.search(pattern, ln)]
    return lines[-1] if lines else None


def _text(v: Any) -> str:
    return v if isinstance(v, str) else v.decode()


def gpus() -> tuple[list[dict[str, Any]], str | None, list[str]]:
    """GPUs as NVML reports them, the driver version and notes.

    Each GPU is a dict with ``index``, ``name``, ``sm`` (``sm_90``) and ``memory_bytes``.
    Every figure is optional: a read NVML refuses (``NVML_ERROR_NOT_SUPPORTED`` on Jetson
    and other edge boards, a driver too old for the call) is None, and a note says which
    read failed and why. No NVML at all (no library, no driver) gives no GPUs and no note.
    Never raises.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no nvidia-ml-py, no libnvidia-ml, no driver: no NVML GPU here
        return [], None, []
    notes: list[str] = []

    def read(what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            notes.append(f"NVML {what}: {e}; shown as unknown")
            return None

    out = []
    for i in range(read("device count", pynvml.nvmlDeviceGetCount) or 0):
        h = read(f"GPU {i} handle", pynvml.nvmlDeviceGetHandleByIndex, i)
        if h is None:
            out.append({"index": i, "name": None, "sm": None, "memory_bytes": None})
            continue
        name = read(f"GPU {i} name", pynvml.nvmlDeviceGetName, h)
        cc = read(f"GPU {i} compute capability", pynvml.nvmlDeviceGetCudaComputeCapability, h)
        mem = read(f"GPU {i} memory", pynvml.nvmlDeviceGetMemoryInfo, h)
        out.append({"index": i, "name": None if name is None else _text(name),
                    "sm": None if cc is None else f"sm_{cc[0]}{cc[1]}",
                    "memory_bytes": None if mem is None else int(mem.total)})
    drv = read("driver version", pynvml.nvmlSystemGetDriverVersion)
    return out, None if drv is None else _text(drv), notes


def counters_readable() -> str:
    """Whether ncu may read GPU performance counters here: ``yes``, ``admin only`` (and we
    are not root), or ``unknown``. Source: NVIDIA's ERR_NVGPUCTRPERM page
    (``RmProfilingAdminOnly`` in /proc/driver/nvidia/params)."""
    p = Path("/proc/driver/nvidia/params")
    try:
        text = p.read_text()
    except OSError:
        return "unknown"
    m = re.search(r"RmProfilingAdminOnly:\s*(\d)", text)
    if not m:
        return "unknown"
    if m.group(1) == "0" or os.geteuid() == 0:
        return "yes"
    return "admin only (ERR_NVGPUCTRPERM for this user)"


def cutlass_headers() -> str | None:
    """Folder holding ``cutlass/cutlass.h``: $CUTLASS_PATH/include or the nvidia-cutlass
    package's, else None."""
    cands = []
    if os.environ.get("CUTLASS_PATH"):
        cands.append(Path(os.environ["CUTLASS_PATH"]) / "include")
    root = _package_dir("cutlass_library")  # the nvidia-cutlass package (not imported)
    if root is not None:
        cands += [root / "source" / "include", root.parent / "cutlass" / "include"]
    for c in cands:
        if (c / "cutlass" / "cutlass.h").exists():
            return str(c)
    return None


def _cxx_version() -> str | None:
    try:
        out = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def _package_dir(name: str) -> Path | None:
    """The folder of installed package ``name``, found without importing it (None when it
    is not installed)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locs = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locs[0]) if locs else None


def torch_versions() -> tuple[str | None, str | None]:
    """torch's version and the CUDA version it was built with (None: a CPU build), read
    from ``torch/version.py`` -- constants torch's build writes there -- without importing
    torch: the import takes about 3 s on an H200 host, and this read sits on the path to a
    sweep's first builds. (None, None) when torch is not installed or the file
    cannot be read."""
    root = _package_dir("torch")
    if root is None:
        return None, None
    try:
        ns = runpy.run_path(str(root / "version.py"))
    except Exception:  # noqa: BLE001 -- a damaged install: its version is unknown
        return None, None
    version, cuda = ns.get("__version__"), ns.get("cuda")
    return (str(version) if version is not None else None,
            str(cuda) if cuda is not None else None)


def _isolation(describe: Any) -> str:
    """``describe(isolation.available())``, or why the sandbox could not be tried now
    (workers.isolation ``Unsettled``)."""
    try:
        return describe(isolation.available())
    except isolation.Unsettled as e:
        return f"unknown: {e}"


def collect() -> dict[str, Any]:
    """This node's environment as a dict (strings; None where a tool is missing or a
    figure cannot be read; ``notes``: the reads that failed)."""

    gpu_list, driver, notes = gpus()
    torch_v, torch_cuda = torch_versions()
    try:
        import ray

        ray_v = ray.__version__
    except Exception:
        ray_v = None
    return {
        "host": platform.node(), "platform": platform.machine(),
        "python": sys.version.split()[0], "gpus": gpu_list, "driver": driver,
        "nvcc": _first_line(["nvcc", "--version"], "release"),
        "cxx": _cxx_version(),
        "ncu": ncu.ncu_version(), "ncu_counters": counters_readable() if gpu_list else "no GPU",
        "cutlass": cutlass_headers(), "torch": torch_v, "torch_cuda": torch_cuda, "ray": ray_v,
        "isolation": _isolation(lambda iso: iso.describe()),
        "harness_start": _isolation(zygote.describe),
        "witness": witness.describe(),
        "build_isolation": build_confine.describe(), "limits": cgroup.describe(),
        "build_cache": build_cache.describe(build_cache.root(), build_cache.cap()[0]),
        "notes": notes,
    }
