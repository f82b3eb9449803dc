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
(``python -m workers.zygote workers.harness``): the harness's host pid is found by its place
in the tree (:meth:`ForkedProcess.harness_pid`).

Used for a CPU device's harness where kopt runs as root (namespaces without a user
namespace) or unsandboxed; a GPU harness (CUDA must not be set up before a fork, and this
start has not run on a GPU host) and a harness in a user namespace start the plain way.
``KOPT_ZYGOTE=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from workers.reap import PR_SET_PDEATHSIG

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
_CLONE = {"pid": 0x20000000, "net": 0x40000000, "mount": 0x00020000, "ipc": 0x08000000,
          "uts": 0x04000000}  # <linux/sched.h>
_FD_R, _FD_W = 3, 4  # the harness's pipe ends, where its fork puts them
_libc = ctypes.CDLL(None, use_errno=True)

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
        # its own output (nothing, unless it fails), in a file only it and this object hold
        self.log = tempfile.TemporaryFile(prefix="kopt-zygote-")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.zygote", "workers.harness", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=self.log, env=env, start_new_session=True, preexec_fn=_tie_to_starter())
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
        return ForkedProcess(got["pid"], status_r, req.isolated)

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


_ZYGOTES: dict[tuple, Zygote] = {}
_LOCK = threading.Lock()


def pids() -> set[int]:
    """The process ids of this process's zygotes (their forks carry the same environment
    block and command line, but only a fork is ever in a sandbox)."""
    with _LOCK:
        return {z.proc.pid for z in _ZYGOTES.values()}


def why_not(device: str, isolation_kind: str) -> str:
    """Why a harness of ``device`` under ``isolation_kind`` (workers.isolation) is not forked
    from a zygote here; "" when it is."""
    if os.environ.get(ENV_SWITCH, "") == "0":
        return f"{ENV_SWITCH}=0 is set"
    if device != "cpu":
        return "a GPU harness starts the plain way (CUDA is set up after the start)"
    if isolation_kind not in ("none", "namespaces"):
        return f"a harness under {isolation_kind} starts the plain way"
    return ""


def spawn(req: Request, fds: tuple[int, int, int]) -> ForkedProcess | None:
    """Fork a harness for ``req`` (:meth:`Zygote.fork`) from this process's zygote for its
    import environment, started when there is none; None when it
    cannot be (the reason in :data:`WHY_NOT`): the caller then starts it the plain way."""
    global WHY_NOT
    key = tuple(sorted((k, v) for k, v in req.env.items() if k.startswith(IMPORT_ENV)))
    try:
        with _LOCK:
            z = _ZYGOTES.pop(key, None)
            if z is None or not z.alive():
                z = Zygote(req.env)
            _ZYGOTES[key] = z  # the last used last
            while len(_ZYGOTES) > KEPT:
                _ZYGOTES.pop(next(iter(_ZYGOTES))).close()
        got = z.fork(req, fds)
    except (OSError, RuntimeError, ValueError) as e:
        WHY_NOT = f"{e}"[:300]
        return None
    WHY_NOT = ""
    return got


def _tie_to_starter() -> Any:
    """The zygote's ``preexec_fn``: SIGKILL when the process that started it dies, set only
    when starting from the main thread (the parent-death signal follows the starting
    thread); it also ends once its socket closes or its parent changes."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return _die_with_parent


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# ---- the zygote process ------------------------------------------------------------------

def serve(fd: int) -> None:
    """The zygote: import the harness (and build workers/native.c), say ``ready`` on socket
    ``fd``, then fork a harness for each request read there (:func:`_forked` in the child)
    and answer its pid; write each child's exit code to its status pipe once reaped; end,
    killing every child, when the socket closes or the parent changes."""
    import workers.harness  # noqa: F401 -- what the forks share: torch, kopt's harness
    from workers import native

    native.library()
    sock = socket.socket(fileno=fd)
    parent = os.getppid()
    wake_r, wake_w = os.pipe()
    for w in (wake_r, wake_w):
        os.set_blocking(w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)
    children: dict[int, int] = {}  # pid -> its status pipe's write end
    sock.sendall(b"ready")
    while os.getppid() == parent:
        ready, _, _ = select.select([sock, wake_r], [], [], 1.0)
        if sock in ready and not _one_request(sock, children, (wake_r, wake_w)):
            break
        if wake_r in ready:
            _drain(wake_r)
        _reap(children, block=False)
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    _reap(children, block=True)


def _ignore(_sig: int, _frame: object) -> None:
    """SIGCHLD: only wakes the zygote's select (``signal.set_wakeup_fd``)."""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _one_request(sock: socket.socket, children: dict[int, int],
                 wake: tuple[int, int]) -> bool:
    """Read one request and fork its harness; False when the socket closed."""
    try:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
    except OSError:
        return False
    if not msg:
        return False
    try:
        raw = json.loads(msg)
        req = Request(**{**raw, "keep": tuple(raw.get("keep", ())),
                         "cgroup_dirs": tuple(raw.get("cgroup_dirs", ()))})
        if len(fds) != 4:
            raise ValueError(f"{len(fds)} files came with the request, not 4")
    except (TypeError, ValueError) as e:
        for f in fds:
            os.close(f)
        sock.sendall(json.dumps({"error": f"a bad request: {e}"}).encode())
        return True
    sync_r, sync_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as e:
        pid, why = -1, f"fork failed: {e}"
    if pid == 0:
        os.close(sync_r)
        _forked(req, fds, sock, wake, sync_w)
    os.close(sync_w)
    os.read(sync_r, 1)  # EOF once the child is in its session and cgroup (or gone)
    os.close(sync_r)
    for f in fds[:3]:
        os.close(f)
    if pid < 0:
        os.close(fds[3])
        sock.sendall(json.dumps({"error": why}).encode())
        return True
    children[pid] = fds[3]
    sock.sendall(json.dumps({"pid": pid}).encode())
    return True


