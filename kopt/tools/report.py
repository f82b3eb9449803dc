"""``kopt report RUN_ID``: summary.md, the best candidate's realized source and PNG plots."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopt.core.bottleneck import aggregate
from kopt.core.compare import RULE
from kopt.core.spec import load_sweep
from kopt.loop.measured import Measured, SourceLost, measured_source
from kopt.loop.state import CLOSING_FAILED, IterState, credit_line
from kopt.loop.submitted import SubmitError
from kopt.store.database import Database
from kopt.store.files import complete_rows, no_run, stored_json
from kopt.tools.submit import lineage, lineage_order, lineage_text
from kopt.util.phases import RUN_PHASES, phase_summary
from kopt.util.words import counted

if TYPE_CHECKING:
    from kopt.core.spec import Space

TOP_METRICS = [
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM SOL %"),
    ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "mem SOL %"),
    ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM %"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "occupancy %"),
]


class ReportError(ValueError):
    """No such run, or nothing to report."""


def _methods(triple: list[str | None] | None) -> str:
    return " + ".join(m for m in (triple or []) if m) or "(no method)"


def _kv(d: dict[str, Any] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (d or {}).items()) or "-"


def first_error(text: str | None) -> str:
    """The line of compiler (or harness) output that states the first error: the first
    ``...error...:`` line (gcc/clang ``f.cpp:3:5: error: ...``, ``fatal error: ...``, nvcc
    ``f.cu(3): error: ...``), not an ``In file included from`` or source-context line;
    else the first non-empty line; '' for no text."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return next((ln for ln in lines if re.search(r"\berror\b[^:|]{0,24}:", ln, re.I)),
                lines[0] if lines else "")


def realized_source(text: str, space: Space | None, defines: dict[str, Any],
                    header: str) -> str:
    """``text`` (a kernel source) with a candidate's ``defines`` written in: ``// header``,
    a comment, one ``#define NAME VALUE`` line per define (sorted by name) and, when
    ``space`` (its sweep's space; None: unknown) names derived quantities, a comment with
    those the defines give; then a blank line and ``text`` as it is."""
    lines = [f"// {header}", "// kopt: the candidate's -D defines, written into the source"]
    lines += [f"#define {k} {v}" for k, v in sorted(defines.items())]
    derived = space.derived_values(dict(defines)) if space is not None else {}
    if derived:
        lines.append(f"// sweep.yaml's derived quantities: {_kv(derived)}")
    return "\n".join(lines) + "\n\n" + text


def measured_realized(db: Database, run_id: str, candidate_id: str, defines: dict[str, Any],
                      header: str) -> tuple[str, Measured]:
    """(the source candidate ``candidate_id`` of ``run_id`` was measured from, realized with
    ``defines`` by :func:`realized_source`; that source with its notes): what every product
    writes (kopt.loop.measured.measured_source: the store's copy, not today's sweep folder).

    Raises:
        SourceLost: the measured source cannot be had (its message says why).
    """
    m = measured_source(db, run_id, candidate_id)
    return realized_source(m.text, m.space, defines, header), m


def source_notes(info: dict[str, Any], run_id: str) -> list[str]:
    """Why no realized source would be written: the run's sweep folder no longer loads
    (moved, deleted, broken); for a run whose best sources were not asked for (each
    written source's own notes come from :func:`measured_realized`). ``info`` is the run's
    ``runs`` record (``sweep_dir``); one line per note, none when all is well."""

    where = info.get("sweep_dir")
    if not where:
        return []
    try:
        load_sweep(Path(where))
    except Exception as e:  # noqa: BLE001 -- whatever stops it loading is the reason to say
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return [f"no best-*.cu/.cpp written: run {run_id}'s sweep folder {where} does not "
                f"load now ({first}); restore it to get the realized sources"]
    return []


