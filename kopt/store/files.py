"""The store's files and locks: Parquet tables under one root (no SQL here: every
statement that reads or writes them is in :mod:`kopt.store.database`).

Layout (hive-style folders, one Parquet file per flush)::

    STORE/candidates/sweep=NAME/run=RUN_ID/part-00000-1a2b3c4d.parquet
    STORE/runs/sweep=NAME/run=RUN_ID/part-...
    STORE/metrics/...   STORE/iterations/...

Every file is written under a temporary name in the same folder and renamed
(atomic on POSIX), so a killed run never leaves a broken file; a file damaged all the
same (a truncated copy, a disk fault) fails pyarrow's footer check and is skipped with a
note naming it (:class:`StoreWarning`). :mod:`kopt.store.database` reads the readable files
through DuckDB views.

Rows are never updated in place: a run only adds files while it runs; its end rewrites
its own part files (:meth:`kopt.store.database.Writer.compact`). One run has one writer:
:class:`RunLock` (an ``flock`` on ``STORE/locks/RUN_ID.lock``, held for the run's
lifetime). A run whose last event is ``running`` while nobody holds its lock was killed:
the ``runs`` view says ``interrupted``.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import time
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kopt.util.paths import broken_link, resolved
from workers.observers import observer_columns

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
        ("throttled_samples", pa.int32()), ("throttled", pa.bool_()), ("power_w", pa.float64()),
        ("wall_s", pa.float64()), ("flops", pa.float64()), ("bytes", pa.float64()),
        # measurement guards: input sets checked, the probe's full and escaped time (ms),
        # device memory a job left allocated (bytes)
        ("input_sets", pa.int32()), ("full_ms", pa.float64()), ("escaped_ms", pa.float64()),
        ("leaked_bytes", pa.int64()),
        ("created_at", TS),
        # lineage: the candidate it was derived from (NULL for a sweep's), the
        # digest of its source (a ``sources`` row), who submitted it ('sweep' for a sweep's
        # own candidates), the methods it claims (comma-separated) and the analysis text
        ("parent_id", pa.string()), ("source_hash", pa.string()), ("submitter", pa.string()),
        ("claimed_methods", pa.string()), ("note", pa.string()),
        # the largest |out - ref| / |ref| of the check (ref != 0)
        ("max_rel_err", pa.float64()),
        # when the device actor began and ended the job (the device's clock)
        ("device_start", TS), ("device_end", TS),
        # the sandbox the candidate's code ran in (workers.isolation): namespaces,
        # user-namespaces or none
        ("isolation", pa.string()),
    ]),
    # ref.py's timed function (``contender``, else ``reference``), timed by the
    # harness as candidates are, once per run, device class and problem size; ``impl`` says
    # which function; ``peak_tflops`` / ``peak_gbps``: the device's peak for the sweep's
    # dtype (kopt.run.devices.peaks; NULL where not known)
    "reference": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("dims", pa.string()),
        ("backend", pa.string()), ("device_class", pa.string()),
        ("device_name", pa.string()), ("node", pa.string()), ("device_id", pa.string()),
        ("impl", pa.string()), ("status", pa.string()), ("error", pa.string()),
        ("median_ms", pa.float64()), ("min_ms", pa.float64()), ("iqr_ms", pa.float64()),
        ("mean_ms", pa.float64()), ("n_samples", pa.int32()),
        ("samples_ms", pa.list_(pa.float64())), ("warmup_runs", pa.int32()),
        ("throttled", pa.bool_()), ("sm_clock_mhz", pa.float64()),
        ("max_abs_err", pa.float64()), ("max_rel_err", pa.float64()),
        ("flops", pa.float64()), ("bytes", pa.float64()), ("dtype", pa.string()),
        ("peak_tflops", pa.float64()), ("peak_gbps", pa.float64()),
        ("wall_s", pa.float64()), ("created_at", TS),
    ]),
    # a stored copy of every kernel source a run measured, keyed by its digest
    # (kopt.core.expand.space_digest)
    "sources": pa.schema([
        ("source_hash", pa.string()), ("name", pa.string()), ("text", pa.string()),
        ("created_at", TS),
    ]),
    # one row per version submitted into a run (`kopt submit`): its iteration, try, parent
    # candidate, source, submitter, claimed methods and analysis
    "versions": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("try_no", pa.int32()), ("source_hash", pa.string()), ("name", pa.string()),
        ("parent_id", pa.string()), ("submitter", pa.string()),
        ("claimed_methods", pa.string()), ("note", pa.string()), ("created_at", TS),
    ]),
    # the sources of each submitted version's idea (`kopt submit --idea`, and each claimed
    # catalog method): kind catalog | paper | url | kernel | other, and the reference
    "provenance": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("try_no", pa.int32()), ("source_hash", pa.string()), ("kind", pa.string()),
        ("ref", pa.string()), ("created_at", TS),
    ]),
    # the evidence digest of each closed iteration and device class (one row set per
    # closing; the latest set by created_at is the iteration's): per trigger condition of
    # each method the iteration's winner selected or a version claimed, the metric, its
    # threshold and its value on the parent (the iteration's baseline, ``before``) and on
    # the iteration's winner (``after``); NULL values and a ``note`` where nothing was
    # profiled (the CPU backend) or the trigger is text only
    "evidence": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("device_class", pa.string()), ("method", pa.string()), ("source", pa.string()),
        ("metric", pa.string()), ("op", pa.string()), ("threshold", pa.float64()),
        ("before", pa.float64()), ("after", pa.float64()), ("holds_before", pa.bool_()),
        ("holds_after", pa.bool_()), ("parent_id", pa.string()), ("winner_id", pa.string()),
        ("accepted", pa.bool_()), ("note", pa.string()), ("created_at", TS),
    ]),
    "profiles": pa.schema([
        ("run_id", pa.string()), ("job_key", pa.string()), ("profile_status", pa.string()),
        ("profile_error", pa.string()), ("compute_score", pa.float64()),
        ("memory_score", pa.float64()), ("latency_score", pa.float64()),
        ("bottleneck", pa.string()), ("created_at", TS),
    ]),
    "runs": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("event", pa.string()),
        ("spec_hash", pa.string()), ("spec_parts", pa.string()), ("sweep_dir", pa.string()),
        ("backend", pa.string()), ("devices", pa.string()), ("n_candidates", pa.int64()),
        ("n_jobs", pa.int64()),
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
        # how the contest's contenders were witnessed outside their processes
        # (workers.witness: "8 witness turns each", "none: why", ...) and this one's
        # witnessed figure (ms; null where none)
        ("witness", pa.string()), ("actor_ms", pa.float64()),
    ]),
    # kopt triage (kopt.tools.triage): partition sweep=triage, run=TRIAGE_ID
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
    # kopt port (kopt.tools.port): one row per command (each bench run its own row); status:
    # ok, build_failed, test_failed, bench_failed, slower, tied; partition sweep=SWEEP, run=RUN_ID
    "ports": pa.schema([
        ("port_id", pa.string()), ("run_id", pa.string()), ("sweep", pa.string()),
        ("candidate_id", pa.string()), ("device_class", pa.string()), ("repo", pa.string()),
        ("file", pa.string()), ("branch", pa.string()), ("base_commit", pa.string()),
        ("commit", pa.string()), ("step", pa.string()), ("command", pa.string()),
        ("exit_status", pa.int32()), ("duration_s", pa.float64()),
        ("timed_out", pa.bool_()), ("output_tail", pa.string()),
        ("bench_value", pa.float64()), ("status", pa.string()), ("created_at", TS),
        # a bench run's round (1..--bench-runs; before and after interleaved); NULL for
        # other commands and in ports written before bench runs were repeated
        ("run_no", pa.int32()),
    ]),
    # where a run's time went (kopt.util.phases): one row per interval, seconds since
    # kopt started in the driver process (``process_start``; a resumed run has one set per
    # process);
    # device phases name their device, ``build`` rows their build id in ``detail``
    "phases": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("process_start", TS),
        ("phase", pa.string()), ("device_class", pa.string()), ("device", pa.string()),
        ("node", pa.string()), ("start_s", pa.float64()), ("end_s", pa.float64()),
        ("started_at", TS), ("ended_at", TS), ("detail", pa.string()), ("created_at", TS),
    ]),
    "iterations": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("device_class", pa.string()), ("state", pa.string()), ("created_at", TS),
    ]),
    # the review gate (kopt.loop.review): one row per closing of an iteration and class
    "reviews": pa.schema([
        ("run_id", pa.string()), ("sweep", pa.string()), ("iteration", pa.int32()),
        ("device_class", pa.string()), ("candidate_id", pa.string()),
        ("accepted", pa.bool_()), ("reasons", pa.string()), ("speedup", pa.float64()),
        ("median_ms", pa.float64()), ("command", pa.string()), ("exit_status", pa.int32()),
        ("timed_out", pa.bool_()), ("output_tail", pa.string()),
        ("output_log", pa.string()), ("created_at", TS),
    ]),
}


def default_root() -> Path:
    """``$KOPT_STORE`` or ``./kopt-store``."""
    return Path(os.environ.get("KOPT_STORE") or "kopt-store")


def now() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc)


def table_schema(table: str) -> pa.Schema:
    """``SCHEMAS[table]`` and after it every column the registered measurement observers
    declare for ``table`` that it lacks (workers.observers ``observer_columns``), so that
    a plug-in's results are stored without a change here.

    Raises:
        KeyError: an unknown table.
        ValueError: an observer declares a type Arrow does not know (the message names
            the column).
    """
    schema = SCHEMAS[table]
    for name, typ in observer_columns(table).items():
        if schema.get_field_index(name) < 0:
            try:
                schema = schema.append(pa.field(name, pa.type_for_alias(typ)))
            except (ValueError, KeyError):
                raise ValueError(f"measurement observer column {name!r} of {table!r}: "
                                 f"{typ!r} is not an Arrow type name (use e.g. float64, "
                                 "int64, bool, string)") from None
    return schema


def write_table(root: Path, table: str, sweep: str, run_id: str,
                rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` as one new Parquet file of ``table``; atomic (temp name + rename).

    Missing columns are null; unknown keys raise KeyError-free (they are dropped).
    Returns the file's path.
    """
    return write_arrow(root, table, sweep, run_id, rows_table(table, rows))


