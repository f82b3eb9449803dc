"""``kopt propose``: the next iteration's method scan and triples, from the store's state."""

from __future__ import annotations

import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kopt.core.bottleneck import Evidence, aggregate, analyze
from kopt.core.bottleneck import _cond as condition_holds  # the loop's own reading of a trigger
from kopt.core.catalog import AXES, Catalog, load_catalog
from kopt.core.claims import catalog_scan, catalog_triples
from kopt.core.expand import Expansion, admissible_triples, iter_candidates, scan_axes
from kopt.core.spec import Space, Sweep
from kopt.loop.measured import SourceLost, measured_source
from kopt.loop.state import IterState
from kopt.store.database import Database
from kopt.store.files import StoreError, complete_rows, default_root, stored_json


def _local_device(sweep: Sweep) -> tuple[str, str, int | None]:
    import torch

    if torch.cuda.is_available() and "cuda" in sweep.spaces:
        major, minor = torch.cuda.get_device_capability(0)
        return "cuda", f"local-sm{major}{minor}", major * 10 + minor
    return "cpu", f"cpu-{platform.machine()}", None  # as a run names it (cpu-x86_64)


def propose(sweep: Sweep, store: Path | str | None = None) -> list[dict[str, Any]]:
    """Per device class, what the next iteration starts from and may try (also what
    ``kopt propose --format json`` prints):

    - ``device_class``, ``run_id``, ``next_iteration``, ``sm`` (the SM arch as an int, None
      on a CPU device), ``selected``, ``bottleneck``, ``evidence`` (whether NCU trigger
      verdicts exist), ``stop`` (why the loop stopped, '' when it goes on);
    - ``scan``: every realized method per axis, admitted or skipped with the reason;
      ``catalog_scan``: the same over every catalog method (what a submitted version may
      claim: :mod:`kopt.core.claims`);
    - ``triples``: the admitted triples the next iteration will run; ``strict_triple``: the
      one of them the workflow's strict priority scan picks (:func:`strict_triple`);
      ``strict_claim``: the ``--methods`` a submitted version may claim with no analysis
      note (:func:`strict_claim`: the same scan over every catalog method);
      ``empty_triples``:
      admissible ones whose every launch config the restrictions exclude;
      ``undecided_triples``: in a space too large to walk (kopt.core.expand.WALK_LIMIT), the
      ones whose configs are too many to check and none of PROBE_DRAWS random ones passed;
      ``triples_from``: ``sweep`` (the sweep's ``-D`` realizations) or, once the best is a
      submitted version (``kopt submit``), ``catalog``: the sweep's switches do not apply
      to that source, so ``scan`` is the catalog scan and ``triples`` every admissible
      catalog triple (what the next submitted version may claim);
    - ``best``: the current best (``candidate_id``, ``iteration``, ``triple``, ``params``,
      ``defines``, ``speedup`` over its own iteration's baseline, ``median_ms``) or None;
      ``best_source``: a file holding the exact source it was measured from
      (:func:`kopt.loop.measured.measured_source`: the sweep's source when unchanged since
      the run, else the store's copy; the store's copy of a submitted version);
      ``best.defines`` as ``-D`` flags realize it;
    - ``trigger_evidence``: the NCU evidence behind the triggers (:func:`trigger_evidence`),
      read from the current best's latest profile; None without one.

    It reads the sweep's latest run, as ``kopt best`` does (the latest that stored a
    result, also when it was interrupted: then it answers for the iteration its resume
    goes on with). Without a stored run of this sweep it answers for iteration 1 on this
    machine's device (no NCU evidence: every method counts as triggered).
    """
    cat = load_catalog()
    got = Database(store).latest_states(sweep.name)
    rows = complete_rows([r for r in got if r["iteration"] is not None] or _first(got),
                         ("iteration", "device_class", "backend", "state"),
                         f"iteration state rows of sweep {sweep.name!r}")
    if not rows:
        backend, dc, sm = _local_device(sweep)
        rows = [{"run_id": None, "backend": backend, "device_class": dc, "iteration": 0,
                 "state": IterState().to_json(), "sm": sm}]
    return [_plan(sweep, store, r, cat) for r in rows]


