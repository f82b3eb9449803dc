"""The Parquet store read back through DuckDB: atomic files, union_by_name, dedup, speedup."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import ROOT
from kopt.store.database import Writer, connect, query
from kopt.store.files import QueryError, write_table


def row(job, median, status="ok", base=False, **kw):
    return {"run_id": "r1", "sweep": "s", "iteration": 1, "job_key": job, "candidate_id": job,
            "is_baseline": base, "device_class": "cpu-x86_64", "dims": '{"N": 1}',
            "status": status, "median_ms": median, **kw}


def test_rows_round_trip_and_speedup(tmp_path):
    w = Writer(tmp_path, "s", "r1")
    w.add("candidates", [row("b", 2.0, base=True), row("c1", 1.0), row("c2", 4.0),
                         row("c3", None, status="wrong_result", error="y: 3 differ")])
    w.flush()
    cols, rows = query("select job_key, status, speedup from candidates order by job_key",
                       tmp_path)
    assert cols == ["job_key", "status", "speedup"]
    assert rows == [("b", "ok", 1.0), ("c1", "ok", 2.0), ("c2", "ok", 0.5),
                    ("c3", "wrong_result", None)]


def test_rows_a_signal_cut_out_of_a_flush_are_written_by_the_next(tmp_path, monkeypatch):
    """A Ctrl-C or SIGTERM raised inside a time-based flush (here: the write of the second
    table) lost the rows the flush had taken from the buffer: the interrupted run's last
    flush found nothing. They go back to the buffer, and the next flush writes every one
    (a table written before the signal once, the rest once)."""
    import kopt.store.database

    real, calls = kopt.store.database.write_arrow, []

    def interrupted_once(root, table, sweep, run_id, t):
        calls.append(table)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(root, table, sweep, run_id, t)

    monkeypatch.setattr(kopt.store.database, "write_arrow", interrupted_once)
    w = Writer(tmp_path, "s", "r1")
    w.add("candidates", [row("c1", 1.0), row("c2", 2.0)])
    w.add("contests", [{"run_id": "r1", "sweep": "s", "iteration": 1, "device_class": "d",
                        "dims": "{}", "candidate_id": "c1", "median_ms": 1.0}])
    w.add("runs", [{"run_id": "r1", "sweep": "s", "event": "running"}])
    with pytest.raises(KeyboardInterrupt):
        w.flush()
    w.add("candidates", [row("c3", 3.0)])  # measured after the signal, before the last flush
    w.flush()
    assert query("select job_key from candidates order by 1", tmp_path)[1] == [
        ("c1",), ("c2",), ("c3",)]
    assert query("select count(*) from contests", tmp_path)[1] == [(1,)]
    assert query("select count(*) from runs", tmp_path)[1] == [(1,)]


def test_latest_row_per_job_wins_after_compaction(tmp_path):
    import datetime as dt
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    write_table(tmp_path, "candidates", "s", "r1", [row("c1", 5.0, created_at=t0)])
    write_table(tmp_path, "candidates", "s", "r1",
                [row("c1", 3.0, created_at=t0 + dt.timedelta(seconds=1)), row("c2", 4.0)])
    Writer(tmp_path, "s", "r1").compact("candidates", ["run_id", "job_key"])
    assert query("select job_key, median_ms from candidates order by 1", tmp_path)[1] == [
        ("c1", 3.0), ("c2", 4.0)]


def test_profiles_join_the_candidates(tmp_path):
    write_table(tmp_path, "candidates", "s", "r1", [row("c1", 1.0)])
    write_table(tmp_path, "profiles", "s", "r1", [
        {"run_id": "r1", "job_key": "c1", "profile_status": "ok", "memory_score": 0.8,
         "bottleneck": "memory"}])
    assert query("select job_key, profile_status, memory_score, bottleneck from candidates",
                 tmp_path)[1] == [("c1", "ok", 0.8, "memory")]


def test_union_by_name_with_newer_columns(tmp_path):
    write_table(tmp_path, "candidates", "s", "r1", [row("a", 1.0)])
    folder = tmp_path / "candidates" / "sweep=s" / "run=r2"
    folder.mkdir(parents=True)
    t = pa.table({"run_id": ["r2"], "job_key": ["z"], "status": ["ok"], "median_ms": [9.0],
                  "new_metric": [42.0]})
    pq.write_table(t, folder / "part-00000000000000000001-abcd.parquet")
    _, rows = query("select job_key, median_ms, new_metric from candidates order by job_key",
                    tmp_path)
    assert rows == [("a", 1.0, None), ("z", 9.0, 42.0)]


def test_temp_files_are_ignored_and_compaction_keeps_rows(tmp_path):
    w = Writer(tmp_path, "s", "r1")
    for i in range(3):
        w.add("candidates", [row(f"c{i}", float(i + 1))])
        w.flush()
    folder = tmp_path / "candidates" / "sweep=s" / "run=r1"
    (folder / ".part-x.parquet.tmp").write_bytes(b"half a file")
    assert len(list(folder.glob("part-*.parquet"))) == 3
    w.compact()
    assert len(list(folder.glob("part-*.parquet"))) == 1
    assert query("select count(*) from candidates", tmp_path)[1] == [(3,)]


def test_empty_store_has_views(tmp_path):
    con = connect(tmp_path / "none")
    assert con.execute("select count(*) from candidates").fetchone() == (0,)
    assert con.execute("select count(*) from metrics").fetchone() == (0,)
    assert "speedup" in [d[0] for d in con.execute("select * from candidates").description]


@pytest.mark.parametrize("sql", ["copy (select 1) to 'x.csv'", "create table t as select 1",
                                 "attach 'x.db'", "select 1; drop view candidates",
                                 "install httpfs"])
def test_query_is_read_only(tmp_path, sql):
    with pytest.raises(QueryError, match="read-only"):
        query(sql, tmp_path)


def test_query_errors_are_clear(tmp_path):
    with pytest.raises(QueryError, match="nope"):
        query("select nope from candidates", tmp_path)


def test_explain_analyze_cannot_write(tmp_path):
    target = tmp_path / "x.parquet"
    with pytest.raises(QueryError, match="read-only.*got COPY"):
        query(f"explain analyze copy (select 1 as a) to '{target}' (format parquet)", tmp_path)
    assert not target.exists()
    cols, _ = query("explain select 1", tmp_path)
    assert cols  # plain EXPLAIN of a SELECT still works


def test_damaged_file_is_named_with_the_fix(tmp_path):
    """An empty part file is skipped with a note naming it and the fix; the rest is read."""
    from kopt.store.files import StoreWarning

    write_table(tmp_path, "candidates", "s", "r1", [row("a", 1.0)])
    bad = tmp_path / "candidates" / "sweep=s" / "run=r1" / "part-99999999999999999999-dead.parquet"
    bad.write_bytes(b"")
    with pytest.warns(StoreWarning, match=r"damaged store file .*part-9+-dead\.parquet.*move it"):
        assert query("select count(*) from candidates", tmp_path)[1] == [(1,)]
    assert bad.exists()  # set aside for the user, not deleted


def test_store_path_that_is_a_file(tmp_path):
    from kopt.store.files import StoreError

    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(StoreError, match="is a file, not a store folder"):
        query("select 1", f)


# -- every SQL statement of the product sits behind kopt/store/database.py ---------------

SQL_TEXT = re.compile(r"\bselect\b[\s\S]+?\bfrom\b|\bcreate\s+(or\s+replace\s+)?(temp\s+)?"
                      r"(view|table)\b|\binsert\s+into\b|\bdelete\s+from\b|\bpragma\s+\w+|"
                      r"\bqualify\s+row_number\b", re.I)
SQL_CALLS = {"execute", "executemany", "sql", "fetchall", "fetchone", "fetchmany"}
SQL_MODULES = {"duckdb", "sqlite3"}
HINT = re.compile(r'`?kopt query "[^"]*"`?')  # a line telling the user what to type


def _sql_sites(source: str) -> list[str]:
    """Where ``source`` holds SQL: string constants (f-strings' literal parts joined)
    that read as SQL, calls that run a statement or fetch rows, imports of DuckDB or SQLite.
    Docstrings (and comments, which the AST drops) and ``kopt query "..."`` hints shown to
    the user are not statements (an f-string is read whole, not part by part)."""
    tree = ast.parse(source)
    skip = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    skip |= {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    for n in ast.walk(tree):
        text = None
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip:
            text = n.value
        elif isinstance(n, ast.JoinedStr):
            text = "{}".join(v.value for v in n.values if isinstance(v, ast.Constant))
        if text is not None and SQL_TEXT.search(HINT.sub("", text)):
            found.append(f"{n.lineno}: SQL text {text[:50]!r}")
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr in SQL_CALLS):
            found.append(f"{n.lineno}: .{n.func.attr}(...)")
        names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                 else [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
        if any(m.split(".")[0] in SQL_MODULES for m in names):
            found.append(f"{n.lineno}: import {', '.join(names)}")
    return found


def test_the_sql_check_finds_what_it_looks_for():
    """The check below is real: it flags the shapes the SQL had before it moved (a statement
    in a string, split over lines, in an f-string, an execute/fetch call, a DuckDB import),
    and passes a user hint, a docstring and English prose."""
    assert _sql_sites('x = ("select status, count(*) n from candidates where run_id = ? "\n'
                      '     "group by 1")')
    assert _sql_sites('x = f"select start, end, {m} from CUPTI_ACTIVITY_KIND_KERNEL"')
    assert _sql_sites('RUNS = """\ncreate or replace view runs as\nselect 1\n"""')
    assert _sql_sites("rows = con.execute(q, [1])")
    assert _sql_sites("import duckdb")
    assert _sql_sites("from sqlite3 import connect")
    assert _sql_sites('def f():\n    """select a from t"""\n    return 1') == []
    assert _sql_sites('m = "no run (`kopt query \\"select run_id from runs\\"` lists runs)"') == []
    assert _sql_sites('m = "the selected methods, measured from the baseline"') == []
    assert _sql_sites('m = f"see `kopt query \\"select * from t where id = \'{i}\'\\"`"') == []


def test_every_sql_statement_is_in_the_database_module():
    """kopt/ and workers/ hold no SQL outside kopt/store/database.py (before it was so, the
    store's files module, the loop, the pipeline, port, propose, report, select, triage and the
    CLI ran statements of their own)."""
    root = Path(__file__).resolve().parent.parent
    offenders = {str(p.relative_to(root)): sites
                 for folder in ("kopt", "workers") for p in sorted((root / folder).rglob("*.py"))
                 if p != root / "kopt" / "store" / "database.py"
                 for sites in [_sql_sites(p.read_text())] if sites}
    assert offenders == {}
    assert len(_sql_sites((root / "kopt" / "store" / "database.py").read_text())) > 20


def test_warm_arrow_is_where_pyarrow_imports_pandas(tmp_path):
    # pyarrow imports pandas (when installed) on its first conversion of Python objects:
    # 0.4-0.5 s of a queued sweep's path to its first result on an H200 host (py-spy, run
    # 13). kopt.store.files.warm_arrow pays it early, off the critical path; a stand-in pandas
    # package records that it was asked for, and by which call.
    fake = tmp_path / "site" / "pandas"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os, traceback\n"
        "open(os.environ['MARK'], 'a').write(''.join(traceback.format_stack()))\n"
        "raise ImportError('stand-in')\n")
    mark = tmp_path / "mark.txt"
    code = ("import pyarrow as pa, kopt.store.files as s, pathlib, os\n"
            "assert not pathlib.Path(os.environ['MARK']).exists()\n"
            "s.warm_arrow()\n")
    env = {**os.environ, "MARK": str(mark),
           "PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "warm_arrow" in mark.read_text()
