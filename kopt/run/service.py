"""The warm queue: a long-lived kopt service on a Ray cluster.

``kopt serve start`` creates, in the Ray namespace ``kopt``, one named detached device actor
per device (workers.device_actor, as a sweep's own: one per GPU, or ``--cpu-devices`` per
node for the CPU backend) and a small registry actor that records the service's backend,
its devices and the sweeps it served. The actors outlive the command: each keeps its
sandbox (the harness process, torch imported, the device set up) warm between sweeps.
``kopt sweep --queue`` looks them up by name (:class:`QueueRunner`) instead of starting its
own, so it pays no device start-up; it keeps its own run id, store and builds.

What Ray gives and kopt does not rebuild:

- **one candidate at a time per device**: a device actor is a plain (synchronous) Ray actor,
  so it runs one call at a time whichever sweep sent it;
- **fair sharing**: each sweep keeps at most ``inflight`` jobs queued per device (the
  scheduler's backpressure) and Ray's actor queue serves calls in arrival order, so a
  sweep waits behind at most the other sweeps' few queued jobs, never behind a whole sweep;
- **restarts**: device actors have ``max_restarts=-1``; a killed one is restarted by Ray on
  its node, and a sweep puts the job it lost back in its queue (kopt.run.scheduler).

Without ``kopt serve start``, ``kopt sweep`` starts and stops its own device actors as
before. ``kopt serve start`` with no ``--address`` starts its own Ray head on this machine
(``ray start --head --block`` in its own process group) and ``kopt serve stop`` stops it;
the address is recorded in ``$KOPT_CACHE/service.json`` so that ``kopt sweep --queue`` and
``kopt serve stop|status`` find it without ``--address``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from pydantic import Field

import kopt
import workers
from kopt.run import launchpad
from kopt.run.devices import Slot, alive_nodes
from kopt.run.probe import NOT_RAY, head_problem
from kopt.run.runner import ACTOR_START_TIMEOUT_S, DeviceError, RayRunner, RunFuture, SweepError
from kopt.util.jsonrecord import MAX_PID, RecordError, RecordModel, read_record, write_record
from kopt.util.phases import PhaseRecorder
from kopt.util.words import counted
from workers.build_actor import BuildActor, process_alive
from workers.records import RunOutcome

NAMESPACE = "kopt"
REGISTRY = "kopt-service"
DEVICE_PREFIX = "kopt-device-"
BUILDER_PREFIX = "kopt-builder-"
STATE_FILE = "service.json"
HEAD_START_S = 120.0  # the service's own Ray head must accept connections by then
STATUS_WAIT_S = 2.0  # a device that does not answer `stats` by then is busy with a job
CALL_ATTEMPTS = 3  # calls of one device method when the service's actor dies under them


class ServiceError(SweepError):
    """The service cannot start, stop or be found (one line naming the fix)."""


class Registry:
    """The service's record, a named detached actor of no CPU: its configuration (backend,
    device actor names, address) and the sweeps it served (each a ``who`` token: host and
    pid of the sweep's driver)."""

    def __init__(self, config: dict[str, Any]):
        self.cfg = config
        self.served = 0
        self.running: dict[str, float] = {}  # who -> when it joined (epoch s)

    def config(self) -> dict[str, Any]:
        """The configuration given at start."""
        return self.cfg

    def join(self, who: str) -> int:
        """A sweep starts on the service; returns how many sweeps it has served."""
        self.served += 1
        self.running[who] = time.time()
        return self.served

    def leave(self, who: str) -> None:
        """A sweep is done with the service."""
        self.running.pop(who, None)

    def status(self) -> dict[str, Any]:
        """Sweeps served since start, and those running now."""
        return {"served": self.served, "running": sorted(self.running)}


def device_name(k: int) -> str:
    """The Ray name of the service's ``k``-th device actor."""
    return f"{DEVICE_PREFIX}{k}"


class ServiceRunner(RayRunner):
    """The device actors of ``kopt serve start``: a sweep's own (kopt.run.runner.RayRunner),
    named, detached and restarted by Ray."""

    def _more_options(self, slot: Slot) -> dict[str, Any]:
        return {"name": device_name(self.slots.index(slot)), "namespace": NAMESPACE,
                "lifetime": "detached", "max_restarts": -1}


class QueueRunner(RayRunner):
    """A sweep's runner on a warm service: its device actors are the service's (looked up by
    name), never started, stopped or killed here. A device actor that dies under a job is
    restarted by Ray; :meth:`replace` waits for it. Busy seconds are this sweep's: the
    device-side wall of its jobs (the service's actors also serve other sweeps).

    Args:
        backend: the service's backend.
        config: the service's configuration (:meth:`Registry.config`).
    """

    def __init__(self, backend: str, config: dict[str, Any]):
        super().__init__(backend, int(config.get("cpu_devices") or 1))
        self.config = config
        self.busy: dict[int, float] = {}
        self.who = f"{platform.node()}:{os.getpid()}"

    def start(self, on_launch: Any = None, phases: PhaseRecorder | None = None) -> list[dict]:
        """Look up the service's device actors and take their infos; ``phases`` gets a
        ``device_start`` interval per device (here: the lookup, no start-up).

        Raises:
            SweepError: a device actor of the service is gone or does not answer.
        """

        t0 = phases.now() if phases is not None else 0.0
        self.nodes = alive_nodes()
        try:
            self.actors = [ray.get_actor(n, namespace=NAMESPACE) for n in self.config["devices"]]
        except ValueError as e:
            raise SweepError(f"--queue: the kopt service lost a device actor ({e}); restart it "
                             "with `kopt serve stop` and `kopt serve start`") from None
        if on_launch is not None:
            on_launch()
        for name, a in zip(self.config["devices"], self.actors):
            try:
                self.infos.append(ray.get(a.info.remote(), timeout=600))
            except (ray.exceptions.RayError, TimeoutError) as e:
                raise SweepError(f"--queue: the kopt service's device actor {name} does not "
                                 f"answer ({type(e).__name__}); `kopt serve status` shows it; "
                                 "restart the service (`kopt serve stop`, `kopt serve start`)"
                                 ) from None
            if phases is not None:
                phases.span("device_start", t0, phases.now(), self.infos[-1], detail="warm")
        ray.get_actor(REGISTRY, namespace=NAMESPACE).join.remote(self.who)
        return self.infos

    def builders(self) -> list[Any]:
        """Handles of the service's warm builders (workers.build_actor) that still exist; []
        for a service started before they were (its sweeps build on Ray tasks)."""
        out = []
        for n in self.config.get("builders") or []:
            try:
                out.append(ray.get_actor(n, namespace=NAMESPACE))
            except ValueError:
                pass
        return out

    def check_reads(self, path: Path) -> None:
        """Refuse a sweep whose ``path`` (its ref.py) a device's node cannot read.

        Raises:
            SweepError: naming the node and the fix.
        """
        for i, info in enumerate(self.infos):
            try:
                seen = self.call(i, "readable", str(path), timeout=600)  # behind others' jobs
            except DeviceError as e:
                raise SweepError(f"--queue: the kopt service's device {info.get('device_id')} "
                                 f"failed ({e}); `kopt serve status` shows it") from None
            if not seen:
                raise SweepError(
                    f"--queue: the kopt service's device {info.get('device_id')} cannot read "
                    f"{path}; a warm service reads each sweep's folder at the path the sweep "
                    "has here (a service on this machine, or a shared filesystem): run the "
                    "sweep without --queue, or put its folder on a path every node sees")

    def collect(self, fut: RunFuture) -> RunOutcome:
        out = super().collect(fut)
        self.busy[fut.device] = self.busy.get(fut.device, 0.0) + (out.wall_s or 0.0)
        return out

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        """As :meth:`RayRunner.call`; a call lost because the service's actor died (killed,
        crashed: on a shared service, often not this sweep's doing) is made again once Ray
        has restarted the actor, ``CALL_ATTEMPTS`` calls at most.

        Raises:
            DeviceError: the device failed otherwise, did not answer within ``timeout`` s,
                or died under every attempt.
        """
        n = 0
        while True:
            n += 1
            try:
                return ray.get(getattr(self.actors[i], method).remote(*args), timeout=timeout)
            except ray.exceptions.RayActorError as e:
                if n >= CALL_ATTEMPTS or back(self.config["devices"][i]) is None:
                    raise DeviceError(f"device actor died under {counted(n, 'call')} of {method}: "
                                      f"{e}") from None
            except (ray.exceptions.RayError, TimeoutError) as e:
                raise DeviceError(f"device actor failed: {e}") from None

    def replace(self, i: int) -> Any:
        """Ray restarts the service's actor (``max_restarts=-1``): a task that waits for it
        (:func:`back`) and returns its info."""
        return _back_remote.remote(self.config["devices"][i])

    def started(self, i: int, ref: Any) -> bool:
        try:
            info = ray.get(ref)
        except ray.exceptions.RayError:
            info = None
        if info is None:
            return False  # stays dead
        self.infos[i] = {**info, "device_class": self.infos[i]["device_class"]}
        self.dead.discard(i)
        return True

    def abandon(self, i: int) -> None:
        self.dead.add(i)  # the service's actor: never killed by a sweep

    def close(self) -> dict[int, float]:
        """Leave the service (its actors keep running); returns this sweep's busy seconds
        per live device (the device-side wall of its jobs)."""
        try:
            ray.get_actor(REGISTRY, namespace=NAMESPACE).leave.remote(self.who)
        except ValueError:
            pass
        return {i: self.busy.get(i, 0.0) for i in range(len(self.actors))
                if i not in self.dead}


def back(name: str, wait_s: float = ACTOR_START_TIMEOUT_S) -> dict[str, Any] | None:
    """The info of the service's device actor ``name`` once it answers again (Ray restarts a
    killed or crashed one); None when it is gone for good (`kopt serve stop`: its name is
    free) or did not answer within ``wait_s`` seconds (calls to it fail until Ray has seen
    it die)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            actor = ray.get_actor(name, namespace=NAMESPACE)
            return ray.get(actor.info.remote(), timeout=max(1.0, deadline - time.monotonic()))
        except ValueError:
            return None
        except ray.exceptions.RayActorError:
            time.sleep(1.0)
        except (ray.exceptions.RayError, TimeoutError):
            return None
    return None


_back_remote = ray.remote(num_cpus=0)(back)


# -- the state file --------------------------------------------------------------------------
def state_path() -> Path:
    """``$KOPT_CACHE/service.json`` (default ``~/.cache/kopt/service.json``): the address
    of the service ``kopt serve start`` made on this machine (and its own Ray head's process
    group and folder, when it started one)."""
    base = os.environ.get("KOPT_CACHE") or os.path.join(Path.home(), ".cache", "kopt")
    return Path(base) / STATE_FILE


class ServiceRecord(RecordModel):
    """The service record (:func:`state_path`), as :func:`start_service` writes it."""

    address: str | None = None
    pgid: int | None = Field(None, ge=2, le=MAX_PID)  # its own Ray head's process group
    head_start: int | None = Field(None, ge=0)  # that head's start, /proc clock ticks
    temp_dir: str | None = None
    token: str | None = None
    started_at: Any = None
    launch: str | None = None  # its launchpad's socket (kopt.cli.launchpad)
    launch_pid: int | None = Field(None, ge=2, le=MAX_PID)


def read_state() -> dict[str, Any]:
    """The recorded service ({} when none was recorded), every field checked once here.

    Raises:
        ServiceError: the record is damaged (not JSON, not an object, a field of the wrong
            type), one line naming the file, the field and the fix.
    """
    try:
        rec = read_record(state_path(), ServiceRecord,
                          "remove it (a service it names that still runs: stop it first "
                          "with `kopt serve stop --address HOST:PORT`)")
    except RecordError as e:  # a pgid or token of the wrong type
        raise ServiceError(f"service record {e}") from None
    return rec.model_dump(exclude_none=True) if rec is not None else {}


def recorded_address(option: str = "--queue") -> str:
    """The address of the recorded service.

    Raises:
        ServiceError: none is recorded.
    """
    addr = read_state().get("address")
    if not addr and option == "kopt serve stop":  # nothing to stop: starting one is no fix
        raise ServiceError(f"{option}: no kopt service is recorded in {state_path()}: nothing "
                           "started here to stop (one elsewhere: pass its --address HOST:PORT)")
    if not addr:
        raise ServiceError(f"{option}: no kopt service is recorded in {state_path()}; start "
                           "one with `kopt serve start`, or pass --address HOST:PORT of one")
    return str(addr)


def recorded_as() -> str:
    """How messages name the service address that came from the record, not an option
    (they once named --address, which the user had not passed)."""
    return f"the kopt service recorded in {state_path()}"


def _write_state(state: dict[str, Any]) -> None:
    """Record ``state`` (readable by this user only: it holds the head's token)."""
    write_record(state_path(), state, mode=0o600)


def use_token(address: str) -> None:
    """When ``address`` is the recorded service's own Ray head, give this process that
    head's token (Ray's token authentication: ``RAY_AUTH_MODE``, ``RAY_AUTH_TOKEN``), before
    it attaches."""
    state = read_state()
    if state.get("address") == address and state.get("token"):
        _set_token(state["token"])


def _set_token(token: str) -> None:
    """Token authentication with ``token`` for this process and its children: the
    environment Ray reads, and Ray's cached config and token refreshed (as Ray's own
    ``_enable_token_auth`` does: it reads them once per process)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    os.environ["RAY_AUTH_MODE"], os.environ["RAY_AUTH_TOKEN"] = "token", token
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_head(num_cpus: int | None = None) -> dict[str, Any]:
    """Start a Ray head on this machine for the service (``ray start --head --block`` in a
    process group of its own, so that :func:`stop_service` stops exactly it, never another
    Ray instance of this machine). Returns its ``address``, ``pgid`` and ``temp_dir``.

    Raises:
        ServiceError: the head did not come up (without a ``ray`` command, e.g. Ray unpacked
            onto PYTHONPATH, it runs ``python -m ray.scripts.scripts``).
    """
    exe = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    # no console script (ray unpacked onto PYTHONPATH, as on an offline GPU host): its module
    ray_cmd = [exe] if Path(exe).is_file() else [sys.executable, "-m", "ray.scripts.scripts"]
    port, tmp = _free_port(), tempfile.mkdtemp(prefix="kopt-ray-", dir="/tmp")
    token = secrets.token_hex(32)  # Ray's token authentication, with a token of its own
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
           "RAY_USAGE_STATS_ENABLED": "0"}
    log = state_path().with_name("service-ray.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [*ray_cmd, "start", "--head", "--block", f"--port={port}", "--include-dashboard=false",
           "--disable-usage-stats", f"--temp-dir={tmp}"]
    cmd += [f"--num-cpus={num_cpus}"] if num_cpus else []
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + HEAD_START_S
    try:
        while time.time() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return {"address": f"127.0.0.1:{port}", "pgid": proc.pid, "temp_dir": tmp,
                        "token": token, "head_start": _start_ticks(proc.pid)}
            except OSError:
                time.sleep(0.5)
    except BaseException:  # Ctrl-C while it starts: it ran on, unrecorded, for ever
        _stop_head({"pgid": proc.pid, "temp_dir": tmp})
        raise
    _stop_head({"pgid": proc.pid, "temp_dir": tmp})
    raise ServiceError(f"kopt serve start: the Ray head did not come up in {HEAD_START_S:.0f} s "
                       f"(see {log}); nothing was started")


def _stop_head(state: dict[str, Any]) -> None:
    """Stop the Ray head :func:`start_head` started (its process group) and remove its
    folder -- each only when it verifiably is kopt's (:func:`own_head`, :func:`_ray_dir`):
    a stale record's pgid may be another program's group by now (one such group was once killed)."""
    pgid = state.get("pgid")
    if pgid and own_head(state):
        # SIGKILL too is waited for: a killed process runs on until the kernel has torn it
        # down, and the head's raylet wrote into its folder after that was removed
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                break
            t_end = time.time() + wait
            while time.time() < t_end and _group_alive(pgid):
                time.sleep(0.2)
    tmp = _ray_dir(state)
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def _kopt_dir(state: dict[str, Any]) -> Path | None:
    """The record's ``temp_dir`` when it has the name :func:`start_head` gives its folder
    (``/tmp/kopt-ray-*``, not a link); else None."""
    t = state.get("temp_dir")
    p = Path(t) if t else None
    if p is None or p.parent != Path("/tmp") or not p.name.startswith("kopt-ray-") \
            or p.is_symlink():
        return None
    return p


def _ray_dir(state: dict[str, Any]) -> Path | None:
    """The record's ``temp_dir`` when kopt made it and Ray's layout (``session_*``,
    ``ray_current_cluster``) or nothing is in it: the only folder :func:`_stop_head`
    removes."""
    p = _kopt_dir(state)
    try:
        names = [c.name for c in p.iterdir()] if p is not None and p.is_dir() else None
    except OSError:
        return None
    if names is None or any(not n.startswith("session_") and n != "ray_current_cluster"
                            for n in names):
        return None
    return p


def own_head(state: dict[str, Any]) -> bool:
    """Whether the record's ``pgid`` is still the Ray head :func:`start_head` started: its
    leader (when it runs) started at the recorded ``head_start``, and a live process of the
    group names the recorded ``/tmp/kopt-ray-*`` folder on its command line."""
    pgid, tmp = state.get("pgid"), _kopt_dir(state)
    if not pgid or tmp is None:
        return False
    started = _start_ticks(pgid)
    if started is not None and state.get("head_start") not in (None, started):
        return False  # the leader's pid was reused: another program
    for pid in _group_pids(pgid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except OSError:
            continue
        if str(tmp) in cmd and "ray" in cmd:
            return True
    return False


def _stat_fields(pid: int | str) -> list[str]:
    """``/proc/PID/stat`` after the command name (state first); [] when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, /proc/PID/stat field 22)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def _group_pids(pgid: int) -> list[int]:
    """The live processes (not zombies) of group ``pgid``, from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat.parent.name)
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, which the head's parent may
    never reap, do not count; without ``/proc``: whether the group can be signalled)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not Path("/proc/self/stat").exists():
        return True
    return bool(_group_pids(pgid))


def connect(address: str, option: str, ship: bool = True) -> None:
    """Attach this process to the Ray cluster at ``address``; with ``ship``, kopt's packages
    travel with it (the code of the service's actors).

    Raises:
        ServiceError: ``address`` is not HOST:PORT or nothing answers there.
    """

    problem = head_problem(address)
    if problem == "format":
        raise ServiceError(f"{option}: {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379)")
    if problem == "silent":
        fix = ("start one with `ray start --head`, or run `kopt serve start` without "
               "--address" if option.startswith("--") else
               "that service has stopped: `kopt serve stop` removes the record, then "
               "`kopt serve start` starts a new one")
        raise ServiceError(f"{option}: no Ray head answers at {address}; {fix}")
    if problem:  # Ray would retry for 90 s and more
        raise ServiceError(f"{option}: " + NOT_RAY.format(address=address))
    renv = {"py_modules": [str(Path(kopt.__file__).parent), str(Path(workers.__file__).parent)]}
    use_token(address)
    try:
        ray.init(address=address, namespace=NAMESPACE, runtime_env=renv if ship else None,
                 logging_level="ERROR", log_to_driver=False)
    except ConnectionError as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ServiceError(f"{option}: cannot attach to the Ray cluster at {address} ({first});"
                           " a cluster with token authentication needs its token in "
                           "RAY_AUTH_TOKEN (and RAY_AUTH_MODE=token)") from None


def registry(address: str, option: str) -> Any:
    """The service's registry actor on the attached cluster.

    Raises:
        ServiceError: no kopt service runs there.
    """
    try:
        return ray.get_actor(REGISTRY, namespace=NAMESPACE)
    except ValueError:
        raise ServiceError(f"{option}: no kopt service runs on the Ray cluster at {address}; "
                           f"start one with `kopt serve start --address {address}`") from None


def start_service(address: str | None = None, backend: str = "auto", cpu_devices: int = 1,
                  num_cpus: int | None = None) -> dict[str, Any]:
    """Start the service: attach to the Ray cluster at ``address`` (None: start a Ray head
    on this machine, ``num_cpus`` logical CPUs), create its device actors and registry, and
    record its address (:func:`state_path`). Returns its configuration.

    Raises:
        ServiceError: no head answers, a service already runs there (or, without
            ``address``, the one started here and recorded is still up), no device for the
            backend, or a device actor failed to start (then nothing is left running).
    """
    if address is None:  # one `serve start` here at a time (two at once both started)
        with _start_lock():
            return _start_here(backend, cpu_devices, num_cpus)
    return _start_on(address, {"address": address}, backend, cpu_devices)


@contextlib.contextmanager
def _start_lock() -> Iterator[None]:
    """Hold ``service.lock`` beside the record while a service starts on this machine.

    Raises:
        ServiceError: another `kopt serve start` holds it.
    """
    path = state_path().with_name("service.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ServiceError(f"kopt serve start: another `kopt serve start` is starting the "
                               f"service here (it holds {path}); wait for it, then `kopt "
                               "serve status`") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _start_here(backend: str, cpu_devices: int, num_cpus: int | None) -> dict[str, Any]:
    """:func:`start_service` on a Ray head it starts on this machine."""
    prev = read_state()
    if own_head(prev):  # no second head, and only kopt's own head counts
        raise ServiceError(f"kopt serve start: the kopt service started here still runs at "
                           f"{prev.get('address')} (recorded in {state_path()}); stop it "
                           "first with `kopt serve stop`, or use it: `kopt sweep ... --queue`")
    own = start_head(num_cpus)
    # one handler from the head's start to the launchpad's: Ctrl-C in the gap between two
    # (the `ray.shutdown` after the record is written takes seconds on a loaded machine)
    # left the head running for good while the line said nothing was left running
    try:
        cfg = _start_on(None, own, backend, cpu_devices)
        # queued sweeps' drivers kept ready on this machine (a first result within 1 s)
        sock, pid = launchpad.start(own["pgid"], state_path().with_name("service-launch.log"))
        _write_state({**read_state(), "launch": sock, "launch_pid": pid})
        launchpad.wait_ready(sock)  # warm means its first queued sweep starts at once too
    except BaseException:  # Ctrl-C or a failure: not started after all
        _undo_start(own)
        raise
    return {**cfg, "launch": sock}


def _undo_start(own: dict[str, Any]) -> None:
    """Stop what :func:`_start_here` started on the head ``own`` (its actors, launchpad and
    the head itself), whichever step it had reached: through :func:`stop_service` once the
    record names that head, else the head alone (its actors die with it)."""
    ray.shutdown()
    if read_state().get("pgid") == own["pgid"]:
        with contextlib.suppress(ServiceError):
            stop_service()
    _stop_head(own)  # a no-op when it is gone already (own_head)


def _start_on(address: str | None, own: dict[str, Any], backend: str, cpu_devices: int
              ) -> dict[str, Any]:
    """:func:`start_service`'s actors on the cluster at ``own["address"]`` (``address``
    None: the head it started here, ``own``, stopped again on failure); the record."""
    addr = own["address"]
    if own.get("token"):
        _set_token(own["token"])
    try:
        connect(addr, "--address")
        try:
            ray.get_actor(REGISTRY, namespace=NAMESPACE)
            raise ServiceError(f"kopt serve start: a kopt service already runs at {addr} "
                               f"(`kopt serve status --address {addr}`); stop it first with "
                               f"`kopt serve stop --address {addr}`")
        except ValueError:
            pass
        cfg = _create(addr, backend, cpu_devices)
    except BaseException:
        ray.shutdown()
        if address is None:
            _stop_head(own)
        raise
    _write_state({**own, "started_at": cfg["started_at"]})
    ray.shutdown()
    return cfg


def _create(address: str, backend: str, cpu_devices: int) -> dict[str, Any]:
    """The service's device actors and registry on the attached cluster; its config."""
    gpus = ray.cluster_resources().get("GPU", 0)
    if backend == "auto":
        backend = "cuda" if gpus else "cpu"
    if backend == "cuda" and not gpus:
        raise ServiceError(f"--backend cuda: the Ray cluster at {address} has no GPU; use "
                           "--backend cpu, or start the service on a GPU cluster")
    runner = ServiceRunner(backend, cpu_devices)
    try:
        infos = runner.start()
        builders = _start_builders(backend, len(infos) if backend == "cpu" else 0)
    except BaseException:
        for a in runner.actors:
            ray.kill(a, no_restart=True)
        raise
    cfg = {"address": address, "backend": backend, "cpu_devices": cpu_devices,
           "devices": [device_name(k) for k in range(len(infos))], "infos": infos,
           "builders": builders, "started_at": time.time()}
    reg = ray.remote(num_cpus=0, max_restarts=-1)(Registry).options(
        name=REGISTRY, namespace=NAMESPACE, lifetime="detached").remote(cfg)
    ray.get(reg.status.remote(), timeout=120)
    return cfg


def _start_builders(backend: str, cpu_devices: int) -> list[str]:
    """Start the service's warm builders (workers.build_actor.BuildActor, named, detached,
    restarted by Ray): one per CPU of the cluster that its CPU device actors leave (at least
    one), spread over the nodes, each with the backend's compiler identities read; returns
    their names. They reserve no CPU (``num_cpus=0``), so that a sweep run on the same
    cluster without ``--queue`` still gets its build tasks' CPUs. On a cluster whose nodes
    differ in platform, sweeps route builds by platform to Ray tasks and leave the builders
    idle (kopt.run.builder.RayBuilder.set_routes).

    Raises:
        ServiceError: a builder did not start within ACTOR_START_TIMEOUT_S (the ones started
            are killed).
    """

    n = max(1, int(ray.cluster_resources().get("CPU", 1)) - cpu_devices)
    toolchains = ["nvrtc", "cuda"] if backend == "cuda" else ["cpu"]
    cls = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=1)(BuildActor)
    names = [f"{BUILDER_PREFIX}{k}" for k in range(n)]
    actors = [cls.options(name=name, namespace=NAMESPACE, lifetime="detached",
                          scheduling_strategy="SPREAD").remote(toolchains) for name in names]
    try:
        ray.get([a.stats.remote() for a in actors], timeout=ACTOR_START_TIMEOUT_S)
    except (ray.exceptions.RayError, TimeoutError) as e:
        for a in actors:
            ray.kill(a, no_restart=True)
        raise ServiceError(f"kopt serve start: the service's builders did not start "
                           f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    return names


def stop_service(address: str | None = None) -> list[str]:
    """Stop the service at ``address`` (None: the recorded one): its device actors (their
    sandboxes closed) and registry, and the Ray head when ``kopt serve start`` started it.
    It does not wait for sweeps running on it: they lose their devices (their jobs left
    become ``lost`` rows) and, with the service's own head, their Ray. Returns the names of
    the actors stopped (or a line for its own head when only that was left to stop; [] when
    nothing was running), then ``its launchpad: pid N`` when its launchpad (the ready
    sweep driver's process, kopt.cli.launchpad) was running and is stopped.

    Raises:
        ServiceError: nothing is recorded and no ``address`` given; no head answers at a
            given address; no service runs there.
    """
    state = read_state()
    addr = address or recorded_address("kopt serve stop")
    own = state if state.get("address") == addr and state.get("pgid") else None
    answered = False  # a Ray head answered at addr
    try:
        connect(addr, "--address" if address else recorded_as(), ship=False)
        answered = True
        reg = registry(addr, "kopt serve stop")
    except ServiceError:
        ray.shutdown()
        if own is None and not answered and address is None:
            state_path().unlink(missing_ok=True)  # a recorded service on a head that is gone
            return []
        if own is None:
            raise
        foreign = _group_alive(own["pgid"]) and not own_head(own)
        was_up = not foreign and _group_alive(own["pgid"])
        pad = _stop_launchpad(own)
        _stop_head(own)  # its own head: stopped whatever is left on it
        state_path().unlink(missing_ok=True)
        if foreign:
            raise ServiceError(_foreign_line(own)) from None
        # a head that ran but did not answer was once reported as gone already
        return ([f"its Ray head: process group {own['pgid']}, which did not answer at "
                f"{addr}"] if was_up else []) + pad
    cfg = ray.get(reg.config.remote(), timeout=60)
    stopped = [n for n in cfg["devices"] if _stop_device(n)]
    stopped += [n for n in cfg.get("builders") or [] if _kill(n)]
    ray.kill(reg, no_restart=True)
    ray.shutdown()
    pad = _stop_launchpad(own) if own is not None else []
    if own is not None:
        _stop_head(own)
    if state.get("address") == addr:
        state_path().unlink(missing_ok=True)
    return [*stopped, REGISTRY, *pad]


def _stop_launchpad(own: dict[str, Any]) -> list[str]:
    """Stop the recorded launchpad (kopt.run.launchpad.stop: only a process that is it, only
    its own folder removed); ``["its launchpad: pid N"]`` when one was running, else []."""
    if own.get("launch") and launchpad.stop(own["launch"], own.get("launch_pid")):
        return [f"its launchpad: pid {own.get('launch_pid')}"]
    return []


def _foreign_line(own: dict[str, Any]) -> str:
    """The line of :func:`stop_service` when the recorded head's process group is another
    program's now, after the stale record was removed."""
    kept = own.get("temp_dir") if _kopt_dir(own) is None else None
    return (f"kopt serve stop: the Ray head recorded in {state_path()} is gone, and its "
            f"process group {own['pgid']} is now another program's (not the Ray head kopt "
            f"started): left it{f' and {kept}' if kept else ''} alone and removed the stale "
            "record")


def _stop_device(name: str) -> bool:
    """Close the sandbox of device actor ``name`` (after the job it runs) and kill it; False
    when it was gone already."""
    try:
        actor = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return False
    try:
        ray.get(actor.shutdown.remote(), timeout=30)
    except (ray.exceptions.RayError, TimeoutError):
        pass
    ray.kill(actor, no_restart=True)
    return True


def _kill(name: str) -> bool:
    """Kill the service's actor ``name`` (no restart); False when it was gone already."""
    try:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
    except ValueError:
        return False
    return True


def service_status(address: str | None = None) -> dict[str, Any]:
    """The service at ``address`` (None: the recorded one): backend, start time, sweeps
    served and running, per device its state (``idle`` with its ``jobs``, ``busy_s`` and
    sandbox ``restarts``; ``busy`` when it did not answer within ``STATUS_WAIT_S``;
    ``restarting`` or ``gone``) and per warm builder its state (``builds`` when idle).

    Raises:
        ServiceError: as :func:`stop_service`.
    """
    addr = address or recorded_address("kopt serve status")
    try:
        connect(addr, "--address" if address else recorded_as(), ship=False)
        reg = registry(addr, "kopt serve status")
        cfg = ray.get(reg.config.remote(), timeout=60)
        served = ray.get(reg.status.remote(), timeout=60)
        gone = [w for w in served["running"] if not driver_alive(w)]
        for w in gone:  # a killed sweep never left; it is not running
            reg.leave.remote(w)
        served["running"] = [w for w in served["running"] if w not in gone]
        devices = [_device_state(n, info) for n, info in zip(cfg["devices"], cfg["infos"])]
        builders = [_builder_state(n) for n in cfg.get("builders") or []]
    finally:
        ray.shutdown()
    rec = read_state()
    launch = (launchpad.state_of(rec["launch"]) if rec.get("address") == addr
              and rec.get("launch") else None)
    return {"address": addr, "backend": cfg["backend"], "started_at": cfg["started_at"],
            "sweeps_served": served["served"], "sweeps_running": served["running"],
            "devices": devices, "builders": builders, "launchpad": launch}


def driver_alive(who: str) -> bool:
    """Whether the sweep driver ``who`` (``HOST:PID``, :attr:`QueueRunner.who`) still runs
    (workers.build_actor.process_alive: False only for a process of this host that is
    gone; a driver on another host is taken as running)."""
    return process_alive(who)


def _builder_state(name: str) -> dict[str, Any]:
    """A builder's ``state`` (``idle`` with its ``builds`` since start, ``busy``, ``gone``,
    ``restarting``), as :func:`_device_state`."""
    try:
        ref = ray.get_actor(name, namespace=NAMESPACE).stats.remote()
        if not ray.wait([ref], timeout=STATUS_WAIT_S)[0]:
            return {"name": name, "state": "busy"}
        return {"name": name, "state": "idle", **ray.get(ref)}
    except ValueError:
        return {"name": name, "state": "gone"}
    except ray.exceptions.RayError:
        return {"name": name, "state": "restarting"}


def _device_state(name: str, info: dict[str, Any]) -> dict[str, Any]:
    row = {"name": name, "device_id": info.get("device_id"),
           "device_class": info.get("device_class")}
    try:
        ref = ray.get_actor(name, namespace=NAMESPACE).stats.remote()
        if not ray.wait([ref], timeout=STATUS_WAIT_S)[0]:
            return {**row, "state": "busy"}
        return {**row, "state": "idle", **ray.get(ref)}
    except ValueError:
        return {**row, "state": "gone"}
    except ray.exceptions.RayError:
        return {**row, "state": "restarting"}


def service_config(address: str) -> dict[str, Any]:
    """The configuration of the service on the attached cluster at ``address`` (a sweep's
    ``--queue``).

    Raises:
        ServiceError: no kopt service runs there.
    """
    return ray.get(registry(address, "--queue").config.remote(), timeout=60)


def queue_backend(config: dict[str, Any], backend: str) -> str:
    """The backend a sweep runs on the service: the service's (``auto`` takes it).

    Raises:
        ServiceError: ``backend`` is another.
    """
    if backend in ("auto", config["backend"]):
        return str(config["backend"])
    raise ServiceError(f"--backend {backend}: the kopt service at {config['address']} runs "
                       f"{config['backend']} devices; pass --backend {config['backend']} "
                       "(or leave it out), or run the sweep without --queue")