def _first(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Iteration 1's rows (one per device class of the run's record) of a latest run that
    stored no iteration state (interrupted in its first): what its resume goes on with."""
    if not got:
        return []
    r = got[0]
    classes = dict.fromkeys(d.get("device_class") for d in stored_json(r["devices"], "devices",
                                                                      list)
                            if isinstance(d, dict))
    return [{**r, "device_class": dc, "iteration": 0, "state": IterState().to_json()}
            for dc in classes]


def _plan(sweep: Sweep, store: Path | str | None, r: dict[str, Any], cat: Catalog
          ) -> dict[str, Any]:
    """One device class's plan (see :func:`propose`) from its latest state row ``r``."""
    st = IterState.from_json(r["state"]).named()  # the closing contest's best, as `kopt best`
    sm = r.get("sm")
    if r.get("devices"):
        devs = [d for d in stored_json(r["devices"], "devices", list)
                if isinstance(d, dict) and d.get("device_class") == r["device_class"]]
        sm = devs[0]["sm"] if devs else None
    space = sweep.space(r["backend"])
    ctx = st.context()
    plan = {"device_class": r["device_class"], "run_id": r["run_id"],
            "next_iteration": int(r["iteration"]) + 1, "selected": ctx.selected,
            "bottleneck": ctx.bottleneck, "evidence": ctx.triggered is not None,
            "stop": st.stop, "sm": sm,
            "catalog_scan": {a: [asdict(s) for s in v]
                             for a, v in catalog_scan(cat, sm, ctx).items()},
            "best": st.best, "trigger_evidence": _best_evidence(store, r, st, cat)}
    source, own = _best_source(store, r, st, space)
    plan["best_source"] = str(source)
    plan["strict_claim"] = strict_claim(plan["catalog_scan"],
                                        [list(t) for t in catalog_triples(cat, sm, ctx) if any(t)])
    if own is False or (own and not set(st.selected) <= set(space.methods)):
        # the best is a submitted version (or applies a method the sweep does not realize):
        # the sweep's -D realizations are switches of the sweep's own source, not of it;
        # what may come next is any admissible catalog triple
        out = {**plan, "triples_from": "catalog",
               "scan": plan["catalog_scan"], "empty_triples": [], "undecided_triples": [],
               "triples": [list(t) for t in catalog_triples(cat, sm, ctx) if any(t)]}
        return {**out, "strict_triple": strict_triple(out["scan"], out["triples"])}
    triples = [t for t in admissible_triples(space, cat, sm, ctx=ctx) if any(t)]
    have, undecided = triples_with_candidates(iter_candidates(space, cat, sm, ctx=ctx))
    out = {**plan, "triples_from": "sweep",
           "scan": {a: [asdict(s) for s in v]
                    for a, v in scan_axes(space, cat, sm, ctx=ctx).items()},
           "triples": [list(t) for t in triples if t in have],
           "empty_triples": [list(t) for t in triples if t not in have | undecided],
           "undecided_triples": [list(t) for t in triples if t in undecided]}
    return {**out, "strict_triple": strict_triple(out["scan"], out["triples"])}


def strict_triple(scan: dict[str, list[dict[str, Any]]], triples: list[list[str | None]]
                  ) -> list[str | None] | None:
    """The triple the workflow's strict priority scan picks out of ``triples`` (each
    ``[compute, memory, latency]``, None for an axis left as it is): on each axis, in the
    order compute, memory, latency, the highest-priority method ``scan`` lists (its rows
    are in priority order) that still leaves an admissible triple; None when there is no
    triple."""
    if not triples:
        return None
    rank = {axis: {row["method"]: i for i, row in enumerate(rows)}
            for axis, rows in scan.items()}
    return min(triples, key=lambda t: _priority_key(rank, t))


def strict_claim(catalog_scan: dict[str, list[dict[str, Any]]],
                 triples: list[list[str | None]]) -> str | None:
    """The claim a submitted version can make with no analysis note (`kopt submit
    --methods`): the strict priority scan's pick (:func:`strict_triple`) over every
    admissible catalog triple, ranked by ``catalog_scan`` (what :mod:`kopt.core.claims`
    checks a claim against), as ``compute.X,memory.Y,latency.Z`` with ``AXIS.none`` for an
    axis it leaves; None when no catalog triple is admissible."""
    pick = strict_triple(catalog_scan, triples)
    if pick is None:
        return None
    return ",".join(m or f"{axis}.none" for axis, m in zip(AXES, pick))


