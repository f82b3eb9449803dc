"""What the tenth fresh-clone trial broke (issue 12, docs/verified/2026-12-01-trial10.md):
damaged state files (a run's lock file, a detached try's record, the service record), odd
reference outputs, markup in query column names, a store table that is a file, empty method
claims, and a service record that points at someone else's process. Each is one line naming
the file or field and the fix, never a traceback, and never a kill of a foreign process."""

from __future__ import annotations

import dataclasses
import fcntl
import os

import pytest

from conftest import write_sweep

ADD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n'  # noqa: E501


# -- X1: a lock file with JSON that is not an object --------------------------------------

@pytest.mark.parametrize("text", ["[1,2]", "5", '"x"', "null"])
def test_a_held_lock_file_holding_non_object_json_names_an_unknown_holder(tmp_path, text):
    from kopt.store import lock_holder

    (tmp_path / "locks").mkdir()
    path = tmp_path / "locks" / "R1.lock"
    path.write_text(text)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # some other holder (a backup script, a hand edit)
    try:
        assert lock_holder(tmp_path, "R1") == "pid ? on ?"
    finally:
        os.close(fd)


# -- X2: a reference() output without values -----------------------------------------------

@pytest.mark.parametrize("make, why", [
    ("(x + 1).to('meta')", "reference() returned output 'y' as a meta tensor"),
    ("(x + 1).to_sparse()", "reference() returned output 'y' as a torch.sparse_coo tensor"),
], ids=["meta", "sparse"])
def test_a_reference_output_without_values_is_one_line(tmp_path, make, why):
    from kopt.contract import parse_signature_file
    from workers.harness import Harness, JobError

    d = write_sweep(tmp_path / "s", "kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N], y: [N]}\n",
                    {"add.cpp": ADD,
                     "ref.py": f"import torch\ndef reference(x, N):\n    return {make}\n"})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0,
           "args": {"x": [64], "y": [64]}, "scalars": {}, "signature": sig,
           "tolerance": {"atol": 0, "rtol": 0},
           "timing": {"timeout_s": 10}, "prepare_only": True}
    with pytest.raises(JobError) as e:
        Harness("cpu").run(job)
    assert str(e.value) == f"ref.py: {why}; return a dense tensor with values"


# -- X3: markup in a query's column names -----------------------------------------------------

def test_query_column_names_are_shown_literally(tmp_path):
    from click.testing import CliRunner

    from kopt.cli import main

    (tmp_path / "st").mkdir()
    r = CliRunner().invoke(main, ["query", "select 1 \"[/]\", 2 \"[bold]x\", '[/red]' y",
                                  "--store", str(tmp_path / "st")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    head, row = [ln for ln in r.output.splitlines() if "│" in ln or "┃" in ln][:2]
    assert [c.strip() for c in head.strip("┃ ").split("┃")] == ["[/]", "[bold]x", "y"]
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["1", "2", "[/red]"]
