"""Trial 8 D5 / D6: an OSError that reaches the CLI is one line that names the file when it
is known and says what to do: a full disk said "error: : No space left on device", and a
read-only store made `kopt submit` blame its (readable) --note file."""

from __future__ import annotations

import errno

from click.testing import CliRunner

from kopt import cli, submit
from kopt.cli import main, os_error_line


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
                                    "--source", str(src), "--methods", "compute.launch_config",
                                    "--note", str(note)])
    assert res.exit_code == 1, res.output
    assert "--note" not in res.output
    assert f"{tmp_path / 'st' / 'versions'}: Read-only file system (a read-only file system: " \
           "pass a folder you can write to)" in res.output.replace("\n", "")
    assert cli.OS_HINTS[errno.ENOSPC].startswith("the disk is full")
