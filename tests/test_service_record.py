"""The kopt service's record ($KOPT_CACHE/service.json) and `kopt serve stop/status`: a
damaged record is one line naming the field and the fix, a stale record's process group that
is another program's now is left alone (only kopt's own Ray head and folder are stopped and
removed), and a recorded service that does not answer, or none recorded, is named as such."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import started


def _group(*argv):
    import subprocess

    return subprocess.Popen(list(argv), start_new_session=True)


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
    head = started(_group("sh", "-c", f"sleep 300; : ray start --temp-dir={tmp}"), str(tmp))
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


def test_a_recorded_service_that_does_not_answer_is_named_as_the_record(tmp_path):
    """`kopt serve status` with a recorded service whose head is gone said
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
    """A record whose address is wrong but whose head (pgid, start, folder)
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
    # (`started`: read at once, a loaded machine's /proc showed its command line empty)
    head = started(subprocess.Popen(["bash", "-c", "sleep 300; true", "ray", str(tmp)],
                                    start_new_session=True), str(tmp))
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