def warm_arrow() -> None:
    """Have pyarrow import pandas now, when pandas is installed: pyarrow does so the first
    time it converts Python objects (``pa.array`` asks its pandas shim whether the object
    is a pandas one), which took 0.4-0.5 s of an H200 host's queued sweep between its
    reference check and its first result (py-spy, docs/verified/2026-12-01-h200-targets.md).
    kopt calls it in a thread while Ray starts, and in the service's ready drivers
    (kopt.cli.launchpad)."""
    pa.array([0.0])


def rows_table(table: str, rows: list[dict[str, Any]]) -> pa.Table:
    """``rows`` as an Arrow table of ``table``'s schema (missing columns null, unknown keys
    dropped). A value its column cannot hold (a whole number past an int32 column's range,
    text in a number column) is stored as null, with one :class:`StoreWarning` naming the
    table, the column and the value: a figure candidate code forged into the harness's
    answer (``n_samples`` 2**40 in a reference timing, ``iqr_ms`` 2**63 in a contest) failed
    the whole write, the driver died and the run could never close (red-team rounds 10,
    11)."""
    schema = table_schema(table)
    cols = {}
    for f in schema:
        values = [r.get(f.name) for r in rows]
        try:
            cols[f.name] = pa.array(values, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            kept = [v if not unfit_value(v, f.type) else None for v in values]
            bad = next(v for v in values if unfit_value(v, f.type))
            warnings.warn(StoreWarning(
                f"{table}.{f.name}: a value it cannot hold ({str(bad)[:60]}) stored as null"),
                stacklevel=2)
            cols[f.name] = pa.array(kept, type=f.type)
    return pa.table(cols, schema=schema)


def unfit_value(v: Any, typ: pa.DataType) -> bool:
    """Whether a column of Arrow type ``typ`` cannot hold ``v``."""
    try:
        pa.array([v], type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        return True
    return False


def unfit(table: str, row: dict[str, Any]) -> str:
    """The first column of ``table`` whose value in ``row`` its schema cannot hold (a
    whole number past an int32 column's range, text in a number column), as
    ``"COLUMN=VALUE"`` (the value cut to 60 characters), or "" when the row fits."""
    for f in table_schema(table):
        if unfit_value(row.get(f.name), f.type):
            return f"{f.name}={str(row.get(f.name))[:60]}"
    return ""


def write_arrow(root: Path, table: str, sweep: str, run_id: str, t: pa.Table) -> Path:
    """Write ``t`` (of ``table``'s schema) as one new Parquet file of ``table`` in the
    partition ``sweep``/``run_id`` (its folders made when missing); atomic (temp name +
    rename, fsync'ed). Returns the file's path."""
    folder = root / table / f"sweep={sweep}" / f"run={run_id}"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".{name}.tmp"
    pq.write_table(t, tmp, compression="zstd")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    return folder / name


class StoreWarning(UserWarning):
    """A store file was skipped (damaged), or written again (removed while its run ran);
    the message names it and the fix."""


_footers: dict[tuple[str, int, int], str | None] = {}  # (path, size, mtime_ns) -> why damaged
_schemas: dict[tuple[str, int, int, str], str | None] = {}  # ... and table -> why it clashes


def damage(path: Path, table: str | None = None) -> str | None:
    """Why the Parquet file at ``path`` cannot be read (pyarrow reads its footer), or None.
    With ``table``, also a file whose columns cannot be read as the table's
    (:func:`schema_clash`): valid Parquet of another shape blocks a view as surely.

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
    if _footers[k] is not None or table is None:
        return _footers[k]
    if (*k, table) not in _schemas:
        try:
            _schemas[(*k, table)] = schema_clash(pq.read_schema(path), table_schema(table))
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as e:
            _schemas[(*k, table)] = (str(e).splitlines() or [type(e).__name__])[0]
    return _schemas[(*k, table)]


def _family(t: pa.DataType) -> str:
    """The kind of value an Arrow type holds, as far as reading the store goes: integers and
    floats mix (DuckDB widens them), as do the string types and the timestamp units."""
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_list(t) or pa.types.is_large_list(t):  # the item's name does not matter
        return f"list<{_family(t.value_type)}>"
    return "timestamp" if pa.types.is_timestamp(t) else str(t)


def schema_clash(found: pa.Schema, want: pa.Schema) -> str | None:
    """Why a part file with schema ``found`` cannot be read as a table with schema ``want``:
    no columns at all, or a column of the table's that holds another kind of value (text
    where kopt stores a number: every query over the table fails). None when it can be
    read (extra columns and missing ones are fine: missing ones read as NULL)."""
    if len(found) == 0:
        return "no columns"
    for f in found:
        i = want.get_field_index(f.name)
        if i < 0 or pa.types.is_null(f.type):
            continue
        if _family(f.type) != _family(want.field(i).type):
            return f"column {f.name!r} holds {f.type}, kopt stores {want.field(i).type} there"
    return None


def readable_parts(root: Path, files: Iterable[Path], table: str | None = None) -> list[Path]:
    """``files`` (sorted) without the damaged ones (with ``table``: also those whose columns
    cannot be read as that table's, :func:`damage`); each damaged file is reported once per
    process as a :class:`StoreWarning` naming it and the fix. Nothing is moved or removed."""
    ok = []
    for f in sorted(files):
        why = damage(f, table)
        if why is None:
            ok.append(f)
            continue
        warnings.warn(StoreWarning(
            f"damaged store file {f.absolute()} ({why}): skipped, everything else is read and "
            f"written; move it out of the store (e.g. into {root.absolute() / 'quarantine'}) "
            "or restore it from a copy"), stacklevel=2)
    return ok


def runs_missing(root: Path | str) -> str | None:
    """One line naming a store whose ``runs/`` folder is gone while other tables are there
    (a damaged or partial copy), with the fix; None when ``runs/`` is there or the store is
    empty."""
    root = Path(root)
    tables = sorted(t for t in SCHEMAS if (root / t).is_dir())
    if not tables or "runs" in tables:
        return None
    return (f"store {root} is damaged or partial: its runs/ folder (every run's record) is "
            f"missing while {', '.join(tables)} are there; restore {root / 'runs'} from a "
            "copy of the store, or start a new run")


def resume_command(sweep_dir: Path | str | None, root: Path | str, run_id: str, *,
                   queue: bool = False, address: str | None = None,
                   cluster: str | None = None) -> str:
    """The shell command that resumes ``run_id`` of the store at ``root``, its paths quoted
    for a POSIX shell (a folder named ``o dd [x] (1)`` pastes as one word). A queued sweep's
    command keeps ``--queue`` (without it the resume starts an embedded Ray beside the
    service), and ``--cluster`` (else ``--address``) keeps the Ray head it ran on."""
    import shlex

    cmd = (f"kopt sweep {shlex.quote(str(sweep_dir))} --store {shlex.quote(str(root))} "
           f"--resume {shlex.quote(run_id)}")
    if cluster:
        cmd += f" --cluster {shlex.quote(str(cluster))}"
    elif address:
        cmd += f" --address {shlex.quote(address)}"
    return cmd + (" --queue" if queue else "")


def recorded_resume_command(root: Path | str, rec: dict[str, Any]) -> str:
    """:func:`resume_command` of the run whose latest ``runs`` row is ``rec``, with the
    ``--queue``/``--address``/``--cluster`` it was started with (its ``options``; a run
    recorded before they were kept gets ``--queue`` alone when it was queued).

    Raises:
        StoreError: the row's ``options`` is not a JSON object (:func:`stored_json`).
    """
    opts = stored_json(rec.get("options"), "options")
    return resume_command(rec.get("sweep_dir"), root, str(rec.get("run_id")),
                          queue=bool(opts.get("queue")), address=opts.get("address"),
                          cluster=opts.get("cluster"))


def no_run(root: Path | str, run_id: str) -> str:
    """Why the store at ``root`` has no ``runs`` record of ``run_id``, as one line with the
    fix: a damaged or partial store (the ``runs/`` folder gone, or the run's record folder
    gone or unreadable while other tables hold its rows) is named as such, with the
    missing folder; otherwise "no run ... (how to list runs)"."""
    root = Path(root)
    tables = sorted(t for t in SCHEMAS if (root / t).is_dir())
    held = sorted({t for t in tables for d in (root / t).glob("sweep=*")
                   if "/" not in run_id and (d / f"run={run_id}").is_dir()})
    others = [t for t in held if t != "runs"]
    rows = (f"; run {run_id}'s rows are still in {', '.join(others)} (`kopt best`, `kopt "
            "query` read them)" if others else "")
    partial = runs_missing(root)
    if partial:
        return partial + rows
    if "runs" in held:
        folder = next(d / f"run={run_id}" for d in (root / "runs").glob("sweep=*")
                      if (d / f"run={run_id}").is_dir())
        if not any(folder.rglob("*.parquet")):  # nothing damaged: no note to point to
            return (f"store {root} is damaged or partial: run {run_id}'s record folder "
                    f"{folder} holds no part file; restore it from a copy of the store, or "
                    f"start a new run{rows}")
        return (f"store {root} is damaged: run {run_id}'s record in runs/ cannot be read "
                "(see the damaged-file note); restore it from a copy of the store" + rows)
    if held:
        sweep = next(d.name for d in (root / held[0]).glob("sweep=*")
                     if (d / f"run={run_id}").is_dir())
        return (f"store {root} is damaged or partial: runs/ holds no record of run {run_id} "
                f"(folder {root / 'runs' / sweep / f'run={run_id}'} is missing); restore it "
                f"from a copy of the store, or start a new run{rows}")
    return (f"no run {run_id!r} in {root} (`kopt query \"select run_id, sweep, status from "
            "runs\"` lists runs)")


def stored_json(text: str | None, column: str, want: type = dict) -> Any:
    """The value of a JSON-text column of a stored row (``params``, ``defines``, ``dims``,
    ``state``, ``devices``, ``options``, ``env``...): ``want()`` when empty.

    Raises:
        StoreError: the text is not JSON of type ``want`` (a row edited by hand or written
            by another tool), one line naming the column and the fix.
    """
    if text is None or text == "":
        return want()
    try:
        value = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        value = None
    if not isinstance(value, want):
        shown = text if len(str(text)) <= 60 else str(text)[:57] + "..."
        raise StoreError(f"damaged store row: column {column!r} holds {shown!r}, not a JSON "
                         f"{'object' if want is dict else 'list'} as kopt writes it (the row was "
                         "edited or written by another tool); find it with `kopt query` and "
                         "move its part file out of the store, or restore it from a copy")
    return value


def complete_rows(rows: list[dict[str, Any]], columns: Iterable[str], what: str
                  ) -> list[dict[str, Any]]:
    """``rows`` whose ``columns`` all hold a value. A typed column the product always
    writes can still be NULL in a store (a row written by another tool, an edited or
    damaged copy); such rows are left out with one :class:`StoreWarning` naming ``what``
    (e.g. "candidate rows of run R") and the columns, never a TypeError further on."""
    columns = list(columns)
    ok = [r for r in rows if all(r.get(c) is not None for c in columns)]
    if len(ok) < len(rows):
        empty = sorted({c for r in rows for c in columns if r.get(c) is None})
        warnings.warn(StoreWarning(
            f"{len(rows) - len(ok)} {what} have no {', '.join(empty)} (NULL: written by "
            "another tool, or an edited or damaged copy of the store): left out; restore "
            "the store's files from a copy to see them"), stacklevel=2)
    return ok


def table_parts(root: Path, table: str) -> list[Path]:
    """The readable part files of ``table`` (:func:`readable_parts`); a file where the
    table's folder or one of its ``sweep=``/``run=`` folders goes is noted as a
    :class:`StoreWarning` naming it (its rows, if any, cannot be read), not passed over."""
    top = root / table
    odd = [top] if top.exists() and not top.is_dir() else [
        p for p in [*top.glob("sweep=*"), *top.glob("sweep=*/run=*")] if not p.is_dir()]
    for p in odd:
        warnings.warn(StoreWarning(
            f"damaged store: {p.absolute()} is a file where a folder of table {table!r} goes; "
            f"what it held is not read: move it out of the store and restore the folder from "
            "a copy"), stacklevel=2)
    return readable_parts(root, top.glob("sweep=*/run=*/part-*.parquet"), table)


def _folder(root: Path) -> Path:
    """``root``, unless it is a file or a broken symlink (StoreError)."""
    bad = broken_link(root)
    if bad:
        raise StoreError(f"--store {root} is {bad}, not a store folder; point --store at a "
                         "folder (a missing one is created)")
    if root.exists() and not root.is_dir():
        raise StoreError(f"--store {root} is a file, not a store folder")
    return root


class QueryError(ValueError):
    """A query that is not read-only, or that DuckDB rejects."""


class StoreError(QueryError):
    """The store is not usable: a file where a folder should be, or a damaged Parquet file."""


class RunLocked(StoreError):
    """Another process holds the run's lock: it is writing that run."""


_held: dict[tuple[str, str], int] = {}  # (store, run id) -> fd of a lock this process holds


def _lock_path(root: Path, run_id: str) -> Path:
    return resolved(_folder(Path(root))) / "locks" / f"{run_id}.lock"


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


def held_locks(root: Path | str) -> tuple[str, ...]:
    """The runs whose lock somebody holds now (their drivers are alive), sorted: what the
    ``runs`` view's ``interrupted`` status depends on beside the part files (one ``flock``
    probe per lock file in ``root/locks``)."""
    locks = resolved(_folder(Path(root))) / "locks"
    try:
        names = sorted(p.stem for p in locks.glob("*.lock"))
    except OSError:
        return ()
    return tuple(r for r in names if lock_holder(root, r) is not None)


def _holder_text(path: Path) -> str:
    try:
        h = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        h = {}
    if not isinstance(h, dict):  # a lock file holding a list, a number, null
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

    def __init__(self, root: Path | str, run_id: str, reuse: bool = False):
        """``reuse``: when this process holds the lock already (a submission holds it from
        its record to its run), use that hold instead of refusing, and leave it held."""
        self.path = _lock_path(Path(root), run_id)
        self.run_id = run_id
        self._key = (str(self.path.parent.parent), run_id)
        self._reuse, self._borrowed = reuse, False

    def acquire(self, wait_s: float = 1.0) -> RunLock:
        """Take the lock (retrying for ``wait_s`` seconds: a reader may be probing it).

        Raises:
            RunLocked: another process (or another lock in this one) holds it.
        """
        if self._key in _held:
            if self._reuse:
                self._borrowed = True
                return self
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

    def renew(self) -> bool:
        """Take the lock again when its file was removed while this process held it (the
        store folder deleted mid-run: the held ``flock`` is on a file nobody else can open,
        so a second writer would get a new one). Returns True when it was taken again;
        False when the file is still the held one, or this process does not hold it.

        Raises:
            RunLocked: another process took the new lock file first."""
        fd = _held.get(self._key)
        if fd is None:
            return False
        try:
            if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                return False
        except FileNotFoundError:
            pass
        del _held[self._key]
        os.close(fd)
        self.acquire()
        return True

    def release(self) -> None:
        """Let go of the lock (the file stays: it names the last holder); a reused hold
        stays with its first holder."""
        if self._borrowed:
            self._borrowed = False
            return
        fd = _held.pop(self._key, None)
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def dumps(obj: Any) -> str:
    """Canonical JSON text (sorted keys) as stored in ``params``/``dims`` columns."""
    return json.dumps(obj, sort_keys=True)

