"""Selection with DuckDB SQL: the best correct candidate per device class (and problem size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kopt.store import connect

# the loop's named best per run and class: the closing contest's (kopt.contest.close_loop),
# else the last iteration's winner; the size of its tie; the first baseline and the loop's
# total speedup, both from the closing contest (side by side)
NAMED_CTE = """named as (
  select run_id, device_class,
         coalesce(state->>'$.closing.best.candidate_id', state->>'$.best.candidate_id')
           as named_id,
         case when coalesce(state->>'$.closing.best.candidate_id',
                            state->>'$.best.candidate_id') = state->>'$.best.candidate_id'
              then coalesce(json_array_length(state->'$.tie'), 0) else 0 end as tie_size,
         state->>'$.closing.first_baseline' as first_id,
         state->>'$.closing.note' as loop_note
  from iterations
  qualify row_number() over (partition by run_id, device_class
                             order by iteration desc, created_at desc) = 1
), closing as (
  select run_id, device_class, dims, candidate_id, median_ms as side_by_side_ms
  from contests where iteration = 0 and median_ms is not null
  qualify row_number() over (partition by run_id, device_class, dims, candidate_id
                             order by created_at desc) = 1
), vs_first as (
  -- per problem size: the first baseline's side-by-side median over each contender's
  select c.run_id, c.device_class, c.dims, c.candidate_id, c.side_by_side_ms,
         f.side_by_side_ms / c.side_by_side_ms as vs_first_baseline
  from closing c join named n using (run_id, device_class)
  left join closing f on f.run_id = c.run_id and f.device_class = c.device_class
    and f.dims = c.dims and f.candidate_id = n.first_id
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
       case when candidate_id = named_id then tie_size else 0 end as tied_with,
       case when candidate_id = named_id then v.vs_first_baseline end as loop_speedup,
       case when candidate_id = named_id then loop_note end as loop_note
from scope left join named using (run_id, device_class)
left join vs_first v using (run_id, device_class, dims, candidate_id)
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
-- their triple)
carried as (
  select iteration + 1 as iteration, device_class, state->>'$.selected' as carried
  from iterations where run_id = $run_id
  qualify row_number() over (partition by iteration, device_class order by created_at desc) = 1
),
-- a winner is the next iteration's baseline: one row per candidate, where it was found
found as (
  select ok.*, c.carried
  from ok left join carried c using (iteration, device_class)
  qualify row_number() over (partition by ok.device_class, ok.dims, ok.candidate_id
                             order by ok.iteration) = 1
)
select f.device_class, f.dims, f.iteration, f.candidate_id, f.is_baseline, f.compute_method,
       f.memory_method, f.latency_method, f.carried, f.params, f.median_ms, f.iqr_ms,
       f.speedup, v.side_by_side_ms, v.vs_first_baseline, f.tflops, f.gbps,
       f.registers, f.spill_bytes, coalesce(f.candidate_id = n.named_id, false) as named
from found f left join named n using (run_id, device_class)
left join vs_first v using (run_id, device_class, dims, candidate_id)
qualify row_number() over (partition by f.device_class, f.dims
                           order by coalesce(f.candidate_id = n.named_id, false) desc,
                                    f.speedup desc nulls last, f.median_ms) <= $k
order by f.device_class, f.dims, coalesce(f.candidate_id = n.named_id, false) desc,
         f.speedup desc nulls last, f.median_ms
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

    The loop's named best (its closing contest's: kopt.contest.close_loop; else the last
    iteration's winner) is the best of its class; without one, the lowest median.

    Returns:
        One dict per (device_class, dims): methods, params (JSON), median_ms,
        iqr_ms, n_samples, speedup over the baseline of its iteration, run_id, ``named``
        (the loop named it), ``tied_with`` (size of its tie within noise; 0: no tie),
        ``loop_speedup`` (the first baseline's median over this one's, both from the closing
        contest's side-by-side measurement of this problem size; None without one) and
        ``loop_note`` (e.g. later iterations did not improve on it).
    """
    return _rows(BEST_SQL, {"sweep": sweep, "run_id": run_id}, store)


def top(run_id: str, k: int = 5, store: Path | str | None = None) -> list[dict[str, Any]]:
    """The ``k`` candidates of a run per device class and dims with the best speedup over
    their own iteration's baseline, the loop's named best first.

    A candidate measured in several iterations (a winner is the next iteration's baseline)
    is one row, from the iteration that found it. Medians of different iterations come from
    separate timing runs, so no row's figure is multiplied across iterations: ``speedup``
    is over that iteration's baseline (same class and dims, same timing run), and only the
    candidates of the closing contest (first baseline, iteration winners) have
    ``side_by_side_ms`` and ``vs_first_baseline`` (the first baseline's median over theirs,
    measured side by side). Returns dicts with ``iteration``, the triple, ``carried`` (JSON
    list of the methods selected before that iteration, applied to every candidate of it),
    params, median_ms, iqr_ms, speedup, side_by_side_ms, vs_first_baseline and ``named``."""
    return _rows(TOP_SQL, {"run_id": run_id, "k": k}, store)
