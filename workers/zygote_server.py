"""The zygote process of workers.zygote: forks CPU harnesses from an interpreter that has
imported workers.harness (torch with it) and built workers/native.c once.

``python -m workers.zygote_server workers.harness FD`` (started by workers.zygote
``Zygote``; the second word names what it holds, for whoever reads its command line)
serves fork requests read on the Unix socket ``FD``. Each fork enters the sandbox the plain
start builds (workers.zygote's docstring says how, and what differs); the zygote reaps it
and writes its exit code to the pipe that came with the request.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import random
import select
import shutil
import signal
import socket
import sys
import tempfile
import traceback

import torch

import workers.harness as harness  # what the forks share: torch, kopt's harness
from workers import cgroup, jail, native
from workers.reap import die_with_parent
from workers.zygote import Request

_CLONE = {"pid": 0x20000000, "net": 0x40000000, "mount": 0x00020000, "ipc": 0x08000000,
          "uts": 0x04000000}  # <linux/sched.h>
_FD_R, _FD_W = 3, 4  # the harness's pipe ends, where its fork puts them
_libc = ctypes.CDLL(None, use_errno=True)


def serve(fd: int) -> None:
    """The zygote: import the harness (and build workers/native.c), say ``ready`` on socket
    ``fd``, then fork a harness for each request read there (:func:`_forked` in the child)
    and answer its pid; write each child's exit code to its status pipe once reaped; end,
    killing every child, when the socket closes or the parent changes."""
    native.library()
    sock = socket.socket(fileno=fd)
    parent = os.getppid()
    wake_r, wake_w = os.pipe()
    for w in (wake_r, wake_w):
        os.set_blocking(w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _ignore)
    children: dict[int, int] = {}  # pid -> its status pipe's write end
    # its parent's death reaches it as SIGTERM (workers.zygote): it ends as when its
    # socket closes, its children killed and its own folder removed
    signal.signal(signal.SIGTERM, _ended)
    try:
        sock.sendall(b"ready")
        while os.getppid() == parent:
            ready, _, _ = select.select([sock, wake_r], [], [], 1.0)
            if sock in ready and not _one_request(sock, children, (wake_r, wake_w)):
                break
            if wake_r in ready:
                _drain(wake_r)
            _reap(children, block=False)
    finally:
        # ending already (its socket closed, or the signal came): a SIGTERM now must not cut
        # this short (the socket's end and the signal both come of the parent's death); the
        # flag first, a store no signal handler runs before (the call after it may be one)
        _ENDING[0] = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap(children, block=True)
        _remove_own_folder()


_ENDING = [False]  # serve's loop has ended: its last steps run whatever comes


def _ended(_sig: int, _frame: object) -> None:
    """SIGTERM (its parent died: workers.zygote ties it so): end :func:`serve`'s loop,
    unless it has ended already."""
    if not _ENDING[0]:
        raise SystemExit(0)


def _remove_own_folder() -> None:
    """Remove the folder workers.zygote made for this zygote (its ``TMPDIR``, where it
    built workers/native.c), a ``kopt-zygote-`` folder: left behind, one was found in /tmp
    after every sweep."""
    tmp = os.environ.get("TMPDIR", "")
    if os.path.basename(tmp).startswith("kopt-zygote-"):
        shutil.rmtree(tmp, ignore_errors=True)


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
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the zygote's own ending is not its
        os.setsid()
        if req.cgroup_dirs:  # a failed join is the starter's to see (Cgroup.holds)
            cgroup.preexec(cgroup.Cgroup(req.cgroup_dirs, ""), None)()
        die_with_parent(signal.SIGKILL)  # dies with the zygote
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


def _unshare_and_wait(req: Request) -> int:
    """Enter new namespaces, fork process 1 there and wait for it: its exit code, or the
    signal that killed it raised here too (util-linux ``unshare --fork`` does the same)."""
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
        die_with_parent(signal.SIGKILL)  # unshare --kill-child
        keep = tuple(os.path.realpath(k) for k in req.keep)  # as workers.jail's main does
        os._exit(jail.first_process(os.path.realpath(req.scratch), keep, False, False,
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
    code = 0
    try:
        os.environ.clear()
        os.environ.update(req.env)
        tempfile.tempdir = None  # TMPDIR is the scratch folder now
        random.seed()  # each as a new interpreter's: the zygote's were the same in every fork
        torch.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
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


if __name__ == "__main__":  # python -m workers.zygote_server workers.harness FD
    serve(int(sys.argv[2]))
