"""`kopt wait`, `kopt submit --detach`, the review gate, the try limit as a
sweep.yaml setting and `kopt propose --format json` after a submitted method won, on the
CPU backend (the `submit` fixture: a dependent integer chain of WORK units)."""

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopt.cli.console import ConsoleProgress
from kopt.cli.main import main
from kopt.core import expand
from kopt.core.spec import SpecError, load_sweep
from kopt.driver.sweep import run_sweep
from kopt.loop.review import ReviewVerdict, judge, output_log
from kopt.store.database import Database
from kopt.store.files import RunLock, now
from kopt.tools import submit
from kopt.tools.submit import open_run, record
from kopt.util.command import run_command
from workers.reap import pid_alive as _alive

FAST = "compute.thread_coarsening"
FAST_CLAIM = f"{FAST},memory.none,latency.none"  # every axis said
VEC_CLAIM = "compute.none,memory.vectorized_access,latency.none"
# the review command: records its environment, refuses a source marked REVIEW_FAIL
REVIEW_PY = """
import json, os, sys
env = {k: v for k, v in os.environ.items() if k.startswith("KOPT_")}
open(f"review-{env['KOPT_ITERATION']}.json", "w").write(json.dumps(env))
if "REVIEW_FAIL" in open(env["KOPT_SOURCE"]).read():
    print("op test failed: REVIEW_FAIL in", os.path.basename(env["KOPT_SOURCE"]))
    sys.exit(7)
"""


def _sweep(folder: Path) -> None:
    """The fixture with T times the work (iteration 1's T = 2 is twice as slow as the
    baseline, T = 1: the baseline wins), a review command and one try per iteration."""
    src = folder / "base.cpp"
    src.write_text(src.read_text().replace("(long)WORK * UNIT", "(long)WORK * T * UNIT"))
    (folder / "sweep.yaml").write_text((folder / "sweep.yaml").read_text()
                                       + "review: {command: python review.py, timeout_s: 120}\n"
                                       "submit: {max_tries: 1}\n")
    (folder / "review.py").write_text(REVIEW_PY)


def _version(folder: Path, name: str, work: int, mark: str = "") -> Path:
    path = folder / "versions" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text((folder / "base.cpp").read_text().replace(
        "#define WORK 64", f"#define WORK {work}") + mark)
    return path


