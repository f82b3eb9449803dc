"""The kopt service's launchpad: `kopt sweep --queue` drivers kept ready, so that
a queued sweep's first result does not wait for an interpreter to start and import Ray,
pyarrow, DuckDB and kopt (0.7 s on an H200 host, 2026-12-01; the target is a first result
within 1 s of the command).

``kopt serve start`` (with its own Ray head on this machine) starts ``python -m
kopt.cli.launchpad SOCKET HEAD_PID`` in a session of its own. It listens on the Unix socket
SOCKET (in a folder of its own, mode 0700, :func:`start`) and keeps one *spare*: a process that has
imported what a sweep's driver imports (:data:`PRELOAD`) and waits in ``accept``. A
``kopt sweep --queue`` front (kopt.cli.front) connects; the spare takes it, tells the launchpad
(which starts the next spare at once), leaves the head's process group (``setsid``: a
driver outlives ``kopt serve stop`` as a driver in the user's own process does), checks the
request (same user by ``SO_PEERCRED``; same interpreter, kopt package and import-time
environment, :func:`mismatch`; resource limits and niceness it can take without
privileges), takes the front's working folder, environment, umask, resource limits,
niceness and stdin, stdout, stderr, and runs the command as kopt.cli.main would, its phases
counted from the front's start. The front forwards its signals; the driver's exit status
goes back to it. A front that goes away (killed) sends the driver SIGTERM: the sweep stops
as on Ctrl-C, everything measured stored.

Not carried: the front's cgroup (a `systemd-run --scope` memory cap, say) -- the driver stays
in the service's; run such a sweep without ``--queue``, or with ``KOPT_FRONT=0``.

The launchpad writes ``SOCKET.json`` (its pid, the spare's pid, sweeps handed over, spares
that died) for ``kopt serve status``, and exits when the head's process is gone.
"""

from __future__ import annotations

import functools
import importlib
import io
import json
import os
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from kopt.cli.front import MAX_MESSAGE, exit_file, recv, send
from kopt.run.launchpad import IGNORED_ENV, KOPT_DIR, own_folder
from workers.reap import die_with_parent, pid_alive

# what `kopt sweep --queue` (and `submit --queue`) imports before its first line of work
# (kopt.cli.main itself is imported after the front's stdout and stderr are in place: it
# sizes its consoles on them)
PRELOAD = ("ray", "pyarrow", "pyarrow.parquet", "pyarrow.dataset", "duckdb", "pydantic",
           "pydantic.v1", "yaml", "click", "numpy",
           "rich.console", "rich.progress", "rich.table", "kopt.driver.sweep", "kopt.run.service",
           "kopt.store.database", "kopt.store.select", "kopt.store.files", "kopt.core.spec",
           "kopt.run.callbacks", "kopt.cli.streams", "kopt.strategy.base", "kopt.tools.submit")
# environment read when those modules are imported: a front whose values differ is declined
# (it runs the command itself); Ray's token is set per sweep from the service record. kopt's
# own variables are read when used, but for IMPORT_VARS (tests/test_queue.py checks that no
# other KOPT_ variable is read at import time)
IMPORT_ENV = ("PYTHON", "RAY_", "LD_", "VIRTUAL_ENV", "CONDA_PREFIX")
IMPORT_VARS = ("KOPT_COMPILE_TIMEOUT_S", "KOPT_COMPILE_MEM_GB")  # workers.build's caps
GO_WAIT_S = 10.0  # a front that does not confirm by then gave up: nothing runs
SPARE_FAILURES = 5  # spares that die before taking a front, in a row, before giving up


