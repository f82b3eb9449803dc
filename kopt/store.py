"""The store: Parquet tables under one root, read through DuckDB views.

Layout (hive-style folders, one Parquet file per flush)::

    STORE/candidates/sweep=NAME/run=RUN_ID/part-00000-1a2b3c4d.parquet
    STORE/runs/sweep=NAME/run=RUN_ID/part-...
    STORE/metrics/...   STORE/iterations/...

Every file is written under a temporary name in the same folder and renamed
(atomic on POSIX), so a killed run never leaves a broken file; a file damaged all the
same (a truncated copy, a disk fault) fails pyarrow's footer check and is skipped with a
note naming it (:class:`StoreWarning`). The views read the explicit list of files
(``read_parquet([...], union_by_name=true)``, each path escaped so that DuckDB does not
glob it) so files with newer columns and older files mix. A connection may read only
those files (DuckDB's ``enable_external_access=false`` with ``allowed_paths``, locked).

Rows are never updated in place: a run only adds files while it runs; its end rewrites
its own part files (:meth:`Writer.compact`). One run has one writer: :class:`RunLock`
(an ``flock`` on ``STORE/locks/RUN_ID.lock``, held for the run's lifetime). A run whose
last event is ``running`` while nobody holds its lock was killed: the ``runs`` view says
``interrupted``. The driver writes one ``candidates`` row per job; a run's end
compacts its parts keeping the latest row per job key (so a job written twice
counts once) without a window over the whole table at query time. The view
derives ``speedup`` from the baseline row of the same run, iteration, device
class and dims, and joins each job's NCU ``profiles`` row (status, axis scores).
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator
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
    # kopt triage (kopt.triage): partition sweep=triage, run=TRIAGE_ID
    "triage_kernels": pa.schema([
        ("triage_id", pa.string()), ("trace", pa.string()), ("rank", pa.int32()),
        ("kernel", pa.string()), ("mangled", pa.string()), ("total_us", pa.float64()),
        ("share", pa.float64()), ("calls", pa.int64()), ("avg_us", pa.float64()),
        ("min_us", pa.float64()), ("max_us", pa.float64()), ("grid", pa.string()),
        ("block", pa.string()), ("stages", pa.string()), ("layers", pa.string()),
        ("ranges", pa.string()), ("in_graph", pa.bool_()), ("created_at", TS),
    ]),
    "triage_paths": pa.schema([
        ("triage_id", pa.string()), ("trace", pa.string()), ("rank", pa.int32()),
        ("kernel", pa.string()), ("share", pa.float64()), ("known", pa.bool_()),
        ("route", pa.string()), ("operator", pa.string()), ("source", pa.string()),
        ("tuning", pa.string()), ("owner", pa.string()), ("created_at", TS),
    ]),
    "triage_actions": pa.schema([
        ("triage_id", pa.string()), ("trace", pa.string()), ("rank", pa.int32()),
        ("kernel", pa.string()), ("share", pa.float64()), ("action", pa.string()),
        ("why", pa.string()), ("sweep_dir", pa.string()), ("created_at", TS),
    ]),
    "triage_launches": pa.schema([
        ("triage_id", pa.string()), ("trace", pa.string()), ("kernel", pa.string()),
        ("start_us", pa.float64()), ("dur_us", pa.float64()), ("stage", pa.string()),
        ("layer", pa.string()), ("ranges", pa.string()), ("in_graph", pa.bool_()),
        ("correlation", pa.int64()), ("created_at", TS),
    ]),
    # kopt port (kopt.port): one row per command; partition sweep=SWEEP, run=RUN_ID
    "ports": pa.schema([
        ("port_id", pa.string()), ("run_id", pa.string()), ("sweep", pa.string()),
        ("candidate_id", pa.string()), ("device_class", pa.string()), ("repo", pa.string()),
        ("file", pa.string()), ("branch", pa.string()), ("base_commit", pa.string()),
        ("commit", pa.string()), ("step", pa.string()), ("command", pa.string()),
        ("exit_status", pa.int32()), ("duration_s", pa.float64()),
        ("timed_out", pa.bool_()), ("output_tail", pa.string()),
        ("bench_value", pa.float64()), ("status", pa.string()), ("created_at", TS),
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
select * exclude (event), case when event = 'running' and run_id in (
  select run_id from _interrupted) then 'interrupted' else event end as status from {src}
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

        A reader in between may see rows twice (old parts and the merged file). A damaged
        part (:func:`readable_parts`) is neither merged nor removed.
        """
        self.flush()
        folder = self.root / table / f"sweep={self.sweep}" / f"run={self.run_id}"
        parts = readable_parts(self.root, folder.glob("part-*.parquet"))  # damaged: left alone
        if len(parts) < 2:
            return
        t = pa.concat_tables([pq.read_table(p, schema=SCHEMAS[table]) for p in parts])
        if key:
            con = duckdb.connect(":memory:")
            con.register("t", t)
            cols = ", ".join('"' + k.replace('"', '""') + '"' for k in key)
            rel = con.sql(f"select * from t qualify row_number() over (partition by "
                          f"{cols} order by created_at desc) = 1")
            t = (rel.to_arrow_table() if hasattr(rel, "to_arrow_table")
                 else rel.fetch_arrow_table()).cast(SCHEMAS[table])
            con.close()
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = folder / f".{name}.tmp"
        pq.write_table(t, tmp, compression="zstd")
        os.replace(tmp, folder / name)
        for p in parts:
            p.unlink(missing_ok=True)


