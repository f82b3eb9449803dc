"""The optimization loop's state: winners, selected and ineffective methods, stop reasons.

After each iteration, per device class: the winner is the correct candidate
with the best geometric-mean speedup over the iteration's baseline across the
problem sizes (it must be correct on all of them; kopt.core.compare.geo_mean). It
counts as a gain only beyond the measured noise, by kopt's one noise model
(kopt.core.compare.speedup_label, NVBench's comparison rule): FASTER than the baseline
when ``1 - 1/speedup`` exceeds ``max(1%, the smaller relative sigma)``, each
side's relative sigma its worst relative IQR across the problem sizes over 1.349.
Not ``inclusive`` (the larger sigma), although the two were not timed side by
side: NVBench compares separate runs with the smaller noise too, and with the larger
one a single noisy side would veto any gain (a relative sigma above 100% can never be
beaten, as no candidate is more than 100% faster); ``inclusive`` is for choosing
contenders, where it costs only a re-measurement (kopt.core.winner). A gain selects the
winner's methods and makes it the next baseline. A method is ineffective (under
the bottleneck it was tried against; admissible again once the bottleneck changes)
when no triple holding it was FASTER, by the same rule on the two candidates' own
noises, than the best candidate of the same triple without it -- so a method
riding along with another one's gain is not credited -- or, where that triple
failed or was not measured (a --max-candidates sample), the iteration's baseline;
then a method can take credit for its triple partner's gain.

Before the one noise model the loop had a rule of its own: ``speedup > 1 +
max(1%, half the relative IQR of the winner plus half that of the baseline)``, one
threshold for every method. Outcomes that change: the threshold is now a sigma (IQR /
1.349) of the quieter side, never more than the old one, so e.g. 1.035x at 4% relative
IQR on both sides is now a gain (it was not); the difference is now relative to the
reference's time (NVBench's ``frac_diff``), so at the 1% floor a speedup must exceed
1/0.99 = 1.0101x, not 1.01x; and each method is judged on the noise of the two
candidates compared instead of the winner's and the baseline's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kopt.core.compare import geo_mean, noise_line, speedup_label, speedup_threshold
from kopt.core.expand import Context, judged_under
from kopt.store.database import Database
from kopt.store.files import stored_json

# how a closing's ``note`` starts when its contest could not run (kopt.loop.guided): the
# class's best is then its last iteration's winner, never re-timed outside its process
CLOSING_FAILED = "the closing contest failed"


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
            (kopt.core.winner); empty when the winner is clear or there was no contest.
        contest: candidate id -> {"label": FASTER/SLOWER/TIED, "median_ms": re-measured
            geometric-mean median} of the contest, when one ran.
        dropped: candidate id -> why it failed a check in a side-by-side contest (status:
            error); a dropped contender can never be named.
        credit: method -> the gain it was judged by when it was last tried (:func:`credit_of`):
            ``speedup`` (the fastest candidate of a triple holding it over ``against``,
            geometric mean across the problem sizes), ``against`` (candidate id: the same
            triple without it, or the iteration's baseline where that was not measured),
            ``alone`` (True: against the same triple without it, the method's own gain;
            False: against the baseline, a gain it shares with ``shared_with``, the other
            methods of its triple), ``label`` (FASTER / TIED / SLOWER by the noise rule
            above) and ``iteration``. A version's whole gain is never credited to one of two
            methods it claims as that method's own.
        closing: set on a class's last state when the loop stops (kopt.driver.sweep's closing
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
    credit: dict[str, dict[str, Any]] = field(default_factory=dict)
    closing: dict[str, Any] = field(default_factory=dict)

    def named(self) -> IterState:
        """This state as the next iteration and ``kopt propose`` see it. When the loop's
        closing contest named another best than the last iteration's winner (the first
        baseline, or an earlier winner, was faster side by side), that one is ``best`` and
        its triple's methods are ``selected``: propose plans from the parent that ``kopt
        best`` and ``kopt export`` name. Else this state itself."""
        nb = (self.closing or {}).get("best")
        if not nb or not self.best or nb.get("candidate_id") == self.best.get("candidate_id"):
            return self
        sel = [m for m in nb.get("triple") or () if m]
        return replace(self, best=dict(nb), selected=sel,
                       ineffective={k: v for k, v in self.ineffective.items() if k not in sel})

    def context(self) -> Context:
        """The expansion context for the next iteration."""
        return Context(selected=list(self.selected), ineffective=dict(self.ineffective),
                       bottleneck=self.bottleneck_after or self.bottleneck_before,
                       triggered=self.triggered,
                       baseline_params=(self.best or {}).get("params"),
                       best_id=(self.best or {}).get("candidate_id"))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> IterState:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in stored_json(text, "state").items() if k in known})


def rank(store: Path, run_id: str, iteration: int, device_class: str,
         rung: int | None = None) -> list[dict[str, Any]]:
    """Correct candidates of one iteration and class, best geometric-mean speedup first, from
    one successive-halving rung (default: the last one measured).

    Each row: the candidate's columns, ``triple``, ``speedup`` (kopt.core.compare.geo_mean of its
    speedups over the baseline across problem sizes) and ``rel_iqr`` (its worst ``iqr_ms /
    median_ms`` across them; None when no size has an IQR)."""
    rows = Database(store).rank(run_id, iteration, device_class, rung)
    for r in rows:
        r["params"] = stored_json(r["params"], "params")
        r["defines"] = stored_json(r["defines"], "defines")
        r["triple"] = [r["compute_method"], r["memory_method"], r["latency_method"]]
        r["speedup"] = geo_mean(r.pop("speedups"))
        r["rel_iqr"] = max((x for x in r.pop("rel_iqrs") if x is not None), default=None)
    rows.sort(key=lambda r: (-r["speedup"], r["candidate_id"]))
    return rows


def rank_rung(store: Path, run_id: str, iteration: int, device_class: str,
              rung: int) -> list[dict[str, Any]]:
    """Successive halving's ranking of one rung: :func:`rank`; where that is empty in a
    later rung (its baseline failed on some problem size, e.g. timed out under load, so no
    candidate has a speedup), the rung's correct candidates by the geometric mean of their
    medians across the sizes, fastest first, ``speedup`` None: the same order as by
    speedup over one baseline, so the next rung still gets the best of this one. Rung 0
    gets no such fallback: a baseline that fails its screen stops the loop as in
    :func:`close_iteration`."""
    rows = rank(store, run_id, iteration, device_class, rung=rung)
    if rows or rung == 0:
        return rows
    rows = Database(store).rank_medians(run_id, iteration, device_class, rung)
    for r in rows:
        r["speedup"], r["gm_ms"] = None, geo_mean(r.pop("medians"))
    rows.sort(key=lambda r: (r["gm_ms"], r["candidate_id"]))
    return rows


def close_iteration(prev: IterState, ranked: list[dict[str, Any]], iteration: int,
                    scores_before: dict[str, float], bottleneck_before: str | None
                    ) -> IterState:
    """The state after ``iteration`` from its ranked candidates (see the module docstring)."""
    st = IterState(iteration=iteration, selected=list(prev.selected),
                   ineffective=dict(prev.ineffective), best=prev.best,
                   credit=dict(prev.credit),
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
    st.noise = speedup_threshold(base["rel_iqr"], win["rel_iqr"])
    st.gain = win["speedup"]
    judged = credit_of(ranked, base, iteration)
    for m, c in judged.items():
        st.credit[m] = c
        if c["label"] == "FASTER":
            st.ineffective.pop(m, None)
        elif m not in st.selected:  # a kept method is never also ineffective
            st.ineffective[m] = judged_under(bottleneck_before, base["candidate_id"])
    if len(ranked) == 1:  # every other candidate failed (a submitted version that does
        # not compile, or is wrong): no comparison took place, so no "gain beyond noise"
        st.stop = (f"no candidate but the baseline was correct on every problem size in "
                   f"iteration {iteration} (`kopt query \"select status, error from candidates "
                   f"where iteration = {iteration}\"` says why)")
        return st
    if win["is_baseline"] or not gains(win, base):
        noise = ("it is the baseline" if win["is_baseline"] else "noise threshold "
                 + noise_line(base["rel_iqr"], win["rel_iqr"], "the baseline", "the best"))
        st.stop = (f"no gain beyond noise: the best candidate is {win['speedup']:.3f}x the "
                   f"baseline, {noise}")
        return st
    st.selected += [m for m in win["triple"] if m and m not in st.selected]
    for m in win["triple"]:  # part of the winner: selected, whatever its own margin was
        st.ineffective.pop(m, None)
    # speedup over this iteration's own baseline only: medians of different iterations come
    # from separate timing runs, so the loop's total is measured side by side at its close
    st.best = {**_brief(win), "iteration": iteration}
    return st


def credit_of(ranked: list[dict[str, Any]], base: dict[str, Any],
              iteration: int) -> dict[str, dict[str, Any]]:
    """Each method tried in an iteration -> the gain it is judged by (IterState.credit's
    entries): for each triple holding it (the fastest candidate of each triple), that
    candidate against the fastest of the same triple without the method; where that failed
    or was not run (e.g. outside a --max-candidates sample, or a submitted version, whose
    parent is the baseline), against the iteration's baseline ``base``, the gain then shared
    with the triple's other methods. Of several triples holding it, the best judgment counts
    (FASTER beats TIED beats SLOWER; then the larger ratio). The baseline's own methods are
    not tried: a submitted iteration's baseline is its parent, whose triple earlier
    iterations applied (a sweep's holds none). ``ranked``: :func:`rank`'s rows."""
    best_of: dict[tuple, dict[str, Any]] = {}  # triple -> its fastest candidate
    for r in ranked:
        t = tuple(r["triple"])
        if t not in best_of or r["speedup"] > best_of[t]["speedup"]:
            best_of[t] = r
    order = {"FASTER": 2, "TIED": 1, "SLOWER": 0}
    out: dict[str, dict[str, Any]] = {}
    for t, r in best_of.items():
        for i, m in enumerate(t if not r["is_baseline"] else ()):
            if not m:
                continue
            own = best_of.get(t[:i] + (None,) + t[i + 1:])
            ref = own or base
            ratio = r["speedup"] / ref["speedup"]
            c = {"speedup": round(ratio, 4), "against": ref["candidate_id"],
                 "alone": own is not None,
                 "shared_with": [] if own else [x for x in t if x and x != m],
                 "label": speedup_label(ratio, ref["rel_iqr"], r["rel_iqr"]),
                 "iteration": iteration}
            was = out.get(m)
            if was is None or ((order[c["label"]], ratio)
                               > (order[was["label"]], was["speedup"])):
                out[m] = c
    return out


def credit_line(m: str, c: dict[str, Any] | None) -> str:
    """One method with the gain it was judged by, for people: ``compute.x (1.80x FASTER
    than the same triple without it, iteration 2)``; ``m`` alone when it has no credit."""
    if not c:
        return m
    against = ("the same triple without it" if c.get("alone") else
               "the iteration's baseline" + (", shared with " + ", ".join(c["shared_with"])
                                             if c.get("shared_with") else ""))
    return f"{m} ({c['speedup']:.3g}x {c['label']} against {against}, iteration {c['iteration']})"


def gains(r: dict[str, Any], ref: dict[str, Any]) -> bool:
    """Whether ranked candidate ``r`` is FASTER than ``ref`` beyond noise (kopt.core.compare, see
    the module docstring); both speedups are over the same baseline."""
    return speedup_label(r["speedup"] / ref["speedup"], ref["rel_iqr"],
                         r["rel_iqr"]) == "FASTER"


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("candidate_id", "build_id", "triple", "params", "defines",
                              "speedup", "median_ms", "dims")}
