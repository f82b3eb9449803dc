"""The outside clock's rule: a contender's own figures against a clock it cannot reach.

A contender of the loop's closing contest reports its median from inside the harness process
that loads its code (CUDA events or ``time.perf_counter_ns`` there), which native code in that
process can patch (e.g. ``PyRun_SimpleString`` scaling ``time.perf_counter_ns``, or
``torch.cuda.Event.elapsed_time``). So the closing also runs ``n`` of its calls, each prepared as a
sample is (an input set loaded, outputs poisoned, the cache flushed), and the same ``n``
preparations alone, each block timed by the device actor's process from its "go", which
the harness's calls wait for, to the answer (workers.harness ``clock``, workers.sandbox
``outside_ms``); the calls' figure is the first block less the shorter of the
preparations' blocks made just before and after it (CPU time on a CPU device of one
thread: :func:`outside_blocks`). The preparations alone are timed in a
second harness of the device that never loads a candidate's code (workers.device_actor
``clock``): in the candidate's own, a thread it left there slowed them on purpose (attack
MODE 13), and a longer preparations' block shortens the figure, the direction that clears
a patched clock. Meanwhile every process of the candidate's sandbox is stopped
(workers.hold): threads or processes it left spinning there would slow that block too.
The samples' clock takes in the call's own host cost too (a GPU's events record the
idle gap while the host launches a small kernel; the CPU's clock brackets the ctypes
call); what the block adds per call is the loop's own few microseconds and the noise of
two blocks' preparations: ``CLOCK_FACTOR`` x the median, ``CLOCK_SLACK_MS`` and
``CLOCK_PREP_NOISE`` cover them. A contender whose outside figure per call exceeds that
limit on every one of ``CLOCK_TRIES`` blocks is ``suspect``: its own clock ran slow by
that factor or more.

Where a call costs far less than its preparation, half the preparations' noise is more
than the factor allows and a block cannot resolve the call (a 1/100 clock on a 1M-element
vector add cleared every block, red-team round 11): on a CPU device the tries are then paced
(:func:`paced_blocks`), each call timed on its own after its preparation and checked, and
the median call less the median of the same messages around no call is judged.

The factor is wide on purpose: a shared CPU machine stretches a block of calls (a sum, every
preemption in it) more than a median of samples (a preempted sample is an outlier), and a
block is judged suspect only when all its tries agree. A clock slowed by less than the
factor is not caught; a harness whose code the candidate rewrote can forge the "clock"
message too (workers/harness.py lists what the design cannot see).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from workers import hold
from workers.status import Status

CLOCK_BLOCK_MS = 50.0  # the block's length, ms, at the contender's claimed median
CLOCK_MAX_CALLS = 2000  # a block's calls at most (a tiny claimed median asks for many)
CLOCK_MIN_CALLS = 3
CLOCK_FACTOR = 4.0  # outside ms per call over the contest median beyond which it is suspect
CLOCK_SLACK_MS = 0.01  # ms per call the block's own loop may add to an honest call
CLOCK_PREP_NOISE = 0.5  # of a call's preparation time: how far apart two blocks' may be
CLOCK_TRIES = 3  # blocks; suspect only when every one of them says so
CLOCK_PACED_CALLS = 15  # a paced try's calls, each timed on its own (their median judged)
# ms a paced call's figure may add to an honest call: its "go" and "called" messages handled
# in two processes, beyond what the same messages take in the harness that makes no call
CLOCK_PACED_SLACK_MS = 0.05
# ms a CPU device's contest sample may add to the same call in the contender's own job
# (kopt.loop.contests ``own_figures``): a contest turn's sample is the first call after the
# turn's wait, made through a harness path (Python, ctypes) gone cold meanwhile, as a paced
# call is. On this project's 2-core CI machine an honest 4 us vector add (4096 floats) was
# 0.021-0.031 ms a sample side by side against 0.004-0.006 ms in its own job: past 4x +
# CLOCK_SLACK_MS, both honest contenders of a closing were `suspect` in 2 of 2 sweeps.
OWN_CPU_SLACK_MS = CLOCK_PACED_SLACK_MS
# CPU time (ms) the contender's held sandbox may use during a preparations' block
# (workers.hold: a frozen or stopped process uses none); what one that escaped the hold used
# is taken from the preparations, and lengthens their block
HELD_CPU_MS = hold.HELD_CPU_MS

# one block of a contender's: (calls, loads_only[, paced]) -> the device actor's answer
# (``status``, ``error``, ``outside_ms``; paced: ``outside_calls_ms``: workers.device_actor
# ``clock``)
ClockJob = Callable[..., dict[str, Any]]
# one block: (outside ms of its calls with their preparations less the block of the same
# preparations alone made around it that :func:`outside_blocks` takes, its calls, that
# block's ms)
Block = tuple[float, int, float]


def clock_calls(median_ms: float, prep_ms: float = 0.0) -> int:
    """The calls of one outside-clock block for a contender whose contest median is
    ``median_ms`` (ms) and whose call takes ``prep_ms`` to prepare (an input set loaded,
    outputs poisoned, the cache flushed; measured outside): enough to last
    :data:`CLOCK_BLOCK_MS` at that median, within [:data:`CLOCK_MIN_CALLS`,
    :data:`CLOCK_MAX_CALLS`].

    Raises:
        ValueError: ``median_ms`` is not positive."""
    if not median_ms or median_ms <= 0:
        raise ValueError(f"median_ms must be positive, got {median_ms!r}")
    n = round(CLOCK_BLOCK_MS / (median_ms + max(0.0, prep_ms)))
    return int(min(CLOCK_MAX_CALLS, max(CLOCK_MIN_CALLS, n)))


def clock_limit_ms(median_ms: float, prep_ms: float = 0.0) -> float:
    """The most an honest call may take by the outside clock (ms per call) when its
    contest median is ``median_ms`` and its preparation takes ``prep_ms`` a call:
    ``CLOCK_FACTOR * median_ms + CLOCK_SLACK_MS + CLOCK_PREP_NOISE * prep_ms`` (the calls'
    figure is a difference of two blocks, each with the preparations: where preparing a
    call costs far more than the call, the clock cannot resolve the call, and says less)."""
    return CLOCK_FACTOR * median_ms + CLOCK_SLACK_MS + CLOCK_PREP_NOISE * max(0.0, prep_ms)


def clock_suspect(median_ms: float, blocks: list[Block]) -> str:
    """Why a contender is ``suspect`` (one line), or "" when it is not: ``blocks`` holds
    each try's :data:`Block`; suspect when every block's outside ms per call is above
    :func:`clock_limit_ms` of its contest ``median_ms`` and that block's preparations. No
    blocks: not suspect.

    Raises:
        ValueError: ``median_ms`` is not positive, or a block has no calls."""
    if not blocks:
        return ""
    if any(n <= 0 for _, n, _ in blocks):
        raise ValueError(f"a block without calls: {blocks!r}")
    per_call = [ms / n for ms, n, _ in blocks]
    limits = [clock_limit_ms(median_ms, prep / n) for _, n, prep in blocks]
    if any(x <= lim for x, lim in zip(per_call, limits)):
        return ""
    return (f"its contest median is {median_ms:.4g} ms by its own process's clock, but "
            f"{len(blocks)} blocks of its calls took "
            f"{', '.join(f'{x:.4g}' for x in per_call)} ms a call by a clock outside its "
            f"process (more than {CLOCK_FACTOR:g}x the median + {CLOCK_SLACK_MS:g} ms, "
            f"{max(limits):.4g} ms at most with the preparations' noise): its process's "
            "clock does not tell its time")


class ClockError(Exception):
    """The preparations alone could not be timed (their harness failed): the device's
    fault, not the contender's."""


