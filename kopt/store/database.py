"""The Database: the one place that reads and writes kopt's Parquet store with SQL.

In the terms of a tuning database (TVM MetaSchedule's ``database/``): :class:`Database`
commits tuning records (:meth:`Database.writer`, :meth:`Database.commit`), gives the best
ones back (:meth:`Database.best`, :meth:`Database.top_k`, :meth:`Database.rank`) and
answers history queries (a run's record, its iteration states, what it already measured,
a report's figures). Every SQL statement of kopt is in this module, each with ``?`` or
``$name`` parameters; none is built from user text. The one statement a user writes,
``kopt query``'s, runs through :meth:`Database.query` / :meth:`Database.open_query`:
read-only statements only, on a connection that may read nothing but the store's files.

The files and locks under it (Parquet layout, atomic writes, damaged-file checks, the
run lock) are :mod:`kopt.store.files`. DuckDB reads the store through views over the explicit
list of readable part files (``read_parquet([...], union_by_name=true)``, each path
escaped so that DuckDB does not glob it), so files with newer columns and older files
mix; views take no parameters, so the file names are written in as escaped literals. The
``candidates`` view derives ``speedup`` from the baseline row of the same run,
iteration, device class and dims, and joins each job's NCU ``profiles`` row; a run's end
compacts its parts keeping the latest row per job key (:meth:`Writer.compact`).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from kopt.store.files import (
    SCHEMAS,
    QueryError,
    RunLock,
    StoreError,
    StoreWarning,
    _folder,
    default_root,
    held_locks,
    lock_holder,
    readable_parts,
    rows_table,
    table_parts,
    table_schema,
    write_arrow,
    write_table,
)
from kopt.util.paths import resolved

DatabaseError = duckdb.Error  # what DuckDB raises; :func:`explain` makes it one line
COMPACTED_TRIES = 3  # a product query whose listed part file vanished: listed again

CANDIDATES_VIEW = """
create or replace view candidates as
with base as (
  select run_id, iteration, device_class, dims, coalesce(rung, 0) as rung_k, median_ms as base_ms
  from {src} where is_baseline and status = 'ok'
), prof as (
  select * exclude (created_at) from profiles_raw
  qualify row_number() over (partition by run_id, job_key order by created_at desc) = 1
), ref as (
  select run_id, device_class, dims, peak_tflops, peak_gbps,
         case when status = 'ok' then median_ms end as ref_ms
  from reference
)
select raw.*, case when raw.status = 'ok' then nullif(base.base_ms, 0) / nullif(raw.median_ms, 0)
                   end as speedup,
       nullif(raw.flops, 0) / nullif(raw.median_ms * 1e9, 0) as tflops,
       nullif(raw.bytes, 0) / nullif(raw.median_ms * 1e6, 0) as gbps,
       case when raw.status = 'ok' then ref.ref_ms end as reference_ms,
       case when raw.status = 'ok' then nullif(ref.ref_ms, 0) / nullif(raw.median_ms, 0)
            end as vs_reference,
       100 * nullif(raw.flops, 0) / nullif(raw.median_ms * 1e9, 0) / nullif(ref.peak_tflops, 0)
         as pct_peak_flops,
       100 * nullif(raw.bytes, 0) / nullif(raw.median_ms * 1e6, 0) / nullif(ref.peak_gbps, 0)
         as pct_peak_bw,
       coalesce(raw.rung, 0) = max(coalesce(raw.rung, 0)) over (
         partition by raw.run_id, raw.iteration, raw.device_class) as final,
       prof.* exclude (run_id, job_key)
from {src} raw left join base on base.run_id = raw.run_id and base.iteration = raw.iteration
  and base.device_class = raw.device_class and base.dims = raw.dims
  and base.rung_k = coalesce(raw.rung, 0)
left join prof on prof.run_id = raw.run_id and prof.job_key = raw.job_key
left join ref on ref.run_id = raw.run_id and ref.device_class = raw.device_class
  and ref.dims = raw.dims
"""

# ref.py's timed function per run, device class and problem size (latest row),
# with the rates and the share of the device's peak that candidates get
REFERENCE_VIEW = """
create or replace view reference as
select *, nullif(flops, 0) / nullif(median_ms * 1e9, 0) as tflops,
       nullif(bytes, 0) / nullif(median_ms * 1e6, 0) as gbps,
       100 * nullif(flops, 0) / nullif(median_ms * 1e9, 0) / nullif(peak_tflops, 0)
         as pct_peak_flops,
       100 * nullif(bytes, 0) / nullif(median_ms * 1e6, 0) / nullif(peak_gbps, 0)
         as pct_peak_bw
from {src}
qualify row_number() over (partition by run_id, device_class, dims order by created_at desc) = 1
"""

RUNS_VIEW = """
create or replace view runs as
select * exclude (event), case when event = 'running' and run_id in (
  select run_id from _interrupted) then 'interrupted' else event end as status from {src}
