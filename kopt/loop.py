"""The optimization loop's state: winners, selected and ineffective methods, stop reasons.

After each iteration, per device class: the winner is the correct candidate
with the best geometric-mean speedup over the iteration's baseline across the
problem sizes (it must be correct on all of them). It counts as a gain only
beyond the measured noise: speedup > 1 + max(1%, half the relative IQR of the
winner plus half that of the baseline). A gain selects the winner's methods
and makes it the next baseline. A method is ineffective (under the bottleneck
it was tried against; admissible again once the bottleneck changes) when no
triple holding it beat, beyond noise, the best candidate of the same triple
without it -- so a method riding along with another one's gain is not credited --
or, where that triple failed or was not measured (a --max-candidates sample), the
iteration's baseline; then a method can take credit for its triple partner's gain.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from kopt.database import Database
from kopt.expand import Context

MIN_NOISE = 0.01


@dataclass
class IterState:
    """State of one device class after an iteration (stored as JSON in ``iterations``).

    Attributes:
        iteration: the iteration this state closes.
        selected: methods kept so far (the winners' triples).
        ineffective: method -> bottleneck axis it failed under.
        best: the winner so far: candidate_id, methods, params, defines, ``speedup`` over the
            baseline of the iteration that found it (``iteration``); never a product of
            speedups from separate timing runs.
        bottleneck_before / bottleneck_after: axis of the baseline / winner.
        scores_before / scores_after: axis scores of the baseline / winner.
        triggered: method -> trigger verdict from the winner's metrics (None = no evidence).
        tried: triples tried this iteration (count) and the winner's triple.
        stop: why the loop stops after this iteration ("" = it goes on).
        tie: candidate ids within noise of the fastest after the side-by-side contest
            (kopt.contest); empty when the winner is clear or there was no contest.
        contest: candidate id -> {"label": FASTER/SLOWER/TIED, "median_ms": re-measured
            geometric-mean median} of the contest, when one ran.
        dropped: candidate id -> why it failed a check in a side-by-side contest (status:
            error); a dropped contender can never be named.
        closing: set on a class's last state when the loop stops (kopt.pipeline's closing
            contest): the first baseline, every iteration's winner and the final winner
            re-measured side by side (``contests`` rows with iteration 0). Keys: ``speedup``
            (first-baseline / best geometric-mean median of that measurement, None when the
            first baseline could not be measured), ``first_baseline`` and ``first_baseline_ms``,
            ``best`` (the loop's named best, as ``best``) and ``best_ms``, ``final_winner``
            (the last iteration's winner), ``winner_of`` (candidate id -> the iteration it won,
            0: the first baseline), ``medians_ms`` and ``labels`` (against the best),
            ``dropped`` and ``note`` (e.g. later iterations did not improve on an earlier
            winner).
    """

    iteration: int = 0
    selected: list[str] = field(default_factory=list)
    ineffective: dict[str, str | None] = field(default_factory=dict)
    best: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    bottleneck_before: str | None = None
    bottleneck_after: str | None = None
    scores_before: dict[str, float] = field(default_factory=dict)
    scores_after: dict[str, float] = field(default_factory=dict)
    triggered: dict[str, bool | None] | None = None
    n_candidates: int = 0
    gain: float | None = None
    noise: float | None = None
    stop: str = ""
    tie: list[str] = field(default_factory=list)
    contest: dict[str, dict[str, Any]] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)
    closing: dict[str, Any] = field(default_factory=dict)

    def context(self) -> Context:
        """The expansion context for the next iteration."""
        return Context(selected=list(self.selected), ineffective=dict(self.ineffective),
                       bottleneck=self.bottleneck_after or self.bottleneck_before,
                       triggered=self.triggered,
                       baseline_params=(self.best or {}).get("params"))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> IterState:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})


def rank(store: Path, run_id: str, iteration: int, device_class: str,
         rung: int | None = None) -> list[dict[str, Any]]:
    """Correct candidates of one iteration and class, best geometric-mean speedup first, from
    one successive-halving rung (default: the last one measured)."""
    rows = Database(store).rank(run_id, iteration, device_class, rung)
    for r in rows:
        r["params"] = json.loads(r["params"])
        r["defines"] = json.loads(r["defines"])
        r["triple"] = [r["compute_method"], r["memory_method"], r["latency_method"]]
    return rows


def close_iteration(prev: IterState, ranked: list[dict[str, Any]], iteration: int,
                    scores_before: dict[str, float], bottleneck_before: str | None
                    ) -> IterState:
    """The state after ``iteration`` from its ranked candidates (see the module docstring)."""
    st = IterState(iteration=iteration, selected=list(prev.selected),
                   ineffective=dict(prev.ineffective), best=prev.best,
                   bottleneck_before=bottleneck_before, scores_before=scores_before,
                   n_candidates=len(ranked))
    base = next((r for r in ranked if r["is_baseline"]), None)
    if base is None:
        st.stop = "the baseline failed or was not measured on every problem size"
        return st
    st.baseline = _brief(base)
    if st.best is None:
        st.best = {**_brief(base), "iteration": iteration}
    win = ranked[0]
    noise = max(MIN_NOISE, (win["rel_iqr"] or 0) / 2 + (base["rel_iqr"] or 0) / 2)
    st.noise, st.gain = noise, win["speedup"]
    best_of: dict[tuple, float] = {}
    for r in ranked:
        t = tuple(r["triple"])
        best_of[t] = max(best_of.get(t, 0.0), r["speedup"])
    gain_of: dict[str, float] = {}
    for t, sp in best_of.items():
        for i, m in enumerate(t):
            if m:
                without = t[:i] + (None,) + t[i + 1:]
                # the same triple without m; when it failed or was not run (e.g. outside a
                # --max-candidates sample), the iteration's baseline (speedup 1) instead
                ref = best_of.get(without) or 1.0
                gain_of[m] = max(gain_of.get(m, 0.0), sp / ref)
    for m, g in gain_of.items():
        if g <= 1 + noise:
            st.ineffective[m] = bottleneck_before
        else:
            st.ineffective.pop(m, None)
    if win["is_baseline"] or win["speedup"] <= 1 + noise:
        st.stop = (f"no gain beyond noise: the best candidate is {win['speedup']:.3f}x the "
                   f"baseline, noise {noise:.3f}")
        return st
    st.selected += [m for m in win["triple"] if m and m not in st.selected]
    for m in win["triple"]:  # part of the winner: selected, whatever its own margin was
        st.ineffective.pop(m, None)
    # speedup over this iteration's own baseline only: medians of different iterations come
    # from separate timing runs, so the loop's total is measured side by side at its close
    st.best = {**_brief(win), "iteration": iteration}
    return st


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("candidate_id", "build_id", "triple", "params", "defines",
                              "speedup", "median_ms", "dims")}
