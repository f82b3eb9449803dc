"""Harness processes started before Ray, handed to the device actors once they exist.

A cold ``kopt sweep`` used to start its embedded Ray (3-4 s on an H200 host) and only then
its device actors, whose sandboxes imported torch and made the CUDA context (4.5 s more),
one after the other (measured 2026-12-01). :class:`Prestarter` starts one harness per local
device (``python -m workers.harness --listen FD DEVICE``) before Ray, so that both happen at once;
each device actor then takes its harness over (:func:`connect`, from
workers.sandbox.Sandbox.adopt) instead of starting one.

The harness listens on a Unix socket the prestarter made (``DIR/sock``); the actor
connects to it and from then on talks to it as to a harness it started itself. Its parent
is a small reaper process the prestarter started (workers.prestart_reaper, never the
driver itself: a candidate may kill its parent): it reaps the harness and writes its exit
status to ``DIR/status`` (:class:`AdoptedProcess` reads it), so that a candidate that kills
the adopted harness is described as one that kills any other (``killed by SIGSEGV``). A
harness nobody took over is killed by :meth:`Prestarter.close`, or with the prestarter's
process (``PR_SET_PDEATHSIG``, through the reaper).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from workers import cgroup, hold, isolation
from workers.isolation import NONE, Isolation
from workers.prestart_reaper import write_status
from workers.reap import NO_GPU, die_with_parent, package_env, pid_alive

SOCKET = "sock"
# the environment variable naming the pipe fd a prestarted harness reads its token from
TOKEN_ENV = "KOPT_PRESTART_TOKEN_FD"
HANDSHAKE_S = 10.0  # seconds a connection has to send the token once accepted
STATUS = "status"
LOG = "harness.log"
SCRATCH = "scratch"  # the sandbox's one writable folder (workers.jail)
PREPARE = "prepare.pkl"  # the jobs whose inputs and reference outputs are made ahead
STATUS_WAIT_S = 2.0  # for the reaper's status file once the harness is gone
JUDGE = "/judge"  # a device's second harness's key: its device's key and this


def judge_key(key: str) -> str:
    """The key of device ``key``'s second harness (the outside clock's and witness turns'
    judge, workers.device_actor ``DeviceActor.judge``) in :attr:`Prestarter.started`."""
    return key + JUDGE


@dataclass(frozen=True)
class Prestarted:
    """One harness waiting to be taken over (picklable: it travels to the device actor).

    Attributes:
        folder: holds the harness's socket (``sock``), log, exit status file and the
            sandbox's scratch folder (``scratch``).
        pid: the harness's process id, or its sandbox's first (``unshare``) where it is
            isolated (a process group leader either way: ``killpg`` ends it all).
        device: ``cuda`` or ``cpu``.
        isolation: the sandbox it runs in.
        limits: its cgroup's task and memory limits in words, or ``none: why``.
    """

    folder: str
    pid: int
    device: str
    isolation: Isolation = Isolation(NONE)  # what it runs under (workers.isolation)
    limits: str = ""  # its task and memory limits in words (workers.cgroup), or "none: why"
    # the secret the harness was started with (hex): the device actor sends it on connecting,
    # and the harness's first answer proves it knows it (:func:`proof`); empty: no handshake
    token: str = ""
    # the cgroup the harness is in (checked: Cgroup.holds), one folder per hierarchy, for
    # the adopter to read its CPU time (workers.sandbox); its reaper removes it; () if none
    cgroup_dirs: tuple[str, ...] = ()
    # the process that made the socket listen (the driver), which the kernel names as the
    # peer of every connection to it (SO_PEERCRED): the actor sends the token only to a
    # socket of that process's making; 0: not checked
    listener_pid: int = 0

    @property
    def log(self) -> Path:
        """The harness's stdout and stderr."""
        return Path(self.folder) / LOG


