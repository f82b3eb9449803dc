"""Issue 15: `kopt wait`, `kopt submit --detach`, the review gate, the try limit as a
sweep.yaml setting and `kopt propose --format json` after a submitted method won, on the
CPU backend (the `submit` fixture: a dependent integer chain of WORK units)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kopt.cli import main
from kopt.database import Database
from kopt.pipeline import run_sweep
from kopt.review import judge
from kopt.spec import SpecError, load_sweep
from kopt.store import RunLock, now
from kopt.submit import open_run, record

FAST = "compute.thread_coarsening"
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
def test_detach_wait_review_and_propose(ray_local, copy_fixture, tmp_path):
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
    assert json.loads(reasons) == ["no candidate beat its parent: the winner is the "
                                   "iteration's baseline"]
    assert not (folder / "review-1.json").exists()

    # --detach: checked and recorded at once, run in the background; ids printed first
    v2 = _version(folder, "v2.cpp", 4)
    note = folder / "note.md"
    note.write_text("a CPU chain: no tensor cores; coarsen the chain")
    # (the background process attaches to this test's Ray instance: no second one started)
    res = _cli("submit", run, "--source", v2, "--methods", FAST, "--note", note, "--detach",
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
    res = _cli("submit", run, "--source", v3, "--methods", "memory.vectorized_access",
               "--note", note, "--format", "json", "--store", store)
    assert res.exit_code == 0, res.output
    made = json.loads(res.output.splitlines()[-1])["versions"][0]["candidate_ids"]
    said = res.output
    res = _cli("wait", run, "--iteration", 3, "--format", "json", "--timeout", 60,
               "--store", store)
    (v,) = json.loads(res.output)["classes"]
    assert v["winner"] in made and (v["accepted"], v["best"]) == (False, won)
    # the run's own output says so (trial 7: only `kopt wait` and `reviews` did)
    said = " ".join(said.split())  # the console wraps long lines
    assert (f"iteration 3 ({v['device_class']}): the review gate rejected the winner "
            f"{v['winner']}: ") in said and f"the best stays {won}" in said, said
    assert sorted(v["candidates"]) == sorted(made) and v["selected"] == [FAST]
    # (also "not faster ... beyond noise" when this loaded machine's noise hides the gain)
    assert v["reasons"][-1] == "the review command exited with status 7"
    assert v["review"]["exit_status"] == 7 and not v["review"]["timed_out"]
    assert "op test failed: REVIEW_FAIL in v3.cpp" in v["review"]["output_tail"]
    _, rows = db.query(f"select accepted, exit_status from reviews where run_id = '{run}' "
                       "and iteration = 3")
    assert rows == [(False, 7)]
    (p,) = json.loads(_cli("propose", folder, "--store", store, "--format", "json").output)
    assert p["best"]["candidate_id"] == won and p["next_iteration"] == 4

    # the try limit from sweep.yaml (submit.max_tries 1), --max-tries overriding it
    res = _cli("submit", run, "--source", v3, "--methods", "memory.vectorized_access",
               "--note", note, "--retry", "--store", store)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "iteration 3 of run" in res.output and "already had 1 tries (--max-tries 1" in \
        res.output
    assert db.submit_tries(run, 3) == 1
    sweep = open_run(store, run)
    assert record(sweep, store, run, [v3], ["memory.vectorized_access"], "why", "me",
                  retry=True, max_tries=2) == (3, 2)
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
    assert res.exit_code == 1
    assert f"run {run} was interrupted before iteration 3 closed" in res.output
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
    # within the noise of kopt.compare: 1% floor, or the smaller relative sigma
    assert judge(_ranked("w", 1.005, 0.0), base, ok, dims) == [
        "not faster than its parent beyond noise: 1.005x, the noise threshold 1.000%"]
    noisy = _ranked("b", 1.0, 0.4, True)
    assert judge(_ranked("w", 1.2, 0.4), noisy, ok, dims)[0].startswith(
        "not faster than its parent beyond noise: 1.2x")
    assert judge(_ranked("w", 1.5, 0.4), noisy, ok, dims) == []
    assert judge(base, base, ok, dims) == [
        "no candidate beat its parent: the winner is the iteration's baseline"]
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
    head, *lines = str(e.value).splitlines()
    assert head.endswith("sweep.yaml: invalid sweep spec:")
    assert len(lines) == 1 and lines[0].strip().startswith(f"field '{field}'")


def test_review_and_submit_settings_load(copy_fixture):
    folder = copy_fixture("submit")
    assert load_sweep(folder).review is None and load_sweep(folder).submit.max_tries == 3
    _sweep(folder)
    sw = load_sweep(folder)
    assert (sw.review.command, sw.review.timeout_s, sw.submit.max_tries) == (
        "python review.py", 120.0, 1)
