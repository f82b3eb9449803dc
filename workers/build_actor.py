"""The warm builders of the kopt service: long-lived Ray actors that compile
candidates for every sweep submitted with ``kopt sweep --queue``.

A sweep's own builds are Ray tasks; on a service's cluster each sweep is a new Ray job, and
Ray starts fresh worker processes for every job, so a queued sweep's first build waited for
a worker to start and import the build modules. A :class:`BuildActor` is started once by
``kopt serve start`` (named, detached, restarted by Ray) with those modules imported and
its compilers' identities read; a queued sweep sends its builds to the service's builders
(kopt.run.builder.RayBuilder.use_actors). The builds themselves are workers.build's, with the
build cache of the node the actor runs on.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import ray

from workers import build as wbuild
from workers.reap import pid_alive
from workers.records import BuildJob, BuildResult


def process_alive(who: str) -> bool:
    """Whether process ``who`` (``HOST:PID``) still runs: False only for a process of this
    host that is gone; one on another host (or a malformed ``who``) is taken as running."""
    host, _, pid = who.rpartition(":")
    return host != platform.node() or not pid.isdigit() or pid_alive(int(pid))


class BuildActor:
    """One warm builder (one build at a time: a plain Ray actor).

    Args:
        toolchains: compiler identities read at start (``nvrtc``, ``cuda``, ``cpu``), so
            that the first sweep finds NVRTC loaded and nvcc's ``--version`` read; with
            ``nvrtc``, the NVRTC compiler process is started and has compiled once
            (workers.build.warm_nvrtc).
    """

    def __init__(self, toolchains: list[str]):
        self.builds = 0
        for t in toolchains:
            wbuild.compiler_identity(t)
        if "nvrtc" in toolchains:  # its compiler process started, NVRTC's first compile done
            wbuild.warm_nvrtc()
        # the node's environment (torch's version among others): 4.4 s on an H200 host when
        # the first sweep asked for it (2026-12-01), so read at start
        self.env: dict[str, Any] = wbuild.identity_and_env(toolchains[0])[1]

    @ray.method(num_returns=2)
    def build(self, job: BuildJob, owner: str = "") -> tuple[BuildResult, bytes | None]:
        """Build ``job`` (workers.build.build): (result, artifact bytes or None). Skipped
        (a failed result saying why) when ``owner``, the ``HOST:PID`` of the sweep that sent
        it, is gone: a sweep interrupted or killed leaves its builds queued here, and Ray
        runs a plain actor's queued calls even when they are cancelled."""
        if owner and not process_alive(owner):
            return BuildResult(job.build_id, False, f"not built: its sweep ({owner}) is gone"), None
        self.builds += 1
        return wbuild.build(job)

    def identity(self, toolchain: str) -> tuple[str, dict[str, Any]]:
        """As workers.build.identity_and_env: the compiler identity (cached per process) and
        this node's environment (read at start: it does not change while the service runs)."""
        return wbuild.compiler_identity(toolchain), self.env

    def ping(self) -> int:
        """The actor's process id."""
        return os.getpid()

    def stats(self) -> dict[str, int]:
        """Builds made since start."""
        return {"builds": self.builds}
