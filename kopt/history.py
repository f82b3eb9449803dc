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

# per candidate, device class and problem size: its fastest correct final-rung row (the
# one kopt best reads; a winner is measured again as the next iteration's baseline)
CANDIDATE_ROWS_SQL = """
select candidate_id, device_class, dims, defines, params, backend, compute_method, memory_method,
       latency_method, median_ms, iqr_ms, samples_ms, compile_s, max_abs_err, created_at
from candidates
where run_id = ? and status = 'ok' and final and candidate_id in (select unnest(?::varchar[]))
qualify row_number() over (partition by candidate_id, device_class, dims
                           order by median_ms, iteration desc) = 1
"""

RUN_SQL = "select run_id, sweep, sweep_dir, backend, devices from runs where run_id = ?"

# Per (run, iteration, device class) and method a candidate's triple held: the
# iteration's closing state (latest row) and the method's own gain, read as the loop reads
# it (kopt.loop.close_iteration): the best geometric-mean speedup over the iteration's
# baseline of a triple holding it (correct on every problem size the baseline ran) over
# the best of the same triple without it (or the baseline's 1.0 when that was not run).
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
), trip as (
  select run_id, iteration, device_class, cm, mm, lm, max(gain) g from per_cand
  where gain is not null group by all
), own as (
  select t.run_id, t.iteration, t.device_class, x.m method, t.g / coalesce(w.g, 1.0) gain
  from trip t, (select unnest([0, 1, 2]) k) ks,
       lateral (select [t.cm, t.mm, t.lm][k + 1] m) x
  left join trip w on w.run_id = t.run_id and w.iteration = t.iteration
    and w.device_class = t.device_class
    and w.cm is not distinct from (case when k = 0 then null else t.cm end)
    and w.mm is not distinct from (case when k = 1 then null else t.mm end)
    and w.lm is not distinct from (case when k = 2 then null else t.lm end)
  where x.m is not null
), tried as (
  select distinct run_id, iteration, device_class, m as method
  from (select *, unnest([cm, mm, lm]) m from per_cand) where m is not null
)
select t.method, t.device_class,
       coalesce(st.state->>'$.bottleneck_before', 'unknown') as bottleneck,
       t.run_id, t.iteration, (select max(o.gain) from own o where o.run_id = t.run_id
         and o.iteration = t.iteration and o.device_class = t.device_class
         and o.method = t.method) as gain,
       coalesce(st.state->>'$.best.iteration' = t.iteration::varchar
                and list_contains(from_json(st.state->'$.best.triple', '["varchar"]'),
                                  t.method), false) as accepted,
       coalesce(list_contains(json_keys(st.state->'$.ineffective'), t.method), false)
         as ineffective,
       st.state is not null as closed
from tried t left join st using (run_id, iteration, device_class)
order by t.method, t.device_class, bottleneck, t.run_id, t.iteration
"""

METHODS_SQL = "select method, device_class, bottleneck, count(*) tried, " + \
    "count(*) filter (where accepted) accepted, median(gain) median_gain, " + \
    "count(*) filter (where ineffective) ineffective, count(gain) measured " + \
    "from (" + METHOD_RECORDS_SQL + ") group by all order by all"


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


def candidate_rows(store: Path | str, run_id: str, candidate_ids: list[str]
                   ) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(candidate id, device class, dims JSON) -> that candidate's fastest correct
    final-rung row there in ``run_id``: ``defines``/``params`` (JSON text), ``backend``,
    the triple, ``median_ms``, ``iqr_ms``, ``samples_ms``, ``compile_s``, ``max_abs_err``,
    ``created_at``."""
    rows = _rows(store, CANDIDATE_ROWS_SQL, [run_id, candidate_ids])
    return {(r["candidate_id"], r["device_class"], r["dims"]): r for r in rows}


def run_info(store: Path | str, run_id: str) -> dict[str, Any] | None:
    """``run_id``, ``sweep``, ``sweep_dir``, ``backend`` and ``devices`` (JSON text) of a
    run's latest ``runs`` row, or None."""
    rows = _rows(store, RUN_SQL, [run_id])
    return rows[0] if rows else None


def method_records(store: Path | str) -> list[dict[str, Any]]:
    """One row per (method, device class, run, iteration) in which a candidate's triple held
    the method, over the whole store: ``bottleneck`` (the iteration baseline's, the one the
    method was applied under; ``unknown`` without NCU), ``gain`` (the method's own, as the
    loop judges it: the best geometric-mean speedup over the iteration's baseline of a
    triple holding it, correct on every problem size, over the best of the same triple
    without it, or over 1.0 when that was not measured; None when no candidate holding it
    was correct), ``accepted`` (the method is in the winner the
    iteration named as its new best), ``ineffective`` (the iteration's state lists it so)
    and ``closed`` (the iteration has a stored state)."""
    return _rows(store, METHOD_RECORDS_SQL, [])


def method_effectiveness(store: Path | str) -> list[dict[str, Any]]:
    """Each method's record over the whole store per ``device_class`` and ``bottleneck``
    (the one it was applied under; ``unknown`` without NCU), from :func:`method_records`:
    ``tried`` (iterations in which a candidate held it), ``accepted`` (of those, the ones
    whose named winner held it), ``median_gain`` (median of its own gain, None when no
    candidate holding it was correct), ``ineffective`` (iterations that judged it so) and
    ``measured`` (iterations with a gain figure)."""
    return _rows(store, METHODS_SQL, [])
