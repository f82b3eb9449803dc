"""CPU harnesses forked from a process that has already imported them (a zygote).

Starting a harness the plain way (workers.sandbox) runs ``unshare``, ``python -m
workers.jail`` and ``python -m workers.harness``, which imports torch: about 1.5 s of CPU
on this project's 2-core machine, before any job. A sweep restarts its harness after every
fatal job and starts a second one for the closing's outside clock; kopt's test suite starts
hundreds. As Android's zygote and CPython's ``multiprocessing`` fork server do, one process
per owner (:func:`spawn`'s caller) imports the harness module, torch and the compiled
workers/native.c once, holds no job, no candidate code and nothing of a sweep, and forks
each harness from there. The fork enters the same sandbox the plain way builds, with the
same kernel calls: its own session and cgroup (workers.cgroup), then ``unshare(2)`` of the
PID, network, mount, IPC and UTS namespaces; its child is process 1 there
(workers.jail ``first_process``: the mounts, the reaping, its exit code); that process's
child gets the same limits and no privilege (workers.jail ``confine``, and
``clear_capabilities``, what ``execve`` did), closes every file but its pipes and log,
takes the harness's environment and runs workers.harness ``main``. Every process of it dies
with the zygote (``PR_SET_PDEATHSIG``), and the zygote with its owner (its socket closes,
or its parent changes).

What differs from the plain start, and why it does not matter to the judge: the harness's
address layout and the interpreter's hash seed are the zygote's (each harness's own random
draws are seeded from ``os.urandom`` when it starts: workers.harness ``Harness.rng``; Python's
``random`` module is seeded again in the fork), and its command line is the zygote's
(``python -m workers.zygote_server workers.harness``): the harness's host pid is found by
its place in the tree (:meth:`ForkedProcess.harness_pid`).

Used for a CPU device's harness where kopt runs as root (namespaces without a user
namespace) or unsandboxed; a GPU harness (CUDA must not be set up before a fork, and this
start has not run on a GPU host) and a harness in a user namespace start the plain way.
``KOPT_ZYGOTE=0`` turns it off.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import asdict, dataclass

from workers.isolation import WRITABLE_ENV, Isolation
from workers.reap import tie_to_parent

ENV_SWITCH = "KOPT_ZYGOTE"  # "0": every harness starts the plain way
# the environment a zygote is kept for: what a library may read when it is imported (the
# loader's, the interpreter's, OpenMP's, BLAS's, torch's, CUDA's, kopt's own); a harness
# whose environment differs only elsewhere (PYTEST_CURRENT_TEST, a test's target path) is
# forked from the same zygote and given its own environment before it runs
IMPORT_ENV = ("PATH", "HOME", "LANG", "LC_", "LD_", "PYTHON", "OMP_", "GOMP_", "KMP_", "MKL_",
              "OPENBLAS_", "TORCH", "PYTORCH", "CUDA", "NVIDIA", "MALLOC_", "GLIBC_", "KOPT_",
              "CC", "CFLAGS")
START_TIMEOUT_S = 180.0  # for a zygote to import what it holds (as workers.sandbox's)
ANSWER_S = 30.0  # for a zygote to answer a fork request
KEPT = 2  # zygotes one owner keeps (the oldest is closed past it)

WHY_NOT = ""  # why the last start was not forked ("" when it was, or none was asked for)


@dataclass(frozen=True)
class Request:
    """One harness to fork (sent to the zygote as JSON).

    Attributes:
        env: the harness's whole environment.
        scratch: its sandbox's writable folder (an existing folder; a tmpfs is mounted
            there when ``isolated``).
        isolated: enter the namespaces and workers.jail's set-up (else: only the session
            and cgroup, as an unsandboxed plain start).
        keep: folders left writable (workers.isolation ``writable``).
        cgroup_dirs: the cgroup to join, one folder per hierarchy; () for none.
    """

    env: dict[str, str]
    scratch: str
    isolated: bool
    keep: tuple[str, ...] = ()
    cgroup_dirs: tuple[str, ...] = ()


class ForkedProcess:
    """The part of ``subprocess.Popen`` workers.sandbox.Sandbox uses -- ``pid``, ``poll``,
    ``wait``, ``kill``, ``returncode`` -- for a harness a zygote forked and reaps: ``pid``
    is the first process of its sandbox (a session and process-group leader: ``killpg``
    ends it all); its exit code comes over a pipe from the zygote (``-N`` when killed by
    signal N, as Popen's; ``-9`` when the zygote died first: its processes died of
    ``SIGKILL`` with it)."""

    def __init__(self, pid: int, status_fd: int, isolated: bool):
        self.pid = pid
        self.returncode: int | None = None
        self._fd: int | None = status_fd
        self._isolated = isolated
        self._said = b""

    def poll(self) -> int | None:
        """The exit code once the process ended and was reaped; None while it runs."""
        self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` s (None: for ever) for the exit code.

        Raises:
            subprocess.TimeoutExpired: the process still runs after ``timeout`` s.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._read(left)
            if self.returncode is None and left == 0.0:
                raise subprocess.TimeoutExpired(f"harness {self.pid}", timeout or 0.0)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the sandbox's first process (its harness and every process in its
        namespace die with it)."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def harness_pid(self) -> int | None:
        """The harness's host pid: the sandbox's first process's grandchild when isolated
        (it, process 1 of the namespace, the harness), else that process itself; None when
        it cannot be found under /proc. Call it before any job (a candidate's processes
        are children of the harness, so the first child is still the right one)."""
        pid: int | None = self.pid
        for _ in range(2 if self._isolated else 0):
            pid = _first_child(pid) if pid else None
        return pid

    def _read(self, timeout: float | None) -> None:
        """Read the zygote's word on the process, waiting up to ``timeout`` s for it."""
        if self._fd is None:
            return
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return
        chunk = os.read(self._fd, 64)
        if chunk:
            self._said += chunk
            if not self._said.endswith(b"\n"):
                return
        os.close(self._fd)
        self._fd = None
        try:
            self.returncode = int(self._said)
        except ValueError:  # the zygote died without a word: its processes with it
            self.returncode = -signal.SIGKILL

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)


