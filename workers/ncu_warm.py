"""An ncu process started ahead of need: a profile of an iteration's top
candidates waits for ncu's own start and for its target to import torch (about 6 of the 7.4 s
an H200 spent profiling four sgemm candidates, 2026-12-01), so a device actor starts the
next one as soon as it knows the metrics, while its device is still timing candidates.

The warm process is ``ncu --nvtx --nvtx-include kopt/ ... python -m workers.ncu_target
--wait JOBS.json ACTOR_PID DEVICE``: the target imports its modules (torch among them) and
makes its harness, on a GPU its CUDA context (which ncu connects to; no kernel is launched,
as a spare harness, workers.spares, holds a context while candidates are timed), then
waits for ``JOBS.json``. The candidates to profile
are known only then, so ncu is told no kernel names: it profiles the kernels launched inside
the target's NVTX range ``kopt``, which brackets each candidate's ``solve`` call (the
kernels ``solve`` launches, a library's included; not the input copies around it). The
per-GPU ncu lock (workers.ncu.lock_path) is taken when the jobs are handed over, not while
the process waits; the target exits when the actor that started it is gone.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers import isolation
from workers.ncu import (
    NCU_TIMEOUT_S,
    ProfileResult,
    attribute,
    confined,
    lock_path,
    ncu_exe,
    tied,
)
from workers.reap import package_env
from workers.status import Status

NVTX_RANGE = "kopt"  # the target's push/pop range around each solve call


@dataclass
class WarmNcu:
    """A started ncu process whose target waits for its jobs (:func:`start`).

    Attributes:
        key: the metrics and sections it collects (a profile with others cannot use it).
        proc: the ncu process (its own process group).
        tmp: its folder (TMPDIR, the report, the jobs file).
        command: its command line, as the profiles record it.
    """

    key: tuple[tuple[str, ...], tuple[str, ...]]
    proc: subprocess.Popen
    tmp: Path
    command: str

    def alive(self) -> bool:
        """Whether the process still waits (it has not exited)."""
        return self.proc.poll() is None

    def close(self) -> None:
        """Kill the process group (a warm process that will not be used) and remove its
        folder."""
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


AHEAD_ENV = "KOPT_NCU_AHEAD"  # "0": the target's harness made once its jobs come


def key_of(metrics: list[str], sections: list[str] | None) -> tuple[tuple[str, ...],
                                                                    tuple[str, ...]]:
    """What a warm process collects, as :attr:`WarmNcu.key`."""
    return tuple(metrics), tuple(sections or ())


def start(metrics: list[str], sections: list[str] | None = None,
          env: dict[str, str] | None = None, device: str = "cuda") -> WarmNcu | None:
    """Start ncu on a target that waits for its jobs, its harness for ``device`` (``cuda``
    or ``cpu``: the jobs' device) made before it waits (workers.ncu_target ``main_wait``;
    made after the hand-over instead with ``KOPT_NCU_AHEAD=0``, :data:`AHEAD_ENV`, the
    side-by-side measurement's other arm); None without ncu or metrics."""
    exe = ncu_exe()
    if exe is None or not metrics:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="kopt-ncu-warm-"))
    cmd = [exe, "--clock-control", "none", "--target-processes", "application-only",
           "--kernel-name-base", "mangled", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
           "--metrics", ",".join(metrics), "-o", str(tmp / "report"), "-f"]
    for s in sections or []:
        cmd += ["--section", s]
    # in a sandbox the target cannot see this process (its own PID namespace): 0, and ncu
    # is tied to this process instead (workers.ncu.tied)
    try:
        iso = isolation.available().isolated
    except isolation.Unsettled:  # profiled cold later, or not at all, never unsandboxed
        return None
    cmd += [sys.executable, "-m", "workers.ncu_target", "--wait", str(tmp / "jobs.json"),
            "0" if iso else str(os.getpid())]
    if os.environ.get(AHEAD_ENV, "1") != "0":
        cmd.append(device)
    run, extra = confined(cmd, tmp)
    penv = {**package_env(), **(env or {}), **extra}
    proc = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=penv, cwd=tmp, start_new_session=True, preexec_fn=tied())
    return WarmNcu(key_of(metrics, sections), proc, tmp,
                   " ".join(cmd).replace(str(tmp), "."))


def capture(warm: WarmNcu, items: list[tuple[dict[str, Any], list[str]]],
            metrics: list[str], timeout_s: float = NCU_TIMEOUT_S,
            env: dict[str, str] | None = None) -> list[ProfileResult] | None:
    """Hand ``items`` (per candidate: its harness job and kernel names) to ``warm`` and read
    what it profiled, as workers.ncu.capture_many returns it (``seconds``: from the
    hand-over to ncu's exit, shared out). None when the warm process had exited or its
    launches cannot be attributed: the caller profiles cold. The process is used up
    either way."""
    try:
        if not warm.alive():
            return None
        jobs = warm.tmp / "jobs.json"
        part = jobs.with_suffix(".part")
        part.write_text(json.dumps([job for job, _ in items]))
        with open(lock_path({**os.environ, **(env or {})}), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one ncu per GPU, from the hand-over on
            t0 = time.perf_counter()
            try:
                os.replace(part, jobs)
                out, _ = warm.proc.communicate(timeout=timeout_s * len(items))
            except subprocess.TimeoutExpired:
                warm.close()
                return [ProfileResult(Status.TIMEOUT, f"ncu ran past {timeout_s:.0f} s per "
                                      "candidate; killed", command=warm.command,
                                      seconds=time.perf_counter() - t0) for _ in items]
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        dt = time.perf_counter() - t0
        ok = warm.proc.returncode == 0 and (warm.tmp / "report.ncu-rep").exists()
        res = ProfileResult(Status.OK if ok else Status.CRASHED,
                            "" if ok else f"ncu exit code {warm.proc.returncode}: {out[-1500:]}",
                            command=warm.command, seconds=dt)
        return attribute(items, metrics, res, out, warm.tmp)
    finally:
        warm.close()
