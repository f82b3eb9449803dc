"""Holding every process of a sandbox still (``SIGSTOP``) while another process is timed.

The outside clock (kopt.core.clock) subtracts a block of preparations alone, run in a
second harness of the device that never loads candidate code (workers.device_actor
``clock``), from a block of a contender's calls. While that second harness works, the
contender's own sandbox is idle, but code it left behind is not: threads or processes that
spin whenever no call of its own runs took the CPUs from the preparations, lengthened
their block, and so shortened the figure a patched clock is judged by (in wall-clock mode,
a GPU device's or a CPU device whose CPU time is not counted). :func:`hold` stops them
all for the block and :func:`release` lets them go on.

Which processes: those in the sandbox's PID namespace (workers.isolation: a candidate's
double-forked, ``setsid`` processes are there too, and cannot make a namespace of their
own: workers.seccomp), found by their ``/proc/PID/ns/pid``; where the harness is not
isolated, its process group. ``SIGSTOP`` cannot be caught or ignored; ``SIGKILL`` still
ends a stopped process, so a sandbox killed while held (its device actor gone: the
harness's parent-death signal) does not stay behind, as a frozen cgroup v1 would.

Stdlib only.
"""

from __future__ import annotations

import os
import signal
import time

PASSES = 8  # rounds of finding and stopping: processes forked meanwhile are found next round
STOP_WAIT_S = 0.5  # for a signalled process to show as stopped (``T`` in /proc/PID/stat)


def _ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, parent pid, process group) of process ``pid``, or None when it is
    gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            after = f.read().rsplit(")", 1)[1].split()
        return after[0], int(after[1]), int(after[2])
    except (OSError, IndexError, ValueError):
        return None


def _pids() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def sandbox_ns(leader: int) -> str | None:
    """The PID namespace of the sandbox whose first process is ``leader`` (``unshare``,
    which stays in this namespace; its child is the new one's process 1), as
    ``pid:[INODE]``; None when ``leader`` started none (not isolated) or is gone."""
    own = _ns(leader)
    if own is None:
        return None
    for pid in _pids():
        st = _stat(pid)
        if st is not None and st[1] == leader:
            ns = _ns(pid)
            if ns is not None and ns != own:
                return ns
    return None


def _in_cgroup(dirs: tuple[str, ...]) -> list[int]:
    """The pids in the cgroup of folders ``dirs`` (workers.cgroup; ``cgroup.procs`` needs no
    access to the processes themselves); [] when it cannot be read."""
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
    return []


def hold(leader: int, cgroup_dirs: tuple[str, ...] = ()) -> list[int]:
    """Stop (``SIGSTOP``) every process of the sandbox whose first process is ``leader``:
    each in its PID namespace (:func:`sandbox_ns`) or in its cgroup (``cgroup_dirs``: a
    process that made itself non-dumpable hides its namespace from a reader without
    ``CAP_SYS_PTRACE``, not its cgroup), found again until a round finds none new (at most
    :data:`PASSES` rounds), or its process group where it has no namespace; waits up to
    :data:`STOP_WAIT_S` s for them to show as stopped.

    Returns:
        what :func:`release` takes: the pids stopped, and ``-leader`` for a process group;
        [] when ``leader`` is gone. Never raises.
    """
    ns = sandbox_ns(leader)
    held: list[int] = []
    if ns is None:
        try:
            os.killpg(leader, signal.SIGSTOP)
        except OSError:
            return []
        held.append(-leader)
    for _ in range(PASSES):
        new = [p for p in dict.fromkeys([*_in_cgroup(cgroup_dirs), *(
            q for q in _pids() if ns is not None and _ns(q) == ns)]) if p not in held]
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
                held.append(p)
            except OSError:
                pass  # gone
    _wait_stopped([p for p in _pids() if (st := _stat(p)) is not None and (
        p in held or ns is None and st[2] == leader)])
    return held


def _wait_stopped(pids: list[int]) -> None:
    deadline = time.monotonic() + STOP_WAIT_S
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if (st := _stat(p)) is not None and st[0] not in "TtZX"]
        if left:
            time.sleep(0.001)


def release(held: list[int]) -> None:
    """Let the processes :func:`hold` stopped go on (``SIGCONT``). Never raises."""
    for p in held:
        try:
            if p < 0:
                os.killpg(-p, signal.SIGCONT)
            else:
                os.kill(p, signal.SIGCONT)
        except OSError:
            pass
