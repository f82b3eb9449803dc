"""A run's lock file and the records of its detached submission tries, read by `kopt wait`
and `kopt submit`: damaged ones are one line naming the file and the fix, an exit keeps the
record's fields, a submission the run lock refuses spends no try, a claim that names no method
is refused, and a store table folder that is a file stops a sweep before anything runs."""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from conftest import write_sweep

ADD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n'  # noqa: E501


@pytest.mark.parametrize("text", ["[1,2]", "5", '"x"', "null"])
def test_a_held_lock_file_holding_non_object_json_names_an_unknown_holder(tmp_path, text):
    from kopt.store.files import lock_holder

    (tmp_path / "locks").mkdir()
    path = tmp_path / "locks" / "R1.lock"
    path.write_text(text)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # some other holder (a backup script, a hand edit)
    try:
        assert lock_holder(tmp_path, "R1") == "pid ? on ?"
    finally:
        os.close(fd)


@pytest.mark.parametrize("data, why", [
    (b"garbage{", "damaged record, not JSON (JSONDecodeError)"),
    (b"\xff\xfe", "damaged record, not JSON (UnicodeDecodeError)"),
    (b"[1,2]", "damaged record, a JSON list where kopt writes an object"),
    (b'{"pid": "x"}', "damaged record, field 'pid': Input should be a valid integer"),
    (b'{"pid": 1e400}', "damaged record, field 'pid': Input should be a valid integer"),
    (b'{"pid": 99999999999999999999}', "damaged record, field 'pid': Input should be less "
                                       "than or equal to 4194304"),
    (b'{"pid": -1}', "damaged record, field 'pid': Input should be greater than or equal to 1"),
    (b'{"pid": 5, "log": 3}', "damaged record, field 'log': Input should be a valid string"),
    # was read as "no live try" ("iteration 1 is not closed yet")
    (b'{"host": "vm"}', "damaged record, field 'pid': Value error, missing: the record names "
                        "neither the try's process (pid) nor its exit status (rc)"),
], ids=["garbage", "utf16", "list", "str", "inf", "huge", "minus-one", "log", "no-pid"])
def test_wait_on_a_damaged_try_record_is_one_line(tmp_path, data, why):
    from test_store_safety import demo_store

    from kopt.store.database import Database
    from kopt.tools.submit import job_file
    from kopt.tools.wait import WaitError, _stalled

    st = demo_store(tmp_path / "st")
    path = job_file(st, "r1", 1, 0, ".json")  # no version submitted: try 0
    path.parent.mkdir()
    path.write_bytes(data)
    with pytest.raises(WaitError) as e:
        _stalled(Database(st), st, "r1", 1, None)
    assert str(e.value) == (f"run r1: {path}: {why}; remove it, and if its process is gone "
                            "run the try again with `kopt submit --retry`")
    assert e.value.code == 1


def test_an_exit_keeps_the_try_records_fields(tmp_path):
    from test_store_safety import demo_store

    from kopt.store.database import Database
    from kopt.tools.submit import job_file, mark_exit
    from kopt.tools.wait import WaitError, _stalled

    st = demo_store(tmp_path / "st")
    path = job_file(st, "r1", 1, 0, ".json")
    path.parent.mkdir()
    path.write_text('{"pid": 7, "host": "vm", "log": "/x.log"}')
    mark_exit(st, "r1", 1, 0, 3)
    assert json.loads(path.read_text()) == {"pid": 7, "host": "vm", "log": "/x.log", "rc": 3}
    with pytest.raises(WaitError, match=r"^run r1: the detached try 0 of iteration 1 exited "
                                        r"with status 3 without closing it; its log: /x.log$"):
        _stalled(Database(st), st, "r1", 1, None)
    path.write_text("garbage{")
    mark_exit(st, "r1", 1, 0, 2)  # a damaged record: the exit status is still kept
    assert json.loads(path.read_text()) == {"rc": 2}