class StoreWarning(UserWarning):
    """A store file was skipped (damaged); the message names it and the fix."""


_GLOB = re.compile(r"([\[*?])")
_footers: dict[tuple[str, int, int], str | None] = {}  # (path, size, mtime_ns) -> why damaged


def _literal(path: str) -> str:
    """``path`` as a DuckDB file pattern that matches only itself: glob characters
    ``[ * ?`` in brackets (DuckDB globs every path it reads, also list elements)."""
    return _GLOB.sub(r"[\1]", path)


def _sql_text(text: str) -> str:
    """``text`` as an SQL string literal (views take no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def damage(path: Path) -> str | None:
    """Why the Parquet file at ``path`` cannot be read (pyarrow reads its footer), or None.

    Cached per (path, size, mtime) in this process. A file that vanished (a compaction in
    between) counts as readable: the caller lists files again next time.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    k = (str(path), st.st_size, st.st_mtime_ns)
    if k not in _footers:
        try:
            pq.read_metadata(path)
            _footers[k] = None
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as e:
            _footers[k] = (str(e).splitlines() or [type(e).__name__])[0]
    return _footers[k]


def readable_parts(root: Path, files: Iterable[Path]) -> list[Path]:
    """``files`` (sorted) without the damaged ones; each damaged file is reported once per
    process as a :class:`StoreWarning` naming it and the fix. Nothing is moved or removed."""
    ok = []
    for f in sorted(files):
        why = damage(f)
        if why is None:
            ok.append(f)
            continue
        warnings.warn(StoreWarning(
            f"damaged store file {f.absolute()} ({why}): skipped, everything else is read and "
            f"written; move it out of the store (e.g. into {root.absolute() / 'quarantine'}) "
            "or restore it from a copy"), stacklevel=2)
    return ok


def _folder(root: Path) -> Path:
    """``root``, unless it is a file (StoreError)."""
    if root.exists() and not root.is_dir():
        raise StoreError(f"--store {root} is a file, not a store folder")
    return root


