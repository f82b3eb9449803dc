"""Messages and figures a first user meets: a submitted version's compiler error, the noise
line's cause, one-line YAML errors, what a --resume found changed, empty tables, `kopt serve
status` with no service, one name rule, the report's figures, the startup phase, export's
size order and plain numbers in triage's tables."""

from __future__ import annotations

from types import SimpleNamespace

from click.testing import CliRunner

from kopt.cli import console
from kopt.cli.main import main
from kopt.tools import submit
from workers.records import BuildResult

GCC = ("v2.cpp: In function 'void solve(const float*, float*, int)':\n"
       "v2.cpp:5:51: error: expected ';' before 'SYNTAXERR'\n"
       "    5 |     y[i] = x[i] SYNTAXERR;\n")


def test_a_submitted_version_that_does_not_compile_prints_the_compilers_first_error(
        tmp_path, monkeypatch):
    src = tmp_path / "v2.cpp"
    src.write_text('extern "C" void solve(const float* x, float* y, int n) {}\n')
    version = SimpleNamespace(name="v2.cpp", source_hash="abc123")
    sub = SimpleNamespace(iteration=2, versions=[version], created={"abc123": ["c1", "c2"]})

    def run(root, run_id, it, try_no, observers, address=None, sweep=None, queue=False):
        obs = observers[0]
        obs.on_start(1, 4, [])
        obs.on_build(BuildResult("b1", False, error=GCC), 4)
        return sub, None

    monkeypatch.setattr(submit, "open_run", lambda root, run_id: object())
    monkeypatch.setattr(submit, "record", lambda *a, **k: (2, 1))
    monkeypatch.setattr(submit, "run_recorded", run)
    res = CliRunner().invoke(main, ["submit", "r1", "--store", str(tmp_path / "st"),
                                    "--source", str(src), "--methods",
                                    "compute.launch_config,memory.none,latency.none"])
    assert res.exit_code == 0, res.output
    assert ("nothing compiled (4 compile errors); the compiler's first error: v2.cpp:5:51: "
            "error: expected ';' before 'SYNTAXERR'") in res.output
    assert "v2.cpp (source abc123, iteration 2, try 1): c1 c2" in res.output