qualify row_number() over (partition by run_id order by created_at desc) = 1
"""


METRICS_VIEW = "create or replace view metrics as select * from {src}"

_GLOB = re.compile(r"([\[*?])")


def _literal(path: str) -> str:
    """``path`` as a DuckDB file pattern that matches only itself: glob characters
    ``[ * ?`` in brackets (DuckDB globs every path it reads, also list elements)."""
    return _GLOB.sub(r"[\1]", path)


def _sql_text(text: str) -> str:
    """``text`` as an SQL string literal (views take no parameters)."""
    return "'" + text.replace("'", "''") + "'"


class Writer:
    """Buffers rows of one run and flushes them as Parquet files.

    It keeps what it wrote (file -> table name and Arrow rows, a run's rows are small): a
    file removed while the run goes on (the store folder deleted mid-sweep) is written
    again at the next flush, the run's lock taken again, and a :class:`StoreWarning` says
    so in one line (:meth:`restore`). Nothing measured vanishes silently.

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
        self._written: dict[Path, tuple[str, pa.Table]] = {}  # what restore() rewrites

    def add(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        """Buffer rows; flush if the buffer is large or old."""
        with self._lock:
            self._buf.setdefault(table, []).extend(rows)
            n = sum(len(v) for v in self._buf.values())
        if n >= self.flush_rows or time.monotonic() - self._last >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        """Write everything buffered (one file per table). Rows a flush could not write --
        a Ctrl-C or SIGTERM raised inside it (KeyboardInterrupt), a full disk -- go back to
        the buffer before the error goes on, so the flush that follows (the interrupted
        run's last one) writes them: a signal during a time-based flush lost them before
        (a sweep stopped by SIGTERM stored 9 of the 12 rows it had shown, then measured 3
        again on --resume)."""
        with self._lock:
            buf, self._buf = self._buf, {}
            self._last = time.monotonic()
        try:
            for table in list(buf):
                if buf[table]:
                    self._write(table, rows_table(table, buf[table]))
                del buf[table]
        except BaseException:
            with self._lock:
                for table, rows in buf.items():
                    self._buf[table] = rows + self._buf.get(table, [])
            raise
        self.restore()  # after the new rows are safe: taking the lock again may raise

    def _write(self, table: str, t: pa.Table) -> Path:
        path = write_arrow(self.root, table, self.sweep, self.run_id, t)
        self._written[path] = (table, t)
        self.files += 1
        return path

    def restore(self) -> int:
        """Write again every file of this run that was removed since it was written (and
        take the run's lock again when its file went too: :meth:`kopt.store.files.RunLock.renew`),
        with one :class:`StoreWarning` naming the store, the tables and the row count.
        Returns the number of rows written again.

        Raises:
            kopt.store.files.RunLocked: another process took the run's new lock file first."""
        gone = [p for p in self._written if not p.exists()]
        relocked = RunLock(self.root, self.run_id).renew()
        tables: dict[str, int] = {}
        for p in gone:
            table, t = self._written.pop(p)
            self._write(table, t)
            tables[table] = tables.get(table, 0) + t.num_rows
        if gone or relocked:
            what = ", ".join(f"{n} {t}" for t, n in sorted(tables.items())) or "no rows"
            warnings.warn(StoreWarning(
                f"{self.root}: {len(gone)} file(s) of run {self.run_id} were removed while it "
                f"ran (the store folder deleted or moved?); kopt wrote them again ({what} "
                "rows)" + (" and took the run's lock again" if relocked else "")
                + "; rows of other runs in that folder are not kopt's to restore"), stacklevel=2)
        return sum(tables.values())

    def compact(self, table: str = "candidates", key: list[str] | None = None,
                min_parts: int = 2) -> None:
        """Merge this run's part files of ``table`` into one (new file first, then remove
        parts), keeping only the latest row (by ``created_at``) per ``key`` when given;
        nothing when it has fewer than ``min_parts`` of them.

        A reader in between may see rows twice (old parts and the merged file). A damaged
        part (:func:`readable_parts`) is neither merged nor removed.
        """
        self.flush()
        folder = self.root / table / f"sweep={self.sweep}" / f"run={self.run_id}"
        parts = readable_parts(self.root, folder.glob("part-*.parquet"), table)  # damaged: left
        if len(parts) < max(2, min_parts):
            return
        t = pa.concat_tables([pq.read_table(p, schema=table_schema(table)) for p in parts])
        if key:
            con = duckdb.connect(":memory:")
            con.register("t", t)
            cols = ", ".join('"' + k.replace('"', '""') + '"' for k in key)
            rel = con.sql(f"select * from t qualify row_number() over (partition by "
                          f"{cols} order by created_at desc) = 1")
            t = (rel.to_arrow_table() if hasattr(rel, "to_arrow_table")
                 else rel.fetch_arrow_table()).cast(table_schema(table))
            con.close()
        self._write(table, t)
        for p in parts:
            p.unlink(missing_ok=True)
            self._written.pop(p, None)


# views that read other views (kopt's own queries build only the views they name: each one
# reads its part files' footers when it is made, about 0.1 s a connection for all of them)
VIEW_DEPENDS = {"candidates": ("profiles", "reference")}


def tables_of(sql: str) -> set[str]:
    """The store tables ``sql`` names (a word ``TABLE`` or ``TABLE_raw``), with the tables
    their views read (:data:`VIEW_DEPENDS`): what :func:`connect` must make views of to run
    it. A superset at worst (a column named like a table)."""
    found = {t for t in SCHEMAS if re.search(rf"\b{t}(_raw)?\b", sql)}
    return found | {d for t in found for d in VIEW_DEPENDS.get(t, ())}


def connect(root: Path | str | None = None,
            tables: set[str] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with views ``candidates``, ``runs``, ``metrics``,
    ``iterations``, ``contests``, ``phases``, ``reference``, ``triage_kernels``,
    ``triage_paths``, ``triage_actions``, ``triage_launches``, ``ports`` over the store at
    ``root`` (empty views when a table has no files); ``tables``: only those views
    (:func:`tables_of`).

    The views read the store's readable part files by name (no globbing: any store path
    works); damaged files are skipped with a :class:`StoreWarning`. The connection may
    read only those files: no other file, no URL, no extension install or load, and the
    configuration is locked (a query cannot undo it).

    Raises:
        StoreError: ``root`` is a file.
    """
    root = _folder(Path(root) if root is not None else default_root())
    if root.exists():
        root = resolved(root)
    con = duckdb.connect(":memory:")
    allowed: list[str] = []
    # the candidates view reads the profiles and reference views: they come first
    for table in sorted(SCHEMAS if tables is None else tables,
                        key=lambda name: name not in ("profiles", "reference")):
        allowed += _make_view(con, root, table)
    for setting, value in (("allowed_paths", sorted(set(allowed))),
                           ("enable_external_access", False),
                           ("autoinstall_known_extensions", False),
                           ("autoload_known_extensions", False), ("lock_configuration", True)):
        con.execute(f"set {setting} = ?", [value])
    return con


# (root, tables) -> (the part files' (path, size, mtime) when the views were made, the
# connection): kopt's own queries reuse a connection while no part file of the tables they
# read changed (making the views costs about 30 ms a connection, read footers included: a
# submitted try ran 29 such queries, 0.85 s, before this cache)
_REUSED: dict[tuple[str, frozenset[str]], tuple[tuple, duckdb.DuckDBPyConnection]] = {}
_REUSED_LOCK = threading.Lock()
REUSED_MAX = 16


def reused_connection(root: Path | str, tables: set[str]) -> duckdb.DuckDBPyConnection:
    """A cursor (a connection of its own, closed by the caller) on a cached :func:`connect`
    with views of ``tables`` over ``root``, made again when a part file of those tables was
    added, removed or rewritten since (paths, sizes and mtimes compared); a fresh
    :func:`connect` where ``tables`` holds ``runs``, whose view reads which runs' drivers
    are gone (their locks), which no part file shows: with ``runs``, the runs whose lock is
    held now (:func:`held_locks`) are compared too. At most :data:`REUSED_MAX` kept.

    Raises:
        StoreError / DatabaseError: as :func:`connect`."""
    key = (str(root), frozenset(tables))
    sig = tuple((str(f), st.st_size, st.st_mtime_ns) for t in sorted(tables)
                for f in table_parts(_folder(Path(root)), t) if (st := _stat(f)) is not None)
    if "runs" in tables:
        sig += (held_locks(root),)
    with _REUSED_LOCK:
        held = _REUSED.get(key)
        if held is not None and held[0] == sig:
            return held[1].cursor()
    con = connect(root, tables)
    with _REUSED_LOCK:
        if len(_REUSED) >= REUSED_MAX:
            _REUSED.pop(next(iter(_REUSED)))
        _REUSED[key] = (sig, con)
        return con.cursor()


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _make_view(con: duckdb.DuckDBPyConnection, root: Path, table: str) -> list[str]:
    """The view over ``table``'s readable part files in ``root`` (an empty typed one when it
    has none); returns the paths (and their SQL literals) the connection may then read.

    Raises:
        DatabaseError: DuckDB refused the view (explained; the connection is closed)."""
    schema = table_schema(table)
    # a table, not a registered Arrow view: a registered one is seen by this connection
    # alone, a table by its cursors too (reused_connection)
    con.register("_arrow_empty", pa.table(
        {f.name: pa.array([], f.type) for f in schema}, schema=schema))
    con.execute(f"create or replace table _empty_{table} as select * from _arrow_empty")
    con.unregister("_arrow_empty")
    view = {"candidates": CANDIDATES_VIEW, "runs": RUNS_VIEW, "metrics": METRICS_VIEW,
            "reference": REFERENCE_VIEW,
            "profiles": "create or replace view profiles_raw as select * from {src}"
            }.get(table, "create or replace view {table} as select * from {src}")
    # the view reads its files' footers when it is made: a part file that another run's
    # writer compacted away since it was listed fails it with DuckDB's "No files found"
    # (two sweeps on one store: the one that ends first compacts while the other lists
    # the store, e.g. to print its results; a read failed beside 15 of 120 run ends, 0 of
    # 120 listing again): list them again
    for attempt in range(1, COMPACTED_TRIES + 1):
        files = table_parts(root, table)
        pats = [_literal(str(f)) for f in files]
        src = f"_empty_{table}"
        if files:
            # by name with the empty typed table: a column no part file holds (one written
            # by an older kopt or another tool) reads as NULL, not as a Binder Error
            src = (f"(select * from read_parquet([{', '.join(map(_sql_text, pats))}], "
                   f"union_by_name=true, hive_partitioning=false) union all by name "
                   f"select * from _empty_{table})")
        try:
            if table == "runs":  # a table: the cursors of reused_connection see it too
                con.register("_arrow_interrupted", pa.table({"run_id": pa.array(
                    _interrupted(con, root, src), pa.string())}))
                con.execute("create or replace table _interrupted as "
                            "select * from _arrow_interrupted")
                con.unregister("_arrow_interrupted")
            con.execute(view.format(src=src, table=table))
            break
        except duckdb.Error as e:
            if attempt < COMPACTED_TRIES and _vanished(e):
                continue
            con.close()
            raise explain(e) from None
    return pats + [str(f) for f in files]


def _interrupted(con: duckdb.DuckDBPyConnection, root: Path, src: str) -> list[str]:
    """Runs whose last event is ``running`` while nobody holds their lock: killed drivers."""
    running = con.execute(f"select run_id from {src} qualify row_number() over (partition "
                          "by run_id order by created_at desc) = 1 and event = 'running'"
                          ).fetchall()
    return [r for (r,) in running if lock_holder(root, r) is None]


def _read_only(sql: str) -> list[Any]:
    """``sql``'s statements; QueryError unless each is a SELECT (also under EXPLAIN)."""
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(_one_line(str(e))) from None
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


# DuckDB's text for a Python exception raised inside a callback it made (reading a registered
# Arrow object or stream, a Python UDF): "... failed: KeyboardInterrupt: ...", "... Python
# exception ... KeyboardInterrupt"; Terminated is how SIGTERM is raised (a KeyboardInterrupt)
_INTERRUPT_IN_CALLBACK = re.compile(r"(?:^|[\s:.])(?:KeyboardInterrupt|Terminated)(?::|\s*$)",
                                    re.MULTILINE)


def interrupted(e: BaseException) -> bool:
    """Whether ``e`` is a Ctrl-C (or SIGTERM): a KeyboardInterrupt; what DuckDB makes of
    SIGINT during a query (a ``RuntimeError("Query interrupted")``, or its
    ``InterruptException``); or DuckDB's error for a KeyboardInterrupt raised inside a Python
    callback it was making (an ``InvalidInputException`` naming it: counting the rows of a
    registered Arrow table, reading a registered stream, a Python UDF)."""
    return (isinstance(e, KeyboardInterrupt | duckdb.InterruptException)
            or (isinstance(e, RuntimeError) and str(e) == "Query interrupted")
            or (isinstance(e, duckdb.Error)
                and _INTERRUPT_IN_CALLBACK.search(str(e)) is not None))


def _vanished(e: Exception) -> bool:
    """Whether DuckDB's error names a part file that is gone now: listed by :func:`connect`,
    then compacted away before the query read it (DuckDB says "No files found", or, reading
    the missing name as a folder, that ``NAME.parquet/**/*.parquet`` is not allowed)."""
    return any(not os.path.exists(p) for p in re.findall(r"(/[^\s'\"]+?\.parquet)", str(e)))


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
    if re.search(r"malformed json", first, flags=re.I):  # else DuckDB's raw parse error
        m = re.search(r'Input: "?(.*?)"?\s*$', first)
        shown = (m.group(1) if m else "text")[:60]
        return StoreError(f"damaged store row: a JSON text column holds {shown!r}, not JSON as "
                          "kopt writes it (edited, or written by another tool); kopt reads "
                          "iterations.state as JSON: `kopt query \"select run_id, iteration, "
                          "device_class from iterations where not json_valid(state)\"` finds "
                          "it; move its part file out of the store, or restore it from a copy")
    if isinstance(e, duckdb.PermissionException):
        m = re.search(r'Cannot access \w+ "(.*)" - ', first)
        views = ", ".join(sorted({t if not t.startswith("triage_") else "triage_*"
                                  for t in SCHEMAS}))
        return QueryError(f"{m.group(1) if m else first}: outside the store; queries read only "
                          f"the store's views ({views})")
    return QueryError(_one_line(msg))


def _one_line(msg: str) -> str:
    """DuckDB's error text on one line: its lines joined, the caret line dropped and the
    query line it quotes (``LINE 1: ...``) kept in parentheses."""
    lines = [x.strip() for x in msg.splitlines() if x.strip().strip("^")]
    quoted = [x for x in lines if x.startswith("LINE ")]
    text = " ".join(x for x in lines if not x.startswith("LINE "))
    return text + (f" ({quoted[0]})" if quoted else "")


# -- the product's statements (kopt.loop.state, kopt.store.select, kopt.loop.propose,
# kopt.tools.report, the
# pipeline's contests, kopt.tools.port): parameters only, no text from outside

DONE_JOB_KEYS_SQL = "select job_key from candidates where run_id = ?"

ITERATION_STATES_SQL = """
select iteration, device_class, state from iterations where run_id = ?
qualify row_number() over (partition by iteration, device_class order by created_at desc) = 1
order by iteration
"""

RUN_SQL = "select * from runs where run_id = ?"

SWEEPS_SQL = "select distinct sweep from runs order by 1"

CANDIDATE_BUILD_SQL = """
select backend, defines from candidates where run_id = ? and candidate_id = ? limit 1
"""

# the correct, final-rung rows of one class (of one iteration, or each candidate's first)
FINAL_OK_SQL = """
select candidate_id, dims, job_key, build_id, median_ms, iqr_ms from candidates
where run_id = $r and ($i is null or iteration = $i) and device_class = $d and status = 'ok'
  and median_ms > 0 and final
qualify row_number() over (partition by candidate_id, dims order by iteration) = 1
"""

# kopt.loop.state.rank: geometric-mean speedup over the iteration's baseline across the sizes
# a candidate's median_ms is its smallest over the problem sizes and dims the size it was
# measured on (the pair belongs together: propose, the report and export show both)
RANK_SQL = """
with it0 as (
  select * from candidates where run_id = $run_id and iteration = $iteration
    and device_class = $device_class
), it as (
  select * from it0 where coalesce(rung, 0) = coalesce($rung, (select max(coalesce(rung, 0))
                                                                from it0))
), need as (select count(distinct dims) n from it where is_baseline)
select candidate_id, any_value(compute_method) compute_method,
       any_value(memory_method) memory_method, any_value(latency_method) latency_method,
       any_value(params) params, any_value(defines) defines, bool_or(is_baseline) is_baseline,
       list(speedup) speedups, list(iqr_ms / median_ms) rel_iqrs,
       min(median_ms) median_ms, arg_min(dims, median_ms) dims, any_value(build_id) build_id
from it where status = 'ok' and speedup is not null
group by candidate_id
having count(*) = (select n from need)
"""

# a screening rung whose baseline failed on some problem size (no speedups): its correct
# candidates measured at every size the rung measured, by their medians (successive halving
# ranks them by the geometric mean; kopt.loop.state.rank_rung)
RANK_MEDIANS_SQL = """
with it as (
  select * from candidates where run_id = $run_id and iteration = $iteration
    and device_class = $device_class and coalesce(rung, 0) = $rung
), need as (select count(distinct dims) n from it)
select candidate_id, bool_or(is_baseline) is_baseline, list(median_ms) medians
from it where status = 'ok' and median_ms > 0
group by candidate_id
having count(distinct dims) = (select n from need)
"""

# the loop's named best per run and class: the closing contest's (kopt.core.winner.close_loop),
# else, before a closing, the last iteration's winner; none when the closing failed (every
# contender is re-checked and re-timed by the outside clock there: a red-team candidate that
# made the closing fail was named from its iteration's row, 100x on a patched clock), nor
# one a contest dropped; the size of its tie; the first baseline and the loop's total
# speedup, both from the closing contest (side by side). ``closing_failed``: a closing that
# named nobody (no candidate of that run and class is then anyone's best: kopt best, export
# and port name none). ``dropped``: the contenders any contest of the run dropped for a
# failed check, a crash or the outside clock (a ``contests`` row with a status and no
# figure): they cannot win
NAMED_CTE = """dropped as (
  select distinct run_id, device_class, candidate_id, true as was_dropped from contests
  where median_ms is null and label is not null
), named0 as (
  select run_id, device_class,
         case when state->>'$.closing.note' is not null
                   and state->>'$.closing.best.candidate_id' is null then null
              else coalesce(state->>'$.closing.best.candidate_id',
                            state->>'$.best.candidate_id') end as named_id,
         coalesce(state->>'$.closing.note' is not null
                  and state->>'$.closing.best.candidate_id' is null, false) as closing_failed,
         case when coalesce(state->>'$.closing.best.candidate_id',
                            state->>'$.best.candidate_id') = state->>'$.best.candidate_id'
                   -- the best a member of the tie: the review gate may have rejected the
                   -- tie's pick and kept the parent
                   and list_contains(json_extract_string(state, '$.tie[*]'),
                                     state->>'$.best.candidate_id')
              then coalesce(json_array_length(state->'$.tie'), 0) else 0 end as tie_size,
         state->>'$.closing.first_baseline' as first_id,
         state->>'$.closing.note' as loop_note
  from iterations
  qualify row_number() over (partition by run_id, device_class
                             order by iteration desc, created_at desc) = 1
), named as (
  select n.* replace (case when d.candidate_id is null then n.named_id end as named_id)
  from named0 n left join dropped d on d.run_id = n.run_id
    and d.device_class = n.device_class and d.candidate_id = n.named_id
), closing as (
  select run_id, device_class, dims, candidate_id, median_ms as side_by_side_ms, witness
  from contests where iteration = 0 and median_ms is not null
  qualify row_number() over (partition by run_id, device_class, dims, candidate_id
                             order by created_at desc) = 1
), vs_first as (
  -- per problem size: the first baseline's side-by-side median over each contender's
  select c.run_id, c.device_class, c.dims, c.candidate_id, c.side_by_side_ms, c.witness,
         f.side_by_side_ms / c.side_by_side_ms as vs_first_baseline
  from closing c join named n using (run_id, device_class)
  left join closing f on f.run_id = c.run_id and f.device_class = c.device_class
    and f.dims = c.dims and f.candidate_id = n.first_id
)"""

# a sweep's latest run, the one rule of kopt best, export and propose: the latest run that
# stored a result (a candidate row or an iteration state), also when it was interrupted (the
# commands say so and how to resume it); a run that stored nothing has nothing to show
LATEST_RUN = """(select max(run_id) from (
  select run_id from candidates where sweep = $sweep
  union all select run_id from iterations where sweep = $sweep))"""

# the latest run (LATEST_RUN) and the latest finished one
LATEST_RUNS_SQL = ("select " + LATEST_RUN + " as latest, (select max(run_id) from runs "
                   "where sweep = $sweep and status = 'finished') as finished")

BEST_SQL = """
with scope as (
  select * from candidates
  where sweep = $sweep and ($run_id is null or run_id = $run_id)
    and ($run_id is not null or run_id = """ + LATEST_RUN + """)
), """ + NAMED_CTE + """
select device_class, dims, candidate_id, compute_method, memory_method, latency_method,
       params, median_ms, iqr_ms, n_samples, speedup, tflops, gbps, reference_ms, vs_reference,
       pct_peak_flops, pct_peak_bw, max_abs_err, max_rel_err, run_id, device_name, isolation,
       coalesce(candidate_id = named_id, false) as named,
       case when candidate_id = named_id then tie_size else 0 end as tied_with,
       case when candidate_id = named_id then v.vs_first_baseline end as loop_speedup,
       case when candidate_id = named_id then loop_note end as loop_note,
       case when candidate_id = named_id then v.witness end as witness
from scope left join named using (run_id, device_class)
left join vs_first v using (run_id, device_class, dims, candidate_id)
left join dropped using (run_id, device_class, candidate_id)
where status = 'ok' and final and not coalesce(closing_failed, false) and was_dropped is null
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
       f.reference_ms, f.vs_reference, f.pct_peak_flops, f.pct_peak_bw, f.max_abs_err,
       f.max_rel_err, f.registers, f.spill_bytes,
       coalesce(f.candidate_id = n.named_id, false) as named
from found f left join named n using (run_id, device_class)
left join vs_first v using (run_id, device_class, dims, candidate_id)
qualify row_number() over (partition by f.device_class, f.dims
                           order by coalesce(f.candidate_id = n.named_id, false) desc,
                                    f.speedup desc nulls last, f.median_ms) <= $k
order by f.device_class, f.dims, coalesce(f.candidate_id = n.named_id, false) desc,
         f.speedup desc nulls last, f.median_ms
"""

# kopt propose: per device class, the latest iteration state of the sweep's latest run
# (LATEST_RUN, as kopt best), with the run's record
LATEST_STATES_SQL = """
select r.run_id, r.backend, r.devices, i.iteration, i.device_class, i.state
from runs r left join iterations i using (run_id)
where r.sweep = $sweep and r.run_id = """ + LATEST_RUN + """
qualify row_number() over (partition by i.device_class
                           order by i.iteration desc nulls last, i.created_at desc) = 1
"""

# kopt report's figures of one run
REPORT_SQL = {
    "statuses": "select status, count(*) n from candidates where run_id = ? "
                "group by 1 order by 1",
    "metrics": "select iteration, candidate_id, device_class, dims, launch, metric, value "
               "from metrics where run_id = ? order by iteration, dims, launch",
    "rungs": "select iteration, device_class, coalesce(rung, 0) rung, "
             "count(distinct candidate_id) n, max(n_samples) samples from candidates "
             "where run_id = ? group by all order by all",
    "correct": "select iteration, device_class, candidate_id, params, dims, median_ms, iqr_ms, "
               "speedup, "
               "vs_reference, max_abs_err, max_rel_err, "
               "compute_method, memory_method, latency_method, is_baseline "
               "from candidates where run_id = ? and status = 'ok'",
    "failures": "select device_class, status, error from candidates "
                "where run_id = ? and status != 'ok' order by all",
    "reference": "select device_class, dims, impl, status, error, median_ms, iqr_ms, "
                 "n_samples, tflops, gbps, pct_peak_flops, pct_peak_bw, max_abs_err, "
                 "max_rel_err from reference where run_id = ? order by device_class, dims",
    "totals": "select count(distinct candidate_id) n_candidates, count(*) n_jobs, "
              "count(distinct iteration) n_iterations from candidates where run_id = ? "
              "having count(*) > 0",
}

Params = Sequence[Any] | dict[str, Any]


@dataclass
class RunHistory:
    """A run's figures for its report, one dict per row.

    Attributes:
        statuses: ``status``, ``n`` (candidate rows per status), by status.
        metrics: NCU figures: ``iteration``, ``candidate_id``, ``device_class``, ``dims``,
            ``launch`` (the launch's index within one ``solve`` call), ``metric``, ``value``.
        rungs: per iteration, class and successive-halving rung: ``n`` candidates and the
            most ``samples`` per candidate.
        correct: the ``ok`` rows: iteration, class, candidate id, params and dims (JSON),
            ``median_ms``, ``speedup``, the method triple, ``is_baseline``.
        failures: ``device_class``, ``status``, ``error`` of every row not ``ok``.
        reference: the reference's row per device class and problem size (the
            ``reference`` view: ``impl``, ``status``, ``median_ms``, rates, share of peak,
            errors against ``reference()``).
        totals: one row: the run's ``n_candidates``, ``n_jobs`` and ``n_iterations`` over
            every process that measured for it (the sweep, each submission, each resume).
    """

    statuses: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    rungs: list[dict[str, Any]] = field(default_factory=list)
    correct: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    reference: list[dict[str, Any]] = field(default_factory=list)
    totals: list[dict[str, Any]] = field(default_factory=list)


# the reads of kopt propose --format json, kopt export, kopt methods
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

STATUS_COUNTS_SQL = "select status, count(*) n from candidates where run_id = ? group by 1"

# each folder a sweep's runs came from, with its latest run, latest first
SWEEP_FOLDERS_SQL = ("select sweep_dir, max(run_id) as latest from runs where sweep = $sweep "
                     "and sweep_dir is not null group by sweep_dir order by latest desc")

RUN_INFO_SQL = ("select run_id, sweep, sweep_dir, backend, devices, spec_hash from runs "
                "where run_id = ?")

# Per (run, iteration, device class) and method a candidate's triple held: the
# iteration's closing state (latest row) and the method's own gain, read as the loop reads
# it (kopt.loop.state.close_iteration): the best geometric-mean speedup over the iteration's
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
         any_value(c.latency_method) lm, bool_or(c.is_baseline) base,
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
  -- not the baseline's triple: a submitted iteration's baseline is its parent, whose
  -- methods earlier iterations applied
  select distinct run_id, iteration, device_class, m as method
  from (select *, unnest([cm, mm, lm]) m from per_cand where not base) where m is not null
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


# lineage: a candidate's own columns, a stored source, the versions of a run
CANDIDATE_LINEAGE_SQL = """
select candidate_id, compute_method, memory_method, latency_method, params, defines, arch,
       parent_id, source_hash, submitter, claimed_methods, note
from candidates where run_id = ? and candidate_id = ? order by created_at desc limit 1
"""
SOURCE_SQL = "select name, text from sources where source_hash = ? limit 1"
# several of each at once (a retried iteration's load: one query, not one per earlier try)
CANDIDATE_LINEAGES_SQL = """
select * exclude (rn) from (
  select candidate_id, compute_method, memory_method, latency_method, params, defines, arch,
         parent_id, source_hash, submitter, claimed_methods, note,
         row_number() over (partition by candidate_id order by created_at desc) rn
  from candidates where run_id = ? and list_contains(?, candidate_id)) where rn = 1
"""
SOURCES_SQL = ("select source_hash, first(name) name, first(text) text from sources "
               "where list_contains(?, source_hash) group by source_hash")
SUBMIT_TRIES_SQL = ("select coalesce(max(try_no), 0) tries from versions "
                    "where run_id = ? and iteration = ?")
LINEAGE_ROWS_SQL = """
select iteration, device_class, candidate_id, is_baseline, status, median_ms, speedup, dims,
       compute_method, memory_method, latency_method, parent_id, source_hash,
       coalesce(submitter, 'sweep') submitter, claimed_methods
from candidates where run_id = ? order by iteration, created_at, candidate_id
"""
VERSIONS_SQL = "select * from versions where run_id = ? order by iteration, try_no, created_at"
# kopt lineage: the loop's named best per device class of a run (NAMED_CTE, as kopt best)
NAMED_BEST_SQL = "with " + NAMED_CTE + """
select device_class, named_id from named where run_id = ? and named_id is not null"""
# a run's time breakdown, the rows of its latest process (a resumed run has one
# set per process)
PHASES_SQL = """
select phase, device_class, device, node, start_s, end_s, started_at, ended_at, detail,
       process_start
from phases where run_id = ?
qualify process_start = max(process_start) over ()
order by start_s, end_s, phase
"""
# the problem sizes at which a run already timed the reference, per device class (a
# resumed run or a submitted iteration reuses those rows)
TIMED_REFERENCE_SQL = "select distinct device_class, dims from reference where run_id = ?"

# the review gate and `kopt wait`
WINNER_SIZES_SQL = """
select dims, status, median_ms from candidates
where run_id = ? and iteration = ? and device_class = ? and candidate_id = ? and final
"""
REVIEWS_SQL = """
select * from reviews where run_id = ? and iteration = ?
qualify row_number() over (partition by device_class order by created_at desc) = 1
order by device_class
"""
ITERATION_CANDIDATES_SQL = """
with v as (select run_id, iteration, source_hash, arg_max(name, created_at) version,
                  arg_max(try_no, created_at) try_no
           from versions group by all)
select device_class, candidate_id, bool_or(is_baseline) is_baseline,
       coalesce(arg_min(status, created_at) filter (where status <> 'ok'), 'ok') status,
       arg_min(error, created_at) filter (where status <> 'ok') error,
       count(*) filter (where status = 'ok') sizes_ok, count(*) sizes,
       case when bool_and(status = 'ok') filter (where final) then
         exp(avg(ln(median_ms)) filter (where final)) end median_ms,
       case when bool_and(status = 'ok') filter (where final) then
         exp(avg(ln(speedup)) filter (where final)) end speedup,
       any_value(params) params, any_value(v.version) version, any_value(v.try_no) try_no,
       any_value(c.source_hash) source_hash
from candidates c left join v using (run_id, iteration, source_hash)
where c.run_id = ? and c.iteration = ? group by device_class, candidate_id
order by device_class, min(created_at), 2
"""
PROGRESS_SQL = """
select (select max(created_at) from versions where run_id = $r and iteration = $i) submitted_at,
       (select min(created_at) from (select max(created_at) created_at from iterations
         where run_id = $r and iteration = $i group by device_class)) closed_at,
       (select greatest(coalesce((select max(iteration) from iterations where run_id = $r), 0),
                        coalesce((select max(iteration) from versions where run_id = $r), 0))
       ) last_iteration
"""


class Database:
    """The tuning records of the store at ``root`` (default ``$KOPT_STORE`` or
    ``./kopt-store``): commit them, read the best back, answer history queries.

    Each read opens a connection (:func:`connect`: views over the readable part files,
    nothing else readable) and closes it; writes go to new Parquet files
    (:func:`kopt.store.files.write_table`, :class:`Writer`).

    Every read raises StoreError when ``root`` is a file or a store file is damaged
    beyond skipping, and QueryError when DuckDB rejects a statement.
    """

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # -- commit ---------------------------------------------------------------------------
    def writer(self, sweep: str, run_id: str, flush_rows: int = 256,
               flush_s: float = 2.0) -> Writer:
        """A buffered writer of ``run_id``'s rows (partition ``sweep``, ``run_id``)."""
        return Writer(self.root, sweep, run_id, flush_rows, flush_s)

    def commit(self, table: str, sweep: str, run_id: str,
               rows: list[dict[str, Any]]) -> Path:
        """Write ``rows`` of ``table`` (a :data:`kopt.store.files.SCHEMAS` name; missing columns
        null, unknown keys dropped) as one new Parquet file at once; returns its path.

        Raises:
            KeyError: an unknown table.
        """
        return write_table(self.root, table, sweep, run_id, rows)

    def lock(self, run_id: str) -> RunLock:
        """``run_id``'s writer lock (:class:`kopt.store.files.RunLock`, not yet taken)."""
        return RunLock(self.root, run_id)

    # -- the user's statement ---------------------------------------------------------------
    def open_query(self, sql: str) -> Result:
        """Run the user's read-only ``sql``; rows stay in DuckDB until fetched
        (:func:`open_query`). Raises QueryError for a statement that could write or
        read outside the store."""
        return open_query(sql, self.root)

    def query(self, sql: str) -> tuple[list[str], list[tuple]]:
        """The user's read-only ``sql``: (column names, rows) (:func:`query`)."""
        return query(sql, self.root)

    # -- history ----------------------------------------------------------------------------
    def _fetch(self, *statements: tuple[str, Params]) -> list[list[dict[str, Any]]]:
        """Each ``(sql, parameters)``'s rows as dicts (column -> value), on one connection;
        up to :data:`COMPACTED_TRIES` times when a part file it listed was compacted away
        by a writer before it was read (a detached try's driver compacts the store while
        `kopt wait` polls it)."""
        need = set().union(*(tables_of(sql) for sql, _ in statements))
        for attempt in range(1, COMPACTED_TRIES + 1):
            con = reused_connection(self.root, need)
            try:
                out = []
                for sql, params in statements:
                    cur = con.execute(sql, params)
                    cols = [d[0] for d in cur.description]
                    out.append([dict(zip(cols, r)) for r in cur.fetchall()])
                return out
            except duckdb.Error as e:
                if attempt < COMPACTED_TRIES and _vanished(e):
                    continue  # list the parts again
                raise explain(e) from None
            finally:
                con.close()
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def _records(self, sql: str, params: Params) -> list[dict[str, Any]]:
        return self._fetch((sql, params))[0]

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The latest ``runs`` row of ``run_id`` (column -> value; ``status`` is
        ``running``, ``interrupted``, ``done``...), or None."""
        rows = self._records(RUN_SQL, [run_id])
        return rows[0] if rows else None

    def sweeps(self) -> list[str]:
        """The names of the sweeps with a run in the store, sorted."""
        return [r["sweep"] for r in self._records(SWEEPS_SQL, [])]

    def done_job_keys(self, run_id: str) -> set[str]:
        """Job keys already stored for ``run_id`` (what ``--resume`` skips)."""
        return {r["job_key"] for r in self._records(DONE_JOB_KEYS_SQL, [run_id])}

    def iteration_states(self, run_id: str) -> list[tuple[int, str, str]]:
        """``(iteration, device_class, state JSON)`` of ``run_id``, the latest per
        iteration and class, by iteration."""
        return [(r["iteration"], r["device_class"], r["state"])
                for r in self._records(ITERATION_STATES_SQL, [run_id])]

    def latest_states(self, sweep: str) -> list[dict[str, Any]]:
        """Per device class, the latest iteration state of ``sweep``'s latest run (the
        latest that stored a result, as :meth:`best` and :meth:`latest_runs`):
        ``run_id``, ``backend``, ``devices`` (JSON), ``iteration``, ``device_class``,
        ``state`` (JSON). A run with no iteration stored (interrupted in its first) is one
        row with ``iteration``, ``device_class`` and ``state`` None; empty when the sweep
        has no run that stored a result."""
        return self._records(LATEST_STATES_SQL, {"sweep": sweep})

    def latest_runs(self, sweep: str) -> tuple[str | None, str | None]:
        """``(latest, finished)``: the run id ``kopt best``, ``export`` and ``propose`` read
        by default (the latest that stored a result, interrupted or not) and the latest
        finished run's (None where there is none)."""
        row = self._records(LATEST_RUNS_SQL, {"sweep": sweep})[0]
        return row["latest"], row["finished"]

    def reference_impls(self, run_id: str) -> set[str]:
        """Which of ref.py's functions ``run_id`` timed as its reference row (``contender``
        or ``reference``: workers.harness ``Harness.time_reference``), where timed ``ok``."""
        return {r["impl"] for r in self._records(
            "select distinct impl from reference where run_id = ? and status = 'ok' "
            "and impl is not null", [run_id])}

    def sweep_folders(self, sweep: str) -> list[tuple[str, str]]:
        """``(sweep_dir, its latest run id)`` of every folder whose sweep is named ``sweep``
        (two folders may hold sweeps of one name), the folder of the latest run first."""
        return [(r["sweep_dir"], r["latest"])
                for r in self._records(SWEEP_FOLDERS_SQL, {"sweep": sweep})]

    def candidate_build(self, run_id: str, candidate_id: str
                        ) -> tuple[str | None, str | None] | None:
        """``(backend, defines JSON)`` of a stored candidate of ``run_id``, or None."""
        rows = self._records(CANDIDATE_BUILD_SQL, [run_id, candidate_id])
        return (rows[0]["backend"], rows[0]["defines"]) if rows else None

    def final_ok(self, run_id: str, device_class: str, iteration: int | None = None
                 ) -> list[tuple[str, str, str, str, float, float]]:
        """``(candidate_id, dims JSON, job_key, build_id, median_ms, iqr_ms)`` of the
        correct rows of the last successive-halving rung with a positive median, of class
        ``device_class`` and ``iteration`` (None: each candidate's earliest iteration)."""
        return [(r["candidate_id"], r["dims"], r["job_key"], r["build_id"], r["median_ms"],
                 r["iqr_ms"]) for r in self._records(
                     FINAL_OK_SQL, {"r": run_id, "i": iteration, "d": device_class})]

    def rank(self, run_id: str, iteration: int, device_class: str,
             rung: int | None = None) -> list[dict[str, Any]]:
        """Correct candidates of one iteration and class measured at every problem size of
        its baseline, from one successive-halving rung (None: the last one), unordered
        (kopt.loop.state.rank aggregates and orders them with kopt.core.compare's geometric mean).
        Each:
        ``candidate_id``, the triple, ``params``/``defines`` (JSON), ``is_baseline``,
        ``speedups`` and ``rel_iqrs`` (per problem size: speedup over the baseline, IQR /
        median), ``median_ms`` (smallest), ``dims`` (the size of that median), ``build_id``."""
        return self._records(RANK_SQL, {"run_id": run_id, "iteration": iteration,
                                        "device_class": device_class, "rung": rung})

    def rank_medians(self, run_id: str, iteration: int, device_class: str,
                     rung: int) -> list[dict[str, Any]]:
        """Correct candidates of one successive-halving rung measured at every problem size
        the rung measured, unordered, without the baseline (for a rung whose baseline
        failed): ``candidate_id``, ``is_baseline``, ``medians`` (ms, one per size)."""
        return self._records(RANK_MEDIANS_SQL, {"run_id": run_id, "iteration": iteration,
                                                "device_class": device_class, "rung": rung})

    def best(self, sweep: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The best correct final-rung candidate per device class and dims of ``sweep``'s
        run ``run_id`` (None: its latest run): the loop's named best, else the lowest
        median. See :func:`kopt.store.select.best` for the columns."""
        return self._records(BEST_SQL, {"sweep": sweep, "run_id": run_id})

    def top_k(self, run_id: str, k: int = 5) -> list[dict[str, Any]]:
        """At most ``k`` candidates of ``run_id`` per device class and dims, the loop's
        named best first, then by speedup over their own iteration's baseline. See
        :func:`kopt.store.select.top` for the columns."""
        return self._records(TOP_SQL, {"run_id": run_id, "k": k})

    def run_history(self, run_id: str) -> RunHistory:
        """``run_id``'s figures for a report (:class:`RunHistory`), read on one
        connection."""
        got = self._fetch(*((REPORT_SQL[f], [run_id]) for f in REPORT_SQL))
        return RunHistory(**dict(zip(REPORT_SQL, got)))

    def status_counts(self, run_id: str) -> dict[str, int]:
        """Status -> number of stored candidate rows (jobs) of ``run_id``, the whole run's
        (a resumed run's rows from before the resume too)."""
        return {r["status"]: r["n"] for r in self._records(STATUS_COUNTS_SQL, [run_id])}

    def candidate_metrics(self, run_id: str, device_class: str, candidate_id: str,
                          iteration: int) -> list[dict[str, Any]]:
        """The NCU metric rows (``iteration``, ``dims``, ``kernel``, ``launch``, ``metric``,
        ``value``, ``unit``) of one candidate on one device class, from the latest iteration
        up to ``iteration`` in which it was profiled; [] when it never was."""
        return self._records(CANDIDATE_METRICS_SQL, [run_id, device_class, candidate_id,
                                                    iteration, run_id, device_class,
                                                    candidate_id])

    def candidate_rows(self, run_id: str, candidate_ids: list[str]
                       ) -> dict[tuple[str, str, str], dict[str, Any]]:
        """(candidate id, device class, dims JSON) -> that candidate's fastest correct
        final-rung row there in ``run_id``: ``defines``/``params`` (JSON text), ``backend``,
        the triple, ``median_ms``, ``iqr_ms``, ``samples_ms``, ``compile_s``, ``max_abs_err``,
        ``created_at``."""
        rows = self._records(CANDIDATE_ROWS_SQL, [run_id, candidate_ids])
        return {(r["candidate_id"], r["device_class"], r["dims"]): r for r in rows}

    def run_info(self, run_id: str) -> dict[str, Any] | None:
        """``run_id``, ``sweep``, ``sweep_dir``, ``backend``, ``devices`` (JSON text) and
        ``spec_hash`` of a run's latest ``runs`` row, or None."""
        rows = self._records(RUN_INFO_SQL, [run_id])
        return rows[0] if rows else None

    def method_records(self) -> list[dict[str, Any]]:
        """One row per (method, device class, run, iteration) in which a candidate's triple
        held the method (not the baseline's: a submitted iteration's baseline is its parent,
        whose methods earlier iterations tried), over the whole store: ``bottleneck`` (the
        iteration baseline's, the one the method was applied under; ``unknown`` without
        NCU), ``gain`` (the method's own, as the loop judges it: the best geometric-mean
        speedup over the iteration's baseline of a triple holding it, correct on every
        problem size, over the best of the same triple without it, or over 1.0 when that was
        not measured; None when no candidate holding it was correct), ``accepted`` (the
        method is in the winner the iteration named as its new best), ``ineffective`` (the
        iteration's state lists it so) and ``closed`` (the iteration has a stored state)."""
        return self._records(METHOD_RECORDS_SQL, [])

    def method_effectiveness(self) -> list[dict[str, Any]]:
        """Each method's record over the whole store per ``device_class`` and ``bottleneck``
        (the one it was applied under; ``unknown`` without NCU), from :meth:`method_records`:
        ``tried`` (iterations in which a candidate held it), ``accepted`` (of those, the ones
        whose named winner held it), ``median_gain`` (median of its own gain, None when no
        candidate holding it was correct), ``ineffective`` (iterations that judged it so) and
        ``measured`` (iterations with a gain figure)."""
        return self._records(METHODS_SQL, [])

    def candidate_lineage(self, run_id: str, candidate_id: str) -> dict[str, Any] | None:
        """A candidate of ``run_id`` as a parent of submitted versions: its triple, ``params``
        / ``defines`` (JSON), ``arch`` and lineage columns (``parent_id``, ``source_hash``,
        ``submitter``, ``claimed_methods``, ``note``); None when it has no row."""
        rows = self._records(CANDIDATE_LINEAGE_SQL, [run_id, candidate_id])
        return rows[0] if rows else None

    def candidate_lineages(self, run_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
        """:meth:`candidate_lineage` of each of ``ids`` in one query: candidate id -> its
        row (ids without a row are absent)."""
        rows = self._records(CANDIDATE_LINEAGES_SQL, [run_id, list(ids)]) if ids else []
        return {r["candidate_id"]: r for r in rows}

    def sources(self, hashes: list[str]) -> dict[str, dict[str, Any]]:
        """:meth:`source` of each of ``hashes`` in one query: digest -> ``name``, ``text``."""
        rows = self._records(SOURCES_SQL, [list(hashes)]) if hashes else []
        return {r["source_hash"]: {"name": r["name"], "text": r["text"]} for r in rows}

    def source(self, source_hash: str) -> dict[str, Any] | None:
        """The stored copy (``name``, ``text``) of the source with digest ``source_hash``."""
        rows = self._records(SOURCE_SQL, [source_hash])
        return rows[0] if rows else None

    def submit_tries(self, run_id: str, iteration: int) -> int:
        """How many times versions were submitted into ``iteration`` of ``run_id`` (0: none)."""
        return int(self._records(SUBMIT_TRIES_SQL, [run_id, iteration])[0]["tries"])

    def lineage_rows(self, run_id: str) -> list[dict[str, Any]]:
        """Every candidate row of ``run_id`` with its figures and lineage columns, by
        iteration (``submitter`` 'sweep' where a store predates the column)."""
        return self._records(LINEAGE_ROWS_SQL, [run_id])

    def named_best(self, run_id: str) -> dict[str, str]:
        """Device class -> the candidate id the loop named best in ``run_id`` (its closing
        contest's pick, else the last iteration's winner: NAMED_CTE, as :meth:`best`);
        a class without a stored iteration state is left out."""
        return {r["device_class"]: r["named_id"]
                for r in self._records(NAMED_BEST_SQL, [run_id])}

    def versions(self, run_id: str) -> list[dict[str, Any]]:
        """The ``versions`` rows of ``run_id`` (one per submitted version and try)."""
        return self._records(VERSIONS_SQL, [run_id])

    def winner_sizes(self, run_id: str, iteration: int, device_class: str,
                     candidate_id: str) -> list[dict[str, Any]]:
        """One candidate's final-rung rows in one iteration and class: ``dims`` (JSON),
        ``status``, ``median_ms`` (what the review gate checks, kopt.loop.review)."""
        return self._records(WINNER_SIZES_SQL, [run_id, iteration, device_class,
                                                candidate_id])

    def reviews(self, run_id: str, iteration: int) -> list[dict[str, Any]]:
        """The latest ``reviews`` row of each device class for ``iteration`` of ``run_id``."""
        return self._records(REVIEWS_SQL, [run_id, iteration])

    def iteration_candidates(self, run_id: str, iteration: int) -> list[dict[str, Any]]:
        """``device_class``, ``candidate_id``, ``is_baseline`` of every candidate measured in
        ``iteration`` of ``run_id``, in the order they were first stored, with its
        ``status`` (``ok`` when every problem size was, else its first failing size's),
        that size's ``error`` text (None when ok), ``sizes_ok`` of ``sizes``, and when every
        size of its final rung was ok: ``median_ms`` and ``speedup`` (over the iteration's
        baseline), each the geometric mean over the problem sizes (else None); ``params``
        (its launch config, JSON), ``version`` and ``try_no`` (the submitted file's name and
        the try that sent it; None for the sweep's own source) and ``source_hash``."""
        return self._records(ITERATION_CANDIDATES_SQL, [run_id, iteration])

    def progress(self, run_id: str, iteration: int) -> dict[str, Any]:
        """Where ``iteration`` of ``run_id`` stands (what `kopt wait` polls):
        ``submitted_at`` (its latest ``versions`` row, None when nothing was submitted into
        it), ``closed_at`` (the earliest of its classes' latest ``iterations`` rows, None when
        none is stored) and ``last_iteration`` (the highest iteration stored or submitted,
        0 when none)."""
        return self._records(PROGRESS_SQL, {"r": run_id, "i": iteration})[0]

    def phases(self, run_id: str) -> list[dict[str, Any]]:
        """The ``phases`` rows of ``run_id``'s latest process (kopt.util.phases: ``phase``,
        ``device_class``, ``device``, ``node``, ``start_s``/``end_s`` in seconds since kopt
        started in that process, ``started_at``/``ended_at``, ``detail``, ``process_start``), by
        start; [] for a run from before the table."""
        return self._records(PHASES_SQL, [run_id])

    def timed_references(self, run_id: str) -> set[tuple[str, str]]:
        """``(device_class, dims JSON)`` of every ``reference`` row of ``run_id`` (each
        problem size and class at which the run timed ref.py's contender)."""
        return {(r["device_class"], r["dims"])
                for r in self._records(TIMED_REFERENCE_SQL, [run_id])}


def done_job_keys(root: Path, run_id: str) -> set[str]:
    """Job keys already stored for ``run_id`` (:meth:`Database.done_job_keys`)."""
    return Database(root).done_job_keys(run_id)


def iteration_states(root: Path, run_id: str) -> list[tuple[int, str, str]]:
    """(iteration, device_class, state JSON) rows stored for ``run_id``, latest per key
    (:meth:`Database.iteration_states`)."""
    return Database(root).iteration_states(run_id)


def run_record(root: Path, run_id: str) -> dict[str, Any] | None:
    """The latest ``runs`` row of ``run_id`` as a dict, or None (:meth:`Database.run`)."""
    return Database(root).run(run_id)


# -- Nsight Systems SQLite exports (kopt triage's input, not the store) -----------------------

class TraceError(ValueError):
    """An Nsight Systems export SQLite cannot read (the message is SQLite's)."""


@dataclass
class NsysExport:
    """The rows kopt triage reads from an Nsight Systems SQLite export (NVIDIA's schema;
    times in nanoseconds).

    Attributes:
        tables: the export's table names; without ``CUPTI_ACTIVITY_KIND_KERNEL`` the other
            fields are empty.
        strings: ``StringIds``: id -> text.
        kernels: per kernel launch: start, end, demangledName id, shortName id, mangledName
            id (None when the export has no such column), gridX/Y/Z, blockX/Y/Z,
            correlationId, and whether it ran in a CUDA graph (``graphNodeId`` set or a
            nonzero ``graphId``; false when the export has neither column).
        calls: ``CUPTI_ACTIVITY_KIND_RUNTIME`` per correlation id: (correlationId, first
            start, first globalTid).
        ranges: NVTX push/pop and start/end ranges (``eventType`` 59, 60) with an end:
            (start, end, text, textId, globalTid).
    """

    tables: set[str]
    strings: dict[int, str] = field(default_factory=dict)
    kernels: list[tuple] = field(default_factory=list)
    calls: list[tuple] = field(default_factory=list)
    ranges: list[tuple] = field(default_factory=list)


NSYS_KERNEL_SQL = ("select start, end, demangledName, shortName, {mangled}, gridX, gridY, "
                   "gridZ, blockX, blockY, blockZ, correlationId, ({graph}) "
                   "from CUPTI_ACTIVITY_KIND_KERNEL")


def _text(value: Any) -> str | None:
    """A stored name as text: SQLite keeps whatever type was written (a tool that wrote
    kernel names as bytes once made triage raise TypeError)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def read_nsys_export(path: Path) -> NsysExport:
    """The kernel, runtime, string and NVTX rows of the Nsight Systems SQLite export at
    ``path``, opened read-only.

    Raises:
        TraceError: not a readable SQLite file (SQLite's message).
    """
    # as a URI (read-only), percent-encoded: a `#` or `?` in the name is part of the file's
    # name, not the URI's fragment or query (`a#b.sqlite` once opened, and made, `a`)
    con = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return NsysExport(tables)
        cols = {r[1] for r in con.execute("pragma table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        # column names from this fixed set only, by what the export has
        graph = ("graphNodeId is not null" if "graphNodeId" in cols else "0") + (
            " or coalesce(graphId, 0) != 0" if "graphId" in cols else "")
        mangled = "mangledName" if "mangledName" in cols else "null"
        return NsysExport(
            tables, strings={k: _text(v) for k, v in con.execute("select id, value from "
                                                                  "StringIds")},
            kernels=con.execute(NSYS_KERNEL_SQL.format(mangled=mangled, graph=graph)).fetchall(),
            calls=con.execute(
                "select correlationId, min(start), min(globalTid) from "
                "CUPTI_ACTIVITY_KIND_RUNTIME group by correlationId").fetchall()
            if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables else [],
            ranges=con.execute(
                "select start, end, text, textId, globalTid from NVTX_EVENTS "
                "where eventType in (59, 60) and end is not null").fetchall()
            if "NVTX_EVENTS" in tables else [])
    except sqlite3.DatabaseError as e:
        raise TraceError(str(e)) from None
    finally:
        con.close()
