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
with """ + NAMED_CTE + """,
ok as (
  select * from candidates where run_id = $run_id and status = 'ok' and final
),
-- before an iteration: the methods selected so far (applied to all its candidates, not in
-- their triple) and the winner's speedup over iteration 1's baseline, which chains each
-- iteration's speedup (over its own baseline, measured in the same timing run) to the first
carried as (
  select iteration + 1 as iteration, device_class, state->>'$.selected' as carried,
         (state->>'$.best.total_speedup')::double as total_before
  from iterations where run_id = $run_id
  qualify row_number() over (partition by iteration, device_class order by created_at desc) = 1
),
-- a winner is the next iteration's baseline: one row per candidate, where it was found
found as (
  select ok.*, c.carried, ok.speedup * coalesce(c.total_before, 1.0) as chained
  from ok left join carried c using (iteration, device_class)
  qualify row_number() over (partition by ok.device_class, ok.dims, ok.candidate_id
                             order by ok.iteration) = 1
)
select f.device_class, f.dims, f.iteration, f.candidate_id, f.is_baseline, f.compute_method,
       f.memory_method, f.latency_method, f.carried, f.params, f.median_ms, f.iqr_ms,
       f.speedup as speedup_in_iteration, f.chained as speedup, f.tflops, f.gbps,
       f.registers, f.spill_bytes, coalesce(f.candidate_id = n.named_id, false) as named
from found f left join named n using (run_id, device_class)
qualify row_number() over (partition by f.device_class, f.dims
                           order by coalesce(f.candidate_id = n.named_id, false) desc,
                                    f.chained desc nulls last, f.median_ms) <= $k
order by f.device_class, f.dims, f.chained desc nulls last, f.median_ms
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
    """The ``k`` fastest correct candidates of a run per device class and dims, the loop's
    named winner always among them, fastest first.

    A candidate measured in several iterations (a winner is the next iteration's baseline)
    is one row, from the iteration that found it. Sorted by ``speedup``: medians of
    different iterations come from different timing runs, speedups over each iteration's
    own baseline do not. Returns dicts with ``iteration``, the triple, ``carried`` (JSON
    list of the methods selected before that iteration, applied to every candidate of it),
    params, median_ms, iqr_ms, ``speedup_in_iteration`` (over that iteration's baseline,
    same class and dims), ``speedup`` (chained to iteration 1's baseline through the
    winners before: kopt.loop's total speedup) and ``named``."""
    return _rows(TOP_SQL, {"run_id": run_id, "k": k}, store)
