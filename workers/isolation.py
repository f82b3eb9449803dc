"""Which isolation a candidate's process runs under on this host, and the command for it.

A harness process loads candidate code (a ``solve.so``), so it runs in a sandbox made from
the kernel's own namespaces by util-linux ``unshare`` and set up by workers.jail: its own
PID namespace (it sees and signals only its own processes, and every process it starts dies
with it), a network namespace with no interface up, IPC and UTS namespaces (no System V or
POSIX message queue or shared memory of the host's, none left behind), and a mount
namespace in which every
file system is read-only except a scratch folder of its own (``TMPDIR``), with no
capabilities to change that. Where kopt does not run as root, a user namespace is made
first (``--user --map-root-user``).

:func:`available` finds out once per process whether that works here (a host without
``unshare``, or a kernel or container that refuses the namespaces), and why not.
``KOPT_ISOLATION=none`` in the environment turns it off on purpose. Without it the
harness runs as an ordinary child process and every row it measures says so
(``isolation`` = ``none``).

Values of a row's ``isolation``: ``namespaces`` (as root), ``user-namespaces`` (the same
inside a user namespace), ``none``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from workers import seccomp
from workers.jail import SETUP_FAILED
from workers.reap import package_env

NONE = "none"
ENV_SWITCH = "KOPT_ISOLATION"  # "none": no sandbox on purpose
WRITABLE_ENV = "KOPT_SANDBOX_WRITABLE"  # colon-separated paths the sandbox leaves writable
PROBE_TIMEOUT_S = 60.0
# a probe that failed for want of a host resource is tried again after these waits (s): a
# red-team helper's candidate used up the host's open files for 10-20 s at a time, and a
# device actor that started then ran every later candidate unsandboxed
PROBE_RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0)
# what such a failure says (strerror of ENFILE and EMFILE, ENOMEM, EAGAIN); not ENOSPC,
# which `unshare --user` answers where user.max_user_namespaces is 0: a host setting
PASSING = ("Too many open files", "Cannot allocate memory", "Resource temporarily unavailable")
HOST_WIDE = "Too many open files in system"  # ENFILE: the host's count, not a process's


def short_of_host(error: str | None) -> bool:
    """Whether ``error`` (a failed start's or job's text) says the host was short of a
    resource another process may be holding for now (:data:`PASSING`)."""
    return bool(error) and any(x in error for x in PASSING)


FILES_SHORT = 0.9  # share of fs.file-max in use from which the host's open files are short


def host_files_short(path: str = "/proc/sys/fs/file-nr") -> bool:
    """Whether the host's open files are nearly used up: the kernel's count of allocated
    file handles (``/proc/sys/fs/file-nr``'s first field; proc(5)) at :data:`FILES_SHORT`
    of ``fs.file-max`` (its third) or more. An unprivileged process's ``open`` fails with
    ENFILE at ``fs.file-max``. False where the count cannot be read."""
    try:
        with open(path) as f:
            used, _, most = (int(x) for x in f.read().split()[:3])
    except (OSError, ValueError):
        return False
    return most > 0 and used >= FILES_SHORT * most


class Unsettled(RuntimeError):
    """The sandbox could not be tried on this host for want of a resource that a process
    may be holding for now (:data:`PASSING`): neither working nor known not to."""


@dataclass(frozen=True)
class Isolation:
    """What a harness started on this host runs under.

    Attributes:
        kind: ``namespaces``, ``user-namespaces`` or ``none``.
        prefix: the command line before ``python -m workers.jail``; empty for ``none``.
        why: for ``none``, the reason in one line (what failed, and the fix); else "".
        writable: paths left writable besides the scratch folder (``KOPT_SANDBOX_WRITABLE``,
            colon-separated: for a device driver that must write somewhere; none known
            to be needed).
    """

    kind: str
    prefix: tuple[str, ...] = ()
    why: str = ""
    writable: tuple[str, ...] = ()

    @property
    def isolated(self) -> bool:
        """True unless ``kind`` is ``none``."""
        return self.kind != NONE

    def wrap(self, cmd: list[str], scratch: str, keep: tuple[str, ...] = (),
             loopback: bool = False, gpu: bool = True, proc_rw: bool = False) -> list[str]:
        """``cmd`` as run in the sandbox with ``scratch`` (an existing folder, a tmpfs
        there) its only writable one besides ``keep`` (existing folders left writable as
        they are: where a profiler writes its report), the namespace's own loopback up
        when ``loopback``, the GPU's device nodes reachable only with ``gpu`` (a CPU
        device's harness gets none), ``/proc`` writable with ``proc_rw`` (read-only but
        ``cmd``'s own ``/proc/PID`` otherwise: workers.jail); ``cmd`` itself when not
        isolated."""
        if not self.isolated:
            return list(cmd)
        rw = [a for p in (*self.writable, *keep) for a in ("--rw", p)]
        return [*self.prefix, sys.executable, "-m", "workers.jail", scratch, *rw,
                *(["--lo"] if loopback else []), *([] if gpu else ["--no-gpu"]),
                *(["--proc-rw"] if proc_rw else []), "--", *cmd]

    def env(self) -> dict[str, str]:
        """What a sandboxed harness's environment adds: the system-call filter it installs
        once set up (workers.seccomp); nothing when not isolated."""
        return {seccomp.ENV: "1"} if self.isolated else {}

    def describe(self) -> str:
        """One line for ``kopt env`` and notes."""
        if self.isolated:
            return (f"{self.kind}: candidates run in their own PID, network, IPC and mount "
                    "namespaces, every file system read-only but a scratch folder, no "
                    "capabilities, sockets, keyrings or new namespaces (seccomp)")
        return f"none: {self.why}"


def decode_exit(code: int | None, isolation: Isolation) -> int | None:
    """A sandboxed harness's exit code as ``subprocess.Popen.returncode`` would give the
    harness's own: ``128 + N`` from workers.jail is ``-N`` (killed by signal N); codes of
    an unisolated harness are returned as they are."""
    if code is not None and isolation.isolated and 128 < code < 128 + 65:
        return -(code - 128)
    return code


def _prefix(unshare: str, as_root: bool) -> tuple[str, ...]:
    user = () if as_root else ("--user", "--map-root-user")
    return (unshare, *user, "--pid", "--fork", "--kill-child", "--net", "--mount", "--ipc",
            "--uts", "--")


@functools.cache
def available() -> Isolation:
    """The isolation this host gives a harness, found once per process by starting the
    sandbox around ``true``: ``none`` with the reason when ``KOPT_ISOLATION=none`` is set,
    ``unshare`` is not on the PATH, or the sandbox cannot be set up (its first line of
    error). A probe that fails for want of a host resource (:data:`PASSING`: another
    process may hold the host's open files or memory for now) is tried again after each wait of
    :data:`PROBE_RETRY_S`, never taken as a host without a sandbox.

    Raises:
        Unsettled: it still failed so after the last wait (not cached: the next call
            probes again).
    """
    if os.environ.get(ENV_SWITCH, "").lower() == NONE:
        return Isolation(NONE, why=f"{ENV_SWITCH}=none is set in kopt's environment")
    unshare = shutil.which("unshare")
    if unshare is None:
        return Isolation(NONE, why="`unshare` (util-linux) is not on the PATH: install "
                         "util-linux to sandbox candidates")
    root = os.geteuid() == 0
    keep = tuple(p for p in os.environ.get(WRITABLE_ENV, "").split(":") if p)
    iso = Isolation("namespaces" if root else "user-namespaces", _prefix(unshare, root),
                    writable=keep)
    for wait in (*PROBE_RETRY_S, None):
        why = _probe(iso)
        if not short_of_host(why):
            break
        if wait is None:
            raise Unsettled(f"the sandbox could not be tried ({why}) after "
                            f"{sum(PROBE_RETRY_S):g} s of retries: not started outside it; "
                            "run again once the host has its resources back (or set "
                            f"{ENV_SWITCH}=none to run candidates unsandboxed)")
        time.sleep(wait)
    return Isolation(NONE, why=why) if why else iso


def _probe(iso: Isolation) -> str:
    """Start ``iso``'s sandbox around ``true``: "" when it works, else why not (one line,
    with the fix)."""
    try:
        with tempfile.TemporaryDirectory(prefix="kopt-probe-") as scratch:
            p = subprocess.run(iso.wrap(["true"], scratch), capture_output=True, text=True,
                               env=package_env(), timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the sandbox did not start: {e}"
    if p.returncode == 0:
        return ""
    said = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
    what = "its set-up failed" if p.returncode == SETUP_FAILED else "unshare failed"
    return (f"{what} ({said}); candidates run unsandboxed (allow unprivileged user "
            "namespaces, e.g. sysctl kernel.unprivileged_userns_clone=1, or run kopt as "
            "root)")