def winner_figures(figs: list[dict[str, Any]]) -> dict[tuple, dict[str, float]]:
    """(iteration, device class, candidate id) -> one figure per NCU metric, the launches of
    one ``solve`` call combined by :func:`kopt.core.bottleneck.aggregate` (weighted by each
    launch's duration: a split kernel of 0.07 ms beside a GEMM of 0.52 ms weighs 1/8), as the
    loop's bottleneck reads them; with several problem sizes, those of the last by its dims
    JSON text."""
    rows: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for f in figs:
        key = (f["iteration"], f["device_class"], f["candidate_id"])
        rows.setdefault(key, {}).setdefault(f["dims"], []).append(f)
    return {key: aggregate(by_dims[max(by_dims)]) for key, by_dims in rows.items()}


def write_report(run_id: str, store: Path | str, out: Path,
                 notes: list[str] | None = None) -> Path:
    """Write ``out/summary.md``, ``out/best-<device class>.<cu|cpp>`` and PNG plots.

    Each best-*.cu/.cpp is the source the class's best candidate was measured from, with
    its defines written in (:func:`measured_realized`), whatever the sweep folder holds
    today. ``notes``: a list that gets the notes on those sources (the sweep folder changed
    or does not load, a source not verified against the store), one line each.

    Raises:
        ReportError: the run is not in the store.
    """
    store = Path(store)
    notes = [] if notes is None else notes
    realized: list[str] = []  # the classes whose best source was asked for
    db = Database(store)
    rec = db.run(run_id)
    if rec is None:
        raise ReportError(no_run(store, run_id))
    out.mkdir(parents=True, exist_ok=True)
    env = stored_json(rec.get("env"), "env")
    devices = stored_json(rec.get("devices"), "devices", list)
    states: dict[str, list[IterState]] = {}
    for _it, dc, js in db.iteration_states(run_id):
        states.setdefault(dc, []).append(IterState.from_json(js))
    h = db.run_history(run_id)
    counts, figs, rungs, cand, failed = h.statuses, h.metrics, h.rungs, h.correct, h.failures
    metric_of = winner_figures(figs)

    md = _head_lines(rec, run_id, counts, env, devices, (h.totals or [{}])[0])
    md += _reference_section(h.reference, db.best(rec["sweep"], run_id))
    for dc, sts in states.items():
        closing = sts[-1].closing
        md += _iteration_lines(dc, sts, metric_of, cand, rungs)
        last = sts[-1]
        best = closing.get("best") or last.best or {}
        if not best.get("candidate_id"):
            md += _no_best_lines(dc, failed)
            continue
        md += _best_lines(dc, sts, best, cand)
        md += _best_source(db, rec, dc, best, out, notes)
        realized.append(dc)
        md += _method_lines(last)
        md += ["", "Suggested next steps:", ""] + [f"- {s}" for s in _next_steps(last)]
    if not realized:
        notes += source_notes(rec, run_id)  # no best to write: say what would stop it
    phase_rows = db.phases(run_id)
    md += _phase_lines(phase_rows)
    plots = _plots(states, cand, out) + _timeline(phase_rows, out)
    tree = lineage_picture(store, run_id, out)
    if tree:
        md += ["", "## Lineage", "", f"![the version tree]({tree[0]})", "", "```"] + [
            f"{ln}" for ln in tree[1]] + ["```"]
    if plots:
        md += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    (out / "summary.md").write_text("\n".join(md) + "\n")
    return out / "summary.md"


def _method_lines(last: IterState) -> list[str]:
    """The selected methods, each with the gain it was judged by, and the ineffective ones
    with what they were judged under."""
    return ["", "Effective (selected), each with the gain it was judged by: "
            + ("; ".join(credit_line(m, last.credit.get(m)) for m in last.selected)
               or "none") + ".",
            "Ineffective: " + (", ".join(f"{k} ({_under(v)})"
                                        for k, v in last.ineffective.items()) or "none") + "."]


