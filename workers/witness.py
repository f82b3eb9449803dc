"""Witness turns: a contender's outputs checked, and its claimed time bounded, from outside
its process (CPU devices).

In a contest in turns (workers.turns) each contender's harness measures its own samples and
checks its own outputs, in the process that runs its code: code there can write the answer
pipe, take every turn, spend in each the time it claims and compute nothing (red-team round
17: all-zero outputs, 5 us samples, `ok` at 36x). So, after its rounds, each contender on a
CPU device takes :data:`TURNS` witness turns, none of which its own process can judge:

1. A judge, a harness of the device that never loads candidate code (workers.device_actor's
   second harness, the outside clock's), draws :data:`MAX_TURNS` input sets from seeds of
   ``os.urandom`` with their expected outputs and tolerance bands, and lays each out in
   memory with its outputs poisoned (``Harness.witness``).
2. The contender's harness names its buffers' addresses and its samples' median
   ("witness"); while its sandbox is held still (workers.hold: frozen), the device actor
   copies the judge's input set and poisoned outputs there (``process_vm_readv(2)``/
   ``process_vm_writev(2)``: no file or descriptor shared with the sandbox) and reads the
   CPU time of every thread of the sandbox's processes and of its cgroup
   (:func:`threads_cpu_ns`, workers.cgroup).
3. "go": the harness calls ``solve`` once and says "witnessed" with its own time of the
   call; its outputs are read at once, the sandbox is held again, its CPU times read
   again, and its outputs, found unchanged, copied into the judge's memory. The judge
   checks every contender's outputs of every witness turn after the contest.

So outputs are right only if they were computed, inside the turn, from values that existed
nowhere in the contender's process before it; and on a device of one thread the CPU time
spent in the turn, by clocks no process in the sandbox can set back, bounds from below what
the contender's samples may claim (:func:`cpu_why`): :data:`MAX_TURNS` turns are taken, and
one must keep within it. The judge takes the same turns
with no call first (``null``): what the protocol itself costs a harness.

Where the host does not let the device actor read another process's memory (``ptrace``
access: Yama's ``ptrace_scope``, no ``CAP_SYS_PTRACE``), the judge's own null turns fail
to copy and no contender is held to witness turns: the contest's answer says so
(``witness`` ``none: why``). A GPU's witness turns are the same protocol through device
memory: workers.witness_gpu.

Stdlib and workers only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from workers import devmem
from workers.status import Status

# witness turns per contender: TURNS on a device of several threads (its outputs checked),
# MAX_TURNS on one of one thread, whose CPU figures count (a turn's CPU time is lengthened by
# what else the machine runs -- a virtual machine's stolen time, reclaim -- never shortened:
# the least of more turns is the closer); the judge's null turns: TURNS (the bound's margin
# below was set with the least of 4)
TURNS = 4
MAX_TURNS = 8
# a contender is `suspect` when the least main-thread CPU time of its witness turns, less the
# judge's least with no call, exceeds its median sample by more than this factor and margin
# (ms): its samples claim less than the CPU its calls used. The factor covers a witness
# call's cache state (its inputs written by the actor: no flush) against flushed samples;
# the margin the main thread's work around the call (json, pipes) from one process to the
# other.
CPU_FACTOR = 2.0
CPU_MARGIN_MS = 0.05
# an answer :func:`judged` made `suspect` by the CPU bound (:func:`cpu_why`) carries this
# key: its contest is taken once more, in fresh sandboxes (workers.device_actor), before
# that verdict stands. Beside a loaded suite on this project's 2-core CI machine an honest
# 0.018 ms kernel's 8 witness turns each cost 0.17-0.27 ms of main-thread CPU (its call
# 0.035-0.043 ms by its own clock, the rest the protocol's wake, pipes and holds, run cold),
# against the judge's null turns' least of 0.078 ms: `suspect` by 0.016 ms, in 1 of 12
# sweeps; a lie's work is there in every turn of every take
BOUND = "cpu_bound"
# an answer :func:`unchecked` set aside (the judge's check failed) carries this key
UNCHECKED = "unchecked"
# the memory mappings an output may lie in (split_outputs): a buffer split page by page is
# slow to read; an honest one lay in 2 (the allocator's memory across two mappings)
MAX_MAPPINGS = 4
# the null turn's wall time taken off a turn's is at most its main-thread CPU + this (ms):
# the messages' latency on a quiet machine; a null turn timed on a loaded one (0.38 ms, its
# least of 4) let a helper's 0.17 ms of work through (red-team trial, this CI machine)
NULL_WALL_SLACK_MS = 0.1


class IoVec(ctypes.Structure):
    """C's ``struct iovec``: an address and a length in bytes (``process_vm_readv(2)``)."""

    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