def outside_blocks(clock: ClockJob, median_ms: float, paced: bool = False
                   ) -> tuple[list[Block], str]:
    """The outside clock's blocks of one contender whose contest median is ``median_ms``
    (ms). ``clock(n, loads_only)`` runs one block on its device: ``n`` calls each prepared
    as a sample, or with ``loads_only`` the preparations alone (in a harness that holds no
    candidate's code: workers.device_actor ``clock``). First :data:`CLOCK_MIN_CALLS`
    preparations size the blocks (:func:`clock_calls`, and no more calls than the harness
    has input sets of their own for: its ``clock_sets``); then the preparations alone, and
    up to :data:`CLOCK_TRIES` tries, each a block of calls and the preparations alone
    again, stopping at the first after which the blocks clear (:func:`clock_suspect`).
    A try's figure is its calls' block less the shorter of the two preparations' blocks
    around it (a lengthened one would shorten the figure). Where the device answers
    ``outside_cpu_ms`` (a CPU device of one thread whose sandboxes' CPU time is counted,
    workers.sandbox), the figure is that difference
    in the two sandboxes' CPU time instead: on a loaded machine a block's wall time is
    mostly other processes' turns (8x an honest kernel's median at a load average of 12 on
    2 cores), and a burst of it in a preparations' block cleared a patched clock, while
    every process of the contender's sandbox, its threads and children included, counts
    in its CPU time, which none of them can lower (a kernel that runs more threads than
    its device's one is timed by all the CPU it used). Load lengthens CPU time too (a
    shared cache, the memory bus, the scheduler's own switches), far less than the wall.

    Returns (the blocks, "") or (the blocks so far, ``"status: why"``) when a block of its
    calls failed (wrong outputs, a crash: the contender's fault), or ``suspect`` when its
    sandbox used more than :data:`HELD_CPU_MS` of CPU while held for a preparations'
    block (the device's ``held_cpu_ms``: code it left running escaped the hold), or when
    every try's block of its calls took less than the preparations alone
    (:func:`_short`; a try that did is left out of the blocks, and a later one judges).

    With ``paced`` (a device whose harness times each call on its own: the CPU's), where
    the preparations' noise would outweigh what the factor allows (:func:`needs_paced`),
    the tries are paced instead (:func:`paced_blocks`).

    Raises:
        ClockError: a block of the preparations alone failed.
        ValueError: ``median_ms`` is not positive."""
    sizing = _preparations(clock, CLOCK_MIN_CALLS)
    if escaped := _escaped(sizing):
        return [], escaped
    if paced and needs_paced(median_ms, (sizing[0] if sizing[1] is None else sizing[1])
                             / CLOCK_MIN_CALLS):
        return paced_blocks(clock, median_ms, sizing[3])
    return _block_tries(clock, median_ms, sizing)


