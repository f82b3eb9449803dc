"""Leaving Ray quickly once a command's work is stored (1.4-2.6 s of a sweep's process
wall were spent in ``ray.shutdown`` stopping the embedded instance, measured on an H200
host 2026-12-01)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import ray

# seconds the processes of a stopped embedded Ray get to exit after SIGTERM before SIGKILL
# (Ray's own shutdown gives each process 1 s in turn; its autoscaler monitor always uses it up)
RAY_STOP_GRACE_S = 0.3


def leave_ray() -> None:
    """Leave Ray once a command's work is stored: a cluster or service is only
    left; the embedded instance this process started (``ray.init``) is stopped with every
    process signalled at once -- the raylet first, which stops its workers and agents, then
    the rest -- each given :data:`RAY_STOP_GRACE_S` before SIGKILL. ``ray.shutdown`` alone
    stops them one after another, waiting up to 1 s for each ("slower than necessary",
    says ray._private.node.Node.kill_all_processes): 1.4 s on a 2-core machine, 2.6 s on an
    H200 host. Never raises for a process that is already gone."""
    if not ray.is_initialized():
        return
    node = getattr(ray._private.worker, "_global_node", None)
    started: dict[str, Any] = {}
    if node is not None and isinstance(getattr(node, "all_processes", None), dict):
        started = dict(node.all_processes)  # empty when this process only attached
        node.all_processes.clear()  # ray.shutdown disconnects; the processes are ours to stop
    try:
        ray.shutdown()
    finally:
        procs = [(kind, info.process) for kind, infos in started.items() for info in infos
                 if getattr(info, "process", None) is not None]
        _stop_processes([p for kind, p in procs if kind == "raylet"])
        for kind, p in procs:  # the autoscaler's monitor ignores SIGTERM (Ray kills it too)
            if kind == "monitor" and p.poll() is None:
                p.kill()
        _stop_processes([p for kind, p in procs if kind != "raylet"])


def _stop_processes(procs: list[Any], grace_s: float = RAY_STOP_GRACE_S) -> None:
    """SIGTERM every process of ``procs`` (subprocess.Popen) at once, wait up to
    ``grace_s`` for all of them, SIGKILL the ones left and reap them."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.01)
    for p in procs:
        if p.poll() is None:
            p.kill()
            try:
                p.wait(timeout=1.0)
            except subprocess.TimeoutExpired:  # a process stuck in the kernel: left to init
                pass
