"""Bottleneck analysis: NCU metrics -> axis scores, ranked axes and catalog trigger verdicts.

Axis scores use normalized figures only (% of peak, shares), never raw counts
against percentages:

- ``compute`` = max(SM throughput, FMA pipe, tensor pipe, issue active) / 100
  (speed-of-light % of peak);
- ``memory`` = max(memory throughput, DRAM throughput, L1TEX, L2) / 100;
- ``latency`` = (1 - max(compute, memory)) x the share of warp stall time in
  latency-type stalls (long/short scoreboard, barrier, membar, wait, ...):
  high when neither unit is busy and warps mostly wait -- NCU's own reading
  of "latency bound" (both speed-of-light figures low).

Stall reasons map to axes through catalog/metrics.yaml (``stall_reasons``);
the ``info`` ones (``selected``) are not stalls and are left out of shares and
ranks. Triggers follow catalog/methods.yaml's condition forms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kopt.core.catalog import AXES, Catalog, load_catalog, load_metric_guide
from workers.ncu import parse_query_metrics  # noqa: F401  (re-exported: its old home)

COMPUTE = ["sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
           "smsp__issue_active.avg.pct_of_peak_sustained_active"]
MEMORY = ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
          "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
          "l1tex__throughput.avg.pct_of_peak_sustained_active",
          "lts__throughput.avg.pct_of_peak_sustained_elapsed"]
DURATION = "gpu__time_duration.sum"


def aggregate(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """One figure per metric over all profiled launches of a candidate.

    Each metric is averaged over launches weighted by the launch's
    ``gpu__time_duration.sum`` (equal weights when absent), so a multi-kernel
    ``solve`` is read like one kernel of its combined time; the duration itself
    is summed.

    Args:
        rows: dicts with ``launch`` (None or absent: launch 0), ``metric`` and ``value``.
    """
    by_launch: dict[int, dict[str, float]] = {}
    for r in rows:
        by_launch.setdefault(int(r.get("launch") or 0), {})[r["metric"]] = float(r["value"])
    if not by_launch:
        return {}
    weights = {k: v.get(DURATION, 1.0) or 1.0 for k, v in by_launch.items()}
    out: dict[str, float] = {}
    names = {m for v in by_launch.values() for m in v}
    for m in names:
        have = [(weights[k], v[m]) for k, v in by_launch.items() if m in v]
        if m == DURATION:
            out[m] = sum(x for _, x in have)
        else:
            w = sum(w for w, _ in have)
            out[m] = sum(w * x for w, x in have) / w
    return out


@dataclass
class Evidence:
    """What the metrics of one candidate say.

    Attributes:
        scores: axis -> score in [0, 1] (absent when the figures are missing).
        ranked: axes by descending score.
        stalls: stall reason -> warps per issue-active cycle (``info`` reasons excluded).
        missing: metric names the scores wanted but the report lacked.
    """

    scores: dict[str, float] = field(default_factory=dict)
    ranked: list[str] = field(default_factory=list)
    stalls: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    @property
    def bottleneck(self) -> str | None:
        """The top-ranked axis, or None without metrics."""
        return self.ranked[0] if self.ranked else None


def _stall_name(template: str, reason: str) -> str:
    return template.format(reason=reason)


def analyze(metrics: Mapping[str, float], catalog: Catalog | None = None) -> Evidence:
    """Axis scores, ranks and stall figures from one candidate's aggregated metrics."""
    cat = catalog or load_catalog()
    guide = load_metric_guide()
    ev = Evidence()
    stall_axes = {r: v["axis"] for r, v in (guide.get("stall_reasons") or {}).items()}
    for reason, axis in stall_axes.items():
        name = _stall_name(cat.stall_metric, reason)
        if axis != "info" and name in metrics:
            ev.stalls[reason] = metrics[name]
    comp = [metrics[m] for m in COMPUTE if m in metrics]
    mem = [metrics[m] for m in MEMORY if m in metrics]
    ev.missing = [m for m in COMPUTE[:1] + MEMORY[:1] if m not in metrics]
    if comp:
        ev.scores["compute"] = min(max(comp) / 100.0, 1.0)
    if mem:
        ev.scores["memory"] = min(max(mem) / 100.0, 1.0)
    total = sum(ev.stalls.values())
    if comp and mem and total > 0:
        lat_share = sum(v for r, v in ev.stalls.items() if stall_axes[r] == "latency") / total
        ev.scores["latency"] = (1.0 - max(ev.scores["compute"], ev.scores["memory"])) * lat_share
    ev.ranked = sorted(ev.scores, key=lambda a: (-ev.scores[a], AXES.index(a)))
    return ev