def _cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.slow
def test_detach_wait_review_and_propose(ray_local, copy_fixture, tmp_path, monkeypatch):
    folder = copy_fixture("submit")
    _sweep(folder)
    store = tmp_path / "store"
    run = run_sweep(load_sweep(folder), store, backend="cpu").run_id
    db = Database(store)
    # iteration 1: the baseline alone is the winner: not accepted, the command not run
    (cid, acc, reasons, cmd), = db.query(
        f"select candidate_id, accepted, reasons, command from reviews where run_id = '{run}'"
        " and iteration = 1")[1]
    base = db.query(f"select candidate_id from candidates where run_id = '{run}' and "
                    "is_baseline")[1][0][0]
    assert (cid, acc, cmd) == (base, False, None)
    assert json.loads(reasons) == ["no candidate beat its parent (the iteration's baseline): "
                                   "the winner is the baseline"]
    assert not (folder / "review-1.json").exists()

    # --detach: checked and recorded at once, run in the background; ids printed first
    v2 = _version(folder, "v2.cpp", 4)
    note = folder / "note.md"
    note.write_text("a CPU chain: no tensor cores, no launch_config to tune; coarsen "
                    "the chain; one pass, contiguous, no reuse: no kernel_fusion, "
                    "coalesced_access or tiling_smem")
    # (the background process attaches to this test's Ray instance: no second one started)
    res = _cli("submit", run, "--source", v2, "--methods", FAST_CLAIM, "--note", note, "--detach",
               "--format", "json", "--store", store, "--address",
               ray_local.get_runtime_context().gcs_address)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.splitlines()[-1])
    assert (out["run_id"], out["iteration"], out["try"]) == (run, 2, 1)
    printed = out["versions"][0]["candidate_ids"]
    assert len(printed) == 2 and Path(out["log"]).is_file()  # T = 1, 2
    res = _cli("wait", run, "--format", "json", "--timeout", 600, "--poll", 0.5,
               "--store", store)
    assert res.exit_code == 0, res.output
    (v,) = json.loads(res.output)["classes"]
    stored = {r[0] for r in db.query(f"select distinct candidate_id from candidates where "
                                     f"run_id = '{run}' and iteration = 2 and not is_baseline"
                                     )[1]}
    assert set(v["candidates"]) == stored == set(printed) and len(v["candidates"]) == 2
    assert [(r["candidate_id"], r["status"], r["error"], r["sizes_ok"]) for r in v["results"]
            ] == [(c, "ok", None, r["sizes"]) for c, r in zip(v["candidates"], v["results"])]
    assert json.loads(Path(out["log"]).with_suffix(".json").read_text())["rc"] == 0
    won = v["winner"]
    assert (v["iteration"], v["accepted"], v["reasons"]) == (2, True, []) and won in printed
    assert v["best"] == won and v["baseline"] == base and v["selected"] == [FAST]
    assert v["speedup"] > 4 and v["review"]["exit_status"] == 0 and v["stop"] == ""
    med, params = db.query(f"select median_ms, params from candidates where run_id = '{run}' "
                           f"and iteration = 2 and candidate_id = '{won}'")[1][0]
    assert v["median_ms"] == pytest.approx(med)
    env = json.loads((folder / "review-2.json").read_text())
    assert (env["KOPT_CANDIDATE_ID"], env["KOPT_RUN_ID"], env["KOPT_ITERATION"],
            json.loads(env["KOPT_PARAMS"]), env["KOPT_BACKEND"]) == (
        won, run, "2", json.loads(params), "cpu")
    assert Path(env["KOPT_SOURCE"]).read_text() == v2.read_text()

    # propose --format json after a submitted method won (a KeyError before)
    res = _cli("propose", folder, "--store", store, "--format", "json")
    assert res.exit_code == 0, res.output
    (p,) = json.loads(res.output)
    assert p["triples_from"] == "catalog" and p["best"]["candidate_id"] == won
    assert Path(p["best_source"]).read_text() == v2.read_text()
    assert p["triples"] and all(FAST not in t for t in p["triples"])
    assert [r["reason"] for r in p["scan"]["compute"] if r["method"] == FAST] == [
        "already_selected"]

    # iteration 3: faster again, but its validation command fails: rejected, stored, and
    # iteration 2's winner stays the best (the next parent)
    v3 = _version(folder, "v3.cpp", 1, "// REVIEW_FAIL\n")
    res = _cli("submit", run, "--source", v3, "--methods", VEC_CLAIM,
               "--note", note, "--format", "json", "--store", store)
    assert res.exit_code == 0, res.output
    made = json.loads(res.output.splitlines()[-1])["versions"][0]["candidate_ids"]
    said = res.output  # its console (stderr) and the JSON line
    res = _cli("wait", run, "--iteration", 3, "--format", "json", "--timeout", 60,
               "--store", store)
    (v,) = json.loads(res.output)["classes"]
    assert v["winner"] in made and (v["accepted"], v["best"]) == (False, won)
    assert sorted(v["candidates"]) == sorted(made) and v["selected"] == [FAST]
    # (also "not faster ... beyond noise" when this loaded machine's noise hides the gain)
    assert v["reasons"][-1] == "the review command exited with status 7"
    assert v["review"]["exit_status"] == 7 and not v["review"]["timed_out"]
    assert "op test failed: REVIEW_FAIL in v3.cpp" in v["review"]["output_tail"]
    # ... and `kopt submit` says so in one line, naming the file with the whole output
    log = output_log(store, run, 3, v["device_class"], v["winner"])
    assert v["review"]["output_log"] == str(log) and log.parent == store / "review-logs"
    assert log.read_text() == "op test failed: REVIEW_FAIL in v3.cpp\n"
    (line,) = [ln for ln in said.splitlines() if "rejected by the review gate" in ln]
    assert line.startswith(f"iteration 3 ({v['device_class']}): winner {v['winner']} "
                           "rejected by the review gate: ")
    assert line.endswith("the review command exited with status 7, its last line: op test "
                         f"failed: REVIEW_FAIL in v3.cpp (full output: {log})")
    _, rows = db.query(f"select accepted, exit_status from reviews where run_id = '{run}' "
                       "and iteration = 3")
    assert rows == [(False, 7)]
    (p,) = json.loads(_cli("propose", folder, "--store", store, "--format", "json").output)
    assert p["best"]["candidate_id"] == won and p["next_iteration"] == 4

    # the try limit from sweep.yaml (submit.max_tries 1), --max-tries overriding it
    res = _cli("submit", run, "--source", v3, "--methods", VEC_CLAIM,
               "--note", note, "--retry", "--store", store)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "iteration 3 of run" in res.output and "already had 1 try (--max-tries 1" in \
        res.output
    assert db.submit_tries(run, 3) == 1
    sweep = open_run(store, run)
    hashed = []  # each submitted source is hashed once (seconds for a CUTLASS source)
    for mod in (submit, expand):
        monkeypatch.setattr(mod, "space_digest",
                            lambda sp, real=expand.space_digest: hashed.append(sp.source)
                            or real(sp))
    v3b = v3.with_name("v3b.cpp")  # a new text: try 1's own would be measured already
    v3b.write_text(v3.read_text() + "\n// try 2: the same kernel, a new version\n")
    assert record(sweep, store, run, [v3b], ["memory.vectorized_access"], note.read_text(),
                  "me", retry=True, max_tries=2) == (3, 2)
    assert hashed.count(v3b) == 1
    monkeypatch.undo()
    # a try recorded but never run: not closed; while the run is locked or on --timeout,
    # one line and exit 3
    res = _cli("wait", run, "--timeout", 0.3, "--poll", 0.1, "--store", store)
    assert res.exit_code == 3 and "iteration 3 is not closed yet" in res.output
    with RunLock(store, run):
        res = _cli("wait", run, "--iteration", 2, "--timeout", 0.3, "--store", store)
    assert res.exit_code == 3 and "being written by pid" in res.output
    # the run interrupted after the try was recorded: it can no longer close, exit 1
    rec = {**db.run(run), "event": "interrupted", "created_at": now()}
    db.commit("runs", rec["sweep"], run, [rec])
    res = _cli("wait", run, "--timeout", 60, "--store", store)
    assert res.exit_code == 4
    assert f"run {run} was interrupted in iteration 3, before it closed; submit it again " \
        "with `kopt submit --retry`" in res.output
    # the reference was timed once, by the sweep: the submits reused its row
    _, ((timed, first_submit),) = db.query(
        f"select (select max(created_at) from reference where run_id = '{run}'), "
        f"(select min(created_at) from versions where run_id = '{run}')")
    assert timed < first_submit
    # a new iteration derives from the accepted best, not the rejected winner
    assert record(sweep, store, run, [v3], [], "", "me") == (4, 1)
    assert {v["parent_id"] for v in db.versions(run) if v["iteration"] == 4} == {won}


