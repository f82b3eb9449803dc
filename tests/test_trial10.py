"""What the tenth fresh-clone trial broke (issue 12, docs/verified/2026-12-01-trial10.md):
damaged state files (a run's lock file, a detached try's record, the service record), odd
reference outputs, markup in query column names, a store table that is a file, empty method
claims, and a service record that points at someone else's process. Each is one line naming
the file or field and the fix, never a traceback, and never a kill of a foreign process."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import write_sweep

ADD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n'  # noqa: E501


# -- X1: a lock file with JSON that is not an object --------------------------------------

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


# -- X2: a reference() output without values -----------------------------------------------

@pytest.mark.parametrize("make, why", [
    ("(x + 1).to('meta')", "reference() returned output 'y' as a meta tensor"),
    ("(x + 1).to_sparse()", "reference() returned output 'y' as a torch.sparse_coo tensor"),
], ids=["meta", "sparse"])
def test_a_reference_output_without_values_is_one_line(tmp_path, make, why):
    from kopt.core.contract import parse_signature_file
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

    from kopt.cli.main import main

    (tmp_path / "st").mkdir()
    r = CliRunner().invoke(main, ["query", "select 1 \"[/]\", 2 \"[bold]x\", '[/red]' y",
                                  "--store", str(tmp_path / "st")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    head, row = [ln for ln in r.output.splitlines() if "│" in ln or "┃" in ln][:2]
    assert [c.strip() for c in head.strip("┃ ").split("┃")] == ["[/]", "[bold]x", "y"]
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["1", "2", "[/red]"]


# -- X4: a damaged record of a detached try -------------------------------------------------

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
    # trial 13 N-D7: was read as "no live try" ("iteration 1 is not closed yet")
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


# -- X5, X6: a damaged service record -------------------------------------------------------

@pytest.mark.parametrize("field, value, why", [
    ("pgid", '"abc"', "Input should be a valid integer"),
    ("pgid", "[1]", "Input should be a valid integer"),
    ("pgid", "1e400", "Input should be a valid integer"),
    ("pgid", '"-5"', "Input should be a valid integer"),
    ("pgid", "-5", "Input should be greater than or equal to 2"),
    ("pgid", "99999999999999999999", "Input should be less than or equal to 4194304"),
    ("token", "5", "Input should be a valid string"),
    ("address", "[1]", "Input should be a valid string"),
])
@pytest.mark.parametrize("cmd", [["serve", "stop"], ["serve", "status"],
                                 ["serve", "start", "--backend", "cpu"]])
def test_a_damaged_service_record_is_one_line(tmp_path, field, value, why, cmd):
    from click.testing import CliRunner

    from kopt.cli.main import main

    rec = {"address": '"127.0.0.1:1"', "pgid": "2", "temp_dir": '"/tmp/t10-nonexist"',
           "token": '"x"', field: value}
    (tmp_path / "service.json").write_text("{" + ", ".join(f'"{k}": {v}' for k, v in
                                                            rec.items()) + "}")
    r = CliRunner().invoke(main, cmd, env={"KOPT_CACHE": str(tmp_path), "COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: service record {tmp_path / 'service.json'}: damaged record, "
                        f"field {field!r}: {why}; remove it (a service it names that still "
                        "runs: stop it first with `kopt serve stop --address HOST:PORT`)\n")
    assert (tmp_path / "service.json").exists()


def test_a_service_record_that_is_not_an_object_is_one_line(tmp_path, monkeypatch):
    from kopt.run.service import ServiceError, read_state

    monkeypatch.setenv("KOPT_CACHE", str(tmp_path))
    (tmp_path / "service.json").write_text("[1, 2]")
    with pytest.raises(ServiceError, match=r"^service record .*service\.json: damaged record, "
                                           r"a JSON list where kopt writes an object; remove it"):
        read_state()


# -- D6: a stale record's pgid is another program's now -------------------------------------

def _group(*argv):
    import subprocess

    return subprocess.Popen(list(argv), start_new_session=True)


def test_serve_stop_leaves_a_foreign_process_group_and_folder_alone(tmp_path):
    from click.testing import CliRunner

    from kopt.cli.main import main

    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "important.txt").write_text("keep")
    p = _group("sleep", "300")  # any unrelated group that got the head's old pgid
    try:
        (tmp_path / "service.json").write_text(json.dumps(
            {"address": "127.0.0.1:1", "pgid": p.pid, "temp_dir": str(precious),
             "token": "x", "started_at": 1796094192.3}))
        r = CliRunner().invoke(main, ["serve", "stop"], env={"KOPT_CACHE": str(tmp_path),
                                                              "COLUMNS": "400"})
        assert r.exit_code == 2, r.output
        assert r.output == (f"error: kopt serve stop: the Ray head recorded in "
                            f"{tmp_path / 'service.json'} is gone, and its process group "
                            f"{p.pid} is now another program's (not the Ray head kopt started)"
                            f": left it and {precious} alone and removed the stale record\n")
        assert p.poll() is None  # still running
        assert (precious / "important.txt").read_text() == "keep"
        assert not (tmp_path / "service.json").exists()
    finally:
        p.kill()
        p.wait()


def test_only_kopts_own_head_and_folder_are_stopped_and_removed(tmp_path):
    import tempfile

    from kopt.run.service import _start_ticks, _stop_head, own_head

    tmp = Path(tempfile.mkdtemp(prefix="kopt-ray-", dir="/tmp"))
    (tmp / "session_latest").mkdir()
    (tmp / "ray_current_cluster").write_text("127.0.0.1:1")
    head = _group("sh", "-c", f"sleep 300; : ray start --temp-dir={tmp}")
    other = _group("sleep", "300")
    try:
        ours = {"pgid": head.pid, "temp_dir": str(tmp), "head_start": _start_ticks(head.pid)}
        assert own_head(ours) and own_head({**ours, "head_start": None})
        assert not own_head({**ours, "head_start": ours["head_start"] + 1})  # a reused pid
        assert not own_head({**ours, "pgid": other.pid})  # no process names its folder
        assert not own_head({**ours, "temp_dir": str(tmp_path)})  # not a kopt-ray-* folder
        _stop_head({**ours, "pgid": other.pid})  # the folder is kopt's: removed; sleep lives
        assert not tmp.exists() and other.poll() is None and head.poll() is None
        tmp.mkdir()
        (tmp / "mine.txt").write_text("x")  # not Ray's layout: kept
        _stop_head(ours)
        assert head.wait(timeout=10) == -15 and (tmp / "mine.txt").exists()
    finally:
        for p in (head, other):
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


# -- D3: a table's folder that is a file ----------------------------------------------------

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


# -- D9: a claim of no method ---------------------------------------------------------------

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


# -- D5: SIGTERM while Ray starts -----------------------------------------------------------

FIRE = """
import os, signal, sys, threading, time
from kopt.run import signals
from kopt.cli.main import main

