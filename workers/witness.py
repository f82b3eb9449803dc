"""Witness turns: a contender's outputs checked, and its claimed time bounded, from outside
its process (CPU devices).

In a contest in turns (workers.turns) each contender's harness measures its own samples and
checks its own outputs, in the process that runs its code: code there can write the answer
pipe, take every turn, spend in each the time it claims and compute nothing (red-team round
17: all-zero outputs, 5 us samples, `ok` at 36x). So, after its rounds, each contender on a
CPU device takes :data:`TURNS` witness turns, none of which its own process can judge:

1. A judge, a harness of the device that never loads candidate code (workers.device_actor's
   second harness, the outside clock's), draws :data:`TURNS` input sets from seeds of
   ``os.urandom`` with their expected outputs and tolerance bands, and lays each out in
   memory with its outputs poisoned (``Harness.witness_sets``).
2. The contender's harness names its buffers' addresses ("witness"); while its sandbox is
   held still (workers.hold: frozen), the device actor copies the judge's input set and
   poisoned outputs there (``process_vm_readv(2)``/``process_vm_writev(2)``: no file or
   descriptor shared with the sandbox) and reads the CPU time its harness's main thread
   and its cgroup have used (:func:`thread_cpu_ns`, workers.cgroup).
3. "go": the harness calls ``solve`` once and says "witnessed" with its own time of the
   call; the sandbox is held again, its CPU time read again, and its outputs copied back
   into the judge's memory. The judge then checks every contender's outputs of every
   witness turn (``Harness.witness_check``).

So outputs are right only if they were computed, inside the turn, from values that existed
nowhere in the contender's process before it; and the CPU time spent in the turn, by a
clock no process in the sandbox can set back, bounds from below what the contender's
samples may claim (:func:`judged`). The judge takes the same turns with no call first
(``Harness.witness_null``): what the protocol itself costs its main thread.

Where the host does not let the device actor read another process's memory (``ptrace``
access: Yama's ``ptrace_scope``, no ``CAP_SYS_PTRACE``), the judge's own null turns fail
to copy and no contender is held to witness turns: the contest's answer says so
(``witness`` ``none: why``). The GPU backend has none: outputs in device memory (see
docs/judge-outside.md).

Stdlib and workers only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass, field
from typing import Any

from workers.status import Status

TURNS = 4  # witness turns per contender: the CPU bound takes the least of them
# a contender is `suspect` when the least main-thread CPU time of its witness turns, less the
# judge's least with no call, exceeds its median sample by more than this factor and margin
# (ms): its samples claim less than the CPU its calls used. The factor covers a witness
# call's cache state (its inputs written by the actor: no flush) against flushed samples;
# the margin the main thread's work around the call (json, pipes) from one process to the
# other.
CPU_FACTOR = 2.0
CPU_MARGIN_MS = 0.05
# the same test of the cgroup's CPU time over the CPUs the sandbox may use, with this much
# more margin (ms) for the threads a parallel runtime leaves spinning after the call until
# the sandbox is held (libgomp spins up to GOMP_SPINCOUNT, 300000 iterations, by default)
SPIN_MARGIN_MS = 1.0


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
for _f in ("process_vm_readv", "process_vm_writev"):
    getattr(_libc, _f).restype = ctypes.c_ssize_t
    getattr(_libc, _f).argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                                   ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong]


def vm_copy(src_pid: int, src: int, dst_pid: int, dst: int, nbytes: int) -> str:
    """Copy ``nbytes`` bytes from address ``src`` of process ``src_pid`` to address ``dst``
    of process ``dst_pid`` (host pids), through this process (``process_vm_readv(2)``, then
    ``process_vm_writev(2)``). Returns "" when every byte was copied, else why not (the
    system call's error, or a short copy: a range not mapped, or mapped without the
    access). Never raises."""
    buf = ctypes.create_string_buffer(max(nbytes, 1))
    for fn, pid, addr in ((_libc.process_vm_readv, src_pid, src),
                          (_libc.process_vm_writev, dst_pid, dst)):
        done = 0
        while done < nbytes:
            local = _IoVec(ctypes.addressof(buf) + done, nbytes - done)
            remote = _IoVec(addr + done, nbytes - done)
            n = fn(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            if n <= 0:
                err = ctypes.get_errno() if n < 0 else 0
                what = "read" if fn is _libc.process_vm_readv else "write"
                return (f"could not {what} {nbytes} bytes at {addr:#x} of process {pid} "
                        f"({os.strerror(err) if err else 'nothing copied'})")
            done += n
    return ""


def thread_cpu_ns(pid: int | None) -> int | None:
    """CPU time (ns) used so far by the main thread of process ``pid`` (a host pid), from
    ``/proc/PID/task/PID/schedstat`` (its first field: time on a CPU, ns); None when it
    cannot be read. Never raises."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def cpus_of(pid: int | None) -> int:
    """How many CPUs process ``pid`` may run on (its affinity); this machine's count when it
    cannot be read."""
    try:
        return len(os.sched_getaffinity(pid or 0))
    except OSError:
        return os.cpu_count() or 1