class AdoptedProcess:
    """The part of ``subprocess.Popen`` workers.sandbox.Sandbox uses -- ``pid``, ``poll``,
    ``wait``, ``kill`` -- for a harness another process started and reaps (its exit
    status comes from the reaper's status file)."""

    def __init__(self, pre: Prestarted):
        self.pid = pre.pid
        self._status = Path(pre.folder) / STATUS
        self.returncode: int | None = None

    def _read(self) -> int | None:
        try:
            self.returncode = int(self._status.read_text())
        except (OSError, ValueError):
            pass
        return self.returncode

    def poll(self) -> int | None:
        """The exit code once the harness ended and was reaped; None while it runs."""
        code = self._read()
        if code is None and not pid_alive(self.pid):
            code = self.wait(STATUS_WAIT_S)
        return code

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` s for the exit code; None when the harness is gone but its
        reaper wrote no status (the prestarting process ended too).

        Raises:
            subprocess.TimeoutExpired: the harness still runs after ``timeout`` s.
        """
        deadline = time.monotonic() + (1e9 if timeout is None else timeout)
        gone_at: float | None = None
        while self._read() is None:
            now = time.monotonic()
            if not pid_alive(self.pid):
                gone_at = gone_at or now
                if now - gone_at > STATUS_WAIT_S:
                    return None
            if now > deadline:
                raise subprocess.TimeoutExpired(f"harness {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the harness."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def proof(token: str) -> str:
    """What a prestarted harness answers to show it holds ``token``: HMAC-SHA256 of a fixed
    label under the token (hex), which the socket's other users cannot make."""
    return hmac.new(bytes.fromhex(token), b"kopt harness", hashlib.sha256).hexdigest()


def read_token() -> str:
    """The token a prestarted harness was started with, read once from the pipe whose fd
    :data:`TOKEN_ENV` names (then closed, and the variable dropped); "" without one."""
    fd = os.environ.pop(TOKEN_ENV, "")
    if not fd.isdigit():
        return ""
    try:
        return os.read(int(fd), 256).decode().strip()
    finally:
        os.close(int(fd))


def accept_actor(listener: socket.socket, token: str, tries: int = 16) -> socket.socket:
    """The first connection to ``listener`` that sends ``token`` (a line, within
    ``HANDSHAKE_S`` of its accept); connections that send anything else, or nothing, are
    closed, so a process that reached the socket before the device actor does not take the
    harness over. Without a token, the first connection. Raises OSError after ``tries``
    refused connections."""
    for _ in range(tries):
        conn, _ = listener.accept()
        if not token:
            return conn
        conn.settimeout(HANDSHAKE_S)
        got = b""
        try:
            while not got.endswith(b"\n") and len(got) < 256:
                chunk = conn.recv(256 - len(got))
                if not chunk:
                    break
                got += chunk
        except OSError:  # socket.timeout is one
            got = b""
        if hmac.compare_digest(got.strip(), token.encode()):
            conn.settimeout(None)
            return conn
        conn.close()
    raise OSError(f"{tries} connections to the harness's socket sent no valid token")


def peer_pid(s: socket.socket) -> int:
    """The pid of the process at the other end of connected Unix socket ``s`` as the
    kernel recorded it (``SO_PEERCRED``; for a connection to a listening socket, the process
    that made it listen), 0 where it cannot be read (or lies in another PID namespace)."""
    try:
        pid, _uid, _gid = struct.unpack("3i", s.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except (OSError, AttributeError):  # AttributeError: no SO_PEERCRED on this platform
        return 0
    return pid


def connect(pre: Prestarted) -> tuple[Connection, Connection] | None:
    """Connect to a prestarted harness: (reader, writer) connections over its socket, or
    None when it cannot be reached (it died, or its folder is gone). The connection starts
    with the harness's token (:func:`accept_actor`); the harness's hello then carries its
    :func:`proof`, which workers.sandbox.Sandbox.adopt checks. The token is sent only
    where the socket's listener is the process that made the harness's
    (``pre.listener_pid``, the kernel's ``SO_PEERCRED``: socket(7)): a process that put a
    socket of its own at that path gets nothing, not the token it could then prove."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(Path(pre.folder) / SOCKET))
        if pre.listener_pid and peer_pid(s) != pre.listener_pid:
            s.close()
            return None
        if pre.token:
            s.sendall(pre.token.encode() + b"\n")
    except OSError:
        s.close()
        return None
    fd = s.detach()
    return Connection(fd, writable=False), Connection(os.dup(fd), readable=False)


def harness_env(device: str, key: str, threads: int = 1) -> dict[str, str]:
    """The environment a device actor's own harness would get: for a GPU, Ray's
    ``CUDA_VISIBLE_DEVICES`` (the GPU id ``key``) and ``OMP_NUM_THREADS`` (the actor's one
    CPU, unless set already: Ray's rule); for a CPU device, ``threads`` OpenMP threads and
    no GPU (:data:`workers.reap.NO_GPU`)."""
    env = package_env()
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = key
        env.setdefault("OMP_NUM_THREADS", "1")
    else:
        env.update(NO_GPU, **cpu_env(threads))
    return env


def cpu_env(threads: int) -> dict[str, str]:
    """A CPU device's OpenMP settings for its harnesses: ``threads`` threads
    (``OMP_NUM_THREADS``); on a device of one thread, the threads a candidate starts of its
    own (``num_threads(2)``) wait passively (``OMP_WAIT_POLICY=passive``: asleep, not
    spinning, between and at the end of parallel regions), so that their CPU time is their
    work, which its witness turns bound (workers.witness). Spinning, an honest two-thread
    kernel's idle worker used 3-7 ms of CPU a turn beside calls of 0.4-1.4 ms, and beside a
    loaded machine its turns' wall time (the other measure) grew as much: the README's sweep
    named honest ``NT=2`` candidates `suspect` (docs/verified/2026-12-05-session41.md)."""
    env = {"OMP_NUM_THREADS": str(threads)}
    if threads == 1:
        env["OMP_WAIT_POLICY"] = "passive"
    return env


class Prestarter:
    """Starts one harness per key (a GPU id as Ray will name it, or a CPU device's ordinal)
    in this process, reaps each and writes its exit status.

    Args:
        device: ``cuda`` or ``cpu``.
        keys: one harness each, e.g. ``["0", "1"]``.
        prepare: harness job dicts (the sweep's reference checks, one per dims) whose
            inputs and reference outputs each harness makes before it is taken over
            (workers.harness ``main``), while Ray still starts.
        judges: a second harness per key too (:func:`judge_key`), making nothing ahead:
            the device's judge (workers.device_actor ``DeviceActor.judge``), which never
            loads candidate code. Started on demand, it was 2.5 s of the first contest of
            a cold 140-candidate sweep on an H100 (torch's import, a CUDA context, its
            sets; docs/verified/2026-12-06-session47.md); started here it overlaps Ray's
            start.

    Starting never raises: a harness that cannot start is simply not offered (its device
    actor starts its own).
    """

    def __init__(self, device: str, keys: list[str], prepare: list[dict] | None = None,
                 judges: bool = False):
        self.device = device
        self.prepare = list(prepare or [])
        self.isolation = isolation.available()
        self.started: dict[str, Prestarted] = {}
        self._procs: list[subprocess.Popen] = []  # the reapers (workers.prestart_reaper)
        self._harnesses: dict[int, int] = {}  # reaper's pid: its harness's (a process group)
        self._folders: list[str] = []
        self._threads: list[threading.Thread] = []  # _reap's: done before a folder goes
        try:
            for key in keys:
                both = [(key, True), (judge_key(key), False)]
                for name, ahead in both if judges else both[:1]:
                    pre = self._start(key, ahead)
                    if pre is not None:
                        self.started[name] = pre
        except BaseException:  # Ctrl-C, SIGTERM (kopt.driver.sweep.Terminated): none left behind
            self.close()
            raise

    def _start(self, key: str, ahead: bool = True) -> Prestarted | None:
        """The harness of device ``key`` (``ahead``: making :attr:`prepare`'s jobs before
        it is taken over), or None where it could not start."""
        folder = tempfile.mkdtemp(prefix="kopt-prestart-")
        self._folders.append(folder)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        pid_r, pid_w = os.pipe()
        token = os.urandom(16).hex()
        tok_r, tok_w = os.pipe()  # the token reaches the harness by a pipe: not in its argv
        os.write(tok_w, token.encode())  # or environment, which /proc shows
        os.close(tok_w)
        try:
            listener.bind(str(Path(folder) / SOCKET))
            listener.listen(1)
            harness, scratch = self._harness_cmd(folder, listener.fileno(), ahead)
            cg, why = cgroup.make() if self.isolation.isolated else (None, "not sandboxed")
            limits = cg.limits if cg is not None else f"none: {why}"
            dirs = {cgroup.DIRS_ENV: ":".join(cg.dirs)} if cg is not None else {}
            with open(Path(folder) / LOG, "ab") as log:
                # the harness's parent is a reaper, not this process: a candidate that
                # kills its parent must not kill the driver (workers.prestart_reaper)
                p = subprocess.Popen(
                    [sys.executable, "-m", "workers.prestart_reaper", str(pid_w),
                     str(Path(folder) / STATUS), *harness],
                    pass_fds=(listener.fileno(), pid_w, tok_r), stdin=subprocess.DEVNULL,
                    stdout=log, stderr=log,
                    env={**harness_env(self.device, key), "TMPDIR": str(scratch),
                         **self.isolation.env(), **dirs, TOKEN_ENV: str(tok_r)},
                    start_new_session=True,
                    preexec_fn=_tie() if threading.current_thread() is threading.main_thread()
                    else None)
        except OSError:
            os.close(pid_r)
            os.close(pid_w)
            os.close(tok_r)
            listener.close()
            shutil.rmtree(folder, ignore_errors=True)
            return None
        listener.close()  # the harness holds it now
        os.close(pid_w)
        os.close(tok_r)
        self._procs.append(p)
        t = threading.Thread(target=_reap, args=(p, Path(folder) / STATUS), daemon=True)
        t.start()
        self._threads.append(t)
        with os.fdopen(pid_r, "rb") as f:
            pid = f.readline().strip()  # empty: the reaper died first
        if not pid.isdigit():
            return None
        self._harnesses[p.pid] = int(pid)
        held = cg is not None and cg.holds(int(pid))
        if cg is not None and not held:
            limits = "none: the harness could not join its cgroup"
        return Prestarted(folder, int(pid), self.device, self.isolation, limits, token,
                          cg.dirs if cg is not None and held else (), os.getpid())

    def _harness_cmd(self, folder: str, listen_fd: int, ahead: bool = True
                     ) -> tuple[list[str], Path]:
        """The harness's command line (in its sandbox, listening on ``listen_fd``, making
        the prepared jobs ahead where ``ahead``) and its scratch folder, made in ``folder``.
        Raises OSError."""
        extra = []
        if self.prepare and ahead:
            (Path(folder) / PREPARE).write_bytes(pickle.dumps(self.prepare))
            extra = [str(Path(folder) / PREPARE)]
        scratch = Path(folder) / SCRATCH
        scratch.mkdir()
        return self.isolation.wrap(
            [sys.executable, "-m", "workers.harness", "--listen", str(listen_fd), self.device,
             *extra], str(scratch), gpu=self.device != "cpu"), scratch

    def close(self) -> None:
        """Kill every harness still running (one no actor took over, or one an actor left)
        and remove their folders. Idempotent."""
        for p in self._procs:
            harness = self._harnesses.get(p.pid)
            try:
                if harness is not None and hold.parent(harness) == p.pid:
                    # its reaper reaps it, writes its status and exits; a harness that
                    # ended was reaped already, and its pid may be another process
                    # group's by now (pid_max is 32768 on the CI machine)
                    os.killpg(harness, signal.SIGKILL)
                elif p.poll() is None:  # its harness, unknown, dies with it (PDEATHSIG)
                    p.kill()
            except (ProcessLookupError, PermissionError):
                pass
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for t in self._threads:
            t.join(timeout=2)
        for folder in self._folders:
            shutil.rmtree(folder, ignore_errors=True)
        self._procs, self._harnesses, self._folders, self.started = [], {}, [], {}
        self._threads = []


def _tie() -> object:
    """The reaper's ``preexec_fn``: SIGTERM when the driver dies (the reaper then kills the
    harness and removes its folder, workers.prestart_reaper)."""
    import functools

    return functools.partial(die_with_parent, signal.SIGTERM)


def _reap(p: subprocess.Popen, status: Path) -> None:
    """Wait for the reaper ``p``; when it died without writing the harness's exit status
    (a candidate killed it), write its own: the harness died of the same SIGKILL (its
    parent-death signal)."""
    code = p.wait()
    if not status.exists():
        write_status(str(status), code)
