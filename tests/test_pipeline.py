"""The whole pipeline on the CPU backend on a real local Ray cluster, and --resume."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT
from kopt.core.compare import label
from kopt.core.spec import load_sweep
from kopt.driver.sweep import run_sweep
from kopt.run.callbacks import ProgressCallback
from kopt.store.database import query
from kopt.store.select import best, top
from workers import isolation

pytestmark = pytest.mark.slow


def test_faults_are_rows_and_the_sweep_finishes(ray_local, copy_fixture, tmp_path):
    sweep = load_sweep(copy_fixture("faulty"))
    s = run_sweep(sweep, tmp_path / "store", backend="cpu")
    assert s.n_candidates == 6 and s.n_jobs == 6 and not s.interrupted
    assert s.status_counts == {"ok": 1, "wrong_result": 1, "crashed": 2, "timeout": 1,
                               "compile_error": 1}
    _, rows = query("select params, status, error, median_ms, speedup from candidates "
                    "order by params", tmp_path / "store")
    by_mode = {json.loads(r[0])["MODE"]: r for r in rows}
    assert by_mode[0][1:2] == ("ok",) and by_mode[0][3] > 0 and by_mode[0][4] == 1.0
    assert by_mode[1][1] == "wrong_result" and "elements differ" in by_mode[1][2]
    assert by_mode[2][1] == "crashed" and "SIGSEGV" in by_mode[2][2]
    assert by_mode[3][1] == "timeout"
    assert by_mode[4][1] == "crashed" and "SIGABRT" in by_mode[4][2]
    assert by_mode[5][1] == "compile_error" and "MODE 5 is a compile error" in by_mode[5][2]
    _, runs = query("select status, n_jobs, backend from runs", tmp_path / "store")
    assert runs == [("finished", 6, "cpu")]
    # every measured row says which sandbox its candidate ran in (a compile error ran none)
    _, iso = query("select distinct isolation from candidates where status != "
                   "'compile_error'", tmp_path / "store")
    assert iso == [(isolation.available().kind,)] and iso[0][0] != "none"


def test_vector_add_cpu_sweep_and_best(ray_local, tmp_path):
    store = tmp_path / "store"
    s = run_sweep(load_sweep(ROOT / "sweeps" / "vector_add"), store, backend="cpu",
                  max_candidates=8)
    assert s.status_counts == {"ok": 8}
    _, rows = query("select count(*), count(distinct candidate_id), sum(is_baseline::int), "
                    "bool_and(n_samples >= 3), bool_and(median_ms > 0), "
                    "bool_and(compile_s > 0), bool_and(max_abs_err = 0), "
                    "bool_and(len(samples_ms) = n_samples) from candidates", store)
    assert rows == [(8, 8, 1, True, True, True, True, True)]
    b = best("vector_add", store)
    assert len(b) == 1 and b[0]["device_class"].startswith("cpu-")
    # kopt best names the loop's best: its closing contest's (the baseline and the winner
    # re-measured side by side), or the baseline when nothing beat it; its figures are its
    # own row's (which one wins among 8 near-equal candidates is up to the machine; the
    # ranking itself is tested on tests/fixtures/steps, whose outcome is certain)
    state = json.loads(query("select state from iterations order by created_at desc limit 1",
                             store)[1][0][0])
    named = state["closing"]["best"]["candidate_id"]
    assert b[0]["candidate_id"] == named and b[0]["named"]
    _, own = query(f"select median_ms, speedup from candidates where candidate_id = '{named}'",
                   store)
    assert own == [(b[0]["median_ms"], b[0]["speedup"])]


def _smaller(folder, samples, keep_space=False):
    """The ``cluster`` fixture copied into ``folder`` made CI-sized: ``samples`` samples per
    candidate (40 in the fixture) and, unless ``keep_space``, 8 launch configs (of 24)."""
    spec = folder / "sweep.yaml"
    text = spec.read_text().replace("min_samples: 40, max_samples: 40",
                                    f"min_samples: {samples}, max_samples: {samples}")
    if not keep_space:
        text = text.replace("U: [1, 2, 3, 4, 5, 6, 7, 8], V: [1, 2, 3]",
                            "U: [1, 2, 3, 4], V: [1, 2]")
    assert text != spec.read_text()
    spec.write_text(text)
    return folder


def _kopt(*args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "kopt.cli.main", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)


def _slow_jobs(tmp_path) -> Path:
    """The ``cluster`` fixture with 100 samples a candidate: its call repeats a pass over 64K
    floats 400 times (about 4 ms on the CI machine, bound by compute, not by memory
    bandwidth), so a job takes 0.4 s or more there (its checks and warm-up besides), while its
    small size keeps the reference, the contests' checks and the closing contest cheap. (A
    4x larger vector_add, 8M floats, made jobs slow by memory traffic: its closing contest
    and reference alone took 50 s of each run on the loaded CI machine.)"""
    d = tmp_path / "cluster"
    shutil.copytree(FIXTURES / "cluster", d)
    src = d / "spin.cpp"  # a source of its own: the session's other cluster sweeps never hit
    src.write_text("// killed mid-run\n" + src.read_text())  # builds of a killed driver
    return _smaller(d, 100, keep_space=True)


def test_resume_after_the_driver_is_killed(tmp_path):
    """The driver and everything it started SIGKILLed once the store holds a measured row;
    the resume measures the rest, nothing twice. The store flushes every 2 s and its first
    flush is due with the first row, so the poll sees one row while the other eleven jobs
    (0.4 s or more each: :func:`_slow_jobs`) still run. With 8 jobs of vector_add's CPU
    size (0.07 s or more each, idle) they once all ended inside one flush."""
    store = tmp_path / "store"
    args = ["sweep", str(_slow_jobs(tmp_path)), "--store", str(store),
            "--backend", "cpu", "--max-candidates", "12"]
    p = _kopt(*args)
    deadline = time.time() + 240
    n = 0
    while time.time() < deadline and p.poll() is None:
        time.sleep(0.5)
        try:
            n = query("select count(*) from candidates", store)[1][0][0]
        except Exception:
            n = 0
        if n >= 1:
            break
    assert p.poll() is None, p.stdout.read()
    os.killpg(p.pid, signal.SIGKILL)  # the driver and everything it started
    p.wait()
    assert 1 <= n < 12
    before = dict(query("select job_key, median_ms from candidates", store)[1])
    run_id = query("select run_id from runs", store)[1][0][0]
    # its last event says running, but no driver holds its lock: the next command knows
    assert query("select status from runs", store)[1] == [("interrupted",)]

    r = _kopt(*args, "--resume", run_id)
    out, _ = r.communicate(timeout=400)
    assert r.returncode == 0, out
    assert f"({len(before)} measured before this resume, {12 - len(before)} now)" in out
    _, rows = query("select job_key, median_ms from candidates", store)
    assert len(rows) == 12 and len({k for k, _ in rows}) == 12
    after = dict(rows)
    assert all(after[k] == v for k, v in before.items())  # nothing measured twice
    assert query("select status from runs", store)[1] == [("finished",)]


def test_sigterm_stops_a_sweep_like_ctrl_c(tmp_path):
    """SIGTERM to the driver alone (a scheduler's stop): measured rows flushed, the run
    marked interrupted, the resume command printed, exit 143 = 128 + SIGTERM (130 before:
    Ctrl-C's code)."""
    store = tmp_path / "store"
    # stopped at the first flushed row: see test_resume_after_the_driver_is_killed
    p = _kopt("sweep", str(_slow_jobs(tmp_path)), "--store", str(store),
              "--backend", "cpu", "--max-candidates", "12")
    deadline, n = time.time() + 240, 0
    while time.time() < deadline and p.poll() is None and n < 1:
        time.sleep(0.5)
        try:
            n = query("select count(*) from candidates", store)[1][0][0]
        except Exception:
            n = 0
    assert p.poll() is None, p.stdout.read()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 143, out
    run_id = query("select run_id from runs", store)[1][0][0]
    assert f"--resume {run_id}" in out and "interrupted" in out
    assert query("select status from runs", store)[1] == [("interrupted",)]
    assert query("select count(*) from candidates", store)[1][0][0] >= n


A, B, C = "compute.thread_coarsening", "compute.ilp_unroll", "compute.branch_eliminate"


def _states(store):
    """Iteration -> the latest stored state (JSON) of the one device class."""
    _, rows = query("select iteration, state from iterations qualify row_number() over "
                    "(partition by iteration order by created_at desc) = 1", store)
    return {it: json.loads(js) for it, js in rows}


def but_noise(note: str) -> str:
    """A closing note without its warning of noisy contenders (kopt.core.winner
    ``_noisy_note``), which other work on the test machine may add: the rest is
    deterministic."""
    return re.sub(r"(; )?side by side, the samples of .*? on an idle machine", "", note)


def _closing_rows(store):
    """The closing contest's rows (iteration 0): candidate id -> (median, n, label, winner)."""
    _, rows = query("select candidate_id, median_ms, n_samples, label, winner from contests "
                    "where iteration = 0", store)
    return {c: (m, n, lab, w) for c, m, n, lab, w in rows}


def test_two_iteration_loop_on_cpu(ray_local, copy_fixture, tmp_path):
    """tests/fixtures/steps: methods cut the work by 16 (A), 8 (B) and 4 (C), so every step
    of the loop is certain; the closing contest re-measures the first baseline and both
    winners side by side and the loop's total comes from it alone."""
    from kopt.cli.console import closing_line
    from kopt.core.compare import RULE
    from kopt.loop.propose import propose
    from kopt.tools.report import write_report

    store = tmp_path / "store"
    sweep = load_sweep(copy_fixture("steps"))
    s = run_sweep(sweep, store, backend="cpu", iterations=2)
    st = s.states["cpu-" + os.uname().machine]
    states = _states(store)
    assert sorted(states) == [1, 2]
    first, second = states[1], states[2]
    # 16x less work: iteration 1 selects A (B: 8x, C: 4x, both gains); no NCU on a CPU
    assert first["selected"] == [A] and first["best"]["defines"] == {"T": 1, "A": 1}
    assert first["ineffective"] == {} and first["triggered"] is None
    assert first["stop"] == "" and first["gain"] > 4
    # iteration 2 runs from A: B on top of it is 8x less work again, C only 4x
    _, base2 = query("select defines from candidates where iteration = 2 and is_baseline", store)
    assert json.loads(base2[0][0]) == {"T": 1, "A": 1}
    assert second["selected"] == [A, B] and second["best"]["defines"] == {"T": 1, "A": 1, "B": 1}
    assert second["stop"] == st.stop == "reached --iterations 2"
    for k in (1, 2):  # an iteration's contest, if its leader had rivals within noise
        _, ids = query(f"select candidate_id from contests where iteration = {k}", store)
        assert set(states[k]["contest"]) == {c for c, in ids} and states[k]["dropped"] == {}

    # the closing contest: the first baseline and both winners, interleaved, 30 rounds each
    base, w1, w2 = (first["baseline"]["candidate_id"], first["best"]["candidate_id"],
                    second["best"]["candidate_id"])
    fin = _closing_rows(store)
    assert set(fin) == {base, w1, w2} and {n for _, n, _, _ in fin.values()} == {30}
    assert [c for c, x in fin.items() if x[3]] == [w2]
    assert fin[w1][2] == fin[base][2] == "SLOWER" and fin[w2][2] == "FASTEST"
    # each closing row says how its contenders were witnessed outside their processes (a
    # device of one thread: 8 turns each, the samples held to them) and the figure witnessed
    _, wit = query("select witness, actor_ms from contests where iteration = 0", store)
    assert len(wit) == 3 and all(
        w.startswith("8 witness turns each") and a > 0 for w, a in wit), wit
    closing = st.closing
    assert closing == second["closing"]  # stored as the last iteration's state
    assert closing["best"]["candidate_id"] == w2 == closing["final_winner"]
    assert but_noise(closing["note"]) == "" and closing["dropped"] == {}
    assert closing["winner_of"] == {base: 0, w1: 1, w2: 2}
    assert closing["speedup"] == pytest.approx(fin[base][0] / fin[w2][0], rel=1e-9)
    assert closing["first_baseline_ms"] == pytest.approx(fin[base][0], rel=1e-9)
    assert 16 < closing["speedup"] < 512  # 128x less work, plus the call's fixed cost
    line = closing_line("cpu-x", closing)
    assert f"{closing['speedup']:.3g}x the first baseline" in line and "side by side" in line

    # the closing table: one row per candidate, the named best first, each row's speedup over
    # its own iteration's baseline (never multiplied across iterations)
    rows = top(s.run_id, 50, store)
    assert len({r["candidate_id"] for r in rows}) == len(rows)
    assert rows[0]["candidate_id"] == w2 and rows[0]["named"]
    assert not any(r["named"] for r in rows[1:])
    assert [r["speedup"] for r in rows[1:]] == sorted((r["speedup"] for r in rows[1:]),
                                                      reverse=True)
    _, own = query("select candidate_id, iteration, speedup from candidates where "
                   "status = 'ok'", store)
    own = {(c, it): sp for c, it, sp in own}
    assert all(r["speedup"] == own[(r["candidate_id"], r["iteration"])] for r in rows)
    # found in iteration 2: A + B and A + C, with iteration 1's selection riding along
    found2 = [r for r in rows if r["iteration"] == 2]
    assert len(found2) == 2 and all(json.loads(r["carried"]) == [A] for r in found2)
    # the side-by-side figures: exactly the closing contest's candidates have them
    assert {r["candidate_id"] for r in rows if r["side_by_side_ms"] is not None} == set(fin)
    for r in (r for r in rows if r["candidate_id"] in fin):
        assert r["side_by_side_ms"] == fin[r["candidate_id"]][0]
        assert r["vs_first_baseline"] == pytest.approx(fin[base][0] / fin[r["candidate_id"]][0])
    b = best("steps", store)
    assert len(b) == 1 and b[0]["candidate_id"] == w2 and b[0]["named"]
    assert b[0]["loop_speedup"] == pytest.approx(closing["speedup"])
    _, prof = query("select distinct profile_status, profile_error from candidates "
                    "where profile_status is not null", store)
    assert prof == [("not_profiled", "NCU needs the cuda backend")]

    summary = write_report(s.run_id, store, tmp_path / "rep")
    text = summary.read_text()
    assert "## Iterations on cpu-" in text and B in text
    assert f"Noise: {RULE}." in text  # the one noise model's rule (kopt.core.compare), stated
    assert f"the loop's total: {closing['speedup']:.3g}x the first baseline" in text
    assert (tmp_path / "rep" / "speedup_per_iteration.png").read_bytes()[:4] == b"\x89PNG"
    src = next((tmp_path / "rep").glob("best-*.cpp")).read_text()
    assert "#define A 1" in src and "#define B 1" in src and 'extern "C" void solve' in src

    plan = propose(sweep, store)[0]
    reasons = {s["method"]: s["reason"] for a in plan["scan"].values() for s in a}
    assert reasons[A] == reasons[B] == "already_selected" and reasons[C] == ""


class FlipAtClosing(ProgressCallback):
    """Creates ``trigger`` (the steps fixture's TRIGGER_FILE) when the loop's closing
    starts; keeps every fault line."""

    def __init__(self, trigger) -> None:
        self.trigger, self.faults = trigger, []

    def on_phase(self, label: str) -> None:
        if label == "closing":
            self.trigger.touch()

    def on_fault(self, message: str) -> None:
        self.faults.append(message)


def test_the_closing_contest_is_side_by_side_and_names_no_failing_contender(
        ray_local, copy_fixture, tmp_path):
    """Three iterations, each a certain gain over its own baseline
    (16x, 8x, 4x less work: a chained product of 512x). When the closing contest starts, the
    fixture's trigger file makes iteration 2's winner do 64x its work and iteration 3's winner
    (the final one) compute a wrong result after passing every check of the sweep: the final winner
    fails the contest's check and is dropped (never named), iteration 1's winner is faster
    side by side than iteration 2's (the latest that passed) and is named the loop's best,
    the note says so, and the loop's total is the first baseline's median over its median,
    both from the closing contest's rows."""
    from kopt.cli.console import closing_line
    from kopt.tools.report import write_report

    d = copy_fixture("steps")
    trigger = tmp_path / "closing-started"
    src = d / "steps.cpp"
    src.write_text(f'#define TRIGGER_FILE "{trigger}"\n' + src.read_text())

    obs = FlipAtClosing(trigger)
    store = tmp_path / "store"
    s = run_sweep(load_sweep(d), store, backend="cpu", observers=[obs])
    st = s.states["cpu-" + os.uname().machine]
    states = _states(store)
    assert sorted(states) == [1, 2, 3] and st.stop == "reached --iterations 3"
    assert [states[k]["best"]["defines"] for k in (1, 2, 3)] == [
        {"T": 1, "A": 1}, {"T": 1, "A": 1, "B": 1}, {"T": 1, "A": 1, "B": 1, "C": 1}]
    assert all(states[k]["gain"] > 1.5 for k in (1, 2, 3))
    base = states[1]["baseline"]["candidate_id"]
    w1, w2, w3 = (states[k]["best"]["candidate_id"] for k in (1, 2, 3))

    fin = _closing_rows(store)
    assert set(fin) == {base, w1, w2, w3}
    # the final winner failed the contest's check: recorded with its status, no figure
    assert fin[w3] == (None, None, "wrong_result", False)
    assert any(w3 in f and "failed its check" in f for f in obs.faults), obs.faults
    # iteration 1's winner is faster side by side than iteration 2's: it is named
    assert [c for c, x in fin.items() if x[3]] == [w1]
    assert fin[w2][2] == fin[base][2] == "SLOWER"
    closing = st.closing
    assert closing["best"]["candidate_id"] == w1 and closing["final_winner"] == w3
    assert list(closing["dropped"]) == [w3] and closing["dropped"][w3].startswith("wrong_result")
    assert closing["note"].startswith("the final winner, iteration 3's winner, failed the "
                                      "closing contest (wrong_result")
    assert but_noise(closing["note"]).endswith("is faster beyond noise than iteration 2's "
                                               "winner "
                                    f"({fin[w2][0]:.4g} ms): the iterations after 1 did not "
                                    "improve on it")
    assert closing["speedup"] == pytest.approx(fin[base][0] / fin[w1][0], rel=1e-9)
    assert 4 < closing["speedup"] < 64  # 16x less work, plus the call's fixed cost
    chained = states[1]["gain"] * states[2]["gain"] * states[3]["gain"]
    assert closing["speedup"] < chained / 3  # not the product of separate timing runs
    assert "total_speedup" not in json.dumps(states)
    line = closing_line("cpu-x", closing)
    assert f"{closing['speedup']:.3g}x the first baseline" in line and "failed" in line
    b = best("steps", store)[0]
    assert b["candidate_id"] == w1 and b["named"] and b["loop_note"] == closing["note"]
    assert b["loop_speedup"] == pytest.approx(closing["speedup"])
    rows = top(s.run_id, 50, store)
    assert rows[0]["candidate_id"] == w1 and rows[0]["named"]
    text = write_report(s.run_id, store, tmp_path / "rep").read_text()
    assert closing["note"] in text and f"dropped from the closing contest: {w3}" in text
    assert "#define B 1" not in next((tmp_path / "rep").glob("best-*.cpp")).read_text()



def test_a_killed_device_actor_is_replaced_and_its_jobs_rerun(ray_local, copy_fixture,
                                                              tmp_path):
    from kopt.run.callbacks import ProgressCallback

    class KillFirstDevice(ProgressCallback):
        """SIGKILLs device actor 0's process after its first result, once."""

        def __init__(self) -> None:
            self.pid, self.faults, self.killed = None, [], False

        def on_start(self, n_builds, n_jobs, devices):
            self.pid = devices[0]["pid"]

        def on_result(self, row):
            if not self.killed:
                self.killed = True
                os.kill(self.pid, signal.SIGKILL)

        def on_fault(self, message):
            self.faults.append(message)

    obs = KillFirstDevice()
    store = tmp_path / "store"
    s = run_sweep(load_sweep(_smaller(copy_fixture("cluster"), 20)), store, backend="cpu",
                  observers=[obs])
    assert obs.killed and any("died" in f for f in obs.faults), obs.faults
    assert any("replaced" in f for f in obs.faults), obs.faults
    _, rows = query("select job_key, status from candidates", store)
    assert len(rows) == 8 and len({k for k, _ in rows}) == 8  # one row per job
    assert {st for _, st in rows} == {"ok"}  # the killed actor's jobs ran again
    assert s.status_counts == {"ok": 8}


def test_successive_halving_screens_everything_and_measures_the_best_fully(ray_local,
                                                                          copy_fixture,
                                                                          tmp_path):
    from kopt.strategy.halving import HALVING_SAMPLES

    store = tmp_path / "store"
    sweep = load_sweep(_smaller(copy_fixture("cluster"), 20, keep_space=True))
    s = run_sweep(sweep, store, backend="cpu", strategy="halving")
    # 24 screened; a third kept, then a third of those (at least 3), plus the baseline
    # when it is not among them
    r1, r2 = s.rungs[1][1], s.rungs[1][2]
    assert s.rungs[1][0] == 24 and r1 in (8, 9) and r2 in (3, 4)
    _, rows = query("select coalesce(rung, 0), count(distinct candidate_id), min(n_samples), "
                    "max(n_samples), bool_or(is_baseline), bool_and(final) from candidates "
                    "group by 1 order by 1", store)
    assert [r[:2] for r in rows] == [(0, 24), (1, r1), (2, r2)]
    # each rung's sample count, the spec's own timing (20) at the last; a job may report
    # fewer (a budget cut under load: too_slow; samples split at the first call on new
    # values: the calls after it), never more: beside a second suite one rung-0 job had 4
    assert [r[3] for r in rows] == [HALVING_SAMPLES[0], HALVING_SAMPLES[1], 20], rows
    assert all(r[4] for r in rows)  # the baseline is in every rung
    assert [r[5] for r in rows] == [False, False, True]
    # the winner comes from the last rung, which holds the best of rung 1
    b = best("cluster", store)[0]
    _, last = query("select candidate_id from candidates where rung = 2", store)
    assert b["candidate_id"] in {c for c, in last} and b["n_samples"] == 20
    # 24 candidates doing the same work: those of the last rung within noise of the fastest
    # (screened with the larger noise) are re-measured side by side (rows in `contests`, the
    # named winner among them); a leader clear of all of them needs no contest
    _, fin = query("select candidate_id, median_ms, iqr_ms from candidates where final and "
                   "status = 'ok' order by median_ms", store)
    near = [c for c in fin[1:]
            if label((fin[0][1], fin[0][2]), (c[1], c[2]), inclusive=True) == "TIED"]
    # (how many are within noise is up to the machine: the expected set is computed from the
    # stored figures, by the same rule, and compared whatever it is)
    _, contest = query("select candidate_id, n_samples, winner from contests "
                       "where iteration = 1", store)
    assert {c for c, _, _ in contest} == ({fin[0][0]} | {c[0] for c in near[:3]}
                                          if near else set())
    assert all(n == 30 for _, n, _ in contest)
    assert len([c for c, _, w in contest if w]) == min(1, len(contest))
    # kopt best names the loop's best: the closing contest's (side by side), or the baseline
    # when nothing beat it beyond noise (all 24 do the same work)
    state = json.loads(query("select state from iterations order by created_at desc limit 1",
                             store)[1][0][0])
    assert b["candidate_id"] == state["closing"]["best"]["candidate_id"] and b["named"]
    from kopt.run.runner import SweepError

    with pytest.raises(SweepError, match="started with strategy halving, not exhaustive"):
        run_sweep(sweep, store, backend="cpu", resume=s.run_id, strategy="exhaustive")


def test_a_cold_run_counts_every_build_it_compiled(ray_local, tmp_path):
    """Iteration 1's builds start early, while the device actors start; they are this run's
    compiles, not cache hits, even when they finish before the dispatch loop looks at the
    cache: runs.compile_cpu_s (bench/overhead.py's compile bound) is their sum."""
    d = tmp_path / "vector_add"
    shutil.copytree(ROOT / "sweeps" / "vector_add", d)
    src = d / "vector_add.cpp"
    src.write_text(src.read_text() + f"\n// cold cache {uuid.uuid4().hex}\n")  # a new digest
    store = tmp_path / "store"
    s = run_sweep(load_sweep(d), store, backend="cpu", max_candidates=4)
    assert s.status_counts == {"ok": 4}
    _, rows = query("select count(*), count(*) filter (where build_cached), "
                    "sum(compile_s) from (select distinct build_id, build_cached, compile_s "
                    "from candidates)", store)
    n_builds, n_cached, compile_sum = rows[0]
    assert n_builds == 4 and n_cached == 0 and compile_sum > 0
    _, runs = query("select compile_cpu_s from runs where status = 'finished'", store)
    assert runs[0][0] == pytest.approx(compile_sum, rel=1e-6)


class _Notes(ProgressCallback):
    def __init__(self):
        self.notes: list[str] = []

    def on_note(self, text: str) -> None:
        self.notes.append(text)


def test_ncu_on_the_cpu_backend_is_a_note(ray_local, copy_fixture, tmp_path):
    """`ncu:` in sweep.yaml profiles CUDA candidates; a CPU run ignored it without a word.
    It now says so once, naming the file, and runs as before."""
    d = copy_fixture("steps")
    (d / "sweep.yaml").write_text((d / "sweep.yaml").read_text() + "ncu: {top_k: 1}\n")
    obs = _Notes()
    s = run_sweep(load_sweep(d), tmp_path / "store", backend="cpu", iterations=1,
                  observers=[obs])
    assert s.status_counts.get("ok", 0) >= 1
    said = [n for n in obs.notes if "`ncu:`" in n]
    assert said == [f"{d / 'sweep.yaml'}: `ncu:` is for CUDA candidates; the cpu backend "
                    "takes no NCU profile, so the loop picks the next methods without a "
                    "measured bottleneck"]
    # a sweep with a CUDA form too keeps `ncu:` for it: its CPU runs say nothing of it
    (d / "steps.cu").write_text('extern "C" void solve(const float* x, float* y, int N) {}\n')
    (d / "sweep.yaml").write_text((d / "sweep.yaml").read_text().replace(
        "kernel: steps.cpp", "kernel: steps.cu") + "cpu: {kernel: steps.cpp}\n")
    obs = _Notes()
    s = run_sweep(load_sweep(d), tmp_path / "store2", backend="cpu", iterations=1,
                  observers=[obs])
    assert s.status_counts.get("ok", 0) >= 1
    assert [n for n in obs.notes if "`ncu:`" in n] == []