def _priority_key(rank: dict[str, dict[str, int]], triple: list[str | None]
                  ) -> tuple[int, ...]:
    """``triple``'s place per axis in the scan's priority order (an axis left as it is, or
    a method the scan does not list, after every listed one)."""
    return tuple(rank.get(axis, {}).get(m, len(rank.get(axis, {}))) if m is not None
                 else len(rank.get(axis, {})) for axis, m in zip(AXES, triple))


PROBE_DRAWS = 2_000  # random launch configs per triple of a space too large to walk


def triples_with_candidates(stream: Expansion) -> tuple[set[tuple], set[tuple]]:
    """(the triples with at least one candidate, the undecided ones) of a space: a triple
    whose every launch config the restrictions exclude runs nothing. A space of at most
    kopt.core.expand.WALK_LIMIT configs is walked (streamed: never held) and none is
    undecided; a larger one is probed triple by triple (:meth:`Expansion.probe`, up to
    PROBE_DRAWS configs each), and a triple of more configs none of whose draws passed
    is undecided."""
    have: set[tuple] = set()
    undecided: set[tuple] = set()
    if not stream.huge:
        for c in stream:
            have.add(c.triple)
            have.update(c.aliases)
        return have, undecided
    for plan in stream.plans():
        found = stream.probe(plan, PROBE_DRAWS)
        if found:
            have.add(plan.triple)
        elif found is None:
            undecided.add(plan.triple)
    return have, undecided


def _best_source(store: Path | str | None, r: dict[str, Any], st: IterState,
                 space: Space) -> tuple[Path, bool | None]:
    """(the file holding the source the current best was measured from, whether that is the
    sweep's own source): kopt.loop.measured.measured_source's ``path`` (the sweep's file when
    unchanged, else the store's copy; a submitted version's stored copy); (the sweep's
    source, None) without a stored best.

    Raises:
        StoreError: the best's measured source is lost (its stored copy is gone).
    """
    cid = (st.best or {}).get("candidate_id")
    if r["run_id"] is None or not cid:
        return space.source, None

    db = Database(store if store is not None else default_root())
    try:
        m = measured_source(db, r["run_id"], cid, space)
    except SourceLost as e:  # the store lost the source (the sources table damaged)
        raise StoreError(f"{e}; `kopt propose` needs it to plan from the current best") from None
    return m.path, not m.submitted


def _best_evidence(store: Path | str | None, row: dict[str, Any], st: IterState,
                   cat: Catalog) -> dict[str, Any] | None:
    """:func:`trigger_evidence` from the current best's latest NCU profile in its run."""
    if row["run_id"] is None or not (st.best or {}).get("candidate_id"):
        return None
    db = Database(store if store is not None else default_root())
    rows = db.candidate_metrics(row["run_id"], row["device_class"], st.best["candidate_id"],
                                st.iteration)
    if not rows:
        return None
    return {"candidate_id": st.best["candidate_id"], "iteration": rows[0]["iteration"],
            "dims": stored_json(rows[0]["dims"], "dims") if rows[0]["dims"] else None,
            **trigger_evidence(aggregate(rows), cat)}


def trigger_evidence(metrics: dict[str, float], catalog: Catalog | None = None
                     ) -> dict[str, Any]:
    """What one candidate's aggregated NCU metrics (:func:`kopt.core.bottleneck.aggregate`) say
    about every catalog trigger.

    Returns:
        ``bottleneck``, ``scores`` (axis -> score in [0, 1]), ``stalls`` (reason -> warps
        per issue-active cycle) and ``triggers``: method id -> ``{"text", "verdict",
        "conditions"}``. ``verdict`` is True, False or None (text-only, or a figure is
        missing); ``conditions`` is the trigger's tree: ``{"all"|"any": [...], "holds"}``
        nodes over leaves, each with ``holds`` and the figure read: ``metric``, ``value``,
        ``op``, ``threshold``; a ratio's ``ratio`` (numerator, denominator metric names),
        ``values`` and ``value``; a stall's ``stall`` reason, its ``metric`` and ``value``,
        and ``rank`` (1 = the largest stall) with ``rank_top``, or ``op``/``threshold``.
    """
    cat = catalog or load_catalog()
    ev = analyze(metrics, cat)
    out: dict[str, Any] = {}
    for mid, m in cat.methods.items():
        t = m.trigger or {}
        tree = _explain(t, metrics, ev, cat) if ("all" in t or "any" in t) else None
        out[mid] = {"text": t.get("text", ""), "verdict": tree["holds"] if tree else None,
                    "conditions": tree}
    return {"bottleneck": ev.bottleneck, "scores": ev.scores, "stalls": ev.stalls,
            "triggers": out}