def _head_lines(rec: dict[str, Any], run_id: str, counts: list[dict[str, Any]],
                env: dict[str, Any], devices: list[dict[str, Any]],
                totals: dict[str, Any]) -> list[str]:
    """summary.md's title, the run's status line (its candidates, jobs and iterations
    counted over every process of the run, from the store; the wall time of the last
    process, as its record holds it) and the environment table."""
    whole = (f"{counted(totals['n_candidates'], 'candidate')}, "
             f"{counted(totals['n_jobs'], 'job')} over "
             f"{counted(totals['n_iterations'], 'iteration')} (every process of the run); "
             if totals.get("n_jobs") else "")
    md = [f"# kopt report: {rec['sweep']}, run {run_id}", "",
          f"Status: {rec['status']}; backend {rec['backend']}; " + whole
          + (f"wall of its last process {rec.get('wall_s') or 0:.1f} s; "
             if rec.get("n_jobs") is not None else
             "wall time not recorded (the run stopped before its end); ")
          + "statuses: " + ", ".join(f"{c['status']} {c['n']}" for c in counts), "",
          "## Environment", "", "| | |", "|---|---|"]
    md += [f"| host | {env.get('host', rec.get('host'))} ({env.get('platform', '')}) |"]
    for d in devices:
        md.append(f"| device | {d['name']} ({d['device_class']}, {d.get('arch')}, "
                  f"{(d.get('memory_bytes') or 0) / 2**30:.0f} GiB) |")
    for k in ("driver", "nvcc", "cxx", "ncu", "ncu_counters", "cutlass", "torch", "torch_cuda",
              "ray", "python"):
        md.append(f"| {k} | {env.get(k) if env.get(k) is not None else 'not found'} |")
    md += [f"| note | {n} |" for n in env.get("notes") or []]
    md.append(f"| kopt | {rec.get('kopt_version')} |")
    return md


def _iteration_lines(dc: str, sts: list[IterState], metric_of: dict[Any, dict[str, float]],
                     cand: list[dict[str, Any]], rungs: list[dict[str, Any]]) -> list[str]:
    """Device class ``dc``'s iteration table and its successive-halving rungs."""
    closing = sts[-1].closing
    # with several problem sizes the winner's median is its smallest, at the size named (the
    # speedup is the geometric mean over the sizes, as everywhere)
    sizes = len({c["dims"] for c in cand if c["device_class"] == dc})
    md = ["", f"## Iterations on {dc}", "", f"Noise: {RULE}.", "",
          "| it | correct | triples tried | winner | params | median ms "
          + ("(its fastest size) | speedup (geometric mean over the sizes) " if sizes > 1
             else "| speedup ")
          + "| vs first baseline, side by side "
          "| bottleneck before -> after | NCU (winner) | stop |", "|" + "---|" * 11]
    for st in sts:
        best = st.best or {}
        m = metric_of.get((st.iteration, dc, best.get("candidate_id")), {})
        ncu = ", ".join(f"{lab} {m[k]:.0f}" for k, lab in TOP_METRICS if k in m) or "-"
        tried = {(c["compute_method"], c["memory_method"], c["latency_method"])
                 for c in cand if c["iteration"] == st.iteration and c["device_class"] == dc}
        # the iteration's gain belongs to its own winner only: a kept parent (no gain
        # beyond noise, or a winner the review gate rejected) is shown with none
        kept = (best.get("iteration") != st.iteration
                or best.get("candidate_id") == (st.baseline or {}).get("candidate_id"))
        gain = "- (kept)" if kept else f"{(st.gain or 1):.3g}x"
        dims = best.get("dims")
        at = (f" at {_kv(dims if isinstance(dims, dict) else stored_json(dims, 'dims'))}"
              if sizes > 1 and dims else "")
        winner = (f"{_methods(best.get('triple'))} | {_kv(best.get('params'))} | "
                  f"{best['median_ms']:.4g}{at} | {gain} | "
                  f"{_vs_first(closing, best)}" if best.get("candidate_id")
                  else "none (no correct candidate) | - | - | - | -")
        md.append(f"| {st.iteration} | {st.n_candidates} | {len(tried)} | {winner} | "
                  f"{st.bottleneck_before or '?'} -> {st.bottleneck_after or '?'} | {ncu} | "
                  f"{st.stop or '-'} |")
    for st in sts:
        rs = [r for r in rungs if r["iteration"] == st.iteration and r["device_class"] == dc]
        if len(rs) > 1:
            md.append(f"\nIteration {st.iteration}, successive halving: " + "; ".join(
                f"rung {r['rung']} measured {counted(r['n'], 'candidate')} (up to "
                f"{counted(r['samples'], 'sample')} each)" for r in rs))
    return md