def _reap(children: dict[int, int], block: bool) -> None:
    """Reap every child that ended (all of them with ``block``), writing each one's exit
    code (Popen's form) to its status pipe."""
    while children:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = children.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, f"{os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            os.close(fd)


def _forked(req: Request, fds: list[int], sock: socket.socket, wake: tuple[int, int],
            sync: int) -> None:
    """The fork's first process: the plain start's ``unshare`` (or, unsandboxed, the
    harness itself); ``sync`` is closed once it is in its own session and cgroup (the
    zygote answers then, as Popen returns once its ``preexec_fn`` ran). Never returns."""
    code = 1
    try:
        sock.detach()  # the zygote's: closed below by number, never by this object
        os.close(fds[3])  # the status pipe is the zygote's to write
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        _join(req.cgroup_dirs)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with the zygote
        os.close(sync)
        _own_files(fds[0], fds[1], fds[2])
        os.environ.clear()
        os.environ.update(req.env)
        if not req.isolated:
            _run_harness(req)
        code = _unshare_and_wait(req)
    except BaseException:  # noqa: BLE001 -- a fork must never return to the zygote's loop
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(code)


def _own_files(rfd: int, wfd: int, log: int) -> None:
    """Stdin from /dev/null, stdout and stderr to the log, the pipe ends at 3 and 4, and
    no other file open (the zygote's socket, other harnesses' status pipes)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    hi = max(rfd, wfd, log, null) + 1
    os.dup2(rfd, hi)
    os.dup2(wfd, hi + 1)
    os.dup2(hi, _FD_R)
    os.dup2(hi + 1, _FD_W)
    os.closerange(_FD_W + 1, os.sysconf("SC_OPEN_MAX"))


def _join(dirs: tuple[str, ...]) -> None:
    """Join the cgroup (a failed join is the starter's to see: workers.cgroup ``holds``)."""
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write("0")
        except OSError:
            pass


def _unshare_and_wait(req: Request) -> int:
    """Enter new namespaces, fork process 1 there and wait for it: its exit code, or the
    signal that killed it raised here too (util-linux ``unshare --fork`` does the same)."""
    from workers import jail

    flags = 0
    for v in _CLONE.values():
        flags |= v
    if _libc.unshare(flags) != 0:
        print(f"kopt sandbox: unshare failed: {os.strerror(ctypes.get_errno())}",
              file=sys.stderr, flush=True)
        return jail.SETUP_FAILED
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    first = os.fork()
    if first == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # unshare --kill-child
        os._exit(jail.first_process(os.path.realpath(req.scratch), req.keep, False, False,
                                    functools.partial(_fork_harness, req)))
    while True:
        try:
            _, status = os.waitpid(first, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status) & 0xFF


def _fork_harness(req: Request) -> int:
    """Process 1's child: confined as workers.jail's ``_start`` confines it, then the
    harness. Returns its pid (in process 1)."""
    pid = os.fork()
    if pid == 0:
        try:
            from workers import jail

            jail.confine()
            jail.clear_capabilities()
        except BaseException as e:  # noqa: BLE001 -- a child must never return here
            print(f"kopt sandbox: cannot start the harness: {e}", file=sys.stderr, flush=True)
            os._exit(127)
        _run_harness(req)
    return pid


def _run_harness(req: Request) -> None:
    """Run workers.harness ``main`` on fds 3 and 4 with the harness's environment and exit
    as ``python -m workers.harness`` would. Never returns."""
    import workers.harness as harness

    code = 0
    try:
        os.environ.clear()
        os.environ.update(req.env)
        tempfile.tempdir = None  # TMPDIR is the scratch folder now
        random.seed()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a new interpreter
        harness.main(_FD_R, _FD_W, "cpu")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 -- as the interpreter would: printed, exit 1
        traceback.print_exc()
        code = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":  # python -m workers.zygote workers.harness FD
    serve(int(sys.argv[2]))