def import_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` that :data:`PRELOAD`'s imports read (:data:`IMPORT_ENV`
    prefixes and :data:`IMPORT_VARS`, less :data:`IGNORED_ENV`)."""
    return {k: v for k, v in env.items()
            if (k.startswith(IMPORT_ENV) or k in IMPORT_VARS) and k not in IGNORED_ENV}


def mismatch(req: dict[str, Any], env: dict[str, str]) -> str:
    """Why a spare started with environment ``env`` cannot run the front's request ``req``
    as the front's own process would ("" when it can)."""
    if req.get("exe") != sys.executable:
        return f"the front runs {req.get('exe')}, the service's drivers {sys.executable}"
    if req.get("kopt") != KOPT_DIR:
        return f"the front's kopt is {req.get('kopt')}, the service's {KOPT_DIR}"
    theirs = req.get("env")
    if not isinstance(theirs, dict):
        return "the request has no environment"
    mine, other = import_env(env), import_env(theirs)
    differ = sorted(k for k in set(mine) | set(other) if mine.get(k) != other.get(k))
    if differ:
        return "the environment differs in " + ", ".join(differ)
    return _limits_problem(req)


def _above(theirs: int, mine: int) -> bool:
    """Whether limit ``theirs`` is above ``mine`` (RLIM_INFINITY above every number)."""
    inf = resource.RLIM_INFINITY
    return mine != inf and (theirs == inf or theirs > mine)


def _limits_problem(req: dict[str, Any]) -> str:
    """Why this driver cannot take the front's niceness and resource limits (``nice``,
    ``rlimits``: kopt.cli.front.request) -- lowering either needs privileges -- ("" when it can:
    :func:`_take_limits`)."""
    nice, own = req.get("nice"), os.getpriority(os.PRIO_PROCESS, 0)
    if isinstance(nice, int) and nice < own:
        return f"the front runs at nice {nice}, below the service's {own}"
    lims = req.get("rlimits")
    for name, pair in (lims.items() if isinstance(lims, dict) else ()):
        if not hasattr(resource, name) or not (isinstance(pair, list) and len(pair) == 2
                                                and all(isinstance(x, int) for x in pair)):
            return f"the request's resource limit {name} is not one"
        if _above(pair[1], resource.getrlimit(getattr(resource, name))[1]):
            return f"the front's hard limit {name} ({pair[1]}) is above the service's"
    return ""


def _take_limits(req: dict[str, Any]) -> None:
    """Run under the front's resource limits and niceness (checked by
    :func:`_limits_problem`), as its own process would. Raises OSError / ValueError when
    the kernel refuses one."""
    for name, (soft, hard) in (req.get("rlimits") or {}).items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    if isinstance(req.get("nice"), int):
        os.setpriority(os.PRIO_PROCESS, 0, req["nice"])


# -- the spare ---------------------------------------------------------------------------
def _recv_request(conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """The front's request and the descriptors that came with it."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    except OSError:  # timed out (a front that connected and sent nothing), reset
        return None, []
    if len(data) < 4:
        return None, fds
    (n,) = struct.unpack(">I", data[:4])
    body = data[4:]
    while len(body) < n <= MAX_MESSAGE:
        try:
            more = conn.recv(n - len(body))
        except OSError:
            more = b""
        if not more:
            return None, fds
        body += more
    if n > MAX_MESSAGE:
        return None, fds
    try:
        req = json.loads(body[:n])
    except ValueError:
        return None, fds
    return (req if isinstance(req, dict) else None), fds


def _same_user(conn: socket.socket) -> bool:
    cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", cred)
    return uid == os.getuid()


def _take_streams(fds: list[int]) -> None:
    """Make the front's stdin, stdout and stderr this process's (descriptors 0, 1, 2 and
    Python's text streams on them; line-buffered on a terminal, as Python's own)."""
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    enc = sys.stdout.encoding or "utf-8"
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=enc)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=enc,
                                  line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=enc,
                                  errors="backslashreplace", line_buffering=True)


def _relay_signals(conn: socket.socket) -> None:
    """Deliver the front's forwarded signals to this process; SIGTERM when it is gone."""
    while True:
        try:
            msg = recv(conn)
        except OSError:
            msg = None
        if msg is None:
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if isinstance(msg.get("signal"), int):
            _deliver(conn, msg["signal"])


def _deliver(conn: socket.socket, signum: int) -> None:
    """Signal ``signum`` (forwarded by the front) to this process. One this driver does not
    handle (SIGHUP) ends it as it would end the front's own process: the front is told first
    and ends itself by that signal (its status then the same: 129 for SIGHUP in a shell)."""
    try:
        default = signal.getsignal(signum) == signal.SIG_DFL
    except ValueError:  # not a signal
        return
    if default:
        try:
            send(conn, {"killed": signum})
        except OSError:
            pass
    os.kill(os.getpid(), signum)


def _run_command(argv: list[str]) -> int:
    """``kopt ARGV`` as kopt.cli.main runs it; its exit status."""
    import kopt.cli.main as cli

    try:
        cli.main(args=argv, prog_name="kopt")
        code: Any = 0
    except SystemExit as e:
        code = e.code
    except BaseException:  # noqa: BLE001 -- as the interpreter would: a traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _refusal(conn: socket.socket, req: dict[str, Any] | None, fds: list[int],
             env: dict[str, str]) -> str:
    """Why the spare started with environment ``env`` does not run request ``req`` ("" when
    it does): a malformed one, not stdin, stdout and stderr attached, another user,
    :func:`mismatch`."""
    if req is None or not isinstance(req.get("cwd"), str) or not isinstance(
            req.get("argv"), list) or not all(isinstance(a, str) for a in req["argv"]):
        return "no request"
    if len(fds) != 3:
        return "the request came without stdin, stdout and stderr"
    if not _same_user(conn):
        return "the front runs as another user"
    return mismatch(req, env)


def serve(conn: socket.socket, env: dict[str, str], notify_fd: int) -> int:
    """Take one front's request on ``conn`` and run it (this process becomes its driver);
    returns the exit status sent back (0 for a request declined: nothing ran, and ``d`` is
    written to the launchpad's ``notify_fd``, which is closed before the command runs). The
    front is told this process's pid: the launchpad records how it ended
    (:func:`exit_file`)."""
    conn.settimeout(GO_WAIT_S)  # a front that sends nothing by then: nothing runs
    req, fds = _recv_request(conn)
    why = _refusal(conn, req, fds, env)
    if not why and req is not None:  # this process serves this front only: taken now
        try:
            _take_limits(req)
        except (OSError, ValueError) as e:
            why = f"the front's resource limits or niceness cannot be taken ({e})"
    try:
        send(conn, {"ok": not why, "why": why, "pid": os.getpid()})
        go = recv(conn) if not why else None
    except OSError:
        go = None
    if not go or not go.get("go") or req is None:
        for fd in fds:
            os.close(fd)
        os.write(notify_fd, b"d")  # not a sweep served
        return 0
    os.close(notify_fd)
    conn.settimeout(None)
    from kopt.util.phases import adopt_start

    os.chdir(req["cwd"])
    if isinstance(req.get("umask"), int):  # the store's files as private as the user's own
        os.umask(req["umask"] & 0o777)
    os.environ.clear()
    os.environ.update(req["env"])
    _take_streams(fds)
    sys.argv = ["kopt", *req["argv"]]
    adopt_start(float(req.get("started") or time.time()))
    threading.Thread(target=_relay_signals, args=(conn,), daemon=True).start()
    code = _run_command(req["argv"])
    try:
        send(conn, {"exit": code})
    except OSError:
        pass
    return code


def _default_signals() -> None:
    """Give this driver the signal handling of a command started at a terminal: a service
    started from a script's background job (``kopt serve start &``) passes SIGINT and SIGQUIT
    ignored down to its launchpad and drivers, and under ``nohup`` SIGHUP, so a front's
    forwarded Ctrl-C would do nothing (CI, where the launchpad inherited both). The front
    forwards only the signals it does not ignore itself (kopt.cli.front)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def spare_main(listen_fd: int, notify_fd: int) -> None:
    """A spare: import :data:`PRELOAD`, take one front from the listening socket
    ``listen_fd``, say so on ``notify_fd``, and serve it; exits with its status."""
    env = dict(os.environ)
    _default_signals()
    for name in PRELOAD:
        importlib.import_module(name)
    from kopt.core.catalog import load_catalog, load_metric_guide
    from kopt.store.files import warm_arrow
    from workers.build import start_identity

    load_catalog()  # both cached for the process: a submitted try's claim check reads them
    load_metric_guide()
    warm_arrow()  # pyarrow's own import of pandas, on a sweep's first rows otherwise
    for toolchain in ("nvrtc", "cuda"):  # NVRTC's hashes libnvrtc: 0.15-0.2 s (run 14)
        start_identity(toolchain)  # cached for the process, as the service's builders do
    listener = socket.socket(fileno=listen_fd)
    ready = Path(listener.getsockname() + ".ready")  # for wait_ready and `serve status`
    ready.with_suffix(".part").write_text(str(os.getpid()))
    os.replace(ready.with_suffix(".part"), ready)
    conn, _ = listener.accept()
    die_with_parent(0)  # a driver now: it outlives the launchpad (`kopt serve stop`)
    os.write(notify_fd, b"1")
    listener.close()
    os.setsid()  # its own session: a signal to the launchpad's group does not reach it
    code = serve(conn, env, notify_fd)
    os._exit(code)


# -- the launchpad -----------------------------------------------------------------------
class Launchpad:
    """The listening socket, the spare waiting on it and the figures ``serve status`` shows.

    Args:
        path: the socket's path (:data:`SOCKET_NAME` in the head's folder).
        head_pid: the Ray head's process (``ray start --block``): the launchpad exits once
            it is gone.
    """

    def __init__(self, path: str, head_pid: int):
        self.path, self.head_pid = Path(path), head_pid
        self.path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self.listener.listen(64)
        self.notify_r, self.notify_w = os.pipe()
        self.spare: subprocess.Popen | None = None
        self.taken: list[subprocess.Popen] = []
        self.served = self.declined = self.failures = self.in_a_row = 0

    def _spawn(self) -> None:
        fd = self.listener.fileno()
        self.spare = subprocess.Popen(
            [sys.executable, "-m", "kopt.cli.launchpad", "--spare", str(fd), str(self.notify_w)],
            pass_fds=(fd, self.notify_w), stdin=subprocess.DEVNULL,
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL))  # while it waits
        self._write_state()

    def _write_state(self) -> None:
        state = {"pid": os.getpid(), "socket": str(self.path),
                 "served": self.served - self.declined, "declined": self.declined,
                 "spare": self.spare.pid if self.spare else None, "spare_failures": self.failures}
        part = self.path.with_name(self.path.name + ".json.part")
        part.write_text(json.dumps(state))
        os.replace(part, self.path.with_name(self.path.name + ".json"))

    def step(self, wait_s: float = 1.0) -> bool:
        """Keep a spare waiting; count the fronts handed over; reap drivers that ended.
        Returns False when the launchpad should stop (the head is gone, or spares keep
        dying before they take a front)."""
        if not pid_alive(self.head_pid):
            return False
        if self.spare is None:
            self._spawn()
        ready, _, _ = select.select([self.notify_r], [], [], wait_s)
        news = os.read(self.notify_r, 64) if ready else b""
        self.declined += news.count(b"d")  # a driver that did not take its front
        if b"1" in news:  # the spare took a front
            self.served += news.count(b"1")
            assert self.spare is not None
            self.taken.append(self.spare)
            self.spare, self.in_a_row = None, 0
            self._write_state()
        elif news:
            self._write_state()
        elif self.spare is not None and self.spare.poll() is not None:
            self.spare, self.failures, self.in_a_row = None, self.failures + 1, self.in_a_row + 1
            self._write_state()
            if self.in_a_row >= SPARE_FAILURES:
                return False
            time.sleep(min(2.0 ** self.in_a_row, 30.0))
        for p in [p for p in self.taken if p.poll() is not None]:
            self.taken.remove(p)
            if p.returncode < 0:  # killed: its front did not get an exit status
                _record_exit(str(self.path), p.pid, p.returncode)
        return True

    def close(self) -> None:
        """Stop the waiting spare and remove the socket with its folder (a front then runs
        commands itself; a head that ended without `kopt serve stop` left it in /tmp)."""
        self.path.unlink(missing_ok=True)
        if self.spare is not None and self.spare.poll() is None:
            self.spare.kill()
            self.spare.wait()
        self.listener.close()
        folder = own_folder(str(self.path))
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _record_exit(socket_path: str, pid: int, returncode: int) -> None:
    part = Path(f"{socket_path}.exit-part")
    try:
        part.write_text(str(returncode))
        os.replace(part, exit_file(socket_path, pid))
    except OSError:  # the folder is gone (`kopt serve stop`): nobody waits for it
        pass


def main(path: str, head_pid: int) -> None:
    """Run the launchpad until the head is gone (or SIGTERM: `kopt serve stop`)."""
    pad = Launchpad(path, head_pid)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while pad.step():
            pass
    except KeyboardInterrupt:
        pass
    finally:
        pad.close()












if __name__ == "__main__":
    if sys.argv[1] == "--spare":
        spare_main(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main(sys.argv[1], int(sys.argv[2]))