def _no_best_lines(dc: str, failed: list[dict[str, Any]]) -> list[str]:
    """A class without a correct candidate: each failing status, its count and first error."""
    fails: dict[str, list[str]] = {}
    for c in failed:
        if c["device_class"] == dc:
            fails.setdefault(c["status"], []).append(c.get("error") or "")
    return ["", f"### No correct candidate on {dc}", ""] + [
        f"- {st_}: {len(errs)}; first error: `{first_error(errs[0])[:200] or '-'}`"
        for st_, errs in sorted(fails.items())]


def _best_lines(dc: str, sts: list[IterState], best: dict[str, Any],
                cand: list[dict[str, Any]]) -> list[str]:
    """The class's best candidate, the loop's closing and every side-by-side contest."""
    last, closing = sts[-1], sts[-1].closing
    md = ["", f"### Best candidate on {dc}", "",
          f"- methods: {_methods(best.get('triple'))}; the iterations selected: "
          f"{', '.join(last.selected) or 'none'}"
          + ("" if not last.selected or set(last.selected) <= set(best.get("triple") or [])
             else " (the closing contest named a best without them)"),
          f"- params: {_kv(best.get('params'))}", f"- defines: {_kv(best.get('defines'))}",
          f"- median {best.get('median_ms') or 0:.4g} ms in iteration "
          f"{best.get('iteration', '?')}, {best.get('speedup') or 1:.3g}x that "
          "iteration's baseline"]
    if str(closing.get("note", "")).startswith(CLOSING_FAILED):
        md.append("- **unverified**: the closing contest failed, so this winner of its "
                  "iteration was not re-checked or re-timed by a clock outside its process "
                  "(a candidate that patched its harness's clock could be named here)")
    md += _closing_lines(closing)
    for st in sts:
        if st.contest:
            md += _contest_lines(dc, st, cand)
    return md


def _contest_lines(dc: str, st: IterState, cand: list[dict[str, Any]]) -> list[str]:
    """Iteration ``st``'s side-by-side contest: its verdict and each contender's figure."""
    c = st.contest
    desc = {x["candidate_id"]: _methods([x["compute_method"], x["memory_method"],
                                         x["latency_method"]])
            + " " + _kv(stored_json(x["params"], "params"))
            for x in cand if x["iteration"] == st.iteration and x["device_class"] == dc}
    won = (st.best or {}).get("candidate_id")
    verdict = (f"a **tie** within noise between {len(st.tie)} candidates; the simplest "
               "was named (the fewest methods, then the lowest median), since a method "
               "that buys nothing measurable is not worth carrying on" if st.tie
               else "a clear winner")
    if won not in c:  # the review gate rejected the contest's pick: the parent stays best
        verdict += (f"; the review gate then rejected it (the `reviews` table and `kopt wait` "
                    f"say why), so {won or 'no candidate'} stays the best")
    md = [f"- iteration {st.iteration}: {len(c)} contenders within noise of "
          f"the fastest were re-measured side by side (interleaved): {verdict}:"]
    # labels are against the fastest contender: it is the reference, not TIED
    ordered = sorted(c.items(), key=lambda kv: kv[1]["median_ms"])
    md += [f"  - {'**named** ' if k == won else ''}{desc.get(k, k)} ({k}): "
           f"{'fastest (the others are labelled against it)' if i == 0 else v['label']}, "
           f"{v['median_ms']:.4g} ms"
           for i, (k, v) in enumerate(ordered)]
    return md


