"""Paths that are symlink loops or dangling links (kopt.util.paths): a store, an include_dirs
entry, a port's store, a build cache ($KOPT_CACHE) or a submitted source is one line saying
what the path is, before anything runs; and a command that builds nothing neither makes nor
needs the build cache."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import VADD_CPP, VADD_REF, write_sweep
from kopt.cli.main import main
from kopt.core.spec import SpecError, load_sweep
from kopt.driver.checks import check_store_path
from kopt.run.runner import SweepError
from kopt.util.paths import broken_link, resolved

SWEEP = """
    kernel: k.cpp
    dims: [{N: 64}]
    args: {x: [N], y: [N], out: [N]}
    params: {CHUNK: [64]}
"""


def _loop(path):
    os.symlink(path.name, path)  # a link to itself: a broken sync, an `ln -s` typo
    return path


def test_resolved_turns_pythons_symlink_loop_into_an_oserror(tmp_path):
    loop = _loop(tmp_path / "loop")
    with pytest.raises(OSError) as e:
        resolved(loop / "x")
    assert e.value.errno == errno.ELOOP and e.value.filename == str(loop / "x")
    assert resolved(tmp_path / "missing") == (tmp_path / "missing").resolve()
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    assert broken_link(loop) == "a symlink loop"
    assert broken_link(tmp_path / "dangling") == f"a dangling symlink (to {tmp_path}/nowhere)"
    assert broken_link(tmp_path) == broken_link(tmp_path / "missing") == ""


@pytest.mark.parametrize("kind", ["loop", "dangling", "under a loop"])
def test_a_store_that_is_a_broken_link_is_refused_before_ray(tmp_path, kind):
    """`kopt sweep --store LOOP` started Ray, then raised RuntimeError from the run lock."""
    if kind == "dangling":
        os.symlink(tmp_path / "nowhere", tmp_path / "st")
        store, where, what = tmp_path / "st", tmp_path / "st", "a dangling symlink"
    else:
        loop = _loop(tmp_path / "st")
        store = loop if kind == "loop" else loop / "inner"
        where, what = loop, "a symlink loop"
    with pytest.raises(SweepError) as e:
        check_store_path(store)
    assert str(e.value).startswith(f"--store {store}: {where} is {what}")


def test_sweep_into_a_looped_store_is_one_line(tmp_path):
    d = write_sweep(tmp_path / "s", SWEEP, {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    loop = _loop(tmp_path / "st")
    r = CliRunner().invoke(main, ["sweep", str(d), "--backend", "cpu", "--store", str(loop)])
    assert r.exit_code == 2, r.output
    assert r.output == (f"error: --store {loop}: {loop} is a symlink loop; pass a folder (a "
                        "missing one is created)\n")


def test_include_dirs_entry_that_is_a_symlink_loop_is_a_spec_error(tmp_path):
    """The spec's include_dirs entry raised RuntimeError while loading sweep.yaml."""
    d = write_sweep(tmp_path / "s", SWEEP + "    include_dirs: [il]\n",
                    {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    _loop(d / "il")
    with pytest.raises(SpecError) as e:
        load_sweep(d)
    assert "include_dirs[0]" in str(e.value)
    assert "'il': Too many levels of symbolic links; name a folder" in str(e.value)


def test_port_with_a_looped_store_is_one_line(tmp_path):
    """`kopt port RUN --store LOOP` raised RuntimeError."""
    loop = _loop(tmp_path / "st")
    r = CliRunner().invoke(main, ["port", "20261201-000000-abcdef", "--store", str(loop),
                                  "--to", str(tmp_path / "x.cu"), "--build", "true",
                                  "--bench", "true"])
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("error: "), r.output
    assert str(loop) in r.output


@pytest.mark.parametrize("kind", ["loop", "dangling", "uncreatable"])
def test_a_build_cache_nobody_can_make_is_one_line_before_anything_runs(tmp_path, kind,
                                                                       monkeypatch):
    """KOPT_CACHE a symlink loop, a dangling link or a path nobody may create passed the
    cache check; every build then failed with Ray's "Unhandled error" tracebacks."""
    from workers.build import EnvError, check_env

    if kind == "loop":
        cache = _loop(tmp_path / "kc")
    elif kind == "dangling":
        cache = tmp_path / "kc"
        os.symlink(tmp_path / "nowhere", cache)
    else:  # nobody, root included, creates a folder in /proc
        cache = Path("/proc/kopt-nowhere/kc")
    monkeypatch.setenv("KOPT_CACHE", str(cache))
    with pytest.raises(EnvError) as e:
        check_env()
    assert str(e.value).startswith(f"$KOPT_CACHE={str(cache)!r}: the build cache folder "
                                   f"{cache}/builds cannot be made or written (")
    assert str(e.value).endswith("); point KOPT_CACHE at a folder you can write (default "
                                 "~/.cache/kopt)")


@pytest.mark.parametrize("kind, said", [("loop", "a symlink loop"),
                                        ("dangling", "a dangling symlink (to nowhere.cu)"),
                                        ("missing", "no such file or folder")])
def test_a_submitted_source_that_is_a_broken_link_says_which(tmp_path, kind, said):
    """`kopt submit --source srcloop` (a link to itself) said "no such file or
    folder"; the line now says what the path is."""
    from kopt.loop.submitted import SubmitError
    from kopt.tools.submit import source_files

    src = tmp_path / "src.cu"
    if kind == "loop":
        src.symlink_to(src)
    elif kind == "dangling":
        src.symlink_to("nowhere.cu")
    with pytest.raises(SubmitError) as e:
        source_files(src)
    assert str(e.value).startswith(f"--source {src}: {said}; pass the new version's"), str(e.value)


def test_a_command_that_builds_nothing_neither_makes_nor_needs_the_build_cache(tmp_path):
    """The build cache check made $KOPT_CACHE/builds before every command and refused
    `kopt catalog` or `kopt query` with an unusable cache; only building commands do."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KOPT_CACHE": str(tmp_path / "kc")}
    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "catalog"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert not (tmp_path / "kc").exists()
    os.symlink("loop", tmp_path / "loop")
    env["KOPT_CACHE"] = str(tmp_path / "loop")
    assert subprocess.run([sys.executable, "-m", "kopt.cli.main", "catalog"], capture_output=True,
                          env=env, timeout=120).returncode == 0
    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "preflight", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith(
        f"error: $KOPT_CACHE={str(tmp_path / 'loop')!r}: the build cache folder "), p.stderr