for _f in ("process_vm_readv", "process_vm_writev"):
    getattr(_libc, _f).restype = ctypes.c_ssize_t
    getattr(_libc, _f).argtypes = [ctypes.c_int, ctypes.POINTER(IoVec), ctypes.c_ulong,
                                   ctypes.POINTER(IoVec), ctypes.c_ulong, ctypes.c_ulong]


def _vm(fn: Any, pid: int, addr: int, buf: Any, nbytes: int) -> str:
    """``nbytes`` bytes moved between ``buf`` (a ctypes buffer of this process) and address
    ``addr`` of process ``pid`` by ``fn`` (``process_vm_readv`` or ``process_vm_writev``),
    short transfers continued; "" when all moved, else why not."""
    done = 0
    while done < nbytes:
        local = IoVec(ctypes.addressof(buf) + done, nbytes - done)
        remote = IoVec(addr + done, nbytes - done)
        n = fn(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n <= 0:
            err = ctypes.get_errno() if n < 0 else 0
            what = "read" if fn is _libc.process_vm_readv else "write"
            return (f"could not {what} {nbytes} bytes at {addr:#x} of process {pid} "
                    f"({os.strerror(err) if err else 'nothing copied'})")
        done += n
    return ""


def vm_read(pid: int, addr: int, nbytes: int) -> bytes | str:
    """``nbytes`` bytes at address ``addr`` of process ``pid`` (a host pid), read through
    ``process_vm_readv(2)``; or why not (the system call's error, or nothing read: a range
    not mapped, or mapped without the access). Never raises."""
    buf = ctypes.create_string_buffer(max(nbytes, 1))
    why = _vm(_libc.process_vm_readv, pid, addr, buf, nbytes)
    return why or buf.raw[:nbytes]


def vm_copy(src_pid: int, src: int, dst_pid: int, dst: int, nbytes: int) -> str:
    """Copy ``nbytes`` bytes from address ``src`` of process ``src_pid`` to address ``dst``
    of process ``dst_pid`` (host pids), through this process (:func:`vm_read`, then
    ``process_vm_writev(2)``). Returns "" when every byte was copied, else why not. Never
    raises."""
    buf = ctypes.create_string_buffer(max(nbytes, 1))
    return (_vm(_libc.process_vm_readv, src_pid, src, buf, nbytes)
            or _vm(_libc.process_vm_writev, dst_pid, dst, buf, nbytes))


def describe() -> str:
    """``kopt env``'s ``witness``: whether this node's device actors can take witness turns
    (:func:`host_why`), and GPU ones (descriptors taken, the GPU's driver bindings
    loaded); else ``none: why``."""
    if not (gpu_why := host_why(gpu=True)):  # what the CPU's check asks, and more
        return ("yes: process_vm_readv and pidfd_getfd reach a child; GPU buffers through "
                "cuda-python's driver bindings")
    if why := host_why():
        return f"none: {why} (contests run without witness turns)"
    return f"yes: process_vm_readv reaches a child; no GPU witness turns: {gpu_why}"


def host_why(gpu: bool = False) -> str:
    """Why this host cannot take witness turns ("" when it can), tried on a child process
    as the device actor tries a harness: its memory read with ``process_vm_readv``, its
    thread's CPU time read (``schedstat``), the calling thread's children read; with
    ``gpu``, a descriptor taken with ``pidfd_getfd`` (the GPU's buffers, workers.devmem)
    and the GPU's driver bindings loaded too. What no candidate's process can change:
    where this says "", a judge's failure in a contest is another process's doing
    (workers.judge ``prepare``). The child (``cat``, reading the pipe this process holds)
    lives until this returns, however long it is kept waiting. Raises OSError where the
    child cannot be started."""
    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        why = reach(child.pid, fd=gpu)
        if not why and not threads_cpu_ns([child.pid]):
            why = "a child's thread CPU time cannot be read (/proc/PID/task/PID/schedstat)"
        if not why and str(child.pid) not in _children():
            why = ("a process's children cannot be read (/proc/PID/task/TID/children, "
                   "CONFIG_PROC_CHILDREN): a sandbox's harness cannot be found")
    finally:
        child.kill()
        child.wait()
    if why or not gpu:
        return why
    try:
        devmem._driver()
    except devmem.DevMemError as e:
        return str(e)
    return ""


def _children() -> list[str]:
    """The child pids of the calling thread (``/proc/thread-self/children``: a child is
    its forking thread's, and no other thread's exit can hide it); [] where they cannot be
    read."""
    try:
        with open("/proc/thread-self/children") as f:
            return f.read().split()
    except OSError:
        return []


def reach(pid: int, fd: bool = True) -> str:
    """Why this process cannot read process ``pid``'s memory or (with ``fd``: a GPU's
    buffers) take its descriptor 0 ("": it can). Both need ptrace access to ``pid``: under
    Yama's ``ptrace_scope`` 1 (Ubuntu's default) only to a descendant, without
    ``CAP_SYS_PTRACE`` (Documentation/admin-guide/LSM/Yama.rst)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            addr = int(f.readline().split("-", 1)[0], 16)
    except (OSError, ValueError) as e:
        return f"process {pid}'s memory map cannot be read ({e})"
    got = vm_read(pid, addr, 1)
    if isinstance(got, str):
        return got
    if not fd:
        return ""
    try:
        os.close(devmem.take_fd(pid, 0))
    except devmem.DevMemError as e:
        return str(e)
    return ""


def threads_cpu_ns(pids: list[int]) -> dict[int, int]:
    """CPU time (ns) used so far by every thread of processes ``pids`` (host pids), keyed
    by thread id, from ``/proc/PID/task/TID/schedstat`` (its first field: time on a CPU,
    ns); threads that cannot be read are left out. Never raises."""
    out: dict[int, int] = {}
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except (OSError, ValueError):
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    out[tid] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return out


def asleep(start: bool) -> float:
    """How long this thread has been asleep so far (ms): the time since an arbitrary start
    (``time.perf_counter``) less its CPU time (``time.thread_time``, exact when read) and
    its time waiting for a CPU (``/proc/thread-self/schedstat``'s second field, ns: up to
    date while the thread runs), so that the difference of a ``start`` reading and a later
    one is what the thread spent blocked between them -- on a lock, a page, another process
    -- and neither its own work nor a loaded machine's run queue. A start reading takes the
    clock first and the rest after, the other the rest first: a preemption amid a reading
    lengthens that difference, never shortens it (read in one order for both, one that fell
    in the second reading took 0.37 ms off: red-team round 22). Where schedstat cannot be
    read, only the CPU time is taken off."""
    if start:
        now, cpu, queued = time.perf_counter(), time.thread_time(), _queued_ns()
    else:
        queued, cpu = _queued_ns(), time.thread_time()
        now = time.perf_counter()
    return (now - cpu - queued / 1e9) * 1e3


def _queued_ns() -> int:
    """This thread's time waiting on a run queue so far (ns; 0 where it cannot be read)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


class Null(NamedTuple):
    """What a witness turn with no call costs the judge (ms, the least of its null turns):
    its main thread's CPU, its cgroup's CPU (None where not counted), the turn's wall time,
    what the first read of its outputs waited, the writing of its input set while held,
    and a GPU's probe once it was held again (:func:`null_cost`)."""

    main_cpu_ms: float = 0.0
    cpu_ms: float | None = None
    wall_ms: float = 0.0
    read_ms: float = 0.0
    put_ms: float = 0.0
    after_ms: float = 0.0


Spans = dict[str, list[int]]  # buffer name -> [address, bytes]


@dataclass
class Plan:
    """Where one contender's witness turns come from and go to, in the judge's memory:
    ``judge``, the judge harness's host pid; per witness turn ``k``, ``src[k]`` (``inputs``
    and ``outputs``: the input set's values, outputs poisoned) and ``dst[k]`` (outputs:
    where the contender's outputs are copied for the judge's check; None for the judge's
    own null turns); ``null``, what a turn with no call costs (:func:`null_cost`), for
    :meth:`Taking.more`; ``bounded``: its samples are held to the CPU its witness calls
    used (a device of one thread; with several, threads that spin at a barrier while a
    peer is preempted used 1.75 ms of CPU in each of 12 turns of an honest 0.16 ms OpenMP
    kernel on a loaded 2-core machine, so its outputs alone are checked)."""

    judge: int
    src: list[dict[str, Spans]]
    dst: list[Spans] | None = None
    null: Null = Null()
    bounded: bool = True

    @property
    def turns(self) -> int:
        """The witness turns asked for: one per input set drawn (``src``); before any is
        drawn, :data:`MAX_TURNS` on a device of one thread, :data:`TURNS` on one of several
        (a GPU judge may draw fewer where more would not fit: workers.harness
        ``WITNESS_SHARE``)."""
        return len(self.src) if self.src else MAX_TURNS if self.bounded else TURNS

    def put(self, pid: int, said: dict[str, Any], k: int) -> str:
        """Witness turn ``k``'s inputs and poisoned outputs copied into process ``pid`` at
        the buffers it named (``said``: its "witness" message). Returns "" or why not."""
        if k >= len(self.src):
            return f"a witness turn ({k + 1}) beyond the {len(self.src)} asked for"
        why = same_spans(said, self.src[k])
        for part in ("inputs", "outputs"):
            for name, (addr, n) in self.src[k][part].items():
                why = why or vm_copy(self.judge, addr, pid, int(said[part][name][0]), n)
        return why

    # when the last :meth:`put`'s clock started (time.perf_counter), where the turn's wall
    # time counts from there and not from its "go" (a GPU's: workers.witness_gpu)
    started: float | None = None
    # turns before which the device never became idle (a GPU's: work of a held process
    # went on, whose no one can say)
    stuck: int = 0

    def after(self) -> float:
        """A probe of the device once the turn's sandbox is held again (ms; 0.0 on a CPU)."""
        return 0.0

    def early(self, pid: int, said: dict[str, Any], k: int) -> tuple[bytes | str, float]:
        """The outputs process ``pid`` named (``said``) as its call left them, read as soon
        as its harness said "witnessed", before it is held (:func:`read_outputs`), and how
        long that read waited (ms, :func:`asleep`: for a lock the contender holds, red-team
        round 21; not for memory a team of its threads left dirty in their caches -- an
        honest two-thread kernel's 16 MB read took 1-2 ms more than the null turn's, all of
        it copying -- nor for this thread's wait for a CPU on a loaded machine)."""
        r0 = asleep(start=True)
        got = read_outputs(pid, said)
        return got, max(0.0, asleep(start=False) - r0)

    def bound_why(self, records: list[Record], median: float) -> str:
        """Why ``records`` say the contender's calls take more than its ``median`` sample
        claims (:func:`cpu_why`), "" when they do not."""
        return cpu_why(records, median, self.null)

    def figure(self, records: list[Record]) -> float:
        """The contender's witnessed figure (ms, :func:`witnessed`)."""
        return witnessed(records, self.null)

    def close(self) -> None:
        """What the plan holds let go (nothing on a CPU device)."""

    def take(self, pid: int, said: dict[str, Any], k: int, early: bytes | str) -> str:
        """Witness turn ``k``'s outputs copied from process ``pid`` (the buffers it named)
        into the judge's memory, once they are found the same as ``early`` (read when its
        harness said "witnessed", before it was held: outputs a thread of its own still
        wrote after its call returned are not its call's). Returns "" or why not."""
        if self.dst is None:
            return ""
        if isinstance(early, str):
            return early
        if split := split_outputs(pid, said):
            return split
        now = read_outputs(pid, said)
        if isinstance(now, str):
            return now
        if now != early:
            return ("its outputs changed after its harness said its call was done (written "
                    "after the call returned)")
        why = ""
        for name, (addr, n) in self.dst[k].items():
            why = why or vm_copy(pid, int(said["outputs"][name][0]), self.judge, addr, n)
        return why


def split_outputs(pid: int, said: dict[str, Any]) -> str:
    """Why the outputs process ``pid`` named (``said``) do not each lie in at most
    :data:`MAX_MAPPINGS` memory mappings (``/proc/PID/maps``), "" when they do. One split
    into many (``madvise``/``mprotect`` page by page) makes the device actor's read of it
    slow on the actor's own CPU, which a turn does not count (only what the read waited),
    so that a helper could finish the outputs ahead of that read. A buffer its harness
    allocated is in one, or two where the allocator's memory straddles two mappings (an
    honest kernel's output in the CI suite: `suspect` when one was asked for)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = [[int(x, 16) for x in ln.split(None, 1)[0].split("-")] for ln in f]
    except (OSError, ValueError) as e:
        return f"its memory map could not be read ({e})"
    for name in sorted(said["outputs"]):
        addr, n = (int(v) for v in said["outputs"][name])
        if not 1 <= (k := sum(1 for lo, hi in maps if lo < addr + n and hi > addr)) \
                <= MAX_MAPPINGS:
            return (f"its output {name} lies in {k} memory mappings, not 1 to "
                    f"{MAX_MAPPINGS} (a buffer split page by page is slow to read)")
    return ""


def read_outputs(pid: int, said: dict[str, Any]) -> bytes | str:
    """The bytes of the outputs process ``pid`` named (``said``: a "witness" message whose
    buffers were found to be its problem's), in name order; or why they cannot be read."""
    out = []
    for name in sorted(said["outputs"]):
        addr, n = (int(v) for v in said["outputs"][name])
        got = vm_read(pid, addr, n)
        if isinstance(got, str):
            return got
        out.append(got)
    return b"".join(out)


def same_spans(said: dict[str, Any], want: dict[str, Spans]) -> str:
    """Why the buffers a harness named (``said``) are not those of the judge's input set
    ``want``: other names, or other sizes; "" when they are."""
    for part in ("inputs", "outputs"):
        got = said.get(part)
        if not isinstance(got, dict) or set(got) != set(want[part]) or any(
                not isinstance(v, list) or len(v) != len(want[part][n])
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                or v[1:] != want[part][n][1:] for n, v in got.items()):
            return f"its harness named other {part} than its problem's: {str(got)[:200]}"
    return ""


@dataclass
class Record:
    """One witness turn as the device actor saw it: the harness's own time of its call
    (``ms``); the CPU time (ms) used from before its "go" to the hold after its
    "witnessed" by its harness's main thread (``main_cpu_ms``, None where it cannot be
    read), by its busiest other thread (``thread_cpu_ms``: of every process in the
    sandbox; a thread born in the turn counts from 0), and by its sandbox's cgroup
    (``cpu_ms``: :class:`Snapshot`'s ``cgroup``); why its buffers could not be written or read
    ("": they were); the turn's wall time by the device actor's clock, from its "go" to the
    arrival of its "witnessed" (``wall_ms``); and how long the actor's first read of its
    outputs waited (``read_ms``: its wall time less the actor thread's CPU time and its
    wait for a CPU in it, :func:`asleep`; on a GPU its wall time, workers.witness_gpu);
    how long writing its input set took while it was held (``put_ms``); and on a GPU how
    long the device actor's probe of the device took once it was held again (``after_ms``,
    workers.witness_gpu: work of its own still running)."""

    ms: float | None
    main_cpu_ms: float | None
    cpu_ms: float | None
    error: str = ""
    thread_cpu_ms: float = 0.0
    wall_ms: float = 0.0
    read_ms: float = 0.0
    put_ms: float = 0.0
    after_ms: float = 0.0


@dataclass
class Snapshot:
    """The CPU times of a sandbox read while it is held (ns): per thread id, its harness's
    main thread's id, and the cgroup's total (where no cgroup counts the sandbox, its
    harness process's own, threads that ended included; None where neither is read)."""

    threads: dict[int, int]
    main: int
    cgroup: int | None


@dataclass
class Taking:
    """A sandbox's witness turns in progress (workers.sandbox): the plan, the turns taken
    (:class:`Record`), and the one open: the message that began it, why its buffers could
    not be written, and the CPU times read before its "go" (ns); ``median_ms``, the median
    its harness said its samples have (in its first "witness" message; a later one that
    says another counts as stray); ``stray``, messages out of turn."""

    plan: Plan
    records: list[Record] = field(default_factory=list)
    said: dict[str, Any] | None = None
    why: str = ""
    cpu0: Snapshot | None = None
    stray: int = 0
    median_ms: float | None = None
    go_at: float = 0.0  # when its "go" was sent (time.perf_counter, s)
    put_ms: float = 0.0  # how long the open turn's input set took to write (ms)

    def more(self, said: dict[str, Any]) -> bool:
        """Whether a witness turn begun by ``said`` (a "witness" message) is to be taken:
        fewer than :data:`MAX_TURNS` taken on a device of one thread (``Plan.bounded``),
        :data:`TURNS` on one of several. Notes the median ``said`` names (the first that
        is a number; another later counts as stray)."""
        m = said.get("median_ms")
        if self.median_ms is None and _time(m):
            self.median_ms = float(m)
        elif m != self.median_ms:
            self.stray += 1
        return len(self.records) < self.plan.turns


def _time(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def ended(t: Taking, msg: dict[str, Any], cpu1: Snapshot, why: str, wall_ms: float = 0.0,
          read_ms: float = 0.0, after_ms: float = 0.0) -> None:
    """The open witness turn of ``t`` ended with "witnessed" ``msg``; ``cpu1``: the CPU
    times read once held; ``why``: its outputs could not be read; ``wall_ms``: from its
    "go" to the arrival of "witnessed". A "witnessed" with no turn open is counted as
    stray."""
    if t.said is None or t.cpu0 is None:
        t.stray += 1
        return
    a, ms = t.cpu0, msg.get("ms")
    used = {tid: ns - a.threads.get(tid, 0) for tid, ns in cpu1.threads.items()}
    main = used.pop(cpu1.main, None) if cpu1.main in a.threads else None
    t.records.append(Record(
        float(ms) if _time(ms) else None, None if main is None else main / 1e6,
        None if a.cgroup is None or cpu1.cgroup is None else (cpu1.cgroup - a.cgroup) / 1e6,
        t.why or why, max(used.values(), default=0) / 1e6, wall_ms, read_ms, t.put_ms,
        after_ms))
    t.said = None


def null_cost(records: list[Record]) -> Null | str:
    """The judge's null turns (no call): the least main-thread CPU, cgroup CPU (None where
    not counted), wall time and wait of the first read of the outputs (ms) a witness turn
    costs with nothing in it; or why witness turns cannot be had on this host (its buffers
    could not be copied, its CPU time not read)."""
    if not records:
        return "the judge took no witness turn"
    if bad := [r.error for r in records if r.error]:
        return f"the device actor cannot reach a harness's memory: {bad[0]}"
    mains = [r.main_cpu_ms for r in records]
    if any(m is None for m in mains):
        return "a harness's thread CPU time cannot be read (/proc/PID/task/PID/schedstat)"
    cg = [r.cpu_ms for r in records]
    return Null(min(m for m in mains if m is not None),
                None if any(c is None for c in cg) else min(c for c in cg if c is not None),
                min(r.wall_ms for r in records), min(r.read_ms for r in records),
                min(r.put_ms for r in records), min(r.after_ms for r in records))


def judged(res: dict[str, Any], t: Taking | None, verdicts: list[str]) -> dict[str, Any]:
    """A contender's contest answer ``res`` held to its witness turns (module docstring):
    ``t``, what its sandbox saw of them (:class:`Taking`, None: none), the judge's
    ``verdicts`` on their outputs ("" per input set whose outputs passed, in turn order).
    ``wrong_result`` when an output read from its memory is
    wrong; ``suspect`` when it took too few turns or stray ones, said another median than
    its answer's, named buffers the actor could not write or read, or its samples claim
    less time than the CPU its witness calls used (:func:`cpu_why`, where its plan is
    ``bounded``). Answers other than ``ok`` are returned as they are."""
    if res.get("status") != Status.OK:
        return res
    records = t.records if t else []
    need = t.plan.turns if t is not None else MAX_TURNS
    if len(records) < min(need, len(verdicts)) or t is None or t.stray:
        return _suspect(f"it took {len(records)} witness turns ({t.stray if t else 0} "
                        f"stray) of the {need} asked for")
    if bad := [r.error for r in records if r.error]:
        return _suspect(f"its witness turn's buffers: {bad[0]}")
    if wrong := [v for v in verdicts[:len(records)] if v]:
        return {"status": Status.WRONG_RESULT, "error": (
            f"{len(wrong)} of {len(records)} calls on fresh input sets, written into its "
            f"memory and its outputs read back by the device actor, were wrong: "
            f"{wrong[0][:300]}")}
    median = float(res["results"][0]["median_ms"])
    if t.median_ms is None or abs(t.median_ms - median) > 1e-9 * max(median, 1.0):
        return _suspect(f"its harness said a median of {t.median_ms} ms before its witness "
                        f"turns, {median:.6g} ms after")
    if not t.plan.bounded:
        return res
    why = t.plan.bound_why(records, median)
    if why:
        return {**_suspect(why), BOUND: True}
    first = {**res["results"][0], "actor_ms": t.plan.figure(records)}
    return {**res, "results": [first, *res["results"][1:]]}


def witnessed(records: list[Record], null: Null) -> float:
    """A contender's witnessed figure (ms), kept in its answer as ``actor_ms`` beside the
    median its samples claim: the least, over its witness turns ``records``, of the larger
    of its main thread's CPU and the lesser of its other threads' (or whole cgroup's) CPU
    and its wall time, each less the judge's null turn (:func:`_over`); the figure
    :func:`cpu_why` bounds. Every part is lengthened by load, never shortened: beside a
    loaded suite the honest kernels of tests/fixtures/honest came to 0.68x-1.68x of their
    median (8 turns, this project's 2-core CI machine), so it is evidence, not their rank."""
    return min(max(a, min(b, c)) for a, b, c in (_over(r, null) for r in records))


def cpu_why(records: list[Record], median: float, null: Null) -> str:
    """Why witness turns ``records`` say a contender's calls take more than its ``median``
    sample (ms) claims, "" when they do not: so when no single turn keeps within
    :data:`CPU_FACTOR` x ``median`` + :data:`CPU_MARGIN_MS` its main thread's CPU, less
    the judge's null turn's (``null``), and either both
    its busiest other thread's CPU and its whole cgroup's, less the null turn's, or its
    wall time, less the null turn's. One turn for all (a red-team contender kept each
    figure within the bound in a different turn); the cgroup's counts threads and
    processes that ended within the turn (red-team round 19). The wall time stands in for
    the other threads' CPU where a kernel's own threads (an OpenMP ``num_threads``, the
    README's vector_add sweep) share its work: their CPU adds up, the call's wall does not,
    and a helper doing a call's work makes the call last as long as that work. The why
    given is the turn that came closest. A turn whose main thread could not be read
    fails."""
    allowed = CPU_FACTOR * median + CPU_MARGIN_MS
    if not records or any(r.main_cpu_ms is None for r in records):
        return "its harness's main thread was not the one that began its witness turns"
    main, others, wall = min((_over(r, null) for r in records),
                             key=lambda x: max(x[0], min(x[1], x[2])))
    if max(main, min(others, wall)) <= allowed:
        return ""
    n = len(records)
    if main > allowed:
        where = f"{main:.4g} ms of CPU on the thread that called solve"
    else:
        where = (f"{others:.4g} ms of CPU on its other threads or its sandbox's processes "
                 f"together, and {wall:.4g} ms of wall time")
    return (f"its calls on fresh inputs used at least {where} in each of {n} witness turns, "
            f"its samples' median is {median:.4g} ms")


def _over(r: Record, null: Null) -> tuple[float, float, float]:
    """One witness turn's figures (ms) as :func:`cpu_why` bounds them: main-thread CPU less
    the null turn's; the larger of its busiest other thread's CPU and its cgroup's less the
    null turn's (0 where not counted); wall time less the null turn's, at most its
    main-thread CPU + :data:`NULL_WALL_SLACK_MS`, plus what the first read of its outputs
    waited beyond the null turn's (a red-team contender said "witnessed" before its work
    was done and held the read back on its memory map's lock with a long ``mprotect`` until
    its helper had finished: 9x, 3 of 13 runs). Waited, not took: the read's own copying
    is longer where a team of the contender's threads left its outputs dirty in their
    caches (1-2 ms on 16 MB, an honest two-thread kernel on an H200 host)."""
    cg = 0.0 if r.cpu_ms is None or null.cpu_ms is None else r.cpu_ms - null.cpu_ms
    wall = (r.wall_ms - min(null.wall_ms, null.main_cpu_ms + NULL_WALL_SLACK_MS)
            + max(0.0, r.read_ms - null.read_ms))
    return ((r.main_cpu_ms or 0.0) - null.main_cpu_ms, max(r.thread_cpu_ms, cg), wall)


def unchecked(res: dict[str, Any], why: str) -> dict[str, Any]:
    """A contender's answer ``res`` when its contest's witness turns could not be judged
    (``why``: the judge's check of their outputs failed, or the GPU stayed busy before a
    turn with work no one can be blamed for): an ``ok`` becomes ``error``, not taken, and
    marked :data:`UNCHECKED` (its contest is taken again with a new judge, and a second such
    take is the device's failure: workers.device_actor); others as they are. No answer
    passes unjudged: a red-team review had one contender exhaust the GPU's memory after
    its turns so that the judge's check failed and every answer stood unchecked."""
    if res.get("status") != Status.OK:
        return res
    return {"status": Status.ERROR, "error": f"its witness turns were not judged ({why}): "
            "its answer is not taken", UNCHECKED: True}


def bound_failed(answers: list[dict[str, Any]]) -> bool:
    """Whether any of a contest's ``answers`` (:func:`judged`'s) is ``suspect`` by the CPU
    bound alone (:func:`cpu_why`): its outputs right, its samples claiming less than the
    CPU its witness calls used."""
    return any(a.get(BOUND) for a in answers)


def _suspect(why: str) -> dict[str, Any]:
    return {"status": Status.SUSPECT, "error": f"{why}: its answer is not what its harness "
            "measured (code in its process can write the answer)"}