Spans = dict[str, list[int]]  # buffer name -> [address, bytes]


@dataclass
class Plan:
    """Where one contender's witness turns come from and go to, in the judge's memory:
    ``judge``, the judge harness's host pid; per witness turn ``k``, ``src[k]`` (``inputs``
    and ``outputs``: the input set's values, outputs poisoned) and ``dst[k]`` (outputs:
    where the contender's outputs are copied for the judge's check; None for the judge's
    own null turns)."""

    judge: int
    src: list[dict[str, Spans]]
    dst: list[Spans] | None = None

    def put(self, pid: int, said: dict[str, Any], k: int) -> str:
        """Witness turn ``k``'s inputs and poisoned outputs copied into process ``pid`` at
        the buffers it named (``said``: its "witness" message). Returns "" or why not."""
        if k >= len(self.src):
            return f"a witness turn ({k + 1}) beyond the {len(self.src)} asked for"
        why = _same_spans(said, self.src[k])
        for part in ("inputs", "outputs"):
            for name, (addr, n) in self.src[k][part].items():
                why = why or vm_copy(self.judge, addr, pid, int(said[part][name][0]), n)
        return why

    def take(self, pid: int, said: dict[str, Any], k: int) -> str:
        """Witness turn ``k``'s outputs copied from process ``pid`` (the buffers it named)
        into the judge's memory. Returns "" or why not."""
        if self.dst is None:
            return ""
        why = ""
        for name, (addr, n) in self.dst[k].items():
            why = why or vm_copy(pid, int(said["outputs"][name][0]), self.judge, addr, n)
        return why


def _same_spans(said: dict[str, Any], want: dict[str, Spans]) -> str:
    """Why the buffers a harness named (``said``) are not those of the judge's input set
    ``want``: other names, or other sizes; "" when they are."""
    for part in ("inputs", "outputs"):
        got = said.get(part)
        if not isinstance(got, dict) or set(got) != set(want[part]) or any(
                not isinstance(v, list) or len(v) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in v)
                or v[1] != want[part][n][1] for n, v in got.items()):
            return f"its harness named other {part} than its problem's: {str(got)[:200]}"
    return ""


@dataclass
class Record:
    """One witness turn as the device actor saw it: the harness's own time of its call
    (``ms``), the CPU time its main thread (``main_cpu_ms``) and its sandbox's cgroup
    (``cpu_ms``, None where not counted) used from the "go" to the hold after its
    "witnessed", and why its buffers could not be written or read ("": they were)."""

    ms: float | None
    main_cpu_ms: float | None
    cpu_ms: float | None
    error: str = ""


@dataclass
class Taking:
    """A sandbox's witness turns in progress (workers.sandbox): the plan, the turns taken
    (:class:`Record`), and the one open: the message that began it, why its buffers could
    not be written, and the CPU times read before its "go" (ns)."""

    plan: Plan
    records: list[Record] = field(default_factory=list)
    said: dict[str, Any] | None = None
    why: str = ""
    cpu0: tuple[int | None, int | None] = (None, None)
    stray: int = 0


