"""An OSError that reaches the CLI is one line that names the file when it
is known and says what to do: a full disk said "error: : No space left on device", and a
read-only store made `kopt submit` blame its (readable) --note file."""

from __future__ import annotations

import errno

from click.testing import CliRunner

from kopt.cli import console
from kopt.cli.console import os_error_line
from kopt.cli.main import main
from kopt.tools import submit

LAUNCH_CLAIM = "compute.launch_config,memory.none,latency.none"


def test_a_full_disk_names_no_empty_file_and_says_how_to_finish():
    line = os_error_line(OSError(errno.ENOSPC, "No space left on device"))
    assert line.startswith("No space left on device (the disk is full: free space there; ")
    assert "--resume RUN_ID` finishes an interrupted sweep)" in line and not line.startswith(":")
    # pyarrow's write error: the number only in its text
    arrow = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    assert os_error_line(arrow).startswith(
        "Error writing bytes to file. Detail: [errno 28] No space left on device (the disk "
        "is full")
    ro = OSError(errno.EROFS, "Read-only file system", "/s/versions")
    assert os_error_line(ro) == ("/s/versions: Read-only file system (a read-only file "
                                 "system: pass a folder you can write to)")
    assert os_error_line(OSError(errno.EIO, "Input/output error")) == "Input/output error"


def test_submit_blames_the_store_not_a_readable_note(tmp_path, monkeypatch):
    note = tmp_path / "why.md"
    note.write_text("why\n")
    src = tmp_path / "v2.cpp"
    src.write_text("int x;\n")

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "st" / "versions"))

    monkeypatch.setattr(submit, "open_run", lambda root, run_id: object())
    monkeypatch.setattr(submit, "record", read_only)
    res = CliRunner().invoke(main, ["submit", "r1", "--store", str(tmp_path / "st"),
                                    "--source", str(src), "--methods", LAUNCH_CLAIM,
                                    "--note", str(note)])
    assert res.exit_code == 1, res.output
    assert "--note" not in res.output
    assert f"{tmp_path / 'st' / 'versions'}: Read-only file system (a read-only file system: " \
           "pass a folder you can write to)" in res.output.replace("\n", "")
    assert console.OS_HINTS[errno.ENOSPC].startswith("the disk is full")


def test_a_port_whose_worktree_cannot_be_made_leaves_no_branch(tmp_path):
    # git makes the branch, then fails to make the worktree's folder (a read-only
    # store); the branch stayed in the user's repository (git 2.x does so here too)
    import subprocess

    import pytest

    from kopt.tools.port import PortError, _add_worktree, _git

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    (repo / "a.cpp").write_text("int a;\n")
    subprocess.run(["git", "-C", str(repo), "add", "a.cpp"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "a"], check=True)
    base = _git(repo, "rev-parse", "HEAD")
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the worktree's parent folder must go
    with pytest.raises(PortError, match="git worktree add -b kopt/port-r1-x"):
        _add_worktree(repo, "kopt/port-r1-x", blocker / "wt", base)
    assert _git(repo, "branch", "--list", "kopt/port-*") == ""
    _add_worktree(repo, "kopt/port-r1-y", tmp_path / "wt", base)  # the normal case
    assert _git(repo, "branch", "--list", "kopt/port-r1-y").lstrip("+* ") == "kopt/port-r1-y"
