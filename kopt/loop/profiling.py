"""NCU profiles for the NCU-guided loop: which metrics each device class's ncu knows, and
one profiled pass per iteration and class for the baseline and the top-k (the device
actor's profiling observers, workers.observers; Nsight Compute's: one ncu process). The
observers' declared columns become ``profiles`` columns; NCU's metric rows become
``metrics`` rows and, scored, the axis scores of ``profiles``."""

from __future__ import annotations

import functools
import json
from typing import Any

from kopt.core.bottleneck import Evidence, aggregate, analyze, resolve_metrics, wanted_metrics
from kopt.run.context import RunContext
from kopt.run.runner import DeviceError
from kopt.store.files import now
from kopt.util.words import counted
from workers import ncu as wncu
from workers.observers import observer_columns
from workers.records import RunJob
from workers.status import Status

# (ranked row, its job rows, the row of its first dims)
Todo = tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]


def warm_up(ctx: RunContext, names: dict[str, list[str]]) -> None:
    """Have every live device of a class with metrics to collect start its ncu process for
    the iteration's profile now (workers.ncu_warm), without waiting: it starts while the
    device times candidates."""
    for i, info in enumerate(ctx.runner.infos):
        if names.get(info["device_class"]) and i not in ctx.runner.dead:
            ctx.runner.cast(i, "ncu_warm", names[info["device_class"]], ctx.sweep.ncu.sections)


def resolve(ctx: RunContext) -> dict[str, list[str]]:
    """Per device class, the metric names its ncu knows (aliases applied); missing names
    are reported once. A device that adopted a harness this driver started before Ray
    (``info["prestarted"]``: it is on the driver's node) takes the list of the query the
    driver started then (workers.ncu.start_query), without asking the device's actor."""
    out: dict[str, list[str]] = {}
    if ctx.sweep.ncu.top_k <= 0:  # no profiles: the metric guide is not even read
        return out
    wanted = wanted_metrics(ctx.sweep.ncu.metrics or [], ctx.catalog)
    for i, info in enumerate(ctx.runner.infos):
        dc = info["device_class"]
        if dc in out:
            continue
        ctx.phases.begin("ncu", info)
        started, avail = wncu.early_query() if info.get("prestarted") else (False, None)
        if not started:
            try:
                avail = ctx.runner.call(i, "query_metrics", timeout=600)
            except DeviceError:
                avail = None
        ctx.phases.end("ncu", info, detail="ncu --query-metrics" + (
            " (started before Ray)" if started else ""))
        keep, aliased, missing = resolve_metrics(wanted, set(avail) if avail else None)
        out[dc] = keep
        for o in ctx.observers:
            o.on_metrics(dc, aliased, missing)
    return out


def _todo(ctx: RunContext, it: int, dc: str, picks: list[dict[str, Any]],
          evidence: dict[str, Evidence]) -> list[Todo]:
    todo = []
    for r in picks:
        if (it, dc, r["candidate_id"]) in ctx.agg:  # profiled already (the baseline)
            evidence[r["candidate_id"]] = analyze(ctx.agg[(it, dc, r["candidate_id"])],
                                                  ctx.catalog)
            continue
        job_rows = [row for row in ctx.rows.values()
                    if row["iteration"] == it and row["candidate_id"] == r["candidate_id"]
                    and row["device_class"] == dc]
        if job_rows:
            todo.append((r, job_rows, profiled_row(ctx, job_rows)))
    return todo


