"""The CPU harness's jobs at real-time priority (sweep.yaml ``timing.realtime``).

On a shared machine a timed call on the CPU is preempted by whatever else runs there: under
two test suites on two cores, a 0.5 ms call's samples had an IQR of 4x their median, and
the loop's noise rule (kopt.core.compare) then calls no speedup real, however large. A
thread under ``SCHED_FIFO`` (sched(7)) is never preempted by a thread of the normal
policies, so the samples see the call and not the machine's load: the practice of running
a benchmark under ``chrt -f``.

The sandbox (workers.sandbox), outside the harness's namespaces and with the host's
privilege, puts the harness's main thread -- the one that calls ``solve`` -- under
``SCHED_FIFO`` at the lowest real-time priority (:data:`RT_PRIORITY`: above every normal
thread, below every real-time thread of the system's own) for the length of one job, and
back to its normal policy after it. The harness itself gets no privilege for this (its
sandbox drops every capability, workers.jail): candidate code cannot raise its own
priority. The policy carries ``SCHED_RESET_ON_FORK`` (sched(7)): a thread or process the
candidate starts (an OpenMP pool's workers too) runs at the normal policy, so nothing it
leaves behind keeps a real-time priority after the job; a multi-threaded candidate's
calls are shielded on its calling thread only. A call that never returns the core is held
by the kernel's real-time throttling (``/proc/sys/kernel/sched_rt_runtime_us``: 95 % of
each second by default) and killed at its job's ``timeout_s`` as any hang; until then it
holds one core at that share, which on a one-core machine leaves the rest of the system
(Ray's heartbeats among it) 5 %: the setting is for machines of two cores or more.

Setting another process's policy needs root or ``CAP_SYS_NICE``; :func:`why_not` says
whether this process can, and the device's info carries it, so the driver says once when
the setting cannot be honoured (the jobs then run at normal priority).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

RT_PRIORITY = 1  # the lowest SCHED_FIFO priority (sched_get_priority_min(SCHED_FIFO))
HARNESS_ARGV = (b"-m", b"workers.harness")  # how the harness's command line starts


def why_not(tid: int) -> str:
    """"" when this process can put thread ``tid`` (a host pid; 0: the calling thread)
    under ``SCHED_FIFO`` (tried, then undone), else why not in one line with the fix."""
    if not hasattr(os, "SCHED_FIFO"):
        return "this system has no SCHED_FIFO"
    try:
        with realtime(tid, strict=True):
            pass
    except OSError as e:
        return (f"SCHED_FIFO was refused ({e.strerror}): kopt needs root or CAP_SYS_NICE "
                "for timing.realtime")
    return ""


@contextlib.contextmanager
def realtime(tid: int | None, strict: bool = False) -> Iterator[bool]:
    """Thread ``tid`` (a host pid or thread id; 0: the calling thread; None: nothing is
    changed) under ``SCHED_FIFO`` at :data:`RT_PRIORITY`, with ``SCHED_RESET_ON_FORK`` (what
    it starts runs at the normal policy), while the block runs, then back to the policy
    and priority it had (unless it has ended). Yields whether it is on.

    Raises:
        OSError: ``strict`` and the kernel refused (EPERM without root or CAP_SYS_NICE;
            ESRCH: no such thread); otherwise a refusal yields False and changes nothing.
    """
    if tid is None:
        yield False
        return
    try:
        policy, param = os.sched_getscheduler(tid), os.sched_getparam(tid)
        os.sched_setscheduler(tid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(RT_PRIORITY))
    except OSError:
        if strict:
            raise
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(ProcessLookupError):  # the harness died in the job
            os.sched_setscheduler(tid, policy, param)


def harness_pid(root: int, proc: Path = Path("/proc")) -> int | None:
    """The host pid of the harness process at or below process ``root`` (the sandbox's
    first process: the harness itself, or ``unshare`` two levels above it, workers.jail):
    the first whose command line runs ``-m workers.harness``, found through each process's
    ``task/PID/children``; None when there is none (or /proc cannot tell). Call it before
    any candidate runs: a process a candidate starts could carry the same command line."""
    todo, looked = [root], 0
    while todo and looked < 64:
        pid = todo.pop(0)
        looked += 1
        try:
            argv = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tuple(argv[1:3]) == HARNESS_ARGV:
            return pid
        with contextlib.suppress(OSError, ValueError):
            todo += [int(x) for x in
                     (proc / str(pid) / "task" / str(pid) / "children").read_text().split()]
    return None