def test_a_submission_refused_by_the_run_lock_spends_no_try(ray_local, copy_fixture, tmp_path):
    """A reader's shared flock on the run's lock (a backup script, `flock -s`) lets the
    probe before the record pass but not the writer's exclusive lock: the version was
    recorded and then refused, a try spent. The lock is now taken before the record."""
    import subprocess
    import sys

    from click.testing import CliRunner

    from kopt.cli.main import main
    from kopt.core.spec import load_sweep
    from kopt.driver.sweep import run_sweep
    from kopt.store.database import Database

    folder = copy_fixture("submit")
    store = tmp_path / "store"
    run = run_sweep(load_sweep(folder), store, backend="cpu").run_id
    v2 = folder / "v2.cpp"
    v2.write_text((folder / "base.cpp").read_text().replace("#define WORK 64",
                                                             "#define WORK 4"))
    (folder / "why.md").write_text("the chain dominates: coarsen (priority 4; 1-3 need tensor "
                                   "cores, fp16 or a launch_config change this kernel does "
                                   "not need; no kernel_fusion, coalesced_access or "
                                   "tiling_smem to do: "
                                   "one pass, contiguous, no reuse)")
    lock = store / "locks" / f"{run}.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; "
                               f"f = open({str(lock)!r}); fcntl.flock(f, fcntl.LOCK_SH); "
                               "print('held', flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        res = CliRunner().invoke(main, ["submit", run, "--source", str(v2), "--methods",
                                        "compute.thread_coarsening,memory.none,latency.none",
                                        "--note",
                                        str(folder / "why.md"), "--store", str(store)],
                                 env={"COLUMNS": "400"})
    finally:
        holder.kill()
        holder.wait()
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"error: run {run} is being written by pid "), res.output
    assert len(res.output.splitlines()) == 1, res.output
    assert Database(store).submit_tries(run, 2) == 0  # no version row: no try spent


@pytest.mark.parametrize("methods", [",,,", " , ", ","])
def test_submit_refuses_a_claim_that_names_nothing(tmp_path, methods):
    from click.testing import CliRunner

    from kopt.cli.main import main

    (tmp_path / "v.cpp").write_text(ADD)
    r = CliRunner().invoke(main, ["submit", "r1", "--store", str(tmp_path / "st"), "--source",
                                  str(tmp_path / "v.cpp"), "--methods", methods],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 1, r.output
    assert r.output == (f"refused: --methods {methods!r}: names no method; name at least one "
                        "catalog method (`kopt propose` lists them), or `none` for a version "
                        "that applies none\n")
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize("table", ["candidates", "runs", "metrics", "locks"])
def test_a_store_table_folder_that_is_a_file_is_refused_before_anything_runs(tmp_path, table):
    from click.testing import CliRunner

    from kopt.cli.main import main

    d = write_sweep(tmp_path / "s", "kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N], y: [N]}\n",
                    {"add.cpp": ADD, "ref.py": "def reference(x, N):\n    return x\n"})
    st = tmp_path / "st"
    st.mkdir()
    (st / table).write_text("x")
    r = CliRunner().invoke(main, ["sweep", str(d), "--store", str(st), "--backend", "cpu"],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: --store {st}: {st / table} is a file where the store's "
                        f"{table!r} folder goes; move it out of the store (restore the folder "
                        "from a copy if you have one)\n")
    assert sorted(p.name for p in st.iterdir()) == [table]  # nothing was run or written


def test_submit_refuses_a_claim_that_leaves_an_axis_unsaid(tmp_path):
    """One method per axis, or the axis stated as skipped: a claim naming only the compute
    axis is refused in one line naming the missing axes, before anything is recorded."""
    from click.testing import CliRunner

    from kopt.cli.main import main

    (tmp_path / "v.cpp").write_text(ADD)
    r = CliRunner().invoke(main, ["submit", "r1", "--store", str(tmp_path / "st"), "--source",
                                  str(tmp_path / "v.cpp"), "--methods", "compute.ilp_unroll"],
                           env={"COLUMNS": "400"})
    assert r.exit_code == 1, r.output
    assert r.output == ("refused: --methods 'compute.ilp_unroll': every axis is claimed or "
                        "stated as skipped; add memory.none,latency.none (or a method on "
                        "each)\n")
    assert not (tmp_path / "st").exists()
