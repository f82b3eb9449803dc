"""Run a compiler so that nothing it starts outlives its build task.

``python -m workers.reap TIMEOUT_S CMD...``: runs CMD in a new process group and exits with
its exit code. The group (nvcc or c++ and the cicc, ptxas, cc1plus, as they start) is
killed with SIGKILL when CMD runs past TIMEOUT_S (exit code 124) or when this wrapper gets
SIGTERM/SIGINT. The build task starts the wrapper with ``PR_SET_PDEATHSIG`` = SIGTERM
(:func:`die_with_parent`), so a Ray worker that dies (driver interrupted, node shut down)
takes its compilers with it; the kernel's parent-death signal alone would reach only
the compiler driver, not the processes it started. A command that cannot be started
exits 127 with the reason on stderr.

With ``$KOPT_BUILD_CONFINE`` set (workers.build_confine), the wrapper first restricts
itself and everything it starts to that Landlock ruleset; a ruleset the kernel refuses
exits 126 with the reason, and the compiler never runs.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In a child process (``preexec_fn``): receive ``sig`` when the parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``; a no-op elsewhere)."""
    if sys.platform != "linux":
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def tie_to_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for a child that must die with the process starting it (``sig``
    when it dies: a ``kopt preflight`` ended by SIGTERM left its harness spinning forever,
    reparented to init), only when starting from the main thread (the parent-death signal
    follows the starting thread, which must live as long as the process); else None."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return functools.partial(die_with_parent, sig)


def cap_memory(cap_bytes: int, sig: int = signal.SIGTERM) -> None:
    """In a child process (``preexec_fn``): cap its address space at ``cap_bytes``
    (``RLIMIT_AS``), clamped to the hard limit it inherited (``ulimit -v`` on a shared
    login node or in a container: asking for more than the hard limit raises, and an
    exception in a ``preexec_fn`` fails the whole start), then :func:`die_with_parent`.
    Never raises: a limit that cannot be set leaves the inherited one."""
    import resource

    try:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            cap_bytes = min(cap_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
    except (ValueError, OSError):
        pass
    try:
        die_with_parent(sig)
    except OSError:
        pass


def limited(cap_bytes: int, sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for a compiler child: its address space capped at ``cap_bytes``
    (``RLIMIT_AS``: a runaway compile fails instead of taking the node's memory; never
    above the hard limit the process already has) and ``sig`` on its parent's death
    (:func:`cap_memory`). The returned function never raises."""
    return functools.partial(cap_memory, cap_bytes, sig)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, exited but not reaped, does
    not; a pid no process can have does not)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# a CPU-backend harness's environment: no GPU visible to it, so that a "CPU" candidate
# cannot do its work on a GPU of the host and beat the CPU clock (Ray leaves
# CUDA_VISIBLE_DEVICES unset for an actor without GPUs: every GPU was visible)
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def package_env() -> dict[str, str]:
    """This environment with the checkout holding ``workers`` first on ``PYTHONPATH``, so
    that a child's ``python -m workers.<module>`` finds the package."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                else "")
    return env


def confine() -> str | None:
    """Apply the Landlock ruleset in ``$KOPT_BUILD_CONFINE`` (workers.build_confine) to this
    process and what it starts; the reason when it could not be applied, else None (also
    when none is asked for, or the kernel has no Landlock: then the compiler runs
    unconfined, as ``kopt env`` says)."""
    raw = os.environ.get("KOPT_BUILD_CONFINE")
    if not raw:
        return None
    from workers import landlock  # lazy: only a confined build needs ctypes and the rules

    try:
        rules = json.loads(raw)
        landlock.restrict(list(rules["read"]), list(rules["write"]))
    except (ValueError, KeyError, TypeError, OSError) as e:
        return f"cannot confine the compiler ({e})"
    return None


PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


_CHILDREN_FD: list[int] = []  # /proc/self/task/PID/children, opened before the ruleset


def _children() -> list[int]:
    """This process's children (its main thread's ``children`` file in /proc, where the
    kernel reparents a subreaper's orphans: reap starts its compiler from that thread), read
    through a descriptor opened before :func:`confine` (under the compiler's Landlock
    ruleset /proc is not readable: the list read empty and nothing was killed, red-team
    round 11)."""
    try:
        if not _CHILDREN_FD:
            _CHILDREN_FD.append(os.open(f"/proc/self/task/{os.getpid()}/children", os.O_RDONLY))
        return [int(x) for x in os.pread(_CHILDREN_FD[0], 1 << 20, 0).split()]
    except OSError:
        return []


def kill_descendants(rounds: int = 1000) -> int:
    """SIGKILL and reap every process left under this one (a subreaper: what a compiler's
    descendants orphan, ``setsid`` and double forks included, is its child); returns how
    many. A program a sweep's flags ran around the compiler (``-wrapper``) left a process
    that outlived the build (red-team round 10). Never raises."""
    n = 0
    for _ in range(rounds):
        kids = _children()
        if not kids:
            break
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
        for pid in kids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return n


def main(argv: list[str]) -> int:
    """``TIMEOUT_S CMD...``: confine this process (:func:`confine`), run CMD in a session of
    its own and return its exit code (124 past ``TIMEOUT_S``, 126 when it could not be
    confined, 127 when it could not start); whatever it left running is killed when it
    ends (:func:`kill_descendants`)."""
    timeout_s, cmd = float(argv[0]), argv[1:]
    _children()  # its descriptor, while /proc is still readable
    why = confine()
    if why is not None:  # a build that was to be confined never runs unconfined
        print(why, file=sys.stderr)
        return 126
    _libc_prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        return _run(cmd, timeout_s)
    finally:
        kill_descendants()


def _libc_prctl(option: int, value: int) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _run(cmd: list[str], timeout_s: float) -> int:
    try:
        p = subprocess.Popen(cmd, start_new_session=True)
    except OSError as e:
        print(f"cannot start {cmd[0]}: {e}", file=sys.stderr)
        return 127

    def kill_group(signum: int = 0, frame: object = None) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if signum:
            kill_descendants()
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, kill_group)
    signal.signal(signal.SIGINT, kill_group)
    try:
        return p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group()
        p.wait()
        return 124


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