def profiled_row(ctx: RunContext, job_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The job row (one problem size of a candidate) its NCU profile captures: the size
    sweep.yaml's ``ncu.dims`` names (an index into the backend's ``dims:``) when the
    candidate ran it, else the size whose dims JSON sorts first."""
    at = ctx.sweep.ncu.dims
    if at is not None:
        space = ctx.sweep.spaces.get(ctx.backend)
        want = (json.dumps(space.dims[at], sort_keys=True)
                if space is not None and at < len(space.dims) else None)
        for row in job_rows:
            if want is not None and json.dumps(json.loads(row["dims"]), sort_keys=True) == want:
                return row
    return min(job_rows, key=lambda row: row["dims"])


def shares(todo: list[Todo], devices: list[int]) -> list[tuple[int, list[int]]]:
    """Split the candidates to profile over a class's live devices, round robin: (device,
    indices into ``todo``) per device that gets any. One device: all of them, one ncu
    process (several GPUs of a class profile their shares at once, each ncu
    under its own GPU's lock, workers.ncu)."""
    out = [(d, list(range(k, len(todo), len(devices)))) for k, d in enumerate(devices)]
    return [(d, idx) for d, idx in out if idx]


def _capture(ctx: RunContext, devices: list[int], todo: list[Todo],
             metrics: list[str] | None) -> list[dict[str, Any]]:
    """One profiled pass (one ncu process) per device for its share of ``todo``, the
    devices at once; the observers' results for each candidate in ``todo``'s order
    (``profile_status``, ``profile_error``, ``ncu_rows``, ...)."""
    cuda = ctx.backend == "cuda"
    if not cuda or not metrics or ctx.sweep.ncu.top_k <= 0:
        why = "NCU needs the cuda backend" if not cuda else "ncu unavailable or top_k is 0"
        return [{"profile_status": Status.NOT_PROFILED, "profile_error": why} for _ in todo]
    payloads = [RunJob(first["job_key"], r["build_id"], json.loads(first["dims"]),
                       ctx.common).payload() for r, _, first in todo]
    kernels = [[k["name"] for k in (ctx.builder.results[r["build_id"]].kernels
                                    if r["build_id"] in ctx.builder.results else [])]
               for r, _, _ in todo]
    arts = [ctx.builder.artifacts[r["build_id"]] for r, _, _ in todo]
    split = shares(todo, devices)
    for d, _ in split:
        # the loop's closing follows a profiling pass: the outside clock's second harness
        # starts meanwhile (workers.device_actor clock_ready)
        ctx.runner.cast(d, "clock_ready")
        ctx.phases.begin("ncu", ctx.runner.infos[d])
    got = ctx.runner.call_many([
        (d, "profile_many", ([payloads[j] for j in idx], [kernels[j] for j in idx], metrics,
                             ctx.sweep.ncu.sections, *[arts[j] for j in idx]))
        for d, idx in split], done=functools.partial(_ncu_done, ctx, split))
    out: list[dict[str, Any]] = [{} for _ in todo]
    for (_, idx), res in zip(split, got):
        for n, j in enumerate(idx):
            out[j] = ({"profile_status": Status.CRASHED, "profile_error": str(res)}
                      if isinstance(res, DeviceError) else res[n])
    return out


def _ncu_done(ctx: RunContext, split: list[tuple[int, list[int]]], k: int, res: Any
              ) -> None:
    """Close the ``ncu`` phase of share ``k``'s device as its captures come back (each
    device's own end, not the slowest one's); its detail says how many candidates and how
    long the profiler's own processes ran (``ncu_seconds``: the rest of the phase is the
    device actor reading the report and the call's round trip)."""
    d, idx = split[k]
    secs = sum(r.get("ncu_seconds") or 0.0 for r in res) if isinstance(res, list) else 0.0
    ctx.phases.end("ncu", ctx.runner.infos[d], detail=counted(len(idx), "candidate") + (
        f"; ncu processes {secs:.2f} s" if secs else ""))


def _record(ctx: RunContext, it: int, dc: str, todo: Todo, status: dict[str, Any]
            ) -> Evidence:
    """Write one candidate's metrics and profile rows (every profiling observer's declared
    column from ``status``, its results); returns its evidence."""
    r, job_rows, first = todo
    rows = status.get("ncu_rows") or []
    if rows:
        ctx.writer.add("metrics", [{
            "run_id": ctx.run_id, "sweep": ctx.sweep.name, "iteration": it,
            "candidate_id": r["candidate_id"], "device_class": dc, "dims": first["dims"],
            "kernel": x["kernel"], "launch": x["launch"], "metric": x["metric"],
            "value": x["value"], "unit": x["unit"], "created_at": now()} for x in rows])
    agg = aggregate(rows)
    ev = analyze(agg, ctx.catalog) if rows else Evidence()
    ctx.agg[(it, dc, r["candidate_id"])] = agg
    columns = {k: status.get(k) for k in observer_columns("profiles")}
    if not rows:
        ctx.unprofiled[(it, dc, r["candidate_id"])] = (
            f"{status.get('profile_status')}: {status.get('profile_error') or 'no metric rows'}")
    ctx.writer.add("profiles", [{
        "run_id": ctx.run_id, "job_key": row["job_key"], **columns,
        "compute_score": ev.scores.get("compute"), "memory_score": ev.scores.get("memory"),
        "latency_score": ev.scores.get("latency"), "bottleneck": ev.bottleneck,
        "created_at": now()} for row in job_rows])
    return ev


def profile(ctx: RunContext, it: int, dc: str, ranked: list[dict[str, Any]],
            metrics: list[str] | None) -> dict[str, Evidence]:
    """Profile the baseline and the top-k of one iteration on the live devices of class
    ``dc`` (shared among them, :func:`shares`); write metrics rows and the candidates'
    profile status and axis scores. Returns candidate id -> its evidence."""
    k = ctx.sweep.ncu.top_k
    picks = [r for r in ranked if r["is_baseline"]] + [r for r in ranked[:k]
                                                      if not r["is_baseline"]]
    evidence: dict[str, Evidence] = {}
    live = ctx.runner.live(dc)
    if not live:
        return evidence
    todo = _todo(ctx, it, dc, picks, evidence)
    if not todo:
        return evidence
    for t, status in zip(todo, _capture(ctx, live, todo, metrics)):
        evidence[t[0]["candidate_id"]] = _record(ctx, it, dc, t, status)
    return evidence