def _best_source(db: Database, rec: dict[str, Any], dc: str, best: dict[str, Any], out: Path,
                 notes: list[str]) -> list[str]:
    """Write ``out/best-<dc>.<cu|cpp>``: the measured source of ``best`` (the class's best
    candidate, a state's ``best``) realized with its defines; its summary.md lines (the
    link, then one ``- note:`` per note, each also appended to ``notes`` once)."""
    cid = best.get("candidate_id")
    try:
        src, m = measured_realized(db, rec["run_id"], cid, best.get("defines") or {},
                                   f"kopt best candidate {cid} of run {rec['run_id']}")
    except SourceLost as e:
        notes += [str(e)] if str(e) not in notes else []
        return [f"- note: {e}"]
    name = f"best-{dc}{'.cu' if rec['backend'] == 'cuda' else '.cpp'}"
    (out / name).write_text(src, newline="")
    notes += [n for n in m.notes if n not in notes]
    return [f"- realized source: [{name}]({name})"
            + (f" (the version {m.name} submitted by {m.submitter})" if m.submitted
               else "")] + [
        f"- note: {n}" for n in m.notes]


def _num(v: Any, spec: str = ".4g", unit: str = "") -> str:
    """``v`` formatted, ``-`` when None."""
    return "-" if v is None else f"{v:{spec}}{unit}"


def _reference_section(refs: list[dict[str, Any]], best: list[dict[str, Any]]) -> list[str]:
    """Markdown: the reference's timing per device class and problem size (ref.py's
    contender, else reference, timed as candidates are), and the best candidate of each
    against it, with rates, share of the device's peak and the errors against
    reference(). Empty when the run timed no reference."""
    if not refs:
        return []
    md = ["", "## The reference", "",
          "ref.py's `contender` (else `reference`), timed by the harness as every candidate "
          "is (same flush, warm-up, samples, statistics); % of peak: the device's datasheet "
          "peak for the sweep's dtype (kopt.run.devices.PEAKS; `-`: not known).", "",
          "| device class | dims | timed | status | median ms | IQR ms | TFLOP/s | GB/s "
          "| % of peak (flops / bw) | max abs err | max rel err |", "|" + "---|" * 11]
    for r in refs:
        md.append(f"| {r['device_class']} | {_kv(stored_json(r['dims'], 'dims'))} "
                  f"| {r['impl'] or '-'} "
                  f"| {r['status']} | {_num(r['median_ms'])} | {_num(r['iqr_ms'])} "
                  f"| {_num(r['tflops'], '.3g')} | {_num(r['gbps'], '.4g')} "
                  f"| {_num(r['pct_peak_flops'], '.3g')} / {_num(r['pct_peak_bw'], '.3g')} "
                  f"| {_num(r['max_abs_err'], '.3g')} | {_num(r['max_rel_err'], '.3g')} |")
    if not best:
        return md + ["", "No candidate was correct: none to compare with the reference."]
    md += ["", "| device class | dims | best candidate | median ms | vs reference "
           "| TFLOP/s | GB/s | % of peak (flops / bw) | max abs err | max rel err |",
           "|" + "---|" * 10]
    for b in best:
        md.append(f"| {b['device_class']} | {_kv(stored_json(b['dims'], 'dims'))} "
                  f"| {b['candidate_id']} "
                  f"| {_num(b['median_ms'])} | {_num(b['vs_reference'], '.3f', 'x')} "
                  f"| {_num(b['tflops'], '.3g')} | {_num(b['gbps'], '.4g')} "
                  f"| {_num(b['pct_peak_flops'], '.3g')} / {_num(b['pct_peak_bw'], '.3g')} "
                  f"| {_num(b['max_abs_err'], '.3g')} | {_num(b['max_rel_err'], '.3g')} |")
    return md


def _vs_first(closing: dict[str, Any], best: dict[str, Any]) -> str:
    """A winner's speedup over the first baseline from the closing contest (both re-measured
    side by side), or ``-`` when it was not in it."""
    ms = (closing.get("medians_ms") or {}).get(best.get("candidate_id"))
    first = closing.get("first_baseline_ms")
    return f"{first / ms:.3g}x" if ms and first else "-"


