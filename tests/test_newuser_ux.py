"""What a new user tripped over (trial of the last session): which run is the latest, the
resume command an interrupted run's note names, plurals, `kopt serve stop`'s line, and
`kopt lineage`'s best."""

from __future__ import annotations

import json
import shlex

from click.testing import CliRunner
from test_export import cand
from test_propose_json import DC, SWEEP, store_with_a_profiled_winner

from conftest import started
from kopt.cli.main import main
from kopt.store.files import dumps, now, write_table

ADDR = "10.0.0.5:6379"


def interrupted_run(root, run_id="r2", options=None, sweep="vector_add"):
    """Run ``run_id`` of ``sweep``: one measured baseline, then its driver was stopped (its
    last event ``running`` and nobody holds its lock: interrupted)."""
    write_table(root, "candidates", sweep, run_id, [
        {**cand(run_id, DC, "b2", 1024, 2.0, {"CHUNK": 64}, base=True), "sweep": sweep,
         "backend": "cuda"}])
    write_table(root, "runs", sweep, run_id, [{
        "run_id": run_id, "sweep": sweep, "event": "running", "backend": "cuda",
        "sweep_dir": str(SWEEP), "created_at": now(), "options": dumps(options or {}),
        "devices": dumps([{"device_class": DC, "sm": 90, "name": "NVIDIA H200"}])}])


def test_best_and_propose_read_the_same_latest_run_and_say_it_was_interrupted(tmp_path):
    """`kopt best` took the latest run (interrupted by Ctrl-C), `kopt propose` the one before
    it (finished): the two disagreed on "latest" without a word (new-user trial). Both read
    the latest run now; the note says it was interrupted, how to resume it (with the
    `--address`/`--queue` it ran with) and which run is the latest finished one."""
    st = tmp_path / "st"
    store_with_a_profiled_winner(st)  # r1: finished, iteration 1 closed
    interrupted_run(st, options={"queue": ADDR, "address": ADDR})
    resume = (f"kopt sweep {shlex.quote(str(SWEEP))} --store {shlex.quote(str(st))} "
              f"--resume r2 --address {ADDR} --queue")

    b = CliRunner().invoke(main, ["best", "vector_add", "--store", str(st), "--format", "json"])
    assert b.exit_code == 0, b.output
    assert [r["run_id"] for r in json.loads(b.stdout)] == ["r2"]
    assert " ".join(b.stderr.split()) == (
        "note: run r2 was interrupted: these are the figures measured before it stopped; "
        f"finish it with `{resume}`; run r1 is the latest finished one "
        "(`kopt best vector_add --run r1`)")

    p = CliRunner().invoke(main, ["propose", str(SWEEP), "--store", str(st), "--format",
                                  "json"])
    assert p.exit_code == 0, p.output
    [plan] = json.loads(p.stdout)
    assert (plan["run_id"], plan["device_class"], plan["next_iteration"], plan["sm"]) == (
        "r2", DC, 1, 90)
    assert plan["selected"] == [] and plan["best"] is None
    assert " ".join(p.stderr.split()) == (
        "note: run r2 was interrupted: this plan goes on from what it stored; "
        f"finish it with `{resume}`; run r1 is the latest finished one "
        "(`kopt best vector_add --run r1`)")


def test_best_with_run_names_no_other_run(tmp_path):
    """`kopt best --run r2` asked for that run: its note names how to resume it only."""
    st = tmp_path / "st"
    store_with_a_profiled_winner(st)
    interrupted_run(st)
    b = CliRunner().invoke(main, ["best", "vector_add", "--store", str(st), "--run", "r2",
                                  "--format", "json"])
    assert b.exit_code == 0, b.output
    assert " ".join(b.stderr.split()) == (
        "note: run r2 was interrupted: these are the figures measured before it stopped; "
        f"finish it with `kopt sweep {shlex.quote(str(SWEEP))} --store "
        f"{shlex.quote(str(st))} --resume r2`")


def test_wait_on_an_interrupted_queued_run_keeps_the_queue(tmp_path):
    """`kopt wait` on a run interrupted in its iteration named a resume command without
    `--queue`/`--cluster`: pasted, it ran beside the service on an embedded Ray."""
    st = tmp_path / "st"
    interrupted_run(st, options={"queue": ADDR, "cluster": "my cluster.yaml"})
    r = CliRunner().invoke(main, ["wait", "r2", "--store", str(st), "--timeout", "0"])
    assert r.exit_code == 4, r.output
    assert " ".join(r.output.split()).endswith(
        "--resume r2 --cluster 'my cluster.yaml' --queue`"), r.output


def test_counted_is_singular_for_one_only():
    from kopt.util.words import counted

    assert [counted(n, "cpu device actor") for n in (0, 1, 2)] == [
        "0 cpu device actors", "1 cpu device actor", "2 cpu device actors"]
    assert counted(1, "try", "tries") == "1 try" and counted(3, "try", "tries") == "3 tries"
    assert counted(1.0, "second") == "1 second" and counted(2.5, "second") == "2.5 seconds"


