"""The process ncu profiles: prepare inputs like the harness, call ``solve`` once, exit.

``python -m workers.ncu_target JOB.json``: one job; exit code 0 when ``solve`` ran and the
CUDA runtime reported no error.

``python -m workers.ncu_target --wait JOBS.json ACTOR_PID [DEVICE]``: a warm ncu's target
(workers.ncu_warm): the same as ``--many`` once JOBS.json exists, each call inside the NVTX
range ``kopt``; with DEVICE (``cuda`` or ``cpu``), its harness is made before the wait (on a
GPU: the CUDA context, and ncu's connection to it, made while the device still times
candidates, not after the hand-over).

``python -m workers.ncu_target --many JOBS.json``: a list of jobs, one ``solve`` call each,
in order, in one process (one ncu start, one CUDA context for the whole top-k). Each call
is bracketed on stdout by ``KOPT_NCU_BEGIN i`` / ``KOPT_NCU_END i`` lines (flushed), so
that ncu's ``==PROF== Profiling`` lines between them, printed while this process waits in
the profiled launch, say which launches belong to job ``i`` (workers.ncu.split_launches).
A job that fails prints ``KOPT_NCU_FAIL i STATUS: message``; a fatal CUDA error ends the
process (the jobs after it have no markers).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

from workers import seccomp
from workers.harness import Harness, JobError
from workers.ncu import SECCOMP_ENV
from workers.ncu_warm import NVTX_RANGE
from workers.reap import pid_alive


def _one(h: Harness, job: dict, nvtx: bool = False) -> None:
    d = h.prepare(job, reference=False)  # no check here: inputs only (as the harness makes)
    lib = h.lib(job["artifact"], job["signature"])
    h.load(d, 0, 0)
    nvtx = nvtx and h.is_cuda  # a warm ncu profiles what runs in this range (ncu_warm)
    if nvtx:
        torch.cuda.nvtx.range_push(NVTX_RANGE)
    try:
        h.call(lib, job, d)
    finally:
        if nvtx:
            torch.cuda.nvtx.range_pop()
    h.check_cuda(lib, "solve")


def main(path: str) -> int:
    job = json.loads(open(path).read())
    h = Harness(job.get("device", "cuda"))
    filtered(h)
    try:
        _one(h, job)
    except JobError as e:
        print(f"kopt ncu target: {e.status}: {e}", file=sys.stderr)
        return 3
    return 0


def filtered(h: Harness) -> None:
    """In a sandbox (workers.ncu.confined: ``KOPT_NCU_SECCOMP=1``), the harness's
    system-call filter (workers.seccomp: no new socket, namespace, ptrace...) once the CUDA
    context is up (ncu's injection has made its connection by then), before any candidate
    code is loaded. A filter the kernel refuses is said on stderr; the capture goes on,
    sandboxed without it."""
    if os.environ.get(SECCOMP_ENV) != "1":
        return
    if h.is_cuda:
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the context, now
    # ncu's injection was not tried without these (nor the CUDA driver without the others)
    why = seccomp.install(keep=("perf_event_open", "rt_sigaction", *seccomp.UNTRIED_ON_GPU))
    if why:
        print(f"kopt ncu target: no system-call filter: {why}", file=sys.stderr)


def main_wait(path: str, actor_pid: int, device: str | None = None,
              poll_s: float = 0.005) -> int:
    """A warm ncu's target (workers.ncu_warm): modules imported and, with ``device``, its
    harness made (a GPU's CUDA context: 1.2 s between the hand-over and ncu's "Connected"
    line on an H100 when it was made after, docs/verified/2026-12-06-session49.md), wait
    until ``path`` exists, then as :func:`main_many` with each call inside the NVTX range.
    Exits 4 without running anything when process ``actor_pid`` (the device actor that
    started it) is gone; 0: not checked (a sandboxed target, which cannot see it: its ncu
    dies with the actor)."""
    h = None
    if device is not None:
        h = Harness(device)
        filtered(h)
    n = 0
    while not os.path.exists(path):
        n += 1
        if actor_pid and n % 200 == 0 and not pid_alive(actor_pid):
            return 4
        time.sleep(poll_s)
    return main_many(path, nvtx=True, h=h)


def main_many(path: str, nvtx: bool = False, h: Harness | None = None) -> int:
    """The jobs of ``path`` in order, one ``solve`` call each, bracketed on stdout (see the
    module docstring), in harness ``h`` (made here, for the first job's device, when None).
    Returns 0, or 3 when every job failed or a fatal CUDA error ended the run."""
    jobs = json.loads(open(path).read())
    if h is None:
        h = Harness(jobs[0].get("device", "cuda") if jobs else "cuda")
        filtered(h)
    failed = 0
    for i, job in enumerate(jobs):
        print(f"KOPT_NCU_BEGIN {i}", flush=True)
        try:
            _one(h, job, nvtx)
        except JobError as e:
            failed += 1
            print(f"KOPT_NCU_FAIL {i} {e.status}: {e}".replace("\n", " "), flush=True)
            if e.fatal:
                return 3
        print(f"KOPT_NCU_END {i}", flush=True)
    return 3 if failed == len(jobs) else 0


if __name__ == "__main__":
    if sys.argv[1] == "--many":
        sys.exit(main_many(sys.argv[2]))
    if sys.argv[1] == "--wait":
        sys.exit(main_wait(sys.argv[2], int(sys.argv[3]), *sys.argv[4:5]))
    sys.exit(main(sys.argv[1]))
