"""Selection with DuckDB SQL: the best correct candidate per device class (and problem size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kopt.store import connect

BEST_SQL = """
with scope as (
  select * from candidates
  where sweep = $sweep and ($run_id is null or run_id = $run_id)
    and ($run_id is not null or run_id = (select max(run_id) from candidates where sweep = $sweep))
)
select device_class, dims, candidate_id, compute_method, memory_method, latency_method,
       params, median_ms, iqr_ms, n_samples, speedup, tflops, gbps, run_id, device_name
from scope
where status = 'ok' and final
qualify row_number() over (partition by device_class, dims order by median_ms, candidate_id) = 1
order by device_class, dims
"""

TOP_SQL = """
select device_class, dims, candidate_id, is_baseline, compute_method, memory_method,
       latency_method, params, median_ms, iqr_ms, speedup, tflops, gbps, registers, spill_bytes
from candidates
where run_id = $run_id and status = 'ok' and final
qualify row_number() over (partition by device_class, dims order by median_ms) <= $k
order by device_class, dims, median_ms
"""


def _rows(sql: str, params: dict[str, Any], store: Path | str | None) -> list[dict[str, Any]]:
    con = connect(store)
    try:
        cur = con.execute(sql, params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        con.close()


def best(sweep: str, store: Path | str | None = None, run_id: str | None = None
         ) -> list[dict[str, Any]]:
    """Best correct candidate (lowest median) per device class and dims.

    Args:
        sweep: the sweep name.
        store: the store root.
        run_id: restrict to one run; default: the sweep's latest run.

    Returns:
        One dict per (device_class, dims): methods, params (JSON), median_ms,
        iqr_ms, n_samples, speedup over the baseline, run_id.
    """
    return _rows(BEST_SQL, {"sweep": sweep, "run_id": run_id}, store)


def top(run_id: str, k: int = 5, store: Path | str | None = None) -> list[dict[str, Any]]:
    """The ``k`` fastest correct candidates of a run per device class and dims."""
    return _rows(TOP_SQL, {"run_id": run_id, "k": k}, store)
