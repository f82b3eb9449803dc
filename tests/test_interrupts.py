"""A sweep stopped or gone at an awkward moment: SIGTERM while Ray starts or while the results
are shown says what was stored, a killed `--queue` sweep is not listed as running, and the
service's builders skip the builds of a sweep whose driver is gone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conftest import VADD_CPP, VADD_REF, write_sweep

ADD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n'  # noqa: E501


# SIGTERM sent the moment ray.init puts its own handler in place of kopt's (the signal
# module's function wrapped; a thread that polled for the handler missed Ray's window once
# on an idle CI machine, and the sweep ran to its end)
FIRE = """
import os, signal, sys
from kopt.run import signals
from kopt.cli.main import main

_set = signal.signal
_fired = []

def _set_then_fire(signum, handler):
    old = _set(signum, handler)
    if signum == signal.SIGTERM and not _fired and handler not in (
            signal.SIG_DFL, signal.SIG_IGN, signals.terminate):
        _fired.append(handler)
        os.kill(os.getpid(), signal.SIGTERM)
    return old

signal.signal = _set_then_fire
main(sys.argv[1:])
"""


SWEEP = """
    kernel: k.cpp
    dims: [{N: 64}]
    args: {x: [N], y: [N], out: [N]}
    params: {CHUNK: [64]}
"""


STOP_WHILE_SHOWING = """
import signal, sys
from click.testing import CliRunner
import kopt.cli.main
from kopt.run.signals import Terminated

def stop():
    raise Terminated(signal.SIGTERM)  # SIGTERM lands while the sweep leaves Ray

kopt.cli.main._leave_ray = stop
r = CliRunner().invoke(kopt.cli.main.main, ["sweep", sys.argv[1], "--backend", "cpu", "--store",
                                       sys.argv[2]])
print(r.exit_code)
print(r.output.strip().splitlines()[-1])
"""


def test_sigterm_while_ray_starts_is_the_interrupt_line_and_143(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    d = write_sweep(tmp_path / "s", "kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N], y: [N]}\n",
                    {"add.cpp": ADD, "ref.py": "def reference(x, N):\n    return x\n"})
    (tmp_path / "fire.py").write_text(FIRE)
    p = subprocess.run([sys.executable, str(tmp_path / "fire.py"), "sweep", str(d), "--store",
                        str(tmp_path / "st"), "--backend", "cpu"], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert p.returncode == 143, p.stdout + p.stderr[-3000:]
    assert p.stderr.splitlines()[-1] == ("interrupted before the run started: nothing was "
                                         "stored"), p.stderr[-3000:]
    assert not (tmp_path / "st" / "candidates").exists()


def _script_sweep(tmp_path: Path, name: str, script: str) -> tuple[Path, Any]:
    """A small CPU sweep folder ``name`` and ``script`` run on it in a fresh interpreter
    (argv: the folder, the store ``tmp_path/s``); the folder and the finished process."""
    import subprocess
    import sys

    d = write_sweep(tmp_path / name, SWEEP + "    timing: {min_samples: 3, max_samples: 3}\n"
                    "    reference_timing: false\n", {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    return d, subprocess.run([sys.executable, "-c", script, str(d), str(tmp_path / "s")],
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "KOPT_CACHE": str(tmp_path / "cache")})


def test_a_stop_signal_while_the_results_are_shown_says_the_run_is_stored(tmp_path):
    """SIGTERM (or Ctrl-C) in the second the sweep left Ray said "interrupted
    (Ctrl-C)", exited 130 and showed nothing, though the run was finished and stored."""
    _, p = _script_sweep(tmp_path, "va", STOP_WHILE_SHOWING)
    code, line = p.stdout.splitlines()[:2]
    assert code == "143", p.stdout + p.stderr[-3000:]
    assert line.startswith("interrupted while showing the results: run ")
    run_id = line.split()[6]
    assert line.endswith(f"is finished and stored (`kopt best va --run {run_id}` shows it)")


CTRL_C_IN_A_QUERY = """
import sys
from click.testing import CliRunner
import kopt.cli.main
import kopt.driver.sweep

def query_interrupted(ctx, loop):
    raise RuntimeError("Query interrupted")  # DuckDB's form of a SIGINT during a query

kopt.driver.sweep.close_loop_on_devices = query_interrupted
r = CliRunner().invoke(kopt.cli.main.main, ["sweep", sys.argv[1], "--backend", "cpu", "--store",
                                       sys.argv[2]])
print(r.exit_code)
print(" ".join(r.output.split()))  # the console wraps long lines
"""