def _closing_lines(closing: dict[str, Any]) -> list[str]:
    """The loop's closing figure (kopt.core.winner.close_loop) as report bullets."""
    if not closing:
        return ["- the loop has no closing measurement (interrupted, or a run from before "
                "closing contests): no total speedup is reported"]
    sp = closing.get("speedup")
    if sp is not None and not closing.get("medians_ms"):  # nothing beat the first baseline
        return [f"- the loop's total: 1x the first baseline: {closing.get('note')}"]
    out = [f"- the loop's total: {sp:.3g}x the first baseline, "
           f"{closing.get('first_baseline_ms') or 0:.4g} ms -> {closing.get('best_ms') or 0:.4g}"
           " ms, the first baseline and every iteration's winner re-measured side by side "
           "(interleaved; `contests` rows with iteration 0)" if sp is not None else
           "- the loop's total speedup is not known: the first baseline was not re-measured"]
    if closing.get("note"):
        out.append(f"- **{closing['note']}**")
    out += [f"- dropped from the closing contest: {c} ({why.splitlines()[0][:800]})"
            for c, why in (closing.get("dropped") or {}).items()]
    return out


def _under(judged: str | None) -> str:
    """What an ineffective mark was judged under, in words (kopt.core.expand
    ``judged_under``)."""
    if judged and judged.startswith("unprofiled:"):
        return f"on the best {judged.split(':', 1)[1]}, no profiler"
    return f"under {judged or 'unknown'} bottleneck"


def _next_steps(st: IterState) -> list[str]:
    steps = []
    if st.stop.startswith("no gain"):
        steps.append("the last iteration brought no gain beyond noise: add realizations of "
                     "untried catalog methods to sweep.yaml (`kopt propose` lists the scan)")
    if st.bottleneck_after == "memory":
        steps.append("memory-bound: compare achieved GB/s with the device's copy bandwidth; "
                     "next candidates are fewer bytes (fusion, reuse) or wider accesses")
    elif st.bottleneck_after == "compute":
        steps.append("compute-bound: lower-precision or tensor-core paths, or fewer "
                     "instructions per result")
    elif st.bottleneck_after == "latency":
        steps.append("latency-bound: more independent work in flight (ILP, occupancy, "
                     "asynchronous copies)")
    if st.triggered is None:
        steps.append("no NCU evidence was collected (CPU backend or no ncu): run on a GPU "
                     "node with Nsight Compute to let triggers prune the scan")
    if st.ineffective:
        steps.append("ineffective methods become admissible again when the bottleneck changes "
                     "(with no profiler: once another best is found)")
    return steps or ["run more iterations (`--iterations`)"]


