"""The `kopt` command's front (a warm first result within a second): ``kopt sweep
--queue`` hands itself to a driver process the local kopt service keeps ready
(kopt.cli.launchpad), instead of starting an interpreter that imports Ray, pyarrow, DuckDB and
kopt (0.7 s on an H200 host before its first line of work, 2026-12-01).

This module imports nothing beyond the standard library. :func:`entry` is the console
script (and ``python -m kopt``): for ``kopt sweep ... --queue`` with the service recorded in
``$KOPT_CACHE/service.json`` (no ``--address``/``--cluster``) it connects to the service's
launch socket, passes its arguments, working folder, environment and its stdin, stdout and
stderr (``SCM_RIGHTS``: the driver writes to this terminal itself, colours and progress
bars included), forwards SIGINT, SIGTERM and SIGHUP, and exits with the driver's exit
status. Anything else -- another command, no record, no socket, a driver that declines
(another interpreter, kopt package or import-time environment than the service's),
``KOPT_FRONT=0`` -- runs the command in this process (kopt.cli.main), as before.

Wire format, both ways: a 4-byte big-endian length, then that many bytes of JSON.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import struct
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from kopt.util.phases import start_epoch  # standard library only

HANDSHAKE_S = 30.0  # a driver process still importing (the spare just taken) answers by then
MAX_MESSAGE = 1 << 24  # bytes: a request carries the environment; replies are small
# the resource limits (`ulimit`) a front hands to its driver with its niceness (`nice`):
# the sweep's driver runs under them as the command in one process would
RLIMITS = ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE",
           "RLIMIT_MEMLOCK", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_RSS", "RLIMIT_STACK")
# seconds a front whose driver went away waits for the launchpad (one step a second) to
# record the signal that killed it
EXIT_WAIT_S = 3.0


def send(sock: socket.socket, msg: dict[str, Any], fds: list[int] | None = None) -> None:
    """Send one message (length-prefixed JSON), with ``fds`` attached when given."""
    data = json.dumps(msg).encode()
    framed = struct.pack(">I", len(data)) + data
    if fds:
        socket.send_fds(sock, [framed], fds)
    else:
        sock.sendall(framed)


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv(sock: socket.socket) -> dict[str, Any] | None:
    """One message, or None at end of stream (or a malformed frame)."""
    head = _exactly(sock, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    body = _exactly(sock, n) if 0 < n <= MAX_MESSAGE else None
    try:
        msg = json.loads(body) if body is not None else None
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def record_path() -> Path:
    """Where ``kopt serve start`` records the service (kopt.run.service.state_path)."""
    base = os.environ.get("KOPT_CACHE") or os.path.join(Path.home(), ".cache", "kopt")
    return Path(base) / "service.json"


QUEUED = ("sweep", "submit")  # the commands a ready driver runs (with --queue)


def launch_socket(argv: list[str]) -> str | None:
    """The recorded service's launch socket when ``argv`` is a ``sweep --queue`` or a
    ``submit --queue`` on the recorded service (no ``--address``, ``--cluster`` or
    ``--help``) and the front is not switched off; else None."""
    if os.environ.get("KOPT_FRONT") == "0" or not argv or argv[0] not in QUEUED:
        return None
    flags = {a.split("=", 1)[0] for a in argv[1:] if a.startswith("--")}
    if "--queue" not in flags or flags & {"--address", "--cluster", "--help"}:
        return None
    try:
        rec = json.loads(record_path().read_text())
    except (OSError, ValueError):
        return None  # the full command reads it again and says what is wrong
    path = rec.get("launch") if isinstance(rec, dict) else None
    if not isinstance(path, str) or not path:
        return None
    try:  # only a folder of this user's that nobody else may write (kopt.run.launchpad.start)
        st = os.stat(os.path.dirname(path))
    except OSError:
        return None
    return path if st.st_uid == os.getuid() and not st.st_mode & 0o022 else None


def request(argv: list[str]) -> dict[str, Any]:
    """What a driver needs to run ``kopt ARGV`` as this process would."""
    import kopt

    mask = os.umask(0o077)  # read it: only by setting it (this process has one thread)
    os.umask(mask)
    return {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "umask": mask,
            "exe": sys.executable, "kopt": str(Path(kopt.__file__).resolve().parent),
            "started": start_epoch(), "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "rlimits": {n: list(resource.getrlimit(getattr(resource, n)))
                        for n in RLIMITS if hasattr(resource, n)}}


def _stdio_open() -> bool:
    """Whether descriptors 0, 1 and 2 are open: a closed one (``kopt ... >&-``) would be
    the launch socket itself, handed to the driver as its stdin, stdout or stderr (its
    output then garbling the connection), so the command runs here as before."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            return False
    return True


