"""The Runner: run inputs -> futures of run results (TVM MetaSchedule's ``Runner``).

A runner owns the devices of a sweep (one per slot) and runs built candidates on them.
A run result is a value (workers.records.RunOutcome): a wrong result, a crash, a timeout
or a device that died under the job is a status with its error, never an exception.
:class:`RayRunner` runs on one Ray device actor per device (workers.device_actor);
:class:`LocalRunner` runs the same device-side code in this process, no Ray (tests).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from kopt.run.devices import Node, Slot, actor_options, alive_nodes, plan_slots
from kopt.util.phases import PhaseRecorder
from workers.device_actor import DeviceActor, remote_actor
from workers.prestart import Prestarted
from workers.records import RunJob, RunOutcome
from workers.status import Status

ACTOR_START_TIMEOUT_S = 120.0  # a replacement actor that has not started by then is dropped


class SweepError(RuntimeError):
    """The sweep cannot start (no device for the backend, a bad --resume, ...)."""


@dataclass
class RunInput:
    """One job for device ``device`` (an index into the runner's devices); ``tag`` comes
    back with the future (the driver's planned job)."""

    device: int
    job: RunJob
    artifact: Any
    tag: Any = None


@dataclass
class RunFuture:
    """A run under way: ``ref`` to wait on (None once ``outcome`` is known); ``died``: the
    error when the device died under the job (its outcome is then ``lost``)."""

    device: int
    tag: Any
    ref: Any = None
    outcome: RunOutcome | None = None
    died: BaseException | None = None


class Runner(ABC):
    """Runs jobs on a set of devices; ``infos[i]`` describes device ``i`` (its
    ``device_class``, ``platform``, ``sm``, node), ``dead`` holds the devices lost."""

    def __init__(self) -> None:
        self.infos: list[dict[str, Any]] = []
        self.dead: set[int] = set()

    @abstractmethod
    def run(self, inputs: list[RunInput]) -> list[RunFuture]:
        """Start ``inputs``; one future each, in order."""

    @abstractmethod
    def collect(self, fut: RunFuture) -> RunOutcome:
        """The outcome of a finished ``fut`` (never raises; sets ``fut.died``)."""

    @abstractmethod
    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        """Call device ``i``'s ``method`` (workers.device_actor.DeviceActor) and wait.

        Raises:
            DeviceError: the device failed (or did not answer within ``timeout`` s).
        """

    def cast(self, i: int, method: str, *args: Any) -> None:
        """Call device ``i``'s ``method`` without waiting for its answer (a failure is
        ignored: for work that only saves time later). This base version waits."""
        try:
            self.call(i, method, *args)
        except DeviceError:
            pass

    def call_many(self, calls: list[tuple[int, str, tuple]], timeout: float | None = None,
                  done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Make several ``(device, method, args)`` calls at once (devices work in parallel)
        and wait for all; one result per call, in order, a failed call's
        :class:`DeviceError` in its place (never raised). ``done(k, result)`` is called as
        call ``k`` finishes (e.g. to close its device's phase). This base version calls them
        one after another."""
        out: list[Any] = []
        for k, (i, method, args) in enumerate(calls):
            try:
                out.append(self.call(i, method, *args, timeout=timeout))
            except DeviceError as e:
                out.append(e)
            if done is not None:
                done(k, out[-1])
        return out

    def live(self, dc: str) -> list[int]:
        """Indices of the live devices of class ``dc``."""
        return [i for i, info in enumerate(self.infos)
                if info["device_class"] == dc and i not in self.dead]

    def classes(self) -> dict[str, dict]:
        """Device class -> the info of its first device, in device order."""
        out: dict[str, dict] = {}
        for info in self.infos:
            out.setdefault(info["device_class"], info)
        return out

    def replace(self, i: int) -> Any:
        """Start a replacement of dead device ``i``; returns what to wait on (None: it
        cannot be replaced)."""
        return None

    def started(self, i: int, ref: Any) -> bool:
        """Take the replacement of device ``i`` into service once ``ref`` is ready."""
        return False

    def abandon(self, i: int) -> None:
        """Give up on a replacement of device ``i`` that did not start in time."""
        self.dead.add(i)

    def close(self) -> dict[int, float]:
        """Stop every device; returns busy seconds per device that was still live."""
        return {}


class DeviceError(RuntimeError):
    """A device failed under a call (its actor died, or it did not answer)."""


class RayRunner(Runner):
    """One Ray actor per device slot (kopt.run.devices.plan_slots), each pinned to its node.

    Args:
        backend: ``cuda`` or ``cpu``.
        cpu_devices: CPU device actors per node (CPU backend).
    """

    def __init__(self, backend: str, cpu_devices: int = 1,
                 prestarted: dict[str, Prestarted] | None = None):
        super().__init__()
        self.backend, self.cpu_devices = backend, cpu_devices
        # harnesses the driver started before Ray (workers.prestart), offered to the first
        # actors only: by GPU id, or by CPU device ordinal
        self.prestarted = dict(prestarted or {})
        self.actors: list[Any] = []
        self.nodes: list[Node] = []
        self.slots: list[Slot] = []

    def start(self, on_launch: Callable[[], None] | None = None,
              phases: PhaseRecorder | None = None) -> list[dict]:
        """Start the actors; ``on_launch`` runs once they are asked for, before their start
        is awaited. Returns the devices' infos; ``phases`` gets a ``device_start`` interval
        per device (asked for until its info came back, in device order).

        Raises:
            SweepError: the CPU devices would leave no CPU for builds, or an actor fails
                to start.
        """
        self.nodes = alive_nodes()
        self.slots = plan_slots(self.nodes, self.backend, self.cpu_devices)
        self._check_cpus(ray.cluster_resources().get("CPU", 0))
        t_launch = phases.now() if phases is not None else 0.0
        self.actors = [self._new_actor(s, self.prestarted) for s in self.slots]
        self.prestarted = {}
        if on_launch is not None:
            on_launch()
        for a, slot in zip(self.actors, self.slots):
            try:
                self.infos.append(ray.get(a.info.remote(), timeout=600))
            except (ray.exceptions.RayError, TimeoutError) as e:
                where = f" on node {slot.node_id}" if slot.node_id else ""
                raise SweepError(f"a {self.backend} device actor{where} failed to start: "
                                 f"{e}") from None
            if phases is not None:
                phases.span("device_start", t_launch, phases.now(), self.infos[-1],
                            "sandbox started before Ray" if self.infos[-1].get("prestarted")
                            else None)
        return self.infos

    def _check_cpus(self, cpus: float) -> None:
        if self.backend != "cpu" or len(self.slots) < cpus:
            return
        per_node = max(1, len(self.slots) // self.cpu_devices)
        most = max(0, int((cpus - 1) // per_node))
        raise SweepError(f"--cpu-devices {self.cpu_devices}: {len(self.slots)} CPU device "
                         f"actors take every one of the cluster's {cpus:g} CPUs and leave "
                         f"none for builds; use --cpu-devices {most}"
                         f"{' or fewer' if most > 1 else ''}" if most else
                         f"--cpu-devices {self.cpu_devices}: the cluster's {cpus:g} CPUs "
                         "leave none for builds beside its CPU devices; add CPUs")

    def _new_actor(self, slot: Slot, prestarted: dict[str, Prestarted] | None = None) -> Any:
        cls = (remote_actor("cuda") if self.backend == "cuda"
               else remote_actor("cpu", threads=1))
        offer = dict(prestarted or {})
        if self.backend != "cuda":  # a CPU device's own, by ordinal (embedded instance only)
            mine = offer.get(str(slot.ordinal)) if slot.node_id is None else None
            offer = {"cpu": mine} if mine is not None else {}
        return cls.options(**actor_options(slot), **self._more_options(slot)).remote(
            self.backend, 1, slot.device_class, offer or None)

    def _more_options(self, slot: Slot) -> dict[str, Any]:
        """More Ray actor options for ``slot``'s actor (kopt.run.service: named, detached)."""
        return {}

    def run(self, inputs: list[RunInput]) -> list[RunFuture]:
        return [RunFuture(x.device, x.tag, self.actors[x.device].run.remote(x.job, x.artifact))
                for x in inputs]

    def collect(self, fut: RunFuture) -> RunOutcome:
        try:
            fut.outcome = ray.get(fut.ref)
        except ray.exceptions.RayActorError as e:
            fut.died = e
            fut.outcome = RunOutcome.fault(Status.LOST, f"device actor died: {e}")
        except ray.exceptions.RayError as e:
            fut.outcome = RunOutcome.fault(Status.LOST, f"device actor failed: {e}")
        fut.ref = None
        return fut.outcome

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        try:
            return ray.get(getattr(self.actors[i], method).remote(*args), timeout=timeout)
        except (ray.exceptions.RayError, TimeoutError) as e:
            raise DeviceError(f"device actor failed: {e}") from None

    def cast(self, i: int, method: str, *args: Any) -> None:
        getattr(self.actors[i], method).remote(*args)  # its ref dropped: nobody waits

    def call_many(self, calls: list[tuple[int, str, tuple]], timeout: float | None = None,
                  done: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Every call sent before any is waited on (each device actor works on its own);
        ``done(k, result)`` as each finishes, in the order they finish (``result``: the
        call's return value, or its DeviceError)."""
        refs = [getattr(self.actors[i], method).remote(*args) for i, method, args in calls]
        index = {ref: k for k, ref in enumerate(refs)}
        out: list[Any] = [None] * len(refs)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
            if not ready:  # nothing answered in time: every pending call fails
                ready, pending = pending, []
            for ref in ready:
                try:
                    out[index[ref]] = ray.get(ref, timeout=0)
                except (ray.exceptions.RayError, TimeoutError) as e:
                    out[index[ref]] = DeviceError(f"device actor failed: {e}")
                if done is not None:
                    done(index[ref], out[index[ref]])
        return out

    def replace(self, i: int) -> Any:
        """A new actor on the same node when that node is still alive."""
        slot = self.slots[i]
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if slot.node_id is not None and slot.node_id not in alive:
            return None
        self.actors[i] = self._new_actor(slot)
        return self.actors[i].info.remote()

    def started(self, i: int, ref: Any) -> bool:
        try:
            self.infos[i] = {**ray.get(ref), "device_class": self.infos[i]["device_class"]}
        except ray.exceptions.RayError:
            return False  # stays dead
        self.dead.discard(i)
        return True

    def abandon(self, i: int) -> None:
        super().abandon(i)
        ray.kill(self.actors[i], no_restart=True)

    def close(self) -> dict[int, float]:
        busy = {}
        for i, a in enumerate(self.actors):
            if i not in self.dead:
                try:
                    busy[i] = ray.get(a.stats.remote(), timeout=30)["busy_s"]
                    ray.get(a.shutdown.remote(), timeout=30)
                except Exception:
                    pass
            ray.kill(a, no_restart=True)
        return busy


class LocalRunner(Runner):
    """The device-side code (workers.device_actor.DeviceActor: its sandboxed harness) in
    this process, no Ray: each job runs when it is submitted, so every future is done.

    Args:
        backend: ``cpu`` (or ``cuda`` on a GPU machine).
        devices: how many devices (each its own harness process).
        device_class: the devices' class (default: the hardware-derived one).
    """

    def __init__(self, backend: str = "cpu", devices: int = 1,
                 device_class: str | None = None):
        super().__init__()
        self.devices = [DeviceActor(backend, 1, device_class) for _ in range(devices)]
        for k, d in enumerate(self.devices):
            info = {**d.sandbox.info, "node_ip": "127.0.0.1", "node_id": None,
                    "device_id": f"local/{backend}-{k}"}
            info["hw_class"] = info["device_class"]
            info["device_class"] = device_class or info["device_class"]
            self.infos.append(info)

    def run(self, inputs: list[RunInput]) -> list[RunFuture]:
        return [RunFuture(x.device, x.tag, None, self.devices[x.device].run(x.job, x.artifact))
                for x in inputs]

    def collect(self, fut: RunFuture) -> RunOutcome:
        assert fut.outcome is not None  # run() finished it
        return fut.outcome

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        return getattr(self.devices[i], method)(*args)

    def close(self) -> dict[int, float]:
        busy = {i: d.busy_s for i, d in enumerate(self.devices)}
        for d in self.devices:
            d.shutdown()
        return busy

