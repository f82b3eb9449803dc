"""Holding every process of a sandbox still while another process is timed.

The outside clock (kopt.core.clock) subtracts a block of preparations alone, run in a
second harness of the device that never loads candidate code (workers.device_actor
``clock``), from a block of a contender's calls. While that second harness works, the
contender's own sandbox is idle, but code it left behind is not: threads or processes that
spin whenever no call of its own runs took the CPUs from the preparations, lengthened
their block, and so shortened the figure a patched clock is judged by (in wall-clock mode,
a GPU device's or a CPU device whose CPU time is not counted). :func:`hold` stops them
all for the block and :func:`release` lets them go on.

How, in order of strength:

1. The sandbox's cgroup frozen (workers.cgroup ``Cgroup.freeze``), where the host gives it
   a freezer: every process in it, and any it forks meanwhile, runs no instruction until
   thawed, whatever signals they send each other. A v1 frozen process cannot even die
   until thawed: :func:`release` thaws in the device actor's ``finally``, and a cgroup
   whose maker died while it was frozen is thawed (its processes then die of their
   parent-death signal) by the next workers.cgroup ``make`` or ``remove``.
2. Otherwise ``SIGSTOP`` to each process in the sandbox's PID namespace (workers.isolation:
   a candidate's double-forked, ``setsid`` processes are there too, and cannot make a
   namespace of their own: workers.seccomp), found by ``/proc/PID/ns/pid``, and in its
   cgroup; where the harness is not isolated, its process group. ``SIGSTOP`` cannot be
   caught or ignored, but a stopped process is continued by a ``SIGCONT`` from one not yet
   stopped: the processes are found and stopped again until one pass sees them all
   stopped at once (a stopped process sends nothing), at most :data:`PASSES` passes.

Neither way is proof against every escape: a thread in a long system call (``madvise`` of
a huge region) keeps a v1 cgroup from freezing until it returns, and processes whose
leaders exited, continued by a ring of ``SIGCONT`` timers, outran the signals (a red-team
helper's findings). So what the held processes used meanwhile is read (:func:`used_ms`):
a frozen or stopped process uses no CPU, one that escaped does, and the outside clock
makes its contender ``suspect`` (kopt.core.clock ``HELD_CPU_MS``).

Stdlib only.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field

from workers.cgroup import Cgroup

# CPU time (ms) a held sandbox may use before it counts as having escaped its hold: a frozen
# or stopped process uses none; the slack is the reads' own granularity (kopt.core.clock's
# outside clock, workers.turns' contests)
HELD_CPU_MS = 2.0
PASSES = 8  # of finding and stopping: processes forked, or continued, meanwhile are met next
STOP_WAIT_S = 0.5  # for a signalled process to show as stopped (``T`` in /proc/PID/stat)


def pid_namespace(pid: int) -> str | None:
    """Process ``pid``'s PID namespace as ``pid:[INODE]``; None when it cannot be read."""
    return _ns(pid)