def _first_child(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


class Zygote:
    """One zygote process for harnesses of one import environment (:data:`IMPORT_ENV`).

    Raises RuntimeError (the zygote's last lines) when it does not start."""

    def __init__(self, env: dict[str, str]):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = mine
        self.lock = threading.Lock()
        self.forks: weakref.WeakSet[ForkedProcess] = weakref.WeakSet()
        # its own output (nothing, unless it fails), in a file only it and this object hold
        self.log = tempfile.TemporaryFile(prefix="kopt-zygote-")
        # where it builds workers/native.c: a folder of its own, never a sandbox's scratch
        # (a candidate whose sandbox could write the host's /tmp rewrote native.c there
        # between the copy and the compiler, and ran as root outside any sandbox: red-team
        # round 13; with no writable path the sandbox reaches no host folder at all)
        self.tmp = tempfile.mkdtemp(prefix="kopt-zygote-")
        # only the variables an import may read (the fork takes the harness's whole
        # environment): a fork's /proc/self/environ is this one, which another sandbox's
        # variables must not be in (round 13 read one there)
        own = {k: v for k, v in env.items() if k.startswith(IMPORT_ENV)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.zygote_server", "workers.harness",
             str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=self.log, env={**own, "TMPDIR": self.tmp}, start_new_session=True,
            # SIGTERM, not SIGKILL: it kills its forks and removes self.tmp on the way out
            preexec_fn=tie_to_parent(signal.SIGTERM))
        theirs.close()
        self.sock.settimeout(START_TIMEOUT_S)
        try:
            ready = self.sock.recv(64)
        except OSError:
            ready = b""
        if ready != b"ready":
            self.close()
            self.log.seek(0)
            said = self.log.read().decode(errors="replace").strip()[-1500:]
            raise RuntimeError(f"the harness zygote did not start: {said}")

    def fork(self, req: Request, fds: tuple[int, int, int]) -> ForkedProcess:
        """Fork a harness for ``req`` with ``fds`` (its pipe's read end, its answer
        pipe's write end, its log opened for appending; they stay the caller's to close).
        Raises OSError or RuntimeError when the zygote does not answer."""
        status_r, status_w = os.pipe()
        try:
            with self.lock:
                self.sock.settimeout(ANSWER_S)
                socket.send_fds(self.sock, [json.dumps(asdict(req)).encode()],
                                [*fds, status_w])
                got = json.loads(self.sock.recv(256) or b"{}")
        except (OSError, ValueError):
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        if not isinstance(got.get("pid"), int):
            os.close(status_r)
            raise RuntimeError(f"the harness zygote did not fork: {got.get('error', got)}")
        proc = ForkedProcess(got["pid"], status_r, req.isolated)
        self.forks.add(proc)
        return proc

    def busy(self) -> bool:
        """Whether a harness it forked still runs (closing it would kill that harness)."""
        return any(p.poll() is None for p in list(self.forks))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """End the zygote (its harnesses die with it)."""
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


_ZYGOTES: dict[tuple, Zygote] = {}
_LOCK = threading.Lock()


def pids() -> set[int]:
    """The process ids of this process's zygotes (their forks carry the same environment
    block and command line, but only a fork is ever in a sandbox)."""
    with _LOCK:
        return {z.proc.pid for z in _ZYGOTES.values()}


def describe(iso: Isolation) -> str:
    """How this host starts a harness under ``iso``, in one line (for ``kopt env``)."""
    why = why_not("cpu", iso)
    cpu = f"plain ({why})" if why else "forked from a zygote that imported torch once"
    return f"CPU: {cpu}; GPU: plain (python -m workers.harness in its sandbox)"


def why_not(device: str, iso: Isolation) -> str:
    """Why a harness of ``device`` under ``iso`` (workers.isolation) is not forked from a
    zygote here; "" when it is."""
    if os.environ.get(ENV_SWITCH, "") == "0":
        return f"{ENV_SWITCH}=0 is set"
    if device != "cpu":
        return "a GPU harness starts the plain way (CUDA is set up after the start)"
    if iso.kind not in ("none", "namespaces"):
        return f"a harness under {iso.kind} starts the plain way"
    if iso.writable:  # a zygote's files are the host's: none may be a sandbox's to write
        return (f"{WRITABLE_ENV} is set (a sandbox writes host folders; a zygote works "
                "outside any sandbox)")
    return ""


def spawn(req: Request, fds: tuple[int, int, int]) -> ForkedProcess | None:
    """Fork a harness for ``req`` (:meth:`Zygote.fork`) from this process's zygote for its
    import environment, started when there is none; None when it
    cannot be (the reason in :data:`WHY_NOT`): the caller then starts it the plain way."""
    global WHY_NOT
    key = tuple(sorted((k, v) for k, v in req.env.items() if k.startswith(IMPORT_ENV)))
    z = None
    try:
        with _LOCK:
            z = _ZYGOTES.pop(key, None)
            if z is None or not z.alive():
                z = Zygote(req.env)
            _ZYGOTES[key] = z  # the last used last
            _evict()
        got = z.fork(req, fds)
    except (OSError, RuntimeError, ValueError) as e:
        WHY_NOT = f"{e}"[:300]
        if z is not None:  # one that did not answer in time may answer late: never asked again
            with _LOCK:
                if _ZYGOTES.get(key) is z:
                    del _ZYGOTES[key]
            z.close()
        return None
    WHY_NOT = ""
    return got


def close_idle() -> None:
    """Close every zygote of this process whose harnesses have all ended, and remove their
    folders: a device actor's, once its sandboxes are closed. Left to its parent's death, a
    Ray worker's zygote got SIGKILL (Ray kills a worker's child processes when it exits),
    ran none of its last steps, and its empty ``kopt-zygote-`` folder stayed in /tmp after
    every sweep. A zygote with a running harness is kept (closing it would kill that
    harness: another sandbox of the same process)."""
    with _LOCK:
        idle = [k for k, z in _ZYGOTES.items() if not z.busy()]
        zs = [_ZYGOTES.pop(k) for k in idle]
    for z in zs:
        z.close()


def _evict() -> None:
    """Close the least recently used zygotes past :data:`KEPT` whose harnesses have all
    ended (one with a running harness is kept: closing it would kill that harness)."""
    idle = [k for k, z in list(_ZYGOTES.items())[:-1] if not z.busy()]
    for k in idle[:max(0, len(_ZYGOTES) - KEPT)]:
        _ZYGOTES.pop(k).close()


