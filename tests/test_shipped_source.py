"""What kopt ships is what it measured: ``kopt report``'s best-*.cpp, ``kopt export``'s and
the file ``kopt port`` commits hold the exact source the winner was measured from (a
submitted version's text when one won, the store's copy when the sweep folder was edited
since the run), with its defines written in; and ``kopt port --bench`` judges the port as a
candidate is judged (several runs a side, kopt's noise rule, an exit status per verdict)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import VADD_CPP, VADD_REF, write_sweep
from kopt.cli.main import main
from kopt.core.spec import load_sweep
from kopt.store.database import Database
from kopt.store.files import now, write_table

FAST = "compute.thread_coarsening"
FAST_CLAIM = f"{FAST},memory.none,latency.none"  # every axis said
DC = "cpu-x86_64"


def kopt(*args, code=0):
    """``kopt ARGS`` in-process; the result (its exit status asserted)."""
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in (r.output or ""), r.output
    assert r.exit_code == code, r.output
    return r


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path, name, text):
    """A git repository whose one commit tracks ``name`` holding ``text``."""
    path.mkdir()
    (path / name).write_text(text)
    git(path, "init", "-q", "-b", "main")
    git(path, "-c", "user.name=u", "-c", "user.email=u@x", "add", "-A")
    git(path, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "the kernel")
    return path


def committed(repo, name):
    """File ``name`` as the port's branch (the repository's one kopt/ branch) holds it."""
    branch = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/kopt/")
    return subprocess.run(["git", "-C", str(repo), "show", f"{branch}:{name}"], check=True,
                          capture_output=True, text=True).stdout


def realized(header, defines, text):
    """The realized source, spelled out: header, comment, sorted #defines, blank, text."""
    return (f"// {header}\n// kopt: the candidate's -D defines, written into the source\n"
            + "".join(f"#define {k} {v}\n" for k, v in sorted(defines.items())) + "\n" + text)


@pytest.mark.slow
def test_report_export_and_port_ship_the_submitted_winner(ray_local, copy_fixture, tmp_path):
    """A CPU sweep, then a submitted version doing 16x less work wins iteration 2: every
    product writes that version's text byte for byte, not the sweep folder's base.cpp."""
    from kopt.driver.sweep import run_sweep

    folder = copy_fixture("submit")
    store = tmp_path / "store"
    run = run_sweep(load_sweep(folder), store, backend="cpu").run_id
    v2 = folder / "it2" / "v2_fast.cpp"
    v2.parent.mkdir()
    v2_text = (folder / "base.cpp").read_text().replace("#define WORK 64", "#define WORK 4")
    v2_text += "// v2: a quarter of the chain, kept as it was submitted\n"
    v2.write_text(v2_text)
    (folder / "why.md").write_text("the chain dominates: coarsen (1-3 need tensor cores, "
                                   "fp16 or a launch_config change this kernel does not need)")
    out = json.loads(kopt("submit", run, "--source", v2, "--methods", FAST_CLAIM, "--submitter",
                          "agent-x", "--note", folder / "why.md", "--store", store,
                          "--format", "json").stdout)
    [best] = json.loads(kopt("best", "submit", "--store", store, "--format", "json").stdout)
    cid, dc = best["candidate_id"], best["device_class"]
    assert cid in out["versions"][0]["candidates"]  # the submitted version won
    defines = json.loads(Database(store).candidate_build(run, cid)[1])
    assert defines and set(defines) == {"T"}

    kopt("report", run, "--store", store, "--out", tmp_path / "rep")
    shipped = (tmp_path / "rep" / f"best-{dc}.cpp").read_text()
    assert shipped == realized(f"kopt best candidate {cid} of run {run}", defines, v2_text)
    assert "v2_fast.cpp submitted by agent-x" in (tmp_path / "rep" / "summary.md").read_text()

    kopt("export", "submit", "--store", store, "--out", tmp_path / "exp")
    assert (tmp_path / "exp" / f"best-{dc}.cpp").read_text() == realized(
        f"kopt best candidate {cid} of run {run} on {dc}", defines, v2_text)

    repo = make_repo(tmp_path / "repo", "kernel.cpp", (folder / "base.cpp").read_text())
    r = kopt("port", run, "--to", repo / "kernel.cpp", "--store", store)
    assert "ported: branch kopt/port-" in r.output
    ported = committed(repo, "kernel.cpp")
    first = ported.split("\n", 1)[0]
    assert first.startswith(f"// kopt port: sweep submit, run {run}, candidate {cid} ({dc}, ")
    assert ported == realized(first[3:], defines, v2_text)


