"""Read-only SQL over the store for ``kopt propose --format json``, ``kopt export`` and
``kopt methods``: every statement these need, in one module (parameterised with ``?``,
never built from user text). Each function takes the store root and returns plain rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kopt.select import _rows as select_rows  # one connect/execute/fetch helper

CANDIDATE_METRICS_SQL = """
with latest as (
  select max(iteration) it from metrics
  where run_id = ? and device_class = ? and candidate_id = ? and iteration <= ?
)
select iteration, dims, kernel, launch, metric, value, unit from metrics
where run_id = ? and device_class = ? and candidate_id = ?
  and iteration = (select it from latest)
qualify row_number() over (partition by launch, metric order by created_at desc) = 1
order by launch, metric
"""

CANDIDATE_BUILDS_SQL = """
select candidate_id, any_value(defines) defines, any_value(params) params,
       any_value(backend) backend, any_value(run_id) run_id
from candidates where run_id = ? and candidate_id in (select unnest(?::varchar[]))
group by candidate_id
"""

RUN_SQL = "select run_id, sweep, sweep_dir, backend, devices from runs where run_id = ?"

# Per (run, iteration, device class): the closing state (latest row), the methods its
# candidates tried, and per method the best geometric-mean speedup over the iteration's
# baseline of a candidate holding it (correct on every problem size the baseline ran).
METHOD_RECORDS_SQL = """
with st as (
  select run_id, iteration, device_class, state from iterations
  qualify row_number() over (partition by run_id, iteration, device_class
                             order by created_at desc) = 1
), c as (
  select * from candidates where final
), need as (
  select run_id, iteration, device_class, count(distinct dims) n from c
  where is_baseline group by all
), per_cand as (
  select c.run_id, c.iteration, c.device_class, c.candidate_id,
         any_value(c.compute_method) cm, any_value(c.memory_method) mm,
         any_value(c.latency_method) lm,
         case when count(*) filter (where c.status = 'ok' and c.speedup is not null)
                   = any_value(need.n)
              then exp(avg(ln(c.speedup)) filter (where c.status = 'ok'
                                                   and c.speedup is not null)) end gain
  from c left join need using (run_id, iteration, device_class)
  group by c.run_id, c.iteration, c.device_class, c.candidate_id
), tried as (
  select run_id, iteration, device_class, m as method, max(gain) gain
  from (select *, unnest([cm, mm, lm]) m from per_cand) where m is not null
  group by all
)
select t.method, t.device_class,
       coalesce(st.state->>'$.bottleneck_before', 'unknown') as bottleneck,
       t.run_id, t.iteration, t.gain,
       coalesce(st.state->>'$.best.iteration' = t.iteration::varchar
                and list_contains(from_json(st.state->'$.best.triple', '["varchar"]'),
                                  t.method), false) as accepted,
       coalesce(list_contains(json_keys(st.state->'$.ineffective'), t.method), false)
         as ineffective,
       st.state is not null as closed
from tried t left join st using (run_id, iteration, device_class)
order by t.method, t.device_class, bottleneck, t.run_id, t.iteration
"""


def _rows(store: Path | str, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    """``sql`` with positional ``?`` parameters over the store, as dicts."""
    return select_rows(sql, params, store)  # type: ignore[arg-type]  # DuckDB takes a list


def candidate_metrics(store: Path | str, run_id: str, device_class: str, candidate_id: str,
                      iteration: int) -> list[dict[str, Any]]:
    """The NCU metric rows (``iteration``, ``dims``, ``kernel``, ``launch``, ``metric``,
    ``value``, ``unit``) of one candidate on one device class, from the latest iteration
    up to ``iteration`` in which it was profiled; [] when it never was."""
    return _rows(store, CANDIDATE_METRICS_SQL, [run_id, device_class, candidate_id,
                                                iteration, run_id, device_class,
                                                candidate_id])


def candidate_builds(store: Path | str, run_id: str, candidate_ids: list[str]
                     ) -> dict[str, dict[str, Any]]:
    """candidate id -> ``defines`` and ``params`` (JSON text), ``backend`` and ``run_id``
    of those candidates of ``run_id``."""
    rows = _rows(store, CANDIDATE_BUILDS_SQL, [run_id, candidate_ids])
    return {r["candidate_id"]: r for r in rows}


def run_info(store: Path | str, run_id: str) -> dict[str, Any] | None:
    """``run_id``, ``sweep``, ``sweep_dir``, ``backend`` and ``devices`` (JSON text) of a
    run's latest ``runs`` row, or None."""
    rows = _rows(store, RUN_SQL, [run_id])
    return rows[0] if rows else None


def method_records(store: Path | str) -> list[dict[str, Any]]:
    """One row per (method, device class, run, iteration) in which a candidate's triple held
    the method, over the whole store: ``bottleneck`` (the iteration baseline's, the one the
    method was applied under; ``unknown`` without NCU), ``gain`` (the best geometric-mean
    speedup over the iteration's baseline of a candidate holding it, correct on every
    problem size; None when none was), ``accepted`` (the method is in the winner the
    iteration named as its new best), ``ineffective`` (the iteration's state lists it so)
    and ``closed`` (the iteration has a stored state)."""
    return _rows(store, METHOD_RECORDS_SQL, [])