def _block_tries(clock: ClockJob, median_ms: float, sizing: tuple
                 ) -> tuple[list[Block], str]:
    """:func:`outside_blocks`' tries of blocks of calls, sized by the preparations alone
    ``sizing`` (:func:`_preparations` of :data:`CLOCK_MIN_CALLS`); returns as it does."""
    n = clock_calls(median_ms, sizing[0] / CLOCK_MIN_CALLS)
    if sizing[3]:  # each call on an input set of its own (workers.harness ``clock_sets``)
        n = max(CLOCK_MIN_CALLS, min(n, sizing[3]))
    before = _preparations(clock, n)
    blocks: list[Block] = []
    short = ""
    for _ in range(CLOCK_TRIES):
        if escaped := _escaped(before):
            return blocks, escaped
        res = clock(n, False)
        if res.get("status") != "ok" or res.get("outside_ms") is None:
            return blocks, (f"{res.get('status')}: outside the contest, "
                            f"{res.get('error') or 'no outside figure'}")
        after = _preparations(clock, n)
        if escaped := _escaped(after):
            return blocks, escaped
        whole, prep = _figures(res, before, after)
        cut = _short(whole, _shortest(res, before, after), n)
        before = after
        if cut:  # a try that neither clears nor counts: suspect when every try is so
            short = cut
            continue
        blocks.append((max(0.0, whole - prep), n, prep))
        if not clock_suspect(median_ms, blocks):
            break
    return blocks, short if not blocks else ""


