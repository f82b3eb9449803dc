"""What kopt's commands print: a closed stdout or stderr pipe (`kopt query ... | head -1`,
`kopt sweep ... 2>&1 | head -1`) ends quietly or goes on, and rich markup in a query's column
names is shown literally. Each test failed before its fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _kopt(args, tmp_path, **kw):
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, **kw)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_closed_pipe_ends_quietly(tmp_path, fmt):
    """`kopt query ... | head -1` said "error: : Broken pipe" and exited 2. Now nothing on
    stderr and 141 (128 + SIGPIPE), as Unix tools. 2M rows: more than any pipe holds."""
    (tmp_path / "store").mkdir()
    p = _kopt(["-m", "kopt.cli.main", "query", "--store", str(tmp_path / "store"), "--format", fmt,
               "select * from range(2000000)"], tmp_path)
    assert p.stdout.readline()  # the reader takes one line and goes
    p.stdout.close()
    err = p.stderr.read().decode()
    assert (p.wait(timeout=120), err) == (141, "")


def test_rich_output_to_a_closed_pipe_ends_quietly(tmp_path):
    """A table or any rich line (`kopt catalog | head -1`): rich exited 1; now 141 and
    nothing on stderr, like the rest. The pipe's reader is gone before the write."""
    code = ("import os, sys\nr, w = os.pipe()\nos.close(r)\nos.dup2(w, 1)\n"
            "from kopt.cli.console import out\nout.print('x' * 100)\nprint('not reached')\n")
    p = _kopt(["-c", code], tmp_path)
    out, err = p.communicate(timeout=120)
    assert (p.returncode, err.decode()) == (141, "")


def test_a_closed_stderr_pipe_silences_and_the_command_carries_on(tmp_path):
    """`kopt sweep ... 2>&1 | head -1`: rich exited 1 at the next progress line, mid-sweep
    (rows not yet flushed were lost). Now stderr's console goes quiet and the command goes
    on to its end."""
    code = ("import os\nr, w = os.pipe()\nos.close(r)\nos.dup2(w, 2)\n"
            "from kopt.cli.console import console\nconsole.print('x' * 100)\nconsole.print('y')\n"
            "print('carried on', flush=True)\n")
    p = _kopt(["-c", code], tmp_path)
    out, _ = p.communicate(timeout=120)
    assert (p.returncode, out.decode()) == (0, "carried on\n")


def test_query_column_names_are_shown_literally(tmp_path):
    from click.testing import CliRunner

    from kopt.cli.main import main

    (tmp_path / "st").mkdir()
    r = CliRunner().invoke(main, ["query", "select 1 \"[/]\", 2 \"[bold]x\", '[/red]' y",
                                  "--store", str(tmp_path / "st")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    head, row = [ln for ln in r.output.splitlines() if "│" in ln or "┃" in ln][:2]
    assert [c.strip() for c in head.strip("┃ ").split("┃")] == ["[/]", "[bold]x", "y"]
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["1", "2", "[/red]"]


def test_a_device_without_a_sandbox_is_said_when_the_sweep_starts(capsys):
    """A device whose harness runs unsandboxed (workers.isolation ``none``) gets a note
    with the reason under its ``device:`` line; a sandboxed one none."""
    from kopt.cli.console import ConsoleProgress

    why = "KOPT_ISOLATION=none is set in kopt's environment"
    obs = ConsoleProgress()
    try:
        obs.on_start(0, 0, [
            {"name": "cpu0", "device_class": "cpu-x", "node_ip": "10.0.0.1",
             "isolation": "none", "isolation_why": why},
            {"name": "cpu1", "device_class": "cpu-x", "node_ip": "10.0.0.2",
             "isolation": "namespaces", "isolation_why": ""}])
    finally:
        obs.stop()
    err = capsys.readouterr().err.splitlines()
    assert err[:3] == ["device: cpu0 (cpu-x, 10.0.0.1)",
                       f"note: cpu0: candidates run without a sandbox, with kopt's own rights "
                       f"({why})",
                       "device: cpu1 (cpu-x, 10.0.0.2)"]
