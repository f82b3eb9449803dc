"""The replay verdict: timed calls on never-seen input values, mixed among the samples.

A candidate that keeps results by content (a fingerprint of the inputs) and replays them
is fast on input sets it has seen and slow on new ones; honest work costs the same on any
values of one size. The harness (workers.harness ``Harness.time`` and ``Harness.contest``)
makes each timed call, with chance ``Q_UNSEEN``, on an input set held back and never
called on by this artifact, at a place drawn at random among the samples: the candidate
cannot know which calls these are before it meets their values, nor slow its calls on
seen sets only around them, and load lands on them exactly as it lands on the samples (no
pause, draw or gauge sets them apart: an earlier protocol that made them after the
samples named honest OpenMP kernels `replayed` beside CPU load, the first call after its
pause being slow far more often than a sample).

The rule, on a job's (or a contender's) calls, times in ms:

- the line: ``REPLAY_FACTOR`` x the median of the calls on seen sets, plus ``REPLAY_MS``;
- ``clear`` when any call on a never-seen set is under the line;
- ``replayed`` when every one is over it and load alone is unlikely to explain that. Each
  call on a never-seen set lands at a random place among the samples, so where load alone
  slows calls, which calls it slowed does not depend on which sets they were on: of the
  ``n + k`` calls (``n`` samples, ``k`` on never-seen sets), ``m + k`` are over the line
  (``m`` samples), and the chance that ``k`` places drawn at random all fall among them is
  ``C(m + k, k) / C(n + k, k)`` (a permutation test: Fisher's exact test on the 2x2 table
  seen/never-seen by over/under the line). ``replayed`` when that is under ``REPLAY_ALPHA``.
  An earlier rule took ``p ** k``, ``p`` the share of samples over the line by Laplace's
  rule, ``(m + 1) / (n + 2)``: 10 samples of an honest kernel beside another sweep, 1 over
  the line and the 4 calls on new sets over it too, gave (2/12) ** 4 < 1e-3, ``replayed``,
  where the exact chance is 5/1001. The samples alone undercount load that comes in
  bursts; the calls on new sets count it too;
- ``open`` otherwise: the harness makes more calls (more never-seen sets, at random
  places), up to ``UNSEEN_MAX``; a candidate still open then is ``too_slow``, never ``ok``.

The line is drawn from exactly the samples that make the figure (the first
``max_samples`` of a job, the first ``rounds`` of a contest); ``n`` and ``m`` count every
call on a seen set made in the same span as the calls on never-seen sets (the figure's
samples and those made after them while the verdict was open): counted over the figure's
alone, a burst of load after them slowed the calls on new sets made then with no sample
beside them to show it, the direction that names honest work `replayed`. The line is the
figure's because a red team's replayer replayed just over half of the figure's samples
and computed every call after them, so that the median of all its
calls (the honest one) set the line while the figure stayed a replay's (`ok` at 0.02 ms
against 0.24, attack MODE 12). A candidate cannot pad more than half of them without its
median being the padded calls' (the line rises with it), so at most half the samples are
over the line, and every open case is decided or capped within ``UNSEEN_MAX`` calls: a
quarter of 20 samples padded (attack MODE 4) is ``replayed`` within 10 calls on new sets
(C(15, 10) / C(30, 10) < 1e-4 on those 20 alone; more samples beside them decide it
sooner); with half of them padded, 14 are not enough on 20 (C(24, 14) / C(34, 14) =
1.4e-3) nor on 80 (1.9e-4) and it is ``too_slow``, never ``ok``. What the rule allows:
a figure up to ``REPLAY_FACTOR`` faster than the candidate's calls on new values (MODE 12
at times `ok` at 0.13 ms against its 0.26 ms calls on new sets).

A ``replayed`` verdict is final once a run again agrees: a job is run once more in its
sandbox (workers.sandbox ``run_retrying``), a contender named so in a contest once more in
a contest of its own (kopt.loop.contests). The test's premise, load landing on every call
alike, failed once beside two test suites at once (an honest one-thread vector add, all 8
calls on new values slow, 10 of its 46 samples: about 4e-5); beside CPU and memory hogs the
calls on new values were as fast as the seen calls next to them in the median
(bench/honest_under_load.py, 248 such calls). A replayer is named so each time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

# a call on unseen values slower than REPLAY_FACTOR x the median of the calls on seen sets
# (and REPLAY_MS more) counts as slow; honest work costs the same on any values of one size
REPLAY_FACTOR, REPLAY_MS = 2.0, 0.01
# the chance load alone made every call on never-seen sets slow, under which they are a
# replay (see load_chance). 1e-3 named an honest memory-bound kernel `replayed` in one of
# two test suites run at once on a 2-core machine (its 7 calls on new sets all over the
# line, 28 samples): a verdict taken on thousands of jobs a day needs a smaller one
REPLAY_ALPHA = 1e-4
# the chance that a timed call is on a never-seen input set, and the most such calls a job
# (or a contender of a contest) makes while its verdict is open
Q_UNSEEN, UNSEEN_MAX = 0.2, 14

# the calls on seen sets before the first on a new one that split_after needs at least
SPLIT_MIN = 5

State = Literal["clear", "replayed", "open"]


def replay_line(seen_ms: Sequence[float]) -> float:
    """The time (ms) over which a call on never-seen values counts as slow: ``REPLAY_FACTOR``
    x the median of ``seen_ms`` (the calls on seen sets, the samples) plus ``REPLAY_MS``.
    Raises StatisticsError for no seen call."""
    return REPLAY_FACTOR * statistics.median(seen_ms) + REPLAY_MS


def load_chance(seen_ms: Sequence[float], unseen_ms: Sequence[float],
                pool_ms: Sequence[float] | None = None) -> float:
    """How likely load alone made every call of ``unseen_ms`` slow (times in ms): with ``n``
    calls in ``pool_ms`` (the calls on seen sets made in the same span as ``unseen_ms``;
    default ``seen_ms``), ``m`` of them over :func:`replay_line` of ``seen_ms`` (the
    figure's samples), and ``k`` calls in ``unseen_ms``, all taken as over it,
    ``C(m + k, k) / C(n + k, k)``: the chance that ``k`` places drawn at random among
    ``n + k`` calls, ``m + k`` of them slow, are all slow ones (the module's rule). 1.0 for
    no call on a never-seen set."""
    line = replay_line(seen_ms)
    pool = seen_ms if pool_ms is None else pool_ms
    n, k = len(pool), len(unseen_ms)
    m = sum(x > line for x in pool)
    return math.comb(m + k, k) / math.comb(n + k, k)


def replay_state(seen_ms: Sequence[float], unseen_ms: Sequence[float],
                 pool_ms: Sequence[float] | None = None) -> State:
    """The verdict so far on calls on seen sets (``seen_ms``: the figure's samples;
    ``pool_ms``: every call on a seen set in the same span, default ``seen_ms``) and on
    never-seen ones (``unseen_ms``), made in one sequence at random places (times in ms):
    ``clear``, ``replayed`` or ``open`` (no call on a never-seen set yet, or every one slow
    and load a likely cause): see the module's rule."""
    if not unseen_ms or not seen_ms:
        return "open"
    if min(unseen_ms) <= replay_line(seen_ms):
        return "clear"
    return "replayed" if load_chance(seen_ms, unseen_ms, pool_ms) < REPLAY_ALPHA else "open"


def split_after(seen_ms: Sequence[float], pre: int | None) -> list[float] | None:
    """The calls on seen sets after the first call on a never-seen set (``seen_ms[pre:]``,
    ``pre`` the calls before it; None: no such call yet) when their median is over
    :func:`replay_line` of the calls before it, else None (times in ms). A candidate that
    replays until it meets new values and computes every call from then on (attack MODE 3)
    has a median between the two (`ok` at 0.19 ms against the honest 0.24 ms); load that
    began at that very call looks the same, so these calls become the figure (the honest
    one, or the loaded one) rather than a verdict. Fewer than ``SPLIT_MIN`` calls before it
    are no median to split at: one fast call there made an honest kernel's figure two of
    its samples under load."""
    if pre is None or pre < SPLIT_MIN or pre >= len(seen_ms):
        return None
    before, after = seen_ms[:pre], list(seen_ms[pre:])
    return after if statistics.median(after) > replay_line(before) else None


def replay_text(seen_ms: Sequence[float], unseen_ms: Sequence[float],
                pool_ms: Sequence[float] | None = None) -> str:
    """The ``replayed`` line for calls that :func:`replay_state` names so (times in ms,
    arguments as its)."""
    n = len(seen_ms if pool_ms is None else pool_ms)
    return (f"all {len(unseen_ms)} calls on input values it had never seen, made at random "
            f"places among its {n} samples, took {min(unseen_ms):.4g} ms or more, "
            f"its samples on values seen before {statistics.median(seen_ms):.4g} ms in the "
            "median: solve keeps results (or work) from earlier calls and reuses them when the "
            "inputs match, or works outside its calls (a thread of its own while the harness "
            "prepares the next call); compute every call from its inputs, inside the call")


def open_text(seen_ms: Sequence[float], unseen_ms: Sequence[float],
              pool_ms: Sequence[float] | None = None) -> str:
    """Why calls whose verdict stayed ``open`` when the never-seen sets (``UNSEEN_MAX``) or
    the budget ran out get no verdict (times in ms, arguments as :func:`replay_state`'s; at
    least one call on a never-seen set)."""
    line = replay_line(seen_ms)
    pool = seen_ms if pool_ms is None else pool_ms
    share = sum(x > line for x in pool) / len(pool)
    return (f"all {len(unseen_ms)} of its calls on input sets it had never seen were slower "
            f"than {REPLAY_FACTOR:g}x its median, while {share:.0%} of its samples were too "
            "(load, or padding); run it again on a quieter machine")
