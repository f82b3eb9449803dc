"""The outside clock's rule: a contender's own figures against a clock it cannot reach.

A contender of the loop's closing contest reports its median from inside the harness process
that loads its code (CUDA events or ``time.perf_counter_ns`` there), which native code in that
process can patch (e.g. ``PyRun_SimpleString`` scaling ``time.perf_counter_ns``, or
``torch.cuda.Event.elapsed_time``). So the closing also runs ``n`` of its calls back to back,
warm (no cache flush), timed by the device actor's process from the harness's "clock" message
to its answer (workers.harness ``clock``, workers.sandbox ``outside_ms``). Warm calls back
to back cost an honest candidate no more than its flushed, sampled calls: the samples'
clock takes in the call's own host cost too (a GPU's events record the idle gap while the
host launches a small kernel; the CPU's clock brackets the ctypes call). What the block adds
per call is an in/out input reloaded before each call (a copy of data the kernel itself
must read and write: at most about twice the kernel's own traffic) and the loop's own few
microseconds: ``CLOCK_FACTOR`` x the median and ``CLOCK_SLACK_MS`` cover them. A
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
CLOCK_TRIES = 3  # blocks; suspect only when every one of them says so


def clock_calls(median_ms: float) -> int:
    """The calls of one outside-clock block for a contender whose contest median is
    ``median_ms`` (ms): enough to last :data:`CLOCK_BLOCK_MS` at that median, within
    [:data:`CLOCK_MIN_CALLS`, :data:`CLOCK_MAX_CALLS`].

    Raises:
        ValueError: ``median_ms`` is not positive."""
    if not median_ms or median_ms <= 0:
        raise ValueError(f"median_ms must be positive, got {median_ms!r}")
    return int(min(CLOCK_MAX_CALLS, max(CLOCK_MIN_CALLS, round(CLOCK_BLOCK_MS / median_ms))))


def clock_limit_ms(median_ms: float) -> float:
    """The most an honest call may take by the outside clock (ms per call) when its
    contest median is ``median_ms``: ``CLOCK_FACTOR * median_ms + CLOCK_SLACK_MS``."""
    return CLOCK_FACTOR * median_ms + CLOCK_SLACK_MS


def clock_suspect(median_ms: float, blocks: list[tuple[float, int]]) -> str:
    """Why a contender is ``suspect`` (one line), or "" when it is not: ``blocks`` holds
    each try's ``(outside_ms, calls)``; suspect when every block's outside ms per call is
    above :func:`clock_limit_ms` of its contest ``median_ms``. No blocks: not suspect.

    Raises:
        ValueError: ``median_ms`` is not positive, or a block has no calls."""
    if not blocks:
        return ""
    if any(n <= 0 for _, n in blocks):
        raise ValueError(f"a block without calls: {blocks!r}")
    limit = clock_limit_ms(median_ms)
    per_call = [ms / n for ms, n in blocks]
    if min(per_call) <= limit:
        return ""
    return (f"its contest median is {median_ms:.4g} ms by its own process's clock, but "
            f"{len(blocks)} blocks of its calls back to back took "
            f"{', '.join(f'{x:.4g}' for x in per_call)} ms a call by a clock outside its "
            f"process (more than {CLOCK_FACTOR:g}x the median + {CLOCK_SLACK_MS:g} ms = "
            f"{limit:.4g} ms): its process's clock does not tell its time")