def test_submit_refusals_and_errors_are_json_under_format_json(tmp_path, monkeypatch):
    """`kopt submit --format json`: a refused claim was text on stderr only; a loop driver
    reading stdout got nothing. Now stdout holds ``{"refused": [...]}`` (one line per broken
    rule), and a submission that could not run ``{"error": ...}``; exit 1 either way."""
    import json

    from kopt.loop.submitted import SubmitError
    from kopt.run.runner import SweepError

    src = tmp_path / "v2.cpp"
    src.write_text('extern "C" void solve(const float* x, float* y, int n) {}\n')
    lines = ["compute.x is not a catalog method", "memory.y is not a catalog method"]

    def refuse(*a, **k):
        raise SubmitError(lines)

    monkeypatch.setattr(submit, "open_run", lambda root, run_id: object())
    monkeypatch.setattr(submit, "record", refuse)
    args = ["submit", "r1", "--store", str(tmp_path / "st"), "--source", str(src),
            "--methods", "compute.x,memory.y,latency.none", "--format", "json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1
    assert json.loads(res.stdout) == {"refused": lines, "exit_status": 1}

    def gone(root, run_id):
        raise SweepError("run r1: its sweep folder is gone")

    monkeypatch.setattr(submit, "open_run", gone)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1
    assert json.loads(res.stdout) == {"error": "run r1: its sweep folder is gone",
                                      "exit_status": 1}


def test_a_winner_rejected_as_noise_names_the_side_whose_noise_set_the_threshold():
    from kopt.loop.review import judge
    from kopt.loop.state import IterState, close_iteration

    base = {"candidate_id": "b", "speedup": 1.0, "rel_iqr": 1.2, "is_baseline": True}
    win = {"candidate_id": "w", "speedup": 2.4, "rel_iqr": 1.5, "is_baseline": False}
    ok = [{"dims": '{"N": 1}', "status": "ok"}]
    assert judge(win, base, ok, [{"N": 1}]) == [
        "not faster than its parent (the iteration's baseline) beyond noise: "
        "2.4x, the noise threshold 88.955% (set by "
        "the baseline's own noise: its IQR is 120% of its median, sigma = IQR / 1.349; the "
        "winner's IQR is 150%; re-measure on an idle device to narrow it)"]
    quiet = {**base, "rel_iqr": 0.002}
    assert judge({**win, "speedup": 1.005, "rel_iqr": 0.004}, quiet, ok, [{"N": 1}]) == [
        "not faster than its parent (the iteration's baseline) beyond noise: "
        "1.005x, the noise threshold 1.000% (the 1% "
        "floor: the baseline's IQR is 0.2% of its median, the winner's 0.4%)"]
    for r in (base, win):
        r.update(build_id="x", triple=[None, None, None], params={}, defines={},
                 median_ms=1.0, dims=[])
    win["triple"] = ["compute.a", None, None]
    st = close_iteration(IterState(iteration=0), [win, base], 1, {}, None)
    assert st.stop == (
        "no gain beyond noise: the best candidate is 2.400x the baseline, noise threshold "
        "88.955% (set by the baseline's own noise: its IQR is 120% of its median, sigma = IQR "
        "/ 1.349; the best's IQR is 150%; re-measure on an idle device to narrow it)")


def test_a_refused_resume_names_the_field_and_the_file_that_changed(tmp_path):
    import shutil

    import pytest

    from conftest import ROOT
    from kopt.core.spec import load_sweep
    from kopt.driver.checks import resumable_run, spec_parts
    from kopt.run.runner import SweepError
    from kopt.store.database import Writer
    from kopt.store.files import dumps

    d = tmp_path / "vector_add"
    shutil.copytree(ROOT / "sweeps" / "vector_add", d)
    sweep = load_sweep(d)
    w = Writer(tmp_path / "st", sweep.name, "r1")
    w.add("runs", [{"run_id": "r1", "sweep": sweep.name, "event": "running",
                    "spec_hash": sweep.spec_hash, "spec_parts": dumps(spec_parts(sweep))}])
    w.flush()
    assert resumable_run(tmp_path / "st", "r1", load_sweep(d))["run_id"] == "r1"
    spec = d / "sweep.yaml"
    spec.write_text(spec.read_text() + "seed: 12345\n")
    src = d / "vector_add.cpp"
    src.write_text(src.read_text() + "// edited\n")
    with pytest.raises(SweepError) as e:
        resumable_run(tmp_path / "st", "r1", load_sweep(d))
    assert str(e.value) == (
        "--resume r1: sweep.yaml's `seed` (added) and vector_add.cpp changed since that run; "
        f"undo the edit to finish it, or start a new run (`kopt sweep {d}` without --resume)")


def test_a_run_with_nothing_correct_prints_no_empty_fastest_table(monkeypatch, capsys):
    import pytest

    import kopt.store.select
    from kopt.cli import main as cli

    monkeypatch.setattr(kopt.store.select, "top", lambda run_id, k, root: [])
    summary = SimpleNamespace(run_id="r1", status_counts={"wrong_result": 2}, n_skipped=0,
                              n_jobs=2, n_candidates=2, wall_s=1.0, rungs={}, states={},
                              phases=[], backend="cpu")
    obs = SimpleNamespace(build_error=None)
    with pytest.raises(SystemExit) as e:
        cli._show_sweep(summary, SimpleNamespace(name="vadd"), None, 5, obs, False)
    assert e.value.code == 1
    got = capsys.readouterr()
    assert "no candidate was correct" in got.err
    # every candidate wrong, the baseline too: look at ref.py first (a new user's reference()
    # that forgot a scalar got six wrong_result rows and no word of ref.py)
    assert " ".join(cli.ALL_WRONG_HINT.split()) in " ".join(got.err.split())
    assert "fastest correct candidates" not in got.out + got.err
    assert "median ms" not in got.out  # no header row of an empty table
    # resumed with nothing correct among the rows left: one line, no table
    summary.n_skipped, summary.status_counts = 2, {}
    with pytest.raises(SystemExit):
        cli._show_sweep(summary, SimpleNamespace(name="vadd"), None, 5, obs, False)
    assert capsys.readouterr().out.splitlines()[-1] == (
        "no fastest correct candidates to show: none of this run's measured jobs is correct")
    # wrong and crashed: not every candidate disagreed with ref.py, no word of it
    summary.n_skipped, summary.status_counts = 0, {"wrong_result": 1, "crashed": 1}
    with pytest.raises(SystemExit):
        cli._show_sweep(summary, SimpleNamespace(name="vadd"), None, 5, obs, False)
    got = capsys.readouterr()
    assert "no candidate was correct" in got.err and "look at ref.py" not in got.err


def test_empty_tables_are_one_line(tmp_path, monkeypatch):
    from kopt.cli import main as cli
    from kopt.store.database import Writer
    from kopt.tools.report import _reference_section

    w = Writer(tmp_path, "demo", "r1")
    w.add("runs", [{"run_id": "r1", "sweep": "demo", "event": "finished"}])
    w.flush()
    res = CliRunner().invoke(main, ["query", "select run_id, sweep from runs where run_id = "
                                    "'nope'", "--store", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert res.output == "no rows (columns: run_id, sweep)\n"

    t = SimpleNamespace(trace="t.sqlite", kernels=[], paths=[], actions=[])
    printed: list[str] = []
    monkeypatch.setattr(console.out, "print", lambda x, **k: printed.append(x))
    cli._triage_tables(t, 5)
    assert printed == ["no kernel in t.sqlite", "known paths of the hot kernels: none",
                       "actions: none"]

    ref = {"device_class": "cpu", "dims": '{"N": 4}', "impl": "reference", "status": "ok",
           "median_ms": 1.0, "iqr_ms": 0.1, "tflops": None, "gbps": None,
           "pct_peak_flops": None, "pct_peak_bw": None, "max_abs_err": None,
           "max_rel_err": None}
    md = _reference_section([ref], [])
    assert not any(ln.startswith("| device class | dims | best candidate") for ln in md)
    assert md[-1] == "No candidate was correct: none to compare with the reference."


def test_a_service_with_no_device_actor_is_one_line_not_an_empty_table(monkeypatch):
    from kopt.run import service

    st = {"address": "10.0.0.1:6379", "backend": "cpu", "sweeps_served": 0,
          "sweeps_running": [], "devices": [], "builders": []}
    monkeypatch.setattr(service, "service_status", lambda address: st)
    res = CliRunner().invoke(main, ["serve", "status", "--address", "10.0.0.1:6379"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == (
        "kopt service at 10.0.0.1:6379 (cpu): no device actor is up (`kopt serve stop`, then "
        "`kopt serve start`, makes them again)")


def test_serve_status_with_no_service_says_so_and_exits_0(tmp_path):
    import json

    env = {"KOPT_CACHE": str(tmp_path), "COLUMNS": "400"}
    res = CliRunner().invoke(main, ["serve", "status"], env=env)
    assert res.exit_code == 0, res.output
    assert res.output == (f"no service: none is recorded in {tmp_path / 'service.json'} "
                          "(`kopt serve start` starts one; one elsewhere: pass --address "
                          "HOST:PORT)\n")
    res = CliRunner().invoke(main, ["serve", "status", "--format", "json"], env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"service": None, "record": str(tmp_path / "service.json")}


def test_a_name_and_a_folder_name_follow_one_rule(tmp_path):
    import pytest

    from conftest import VADD_CPP, VADD_REF, write_sweep
    from kopt.core.spec import SpecError, load_sweep, name_problem

    yaml_text = "kernel: k.cpp\ndims: [{N: 64}]\nargs: {x: [N], y: [N]}\n"
    files = {"k.cpp": VADD_CPP, "ref.py": VADD_REF}
    rule = "give `name:` (at most 128 characters: letters, digits, _ . -, not . or - first)"
    for bad, why in (("sw (1)", "'sw (1)' holds ' ', '(', ')'"), ("-x", "'-x' starts with '-'"),
                     (".x", "'.x' starts with '.'")):
        folder = write_sweep(tmp_path / f"f{len(why)}" / bad, yaml_text, files)
        with pytest.raises(SpecError) as e:
            load_sweep(folder)
        assert str(e.value) == (f"{folder / 'sweep.yaml'}: field 'name': missing, and the "
                                f"folder's name {why}; {rule}")
        named = write_sweep(tmp_path / f"n{len(why)}" / "ok", f"name: '{bad}'\n" + yaml_text,
                            files)
        with pytest.raises(SpecError) as e:
            load_sweep(named)
        assert str(e.value) == (f"{named / 'sweep.yaml'}: field 'name': the name {why}; "
                                f"{rule}")
        assert load_sweep(write_sweep(tmp_path / f"g{len(why)}" / bad,
                                      "name: fine.name-1\n" + yaml_text, files)).name == \
            "fine.name-1"
    assert name_problem("vector_add.v2-x") is None and name_problem("_a") is None
    assert name_problem("a" * 129) == "(129 characters) is too long to be the sweep's store folder"


def _iter_state(it, best_id, closing=None):
    from kopt.loop.state import IterState

    return IterState(iteration=it, best={"candidate_id": best_id} if best_id else None,
                     closing=closing or {})


def test_the_median_figure_has_iqr_bars_and_the_speedup_figure_integer_ticks():
    import matplotlib.pyplot as plt
    import numpy as np

    from kopt.tools.report import median_figure, speedup_figure

    cand = [{"iteration": 1, "params": f'{{"T": {t}}}', "median_ms": m, "iqr_ms": q}
            for t, m, q in ((64, 2.0, 0.4), (128, 1.0, 0.2), (128, 1.5, 0.9), (256, 3.0, None))]
    key, fig = median_figure(cand)
    ax = fig.axes[0]
    assert key == "T" and len(ax.containers) == 1
    line, caps, (bars,) = ax.containers[0].lines
    assert list(line.get_ydata()) == [2.0, 1.0, 3.0]  # the best median of each T
    segs = [s[:, 1].tolist() for s in bars.get_segments()]
    assert np.allclose(segs, [[1.8, 2.2], [0.9, 1.1], [3.0, 3.0]])  # IQR long, centred
    plt.close(fig)

    closing = {"first_baseline_ms": 4.0, "medians_ms": {"a": 2.0, "b": 1.0}}
    states = {"cpu": [_iter_state(1, "a"), _iter_state(2, "b", closing)]}
    fig = speedup_figure(states)
    ax = fig.axes[0]
    fig.canvas.draw()
    assert list(ax.lines[0].get_xdata()) == [0, 1, 2]
    assert list(ax.lines[0].get_ydata()) == [1.0, 2.0, 4.0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)
    assert speedup_figure({"cpu": [_iter_state(1, None)]}) is None


def test_the_timeline_keeps_a_colour_per_phase_and_draws_only_lanes_with_work():
    import matplotlib.pyplot as plt

    from kopt.tools.report import _lanes, phase_color, timeline_figure

    def row(phase, a, b, device=None):
        return {"phase": phase, "start_s": a, "end_s": b, "device": device,
                "device_class": "cpu" if device is not None else None}

    dev = "local/cpu-0"
    small = [row("startup", 0, 1), row("busy", 2, 3, dev)]
    big = [row("startup", 0, 1), row("checks", 1, 1.5), row("ray", 1.5, 4),
           row("build", 2, 3), row("build", 2.5, 3.5), row("build", 4, 4),
           row("reference", 4, 4), row("busy", 4, 6, dev), row("ncu", 6, 7, dev)]
    colours = []
    for rows in (small, big):
        fig = timeline_figure(rows)
        ax = fig.axes[0]
        colours.append({c.get_label(): tuple(c.get_facecolor()[0]) for c in ax.collections})
        plt.close(fig)
    for k in ("startup", "busy"):
        assert colours[0][k] == colours[1][k] == phase_color(k)
    assert phase_color("startup") != phase_color("busy")
    assert phase_color("a new phase") == phase_color("a new phase")
    names = [n for n, _ in _lanes(big)]
    # the zero-length reference phase has no lane; two builds overlapped: two lanes
    assert names == ["startup", "checks", "ray", "build 1", "build 2", "cpu local/cpu-0"]


def test_startup_counts_from_kopts_start_not_from_a_shell_that_execs_it():
    """`bash -c "pip install ... && kopt sweep ..."` runs kopt in bash's own process
    (``exec``): the OS process's start was before the commands ahead of kopt."""
    import subprocess
    import sys

    from conftest import ROOT

    child = ("import time, kopt.util.phases as p; r = p.PhaseRecorder(); "
             "print(time.time() - p.start_epoch(), r.now())")
    got = subprocess.run(["bash", "-c", f'sleep 3 && exec "{sys.executable}" -c "{child}"'],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert got.returncode == 0, got.stderr
    since_start, now = map(float, got.stdout.split())
    assert 0 <= since_start < 2.0 and 0 <= now < 2.0  # the 3 s of sleep are not kopt's


def test_export_numbers_problem_sizes_in_sweep_yaml_order(tmp_path):
    from test_export import X86, write_two_classes

    from conftest import VADD_CPP, VADD_REF, write_sweep
    from kopt.tools.export import export

    sweep_dir = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 4096}, {N: 1024}]\n"
                            "params: {CHUNK: [64, 256, 1024]}\n",
                            {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    write_two_classes(tmp_path / "st", sweep_dir)
    res = export("demo", tmp_path / "st", tmp_path / "out")
    got = [(r["device_class"], r["size"], r["dims"]["N"], r["candidate_id"]) for r in res.rows]
    assert [g for g in got if g[0] == X86] == [(X86, 0, 4096, "c2"), (X86, 1, 1024, "c1")]
    header = (tmp_path / "out" / "demo.h").read_text()
    assert " *     KOPT_PROBLEM_SIZE=0: N=4096\n *     KOPT_PROBLEM_SIZE=1: N=1024" in header


def test_triage_tables_show_plain_numbers(monkeypatch):
    from kopt.cli import main as cli

    kernel = {"rank": 1, "kernel": "sgemm_128x128", "share": 0.93, "total_us": 162345.6,
              "calls": 120, "avg_us": 1352.88, "min_us": 1201.5, "max_us": 10250.25,
              "grid": "(32, 32, 1)", "block": "(256, 1, 1)", "stages": None, "layers": None,
              "in_graph": False}
    t = SimpleNamespace(trace="t.sqlite", kernels=[kernel], paths=[], actions=[])
    printed: list = []
    monkeypatch.setattr(console.out, "print", lambda x, **k: printed.append(x))
    cli._triage_tables(t, 5)
    cells = {c.header: c._cells[0] for c in printed[0].columns}
    assert (cells["total us"], cells["avg us"], cells["min"], cells["max"]) == (
        "162,346", "1353", "1202", "10,250")
    assert console.cell(1.5e-05) == "1.5e-05" and console.cell(0.1234567) == "0.1235"
    assert console.cell(float("inf")) == "inf" and console.cell(-25000.0) == "-25,000"