def _ms(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else (b - a) / 1e6


def ended(t: Taking, msg: dict[str, Any], cpu1: tuple[int | None, int | None], why: str
          ) -> None:
    """The open witness turn of ``t`` ended with "witnessed" ``msg``; ``cpu1``: the CPU
    times (main thread, cgroup; ns) read once held; ``why``: its outputs could not be
    read. A "witnessed" with no turn open is counted as stray."""
    if t.said is None:
        t.stray += 1
        return
    ms = msg.get("ms")
    t.records.append(Record(
        float(ms) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else None,
        _ms(t.cpu0[0], cpu1[0]), _ms(t.cpu0[1], cpu1[1]), t.why or why))
    t.said = None


def null_cost(records: list[Record]) -> tuple[float, float | None] | str:
    """The judge's null turns (no call): the least main-thread and cgroup CPU (ms) a witness
    turn costs with nothing in it; or why witness turns cannot be had on this host (its
    buffers could not be copied, its CPU time not read)."""
    if not records:
        return "the judge took no witness turn"
    if bad := [r.error for r in records if r.error]:
        return f"the device actor cannot reach a harness's memory: {bad[0]}"
    mains = [r.main_cpu_ms for r in records]
    if any(m is None for m in mains):
        return "a harness's thread CPU time cannot be read (/proc/PID/task/PID/schedstat)"
    cg = [r.cpu_ms for r in records]
    return min(m for m in mains if m is not None), (
        None if any(c is None for c in cg) else min(c for c in cg if c is not None))


def judged(res: dict[str, Any], records: list[Record], stray: int, verdicts: list[str],
           null: tuple[float, float | None], cpus: int) -> dict[str, Any]:
    """A contender's contest answer ``res`` held to its witness turns (module docstring):
    ``records`` (:class:`Record`, one per turn taken), ``stray`` "witnessed" messages with no
    turn open, the judge's ``verdicts`` on its outputs ("" per turn whose outputs passed),
    ``null`` (:func:`null_cost`) and ``cpus`` it may run on. ``wrong_result`` when an output
    read from its memory is wrong; ``suspect`` when it took other turns than asked, named
    buffers the actor could not write or read, or its samples claim less time than the CPU
    its witness calls used (least of the turns, less the null turn's, over
    :data:`CPU_FACTOR` and :data:`CPU_MARGIN_MS`; the cgroup's over its CPUs with
    :data:`SPIN_MARGIN_MS` more). Answers other than ``ok`` are returned as they are."""
    if res.get("status") != Status.OK:
        return res
    if len(records) != len(verdicts) or stray:
        return _suspect(f"it took {len(records)} witness turns ({stray} stray) of the "
                        f"{len(verdicts)} asked for")
    if bad := [r.error for r in records if r.error]:
        return _suspect(f"its witness turn's buffers: {bad[0]}")
    if wrong := [v for v in verdicts if v]:
        return {"status": Status.WRONG_RESULT, "error": (
            f"{len(wrong)} of {len(verdicts)} calls on fresh input sets, written into its "
            f"memory and its outputs read back by the device actor, were wrong: {wrong[0][:300]}")}
    median = float(res["results"][0]["median_ms"])
    allowed = CPU_FACTOR * median + CPU_MARGIN_MS
    main = min(r.main_cpu_ms or 0.0 for r in records) - null[0]
    if main > allowed:
        return _suspect(f"its calls on fresh inputs used at least {main:.4g} ms of CPU on "
                        f"the thread that called solve, its samples' median is {median:.4g} ms")
    cg = [r.cpu_ms for r in records]
    if null[1] is not None and all(c is not None for c in cg):
        spent = (min(c for c in cg if c is not None) - null[1]) / max(cpus, 1)
        if spent > allowed + SPIN_MARGIN_MS:
            return _suspect(f"its calls on fresh inputs used at least {spent:.4g} ms of CPU "
                            f"per CPU it may use ({cpus}), its samples' median is "
                            f"{median:.4g} ms")
    return res


def _suspect(why: str) -> dict[str, Any]:
    return {"status": Status.SUSPECT, "error": f"{why}: its answer is not what its harness "
            "measured (code in its process can write the answer)"}
