"""Naming a winner honestly: contenders within noise of the fastest are re-measured side by
side, interleaved, before one is named; a winner still within noise of others is a tie.

Step 1 (:func:`contenders`): from an iteration's ranked candidates (geometric-mean
speedup over the baseline across problem sizes), the leader and every candidate
TIED with it (kopt.compare.label, inclusive: the larger of the two noises, on the
geometric-mean medians with each side's worst relative noise across sizes), at most
``limit`` in all.

Step 2: the device runs them round-robin in one process -- sample 1 of A, of B,
of C, sample 2 of A... with the L2 flushed before each -- so that clock drift,
temperature and neighbours hit every contender alike (workers.harness
``contest`` jobs).

Step 3 (:func:`decide`): the fastest geometric-mean median of the re-measured
samples leads; every contender TIED with it is in the tie; the winner is the
tie's simplest member (fewest methods, then lowest median), since a method that
buys nothing measurable is not worth carrying into the next iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kopt.compare import Label, geo_mean, label

CONTEST_LIMIT = 4  # contenders re-measured side by side, the leader included
CONTEST_ROUNDS = 30  # interleaved samples per contender and problem size


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
        ranked: rows of kopt.loop.rank (``candidate_id``, ``speedup``, ``triple``), best first.
        per_dims: candidate id -> ``(median_ms, iqr_ms)`` per problem size.
        limit: at most this many (the leader included).
    """
    if not ranked:
        return []
    lead = ranked[0]
    out = [lead]

    def summary(cid: str) -> tuple[float, float]:
        xs = per_dims[cid]
        med = geo_mean([m for m, _ in xs])
        worst = max((iqr or 0.0) / m for m, iqr in xs)  # worst relative IQR across sizes
        return med, worst * med

    ref = summary(lead["candidate_id"])
    for r in ranked[1:]:
        if len(out) >= limit:
            break
        if (r["candidate_id"] in per_dims
                and label(ref, summary(r["candidate_id"]), inclusive=True) == "TIED"):
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
    summ = {}
    for c in measured:
        xs = remeasured[c["candidate_id"]]
        med = geo_mean([m for m, _ in xs])
        summ[c["candidate_id"]] = (med, max((iqr or 0.0) / m for m, iqr in xs) * med)
    fastest = min(measured, key=lambda c: (summ[c["candidate_id"]][0], c["candidate_id"]))
    ref = summ[fastest["candidate_id"]]
    labels: dict[str, Label] = {c["candidate_id"]: label(ref, summ[c["candidate_id"]])
                                for c in measured}
    labels[fastest["candidate_id"]] = "TIED"
    tied = [c for c in measured if labels[c["candidate_id"]] == "TIED"]
    win = min(tied, key=lambda c: (_n_methods(c), summ[c["candidate_id"]][0], c["candidate_id"]))
    return Verdict(winner=win["candidate_id"], tied=[c["candidate_id"] for c in tied],
                   labels=labels, medians_ms={k: v[0] for k, v in summ.items()})