def lineage_picture(store: Path, run_id: str, out: Path) -> tuple[str, list[str]] | None:
    """Draw ``run_id``'s version tree (kopt.tools.submit.lineage: one box per node, labelled
    with :meth:`kopt.tools.submit.Node.caption`, an arrow from the node holding each node's
    parent candidate) as ``out/lineage.png``. Returns the file's name and the tree as text
    lines (kopt.tools.submit.lineage_text), or None when the run has no candidate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    try:
        nodes = lineage(store, run_id)
    except SubmitError:
        return None
    order = lineage_order(nodes)
    depth = max(d for d, _, _ in order)
    fig, ax = plt.subplots(figsize=(3.4 * (depth + 1) + 0.6, 1.05 * len(order) + 0.6))
    at = {n.key: (d, -i) for i, (d, n, _) in enumerate(order)}
    for d, n, up in order:
        ok = n.best is not None
        ax.text(d, at[n.key][1], n.caption(), ha="left", va="center", fontsize=7,
                parse_math=False,
                bbox={"boxstyle": "round", "fc": "#e8f4e8" if ok else "#f8e4e4", "ec": "gray"})
        if up is not None:
            ax.annotate("", xy=(d - 0.03, at[n.key][1]), xytext=(at[up.key][0] + 0.15,
                                                                 at[up.key][1] - 0.3),
                        arrowprops={"arrowstyle": "->", "color": "gray",
                                    "connectionstyle": "angle,angleA=-90,angleB=180"})
    ax.set_xlim(-0.1, depth + 1.0)
    ax.set_ylim(-len(order) + 0.4, 0.6)
    ax.axis("off")
    ax.set_title(f"run {run_id}: versions (parent -> child)", fontsize=9)
    fig.savefig(out / "lineage.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "lineage.png", lineage_text(nodes)


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plots(states: dict[str, list[IterState]], cand: list[dict[str, Any]], out: Path
           ) -> list[str]:
    """Save the report's figures into ``out`` (:func:`speedup_figure`,
    :func:`median_figure`); returns their file names, none for a figure without data."""
    plt = _pyplot()
    names = []
    figs = [("speedup_per_iteration.png", speedup_figure(states))]
    got = median_figure(cand)
    if got is not None:
        figs.append((f"median_vs_{got[0]}.png", got[1]))
    for name, fig in figs:
        if fig is not None:
            fig.savefig(out / name, dpi=110)
            plt.close(fig)
            names.append(name)
    return names


def speedup_figure(states: dict[str, list[IterState]]) -> Any:
    """Each iteration's winner as a speedup over the first baseline (both re-measured side
    by side in the loop's closing contest), one line per device class, iterations on an
    integer axis; a matplotlib Figure, or None when no iteration has a winner."""
    from matplotlib.ticker import MaxNLocator

    if not any(s.best for sts in states.values() for s in sts):  # no line for no winner
        return None
    fig, ax = _pyplot().subplots(figsize=(6, 3.5))
    for dc, sts in states.items():
        closing = sts[-1].closing
        first, ms = closing.get("first_baseline_ms"), closing.get("medians_ms") or {}
        pts = [(0, 1.0)] + [(s.iteration, first / ms[s.best["candidate_id"]])
                            for s in sts if first and s.best
                            and ms.get(s.best["candidate_id"])]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o",
                label=dc or "(device class not recorded)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("speedup over the first baseline (x)")
    ax.set_title("each iteration's winner, re-measured side by side")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def median_figure(cand: list[dict[str, Any]]) -> tuple[str, Any] | None:
    """Iteration 1's best median time (ms) per value of the parameter with the most
    values, each point with an error bar as long as that candidate's IQR (ms), centred on
    its median (rows without an IQR: no bar); ``(parameter, Figure)``, or None when
    iteration 1 has no correct candidate with a parameter."""
    first = complete_rows([c for c in cand if c["iteration"] == 1], ("median_ms",),
                          "correct candidate rows of iteration 1")
    params = [stored_json(c["params"], "params") for c in first]
    keys = {k for p in params for k in p}
    key = max(sorted(keys), key=lambda k: len({str(p.get(k)) for p in params}), default=None)
    if key is None:
        return None
    best: dict[Any, dict[str, Any]] = {}  # value -> its fastest row
    for c, p in zip(first, params):
        if key in p and (p[key] not in best or c["median_ms"] < best[p[key]]["median_ms"]):
            best[p[key]] = c
    xs = sorted(best)
    fig, ax = _pyplot().subplots(figsize=(6, 3.5))
    ax.errorbar([str(x) for x in xs], [best[x]["median_ms"] for x in xs],
                yerr=[(best[x].get("iqr_ms") or 0.0) / 2 for x in xs], marker="o",
                capsize=3)
    ax.set_xlabel(key)
    ax.set_ylabel("best median time (ms); bar: its IQR")
    ax.set_title(f"iteration 1: median time across {key}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return key, fig


def _phase_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The run's time breakdown (kopt.util.phases) as a markdown table; a line saying so when
    the run has none (a run from before the ``phases`` table)."""

    if not rows:
        return ["", "## Where the time went", "", "This run recorded no phases (a run from "
                "before the `phases` table)."]
    md = ["", "## Where the time went", "",
          "Seconds since kopt started in the driver process (its imports included); "
          "per device: the total of each kind of interval (`busy xN`: the sum of N "
          "intervals between the first start and the last end). Timeline: `timeline.png`.", "",
          "| phase | where | start s | end s | seconds |", "|---|---|---|---|---|"]
    md += [f"| {p} | {w} | {a:.2f} | {b:.2f} | {d:.2f} |" for p, w, a, b, d in
           phase_summary(rows)]
    return md


MAX_BUILD_LANES = 32  # rows of build bars in the timeline (more builds at once share the last)


