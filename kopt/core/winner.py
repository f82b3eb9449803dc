"""Naming a winner honestly: contenders within noise of the fastest are re-measured side by
side, interleaved, before one is named; a winner still within noise of others is a tie.

Step 1 (:func:`contenders`): from an iteration's ranked candidates (geometric-mean
speedup over the baseline across problem sizes), the leader and every candidate
TIED with it (kopt.core.compare.label, inclusive: the larger of the two noises, since the
ranked timings were not taken side by side; on kopt.core.compare.across_sizes: the
geometric-mean medians with each side's worst relative noise across sizes), at most
``limit`` in all.

Step 2: the device runs them round-robin in one process -- sample 1 of A, of B,
of C, sample 2 of A... with the L2 flushed before each -- so that clock drift,
temperature and neighbours hit every contender alike (workers.harness
``contest`` jobs).

Step 3 (:func:`decide`): the fastest geometric-mean median of the re-measured
samples leads; every contender TIED with it (kopt.core.compare.label, NVBench's rule: the
smaller of the two noises, as the samples were taken side by side) is in the tie; the
winner is the tie's simplest member (fewest methods, then lowest median), since a method
that buys nothing measurable is not worth carrying into the next iteration.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

from kopt.core.compare import Label, across_sizes, label, rel_noise

CONTEST_LIMIT = 4  # contenders re-measured side by side, the leader included
CONTEST_ROUNDS = 30  # interleaved samples per contender and problem size
# a closing contender whose robust relative noise (IQR / 1.349 over its median,
# kopt.core.compare.rel_noise) is above this was likely timed beside other work: its IQR is
# a third of its median or more (the README's saxpy jobs on this project's idle 2-core
# machine: 8-11 %); a new user's loaded run named the baseline best over a winner whose
# side-by-side IQR exceeded its median, without a word
NOISY_REL = 0.25


@dataclass
class Verdict:
    """The outcome of a contest.

    Attributes:
        winner: candidate id named the winner.
        tied: candidate ids within noise of the fastest (the winner among them); one
            entry when the winner is clear.
        labels: candidate id -> FASTER / SLOWER / TIED against the fastest contender.
        medians_ms: candidate id -> geometric mean over problem sizes of the re-measured
            medians (ms).
    """

    winner: str
    tied: list[str] = field(default_factory=list)
    labels: dict[str, Label] = field(default_factory=dict)
    medians_ms: dict[str, float] = field(default_factory=dict)


def _n_methods(r: dict[str, Any]) -> int:
    return sum(1 for m in r["triple"] if m)


def contenders(ranked: list[dict[str, Any]], per_dims: dict[str, list[tuple[float, float]]],
               limit: int = CONTEST_LIMIT) -> list[dict[str, Any]]:
    """The leader of ``ranked`` and the candidates TIED with it, in rank order.

    Args:
        ranked: rows of kopt.loop.state.rank (``candidate_id``, ``speedup``, ``triple``), best
        first.
        per_dims: candidate id -> ``(median_ms, iqr_ms)`` per problem size.
        limit: at most this many (the leader included).
    """
    if not ranked:
        return []
    lead = ranked[0]
    out = [lead]

    ref = across_sizes(per_dims[lead["candidate_id"]])
    for r in ranked[1:]:
        if len(out) >= limit:
            break
        if (r["candidate_id"] in per_dims
                and label(ref, across_sizes(per_dims[r["candidate_id"]]),
                          inclusive=True) == "TIED"):
            out.append(r)
    return out


def decide(cands: list[dict[str, Any]], remeasured: dict[str, list[tuple[float, float]]]
           ) -> Verdict:
    """Name the winner from the interleaved re-measurement (see the module docstring).

    Args:
        cands: the contenders (rows with ``candidate_id`` and ``triple``).
        remeasured: candidate id -> ``(median_ms, iqr_ms)`` per problem size, side by side.

    Raises:
        ValueError: no contender has a re-measurement.
    """
    measured = [c for c in cands if remeasured.get(c["candidate_id"])]
    if not measured:
        raise ValueError("no contender was re-measured")
    summ = {c["candidate_id"]: across_sizes(remeasured[c["candidate_id"]]) for c in measured}
    fastest = min(measured, key=lambda c: (summ[c["candidate_id"]][0], c["candidate_id"]))
    ref = summ[fastest["candidate_id"]]
    labels: dict[str, Label] = {c["candidate_id"]: label(ref, summ[c["candidate_id"]])
                                for c in measured}
    labels[fastest["candidate_id"]] = "TIED"
    tied = [c for c in measured if labels[c["candidate_id"]] == "TIED"]
    win = min(tied, key=lambda c: (_n_methods(c), summ[c["candidate_id"]][0], c["candidate_id"]))
    return Verdict(winner=win["candidate_id"], tied=[c["candidate_id"] for c in tied],
                   labels=labels, medians_ms={k: v[0] for k, v in summ.items()})


def close_loop(first: str, final: str, winner_of: dict[str, int],
               remeasured: dict[str, list[tuple[float, float]]],
               dropped: dict[str, str] | None = None) -> dict[str, Any]:
    """The loop's closing verdict from the closing contest: the first baseline, every
    iteration's winner and the final winner re-measured side by side (interleaved).

    The final winner is the loop's best unless an earlier one is FASTER than it beyond noise
    (kopt.core.compare.label, NVBench's rule): then the fastest of those is named, and the note
    says the later iterations did not improve on it. A contender that failed a check
    (``dropped``, absent from ``remeasured``) is never named: when the final winner failed,
    the latest winner that passed takes its place (and the note says so); a best within
    noise of the first baseline is said so in the note too. The total speedup
    is the first baseline's geometric-mean median over the best's, both from this one
    measurement; never a product of ratios from separate timing runs.

    Args:
        first: the first baseline's candidate id.
        final: the last iteration's winner.
        winner_of: candidate id -> the iteration it won (0: the first baseline).
        remeasured: candidate id -> ``(median_ms, iqr_ms)`` per problem size, side by side.
        dropped: candidate id -> why it failed its check in the contest.

    Returns:
        The ``closing`` dict of kopt.loop.state.IterState (without ``best``, which the caller fills
        from the candidate's row): ``best_id``, ``speedup``, ``first_baseline``,
        ``first_baseline_ms``, ``best_ms``, ``final_winner``, ``winner_of``, ``medians_ms``,
        ``labels``, ``dropped``, ``note``.

    Raises:
        ValueError: no contender was re-measured.
    """
    dropped = dict(dropped or {})
    summ = {c: across_sizes(xs) for c, xs in remeasured.items() if xs and c not in dropped}
    if not summ:
        raise ValueError("no contender of the closing contest was re-measured")
    best, notes = _closing_best(final, winner_of, summ, dropped)
    ms = {c: s[0] for c, s in summ.items()}
    labels: dict[str, Label] = {c: label(summ[best], summ[c]) for c in summ}
    labels[best] = "TIED"
    if first != best and labels.get(first) == "TIED":  # the loop's gain is not beyond noise
        notes.append("side by side it is within noise of the first baseline (TIED): the "
                     "loop's speedup is not a gain beyond noise")
    if note := _noisy_note(summ, winner_of):
        notes.append(note)
    return {"best_id": best, "first_baseline": first,
            "first_baseline_ms": ms.get(first), "best_ms": ms[best],
            "speedup": ms[first] / ms[best] if first in ms else None,
            "final_winner": final, "winner_of": dict(winner_of), "medians_ms": ms,
            "labels": labels, "dropped": dropped, "note": "; ".join(notes)}


def _noisy_note(summ: dict[str, tuple[float, float]], winner_of: dict[str, int]) -> str:
    """A closing note naming the contenders of ``summ`` (candidate id -> ``(median_ms,
    iqr_ms)`` side by side) whose relative noise is above :data:`NOISY_REL`: the verdict may
    not hold, and how to get one that does; "" where none is."""
    noisy = {c: rel_noise(*summ[c]) for c in summ if rel_noise(*summ[c]) > NOISY_REL}
    if not noisy:
        return ""
    worst = max(noisy, key=lambda c: noisy[c])
    names = ", ".join(_iteration_name(c, winner_of) for c in sorted(noisy))
    return (f"side by side, the samples of {names} were noisy (IQR up to "
            f"{summ[worst][1] / summ[worst][0]:.0%} of the median): other work on the "
            "machine slowed some of them, so this verdict may not hold: run the sweep again "
            "on an idle machine")


def _iteration_name(c: str, winner_of: dict[str, int]) -> str:
    """How a closing note names contender ``c``: the first baseline or iteration k's winner."""
    k = winner_of.get(c, 0)
    return "the first baseline" if k == 0 else f"iteration {k}'s winner"


def _closing_best(final: str, winner_of: dict[str, int],
                  summ: dict[str, tuple[float, float]], dropped: dict[str, str]
                  ) -> tuple[str, list[str]]:
    """:func:`close_loop`'s pick and its notes: the final winner (or, when it failed, the
    latest that passed), unless an earlier contender is FASTER beyond noise: then the
    fastest of those, and again while another is FASTER than that one (NVBench's rule, the
    smaller of two noises, is not transitive: a noisy contender TIED with the final winner
    was FASTER than a quiet one picked over it, red-team review of the contests' labels)."""
    notes = []
    ref = final  # the final winner; when it failed, the latest winner that passed
    if final not in summ:
        ref = max(summ, key=lambda c: (winner_of.get(c, 0), c))
        why = textwrap.shorten((dropped.get(final) or "it was not re-measured").splitlines()[0],
                               300, placeholder=" ...")  # whole words: a cut one misleads
        notes.append(f"the final winner, {_iteration_name(final, winner_of)}, failed the "
                     f"closing contest ({why}) and cannot be named")
    best = ref
    while faster := [c for c in summ if c != best and label(summ[best], summ[c]) == "FASTER"]:
        best = min(faster, key=lambda c: (summ[c][0], c))  # its median lower: this ends
    if best != ref:
        notes.append(f"side by side, {_iteration_name(best, winner_of)} ({summ[best][0]:.4g} "
                     f"ms) is faster beyond noise than {_iteration_name(ref, winner_of)} "
                     f"({summ[ref][0]:.4g} ms): "
                     + ("no iteration improved on the first baseline"
                        if winner_of.get(best, 0) == 0 else
                        f"the iterations after {winner_of[best]} did not improve on it"))
    return best, notes