def test_propose_counts_one_triple_as_one(tmp_path):
    """`kopt propose` printed "1 triples besides the baseline" (new-user trial)."""
    store_with_a_profiled_winner(tmp_path / "st")
    r = CliRunner().invoke(main, ["propose", str(SWEEP), "--store", str(tmp_path / "st")])
    assert r.exit_code == 0, r.output
    assert "\n1 triple besides the baseline:\n  (compute.thread_coarsening, none, none)\n" in (
        r.stdout), r.stdout


def test_serve_stop_names_the_launchpad_it_stopped(tmp_path):
    """`kopt serve stop` stopped the service's launchpad (its ready sweep driver) without a
    word (new-user trial): its line names it now."""
    import shutil
    import subprocess
    import tempfile
    import uuid
    from pathlib import Path

    from kopt.run.service import _start_ticks

    tmp = Path(f"/tmp/kopt-ray-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    folder = Path(tempfile.mkdtemp(prefix="kopt-launch-", dir="/tmp"))
    sock = str(folder / "launch.sock")
    # stand-ins: the head kopt started (its command line names ray and its folder) and its
    # launchpad (its command line names kopt.cli.launchpad and the socket)
    # (`started`: read at once, a loaded machine's /proc showed a command line empty)
    head = started(subprocess.Popen(["bash", "-c", "sleep 300; true", "ray", str(tmp)],
                                    start_new_session=True), str(tmp))
    pad = started(subprocess.Popen(["bash", "-c", "sleep 300; true", "kopt.cli.launchpad",
                                    sock]), sock)
    try:
        (tmp_path / "service.json").write_text(json.dumps(
            {"address": "127.0.0.1:1", "pgid": head.pid, "head_start": _start_ticks(head.pid),
             "temp_dir": str(tmp), "token": "x", "launch": sock, "launch_pid": pad.pid}))
        r = CliRunner().invoke(main, ["serve", "stop"], env={"KOPT_CACHE": str(tmp_path),
                                                              "COLUMNS": "400"})
        assert r.exit_code == 0, r.output
        assert r.output == (f"kopt service stopped (its Ray head: process group {head.pid}, "
                            f"which did not answer at 127.0.0.1:1, its launchpad: pid "
                            f"{pad.pid})\n")
        assert pad.wait(timeout=10) is not None and not folder.exists()
    finally:
        for p in (head, pad):
            if p.poll() is None:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_lineage_shows_the_loops_named_best(tmp_path):
    """`kopt lineage` showed each node's fastest candidate as its "best", where `kopt best`
    shows the loop's named best (a tie within noise re-measured side by side names the one
    with the fewest methods): the two named different candidates (new-user trial)."""
    from kopt.loop.state import IterState
    from kopt.tools.submit import LINEAGE_CAPTION

    st = tmp_path / "st"
    b, fast, simple = {"CHUNK": 64}, {"CHUNK": 256, "VEC": 4}, {"CHUNK": 1024}
    write_table(st, "candidates", "vector_add", "r1", [
        {**cand("r1", DC, cid, 1024, ms, d, base=cid == "b"), "sweep": "vector_add"}
        for cid, ms, d in (("b", 2.0, b), ("fast", 1.0, fast), ("simple", 1.02, simple))])
    state = IterState(iteration=1, best={"candidate_id": "simple"},
                      tie=[{"candidate_id": "fast"}, {"candidate_id": "simple"}])
    write_table(st, "iterations", "vector_add", "r1", [{
        "run_id": "r1", "sweep": "vector_add", "iteration": 1, "device_class": DC,
        "state": state.to_json(), "created_at": now()}])
    r = CliRunner().invoke(main, ["lineage", "r1", "--store", str(st)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        "it 1 sweep (source ) [no methods]: named best simple median 1.02 ms, 1.96x over its "
        "iteration's baseline; ok 3", LINEAGE_CAPTION]
    best = CliRunner().invoke(main, ["best", "vector_add", "--store", str(st), "--format",
                                     "json"])
    assert [x["candidate_id"] for x in json.loads(best.stdout)] == ["simple"]


def test_a_run_keeps_the_ray_head_it_was_started_on_for_its_resume_command(copy_fixture,
                                                                          tmp_path):
    """The run's record keeps --address/--cluster as given (kopt.driver.sweep.run_sweep passes
    them to the Driver), so that the resume command its notes name keeps them."""
    from kopt.core.expand import space_digest
    from kopt.core.spec import load_sweep
    from kopt.driver.sweep import Driver
    from kopt.run.builder import job_base
    from kopt.run.runner import LocalRunner
    from kopt.store.database import Database
    from kopt.store.files import recorded_resume_command

    sweep, store = load_sweep(copy_fixture("submit")), tmp_path / "store"
    drv = Driver(sweep, store, attach={"address": None, "cluster": "c l.yaml"})
    drv.runner, drv.space = LocalRunner("cpu", device_class="cpu-a"), sweep.space("cpu")
    drv.digest, drv._common = space_digest(drv.space), job_base(sweep, drv.space, False)
    drv._open_run("r1", "cpu", {})
    rec = Database(store).run("r1")
    opts = json.loads(rec["options"])
    assert (opts["address"], opts["cluster"], opts["queue"]) == (None, "c l.yaml", None)
    assert shlex.split(recorded_resume_command(store, rec))[-4:] == [
        "--resume", "r1", "--cluster", "c l.yaml"]


def test_wait_says_its_figures_are_geometric_means_over_several_sizes():
    """`kopt wait` printed "winner c1, 0.5 ms, 2.00x" for a sweep of two problem sizes:
    one size's median, as `kopt propose` shows, or what? It is the geometric mean over
    the sizes (as `kopt lineage` says); with one size nothing is added."""
    from kopt.cli.console import verdict_lines

    cls = {"device_class": "cpu-x", "iteration": 2, "winner": "c1", "median_ms": 0.5,
           "speedup": 2.0, "accepted": True, "reasons": [], "best": "c1",
           "bottleneck_before": None, "bottleneck_after": None, "ineffective": {},
           "stop": "", "candidates": ["c1", "c2"],
           "results": [{"candidate_id": "c2", "sizes": 2}, {"candidate_id": "c1", "sizes": 2}]}
    lines = verdict_lines({"classes": [cls]})
    assert lines[0] == ("cpu-x iteration 2: winner c1, 0.5 ms, 2.000x over the baseline "
                        "(geometric means over 2 problem sizes); accepted")
    cls["results"] = [{"candidate_id": "c1", "sizes": 1}]
    assert verdict_lines({"classes": [cls]})[0] == (
        "cpu-x iteration 2: winner c1, 0.5 ms, 2.000x over the baseline; accepted")
    assert lines[1:] == ["  best c1; bottleneck unknown -> unknown; ineffective: none; stop: no",
                         "  candidates: c1 c2"]


def test_wait_says_what_an_ineffective_method_was_judged_under():
    """`kopt wait` listed `compute.ilp_unroll` as ineffective while the next iteration's scan
    admitted it (its mark was "no gain over the old best", and the best had changed): the
    line now says what each was judged under and when it is admitted again."""
    from kopt.cli.console import ineffective_text

    assert ineffective_text({"compute.ilp_unroll": "unprofiled:c12", "memory.cache_policy":
                             "memory", "latency.split_k": None}) == (
        "compute.ilp_unroll (no gain over c12, unprofiled; admitted again once another "
        "candidate is the best), memory.cache_policy (under a memory bottleneck; admitted "
        "again once it changes), latency.split_k")
    assert ineffective_text({}) == ""



def finished_run(root, run_id, folder, median_ms):
    """Run ``run_id`` of vector_add from sweep folder ``folder``: one measured baseline."""
    write_table(root, "candidates", "vector_add", run_id, [
        {**cand(run_id, DC, "b" + run_id, 1024, median_ms, {"CHUNK": 64}, base=True),
         "sweep": "vector_add", "backend": "cuda"}])
    write_table(root, "runs", "vector_add", run_id, [{
        "run_id": run_id, "sweep": "vector_add", "event": "finished", "backend": "cuda",
        "sweep_dir": str(folder), "created_at": now(), "options": dumps({}),
        "devices": dumps([{"device_class": DC, "sm": 90, "name": "NVIDIA H200"}])}])


def test_best_says_when_sweeps_of_its_name_ran_from_other_folders(tmp_path):
    """Two folders may hold sweeps of one name: `kopt best NAME` took the latest run of
    either without a word (a new user's trial). A note now names the folders, whose run the
    figures are and how to pick another's; none with ``--run``, none for one folder."""
    st, other = tmp_path / "st", tmp_path / "copy" / "vector_add"
    finished_run(st, "r1", SWEEP, 2.0)
    finished_run(st, "r2", SWEEP, 1.8)
    args = ["best", "vector_add", "--store", str(st), "--format", "json"]
    one = CliRunner().invoke(main, args)
    assert one.exit_code == 0 and one.stderr == "", one.output
    finished_run(st, "r3", other, 1.5)
    b = CliRunner().invoke(main, args)
    assert b.exit_code == 0, b.output
    assert [r["run_id"] for r in json.loads(b.stdout)] == ["r3"]
    assert " ".join(b.stderr.split()) == (
        f"note: sweeps named 'vector_add' ran from 2 folders: these figures are run r3's, of "
        f"{other}; the others: {SWEEP} (latest run r2) (`kopt best vector_add --run RUN_ID` "
        "for one of theirs)")
    chosen = CliRunner().invoke(main, [*args, "--run", "r1"])
    assert chosen.exit_code == 0 and chosen.stderr == "", chosen.output
    assert [r["run_id"] for r in json.loads(chosen.stdout)] == ["r1"]