def _lanes(rows: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The timeline's rows, top to bottom: one per run-level phase (a waterfall), the
    builds stacked into as many rows as ran at once, one per device; a row whose every
    interval is of no length (nothing to draw) is left out."""

    lanes = [(r["phase"], [r]) for p in RUN_PHASES for r in rows
             if r["phase"] == p and not r.get("device") and p not in ("run", "end")]
    build_lanes: list[list[dict[str, Any]]] = []
    for r in sorted((r for r in rows if r["phase"] == "build"), key=lambda r: r["start_s"]):
        free = next((ln for ln in build_lanes if ln[-1]["end_s"] <= r["start_s"]), None)
        if free is None and len(build_lanes) < MAX_BUILD_LANES:
            build_lanes.append(free := [])
        (free if free is not None else build_lanes[-1]).append(r)
    lanes += [(f"build {k + 1}", ln) for k, ln in enumerate(build_lanes)]
    devs = sorted({(r.get("device_class") or "", r["device"]) for r in rows if r.get("device")})
    lanes += [(f"{dc} {dev}", [r for r in rows if r.get("device") == dev]) for dc, dev in devs]
    return [(name, rs) for name, rs in lanes if any(r["end_s"] > r["start_s"] for r in rs)]


# every phase's colour, the same in every report: the phases kopt records in a fixed
# order of tab20's colours; another name (a phase added later) by a digest of its name
PHASE_ORDER = ("startup", "checks", "ray", "devices", "reference", "first_build",
               "first_result", "stop_devices", "store", "device_start", "busy",
               "build_wait", "ncu", "contest", "build", "clock")


def phase_color(phase: str) -> tuple[float, float, float, float]:
    """The timeline's colour (RGBA, 0-1) of ``phase``: the same for a phase name in every
    report, whatever other phases a run has (:data:`PHASE_ORDER`)."""
    import zlib

    plt = _pyplot()
    k = (PHASE_ORDER.index(phase) if phase in PHASE_ORDER
         else len(PHASE_ORDER) + zlib.crc32(phase.encode()) % (20 - len(PHASE_ORDER)))
    return tuple(plt.get_cmap("tab20")(k % 20))


def _timeline(rows: list[dict[str, Any]], out: Path) -> list[str]:
    """Draw ``timeline.png`` (:func:`timeline_figure`); ``["timeline.png"]``, [] without
    phases."""
    fig = timeline_figure(rows)
    if fig is None:
        return []
    fig.savefig(out / "timeline.png", dpi=110)
    _pyplot().close(fig)
    return ["timeline.png"]


def timeline_figure(rows: list[dict[str, Any]]) -> Any:
    """The run's phases as a waterfall, the builds and each device's intervals (busy,
    waiting for builds, NCU, contests, reference, start) against seconds since kopt
    started, one lane per row that has an interval of some length (:func:`_lanes`), each
    phase in its :func:`phase_color`; a matplotlib Figure, None without phases."""
    from matplotlib.patches import Patch

    if not rows:
        return None
    lanes = _lanes(rows)
    kinds = sorted({r["phase"] for _, rs in lanes for r in rs})
    color = {k: phase_color(k) for k in kinds}
    fig, ax = _pyplot().subplots(figsize=(10, 1.5 + 0.3 * len(lanes)))
    for y, (_, rs) in enumerate(reversed(lanes)):
        by_kind: dict[str, list[tuple[float, float]]] = {}
        for r in rs:  # one call per lane and kind: a run of 10^5 jobs draws in seconds
            by_kind.setdefault(r["phase"], []).append(
                (r["start_s"], max(r["end_s"] - r["start_s"], 1e-3)))
        for kind, spans in by_kind.items():
            ax.broken_barh(spans, (y - 0.4, 0.8), color=color[kind], edgecolor="white",
                           linewidth=0.5, label=kind)
    ax.set_yticks(range(len(lanes)), [name for name, _ in reversed(lanes)], fontsize=7)
    end = max(r["end_s"] for r in rows)
    ax.axvline(end, color="black", lw=0.8)
    ax.set_xlabel("seconds since kopt started")
    ax.set_title(f"where the run's time went ({end:.1f} s to the end of the run)")
    ax.legend(handles=[Patch(color=color[k], label=k) for k in kinds],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