def _ranked(cid, speedup, rel_iqr, is_baseline=False):
    return {"candidate_id": cid, "speedup": speedup, "rel_iqr": rel_iqr,
            "is_baseline": is_baseline}


def test_review_judge_checks_every_size_and_noise():
    dims = [{"N": 1}, {"N": 2}]
    base = _ranked("b", 1.0, 0.0, True)
    ok = [{"dims": '{"N": 1}', "status": "ok"}, {"dims": '{"N":2}', "status": "ok"}]
    assert judge(_ranked("w", 1.5, 0.0), base, ok, dims) == []
    wrong = [ok[0], {"dims": '{"N": 2}', "status": "wrong_result"}]
    assert judge(_ranked("w", 1.5, 0.0), base, wrong, dims) == [
        "not correct on problem size {'N': 2}: wrong_result"]
    assert judge(_ranked("w", 1.5, 0.0), base, ok[:1], dims) == [
        "not correct on problem size {'N': 2}: not measured"]
    # within the noise of kopt.core.compare: 1% floor, or the smaller relative sigma
    assert judge(_ranked("w", 1.005, 0.0), base, ok, dims) == [
        "not faster than its parent (the iteration's baseline) beyond noise: "
        "1.005x, the noise threshold 1.000% (the 1% "
        "floor: the baseline's IQR is 0.0% of its median, the winner's 0.0%)"]
    noisy = _ranked("b", 1.0, 0.4, True)
    assert judge(_ranked("w", 1.2, 0.4), noisy, ok, dims)[0].startswith(
        "not faster than its parent (the iteration's baseline) beyond noise: "
        "1.2x")
    assert judge(_ranked("w", 1.5, 0.4), noisy, ok, dims) == []
    assert judge(base, base, ok, dims) == [
        "no candidate beat its parent (the iteration's baseline): the winner is the baseline"]
    assert judge(None, None, [], dims) == ["no correct candidate: nothing to accept"]