def fire():  # SIGTERM as soon as ray.init has put its own handler in place of kopt's
    while signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signals.terminate):
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=fire, daemon=True).start()
main(sys.argv[1:])
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


# -- D2: a submission refused by the run lock records nothing -----------------------------

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
                                   "cores, fp16 or launch limits this kernel does not have)")
    lock = store / "locks" / f"{run}.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; "
                               f"f = open({str(lock)!r}); fcntl.flock(f, fcntl.LOCK_SH); "
                               "print('held', flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        res = CliRunner().invoke(main, ["submit", run, "--source", str(v2), "--methods",
                                        "compute.thread_coarsening", "--note",
                                        str(folder / "why.md"), "--store", str(store)],
                                 env={"COLUMNS": "400"})
    finally:
        holder.kill()
        holder.wait()
    assert res.exit_code == 1, res.output
    assert res.output.startswith(f"error: run {run} is being written by pid "), res.output
    assert len(res.output.splitlines()) == 1, res.output
    assert Database(store).submit_tries(run, 2) == 0  # no version row: no try spent


def test_a_recorded_service_that_does_not_answer_is_named_as_the_record(tmp_path):
    """Trial 13 N-D2: `kopt serve status` with a recorded service whose head is gone said
    "--address: no Ray head answers ...; run `kopt serve start` without --address", an
    option the user had not passed. It names the record and the fix now."""
    from click.testing import CliRunner

    from kopt.cli.main import main

    (tmp_path / "service.json").write_text(json.dumps({"address": "127.0.0.1:1",
                                                       "token": "x"}))
    r = CliRunner().invoke(main, ["serve", "status"], env={"KOPT_CACHE": str(tmp_path),
                                                            "COLUMNS": "400"})
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: the kopt service recorded in {tmp_path / 'service.json'}: no "
                        "Ray head answers at 127.0.0.1:1; that service has stopped: `kopt "
                        "serve stop` removes the record, then `kopt serve start` starts a new "
                        "one\n")
    r = CliRunner().invoke(main, ["serve", "status", "--address", "127.0.0.1:1"],
                           env={"KOPT_CACHE": str(tmp_path), "COLUMNS": "400"})
    assert r.exit_code == 2 and r.output.startswith("error: --address: no Ray head answers")
    # and the fix it names works: `serve stop` removes the stale record
    r = CliRunner().invoke(main, ["serve", "stop"], env={"KOPT_CACHE": str(tmp_path),
                                                          "COLUMNS": "400"})
    assert r.exit_code == 0 and r.output == "kopt service stopped (its Ray head was gone " \
        "already)\n", r.output
    assert not (tmp_path / "service.json").exists()