def _explain(c: dict[str, Any], metrics: dict[str, float], ev: Evidence, cat: Catalog
             ) -> dict[str, Any]:
    """One trigger condition with the figures it reads and whether it holds."""
    holds = condition_holds(c, metrics, ev, cat.stall_metric)
    if "all" in c or "any" in c:
        mode = "all" if "all" in c else "any"
        return {mode: [_explain(x, metrics, ev, cat) for x in c[mode]], "holds": holds}
    if "stall" in c:
        name = cat.stall_metric.format(reason=c["stall"])
        leaf = {"stall": c["stall"], "metric": name, "value": metrics.get(name)}
        if "rank_top" in c:
            order = sorted(ev.stalls, key=lambda r: -ev.stalls[r])
            leaf |= {"rank": order.index(c["stall"]) + 1 if c["stall"] in order else None,
                     "rank_top": int(c["rank_top"])}
        else:
            leaf |= {"op": c["op"], "threshold": c["value"]}
        return {**leaf, "holds": holds}
    if "ratio" in c:
        num, den = (metrics.get(m) for m in c["ratio"])
        value = num / den if num is not None and den else None
        return {"ratio": list(c["ratio"]), "values": [num, den], "value": value,
                "op": c["op"], "threshold": c["value"], "holds": holds}
    return {"metric": c.get("metric"), "value": metrics.get(c.get("metric", "")),
            "op": c.get("op"), "threshold": c.get("value"), "holds": holds}


def _leaves(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The leaf conditions of an :func:`_explain` tree, in the trigger's order."""
    if "all" in node or "any" in node:
        return [x for c in node.get("all", node.get("any", [])) for x in _leaves(c)]
    return [node]


def _leaf_figure(leaf: dict[str, Any]) -> tuple[str | None, str | None, Any, Any]:
    """``(metric, op, threshold, value)`` of one leaf: a ratio as ``num/den``; a stall read
    by rank as its metric, op ``rank<=``, threshold ``rank_top`` and value its rank."""
    if "ratio" in leaf:
        return "/".join(leaf["ratio"]), leaf["op"], leaf["threshold"], leaf["value"]
    if "rank_top" in leaf:
        return leaf["metric"], "rank<=", leaf["rank_top"], leaf["rank"]
    return leaf.get("metric"), leaf.get("op"), leaf.get("threshold"), leaf.get("value")


def trigger_digest(method: str, before: dict[str, float], after: dict[str, float],
                   catalog: Catalog | None = None) -> list[dict[str, Any]]:
    """The figures behind ``method``'s catalog trigger on two profiles: the parent's
    aggregated NCU metrics (``before``) and the iteration winner's (``after``), as
    :func:`kopt.core.bottleneck.aggregate` gives them (``{}``: not profiled).

    Returns:
        One dict per leaf condition, in the trigger's order: ``metric`` (a ratio as
        ``num/den``), ``op``, ``threshold``, ``before``, ``after`` (the figure read: a
        value, a ratio, or a stall's rank among all stall reasons with op ``rank<=``) and
        ``holds_before`` / ``holds_after`` (None where a figure is missing). [] when the
        trigger is text only.

    Raises:
        KeyError: ``method`` is not a catalog method.
    """
    cat = catalog or load_catalog()
    t = cat.methods[method].trigger or {}
    if "all" not in t and "any" not in t:
        return []
    trees = [_leaves(_explain(t, m, analyze(m, cat), cat)) for m in (before, after)]
    out = []
    for b, a in zip(*trees):
        metric, op, threshold, value = _leaf_figure(b)
        out.append({"metric": metric, "op": op, "threshold": threshold, "before": value,
                    "after": _leaf_figure(a)[3], "holds_before": b["holds"],
                    "holds_after": a["holds"]})
    return out