def needs_paced(median_ms: float, prep_ms: float) -> bool:
    """Whether a block cannot resolve a call of ``median_ms`` (ms) whose preparation takes
    ``prep_ms``: the preparations' noise it allows (``CLOCK_PREP_NOISE * prep_ms``) is more
    than the factor allows (``CLOCK_FACTOR * median_ms``). A red-team candidate with a
    1/100 clock on a vector add of 1M elements (0.35 ms a call, 13 ms to prepare one: 6.5
    ms of allowance) cleared every block and was named best (round 11)."""
    return CLOCK_PREP_NOISE * max(0.0, prep_ms) > CLOCK_FACTOR * median_ms


def paced_blocks(clock: ClockJob, median_ms: float, sets: int | None = None
                 ) -> tuple[list[Block], str]:
    """Up to :data:`CLOCK_TRIES` paced tries of a contender whose contest median is
    ``median_ms`` (ms): :data:`CLOCK_PACED_CALLS` calls (no more than ``sets``, the input
    sets of their own a block may have, and :data:`CLOCK_MIN_CALLS` at least), each
    prepared as a sample before its own clock starts (workers.harness ``_clock_paced``),
    timed from the sandbox's "go" to the harness's "called", every call's outputs checked
    after the try; and as many of the same messages around no call in the harness that
    holds no candidate's code (the candidate's sandbox held meanwhile, as for a block).
    A try's figure is the calls' median less the median of those without a call, in the
    CPU time of each harness's threads where both answers hold it (workers.sandbox
    ``_thread_group_ns``: precise, and not lengthened by other processes' turns; a cgroup's
    count moves in 4 ms scheduler ticks on the 2-core machine, more than such a call),
    else by the wall (beside two test suites, calls without work spread from 0.02 to 0.5
    ms there, and a burst of load during those alone cleared a 1/100 clock). Its
    :data:`Block` is ``(figure, 1, CLOCK_PACED_SLACK_MS / CLOCK_PREP_NOISE)``, so that
    :func:`clock_suspect` judges it against ``CLOCK_FACTOR * median_ms + CLOCK_SLACK_MS +
    CLOCK_PACED_SLACK_MS``. Tries stop at the first that clears. Returns (the blocks, "")
    or (the blocks so far, ``"status: why"``) as :func:`outside_blocks` does.

    Raises:
        ClockError: the calls without work could not be timed."""
    n = CLOCK_PACED_CALLS if not sets else max(CLOCK_MIN_CALLS, min(CLOCK_PACED_CALLS, sets))
    blocks: list[Block] = []
    for _ in range(CLOCK_TRIES):
        alone = clock(n, True, True)
        if alone.get("status") != "ok" or not alone.get("outside_calls_ms"):
            raise ClockError(f"the preparations alone, each timed for the clock outside the "
                             f"contender's process: {alone.get('status')}: "
                             f"{alone.get('error') or 'no outside figure'}")
        held = alone.get("held_cpu_ms")
        if escaped := _escaped((0.0, None, None if held is None else float(held), None)):
            return blocks, escaped
        res = clock(n, False, True)
        if res.get("status") != "ok":
            return blocks, (f"{res.get('status')}: outside the contest, "
                            f"{res.get('error') or 'no outside figure'}")
        if not res.get("outside_calls_ms"):
            return blocks, (f"{Status.SUSPECT}: outside the contest, its calls were not "
                            "timed one by one as its harness was asked to")
        key = ("outside_calls_cpu_ms" if res.get("outside_calls_cpu_ms")
               and alone.get("outside_calls_cpu_ms") else "outside_calls_ms")
        fig = statistics.median(res[key]) - statistics.median(alone[key])
        blocks.append((max(0.0, fig), 1, CLOCK_PACED_SLACK_MS / CLOCK_PREP_NOISE))
        if not clock_suspect(median_ms, blocks):
            break
    return blocks, ""


