"""The store: append-only Parquet tables under one root, read through DuckDB views.

Layout (hive-style folders, one Parquet file per flush)::

    STORE/candidates/sweep=NAME/run=RUN_ID/part-00000-1a2b3c4d.parquet
    STORE/runs/sweep=NAME/run=RUN_ID/part-...
    STORE/metrics/...   STORE/iterations/...

Every file is written under a temporary name in the same folder and renamed
(atomic on POSIX), so a killed run never leaves a broken file. The views
read ``read_parquet(..., union_by_name=true)`` so files with newer columns and
older files mix. The driver writes one ``candidates`` row per job; a run's end
compacts its parts keeping the latest row per job key (so a job written twice
counts once) without a window over the whole table at query time. The view
derives ``speedup`` from the baseline row of the same run, iteration, device
class and dims, and joins each job's NCU ``profiles`` row (status, axis scores).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

TS = pa.timestamp("us", tz="UTC")

SCHEMAS: dict[str, pa.Schema] = {
    "candidates": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("rung", pa.int32()),
        ("job_key", pa.string()), ("candidate_id", pa.string()), ("build_id", pa.string()),
        ("compute_method", pa.string()), ("memory_method", pa.string()),
        ("latency_method", pa.string()), ("is_baseline", pa.bool_()),
        ("params", pa.string()), ("defines", pa.string()), ("dims", pa.string()),
        ("backend", pa.string()), ("arch", pa.string()), ("device_class", pa.string()),
        ("device_name", pa.string()), ("node", pa.string()), ("node_id", pa.string()),
        ("device_id", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()), ("compile_s", pa.float64()), ("build_cached", pa.bool_()),
        ("registers", pa.int32()), ("smem_bytes", pa.int64()), ("spill_bytes", pa.int64()),
        ("max_abs_err", pa.float64()), ("median_ms", pa.float64()), ("min_ms", pa.float64()),
        ("iqr_ms", pa.float64()), ("mean_ms", pa.float64()), ("n_samples", pa.int32()),
        ("samples_ms", pa.list_(pa.float64())), ("sm_clock_mhz", pa.float64()),
        ("temperature_c", pa.float64()), ("throttle_reasons", pa.int64()),
        ("throttled_samples", pa.int32()), ("throttled", pa.bool_()),
        ("wall_s", pa.float64()), ("flops", pa.float64()), ("bytes", pa.float64()),
        ("created_at", TS),
    ]),
    "profiles": pa.schema([
        ("run_id", pa.string()), ("job_key", pa.string()), ("profile_status", pa.string()),
        ("profile_error", pa.string()), ("compute_score", pa.float64()),
        ("memory_score", pa.float64()), ("latency_score", pa.float64()),
        ("bottleneck", pa.string()), ("created_at", TS),
    ]),
    "runs": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("event", pa.string()),
        ("spec_hash", pa.string()), ("sweep_dir", pa.string()), ("backend", pa.string()),
        ("devices", pa.string()), ("n_candidates", pa.int64()), ("n_jobs", pa.int64()),
        ("wall_s", pa.float64()), ("options", pa.string()), ("host", pa.string()),
        ("env", pa.string()), ("compile_cpu_s", pa.float64()), ("device_busy", pa.string()),
        ("device_wait_build", pa.string()),
        ("kopt_version", pa.string()), ("created_at", TS),
    ]),
    "metrics": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("candidate_id", pa.string()), ("device_class", pa.string()), ("dims", pa.string()),
        ("kernel", pa.string()), ("launch", pa.int32()), ("metric", pa.string()),
        ("value", pa.float64()), ("unit", pa.string()), ("created_at", TS),
    ]),
    "contests": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("device_class", pa.string()), ("dims", pa.string()), ("candidate_id", pa.string()),
        ("job_key", pa.string()), ("median_ms", pa.float64()), ("iqr_ms", pa.float64()),
        ("n_samples", pa.int32()), ("samples_ms", pa.list_(pa.float64())),
        ("label", pa.string()), ("winner", pa.bool_()), ("created_at", TS),
    ]),
    "iterations": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("device_class", pa.string()), ("state", pa.string()), ("created_at", TS),
    ]),
}

CANDIDATES_VIEW = """
create or replace view candidates as
with base as (
  select run_id, iteration, device_class, dims, coalesce(rung, 0) as rung_k, median_ms as base_ms
  from {src} where is_baseline and status = 'ok'
), prof as (
  select * exclude (created_at) from profiles_raw
  qualify row_number() over (partition by run_id, job_key order by created_at desc) = 1
)
select raw.*, case when raw.status = 'ok' then nullif(base.base_ms, 0) / nullif(raw.median_ms, 0)
                   end as speedup,
       nullif(raw.flops, 0) / nullif(raw.median_ms * 1e9, 0) as tflops,
       nullif(raw.bytes, 0) / nullif(raw.median_ms * 1e6, 0) as gbps,
       coalesce(raw.rung, 0) = max(coalesce(raw.rung, 0)) over (
         partition by raw.run_id, raw.iteration, raw.device_class) as final,
       prof.* exclude (run_id, job_key)
