"""The harness's OpenMP team threads, seen from outside its process: idle where they were.

The harness starts its OpenMP teams before any candidate's code loads (workers.harness
``_warm_teams``), so that an honest OpenMP job's threads are not new to the sandbox's list
of the harness's threads (workers.sandbox ``Sandbox._threads_left``). Those threads are then
the harness's own, and a candidate's code can borrow one: a region started on the team and
never ended (``GOMP_parallel_start`` with no ``GOMP_parallel_end``, libgomp's state in the
calling thread restored after it so that ``omp_in_parallel`` reads 0) runs its function on
after the job on a worker the list accepts (a red-team review, CPU, 2026-12-07: a later
0.21 ms job took 4.07 ms, ``ok``; under ``OMP_NUM_THREADS=2`` a later OpenMP job hung).

An idle libgomp worker waits in the futex of its pool's dock, always at the same place:
one system call (``futex``: one address, ``FUTEX_WAIT``, no timeout), one stack pointer,
one program counter inside libgomp's code
(libgomp's ``gomp_thread_start`` loop: run the region's function, the team's final barrier,
then the dock's wait, ``team.c``). ``/proc/PID/task/TID/syscall`` gives all three for a
blocked thread (proc(5): "the number of the system call being executed, followed by the
values of the argument registers, followed by the values of the stack pointer and program
counter registers"; "running" for a thread on a CPU). :func:`team_waits` takes them, once
the team settled after its first region, for every thread whose program counter is in a
``libgomp`` mapping of the process (``/proc/PID/maps``: the host's and torch's copy alike);
:func:`strays` says which of those threads, after a job, are not back in the very same
wait within a grace period (a worker spins a while in libgomp before it blocks:
``GOMP_SPINCOUNT``, libgomp's manual, 300000 spins by default; about 10 ms on this
project's CI machine). A function left running on a worker has its own frames below the
dock's on that thread's stack, so it waits (or runs) elsewhere; one that rewrote its stack
to wait at the dock's very place, with a timeout to wake itself (a red-team review,
CPU, 2026-12-07: 0.1 ms there in every 4 ms passed the check when it read only the
call's number and the two registers), must now wait there with none, as an idle worker
does, until libgomp's next region wakes the dock.

The files are read by the sandbox's process, outside the candidate's reach (the harness
and this process share a uid; the reads need the same access as ``ptrace``'s attach, proc(5),
which the harness's sandbox leaves to its parent). Named wrongly: a harness whose
environment keeps the workers spinning (``OMP_WAIT_POLICY=active``: libgomp's manual)
ends after each OpenMP job. Not seen: a worker made to wait as an idle one does, with the
dock's very stack pointer, program counter and futex, and no timeout (its stack rewritten
to return elsewhere once libgomp's next region wakes it);
threads no team of libgomp's runs (the list sees a new one; a thread of the harness's own
is the harness's CPU memory, which nothing outside reads).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# seconds a worker of the harness's team may take to block again after a job (its spin,
# on a loaded machine) before it is named; a function left on it is named at this time
SETTLE_S = 2.0
_POLL_S = 0.001


def gomp_ranges(pid: int) -> list[tuple[int, int]]:
    """The address ranges ``[start, end)`` of process ``pid``'s mappings of files named
    ``libgomp*`` (``/proc/PID/maps``); empty where none is mapped or the file cannot be
    read. Never raises."""
    out = []
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and os.path.basename(parts[5]).startswith("libgomp"):
            lo, _, hi = parts[0].partition("-")
            out.append((int(lo, 16), int(hi, 16)))
    return out


Wait = tuple[str, str, str, str, int, int]


def wait_of(pid: int, tid: int) -> Wait | None | bool:
    """Thread ``tid`` of ``pid``'s wait while it is blocked (``/proc/PID/task/TID/syscall``):
    its system call's number, first, second and fourth arguments (a futex's address,
    operation and timeout; not the third, the value expected there, which a barrier's
    generation changes), its stack pointer and program counter; None while it runs; False
    when the file cannot be read (the thread is gone, or no access). Never raises."""
    try:
        words = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()
    except OSError:
        return False
    if not words or words[0] == "running":
        return None
    if len(words) != 9:  # number, six arguments, stack pointer, program counter
        return False
    try:
        return words[0], words[1], words[2], words[4], int(words[-2], 16), int(words[-1], 16)
    except ValueError:
        return False


def _tids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []


def team_waits(pid: int, settle_s: float = SETTLE_S) -> dict[int, Wait]:
    """The waits (:func:`wait_of`) of process ``pid``'s threads blocked in a ``libgomp``
    mapping's code (:func:`gomp_ranges`), taken once no thread of it but the main one runs
    (each polled up to ``settle_s`` seconds in all; one still running then is left out):
    its OpenMP teams' idle workers. Empty where libgomp is not mapped. Never raises."""
    ranges = gomp_ranges(pid)
    if not ranges:
        return {}
    t_end = time.monotonic() + settle_s
    out: dict[int, Wait] = {}
    for tid in _tids(pid):
        if tid == pid:  # the main thread: no team's worker
            continue
        w = wait_of(pid, tid)
        while w is None and time.monotonic() < t_end:
            time.sleep(_POLL_S)
            w = wait_of(pid, tid)
        if w and any(lo <= w[-1] < hi for lo, hi in ranges):
            out[tid] = w
    return out


def strays(pid: int, waits: dict[int, Wait], settle_s: float = SETTLE_S
           ) -> list[int]:
    """The threads of ``waits`` (:func:`team_waits`) that are not back in their wait
    (the same :func:`wait_of`: call, futex arguments, stack pointer, program counter) within
    ``settle_s`` seconds; a thread that is gone is none. Never raises."""
    t_end = time.monotonic() + settle_s
    out = []
    for tid, was in waits.items():
        w = wait_of(pid, tid)
        while w is not False and w != was and time.monotonic() < t_end:
            time.sleep(_POLL_S)
            w = wait_of(pid, tid)
        if w is not False and w != was:
            out.append(tid)
    return out