def connect(root: Path | str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with views ``candidates``, ``runs``, ``metrics``,
    ``iterations``, ``contests``, ``triage_kernels``, ``triage_paths``, ``triage_actions``,
    ``triage_launches``, ``ports`` over the store at ``root`` (empty views when a table has
    no files).

    The views read the store's readable part files by name (no globbing: any store path
    works); damaged files are skipped with a :class:`StoreWarning`. The connection may
    read only those files: no other file, no URL, no extension install or load, and the
    configuration is locked (a query cannot undo it).

    Raises:
        StoreError: ``root`` is a file.
    """
    root = _folder(Path(root) if root is not None else default_root())
    if root.exists():
        root = root.resolve()
    con = duckdb.connect(":memory:")
    allowed: list[str] = []
    for table, schema in sorted(SCHEMAS.items(), key=lambda kv: kv[0] != "profiles"):
        files = readable_parts(root, (root / table).glob("sweep=*/run=*/part-*.parquet"))
        if files:
            pats = [_literal(str(f)) for f in files]
            allowed += pats + [str(f) for f in files]
            src = (f"read_parquet([{', '.join(map(_sql_text, pats))}], union_by_name=true, "
                   "hive_partitioning=false)")
        else:
            con.register(f"_empty_{table}", pa.table(
                {f.name: pa.array([], f.type) for f in schema}, schema=schema))
            src = f"_empty_{table}"
        view = {"candidates": CANDIDATES_VIEW, "runs": RUNS_VIEW, "metrics": METRICS_VIEW,
                "profiles": "create or replace view profiles_raw as select * from {src}"
                }.get(table, "create or replace view {table} as select * from {src}")
        try:
            if table == "runs":
                con.register("_interrupted", pa.table({"run_id": pa.array(
                    _interrupted(con, root, src), pa.string())}))
            con.execute(view.format(src=src, table=table))
        except duckdb.Error as e:
            con.close()
            raise explain(e) from None
    for setting, value in (("allowed_paths", sorted(set(allowed))),
                           ("enable_external_access", False),
                           ("autoinstall_known_extensions", False),
                           ("autoload_known_extensions", False), ("lock_configuration", True)):
        con.execute(f"set {setting} = ?", [value])
    return con


def _interrupted(con: duckdb.DuckDBPyConnection, root: Path, src: str) -> list[str]:
    """Runs whose last event is ``running`` while nobody holds their lock: killed drivers."""
    running = con.execute(f"select run_id from {src} qualify row_number() over (partition "
                          "by run_id order by created_at desc) = 1 and event = 'running'"
                          ).fetchall()
    return [r for (r,) in running if lock_holder(root, r) is None]


class QueryError(ValueError):
    """A query that is not read-only, or that DuckDB rejects."""


class StoreError(QueryError):
    """The store is not usable: a file where a folder should be, or a damaged Parquet file."""


def _read_only(sql: str) -> list[Any]:
    """``sql``'s statements; QueryError unless each is a SELECT (also under EXPLAIN)."""
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(str(e)) from None
    if not stmts:
        raise QueryError("empty query")
    for st in stmts:
        inner = st
        if st.type == duckdb.StatementType.EXPLAIN:  # check what EXPLAIN (ANALYZE) would run
            body = re.sub(r"^\s*explain\s+(analyze\s+)?", "", st.query, flags=re.I)
            try:
                inner = duckdb.extract_statements(body)[0]
            except (duckdb.Error, IndexError):
                raise QueryError(f"cannot read the statement under EXPLAIN: {body!r}") from None
        if inner.type != duckdb.StatementType.SELECT:
            raise QueryError(f"only read-only queries (SELECT, WITH, EXPLAIN, DESCRIBE, SHOW) "
                             f"are allowed; got {inner.type.name}")
    return stmts


