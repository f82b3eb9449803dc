"""The outside clock's rule: a contender's own figures against a clock it cannot reach.

A contender of the loop's closing contest reports its median from inside the harness process
that loads its code (CUDA events or ``time.perf_counter_ns`` there), which native code in that
process can patch (e.g. ``PyRun_SimpleString`` scaling ``time.perf_counter_ns``, or
``torch.cuda.Event.elapsed_time``). So the closing also runs ``n`` of its calls, each prepared as a
sample is (an input set loaded, outputs poisoned, the cache flushed), and the same ``n``
preparations alone, each block timed by the device actor's process from its "go", which
the harness's calls wait for, to the answer (workers.harness ``clock``, workers.sandbox
``outside_ms``); the calls' figure is the first block less the shortest preparations'
block of its tries (load only lengthens a block, but a preparations' block lengthened, by
load or on purpose by a thread the candidate left in the harness, shortens the figure: not
guarded yet beyond taking the shortest). The samples' clock takes in the call's
own host cost too (a GPU's events record the idle gap while the host launches a small
kernel; the CPU's clock brackets the ctypes call); what the block adds per call is the
loop's own few microseconds and the noise of two blocks' preparations:
``CLOCK_FACTOR`` x the median, ``CLOCK_SLACK_MS`` and ``CLOCK_PREP_NOISE`` cover them. A
contender whose outside figure per call exceeds that limit on every one of
``CLOCK_TRIES`` blocks is ``suspect``: its own clock ran slow by that factor or more.

The factor is wide on purpose: a shared CPU machine stretches a block of calls (a sum, every
preemption in it) more than a median of samples (a preempted sample is an outlier), and a
block is judged suspect only when all its tries agree. A clock slowed by less than the
factor is not caught; a harness whose code the candidate rewrote can forge the "clock"
message too (workers/harness.py lists what the design cannot see).
"""

from __future__ import annotations

CLOCK_BLOCK_MS = 50.0  # the block's length, ms, at the contender's claimed median
CLOCK_MAX_CALLS = 2000  # a block's calls at most (a tiny claimed median asks for many)
CLOCK_MIN_CALLS = 3
CLOCK_FACTOR = 4.0  # outside ms per call over the contest median beyond which it is suspect
CLOCK_SLACK_MS = 0.01  # ms per call the block's own loop may add to an honest call
CLOCK_PREP_NOISE = 0.5  # of a call's preparation time: how far apart two blocks' may be
CLOCK_TRIES = 3  # blocks; suspect only when every one of them says so

# one block: (outside ms of its calls with their preparations less the shortest block of
# the same preparations alone so far, its calls, that shortest block's outside ms)
Block = tuple[float, int, float]


def blocks_of(raw: list[tuple[float, float]], n: int) -> list[Block]:
    """The blocks of ``n`` calls from their tries' raw outside figures ``raw``: (ms of the
    calls with their preparations, ms of the preparations alone) per try, each try's calls
    less the shortest preparations' block of them all (load only lengthens a block).

    Raises:
        ValueError: ``raw`` is empty."""
    least = min(p for _, p in raw)
    return [(max(0.0, x - least), n, least) for x, _ in raw]


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