@pytest.mark.parametrize("extra, field", [
    ("review: {timeout_s: 5}\n", "review.command"),
    ("review: {command: pytest, timeout_s: 0}\n", "review.timeout_s"),
    ("submit: {max_tries: 0}\n", "submit.max_tries"),
    ("submit: {tries: 2}\n", "submit.tries"),
])
def test_review_and_submit_settings_are_validated(copy_fixture, extra, field):
    folder = copy_fixture("submit")
    (folder / "sweep.yaml").write_text((folder / "sweep.yaml").read_text() + extra)
    with pytest.raises(SpecError) as e:
        load_sweep(folder)
    lines = str(e.value).splitlines()
    assert len(lines) == 1 and f"sweep.yaml: field '{field}': " in lines[0], lines


def test_review_and_submit_settings_load(copy_fixture):
    folder = copy_fixture("submit")
    assert load_sweep(folder).review is None and load_sweep(folder).submit.max_tries == 3
    _sweep(folder)
    sw = load_sweep(folder)
    assert (sw.review.command, sw.review.timeout_s, sw.submit.max_tries) == (
        "python review.py", 120.0, 1)


def test_a_review_command_that_leaves_a_child_running_passes_by_its_own_exit_status(tmp_path):
    """A command that exits 0 leaving a background child (which holds its stdout open)
    passed: its verdict is its own exit status, not a timeout, and nothing waits for the
    child; the child is killed with the command's session. A timeout still
    kills the whole group."""
    step = run_command("review", "sh -c 'sleep 100 & exit 0'", tmp_path, 5)
    assert (step.exit_status, step.timed_out, step.output_tail) == (0, False, "")
    assert step.duration_s < 4
    log = tmp_path / "logs" / "review.log"
    step = run_command("review", "echo out; echo err >&2; sleep 100 & echo $! > child; exit 3",
                       tmp_path, 5, log=log)
    assert (step.exit_status, step.timed_out, step.output_tail) == (3, False, "out\n\nerr\n")
    assert step.duration_s < 4 and log.read_text() == "out\n\nerr\n"
    child = int((tmp_path / "child").read_text())
    for _ in range(50):  # the group is killed as the command returns; reaping may lag
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)
    step = run_command("review", "echo started; sleep 100", tmp_path, 0.5)
    assert (step.exit_status, step.timed_out, step.output_tail) == (-9, True, "started\n")
    assert step.duration_s < 4


def test_a_rejected_winner_is_one_line_on_the_console(capsys):
    """`kopt sweep` and `kopt submit` (both ConsoleProgress) print the review
    gate's rejection of a winner: its reasons, the command's exit status, the last line of
    its output and the file holding all of it."""
    log = output_log(Path("/s"), "r1", 2, "cpu x/1", "c1")
    assert log == Path("/s/review-logs/r1-it2-cpu_x_1-c1.log")
    noise = ("not faster than its parent (the iteration's baseline) beyond noise: "
             "1.005x, the noise threshold 1.000%")
    failed = ReviewVerdict("c1", False, [noise, "the review command exited with status 7"],
                     command="pytest", exit_status=7, output_log=str(log),
                     output_tail="collected 3\nFAILED t.py::op - assert 1 == 2\n\n")
    ConsoleProgress().on_review("cpu", 2, failed)
    passed = ReviewVerdict("c2", False, [noise], command="pytest", exit_status=0, output_log="L",
                     output_tail="")
    ConsoleProgress().on_review("cpu", 3, passed)
    slow = ReviewVerdict("c3", False, ["the review command ran past its 5 s (review.timeout_s) "
                                 "and was killed"], command="sleep 9", exit_status=-9,
                   timed_out=True, output_tail="started\n", output_log="M")
    ConsoleProgress().on_review("gpu", 4, slow)
    ConsoleProgress().on_review("gpu", 5, ReviewVerdict("c4", False, ["not correct on problem size "
                                                            "{'N': 2}: wrong_result"]))
    gate = "rejected by the review gate:"
    assert capsys.readouterr().err.splitlines() == [
        f"iteration 2 (cpu): winner c1 {gate} {noise}; the review command exited "
        f"with status 7, its last line: FAILED t.py::op - assert 1 == 2 (full output: {log})",
        f"iteration 3 (cpu): winner c2 {gate} {noise}; the review command exited "
        "with status 0, its last line: (no output) (full output: L)",
        f"iteration 4 (gpu): winner c3 {gate} the review command ran past its 5 s "
        "(review.timeout_s) and was killed, its last line: started (full output: M)",
        f"iteration 5 (gpu): winner c4 {gate} not correct on problem size "
        "{'N': 2}: wrong_result"]


