"""The per-device Ray actor: owns one device and its long-lived sandbox (harness) process.

One actor per GPU (``num_gpus=1``; Ray sets CUDA_VISIBLE_DEVICES) or per CPU
device. Jobs reach it with the build artifact's bytes (a Ray object, so the
artifact travels to whichever node the actor lives on); it caches the
artifact on local disk and hands the path to the harness.
"""

from __future__ import annotations

import os
import time
from typing import Any

import ray

from workers.build import ensure_artifact
from workers.sandbox import Sandbox


class DeviceActor:
    """Runs candidates on one device, one at a time.

    Args:
        backend: ``"cuda"`` or ``"cpu"``.
        threads: CPU threads for the CPU backend (OMP_NUM_THREADS); ignored for CUDA.

    Raises:
        RuntimeError: the harness could not start (no device, broken torch...).
    """

    def __init__(self, backend: str, threads: int = 1):
        env = {"OMP_NUM_THREADS": str(threads)} if backend == "cpu" else {}
        self.backend = backend
        self.sandbox = Sandbox(backend, env)
        self.sandbox.start()
        self.busy_s = 0.0
        self.jobs = 0

    def info(self) -> dict[str, Any]:
        """The device's figures (workers.harness.device_info) plus the node's IP."""
        return {**self.sandbox.info, "node_ip": ray.util.get_node_ip_address(),
                "pid": os.getpid()}

    def run(self, job: dict[str, Any], artifact: bytes) -> dict[str, Any]:
        """Run one job (see workers.harness) and return its outcome dict; never raises."""
        t0 = time.perf_counter()
        try:
            job = {**job, "artifact": str(ensure_artifact(job["build_id"], artifact))}
            res = self.sandbox.run(job, job["timing"]["timeout_s"])
        except Exception as e:  # the harness could not even be restarted
            res = {"status": "error", "error": f"device actor: {e!r}"}
        self.busy_s += time.perf_counter() - t0
        self.jobs += 1
        res["job_key"] = job["job_key"]
        return res

    def stats(self) -> dict[str, float]:
        """Seconds spent running jobs, job count and harness restarts."""
        return {"busy_s": self.busy_s, "jobs": self.jobs, "restarts": self.sandbox.restarts}

    def shutdown(self) -> None:
        self.sandbox.close()


def remote_actor(backend: str, threads: int = 1, resources: dict[str, float] | None = None):
    """A Ray actor handle class for ``backend`` with the right resource request."""
    opts: dict[str, Any] = {"max_restarts": 3}
    if backend == "cuda":
        opts.update(num_gpus=1, num_cpus=1)
    else:
        opts.update(num_cpus=threads)
    if resources:
        opts["resources"] = resources
    return ray.remote(**opts)(DeviceActor)