def own_source_store(tmp_path, digest="h1"):
    """A finished run of a sweep whose best (c1, CHUNK=256) is the sweep's own source, the
    source stored in ``sources`` as the run stores it; the sweep folder and the store."""
    sweep_dir = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 1024}]\n"
                            "params: {CHUNK: [64, 256]}\n", {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    measured = (sweep_dir / "k.cpp").read_text()
    st = tmp_path / "st"
    rows = []
    for cid, chunk, ms in (("b", 64, 2.0), ("c1", 256, 1.0)):
        rows.append({"run_id": "r1", "sweep": "demo", "iteration": 1, "job_key": cid,
                     "candidate_id": cid, "is_baseline": cid == "b", "status": "ok",
                     "median_ms": ms, "iqr_ms": ms / 50, "samples_ms": [ms] * 3,
                     "dims": json.dumps({"N": 1024}), "device_class": DC, "backend": "cpu",
                     "params": json.dumps({"CHUNK": chunk}),
                     "defines": json.dumps({"CHUNK": chunk}), "source_hash": digest,
                     "submitter": "sweep", "created_at": now()})
    write_table(st, "candidates", "demo", "r1", rows)
    write_table(st, "runs", "demo", "r1", [{
        "run_id": "r1", "sweep": "demo", "event": "finished", "backend": "cpu",
        "sweep_dir": str(sweep_dir), "spec_hash": load_sweep(sweep_dir).spec_hash,
        "created_at": now()}])
    write_table(st, "sources", "demo", "r1", [{
        "source_hash": digest, "name": "k.cpp", "text": measured, "created_at": now()}])
    return sweep_dir, st, measured


def test_an_edited_sweep_folder_still_ships_the_measured_text_with_a_note(tmp_path):
    """The kernel edited after the run: export and port write the measured text (the
    store's copy) and say the folder changed; the edit is never shipped."""
    sweep_dir, st, measured = own_source_store(tmp_path)
    (sweep_dir / "k.cpp").write_text(VADD_CPP.replace("x[i] + y[i]", "x[i] * y[i]")
                                     + "// edited after the run\n")
    r = kopt("export", "demo", "--store", st, "--out", tmp_path / "out")
    notes = [ln for ln in r.output.splitlines() if ln.startswith("note:")]
    assert notes == [f"note: run r1's sweep folder {sweep_dir} changed since the run "
                     "(sweep.yaml, a source, a header or ref.py): the best-*.cu/.cpp files "
                     "hold the source that was measured (the store's copy), not today's"]
    shipped = (tmp_path / "out" / f"best-{DC}.cpp").read_text()
    assert shipped == realized(f"kopt best candidate c1 of run r1 on {DC}", {"CHUNK": 256},
                               measured)
    assert "edited after the run" not in shipped
    repo = make_repo(tmp_path / "repo", "k.cpp", "int x;\n")
    r = kopt("port", "r1", "--to", repo / "k.cpp", "--store", st)
    assert notes[0] in "note: " + " ".join(r.output.split("note: ", 1)[1].split())
    assert committed(repo, "k.cpp").split("\n", 1)[1] == shipped.split("\n", 1)[1]


def test_a_submitted_winner_whose_stored_copy_is_lost_is_never_the_sweep_source(tmp_path):
    """The best is a submitted version and the store lost its copy: export writes no
    source (a note says why) rather than the sweep folder's; port refuses, nothing changed."""
    sweep_dir, st, _ = own_source_store(tmp_path, digest="h1")
    write_table(st, "candidates", "demo", "r1", [{
        "run_id": "r1", "sweep": "demo", "iteration": 2, "job_key": "v", "candidate_id": "v2",
        "is_baseline": False, "status": "ok", "median_ms": 0.5, "iqr_ms": 0.01,
        "samples_ms": [0.5] * 3, "dims": json.dumps({"N": 1024}), "device_class": DC,
        "backend": "cpu", "params": '{"CHUNK": 64}', "defines": '{"CHUNK": 64}',
        "source_hash": "h2", "submitter": "agent", "created_at": now()}])
    r = kopt("export", "demo", "--store", st, "--out", tmp_path / "out")
    assert not list((tmp_path / "out").glob("best-*"))
    assert (f"note: {st}: no stored source h2 (table sources): candidate v2 of run r1 is a "
            "submitted version") in r.output
    repo = make_repo(tmp_path / "repo", "k.cpp", "int x;\n")
    r = kopt("port", "r1", "--to", repo / "k.cpp", "--store", st, code=2)
    assert "no stored source h2" in r.output and "nothing was changed" in r.output
    assert git(repo, "branch", "--list", "kopt/*") == ""


# the fake bench: BEFORE_FIG on the base commit, AFTER_FIG on the port (told apart by the
# ported file's first line); each run's figure is a time in ms
BENCH = ("if head -1 k.cpp | grep -q 'kopt port'; then echo \"took {after} ms\"; "
         "else echo \"took {before} ms\"; fi")


@pytest.mark.parametrize("before, after, verdict, code, status", [
    (10.0, 5.0, "FASTER", 0, "ok"),
    (5.0, 10.0, "SLOWER", 3, "slower"),
    (10.0, 10.05, "TIED", 4, "tied"),   # 0.5%: under the 1% floor, within noise
], ids=["faster", "slower", "tied"])
def test_port_bench_runs_each_side_and_judges_by_the_noise_rule(tmp_path, before, after,
                                                                 verdict, code, status):
    _, st, _ = own_source_store(tmp_path)
    repo = make_repo(tmp_path / "repo", "k.cpp", "int x;\n")
    r = kopt("port", "r1", "--to", repo / "k.cpp", "--store", st, "--bench",
             BENCH.format(before=before, after=after), "--bench-runs", 3, code=code)
    text = " ".join(r.output.split())
    assert f"bench before: median {before:.4g}, IQR 0 (3 / 3 runs, interleaved" in text
    assert f"bench after: median {after:.4g}, IQR 0" in text
    assert f"{verdict}: after / before {after / before:.3g} ({before / after:.3g}x)" in text
    assert ("ported: branch" in text) == (code == 0)
    rows = json.loads(kopt("query", "--store", st, "--format", "json",
                           "select step, run_no, bench_value, exit_status, status from ports "
                           "order by step, run_no").stdout)
    assert [(x["step"], x["run_no"], x["bench_value"]) for x in rows] == [
        ("bench", k, after) for k in (1, 2, 3)] + [("bench_before", k, before) for k in (1, 2, 3)]
    assert {x["status"] for x in rows} == {status}
    # the base commit's worktree is gone; the port's branch stays for inspection
    assert len(git(repo, "worktree", "list").splitlines()) == 2


def test_port_bench_without_a_figure_fails_and_old_ports_rows_read_run_no_as_null(tmp_path):
    _, st, _ = own_source_store(tmp_path)
    write_table(st, "ports", "demo", "r0", [{  # a row written before run_no existed
        "port_id": "old", "run_id": "r0", "sweep": "demo", "step": "bench",
        "bench_value": 1.0, "status": "ok", "created_at": now()}])
    repo = make_repo(tmp_path / "repo", "k.cpp", "int x;\n")
    r = kopt("port", "r1", "--to", repo / "k.cpp", "--store", st, "--bench", "echo none",
             code=1)
    assert "bench failed" in r.output
    rows = json.loads(kopt("query", "--store", st, "--format", "json",
                           "select port_id, step, run_no from ports order by run_no").stdout)
    assert rows[0]["run_no"] == 1 and rows[-1] == {"port_id": "old", "step": "bench",
                                                   "run_no": None}


def test_the_stored_copy_is_named_by_an_absolute_path(tmp_path, monkeypatch):
    """`kopt propose`'s ``best_source`` named the store's copy relative to the folder the
    command ran in (``kopt-store/source-files/...``, the default store): a loop driver that
    reads it from elsewhere found nothing. It is absolute, the copy byte for byte."""
    from kopt.loop.measured import stored_copy
    from kopt.store.database import Database, Writer
    from kopt.store.files import now

    monkeypatch.chdir(tmp_path)
    text = 'extern "C" void solve(const float* x, float* y, int n) {}\r\n// crlf kept\n'
    w = Writer(Path("st"), "s", "r1")
    w.add("sources", [{"source_hash": "abc", "name": "v2.cpp", "text": text,
                       "created_at": now()}])
    w.flush()
    path, got = stored_copy(Database("st"), "abc")
    assert path.is_absolute() and path == tmp_path / "st" / "source-files" / "abc" / "v2.cpp"
    assert got == text and path.read_bytes() == text.encode()