from {src} raw left join base on base.run_id = raw.run_id and base.iteration = raw.iteration
  and base.device_class = raw.device_class and base.dims = raw.dims
  and base.rung_k = coalesce(raw.rung, 0)
left join prof on prof.run_id = raw.run_id and prof.job_key = raw.job_key
"""

RUNS_VIEW = """
create or replace view runs as
select * exclude (event), event as status from {src}
qualify row_number() over (partition by run_id order by created_at desc) = 1
"""


METRICS_VIEW = "create or replace view metrics as select * from {src}"


def default_root() -> Path:
    """``$KOPT_STORE`` or ``./kopt-store``."""
    return Path(os.environ.get("KOPT_STORE") or "kopt-store")


def now() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc)


def write_table(root: Path, table: str, sweep: str, run_id: str,
                rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` as one new Parquet file of ``table``; atomic (temp name + rename).

    Missing columns are null; unknown keys raise KeyError-free (they are dropped).
    Returns the file's path.
    """
    schema = SCHEMAS[table]
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    t = pa.table(cols, schema=schema)
    folder = root / table / f"sweep={sweep}" / f"run={run_id}"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".{name}.tmp"
    pq.write_table(t, tmp, compression="zstd")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    return folder / name


class Writer:
    """Buffers rows of one run and flushes them as Parquet files in a background thread.

    Args:
        root: the store root.
        sweep, run_id: the partition.
        flush_rows / flush_s: flush when this many rows are buffered or this
            many seconds passed since the last flush.
    """

    def __init__(self, root: Path, sweep: str, run_id: str, flush_rows: int = 256,
                 flush_s: float = 2.0):
        self.root, self.sweep, self.run_id = root, sweep, run_id
        self.flush_rows, self.flush_s = flush_rows, flush_s
        self._buf: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self.files = 0

    def add(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        """Buffer rows; flush if the buffer is large or old."""
        with self._lock:
            self._buf.setdefault(table, []).extend(rows)
            n = sum(len(v) for v in self._buf.values())
        if n >= self.flush_rows or time.monotonic() - self._last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        """Write everything buffered (one file per table)."""
        with self._lock:
            buf, self._buf = self._buf, {}
            self._last = time.monotonic()
        for table, rows in buf.items():
            if rows:
                write_table(self.root, table, self.sweep, self.run_id, rows)
                self.files += 1

    def compact(self, table: str = "candidates", key: list[str] | None = None) -> None:
        """Merge this run's part files of ``table`` into one (new file first, then remove
        parts), keeping only the latest row (by ``created_at``) per ``key`` when given.

        A reader in between may see rows twice (old parts and the merged file).
        """
        self.flush()
        folder = self.root / table / f"sweep={self.sweep}" / f"run={self.run_id}"
        parts = sorted(folder.glob("part-*.parquet"))
        if len(parts) < 2:
            return
        t = pa.concat_tables([pq.read_table(p, schema=SCHEMAS[table]) for p in parts])
        if key:
            con = duckdb.connect(":memory:")
            con.register("t", t)
            rel = con.sql(f"select * from t qualify row_number() over (partition by "
                          f"{', '.join(key)} order by created_at desc) = 1")
            t = (rel.to_arrow_table() if hasattr(rel, "to_arrow_table")
                 else rel.fetch_arrow_table()).cast(SCHEMAS[table])
            con.close()
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = folder / f".{name}.tmp"
        pq.write_table(t, tmp, compression="zstd")
        os.replace(tmp, folder / name)
        for p in parts:
            p.unlink(missing_ok=True)


def connect(root: Path | str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with views ``candidates``, ``runs``, ``metrics``,
    ``iterations`` over the store at ``root`` (empty views when a table has no files)."""
    root = Path(root) if root is not None else default_root()
    if root.exists() and not root.is_dir():
        raise StoreError(f"--store {root} is a file, not a store folder")
    con = duckdb.connect(":memory:")
    for table, schema in sorted(SCHEMAS.items(), key=lambda kv: kv[0] != "profiles"):
        files = list((root / table).glob("sweep=*/run=*/part-*.parquet")) if root.exists() else []
        if files:
            glob = str(root / table / "sweep=*" / "run=*" / "part-*.parquet").replace("'", "''")
            src = f"read_parquet('{glob}', union_by_name=true, hive_partitioning=false)"
        else:
            con.register(f"_empty_{table}", pa.table(
                {f.name: pa.array([], f.type) for f in schema}, schema=schema))
            src = f"_empty_{table}"
        view = {"candidates": CANDIDATES_VIEW, "runs": RUNS_VIEW, "metrics": METRICS_VIEW,
                "profiles": "create or replace view profiles_raw as select * from {src}"
                }.get(table, "create or replace view {table} as select * from {src}")
        try:
            con.execute(view.format(src=src, table=table))
        except duckdb.Error as e:
            con.close()
            raise explain(e) from None
    return con


class QueryError(ValueError):
    """A query that is not read-only, or that DuckDB rejects."""


class StoreError(QueryError):
    """The store is not usable: a file where a folder should be, or a damaged Parquet file."""


def query(sql: str, root: Path | str | None = None) -> tuple[list[str], list[tuple]]:
    """Run read-only ``sql`` (SELECT/EXPLAIN/DESCRIBE/SHOW only) over the store.

    Returns:
        (column names, rows).

    Raises:
        QueryError: a statement that could write (COPY, CREATE, INSERT, ATTACH...)
            or a DuckDB error (message included).
    """
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(str(e)) from None
    if not stmts:
        raise QueryError("empty query")
    for st in stmts:
        inner = st
        if st.type == duckdb.StatementType.EXPLAIN:  # check what EXPLAIN (ANALYZE) would run
            import re

            body = re.sub(r"^\s*explain\s+(analyze\s+)?", "", st.query, flags=re.I)
            try:
                inner = duckdb.extract_statements(body)[0]
            except (duckdb.Error, IndexError):
                raise QueryError(f"cannot read the statement under EXPLAIN: {body!r}") from None
        if inner.type != duckdb.StatementType.SELECT:
            raise QueryError(f"only read-only queries (SELECT, WITH, EXPLAIN, DESCRIBE, SHOW) "
                             f"are allowed; got {inner.type.name}")
    con = connect(root)
    try:
        cur = None
        for st in stmts:
            cur = con.execute(st.query)
        assert cur is not None
        cols = [d[0] for d in cur.description] if cur.description else []
        return cols, cur.fetchall()
    except duckdb.Error as e:
        raise explain(e) from None
    finally:
        con.close()


def explain(e: Exception) -> QueryError:
    """A DuckDB error as a QueryError; a damaged Parquet file is named, with the fix."""
    import re

    msg = str(e)
    m = re.search(r"File '([^']+\.parquet)'", msg)
    if m and ("too small" in msg or "magic bytes" in msg or "Parquet" in msg):
        return StoreError(f"damaged store file {m.group(1)} ({msg.splitlines()[0]}); move it "
                          "out of the store (a killed copy or a disk fault); everything else "
                          "stays readable")
    return QueryError(msg)


def done_job_keys(root: Path, run_id: str) -> set[str]:
    """Job keys already stored for ``run_id`` (for --resume)."""
    con = connect(root)
    try:
        return {r[0] for r in con.execute(
            "select job_key from candidates where run_id = ?", [run_id]).fetchall()}
    finally:
        con.close()


def iteration_states(root: Path, run_id: str) -> list[tuple[int, str, str]]:
    """(iteration, device_class, state JSON) rows stored for ``run_id``, latest per key."""
    con = connect(root)
    try:
        return con.execute(
            "select iteration, device_class, state from iterations where run_id = ? "
            "qualify row_number() over (partition by iteration, device_class "
            "order by created_at desc) = 1 order by iteration", [run_id]).fetchall()
    finally:
        con.close()


def run_record(root: Path, run_id: str) -> dict[str, Any] | None:
    """The latest ``runs`` row of ``run_id`` as a dict, or None."""
    con = connect(root)
    try:
        cur = con.execute("select * from runs where run_id = ?", [run_id])
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.description], row))
    finally:
        con.close()


def dumps(obj: Any) -> str:
    """Canonical JSON text (sorted keys) as stored in ``params``/``dims`` columns."""
    return json.dumps(obj, sort_keys=True)
