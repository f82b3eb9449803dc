"""Selection: the best correct candidate per device class (and problem size), read through
the Database (kopt.store.database holds the SQL)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kopt.store.database import Database


def best(sweep: str, store: Path | str | None = None, run_id: str | None = None
         ) -> list[dict[str, Any]]:
    """Best correct candidate (lowest median) per device class and dims.

    Args:
        sweep: the sweep name.
        store: the store root.
        run_id: restrict to one run; default: the sweep's latest run.

    The loop's named best (its closing contest's: kopt.core.winner.close_loop; else the last
    iteration's winner) is the best of its class; without one, the lowest median.

    Returns:
        One dict per (device_class, dims): methods, params (JSON), median_ms,
        iqr_ms, n_samples, speedup over the baseline of its iteration, run_id, ``named``
        (the loop named it), ``tied_with`` (size of its tie within noise; 0: no tie),
        ``loop_speedup`` (the first baseline's median over this one's, both from the closing
        contest's side-by-side measurement of this problem size; None without one) and
        ``loop_note`` (e.g. later iterations did not improve on it); against the reference
        (ref.py's contender, else reference, timed as candidates are):
        ``reference_ms`` and ``vs_reference`` (reference_ms / median_ms: above 1 is faster
        than the reference; None when the reference was not timed or not ``ok``); rates
        ``tflops``, ``gbps`` and their share of the device's peak for the sweep's dtype in
        percent, ``pct_peak_flops``, ``pct_peak_bw`` (None where the sweep gives no
        flops/bytes or the peak is not known: kopt.run.devices.peaks); ``max_abs_err`` and
        ``max_rel_err`` of its checked outputs against reference(); ``isolation``: the
        sandbox its code ran in (workers.isolation; None in stores written before it was
        recorded); ``witness``: how the closing contest that named it checked and timed its
        contenders outside their processes (workers.witness: ``8 witness turns each``, or
        ``none: why``; None without a closing, or in stores written before it was
        recorded).
    """
    return by_size(Database(store).best(sweep, run_id))


def by_size(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` ordered by device class, then by their problem size's values as numbers
    (``{"N": 65536}`` before ``{"N": 1048576}``: the store orders the JSON text, a new user
    saw sizes as strings), each group's own order kept."""
    return sorted(rows, key=_size_key)


def _size_key(r: dict[str, Any]) -> tuple:
    """:func:`by_size`'s key of one row: its device class, then each dim as a number."""
    try:
        dims = json.loads(r.get("dims") or "{}")
    except (TypeError, ValueError):
        dims = {}
    return str(r.get("device_class")), tuple(
        (k, float(v), "") if isinstance(v, (int, float)) else (k, 0.0, str(v))
        for k, v in (dims.items() if isinstance(dims, dict) else ()))


def top(run_id: str, k: int = 5, store: Path | str | None = None) -> list[dict[str, Any]]:
    """The ``k`` candidates of a run per device class and dims with the best speedup over
    their own iteration's baseline, the loop's named best first; sizes as :func:`by_size`.

    A candidate measured in several iterations (a winner is the next iteration's baseline)
    is one row, from the iteration that found it. Medians of different iterations come from
    separate timing runs, so no row's figure is multiplied across iterations: ``speedup``
    is over that iteration's baseline (same class and dims, same timing run), and only the
    candidates of the closing contest (first baseline, iteration winners) have
    ``side_by_side_ms`` and ``vs_first_baseline`` (the first baseline's median over theirs,
    measured side by side). Returns dicts with ``iteration``, the triple, ``carried`` (JSON
    list of the methods selected before that iteration, applied to every candidate of it),
    params, median_ms, iqr_ms, speedup, side_by_side_ms, vs_first_baseline, ``named`` and,
    as :func:`best`, reference_ms, vs_reference, pct_peak_flops, pct_peak_bw, max_abs_err and
    max_rel_err."""
    return by_size(Database(store).top_k(run_id, k))
