"""Where errors appear: what can be checked before Ray starts fails
before Ray starts -- one line, in well under the seconds Ray takes to come up, no
traceback -- and a sweep where nothing compiles says why on the console, and its report
names no winner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from click.testing import CliRunner

from conftest import ROOT
from kopt.cli.main import main
from kopt.store.database import Writer

VADD = str(ROOT / "sweeps" / "vector_add")
# Ray takes 8-15 s to start on a 2-core machine; these checks need none of it
FAST_S = 3.0
TIMED = """
import sys, time
import kopt.cli.main, kopt.driver.sweep
t0 = time.perf_counter()
try:
    kopt.cli.main.main(sys.argv[1:])
finally:
    print(f"elapsed {time.perf_counter() - t0:.3f}", file=sys.stderr)
"""


def _kopt_fresh(*args: str, env: dict | None = None) -> tuple[int, list[str], float]:
    """``kopt ARGS`` in a fresh process (no Ray running in it): exit code, its output as
    one line, seconds from the command's start (after imports) to its exit."""
    p = subprocess.run([sys.executable, "-c", TIMED, *args], capture_output=True, text=True,
                       timeout=300, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    lines = (p.stdout + p.stderr).splitlines()
    assert lines[-1].startswith("elapsed "), lines
    # the console wraps at 160 columns without a terminal: one message, rejoined
    return p.returncode, [" ".join(ln.strip() for ln in lines[:-1])], float(lines[-1].split()[1])


def test_store_that_is_a_file_fails_before_ray(tmp_path):
    f = tmp_path / "store.txt"
    f.write_text("not a store")
    rc, lines, secs = _kopt_fresh("sweep", VADD, "--backend", "cpu", "--store", str(f))
    assert (rc, lines) == (2, [f"error: --store {f}: that is a file, not a store folder; "
                                "pass a folder (a missing one is created)"])
    assert secs < FAST_S
    rc, lines, secs = _kopt_fresh("sweep", VADD, "--backend", "cpu", "--store",
                                  str(f / "sub"))
    assert (rc, lines) == (2, [f"error: --store {f / 'sub'}: {f} is a file, so the folder "
                                "cannot be created; pass a path under a folder"])
    assert secs < FAST_S
    assert f.read_text() == "not a store"


def test_cuda_without_a_gpu_fails_before_ray(tmp_path):
    rc, lines, secs = _kopt_fresh("sweep", VADD, "--backend", "cuda", "--store",
                                  str(tmp_path / "st"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert (rc, lines) == (2, ["error: --backend cuda: this machine has no GPU (NVML sees none "
                               "with CUDA_VISIBLE_DEVICES=''); use --backend cpu, or "
                               "--address/--cluster for a GPU cluster"])
    assert secs < FAST_S
    assert not (tmp_path / "st").exists()


def test_unknown_or_foreign_resume_id_fails_before_ray(tmp_path):
    st = tmp_path / "st"
    rc, lines, secs = _kopt_fresh("sweep", VADD, "--store", str(st), "--resume", "nope")
    assert (rc, lines) == (2, [f"error: --resume nope: no run 'nope' in {st} (`kopt query "
                               "\"select run_id, sweep, status from runs\"` lists runs)"])
    assert secs < FAST_S
    w = Writer(st, "softmax", "r1")
    w.add("runs", [{"run_id": "r1", "sweep": "softmax", "event": "finished",
                    "backend": "cpu", "spec_hash": "x"}])
    w.flush()
    rc, lines, secs = _kopt_fresh("sweep", VADD, "--store", str(st), "--resume", "r1")
    assert (rc, lines) == (2, ["error: --resume r1: that run is of sweep 'softmax', not "
                               "'vector_add'"])
    assert secs < FAST_S


def test_nothing_compiles_shows_the_compilers_first_error(ray_local, tmp_path):
    """The console names the compiler's first error (not a source-context line), and the
    report's iteration table names no winner (not "(no method)", median 0, 1x)."""
    d = tmp_path / "broken"
    shutil.copytree(VADD, d)
    src = d / "vector_add.cpp"
    n = len(src.read_text().splitlines())
    src.write_text(src.read_text() + '#include <vector>\n#error "broken on purpose"\n'
                   "static int f() { return undefined_thing; }\n")
    r = CliRunner().invoke(main, ["sweep", str(d), "--backend", "cpu", "--max-candidates", "3",
                                  "--store", str(tmp_path / "st")])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert (f"nothing compiled (3 compile errors); the compiler's first error: "
            f'vector_add.cpp:{n + 2}:2: error: #error "broken on purpose"') in r.output
    assert "no correct candidate so far" in r.output and "(no method)" not in r.output
    run_id = r.output.split("run ", 1)[1].split()[0]
    r = CliRunner().invoke(main, ["report", run_id, "--store", str(tmp_path / "st"),
                                  "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "summary.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| 1 |"))
    assert row.split(" | ")[3:8] == ["none (no correct candidate)", "-", "-", "-", "-"]
    assert "(no method)" not in md and "speedup_per_iteration" not in md
    assert f'first error: `vector_add.cpp:{n + 2}:2: error: #error "broken on purpose"`' in md
