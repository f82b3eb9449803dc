"""The run folder the manual NCU-guided workflow leaves, written from a kopt run's store
(`kopt report RUN_ID --workflow`), for people who used that workflow and its tools:

    OUT/state.json             per device class, the loop's last state as the next
                               iteration sees it (kopt.loop.state.IterState.named)
    OUT/summary.md             kopt's report (kopt.tools.report.write_report), best sources
                               and plots beside it
    OUT/iteration-N/           one per iteration (OUT/<device class>/iteration-N/ when the
                               run has several classes):
        kernel.cu | kernel.cpp the source the iteration's winner was measured from, byte for
                               byte (the store's copy), its -D defines written in
        methods.json           the winner's triple, the methods claimed by each submitted
                               version, selected / ineffective after it, its figures
        analysis.md            the analysis each submitted version came with (its --note),
                               or what the sweep's own iteration tried and found
        profile.md             the Nsight Compute figures of the winner the loop read, and
                               the bottleneck scores; "no profile" with the reason

Everything is read from the store; nothing is measured again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kopt.loop.measured import SourceLost
from kopt.loop.state import IterState, credit_line
from kopt.store.database import Database
from kopt.store.files import no_run
from kopt.tools.report import ReportError, measured_realized, winner_figures, write_report


def write_workflow(run_id: str, store: Path | str, out: Path,
                   notes: list[str] | None = None) -> list[Path]:
    """Write the workflow's run folder for ``run_id`` into ``out`` (see the module); returns
    the files written, ``summary.md`` first. ``notes`` gets one line per source that could
    not be written (its reason).

    Raises:
        ReportError: the run is not in the store.
    """
    notes = [] if notes is None else notes
    db = Database(store)
    rec = db.run(run_id)
    if rec is None:
        raise ReportError(no_run(Path(store), run_id))
    written = [write_report(run_id, store, out, notes)]
    states: dict[str, list[IterState]] = {}
    for _it, dc, js in db.iteration_states(run_id):
        states.setdefault(dc, []).append(IterState.from_json(js))
    metric_of = winner_figures(db.run_history(run_id).metrics)
    versions = db.versions(run_id)
    ext = ".cu" if rec["backend"] == "cuda" else ".cpp"
    for dc, sts in states.items():
        base = out if len(states) == 1 else out / dc
        for st in sts:
            folder = base / f"iteration-{st.iteration}"
            folder.mkdir(parents=True, exist_ok=True)
            mine = [v for v in versions if v["iteration"] == st.iteration]
            written += _iteration(db, rec, dc, st, mine, metric_of, folder, ext, notes)
    state = {dc: json.loads(sts[-1].named().to_json()) for dc, sts in states.items()}
    (out / "state.json").write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    return written + [out / "state.json"]


def _iteration(db: Database, rec: dict[str, Any], dc: str, st: IterState,
               versions: list[dict[str, Any]], metric_of: dict[tuple, dict[str, float]],
               folder: Path, ext: str, notes: list[str]) -> list[Path]:
    """One iteration's folder; the files written."""
    best = st.best or {}
    cid = best.get("candidate_id")
    out = []
    if cid:
        try:
            src, _ = measured_realized(db, rec["run_id"], cid, best.get("defines") or {},
                                       f"kopt: iteration {st.iteration}'s best on {dc}, "
                                       f"candidate {cid} of run {rec['run_id']}")
            (folder / f"kernel{ext}").write_text(src, newline="")
            out.append(folder / f"kernel{ext}")
        except SourceLost as e:
            notes += [str(e)] if str(e) not in notes else []
    (folder / "methods.json").write_text(json.dumps(_methods(dc, st, versions), indent=1,
                                                    sort_keys=True) + "\n")
    (folder / "analysis.md").write_text(_analysis(dc, st, versions))
    (folder / "profile.md").write_text(_profile(dc, st, metric_of.get((st.iteration, dc, cid))))
    return out + [folder / n for n in ("methods.json", "analysis.md", "profile.md")]


def _methods(dc: str, st: IterState, versions: list[dict[str, Any]]) -> dict[str, Any]:
    """methods.json: the iteration's winner (``best``: the candidate the loop carried on
    with, which may be an earlier iteration's when nothing beat it), its triple and
    figures, the claims of the versions submitted into it, and the loop's method state."""
    best = st.best or {}
    return {"device_class": dc, "iteration": st.iteration,
            "best": best.get("candidate_id"), "best_iteration": best.get("iteration"),
            "triple": best.get("triple"), "speedup": best.get("speedup"),
            "median_ms": best.get("median_ms"), "params": best.get("params"),
            "claimed": [{"version": v["name"], "try": v["try_no"],
                         "source_hash": v["source_hash"],
                         "methods": [m for m in (v["claimed_methods"] or "").split(",") if m],
                         "submitter": v["submitter"]} for v in versions],
            "selected": list(st.selected), "ineffective": dict(st.ineffective),
            "credit": {m: st.credit[m] for m in st.credit
                       if st.credit[m].get("iteration") == st.iteration},
            "bottleneck_before": st.bottleneck_before, "bottleneck_after": st.bottleneck_after,
            "stop": st.stop}


def _analysis(dc: str, st: IterState, versions: list[dict[str, Any]]) -> str:
    """analysis.md: each submitted version's note, or what the sweep's own iteration did."""
    lines = [f"# Iteration {st.iteration} on {dc}", ""]
    for v in versions:
        lines += [f"## {v['name']} (try {v['try_no']}, by {v['submitter'] or 'unknown'}, "
                  f"claims {v['claimed_methods'] or 'none'})", "",
                  (v["note"] or "(submitted with no analysis note)").strip(), ""]
    if not versions:
        lines += [f"No version was submitted into this iteration: it ran {st.n_candidates} of "
                  "the sweep's own candidates (the admitted method triples x the launch "
                  "configs).", ""]
    lines += [f"Bottleneck before: {st.bottleneck_before or 'not measured'}; after: "
              f"{st.bottleneck_after or 'not measured'}.",
              "Selected after it, each with the gain it was judged by: "
              + ("; ".join(credit_line(m, st.credit.get(m)) for m in st.selected) or "none")
              + ".",
              f"Ineffective: {', '.join(st.ineffective) or 'none'}."]
    if st.stop:
        lines.append(f"The loop stopped here: {st.stop}.")
    return "\n".join(lines) + "\n"


def _profile(dc: str, st: IterState, figures: dict[str, float] | None) -> str:
    """profile.md: the winner's Nsight Compute figures the loop read (one per metric, the
    launches of a call combined) and the axis scores; or why there is none."""
    cid = (st.best or {}).get("candidate_id")
    lines = [f"# Profile of {cid or 'no winner'} (iteration {st.iteration}, {dc})", ""]
    if not figures:
        lines.append("No Nsight Compute profile of this winner is stored (a CPU device has "
                     "no profiler; on a GPU, ncu may have been off or failed for it).")
    else:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in sorted(figures.items())]
    scores = st.scores_after or st.scores_before
    if scores:
        lines += ["", "Axis scores the bottleneck was read from (kopt.core.bottleneck): "
                  + ", ".join(f"{k} {v:.3g}" for k, v in sorted(scores.items()))]
    return "\n".join(lines) + "\n"
