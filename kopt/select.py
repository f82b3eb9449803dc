"""Selection with DuckDB SQL: the best correct candidate per device class (and problem size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kopt.store import connect

# the loop's winner per run and class (noise-aware: kopt.contest) and the size of its tie
NAMED_CTE = """named as (
  select run_id, device_class, state->>'$.best.candidate_id' as named_id,
         coalesce(json_array_length(state->'$.tie'), 0) as tie_size
  from iterations
  qualify row_number() over (partition by run_id, device_class order by iteration desc) = 1
)"""

BEST_SQL = """
with scope as (
  select * from candidates
  where sweep = $sweep and ($run_id is null or run_id = $run_id)
    and ($run_id is not null or run_id = (select max(run_id) from candidates where sweep = $sweep))
), """ + NAMED_CTE + """
select device_class, dims, candidate_id, compute_method, memory_method, latency_method,
       params, median_ms, iqr_ms, n_samples, speedup, tflops, gbps, run_id, device_name,
       coalesce(candidate_id = named_id, false) as named,
       case when candidate_id = named_id then tie_size else 0 end as tied_with
from scope left join named using (run_id, device_class)
where status = 'ok' and final
qualify row_number() over (partition by device_class, dims
                           order by coalesce(candidate_id = named_id, false) desc,
                                    median_ms, candidate_id) = 1
order by device_class, dims
"""

TOP_SQL = """
with """ + NAMED_CTE + """
select device_class, dims, candidate_id, is_baseline, compute_method, memory_method,
       latency_method, params, median_ms, iqr_ms, speedup, tflops, gbps, registers, spill_bytes,
       coalesce(candidate_id = named_id, false) as named
from candidates left join named using (run_id, device_class)
where run_id = $run_id and status = 'ok' and final
qualify row_number() over (partition by device_class, dims
                           order by coalesce(candidate_id = named_id, false) desc,
                                    median_ms) <= $k
order by device_class, dims, named desc, median_ms
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

    The loop's named winner (kopt.contest: the simplest of the candidates within noise of
    the fastest, after a side-by-side re-measurement) is the best of its class; without
    one, the lowest median.

    Returns:
        One dict per (device_class, dims): methods, params (JSON), median_ms,
        iqr_ms, n_samples, speedup over the baseline, run_id, ``named`` (the loop named
        it) and ``tied_with`` (size of its tie within noise; 0: no tie).
    """
    return _rows(BEST_SQL, {"sweep": sweep, "run_id": run_id}, store)


def top(run_id: str, k: int = 5, store: Path | str | None = None) -> list[dict[str, Any]]:
    """The ``k`` fastest correct candidates of a run per device class and dims."""
    return _rows(TOP_SQL, {"run_id": run_id, "k": k}, store)