def test_ctrl_c_inside_a_duckdb_query_is_the_sweeps_interrupt(tmp_path):
    """A Ctrl-C that lands while the driver waits in a DuckDB query surfaces as DuckDB's
    RuntimeError("Query interrupted"), not KeyboardInterrupt: it passed the sweep's own
    handling, the command said "error: interrupted (Ctrl-C)" and the run was left as if
    killed. Now it is the sweep's interrupt: the run is marked interrupted, the line says
    what is stored and how to resume it, exit 130."""
    from kopt.store.database import query

    d, p = _script_sweep(tmp_path, "vq", CTRL_C_IN_A_QUERY)
    code, text = p.stdout.splitlines()[:2]
    assert code == "130", p.stdout + p.stderr[-3000:]
    assert "error: interrupted (Ctrl-C)" not in text
    rows = query("select distinct run_id from runs", tmp_path / "s")[1]
    assert text.endswith("interrupted: every finished measurement is stored; finish with "
                         f"`kopt sweep {d} --store {tmp_path / 's'} --resume {rows[0][0]}`"), text
    rows = query("select status, count(*) from runs group by 1", tmp_path / "s")[1]
    assert rows == [("interrupted", 1)]


def _duckdb_error_of(raise_inside: type[BaseException], how: str) -> Exception:
    """The error DuckDB raises when ``raise_inside`` is raised inside a Python callback it
    makes: a UDF (``how="udf"``) or the read of a registered Arrow stream (``"stream"``)."""
    import duckdb
    import pyarrow as pa

    def fail(*_: object) -> object:
        raise raise_inside()

    con = duckdb.connect()
    if how == "udf":
        con.create_function("f", fail, ["BIGINT"], "BIGINT")
        sql = "select f(1)"
    else:
        batches = iter([pa.record_batch({"a": [1]})])

        def stream():
            yield next(batches)
            fail()

        con.register("r", pa.RecordBatchReader.from_batches(pa.schema([("a", pa.int64())]),
                                                            stream()))
        sql = "select count(*) from r"
    try:
        con.execute(sql).fetchall()
    except Exception as e:  # DuckDB's own error, not the BaseException raised inside
        return e
    raise AssertionError(f"{how}: DuckDB raised nothing")


@pytest.mark.parametrize("how", ["udf", "stream"])
def test_a_ctrl_c_inside_duckdbs_python_callback_is_an_interrupt(how):
    """A Ctrl-C that lands while DuckDB calls back into Python (counting the rows of a
    registered Arrow table: "counting the rows of the object registered as
    '_empty_candidates' failed: KeyboardInterrupt:") comes out as DuckDB's
    InvalidInputException: it passed the sweep's Ctrl-C handling and the front exited 2
    with "error: Invalid Input Error: ...". It is an interrupt; other DuckDB errors are not."""
    import duckdb

    from kopt.run.signals import Terminated
    from kopt.store.database import interrupted

    e = _duckdb_error_of(KeyboardInterrupt, how)
    assert isinstance(e, duckdb.InvalidInputException) and "KeyboardInterrupt" in str(e)
    assert interrupted(e)
    assert interrupted(_duckdb_error_of(lambda: Terminated(15), how))
    assert not interrupted(_duckdb_error_of(lambda: ValueError("KeyboardInterrupts"), how))
    assert interrupted(duckdb.InvalidInputException(
        "Invalid Input Error: counting the rows of the object registered as "
        "'_empty_candidates' failed: KeyboardInterrupt: "))
    assert not interrupted(duckdb.InvalidInputException("Invalid Input Error: bad column"))


def test_a_killed_queued_sweep_is_not_listed_as_running():
    """A SIGKILLed `--queue` sweep stayed "running" in `kopt serve status`
    forever; a driver of this host that is gone is dropped (one elsewhere cannot be told)."""
    import platform
    import subprocess
    import sys

    from kopt.run.service import driver_alive

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert driver_alive(f"{platform.node()}:{os.getpid()}") is True
    assert driver_alive(f"{platform.node()}:{p.pid}") is False
    assert driver_alive(f"another-host:{p.pid}") is True
    assert driver_alive(f"{platform.node()}:not-a-pid") is True


def test_the_builders_skip_the_builds_of_a_sweep_that_is_gone(ray_local, tmp_path):
    """Builds an interrupted (or killed) `--queue` sweep sent to the service's
    builders stayed queued there and kept the next sweeps waiting (Ray runs a plain actor's
    queued calls even when they are cancelled); a builder skips the builds of a sweep whose
    driver is gone, and builds those of a live one."""
    import platform
    import subprocess
    import sys

    import ray

    from kopt.run.builder import RayBuilder
    from workers.build_actor import BuildActor
    from workers.records import BuildJob

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    actor = ray.remote(num_cpus=0)(BuildActor).remote(["cpu"])
    results = {}
    for owner in (f"{platform.node()}:{gone.pid}", f"{platform.node()}:{os.getpid()}"):
        b = RayBuilder()
        b.use_actors([actor], owner)
        jobs = [BuildJob(f"owner-{tmp_path.name}-{owner}-{k}", "cpu", VADD_CPP, "k.cpp",
                         str(tmp_path), {"CHUNK": 64 + k}) for k in range(3)]
        results[owner] = b.build(jobs)
    dead, live = results.values()
    assert [(r.ok, r.error) for r in dead] == [
        (False, f"not built: its sweep ({platform.node()}:{gone.pid}) is gone")] * 3
    assert [r.ok for r in live] == [True] * 3
    assert ray.get(actor.stats.remote(), timeout=120) == {"builds": 3}
    ray.kill(actor)
