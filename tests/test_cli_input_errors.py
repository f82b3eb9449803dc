"""Command-line input kopt cannot use is one line naming it and the fix, never a traceback:
options and their numbers, cluster, routes and trace files, a store that is damaged, partial
or in the way, an interrupted or moved run's report, export and port, and submissions."""

from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner

from conftest import ROOT, write_sweep
from kopt.cli.main import main

ILP_CLAIM = "compute.ilp_unroll,memory.none,latency.none"

ADD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n'  # noqa: E501


REF = "def reference(x, N):\n    return x\n"


def base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n", **files):
    return write_sweep(tmp_path / "s", yaml, {"add.cpp": ADD, "ref.py": REF, **files})


def _repo(tmp_path):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    for cmd in (["init", "-q"], ["config", "user.email", "t@example.com"],
                ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True)
    (repo / "k.cpp").write_text("int x;\n")
    subprocess.run(["git", "-C", str(repo), "add", "k.cpp"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "k"], check=True)
    return repo


DEEP = 5000  # brackets inside one another: past Python's recursion limit (1000)


def test_a_file_in_the_way_of_a_report_or_triage_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(main, ["triage", str(ROOT / "tests" / "data" / "triage-h200" /
                                                "toy_graph0.json.gz"),
                                  "--store", str(tmp_path / "st"), "--out",
                                  str(tmp_path / "afile")])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert "afile" in r.output and "is a file, not a folder" in r.output, r.output


@pytest.mark.parametrize("text, why", [(b"\xff", "cannot read it"),
                                       (b"[1]\n", "expected a mapping")])
def test_a_cluster_file_kopt_cannot_read(tmp_path, text, why):
    from kopt.run.cluster import cluster_address
    from kopt.run.runner import SweepError

    f = tmp_path / "cl.yaml"
    f.write_bytes(text)
    with pytest.raises(SweepError, match=why):
        cluster_address(f)


def test_port_to_a_symlink_loop_or_a_folder(tmp_path):
    import subprocess

    from kopt.tools.port import PortError, check_repo

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a").symlink_to(repo / "b")
    (repo / "b").symlink_to(repo / "a")
    with pytest.raises(PortError, match="cannot be resolved"):
        check_repo(repo / "a")
    (repo / "sub").mkdir()
    with pytest.raises(PortError, match="is a directory"):
        check_repo(repo / "sub")