def _figures(res: dict[str, Any], before: tuple, after: tuple) -> tuple[float, float]:
    """A try's (block of calls, preparations alone) in ms: from the device's answer ``res``
    and the preparations' blocks before and after it (:func:`_preparations`). Wall: the
    shorter preparations' block (one lengthened, by load or by a hog the contender's live
    harness runs, would shorten the figure); where all three count CPU time, what load
    beside the sandboxes lengthens least, the longer one (the limit's preparations' noise
    covers it)."""
    cpu = _cpu_ms(res, before, after)
    if cpu:
        return float(cpu[0]), max(cpu[1], cpu[2])
    return float(res["outside_ms"]), min(before[0], after[0])


def _cpu_ms(res: dict[str, Any], before: tuple, after: tuple) -> list[float] | None:
    """The CPU time (ms) of a try's block of calls (``res``) and of the preparations' blocks
    ``before`` and ``after`` it, or None where any of the three was not counted (then the
    wall figures are the ones to compare)."""
    cpu = [x for x in (res.get("outside_cpu_ms"), before[1], after[1]) if x is not None]
    return cpu if len(cpu) == 3 else None


def _shortest(res: dict[str, Any], before: tuple, after: tuple) -> float:
    """The shorter of the preparations' blocks ``before`` and ``after`` a try (ms, in the
    figure :func:`_figures` takes for the try's answer ``res``: CPU time where all three
    count it, else wall): what :func:`_short` holds the calls' block against, so that one
    preparations' block lengthened by load cannot make an honest block of calls look cut
    short."""
    cpu = _cpu_ms(res, before, after)
    return min(cpu[1], cpu[2]) if cpu else min(before[0], after[0])


def _short(whole: float, prep: float, n: int) -> str:
    """``"suspect: why"`` when a block of ``n`` calls with their preparations took
    ``whole`` ms, less than ``1 - CLOCK_PREP_NOISE`` of the ``prep`` ms the same
    preparations alone took (the noise two blocks of preparations may differ by), else "":
    the sandbox's clock stopped before the calls were done (a "clocked" message sent early:
    code in the harness's process can call its ``progress``), or their preparations were
    cut short."""
    if whole >= (1.0 - CLOCK_PREP_NOISE) * prep:
        return ""
    return (f"{Status.SUSPECT}: outside the contest, a block of its {n} calls with their "
            f"preparations took {whole:.4g} ms, less than the {prep:.4g} ms the same "
            "preparations alone took: its process said the calls were done before they were")


def _escaped(prep: tuple[float, float | None, float | None, int | None]) -> str:
    """``"suspect: why"`` when the contender's sandbox used more than :data:`HELD_CPU_MS`
    of CPU while held for the preparations' block ``prep`` (:func:`_preparations`), else
    "": code it left running escaped the hold (workers.hold) and took the CPUs from that
    block, which shortens the figure its clock is judged by."""
    held = prep[2]
    if held is None or held <= HELD_CPU_MS:
        return ""
    return (f"{Status.SUSPECT}: outside the contest, its sandbox used {held:.4g} ms of CPU "
            f"while held still for a block of preparations timed beside it (more than "
            f"{HELD_CPU_MS:g} ms; a frozen or stopped process uses none): code it left "
            "running escaped the hold and took the CPUs from the block its clock is "
            "judged by")


def _preparations(clock: ClockJob, n: int
                  ) -> tuple[float, float | None, float | None, int | None]:
    """Outside ms of ``n`` preparations alone, their harness's CPU ms where it is counted,
    the CPU ms the contender's held sandbox used meanwhile where it can be read (each
    None otherwise), and the most calls a block can make each on an input set of its own
    (``clock_sets``; None: not said). Raises ClockError when they failed."""
    res = clock(n, True)
    if res.get("status") != "ok" or res.get("outside_ms") is None:
        raise ClockError(f"the preparations alone, timed for the clock outside the "
                         f"contender's process: {res.get('status')}: "
                         f"{res.get('error') or 'no outside figure'}")
    cpu, held, sets = res.get("outside_cpu_ms"), res.get("held_cpu_ms"), res.get("clock_sets")
    return (float(res["outside_ms"]), None if cpu is None else float(cpu),
            None if held is None else float(held), None if sets is None else int(sets))