_OPS = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__,
        "==": float.__eq__}


def _cond(c: Mapping[str, Any], metrics: Mapping[str, float], ev: Evidence,
          template: str) -> bool | None:
    """True/False, or None when a figure the condition needs is missing."""
    if "all" in c or "any" in c:
        parts = [_cond(x, metrics, ev, template) for x in c.get("all", c.get("any", []))]
        if "all" in c:
            if any(p is False for p in parts):
                return False
            return None if any(p is None for p in parts) else True
        if any(p is True for p in parts):
            return True
        return None if any(p is None for p in parts) else False
    if "stall" in c:
        reason = c["stall"]
        if not ev.stalls:
            return None
        if "rank_top" in c:
            top = sorted(ev.stalls, key=lambda r: -ev.stalls[r])[: int(c["rank_top"])]
            return reason in top
        v = metrics.get(_stall_name(template, reason))
        return None if v is None else _OPS[c["op"]](float(v), float(c["value"]))
    if "ratio" in c:
        num, den = (metrics.get(m) for m in c["ratio"])
        if num is None or den is None:
            return None
        if den == 0:
            return False  # not a number: the condition does not hold (catalog convention)
        return _OPS[c["op"]](float(num) / float(den), float(c["value"]))
    if "metric" in c:
        v = metrics.get(c["metric"])
        return None if v is None else _OPS[c["op"]](float(v), float(c["value"]))
    return None


def triggers(metrics: Mapping[str, float], catalog: Catalog | None = None,
             ev: Evidence | None = None) -> dict[str, bool | None]:
    """Each catalog method's trigger verdict: True, False, or None (not decidable here:
    the trigger is text-only or a figure it needs is missing)."""
    cat = catalog or load_catalog()
    ev = ev or analyze(metrics, cat)
    out: dict[str, bool | None] = {}
    for mid, m in cat.methods.items():
        t = m.trigger or {}
        out[mid] = _cond(t, metrics, ev, cat.stall_metric) if ("all" in t or "any" in t) else None
    return out


def wanted_metrics(extra: Iterable[str] = (), catalog: Catalog | None = None) -> list[str]:
    """Every metric the loop reads: the guide's ``always`` list, every stall(X) metric and
    every metric a trigger names, plus ``extra`` (the sweep's ``ncu.metrics``)."""
    cat = catalog or load_catalog()
    guide = load_metric_guide()
    names = list(guide.get("always") or [])
    names += [_stall_name(cat.stall_metric, r) for r in (guide.get("stall_reasons") or {})]

    def walk(c: Any) -> None:
        if isinstance(c, dict):
            if "metric" in c:
                names.append(c["metric"])
            if "ratio" in c:
                names.extend(c["ratio"])
            for k in ("all", "any"):
                for x in c.get(k, []):
                    walk(x)
    for m in cat.methods.values():
        walk(m.trigger)
    names += list(extra)
    return list(dict.fromkeys(names))


# Launch attributes and sampler counters: collected by ncu but absent from --query-metrics.
_UNLISTED = ("launch__", "sm__maximum_warps_per_active_cycle_pct", "smsp__pcsamp_")


def resolve_metrics(wanted: Iterable[str], available: set[str] | None
                    ) -> tuple[list[str], dict[str, str], list[str]]:
    """Map wanted metric names onto a device's ``ncu --query-metrics`` base names.

    Args:
        wanted: full metric names (base + rollup suffix).
        available: base names the device lists; None = unknown (keep everything).

    Returns:
        (names to collect, {alias used -> canonical name}, canonical names missing).
    """
    if available is None:
        return list(wanted), {}, []
    aliases = {name: list(v.get("aliases") or [])
               for name, v in (load_metric_guide().get("metrics") or {}).items()}
    keep, used, missing = [], {}, []
    for name in wanted:
        cands = [name, *aliases.get(name, [])]
        hit = next((c for c in cands if c.startswith(_UNLISTED)
                    or c.split(".")[0] in available), None)
        if hit is None:
            missing.append(name)
        else:
            keep.append(hit)
            if hit != name:
                used[hit] = name
    return keep, used, missing