@pytest.mark.parametrize("events", [
    [{"ph": "X", "cat": "kernel", "name": "k"}],
    [{"ph": "X", "cat": "kernel", "name": "k", "ts": "a", "dur": "b"}],
    [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, "args": 5}],
], ids=["no-ts", "ts-text", "args-int"])
def test_a_malformed_trace_is_one_line(tmp_path, events):
    import json

    t = tmp_path / "t.json"
    t.write_text(json.dumps({"traceEvents": events}))
    r = CliRunner().invoke(main, ["triage", str(t), "--no-store"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert "not a trace (or known-routes file) kopt can read" in r.output


@pytest.mark.parametrize("var,value,expected", [
    *(("KOPT_COMPILE_TIMEOUT_S", v, "expected a number from 1 to 86400")
      for v in ("abc", "nan", "inf", "-1")),
    *(("KOPT_CACHE_MAX_GB", v, "expected a number of GB from 0 (no cap) to 1e+09")
      for v in ("abc", "nan", "-1"))])
def test_a_compile_env_var_kopt_cannot_use_is_one_line(var, value, expected):
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "catalog"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT, env={**os.environ, var: value})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"${var}={value!r}: {expected}" in p.stderr


def test_port_to_a_missing_or_untracked_file_is_refused(tmp_path):
    from kopt.tools.port import PortError, check_repo

    repo = _repo(tmp_path)
    with pytest.raises(PortError, match=r"new\.cpp: no such file; a port replaces a file"):
        check_repo(repo / "new.cpp")
    assert not (repo / "new.cpp").exists()
    (repo / "loose.cpp").write_text("int y;\n")
    with pytest.raises(PortError, match=r"loose\.cpp: not tracked by git .*`git add` and "
                                        r"commit it first"):
        check_repo(repo / "loose.cpp")
    assert check_repo(repo / "k.cpp")[1] == "k.cpp"


def test_a_damaged_store_file_is_noted_once_per_command(tmp_path, monkeypatch):
    from pathlib import Path

    from test_store_safety import demo_store

    from kopt.store.files import readable_parts, write_table

    demo_store(tmp_path)
    bad = write_table(tmp_path, "candidates", "demo", "r1", [
        {"run_id": "r1", "sweep": "demo", "job_key": "b", "status": "ok"}])
    bad.write_bytes(bad.read_bytes()[:100])
    for _ in range(2):  # every command notes it again, once
        r = CliRunner().invoke(main, ["best", "demo", "--store", str(tmp_path)])
        assert r.exit_code == 0, r.output
        assert r.output.count("note: damaged store file") == 1, r.output
    # one file read through a relative and an absolute store path is still one note, naming
    # it by its absolute path
    monkeypatch.chdir(tmp_path.parent)
    with pytest.warns(UserWarning) as notes:
        readable_parts(Path(tmp_path.name), [Path(tmp_path.name) / bad.relative_to(tmp_path)])
        readable_parts(tmp_path, [bad])
    assert len({str(n.message) for n in notes}) == 1
    assert str(notes[0].message).startswith(f"damaged store file {bad} (")


def test_the_summary_after_a_resume_counts_the_whole_run(tmp_path):
    from test_store_safety import demo_store

    from kopt.cli.console import summary_line
    from kopt.driver.sweep import RunSummary
    from kopt.store.database import Writer

    demo_store(tmp_path)  # job "a" measured before the resume
    w = Writer(tmp_path, "demo", "r1")
    w.add("candidates", [{"run_id": "r1", "sweep": "demo", "job_key": k, "candidate_id": k,
                          "status": s, "iteration": 1} for k, s in (("b", "ok"),
                                                                     ("c", "wrong_result"))])
    w.flush()
    resumed = RunSummary("r1", "demo", "cpu", n_candidates=3, n_jobs=3, n_skipped=1,
                         status_counts={"ok": 1, "wrong_result": 1}, wall_s=2.0)
    assert summary_line(resumed, tmp_path) == (
        "run [bold]r1[/]: 3 candidates, 3 jobs (1 measured before this resume, 2 now) in "
        "2.0 s; whole run: ok 2, wrong_result 1")
    fresh = RunSummary("r2", "demo", "cpu", n_candidates=2, n_jobs=2, n_skipped=0,
                       status_counts={"ok": 2}, wall_s=1.0)
    assert summary_line(fresh, tmp_path) == (
        "run [bold]r2[/]: 2 candidates, 2 jobs (2 measured) in 1.0 s; ok 2")


def test_resuming_a_finished_run_measures_nothing(tmp_path):
    from test_store_safety import demo_store

    from kopt.store.database import query

    demo_store(tmp_path, sweep="vector_add")
    before = query("select * from candidates", tmp_path)
    r = CliRunner().invoke(main, ["sweep", str(ROOT / "sweeps" / "vector_add"), "--store",
                                  str(tmp_path), "--backend", "cpu", "--resume", "r1"])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == ("run r1 is finished: every job is measured and its winners are "
                                "stored; nothing to resume (`kopt best vector_add --run r1` or "
                                "`kopt report r1` show it)")
    assert query("select * from candidates", tmp_path) == before
    assert query("select count(*) from contests", tmp_path)[1] == [(0,)]


@pytest.mark.parametrize("args, name", [
    (["sweep", str(ROOT / "sweeps" / "vector_add"), "--store", ""], "'--store'"),
    (["sweep", str(ROOT / "sweeps" / "vector_add"), "--resume", " "], "'--resume'"),
    (["best", "vector_add", "--run", ""], "'--run'"),
    (["report", ""], "'RUN_ID'"),
    (["port", "r1", "--to", ""], "'--to'"),
], ids=["store", "resume", "run", "report", "port-to"])
def test_an_empty_argument_is_refused_naming_it(tmp_path, monkeypatch, args, name):
    """`--store ""` was the current folder (a sweep wrote its store there), `--resume ""` a new
    run, `--run ""` "no correct candidate of the latest run"."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert f"Error: Invalid value for {name}: empty (" in r.output, r.output
    assert "give a value" in r.output and list(tmp_path.iterdir()) == []


def test_the_report_of_an_interrupted_run_says_what_was_not_recorded(tmp_path):
    from test_store_safety import demo_store

    from kopt.tools.report import write_report

    demo_store(tmp_path / "st", event="running")  # its driver was killed: no closing record
    text = write_report("r1", tmp_path / "st", tmp_path / "rep").read_text()
    # the candidates and jobs come from the store, whatever the run's record lacks
    assert ("Status: interrupted; backend cpu; 1 candidate, 1 job over 1 iteration (every "
            "process of the run); wall time not recorded (the run stopped before its end); "
            "statuses: ok 1") in text
    assert "None" not in text.split("## Environment")[0]


@pytest.mark.parametrize("address, why", [
    ("not a host", "--address not a host: 'not a host' is not HOST:PORT"),
    ("127.0.0.1:1", "--address 127.0.0.1:1: no Ray head answers at 127.0.0.1:1"),
])
def test_kopt_env_with_an_address_nobody_answers_is_one_line(address, why):
    """Was a ValueError traceback (not HOST:PORT) or minutes of Ray retries (no head)."""
    r = CliRunner().invoke(main, ["env", "--address", address])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {why}"), r.output


@pytest.mark.parametrize("text, why", [
    ("provider: {head_ip: h}\nhead_start_ray_commands: 5\n",
     "field 'head_start_ray_commands' is 5; expected a list of shell commands"),
    ("provider: {head_ip: h}\nhead_start_ray_commands: 'ray start --head --port=7000'\n",
     "field 'head_start_ray_commands' is 'ray start --head --port=7000'; expected a list"),
    ("provider: {head_ip: [a, b]}\n", "field 'provider.head_ip' is ['a', 'b']; expected one host"),
    ("provider: {head_ip: 5}\n", "field 'provider.head_ip' is 5; expected one host"),
    ("provider: {head_ip: h}\nhead_start_ray_commands: ['ray start --head --port=99999']\n",
     "--port '99999'; expected a port from 1 to 65535"),
], ids=["cmds-int", "cmds-text", "head-list", "head-int", "port-range"])
def test_a_cluster_file_with_fields_of_the_wrong_type(tmp_path, text, why):
    """Was a TypeError traceback (cmds-int), a silently wrong port 6379 (cmds-text: its
    characters were read as commands) or an address like "['a', 'b']:6379"."""
    from kopt.run.cluster import cluster_address
    from kopt.run.runner import SweepError

    f = tmp_path / "cl.yaml"
    f.write_text(text)
    with pytest.raises(SweepError, match=re.escape(f"--cluster {f}: ") + ".*" + re.escape(why)):
        cluster_address(f)


@pytest.mark.parametrize("ts, dur, shown", [(0, -5, "starts at 0.0 us and lasts -5.0 us"),
                                            ("1e400", 1, "starts at inf us and lasts 1.0 us")],
                         ids=["negative-duration", "infinite-start"])
def test_a_kernel_time_no_profiler_writes_is_refused(tmp_path, ts, dur, shown):
    """A negative duration was 100% of the trace's kernel time: a silently wrong table."""
    from kopt.tools.triage import TriageError, read_trace

    t = tmp_path / "t.json"
    k = '{"ph": "X", "cat": "kernel", "name": "k", "ts": ' + f'{ts}, "dur": {dur}' + "}"
    t.write_text('{"traceEvents": [' + k + ', {"ph": "X", "cat": "kernel", "name": "j", '
                 '"ts": 9, "dur": 2}]}')
    with pytest.raises(TriageError, match=re.escape(f"{t}: kernel 'k' {shown}, which no "
                                                    "profiler writes")):
        read_trace(t)


@pytest.mark.slow
def test_ctrl_c_pressed_again_and_again_loses_nothing(tmp_path):
    """Ctrl-C held down (SIGINT to the process group every 50 ms for 6 s): was "Aborted!", a
    traceback from Ray's shutdown, exit -2 and measurements reported as run but not stored."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from kopt.store.database import query

    d = tmp_path / "va"
    shutil.copytree(ROOT / "sweeps" / "vector_add", d)
    spec = yaml.safe_load((d / "sweep.yaml").read_text())
    # 200 samples of a 12 MB vector add: about a second a job whatever the machine's speed,
    # so the run is still going when Ctrl-C comes after the first progress line with a job
    # run (a line a second here: KOPT_PROGRESS_S; with 5 samples the 27 jobs took 0.4 s and
    # the run had ended, a CI failure)
    spec["cpu"].update(dims=[{"N": 1 << 20}], params={"NT": [1], "CHUNK": [16384, 32768, 65536]},
                       methods={"compute.ilp_unroll": {"params": {"UNROLL": [2, 4]}},
                                "memory.vectorized_access": {"params": {"VEC": [4, 8]}}},
                       timing={"warmup_ms": 1, "min_samples": 200, "max_samples": 200,
                               "max_time_ms": 60000})
    (d / "sweep.yaml").write_text(yaml.safe_dump(spec))
    store = tmp_path / "st"
    p = subprocess.Popen(
        [sys.executable, "-m", "kopt.cli.main", "sweep", str(d), "--backend", "cpu", "--store",
         str(store)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
             "KOPT_PROGRESS_S": "1"},
        preexec_fn=lambda: (os.setsid(), signal.signal(signal.SIGINT, signal.SIG_DFL)))
    assert p.stdout is not None
    seen = []
    for line in p.stdout:  # the progress line every second: "it 1: built 27/27, ran 6/27, ..."
        seen.append(line)
        m = re.search(r"ran (\d+)/27", line)
        if m and int(m.group(1)) >= 1:
            ran = int(m.group(1))
            break
    else:
        raise AssertionError("".join(seen))
    t0 = time.monotonic()
    while time.monotonic() - t0 < 6 and p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        time.sleep(0.05)
    out = "".join(seen) + p.stdout.read()
    assert p.wait(timeout=120) == 130, out
    assert "Traceback" not in out and "Aborted" not in out, out
    assert "interrupted: every finished measurement is stored" in out, out
    assert query("select status from runs", store)[1] == [("interrupted",)]
    assert query("select count(*) from candidates", store)[1][0][0] >= ran


def test_porting_the_winner_of_an_interrupted_run_says_so(tmp_path):
    """Was silent: the best of the jobs measured before the driver died, ported as the winner."""
    from test_store_safety import demo_store

    demo_store(tmp_path / "st", event="running")  # no driver holds it: interrupted
    repo = _repo(tmp_path)
    r = CliRunner().invoke(main, ["port", "r1", "--store", str(tmp_path / "st"), "--to",
                                  str(repo / "k.cpp")])
    lines = r.output.splitlines()
    assert lines[0].startswith("note: run r1 was interrupted: these are the figures measured "
                               "before it stopped; finish it with `kopt sweep "), r.output


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_cluster_or_routes_file_that_never_ends_is_refused(tmp_path, kind):
    """--cluster /dev/zero and --known /dev/zero were a MemoryError traceback; a FIFO a hang."""
    import os

    from kopt.run.cluster import cluster_address
    from kopt.run.runner import SweepError
    from kopt.tools.triage import TriageError, load_routes

    f = tmp_path / "f.yaml"
    if kind == "fifo":
        os.mkfifo(f)
    else:
        f.symlink_to("/dev/zero")
    why = re.escape(f"{f}: not a regular file (a device, FIFO or socket); name the file itself")
    with pytest.raises(SweepError, match="--cluster " + why):
        cluster_address(f)
    with pytest.raises(TriageError, match=why):
        load_routes(f)


@pytest.mark.parametrize("route, what", [("{pattern: 5}", "5, not text"),
                                         ("{pattern: [a]}", "['a'], not text"),
                                         ("{owner: x}", "missing")])
def test_a_route_pattern_that_is_not_text_is_named_as_such(tmp_path, route, what):
    """`pattern: 5` was reported as "missing"."""
    from kopt.tools.triage import TriageError, load_routes

    f = tmp_path / "k.yaml"
    f.write_text(f"routes: [{route}]\n")
    with pytest.raises(TriageError, match=re.escape(f"field 'routes[0].pattern' {what}; give "
                                                    "each route a regex `pattern` (quoted text)")):
        load_routes(f)


@pytest.mark.parametrize("what", ["trace", "mapping", "known"])
def test_a_triage_input_nested_too_deeply_is_one_line(tmp_path, what):
    """A trace (TRACE or --mapping) or --known routes file 5000 brackets deep was a
    RecursionError traceback."""
    import json

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1}]}))
    deep = tmp_path / ("deep.yaml" if what == "known" else "deep.json")
    deep.write_text(("routes: " if what == "known" else '{"traceEvents": ')
                    + "[" * DEEP + "]" * DEEP + ("\n" if what == "known" else "}"))
    args = {"trace": [str(deep)], "mapping": [str(good), "--mapping", str(deep)],
            "known": [str(good), "--known", str(deep)]}[what]
    r = CliRunner().invoke(main, ["triage", *args, "--no-store"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    parser = "YAML" if what == "known" else "JSON"
    assert f"error: {deep}: nested too deeply for a {parser} parser" in r.output


@pytest.mark.parametrize("field", ["ts", "dur"])
def test_a_trace_time_no_float_holds_is_one_line(tmp_path, field):
    """`"ts": 10**400` (an integer JSON allows, no float holds) was an OverflowError
    traceback."""
    import json

    t = tmp_path / "t.json"
    t.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 1, field: 10**400}]}))
    r = CliRunner().invoke(main, ["triage", str(t), "--no-store"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert (f"error: {t}: not a trace (or known-routes file) kopt can read: OverflowError: "
            "'int too large to convert to float'") in r.output


@pytest.mark.parametrize("args, why", [
    (["port", "r1", "--to", "f.cpp", "--timeout", "1e308"],
     "Invalid value for '--timeout': 1e+308 is not in the range 1<=x<=604800.0"),
    (["port", "r1", "--to", "f.cpp", "--timeout", "nan"],
     "Invalid value for '--timeout': 'nan' is not a finite number"),
    (["triage", "t.json", "--min-share", "nan"],
     "Invalid value for '--min-share': 'nan' is not a finite number"),
], ids=["timeout-huge", "timeout-nan", "min-share-nan"])
def test_a_number_option_no_clock_or_share_holds_is_refused(tmp_path, args, why):
    """`kopt port --timeout 1e308` ran the port and died in the timer (OverflowError
    traceback, the port branch left behind); NaN passed click's range checks (`--min-share
    nan` kept every kernel, `--timeout nan` timed nothing)."""
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert why in r.output, r.output


@pytest.mark.parametrize("out, figure", [("took 1e999 ms\n", None),
                                         ("took 0.5 ms\nlast 1e999 then 2.5\n", 2.5),
                                         ("took 0.5 ms\n1e999\n", 0.5)])
def test_a_bench_number_no_float_holds_is_no_figure(out, figure):
    """`--bench "echo took 1e999 ms"` gave figures inf and inf and the ratio "(nanx)"."""
    from kopt.util.command import bench_figure

    assert bench_figure(out) == figure


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_build_cache_that_is_a_file_is_refused_before_ray(tmp_path, where):
    """`KOPT_CACHE=afile kopt sweep ...` started Ray, printed Ray's "Unhandled error"
    traceback, and stored every candidate as a compile_error whose text was a
    NotADirectoryError traceback ("the baseline failed")."""
    import os
    import subprocess
    import sys

    f = tmp_path / "afile"
    f.write_text("x")
    cache = f if where == "file" else f / "sub" / "deeper"
    d = base(tmp_path)
    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "sweep", str(d), "--backend", "cpu",
                        "--store", str(tmp_path / "st")], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "KOPT_CACHE": str(cache)})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert (f"error: $KOPT_CACHE={str(cache)!r}: {f} is a file, not a folder; point "
            "KOPT_CACHE at a folder for the build cache") in p.stderr
    assert not (tmp_path / "st").exists()  # refused before anything was started or stored


def test_more_cpu_devices_than_any_node_has_is_refused_at_once(tmp_path):
    """`--cpu-devices 100000000000000000000` hung (a list of that many device slots)."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "sweep", str(base(tmp_path)),
                        "--backend", "cpu", "--cpu-devices", str(10**20)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2, p.stdout + p.stderr
    assert ("Invalid value for '--cpu-devices': 100000000000000000000 is not in the range "
            "1<=x<=4096") in p.stderr


@pytest.mark.parametrize("change", ["none", "edited", "moved"])
def test_export_says_when_the_sweep_folder_changed_or_is_gone(tmp_path, change):
    """`kopt export` wrote no best-*.cpp, silently, when the run's sweep folder was moved;
    after an edit of the kernel it wrote the edited source as "the realized source of the
    best", silently."""
    from test_export import X86, cand

    from conftest import VADD_CPP, VADD_REF
    from kopt.core.spec import load_sweep
    from kopt.store.files import now, write_table

    sweep_dir = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 1024}]\n"
                            "params: {CHUNK: [64, 256]}\n", {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    st = tmp_path / "st"
    write_table(st, "candidates", "demo", "r1", [
        cand("r1", X86, "b", 1024, 2.0, {"CHUNK": 64}, base=True),
        cand("r1", X86, "c1", 1024, 1.0, {"CHUNK": 256})])
    write_table(st, "runs", "demo", "r1", [{
        "run_id": "r1", "sweep": "demo", "event": "finished", "backend": "cpu",
        "sweep_dir": str(sweep_dir), "spec_hash": load_sweep(sweep_dir).spec_hash,
        "created_at": now()}])
    if change == "edited":
        (sweep_dir / "k.cpp").write_text(VADD_CPP + "// edited after the run\n")
    elif change == "moved":
        sweep_dir.rename(tmp_path / "elsewhere")
    r = CliRunner().invoke(main, ["export", "demo", "--store", str(st), "--out",
                                  str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.output.splitlines() if ln.startswith("note:")]
    written = sorted(p.name for p in (tmp_path / "out").glob("best-*"))
    if change == "none":
        assert notes == [] and written == ["best-cpu-x86_64.cpp"]
    elif change == "edited":
        assert notes == [f"note: run r1's sweep folder {sweep_dir} changed since the run "
                         "(sweep.yaml, a source, a header or ref.py): the best-*.cu/.cpp files "
                         "hold today's source with the winner's defines, not the source that "
                         "was measured"], r.output
        assert written == ["best-cpu-x86_64.cpp"]
    else:
        assert len(notes) == 1 and notes[0].startswith(
            f"note: no best-*.cu/.cpp written: run r1's sweep folder {sweep_dir} does not load "
            f"now ({sweep_dir}: no such file"), r.output
        assert written == []


def test_a_cluster_file_nested_too_deeply_is_one_line(tmp_path):
    """`kopt sweep --cluster deep.yaml` was a RecursionError traceback (PyYAML)."""
    d = base(tmp_path)
    deep = tmp_path / "deep.yaml"
    deep.write_text("provider: " + "[" * DEEP + "]" * DEEP + "\n")
    r = CliRunner().invoke(main, ["sweep", str(d), "--backend", "cpu", "--cluster", str(deep),
                                  "--store", str(tmp_path / "st")])
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    assert (f"--cluster {deep}: nested too deeply for a YAML parser (brackets or operators "
            "inside one another past Python's recursion limit); write it flatter") in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("lost", ["runs-folder", "run-record", "run-parts"])
def test_a_store_without_the_runs_record_is_named_damaged_not_no_run(tmp_path, lost):
    """A store whose runs/ folder (or one run's folder in it, or that folder's part files)
    was deleted while the other tables are there: `kopt report`, `kopt best --run`,
    `--resume` said "no run"; with the folder left empty they pointed to a damaged-file
    note that was never printed."""
    import shutil

    from test_store_safety import demo_store

    st = demo_store(tmp_path / "st")
    demo_store(st, run_id="r2")
    folder = st / "runs" / "sweep=demo" / "run=r1"
    if lost == "run-parts":
        for f in folder.rglob("*.parquet"):
            f.unlink()
    else:
        shutil.rmtree(st / "runs" if lost == "runs-folder" else folder)
    if lost == "run-parts":
        why = (f"store {st} is damaged or partial: run r1's record folder {folder} holds no "
               "part file; restore it from a copy of the store, or start a new run; run r1's "
               "rows are still in candidates (`kopt best`, `kopt query` read them)")
    elif lost == "runs-folder":
        why = (f"store {st} is damaged or partial: its runs/ folder (every run's record) is "
               f"missing while candidates are there; restore {st / 'runs'} from a copy of the "
               "store, or start a new run; run r1's rows are still in candidates (`kopt best`, "
               "`kopt query` read them)")
    else:
        why = (f"store {st} is damaged or partial: runs/ holds no record of run r1 (folder "
               f"{st / 'runs' / 'sweep=demo' / 'run=r1'} is missing); restore it from a copy of "
               "the store, or start a new run; run r1's rows are still in candidates (`kopt "
               "best`, `kopt query` read them)")
    repo = _repo(tmp_path)
    for args in (["report", "r1"], ["best", "demo", "--run", "r1"],
                 ["port", "r1", "--to", str(repo / "k.cpp")],
                 ["sweep", str(ROOT / "sweeps" / "vector_add"), "--backend", "cpu",
                  "--resume", "r1"]):
        r = CliRunner().invoke(main, [*args, "--store", str(st)])
        assert r.exit_code == (0 if args[0] == "best" else 2), r.output
        assert "Traceback" not in r.output, r.output
        if args[0] == "best":  # the rows it still has, and the note
            assert "best of demo (run r1)" in r.output and f"note: {why}" in " ".join(
                r.output.split()), r.output
        elif args[0] == "port":  # one line: the error, no note before it
            assert " ".join(r.output.split()) == f"error: {why}", r.output
        else:
            assert " ".join(r.output.split()).endswith(why), r.output
    assert sorted(p.name for p in (st / "candidates" / "sweep=demo").iterdir()) == ["run=r1",
                                                                                    "run=r2"]
    assert not (st / "runs" / "sweep=vector_add").exists()  # the resume started nothing