def test_wait_on_a_run_interrupted_in_iteration_1_says_so_and_how_to_resume(tmp_path):
    """A run killed before its first iteration closed (no iteration stored or submitted):
    `kopt wait` said "no iteration 0"; it names iteration 1 and the resume command, exit 4.
    While the run is written, a timeout names iteration 1 too."""
    import shlex

    from test_store_safety import demo_store

    st = demo_store(tmp_path / "o dd (1)" / "st", event="running")  # no lock: interrupted
    for extra in ([], ["--iteration", "1"]):
        res = _cli("wait", "r1", "--store", st, *extra)
        assert res.exit_code == 4, res.output
        text = " ".join(res.output.split())
        head, cmd, _ = text.split("`")
        assert head == "error: run r1 was interrupted in iteration 1, before it closed; " \
            "resume it with "
        assert shlex.split(cmd) == ["kopt", "sweep", str(st / "sweeps" / "demo"), "--store",
                                    str(st), "--resume", "r1"]
    res = _cli("wait", "r1", "--store", st, "--iteration", 2)
    assert res.exit_code == 1 and "has no iteration 2 (its last is 0)" in res.output
    with RunLock(st, "r1"):
        res = _cli("wait", "r1", "--store", st, "--timeout", 0.2, "--poll", 0.1)
    assert res.exit_code == 3 and "waiting for iteration 1 of run r1: the run is being " \
        "written by pid" in " ".join(res.output.split())


def _check_reference(sweep, store, runner, resume):
    """The rows Driver._check_reference leaves to time (on ``runner``) for run ``resume``
    (None: a new run), timed."""
    from kopt.driver.sweep import Driver
    from kopt.run.builder import job_base

    drv = Driver(sweep, store, resume=resume)
    drv.runner, drv.classes, drv.space = runner, runner.classes(), sweep.space("cpu")
    drv._common = job_base(sweep, drv.space, False)
    drv._check_reference()  # what is left to time after the first iteration's candidates
    return [drv._time_reference(runner.live(dc)[0], d) for dc, d in drv._ref_todo]


def test_the_reference_is_timed_once_per_run_class_and_size(copy_fixture, tmp_path):
    """A resumed run or a submitted iteration re-timed the reference on every start (the
    latest timing won); it reuses the run's row for a class and problem size and times only
    the missing ones."""
    from kopt.run.runner import LocalRunner
    from kopt.store.files import dumps

    folder = copy_fixture("submit")
    (folder / "sweep.yaml").write_text((folder / "sweep.yaml").read_text().replace(
        "dims: [{N: 4096}]", "dims: [{N: 4096}, {N: 8192}]"))
    sweep, store, db = load_sweep(folder), tmp_path / "store", Database(tmp_path / "store")
    runner = LocalRunner("cpu", device_class="cpu-a")
    try:
        rows = _check_reference(sweep, store, runner, None)  # a new run: both sizes
        assert [(r["device_class"], r["dims"], r["status"]) for r in rows] == [
            ("cpu-a", dumps({"N": 4096}), "ok"), ("cpu-a", dumps({"N": 8192}), "ok")]
        db.commit("reference", sweep.name, "r1", [{**rows[0], "run_id": "r1",
                                                   "created_at": now()}])
        again = _check_reference(sweep, store, runner, "r1")  # only N 8192 is missing
        assert [(r["device_class"], r["dims"]) for r in again] == [
            ("cpu-a", dumps({"N": 8192}))]
        db.commit("reference", sweep.name, "r1", [{**again[0], "run_id": "r1",
                                                   "created_at": now()}])
        assert _check_reference(sweep, store, runner, "r1") == []
        assert db.timed_references("r1") == {("cpu-a", dumps({"N": 4096})),
                                             ("cpu-a", dumps({"N": 8192}))}
    finally:
        runner.close()


