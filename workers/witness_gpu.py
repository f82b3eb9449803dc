"""Witness turns on a GPU: a contender's outputs checked, and its claimed time bounded, from
outside its process, through device memory (workers.devmem).

The protocol is the CPU's (workers.witness), with the judge's input sets and the
contender's buffers in device memory. Each harness allocates its witness buffers as
exportable device memory and names them by file descriptor; the device actor maps them in
a context of its own (``pidfd_getfd(2)``, ``cuMemImportFromShareableHandle``), and there:

1. while the contender's sandbox is held still, and once the GPU is idle (work a held rival
   left queued ends first), copies a fresh input set of the judge (seeds from
   ``os.urandom``, drawn by a harness that never loads candidate code) and poisoned outputs
   into its buffers; the turn's clock starts with these copies;
2. "go": the harness calls ``solve`` once, waits for the device, and says "witnessed";
3. at once copies its outputs into the judge's memory (``read_ms``: the copy waits behind
   any kernel of the contender still running) for the judge to check after the contest,
   and, the sandbox held again, probes the device (``after_ms``).

So outputs are right only if they were computed from values that existed nowhere in the
contender's memory before its turn, and the turn's wall time, from its inputs' copy to the
outputs in the judge's hands, less the judge's own turns with no call, bounds from below
what its samples may claim (:func:`gpu_why`). A contender's process is stopped while held,
but its kernels are not: one still running when the device is probed after its turn
shares the GPU with the actor's write, which then waits for the device's time slice (a
4-byte copy took 2.1-2.4 ms beside such a kernel, 0.010 ms on an idle GPU; H100,
docs/verified/2026-12-06-session44.md): :data:`BUSY_MS` more than after the judge's turns is
`suspect`. Only the contender that just took its turn can have started work since the GPU
was last found idle, so a rival's leftover work frames nobody.

What it cannot see: lies within :data:`GPU_FACTOR` x median + :data:`GPU_MARGIN_MS` (a
turn's wall time carries the messages' latency, a launch, a synchronize and a switch of
contexts the samples' CUDA events do not: on an H100 a claim of a tenth of a 1.53 ms kernel
is caught, one of 0.65 ms passes; an honest 0.29 ms kernel was witnessed at 0.51 ms, under the
margin, so any claim for it passes), and work on another GPU.

Stdlib, workers and cuda-python's driver bindings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from workers import devmem, witness
from workers.witness import Record

# a contender is `suspect` when its least witness turn's wall time, less the judge's, exceeds
# its median sample by more than this factor and margin (ms). The margin covers what a turn
# holds beyond the kernel's samples: a launch, a synchronize, the messages' wake-ups and
# the device's switch from the actor's context to the contender's. Measured on an H100
# host: an honest 1.53 ms kernel (flushed samples) was witnessed at 1.79-1.82 ms, its own
# process timing each witness call at 1.70-1.75 ms; 0.26-0.29 ms more, of which how much is
# fixed and how much grows with the kernel was not measured, so the margin leaves room for
# it on the smallest kernels; a 0.29 ms kernel of the README's sweep was witnessed 0.22 ms
# above its median (docs/verified/2026-12-06-session45.md). The factor is the CPU's
# (workers.witness ``CPU_FACTOR``)
GPU_FACTOR = 2.0
GPU_MARGIN_MS = 0.5
# a probe of the device (a 4-byte write of the actor's own, workers.devmem ``probe_ms``)
# this much longer (ms) than after the judge's turns: another context's kernel ran (the
# device's time slice between contexts: 2.1-2.4 ms on an H100, against 0.010 ms idle).
# Before each turn's input set is written the GPU must be idle by that test, for at most
# IDLE_LIMIT_MS (work a held rival left queued ends first)
BUSY_MS = 1.0
IDLE_LIMIT_MS = 1000.0
# a descriptor a harness names is below this (its own; the kernel's default limit is 1024)
MAX_FD = 1 << 20


# a driver's refusal another process can bring about (by holding the device's memory): no
# answer about the host (:func:`host_why`)
TRANSIENT = ("OUT_OF_MEMORY", "out of memory")


# a host is found unable to take witness turns only when this many checks in a row say so
# (:func:`host_why`: a glitch, a thread ending mid-read, must not turn them off for good)
HOST_TRIES = 3


def host_why(gpu: bool = True) -> str | None:
    """Why this host cannot take witness turns (on a GPU with ``gpu``): "" when it can,
    else why (workers.witness ``host_why``, then on a GPU workers.devmem ``self_check``:
    exportable device memory made and exported), said by :data:`HOST_TRIES` checks in a
    row (any that finds it able: ""); or None when that cannot be told now (the driver ran
    out of memory, or the check could not start: something another process can bring
    about, so the contest is taken as on a host that can, a judge that fails leaving it
    unjudged, and the host asked again). Never raises."""
    why: str | None = None
    for _ in range(HOST_TRIES):
        why = _host_once(gpu)
        if not why:
            return why
    return why


def _host_once(gpu: bool) -> str | None:
    """One check of :func:`host_why`."""
    try:
        if why := witness.host_why(gpu=gpu):
            return why
        if gpu:
            devmem.self_check()
    except devmem.DevMemError as e:
        return None if any(w in str(e) for w in TRANSIENT) else f"the driver: {e}"
    except Exception:  # noqa: BLE001 -- a child not started (EAGAIN): asked again later
        return None
    return ""


@dataclass
class DevicePlan(witness.Plan):
    """A :class:`workers.witness.Plan` whose spans name device memory: ``[file descriptor,
    bytes, the allocation's bytes]`` in the judge's process (``judge``, its host pid) and in
    the contender's. Every copy is the device actor's (workers.devmem ``importer``)."""

    unsure: bool = False  # the GPU did not become idle before the last put

    def put(self, pid: int, said: dict[str, Any], k: int) -> str:
        """Witness turn ``k``'s inputs and poisoned outputs copied into the device buffers
        process ``pid`` named (``said``), the copies waited for, once the GPU is idle (work
        a held rival left queued does not lengthen this turn; waited for up to
        :data:`IDLE_LIMIT_MS`). The turn's clock starts with the copies (:attr:`started`):
        work of the contender's own that its inputs' arrival sets off on the device, while
        its process is still held, is inside it. Returns "" or why not."""
        self.started = None
        if k >= len(self.src):
            return f"a witness turn ({k + 1}) beyond the {len(self.src)} asked for"
        if why := witness.same_spans(said, self.src[k]) or _bad_fds(said):
            return why
        try:
            imp = devmem.importer()
            self.unsure = not imp.idle(IDLE_LIMIT_MS, BUSY_MS)
            self.stuck += self.unsure
            pairs = [(imp.address(pid, said[part][name][0], n, said[part][name][2]),
                      imp.address(self.judge, fd, n, size), n)
                     for part in ("inputs", "outputs")
                     for name, (fd, n, size) in self.src[k][part].items()]
            self.started = time.perf_counter()
            for dst, src, n in pairs:
                imp.copy(dst, src, n)
            imp.sync()
        except devmem.DevMemError as e:
            return str(e)
        return ""

    def after(self) -> float:
        """The device probed once the turn's sandbox is held again (ms, workers.devmem
        ``Importer.probe_ms``, the lesser of two: a preemption of this thread lengthens one,
        a kernel of the contender's own still running makes each a time slice). 0.0 where
        the GPU was not idle before the turn (the work may be a held rival's) or cannot be
        probed."""
        if self.unsure:
            return 0.0
        try:
            imp = devmem.importer()
            return min(imp.probe_ms(), imp.probe_ms())
        except devmem.DevMemError:
            return 0.0

    def early(self, pid: int, said: dict[str, Any], k: int) -> tuple[bytes | str, float]:
        """Turn ``k``'s outputs copied from process ``pid``'s buffers into the judge's
        (``dst[k]``) as soon as its harness said "witnessed", and the copy's wall time (ms,
        a kernel of its own still running delays it). Returns (b"" or why not, ms)."""
        t0 = time.perf_counter()
        why = ""
        if self.dst is not None:
            try:
                imp = devmem.importer()
                imp.current()
                for name, (fd, n, size) in self.dst[k].items():
                    theirs = said["outputs"][name]
                    imp.copy(imp.address(self.judge, fd, n, size),
                             imp.address(pid, theirs[0], n, theirs[2]), n)
                imp.sync()
            except devmem.DevMemError as e:
                why = str(e)
        return why or b"", (time.perf_counter() - t0) * 1e3

    def take(self, pid: int, said: dict[str, Any], k: int, early: bytes | str) -> str:
        """Nothing more once held: :meth:`early` copied the outputs (its why, if any)."""
        return early if isinstance(early, str) else ""

    def bound_why(self, records: list[Record], median: float) -> str:
        """:func:`gpu_why`."""
        return gpu_why(records, median, self.null)

    def figure(self, records: list[Record]) -> float:
        """The least witness turn's figure (ms, :func:`over`)."""
        return min(over(r, self.null) for r in records)

    def close(self) -> None:
        """Every buffer the device actor mapped let go (workers.devmem ``Importer.release``).
        """
        devmem.importer().release()


def _bad_fds(said: dict[str, Any]) -> str:
    """Why the descriptors a harness named are not plausible ones of its own ("" when they
    are): each in [0, :data:`MAX_FD`), and no two buffers but an in/out pair on one."""
    seen: dict[int, str] = {}
    for part in ("inputs", "outputs"):
        for name, span in said[part].items():
            fd = span[0]
            if not 0 <= fd < MAX_FD:
                return f"its harness named descriptor {fd} for {name}"
            if seen.setdefault(fd, name) != name:
                return f"its harness named descriptor {fd} for both {seen[fd]} and {name}"
    return ""


def over(r: Record, null: witness.Null) -> float:
    """One GPU witness turn's figure (ms): its wall time from the copy of its inputs to
    "witnessed" less the judge's null turn's, plus what the copy of its outputs took beyond
    the null turn's."""
    return r.wall_ms - null.wall_ms + max(0.0, r.read_ms - null.read_ms)


def gpu_why(records: list[Record], median: float, null: witness.Null) -> str:
    """Why GPU witness turns ``records`` say a contender's calls take more than its
    ``median`` sample (ms) claims, or that its own work ran on the device while it was held;
    "" when neither. ``null``: the judge's turns with no call."""
    if not records:
        return "it took no witness turn"
    busy = max(records, key=lambda r: r.after_ms)
    if busy.after_ms - null.after_ms > BUSY_MS:
        return (f"a kernel of its own still ran on the device after a witness turn ended: "
                f"a write of the device actor's then took {busy.after_ms:.3g} ms, after the "
                f"judge's turns {null.after_ms:.3g} ms")
    least = min(over(r, null) for r in records)
    if least <= GPU_FACTOR * median + GPU_MARGIN_MS:
        return ""
    return (f"its calls on fresh inputs took at least {least:.4g} ms of wall time (less the "
            f"judge's turns with no call) in each of {len(records)} witness turns, its "
            f"samples' median is {median:.4g} ms")