@pytest.mark.parametrize("change", ["none", "moved"])
def test_report_says_when_the_sweep_folder_is_gone(tmp_path, change):
    """`kopt report RUN` after the run's sweep folder was moved wrote no best source and said
    nothing (export says it since the fifth trial)."""
    from test_export import X86, cand

    from conftest import VADD_CPP, VADD_REF
    from kopt.core.spec import load_sweep
    from kopt.store.files import now, write_table

    sweep_dir = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 1024}]\n"
                            "params: {CHUNK: [64, 256]}\n", {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    st = tmp_path / "st"
    write_table(st, "candidates", "demo", "r1", [
        cand("r1", X86, "b", 1024, 2.0, {"CHUNK": 64}, base=True)])
    write_table(st, "runs", "demo", "r1", [{
        "run_id": "r1", "sweep": "demo", "event": "finished", "backend": "cpu",
        "sweep_dir": str(sweep_dir), "spec_hash": load_sweep(sweep_dir).spec_hash,
        "created_at": now()}])
    if change == "moved":
        sweep_dir.rename(tmp_path / "elsewhere")
    r = CliRunner().invoke(main, ["report", "r1", "--store", str(st), "--out",
                                  str(tmp_path / "rep")])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    notes = [ln for ln in r.output.splitlines() if ln.startswith("note:")]
    assert "# kopt report: demo, run r1" in (tmp_path / "rep" / "summary.md").read_text()
    if change == "none":
        assert notes == [], r.output
    else:
        assert len(notes) == 1 and notes[0].startswith(
            f"note: no best-*.cu/.cpp written: run r1's sweep folder {sweep_dir} does not load "
            f"now ({sweep_dir}: no such file"), r.output


@pytest.mark.parametrize("name", ["pic", "pic."])
def test_a_plot_name_without_an_extension_is_written_as_png_and_said(tmp_path, name):
    """`kopt triage T --plot pic` wrote `pic.png` (matplotlib's default) without a word:
    `pic` never appeared; `pic.` wrote `pic.png` too."""
    r = CliRunner().invoke(main, ["triage", str(ROOT / "tests" / "data" / "triage-h200" /
                                                "toy_graph0.json.gz"), "--no-store",
                                  "--plot", str(tmp_path / name)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert (f"note: --plot {tmp_path / name} has no extension: writing {tmp_path / 'pic.png'} "
            "(PNG; name .svg, .pdf or .jpeg for another format)") in " ".join(r.output.split())
    assert [p.name for p in tmp_path.iterdir()] == ["pic.png"]
    assert (tmp_path / "pic.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("cmd, column, text, kind", [
    ("best", "params or dims", "7", "object"),
    ("best", "params or dims", "{bad", "object"),
    ("report", "env", "{bad", "object"),
    ("report", "devices", "nope", "list"),
], ids=["best-int", "best-garbage", "report-env", "report-devices"])
def test_a_stored_json_column_that_is_damaged_is_one_line(tmp_path, cmd, column, text, kind):
    """A row whose JSON-text column is not what kopt writes (edited by hand, another tool):
    `kopt best` was an AttributeError or JSONDecodeError traceback, `kopt report` and
    `kopt propose` a JSONDecodeError traceback."""
    from test_store_safety import demo_store

    from kopt.store.files import write_table

    st = demo_store(tmp_path / "st")
    if cmd == "best":
        write_table(st, "candidates", "demo", "r1", [{
            "run_id": "r1", "sweep": "demo", "job_key": "z", "candidate_id": "z",
            "is_baseline": False, "status": "ok", "median_ms": 1.0, "dims": "{}",
            "device_class": "cpu-x", "params": text, "iteration": 1}])
        args = ["best", "demo"]
    else:
        import datetime as dt

        write_table(st, "runs", "demo", "r1", [{
            "run_id": "r1", "sweep": "demo", "event": "finished", "backend": "cpu",
            "created_at": dt.datetime(2026, 1, 2, 3, 4, 6, tzinfo=dt.timezone.utc), column: text}])
        args = ["report", "r1", "--out", str(tmp_path / "rep")]
    r = CliRunner().invoke(main, [*args, "--store", str(st)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert " ".join(r.output.split()) == (
        f"error: damaged store row: column {column!r} holds {text!r}, not a JSON {kind} as kopt "
        "writes it (the row was edited or written by another tool); find it with `kopt query` "
        "and move its part file out of the store, or restore it from a copy"), r.output


@pytest.mark.parametrize("where", ["table", "sweep"])
def test_a_file_where_a_store_folder_goes_is_noted(tmp_path, where):
    """`candidates` (or its `sweep=NAME` folder) replaced by a file: `kopt best` said "no
    correct candidate" with no word of the damage."""
    import shutil

    from test_store_safety import demo_store

    st = demo_store(tmp_path / "st")
    bad = st / "candidates" if where == "table" else st / "candidates" / "sweep=demo"
    shutil.rmtree(bad)
    bad.write_text("x")
    r = CliRunner().invoke(main, ["best", "demo", "--store", str(st)])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert (f"note: damaged store: {bad} is a file where a folder of table 'candidates' goes; "
            "what it held is not read: move it out of the store and restore the folder from a "
            "copy") in " ".join(r.output.split()), r.output


def test_ray_that_does_not_start_is_one_line(tmp_path, monkeypatch):
    """Two sweeps started at once on a loaded machine: each died with a 40-line traceback
    ending in Ray's "The current node timed out during startup" (raised by ray.init; here
    ray.init raises that same exception, as it did in the trial)."""
    import ray

    def no_start(*a, **k):
        raise Exception("The current node timed out during startup. This could happen because "
                        "some of the raylet failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(ray, "init", no_start)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # an earlier test's Ray: not ours
    r = CliRunner().invoke(main, ["sweep", str(base(tmp_path)), "--backend", "cpu", "--store",
                                  str(tmp_path / "st")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r
    assert " ".join(r.output.split()) == (
        "error: Ray did not start (an embedded local instance): The current node timed out "
        "during startup. This could happen because some of the raylet failed to startup or the "
        "GCS has become overloaded.; nothing was measured or stored: run the command again once "
        "the machine is less loaded, or start Ray once with `ray start --head` and pass "
        "--address auto"), r.output
    assert list((tmp_path / "st").rglob("*.parquet")) == []


def test_the_resume_command_shown_pastes_into_a_shell_with_odd_paths(tmp_path):
    """`finish it with `kopt sweep /x/o dd [ü]/sw (1) --store ... --resume R`` was printed
    unquoted: pasted into a shell it splits at the spaces and fails at the parenthesis."""
    import shlex

    from test_store_safety import demo_store

    st = demo_store(tmp_path / "o dd [ü] (1)" / "st", event="running")  # killed: interrupted
    r = CliRunner().invoke(main, ["best", "demo", "--store", str(st)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    cmd = text.split("finish it with `", 1)[1].split("`", 1)[0]
    assert shlex.split(cmd) == ["kopt", "sweep", str(st / "sweeps" / "demo"), "--store", str(st),
                                "--resume", "r1"], text


def test_a_contender_whose_build_is_not_at_hand_is_dropped_not_a_keyerror(tmp_path):
    """`kopt submit` after earlier submits (or with a source that does not build): the
    closing contest looked up an earlier version's artifact this run never built, and the
    command died with a KeyError traceback in kopt/loop/contests.py."""
    from test_strategies import TIMING, Faults, ScriptedDevice

    from kopt.core.catalog import load_catalog
    from kopt.loop.contests import SideBySide
    from kopt.run.builder import LocalBuilder
    from kopt.run.context import RunContext

    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in ("ba", "bc")})  # bb: built by another command
    dev, faults = ScriptedDevice({"ba": 1.0, "bc": 3.0}, set(), names=True), Faults()
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {c: {"[8]": (f"key-{c}", f"b{c}", 1.0, 0.01)} for c in ("a", "b", "c")}
    results, dropped, error = SideBySide(ctx, 0, "cpu-a", by_cand).run()
    assert error == "" and sorted(results) == ["a", "c"] and dev.calls == [["ba", "bc"]]
    assert dropped == {"b": "error: its build bb is not at hand in this run (a version submitted "
                            "by an earlier command, or a build that failed): it cannot be "
                            "re-measured side by side"}


@pytest.mark.parametrize("text, why", [
    (b"\xff\xfe", "not UTF-8 text (byte 0xff at offset 0); save it as UTF-8"),
    (b'extern "C" void solve(const float* x, int N) { }\n',
     "its prototype `solve(const float* x, int N)` is not the sweep's `solve(const float* x, "
     "float* y, int N)`; a version keeps the sweep's arguments (kopt calls it with them)"),
    (b"int x;\n", 'no `extern "C" void solve(...)` found'),
], ids=["not-utf8", "other-prototype", "no-solve"])
def test_a_submitted_source_kopt_cannot_call_is_refused(tmp_path, text, why):
    """`kopt submit --source bad.cpp`: a UnicodeDecodeError traceback (not UTF-8); a source
    with another prototype or none was accepted, built and called with the sweep's
    arguments."""
    from kopt.core.spec import load_sweep
    from kopt.loop.submitted import SubmitError
    from kopt.tools.submit import store_source

    space = load_sweep(base(tmp_path)).space("cpu")
    src = tmp_path / "v2.cpp"
    src.write_bytes(text)
    with pytest.raises(SubmitError) as e:
        store_source(tmp_path / "st", space, src)
    assert e.value.lines[0].startswith(f"--source {src}") and why in e.value.lines[0], e.value


def test_a_submit_note_that_is_not_utf8_is_refused(tmp_path):
    """`kopt submit ... --note bad.md` (not UTF-8) was a UnicodeDecodeError traceback."""
    (tmp_path / "v2.cpp").write_text(ADD)
    (tmp_path / "bad.md").write_bytes(b"\xff")
    r = CliRunner().invoke(main, ["submit", "r1", "--source", str(tmp_path / "v2.cpp"),
                                  "--methods", ILP_CLAIM, "--note",
                                  str(tmp_path / "bad.md"), "--store", str(tmp_path / "st")])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert " ".join(r.output.split()) == (f"refused: --note {tmp_path / 'bad.md'}: not UTF-8 text "
                                          "(byte 0xff at offset 0); save it as UTF-8"), r.output


def test_a_file_where_the_build_cache_folder_goes_is_refused_at_once(tmp_path):
    """`$KOPT_CACHE/builds` a file: two Ray "Unhandled error" tracebacks
    (FileExistsError) and every candidate a compile_error, though each compile worked."""
    import subprocess
    import sys

    cache = tmp_path / "kc"
    cache.mkdir()
    (cache / "builds").write_text("x")
    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "sweep", str(base(tmp_path)),
                        "--backend", "cpu", "--store", str(tmp_path / "st")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "KOPT_CACHE": str(cache)})
    assert p.returncode == 2 and p.stderr == (
        f"error: $KOPT_CACHE={str(cache)!r}: {cache / 'builds'} is a file, not a folder; point "
        "KOPT_CACHE at a folder for the build cache (default ~/.cache/kopt) (or move "
        f"{cache / 'builds'} out of the way)\n"), p.stdout + p.stderr
    assert not (tmp_path / "st").exists()


def test_an_interrupted_queued_sweeps_resume_hint_keeps_the_queue(tmp_path):
    """Ctrl-C of `kopt sweep ... --queue` printed a resume command without `--queue`: pasted,
    it ran the rest in its own process with an embedded Ray beside the service (new-user
    trial); --address/--cluster were dropped the same way."""
    import shlex

    from kopt.store.files import resume_command

    st = tmp_path / "st"
    assert shlex.split(resume_command("sweeps/v", st, "r1", queue=True)) == [
        "kopt", "sweep", "sweeps/v", "--store", str(st), "--resume", "r1", "--queue"]
    assert shlex.split(resume_command("sweeps/v", st, "r1", address="h:1"))[-2:] == [
        "--address", "h:1"]
    assert shlex.split(resume_command("sweeps/v", st, "r1", queue=True,
                                      cluster="c l.yaml"))[-3:] == [
        "--cluster", "c l.yaml", "--queue"]
    assert resume_command("sweeps/v", st, "r1").endswith("--resume r1")


def test_export_of_an_interrupted_run_says_so(tmp_path):
    """`kopt export SWEEP` after a Ctrl-C exported the interrupted run's best (1 of 6
    candidates measured) without a word, where `kopt best` notes it (new-user trial)."""
    from test_export import X86, cand

    from kopt.store.files import now, write_table

    st = tmp_path / "st"
    write_table(st, "candidates", "demo", "r1", [
        cand("r1", X86, "b", 1024, 2.0, {"CHUNK": 64}, base=True)])
    write_table(st, "runs", "demo", "r1", [{
        "run_id": "r1", "sweep": "demo", "event": "running", "backend": "cpu",
        "sweep_dir": str(tmp_path / "s"), "created_at": now()}])  # no lock: interrupted
    r = CliRunner().invoke(main, ["export", "demo", "--store", str(st), "--out",
                                  str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "note: run r1 was interrupted" in text and "--resume r1" in text, text


@pytest.mark.parametrize("with_note", [False, True])
def test_a_refused_claim_that_asks_for_a_reason_names_the_note_option(tmp_path, monkeypatch,
                                                                     with_note):
    """`kopt submit` refused a claim with "give a reason (the analysis note) ..." and never
    said how a reason is given (new-user trial: it is `--note FILE`)."""
    from kopt.tools import submit as sm

    lines = ["not_admitted: compute.ilp_unroll was skipped by the scan: it was ineffective "
             "under the current bottleneck (ineffective); give a reason (the analysis note) "
             "to try it all the same"]

    def refuse(*_a, **_k):
        raise sm.SubmitError(lines)

    monkeypatch.setattr(sm, "open_run", refuse)
    src = tmp_path / "v2.cpp"
    src.write_text("// v2\n")
    note = tmp_path / "why.md"
    note.write_text("why\n")
    args = ["submit", "r1", "--source", str(src), "--methods", ILP_CLAIM,
            "--store", str(tmp_path / "st")] + (["--note", str(note)] if with_note else [])
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    text = " ".join(r.output.split())
    assert text.startswith("refused: not_admitted:"), text
    assert ("`--note FILE`" in text) is not with_note, text


def test_a_cluster_or_routes_file_with_a_yaml_error_says_where(tmp_path):
    """A YAML syntax error in a --cluster or a triage --known file is one line with its line
    and column (it was PyYAML's first line alone: `while parsing a flow sequence`)."""
    from kopt.run.cluster import cluster_address
    from kopt.run.runner import SweepError
    from kopt.tools.triage import TriageError, load_routes

    f = tmp_path / "cl.yaml"
    f.write_text("provider: {type: local,\n  head_ip: [127.0.0.1\n")
    with pytest.raises(SweepError) as e:
        cluster_address(f)
    assert str(e.value) == (
        f"--cluster {f}: cannot read it (line 3, column 1: expected ',' or ']', but got "
        "'<stream end>' (while parsing a flow sequence that starts at line 2, column 12)); "
        "pass the Ray cluster-launcher YAML you brought up with `ray up`")
    r = tmp_path / "routes.yaml"
    r.write_text("routes:\n  - pattern: gemm\n\towner: me\n")
    with pytest.raises(TriageError) as e:
        load_routes(r)
    assert str(e.value) == (
        f"{r}: cannot read the routes file (line 3, column 1: found character '\\t' that "
        "cannot start any token (while scanning for the next token)); fix it there")


@pytest.mark.parametrize("arch", ["0", "-1", "9999", "99999", "abc", "1e3", ""])
def test_preflight_arch_is_bounded(tmp_path, arch):
    """0 read as the default sm_90, -1 and 99999 reached nvcc; now one line naming the flag,
    the format and the range, before anything is built."""
    from click.testing import CliRunner

    from kopt.cli.main import main

    res = CliRunner().invoke(main, ["preflight", str(base(tmp_path)), f"--arch={arch}"])
    assert res.exit_code == 2 and res.exception.__class__ is SystemExit
    assert res.output.splitlines()[-1] == (
        f"Error: Invalid value for '--arch': {arch!r} is not an SM arch: give major*10+minor, "
        "30 to 129 (e.g. 90 for sm_90, 120 for sm_120)"), res.output