def test_a_device_lost_while_it_times_the_reference_is_a_row_and_the_next_one_times_it(
        copy_fixture, tmp_path):
    """test_cluster, 2026-12-01: a node killed while its device timed ref.py after the first
    iteration crashed the sweep with a DeviceError traceback. Its device's row is `lost`
    with the error, and the next live device of the class times the reference."""
    import types

    from kopt.driver.sweep import Driver
    from kopt.run.builder import job_base
    from kopt.run.runner import DeviceError, LocalRunner
    from kopt.util.phases import PhaseRecorder

    class FirstDies(LocalRunner):
        def call(self, i, method, *args, timeout=None):
            if i == 0 and method == "time_reference":
                raise DeviceError("device actor failed: The actor is unavailable")
            return super().call(i, method, *args, timeout=timeout)

    sweep = load_sweep(copy_fixture("submit"))
    runner = FirstDies("cpu", devices=2, device_class="cpu-a")
    written: list[tuple[str, list]] = []
    try:
        drv = Driver(sweep, tmp_path / "store")
        drv.runner, drv.space = runner, sweep.space("cpu")
        drv._common, drv.phases = job_base(sweep, drv.space, False), PhaseRecorder()
        drv.ctx = types.SimpleNamespace(run_id="r1", writer=types.SimpleNamespace(
            add=lambda t, rows: written.append((t, rows)), flush=lambda: None))
        drv._ref_todo = [("cpu-a", {"N": 4096})]
        drv._time_references()
    finally:
        runner.close()
    [(table, rows)] = written
    assert table == "reference"
    assert [(r["device_id"], r["status"]) for r in rows] == [
        (runner.infos[0]["device_id"], "lost"), (runner.infos[1]["device_id"], "ok")]
    assert rows[0]["error"] == "device actor failed: The actor is unavailable"
    assert rows[1]["median_ms"] > 0


def test_a_device_lost_while_it_checks_ref_py_is_one_line(copy_fixture, tmp_path):
    """The same loss before anything is built: one SweepError line, not a traceback."""
    import pytest

    from kopt.run.runner import DeviceError, LocalRunner
    from kopt.run.runner import SweepError as SE

    class Dead(LocalRunner):
        def call(self, i, method, *args, timeout=None):
            raise DeviceError("device actor failed: The actor is unavailable")

    runner = Dead("cpu", device_class="cpu-a")
    try:
        with pytest.raises(SE) as e:
            _check_reference(load_sweep(copy_fixture("submit")), tmp_path / "st", runner, None)
    finally:
        runner.close()
    assert str(e.value) == ("the cpu-a device checking ref.py at dims {'N': 4096} was lost "
                            "(device actor failed: The actor is unavailable); nothing was "
                            "built or measured: run the sweep again")


def test_waits_next_parent_is_the_closing_contests_best():
    """`kopt wait` said ``best``: the iteration's winner, where the loop's closing contest had
    named the first baseline (faster side by side) and `kopt submit` took that as the next
    parent. The verdict's ``best`` and ``selected`` are now the parent submit and propose
    take; ``winner`` stays the iteration's."""
    from kopt.loop.state import IterState
    from kopt.tools.wait import _class

    st = IterState(iteration=3, selected=["memory.vectorized_access"],
                   best={"candidate_id": "w3", "iteration": 3, "speedup": 1.8,
                         "median_ms": 2.6, "triple": [None, "memory.vectorized_access", None]},
                   closing={"best": {"candidate_id": "b0", "iteration": 1,
                                     "triple": [None, None, None]},
                            "dropped": {"w3": "replayed: calls on new values slower"},
                            "note": "the first baseline is faster"})
    rv = {"candidate_id": "w3", "accepted": True, "reasons": "[]", "speedup": 1.8,
          "median_ms": 2.6}
    v = _class("cpu-x86_64", st, rv, [])
    assert (v["winner"], v["best"], v["selected"]) == ("w3", "b0", [])
    # why the accepted winner is not the next parent, as data (it was only in text output)
    assert v["closing"] == {"best": "b0", "dropped": {"w3": "replayed: calls on new values "
                                                            "slower"},
                            "note": "the first baseline is faster"}
    st.closing = None  # no closing contest (the loop goes on): the winner is the parent
    v = _class("cpu-x86_64", st, rv, [])
    assert (v["best"], v["selected"], v["closing"]) == ("w3", ["memory.vectorized_access"],
                                                        None)


def test_a_wait_that_fails_says_so_on_stdout_as_json_too(tmp_path):
    """`kopt wait --format json` on no such run printed nothing on stdout (one stderr line):
    a loop driver parsing stdout got nothing. The failure is JSON there, as submit's is."""
    import json

    from click.testing import CliRunner

    from kopt.cli.main import main

    r = CliRunner().invoke(main, ["wait", "nosuch", "--store", str(tmp_path / "st"),
                                  "--format", "json"])
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert out["exit_status"] == 1 and out["error"].startswith("run nosuch: no such run in ")