def _ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _fields(path: str) -> list[str] | None:
    """The fields of a ``/proc/.../stat`` file after the command name (state first), or
    None when it cannot be read (the process or thread is gone)."""
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, parent pid, process group) of process ``pid``, or None when it is
    gone."""
    after = _fields(f"/proc/{pid}/stat")
    try:
        return None if after is None else (after[0], int(after[1]), int(after[2]))
    except (IndexError, ValueError):
        return None


def state(pid: int | None) -> str:
    """Process ``pid``'s state letter (``/proc/PID/stat``: "R", "S", "T" when stopped...);
    "" for None or a process that is gone."""
    st = None if pid is None else _stat(pid)
    return st[0] if st else ""


def parent(pid: int) -> int | None:
    """Process ``pid``'s parent's pid (``/proc/PID/stat``); None when it is gone or has
    exited (a zombie, reaped or not, runs no more)."""
    st = _stat(pid)
    return None if st is None or st[0] in ("Z", "X") else st[1]


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


def alive(pid: int) -> bool:
    """Whether process ``pid`` still holds what it took (:func:`_live`): False once it is
    gone, a zombie, or in its exit with its memory let go."""
    return _live(pid)[0]


def _live(pid: int) -> tuple[bool, int]:
    """(whether process ``pid`` still holds what it took: one of its threads is neither a
    zombie nor in its exit with its memory let go (``vsize`` 0), its parent's pid). The
    process's first thread alone does not tell: a red-team helper's leader called
    ``pthread_exit``, its ``/proc/PID/stat`` said "Z" with ``vsize`` 0, and its other
    threads ran on, holding the process's memory and files."""
    after = _fields(f"/proc/{pid}/stat")
    try:
        ppid = int(after[1]) if after is not None else 0
    except (IndexError, ValueError):
        return False, 0
    try:
        tids = [pid, *(int(t) for t in os.listdir(f"/proc/{pid}/task") if t != str(pid))]
    except (OSError, ValueError):
        tids = [pid]
    for tid in tids:
        st = after if tid == pid else _fields(f"/proc/{pid}/task/{tid}/stat")
        try:
            if st is not None and st[0] not in ("Z", "X") and int(st[20]) > 0:
                return True, ppid
        except (IndexError, ValueError):
            continue
    return False, ppid


def in_namespace(ns: str, roots: set[int]) -> list[int]:
    """The live pids (:func:`_live`: a process in its exit, or a zombie, holds nothing and
    is not one; a cgroup no longer lists it either) in PID namespace ``ns`` (``pid:[INODE]``,
    :func:`sandbox_ns`), and those whose namespace cannot be read (a process that made
    itself non-dumpable hides it from a caller without the capability) whose parent is one
    of them or of ``roots`` (the sandbox's processes known: an orphan's parent is its
    namespace's first process). For a sandbox no cgroup counts (a host that lends kopt
    none). Never raises."""
    found, hidden = set(), {}
    for q in _pids():
        n = _ns(q)
        if n is not None and n != ns:
            continue
        live, ppid = _live(q)
        if live and n == ns:
            found.add(q)
        elif live:
            hidden[q] = ppid
    known, grew = found | roots, True
    while grew:  # the hidden ones' parents, to a fixed point
        grew = False
        for q, ppid in list(hidden.items()):
            if ppid in known:
                found.add(q)
                known.add(q)
                del hidden[q]
                grew = True
    return sorted(found)


def in_cgroup(dirs: tuple[str, ...]) -> list[int]:
    """The pids in the cgroup of folders ``dirs`` (workers.cgroup; ``cgroup.procs`` needs no
    access to the processes themselves); [] when it cannot be read."""
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
    return []


@dataclass
class Held:
    """What :func:`hold` held: ``frozen``, the cgroup it froze (None when it signalled), and
    ``pids``, the processes it stopped by ``SIGSTOP`` (``-PGID`` for a process group);
    ``cpu0``, the held processes' CPU time when the hold was complete (:func:`cpu_ns`), and
    what :func:`used_ms` needs to find them again."""

    frozen: Cgroup | None = None
    pids: list[int] = field(default_factory=list)
    cpu0: dict[int, int] | None = None
    leader: int = 0
    ns: str | None = None
    dirs: tuple[str, ...] = ()


def hold(leader: int, cgroup_dirs: tuple[str, ...] = ()) -> Held:
    """Hold every process of the sandbox whose first process is ``leader`` still: its
    cgroup (folders ``cgroup_dirs``) frozen where it has a freezer (left freezing when not
    all froze in time: a thread in a long system call freezes as it leaves the kernel, and
    :func:`used_ms` counts what it used meanwhile), else each process in its PID namespace
    (:func:`sandbox_ns`) or cgroup (a process that made itself non-dumpable hides its
    namespace from a reader without ``CAP_SYS_PTRACE``, not its cgroup), or its process
    group where it has no namespace, stopped by ``SIGSTOP`` until a pass finds them all
    stopped (each pass waits up to :data:`STOP_WAIT_S` s for them).

    Returns:
        what :func:`release` and :func:`used_ms` take; nothing held when ``leader`` is
        gone. Never raises.
    """
    dirs = tuple(cgroup_dirs)
    cg = Cgroup(dirs, "") if dirs else None
    if cg is not None and (cg.freeze() or cg.freezing()):
        held = Held(frozen=cg, leader=leader, dirs=dirs)
    else:
        held = _signalled(leader, dirs)
    held.cpu0 = cpu_ns(held)
    return held


def _signalled(leader: int, dirs: tuple[str, ...]) -> Held:
    """:func:`hold` by ``SIGSTOP`` passes."""
    ns = sandbox_ns(leader)
    held = Held(leader=leader, ns=ns, dirs=dirs)
    for _ in range(PASSES):
        members = _members(leader, ns, dirs)
        if ns is None:
            try:
                os.killpg(leader, signal.SIGSTOP)
            except OSError:
                if not held.pids:
                    return held
            if -leader not in held.pids:
                held.pids.append(-leader)
        held.pids += [p for p in members if p not in held.pids]
        # done when one look finds them all stopped and no process new: a stopped process
        # continues, and forks, nothing
        if not _stop(members) and not set(_members(leader, ns, dirs)) - set(members):
            break
    return held


def cpu_ns(held: Held) -> dict[int, int] | None:
    """The CPU time the processes ``held`` holds used so far (ns), keyed by pid: ``{0:
    ns}`` from the sandbox's cgroup where the kernel counts it there (workers.cgroup
    ``cpu_ns``: processes that exited included), else each member's ``utime + stime +
    cutime + cstime`` from ``/proc/PID/stat`` (its threads and reaped children included,
    at the clock tick's resolution: ``SC_CLK_TCK``, 10 ms on Linux). None when nothing is
    held. Never raises."""
    if held.frozen is None and not held.pids:
        return None
    total = Cgroup(held.dirs, "").cpu_ns() if held.dirs else None
    if total is not None:
        return {0: total}
    tick_ns = 10**9 // os.sysconf("SC_CLK_TCK")
    members = [p for p in held.pids if p > 0]
    members += [p for p in _members(held.leader, held.ns, held.dirs) if p not in members]
    return {p: t * tick_ns for p in members if (t := _ticks(p)) is not None}


def used_ms(held: Held) -> float | None:
    """CPU time (ms) the processes ``held`` holds used since the hold was complete: 0 for
    a hold that held (a frozen or stopped process runs nothing); more when one escaped it
    (a thread stuck in the kernel while its cgroup froze, processes that continue each
    other faster than they are stopped). Processes met only now count from 0. None when
    nothing is held or it cannot be read. Never raises."""
    now = cpu_ns(held)
    if now is None or held.cpu0 is None:
        return None
    return sum(max(0, ns - held.cpu0.get(p, 0)) for p, ns in now.items()) / 1e6


def _ticks(pid: int) -> int | None:
    """``utime + stime + cutime + cstime`` of process ``pid`` (clock ticks), None when gone."""
    after = _fields(f"/proc/{pid}/stat")
    try:
        return None if after is None else sum(int(x) for x in after[11:15])
    except ValueError:
        return None


def _members(leader: int, ns: str | None, cgroup_dirs: tuple[str, ...]) -> list[int]:
    """The processes of the sandbox: those in its cgroup and in PID namespace ``ns``, or in
    process group ``leader`` where ``ns`` is None."""
    return list(dict.fromkeys([*in_cgroup(cgroup_dirs), *(
        q for q in _pids() if (_ns(q) == ns if ns is not None else (
            (st := _stat(q)) is not None and st[2] == leader)))]))


def _stop(pids: list[int]) -> list[int]:
    """Send ``SIGSTOP`` to processes ``pids``, and again to each found running, until two
    looks in a row over them all find each stopped (or gone). One look is not enough: it
    reads one process after another, and one read stopped may be continued meanwhile by
    one not stopped yet when it was read but stopped by the time it is (on the H200 host's
    16 cores, two processes that continued each other outran one look). After a look that
    found all stopped, a process continued since stays running (a continued process's
    pending stop is dropped) and the next look sees it. Waits up to :data:`STOP_WAIT_S` s.

    Returns:
        the ones not stopped in the last look."""
    deadline, left, calm = time.monotonic() + STOP_WAIT_S, list(pids), 0
    while True:
        for p in left:
            try:
                os.kill(p, signal.SIGSTOP)
            except OSError:
                pass  # gone
        time.sleep(0.001)
        left = [p for p in pids if not _stopped(p)]
        calm = 0 if left else calm + 1
        if calm == 2 or time.monotonic() > deadline:
            return left


def _stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped or dead (``T``, ``t``, ``Z``,
    ``X`` in ``/proc/PID/task/TID/stat``), or it is gone: a leader that ended by
    ``pthread_exit`` shows ``Z`` in ``/proc/PID/stat`` while its other threads run."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        after = _fields(f"/proc/{pid}/task/{tid}/stat")
        if after and after[0] not in "TtZX":  # None, []: gone
            return False
    return True


def release(held: Held | None) -> None:
    """Let the processes :func:`hold` held go on (thawed, or ``SIGCONT`` to each that is
    still the sandbox's: in its cgroup, PID namespace or process group; a held process
    killed meanwhile may have left its pid to another). Never raises."""
    if held is None:
        return
    if held.frozen is not None:
        held.frozen.thaw()
    cgroup = set(in_cgroup(held.dirs))
    for p in held.pids:
        try:
            if p < 0:
                os.killpg(-p, signal.SIGCONT)
            elif p in cgroup or _of_sandbox(held, p):  # not a pid used again
                os.kill(p, signal.SIGCONT)
        except OSError:
            pass


def _of_sandbox(held: Held, pid: int) -> bool:
    """Whether process ``pid`` is in the PID namespace ``held`` holds, or, where it has
    none, in its leader's process group."""
    if held.ns is not None:
        return _ns(pid) == held.ns
    st = _stat(pid)
    return st is not None and st[2] == held.leader