def hand_over(path: str, argv: list[str]) -> int | None:
    """Run ``kopt ARGV`` in the service's driver at launch socket ``path``; its exit status,
    or None when no driver took it (nothing ran: the caller runs it here)."""
    if not _stdio_open():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(HANDSHAKE_S)
        sock.connect(path)
        send(sock, request(argv), [0, 1, 2])
        reply = recv(sock)
        if not reply or not reply.get("ok"):
            if reply and reply.get("why"):  # say why the sweep runs here, and slower
                print(f"note: the kopt service's ready driver did not take this sweep "
                      f"({reply['why']}); it runs in this process", file=sys.stderr)
            return None
        send(sock, {"go": True})
    except OSError:  # no socket, refused, timed out: the driver never started the command
        sock.close()
        return None
    pid = reply.get("pid")
    if not isinstance(pid, int) or pid <= 1:
        pid = None
    return _follow(sock, str(exit_file(path, pid)) if pid else None, pid)


def _follow(sock: socket.socket, exit_path: str | None, pid: int | None = None) -> int:
    """Forward signals to the driver until it sends its exit status; not those this process
    ignores (``nohup kopt sweep ...``: a hangup must not stop the sweep, as it does not stop
    one in this process; SIGINT of a background job of a script). Ctrl-Z (SIGTSTP) stops
    the driver ``pid`` with this process, and ``fg``/``bg`` go on with both
    (:func:`_suspend`). A driver that goes away without an exit status: ended by the signal
    the launchpad recorded at ``exit_path`` (kopt.cli.launchpad.exit_file), else status 1."""
    sock.settimeout(None)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, partial(_forward, sock))
    if pid and signal.getsignal(signal.SIGTSTP) == signal.SIG_DFL:
        signal.signal(signal.SIGTSTP, partial(_suspend, pid))
    while True:
        try:
            msg = recv(sock)
        except InterruptedError:
            continue
        except OSError:  # reset by a driver that died with our messages unread
            msg = None
        if msg is None:
            return _gone(exit_path)
        if "exit" in msg:
            return int(msg["exit"])
        if isinstance(msg.get("killed"), int):  # a signal the driver does not handle
            _die_by(msg["killed"])


def exit_file(socket_path: str, pid: int) -> Path:
    """Where the launchpad of ``socket_path`` (kopt.cli.launchpad) records that its driver
    ``pid`` was killed by a signal: minus that signal (``Popen.returncode``), as text. A
    front whose driver went away without sending its exit status reads it there: a driver
    the kernel's out-of-memory killer ended is then reported as killed by SIGKILL, as the
    command in one process would be."""
    return Path(f"{socket_path}.exit-{pid}")


def _gone(exit_path: str | None) -> int:
    """The driver went away without an exit status: wait up to :data:`EXIT_WAIT_S` for the
    launchpad to record the signal that killed it and end this process by that signal (the
    out-of-memory killer's SIGKILL: status 137 in a shell, as the command in one process);
    else status 1."""
    signum, deadline = None, time.monotonic() + EXIT_WAIT_S
    while exit_path and signum is None and time.monotonic() < deadline:
        try:
            signum = -int(Path(exit_path).read_text())
            os.unlink(exit_path)
        except (OSError, ValueError):
            time.sleep(0.05)
    known = bool(signum) and signum in signal.valid_signals()
    how = "ended without an exit status (killed?)"
    if known:
        name = next((s.name for s in signal.Signals if s == signum), f"signal {signum}")
        how = f"was killed by {name}"
        if signum == signal.SIGKILL:
            how += " (out of memory?)"
    print(f"kopt: the kopt service's driver process of this sweep {how}; what it measured is "
          "in the store (`kopt query`)", file=sys.stderr)
    if known:
        _die_by(signum)
    return 1


def _die_by(signum: int) -> None:
    """End this process by ``signum`` (its default action), as the driver it forwarded that
    signal to ends: the exit status a shell shows is then what the command in one process
    gives (129 for SIGHUP)."""
    sys.stdout.flush()
    try:
        signal.signal(signum, signal.SIG_DFL)
    except (OSError, ValueError):  # SIGKILL, SIGSTOP: no handler to reset
        pass
    os.kill(os.getpid(), signum)


def _suspend(pid: int, _signum: int = 0, _frame: Any = None) -> None:
    """Ctrl-Z: stop the driver ``pid``, then this process, each with SIGSTOP (the kernel
    drops SIGTSTP in a process group without a parent in its session, as the driver's);
    once continued (``fg``, ``bg``), continue the driver. As Ctrl-Z stops a sweep run in
    one process."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except OSError:  # it has just ended
        pass
    os.kill(os.getpid(), signal.SIGSTOP)  # stops here until SIGCONT (SIGTSTP may be dropped)
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass


def _forward(sock: socket.socket, signum: int, _frame: Any = None) -> None:
    try:
        send(sock, {"signal": int(signum)})
    except OSError:
        pass


def entry() -> None:
    """The `kopt` console script: a queued sweep to the service's driver, else kopt.cli.main."""
    argv = sys.argv[1:]
    path = launch_socket(argv)
    code = hand_over(path, argv) if path else None
    if code is not None:
        sys.stdout.flush()
        os._exit(code)
    try:
        from kopt.cli.main import entry as full
    except KeyboardInterrupt:  # Ctrl-C while Ray, pyarrow and DuckDB import: no traceback
        print("kopt: interrupted (Ctrl-C) before the command started; nothing ran",
              file=sys.stderr)
        sys.exit(130)
    full()
