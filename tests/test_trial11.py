"""Trial 11 (docs/verified/2026-12-01-trial11.md): paths that are symlink loops or dangling
links, and build caches nobody can create, are one line before anything runs (Y1-Y4)."""

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
    """Y1: `kopt sweep --store LOOP` started Ray, then raised RuntimeError from the run lock."""
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
    """Y2: the spec's include_dirs entry raised RuntimeError while loading sweep.yaml."""
    d = write_sweep(tmp_path / "s", SWEEP + "    include_dirs: [il]\n",
                    {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    _loop(d / "il")
    with pytest.raises(SpecError) as e:
        load_sweep(d)
    assert "include_dirs[0]" in str(e.value)
    assert "'il': Too many levels of symbolic links; name a folder" in str(e.value)


def test_port_with_a_looped_store_is_one_line(tmp_path):
    """Y3: `kopt port RUN --store LOOP` raised RuntimeError."""
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
    """Y4: KOPT_CACHE a symlink loop, a dangling link or a path nobody may create passed the
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


STOP_WHILE_SHOWING = """
import signal, sys
from click.testing import CliRunner
import kopt.cli.main
from kopt.driver.sweep import Terminated

def stop():
    raise Terminated(signal.SIGTERM)  # SIGTERM lands while the sweep leaves Ray

kopt.cli.main._leave_ray = stop
r = CliRunner().invoke(kopt.cli.main.main, ["sweep", sys.argv[1], "--backend", "cpu", "--store",
                                       sys.argv[2]])
print(r.exit_code)
print(r.output.strip().splitlines()[-1])
"""


def test_a_stop_signal_while_the_results_are_shown_says_the_run_is_stored(tmp_path):
    """Trial 11 D6: SIGTERM (or Ctrl-C) in the second the sweep left Ray said "interrupted
    (Ctrl-C)", exited 130 and showed nothing, though the run was finished and stored."""
    import subprocess
    import sys

    d = write_sweep(tmp_path / "va", SWEEP + "    timing: {min_samples: 3, max_samples: 3}\n"
                    "    reference_timing: false\n", {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    p = subprocess.run([sys.executable, "-c", STOP_WHILE_SHOWING, str(d), str(tmp_path / "s")],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "KOPT_CACHE": str(tmp_path / "cache")})
    code, line = p.stdout.splitlines()[:2]
    assert code == "143", p.stdout + p.stderr[-3000:]
    assert line.startswith("interrupted while showing the results: run ")
    run_id = line.split()[6]
    assert line.endswith(f"is finished and stored (`kopt best va --run {run_id}` shows it)")


def test_a_killed_queued_sweep_is_not_listed_as_running():
    """Trial 11 D8: a SIGKILLed `--queue` sweep stayed "running" in `kopt serve status`
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
    """Trial 11 D2: builds an interrupted (or killed) `--queue` sweep sent to the service's
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


@pytest.mark.parametrize("kind, said", [("loop", "a symlink loop"),
                                        ("dangling", "a dangling symlink (to nowhere.cu)"),
                                        ("missing", "no such file or folder")])
def test_a_submitted_source_that_is_a_broken_link_says_which(tmp_path, kind, said):
    """Trial 13 N-D5: `kopt submit --source srcloop` (a link to itself) said "no such file or
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