class Result:
    """The open result of a read-only query: ``columns`` and rows fetched in batches.

    Use as a context manager (closes the connection). DuckDB errors while fetching are
    raised as QueryError/StoreError.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, cur: duckdb.DuckDBPyConnection):
        self._con, self._cur = con, cur
        self.columns: list[str] = [d[0] for d in cur.description] if cur.description else []

    def batches(self, rows: int = 10_000) -> Iterator[list[tuple]]:
        """The remaining rows, at most ``rows`` per list."""
        while True:
            try:
                got = self._cur.fetchmany(rows)
            except duckdb.Error as e:
                raise explain(e) from None
            if not got:
                return
            yield got

    def close(self) -> None:
        """Close the connection."""
        self._con.close()

    def __enter__(self) -> Result:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_query(sql: str, root: Path | str | None = None) -> Result:
    """Run read-only ``sql`` (SELECT/EXPLAIN/DESCRIBE/SHOW only) over the store; the rows
    stay in DuckDB until fetched (:meth:`Result.batches`).

    Raises:
        QueryError: a statement that could write (COPY, CREATE, INSERT, ATTACH...), a file
            outside the store, or a DuckDB error (message included).
        StoreError: the store is a file.
    """
    stmts = _read_only(sql)
    con = connect(root)
    try:
        cur = None
        for st in stmts:
            cur = con.execute(st.query)
        assert cur is not None
        return Result(con, cur)
    except duckdb.Error as e:
        con.close()
        raise explain(e) from None


def query(sql: str, root: Path | str | None = None) -> tuple[list[str], list[tuple]]:
    """Run read-only ``sql`` over the store (see :func:`open_query`).

    Returns:
        (column names, rows).

    Raises:
        QueryError: as :func:`open_query`.
    """
    with open_query(sql, root) as res:
        return res.columns, [r for b in res.batches() for r in b]


def explain(e: Exception) -> QueryError:
    """A DuckDB error as a one-line QueryError; a damaged Parquet file is named, with the
    fix; a file outside the store is refused as such."""
    msg = str(e)
    first = (msg.splitlines() or [""])[0]
    m = re.search(r"file '([^']+\.parquet)'", msg, flags=re.I)
    if m and re.search(r"too small|magic bytes|parquet", msg, flags=re.I):
        return StoreError(f"damaged store file {m.group(1)} ({first}); move it "
                          "out of the store (a killed copy or a disk fault); everything else "
                          "stays readable")
    if isinstance(e, duckdb.PermissionException):
        m = re.search(r'Cannot access \w+ "(.*)" - ', first)
        return QueryError(f"{m.group(1) if m else first}: outside the store; queries read only "
                          "the store's views (candidates, runs, metrics, iterations, contests, "
                          "triage_*, ports)")
    return QueryError(msg)


class RunLocked(StoreError):
    """Another process holds the run's lock: it is writing that run."""


_held: dict[tuple[str, str], int] = {}  # (store, run id) -> fd of a lock this process holds


def _lock_path(root: Path, run_id: str) -> Path:
    return _folder(Path(root)).resolve() / "locks" / f"{run_id}.lock"


def lock_holder(root: Path | str, run_id: str) -> str | None:
    """Who holds ``run_id``'s lock ("pid P on HOST since T"), or None when nobody does.

    Probes with a shared ``flock`` that is let go at once (a writer's exclusive lock
    retries briefly, so a probe never makes it fail).
    """
    path = _lock_path(Path(root), run_id)
    if (str(path.parent.parent), run_id) in _held:
        return _holder_text(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder_text(path)
    finally:
        os.close(fd)  # also lets go of the shared lock
    return None


def _holder_text(path: Path) -> str:
    try:
        h = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        h = {}
    return (f"pid {h.get('pid', '?')} on {h.get('host', '?')}"
            + (f" since {h['since']}" if h.get("since") else ""))


class RunLock:
    """One run has one writer: an exclusive ``flock`` on ``STORE/locks/RUN_ID.lock``, which
    records the holder's pid, host and start time.

    The operating system lets go of it when the holder exits, also on SIGKILL; a run whose
    last event is ``running`` with a free lock is reported as ``interrupted``. Use as a
    context manager or call :meth:`acquire` / :meth:`release`.
    """

    def __init__(self, root: Path | str, run_id: str):
        self.path = _lock_path(Path(root), run_id)
        self.run_id = run_id
        self._key = (str(self.path.parent.parent), run_id)

    def acquire(self, wait_s: float = 1.0) -> RunLock:
        """Take the lock (retrying for ``wait_s`` seconds: a reader may be probing it).

        Raises:
            RunLocked: another process (or another lock in this one) holds it.
        """
        if self._key in _held:
            raise RunLocked(self._refusal())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise RunLocked(self._refusal()) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": platform.node(),
                                 "since": now().isoformat(timespec="seconds")}).encode())
        _held[self._key] = fd
        return self

    def check(self) -> None:
        """Raise RunLocked when another holder has the lock (without taking it)."""
        if lock_holder(self.path.parent.parent, self.run_id) is not None:
            raise RunLocked(self._refusal())

    def _refusal(self) -> str:
        return (f"run {self.run_id} is being written by {_holder_text(self.path)} "
                f"(lock {self.path}); one run has one writer: wait for it to finish, or stop "
                "that process (what it measured is kept) and resume the run then")

    def release(self) -> None:
        """Let go of the lock (the file stays: it names the last holder)."""
        fd = _held.pop(self._key, None)
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


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