def test_serve_stop_of_its_own_head_that_does_not_answer_says_it_stopped_it(tmp_path):
    """Trial 13 N-D3: a record whose address is wrong but whose head (pgid, start, folder)
    is kopt's: `serve stop` stopped that head and removed its folder, yet said "its Ray head
    was gone already". It says what it stopped now."""
    import subprocess
    import uuid

    from click.testing import CliRunner

    from kopt.cli.main import main
    from kopt.run.service import _start_ticks

    tmp = Path(f"/tmp/kopt-ray-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    # a stand-in for the head kopt started: its command line names ray and its folder
    head = subprocess.Popen(["bash", "-c", "sleep 300; true", "ray", str(tmp)],
                            start_new_session=True)
    try:
        (tmp_path / "service.json").write_text(json.dumps(
            {"address": "127.0.0.1:1", "pgid": head.pid, "head_start": _start_ticks(head.pid),
             "temp_dir": str(tmp), "token": "x"}))
        r = CliRunner().invoke(main, ["serve", "stop"], env={"KOPT_CACHE": str(tmp_path),
                                                              "COLUMNS": "400"})
        assert r.exit_code == 0, r.output
        assert r.output == (f"kopt service stopped (its Ray head: process group {head.pid}, "
                            "which did not answer at 127.0.0.1:1)\n")
        assert head.wait(timeout=10) is not None and not tmp.exists()
        assert not (tmp_path / "service.json").exists()
    finally:
        if head.poll() is None:
            head.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def test_serve_stop_with_no_service_recorded_says_there_is_nothing_to_stop(tmp_path):
    """New-user trial: `kopt serve stop` with no service told the user to start one with
    `kopt serve start`; it says nothing is recorded to stop, and how to stop one elsewhere.
    `--queue` keeps its advice (start one); `serve status` answers that there is none."""
    from click.testing import CliRunner

    from kopt.cli.main import main

    env = {"KOPT_CACHE": str(tmp_path), "COLUMNS": "400"}
    r = CliRunner().invoke(main, ["serve", "stop"], env=env)
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: kopt serve stop: no kopt service is recorded in "
                        f"{tmp_path / 'service.json'}: nothing started here to stop (one "
                        "elsewhere: pass its --address HOST:PORT)\n")
    r = CliRunner().invoke(main, ["serve", "status"], env=env)  # an answer, not an error
    assert r.exit_code == 0 and r.output == (
        f"no service: none is recorded in {tmp_path / 'service.json'} (`kopt serve start` "
        "starts one; one elsewhere: pass --address HOST:PORT)\n"), r.output
