"""Candidates that got past the guards of issue 11 (found by attacking the harness as a
code-generating agent would, on the CPU backend): each was `ok` and named faster than the
honest kernel before its fix. Attacks that cannot be stopped in-process are listed in
workers/harness.py's "What is not caught" instead."""

import re
import time

import pytest
from test_faults import PACK, TIMING, artifact, job

from workers.harness import REPLAY_FACTOR, Harness

ATTACKS = PACK / "attacks.cpp"


def attack_job(tmp_path, mode):
    return job(artifact(tmp_path, ATTACKS, {"MODE": mode}), ATTACKS, PACK / "ref.py",
               {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]})


@pytest.fixture(scope="module")
def harness():
    return Harness("cpu")


def test_a_replay_keyed_by_input_content_is_replayed(tmp_path, harness):
    """A hash of 16 input elements picks a stored result: it computed on the two check sets
    only and replayed every timed call, `ok` at 0.073 ms against the honest 0.40 ms.
    Calls on input sets held back until after the samples expose it."""
    res = harness.run(attack_job(tmp_path, 1))
    assert res["status"] == "replayed", res
    assert len(res["unseen_ms"]) == 2 and len(res["seen_ms"]) == 2
    # against its fastest seen call, as the rule (one seen call may have been preempted:
    # 6.6 ms in a loaded run)
    fast = max(res["median_ms"], min(res["seen_ms"]))
    assert min(res["unseen_ms"]) > REPLAY_FACTOR * fast
    # the recheck on more never-seen sets (two per round) is slow again: the verdict stands
    assert len(res["recheck_unseen_ms"]) >= 2 and len(res["recheck_seen_ms"]) >= 2
    assert min(res["recheck_unseen_ms"]) > REPLAY_FACTOR * fast
    assert "never seen" in res["error"] and "compute every call from its inputs" in res["error"]
    assert re.search(r"and again on \d+ more new input sets", res["error"])


def test_a_replay_that_turns_honest_on_new_values_is_replayed(tmp_path, harness):
    """Replays by content until it meets values other than the check's two sets, then
    computes every call: the recheck's calls on seen sets are as slow as those on new ones,
    so a recheck that compared with them cleared it. The recheck compares with the samples'
    median and the first round's seen calls."""
    res = harness.run(attack_job(tmp_path, 3))
    assert res["status"] == "replayed", res
    assert len(res["recheck_unseen_ms"]) >= 2  # a round or more
    # it computes now: its recheck's seen calls are slow too (against its fastest seen call
    # before: one of those may have been preempted)
    assert min(res["recheck_seen_ms"]) > REPLAY_FACTOR * max(res["median_ms"],
                                                             min(res["seen_ms"]))
    assert re.search(r"and again on \d+ more new input sets", res["error"])


def test_results_kept_from_an_earlier_job_of_the_same_artifact_are_replayed(tmp_path):
    """Computes honestly and keeps every result until it has seen four input sets (its first
    job: the check's two and the two held back), then replays by content. A loaded
    artifact keeps its state, and a later job of it in the same harness (a halving rung, a
    re-run) was called on the same held-back sets: `ok` at 0.08 ms against the honest 0.35.
    Each job of an artifact gets held-back sets it has never been called on."""
    h = Harness("cpu")
    j = attack_job(tmp_path, 5)
    first = h.run(j)
    assert first["status"] == "ok", first  # honest in its first job
    again = h.run(j)
    assert again["status"] == "replayed", again
    assert min(again["unseen_ms"]) > REPLAY_FACTOR * again["median_ms"]
    assert len(again["recheck_unseen_ms"]) >= 2  # a round or more
    # every held-back set was new to it: 2 in each job, and each recheck round's (a burst of
    # load on the honest first job's unseen calls gives it a recheck round too: CI, where
    # 2 + 2 sets were spent in the first job)
    d = next(iter(h.data.values()))
    n = 2 + len(first.get("recheck_unseen_ms", [])) + 2 + len(again["recheck_unseen_ms"])
    assert h.spent == {(d.key, j["artifact"]): n} and len(d.unseen) + len(d.reserve) == n
    # the Data dropped and made again (other sizes in between): still new sets for it
    h.data.clear()
    third = h.run(j)
    assert third["status"] == "replayed", third
    d = next(iter(h.data.values()))
    n += 2 + len(third["recheck_unseen_ms"])
    assert h.spent[(d.key, j["artifact"])] == n and len(d.unseen) + len(d.reserve) == n


def test_a_contest_calls_every_contender_on_sets_it_has_never_seen(tmp_path):
    """The contest's rounds call on the check's two sets only: the same candidate, honest
    in its own job, replayed them and beat the honest kernel side by side (0.08 ms against
    0.35). Each contender's calls on never-seen sets after the rounds name it."""
    h = Harness("cpu")
    honest = job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp",
                 PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]},
                 job_key="honest")
    keeper = {**attack_job(tmp_path, 5), "job_key": "keeper"}
    assert h.run(keeper)["status"] == "ok"  # its own job: honest
    res = h.run({**honest, "contest": [honest, keeper], "rounds": 12})
    assert res["status"] == "replayed", res
    assert res["failed"] == ["keeper"] and res["error"].startswith("keeper: calls on input ")
    # two honest contenders pass, each on sets new to it
    res = h.run({**honest, "contest": [honest, {**honest, "job_key": "h2"}], "rounds": 12})
    assert res["status"] == "ok", res


def test_a_replayer_that_pads_long_runs_of_calls_is_replayed(tmp_path):
    """MODE 1 with runs of calls padded to three honest calls' cost (8 of every 17 in a
    trial: `ok` in 6 of 8 jobs at 0.08 ms against the honest 0.35; here 6 of 17, and every
    call once it met new values): the seen calls made with the never-seen ones fell in a
    padded run often, raising the line the calls on new sets had to pass. The seen calls
    count only when the load gauge shows the machine slowed down (load then: not caught, see
    workers/harness.py). The harness's work before each call stood for the gauge: with the
    flush by cache line it took tens of microseconds, and its jitter alone made the machine
    look slowed (`ok` in 2 of 3 jobs in a fresh clone's suite). Beside another test file of
    the suite, 39 of 40 jobs were `replayed` (the other: the gauge's median 4.9 ms in the
    samples, 9.7 ms after them)."""
    from workers.harness import drifted, replayed

    h = Harness("cpu")
    fast, said = [], []
    for i in range(3):
        res = h.run(job(artifact(tmp_path, ATTACKS, {"MODE": 7, "COPY": i}), ATTACKS,
                        PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]}))
        if res["status"] != "replayed":  # its median the padded calls', or load then
            assert res["status"] == "ok" and (
                drifted(res) or not replayed(res["median_ms"], [], res["unseen_ms"])), res
        assert res["gauge_ms"] > 0 and len(res["unseen_gauge_ms"]) == 4
        fast.append(res["status"] == "replayed")
        said.append(f"{res['status']}: drifted {drifted(res)}, " + ", ".join(
            f"{k} {res.get(k)}" for k in ("median_ms", "seen_ms", "unseen_ms", "recheck_seen_ms",
                                          "recheck_unseen_ms", "gauge_ms", "unseen_gauge_ms",
                                          "recheck_gauge_ms")))
    assert sum(fast) >= 2, "\n".join(said)


def test_the_seen_calls_count_only_on_a_machine_that_slowed_down():
    """The load gauge before each call against its median before the samples tells load that
    began after the samples (the seen calls weigh) from padding."""
    from workers.harness import baseline, drifted, replay_confirmed

    first = {"median_ms": 0.071, "samples_ms": [0.07] * 20, "seen_ms": [0.96, 0.97],
             "unseen_ms": [0.40, 0.41], "recheck_seen_ms": [0.9, 0.95],
             "recheck_unseen_ms": [0.39, 0.4], "gauge_ms": 1.0}
    same = {**first, "unseen_gauge_ms": [0.98, 1.01, 0.99, 1.2], "recheck_gauge_ms": [0.97] * 4}
    assert not drifted(same) and baseline(same) == [] and replay_confirmed(same)
    slower = {**same, "recheck_gauge_ms": [1.8] * 4, "unseen_gauge_ms": [1.7] * 4}
    assert drifted(slower) and min(baseline(slower)) == 0.9 and not replay_confirmed(slower)
    # a timeslice lost to another process now and then (4-9 ms beside a CPU hog) is no drift
    stray = {**same, "unseen_gauge_ms": [0.98, 4.9, 0.99, 1.0], "recheck_gauge_ms": [9.0, 1, 1, 1]}
    assert not drifted(stray) and replay_confirmed(stray)
    assert drifted({**first, "gauge_ms": None})  # not measured (GPU): the seen calls weigh


def test_the_load_gauge_leaves_out_the_harness_work_before_a_call(tmp_path, monkeypatch):
    """The gauge before every timed call is a fixed count of iterations, calibrated when the
    harness starts and as long as the job's first call (GAUGE_MS to GAUGE_MAX_MS), timed
    apart from the harness's work before the call: that work costs what the candidate's
    data and the input set's place in the caches cost (the first load after a recheck's
    pause took 0.4-1.2 ms against 0.04 ms, with no load), here 250 ms more on every
    held-back set, and none of it is in the gauge (a gauge of 0.5-5 ms: a machine under any
    load does not stretch both of the last two to 250 ms)."""
    from workers.harness import GAUGE_MAX_MS, GAUGE_MS, N_SETS

    prep, size = Harness._prep, Harness._size_gauge
    first: list[float] = []

    def cold(self, d, k, flush):
        if k >= N_SETS:
            time.sleep(0.25)
        prep(self, d, k, flush)

    def sized(self, call_ms):
        first.append(call_ms)
        size(self, call_ms)

    monkeypatch.setattr(Harness, "_prep", cold)
    monkeypatch.setattr(Harness, "_size_gauge", sized)
    h = Harness("cpu")
    res = h.run(job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp",
                    PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]}))
    assert res["status"] == "ok", res
    # sized once, by the first call alone (the load decides how long that took)
    assert len(first) == 1 and h.gauge_n == round(
        h.gauge_unit * min(max(first[0], GAUGE_MS), GAUGE_MAX_MS) / GAUGE_MS)
    assert res["gauge_ms"] > 0 and len(res["unseen_gauge_ms"]) == 4
    assert min(res["unseen_gauge_ms"][2:]) < 250.0  # before a held-back set: no sleep in it


def test_one_sample_made_to_sleep_does_not_skip_the_calls_on_new_sets(tmp_path, harness,
                                                                      monkeypatch):
    """MODE 1 with one timed sample made to sleep 1 s of a 4 s budget: the calls on
    never-seen sets, sized by the slowest sample (5 x 1 s), no longer fit and were skipped;
    `ok` at 0.08 ms (median of the others) against the honest 0.35. They are sized by the
    median; where even that does not fit, the candidate is too_slow (they are part of the
    check), not `ok`."""
    j = job(artifact(tmp_path, ATTACKS, {"MODE": 6, "SLEEP_MS": 1000}), ATTACKS,
            PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]},
            timing={**TIMING, "timeout_s": 4})
    res = harness.run(j)
    assert max(res["samples_ms"]) > 1000.0  # the sleep was a timed sample
    assert res["status"] == "replayed", res
    unseen = Harness.unseen

    def spent(self, *a, **kw):  # the budget spent by the time the samples end
        self._deadline = 0.0
        return unseen(self, *a, **kw)

    monkeypatch.setattr(Harness, "unseen", spent)
    honest = harness.run(job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}),
                             PACK / "faults.cpp", PACK / "ref.py", {"N": 4096},
                             {"x": ["N"], "buf": ["N"], "y": ["N"]}))
    assert honest["status"] == "too_slow" and "unseen_ms" not in honest
    assert "when the calls on input sets it has never seen (about" in honest["error"]


def test_load_landing_on_the_unseen_calls_does_not_name_an_honest_kernel(tmp_path,
                                                                        monkeypatch):
    """A burst of load that lands on the calls on the held-back sets (here: 30 ms added to
    each, as a preempting process would) made an honest kernel `replayed` on a loaded
    2-core machine (CI, 2026-12-01: a successive-halving rung lost its baseline). The
    recheck on two more never-seen sets, away from the burst, clears it; the first round's
    figures stay in the outcome."""
    from workers.harness import N_SETS, N_UNSEEN, replayed

    h = Harness("cpu")
    call = Harness.call

    def burst(self, lib, job, d, b=0):
        if b == 0 and N_SETS <= self.last_set < N_SETS + N_UNSEEN:
            time.sleep(0.03)
        call(self, lib, job, d, b)

    monkeypatch.setattr(Harness, "call", burst)
    res = h.run(job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp",
                    PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]}))
    assert res["status"] == "ok", res
    # the first round alone names it
    assert replayed(res["median_ms"], res["seen_ms"], res["unseen_ms"])
    assert min(res["unseen_ms"]) > 30.0
    assert len(res["recheck_unseen_ms"]) >= 2  # rechecked, and cleared


def test_the_replay_verdict_needs_the_recheck_too():
    """`replayed` when both rounds show it, or when the recheck did not fit the budget (the
    first round stands); not when the recheck on new sets was as fast as the seen calls."""
    from workers.harness import replay_confirmed

    fast = [0.07, 0.071, 0.072, 0.073, 0.07]
    first = {"median_ms": 0.071, "samples_ms": fast, "seen_ms": [0.07, 0.072],
             "unseen_ms": [0.40, 0.41]}
    assert replay_confirmed({**first, "recheck_seen_ms": [0.07, 0.07],
                             "recheck_unseen_ms": [0.39, 0.42]})
    # the recheck's own seen calls as slow (it computes once it met new values): still
    assert replay_confirmed({**first, "recheck_seen_ms": [0.40, 0.40],
                             "recheck_unseen_ms": [0.39, 0.42]})
    assert replay_confirmed({**first, "recheck_seen_ms": [], "recheck_unseen_ms": []})
    assert not replay_confirmed({**first, "recheck_seen_ms": [0.07, 0.07],
                                 "recheck_unseen_ms": [0.072, 0.39]})
    assert not replay_confirmed({**first, "unseen_ms": [0.40, 0.07]})
    assert not replay_confirmed({**first, "unseen_ms": []})


def test_honest_kernel_is_neither(tmp_path, harness):
    """An honest kernel is not `replayed`: same problem, status ok, the unseen calls made."""
    res = harness.run(job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}),
                          PACK / "faults.cpp", PACK / "ref.py", {"N": 4096},
                          {"x": ["N"], "buf": ["N"], "y": ["N"]}))
    assert res["status"] == "ok", res
    assert len(res["unseen_ms"]) == 2 and "escaped_ms" not in res  # no CPU probe
    assert res["n_samples"] >= TIMING["min_samples"]


def test_a_tolerance_that_zeros_pass_is_refused(tmp_path):
    """Outputs smaller than atol everywhere: a kernel that wrote zeros was `ok` (0.07 ms,
    max error 4e-7). Refused before anything is built, naming ref.py and the fix; decided
    on the check's two seeded sets (the held-back ones have random seeds)."""
    from conftest import write_sweep
    from workers.harness import JobError

    zeros = ('extern "C" void solve(const float* x, float* out, int N) '
             '{ for (int i = 0; i < N; ++i) out[i] = 0.f; }')
    d = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 256}]\n", {
        "k.cpp": zeros, "ref.py": "def reference(x, N):\n    return x * 1e-7\n"})
    j = job("", d / "k.cpp", d / "ref.py", {"N": 256}, {"x": ["N"], "out": ["N"]},
            prepare_only=True)
    with pytest.raises(JobError, match=r"^ref.py: a kernel that writes zeros to 'out' passes "
                       r"the check: every expected value \(\|out\| <= 2.94e-07\) lies within "
                       r"the tolerance \(atol=1e-05, rtol=1e-05\) of 0; lower `tolerance:`"):
        Harness("cpu").run(j)
    d2 = write_sweep(tmp_path / "s2", "kernel: k.cpp\ndims: [{N: 256}]\n", {
        "k.cpp": zeros, "ref.py": "def reference(x, N):\n    return x * 1e-3\n"})
    ok = Harness("cpu").run(job("", d2 / "k.cpp", d2 / "ref.py", {"N": 256},
                                {"x": ["N"], "out": ["N"]}, prepare_only=True))
    assert ok["status"] == "ok"


def test_the_replay_rule_weighs_the_unseen_calls_against_the_share_of_slow_samples():
    """A round looks like a replay when every call on new values is over 2x the slower of the
    median and the faster seen call; the verdict when load alone (the share of slow calls on
    seen sets) was unlikely to slow every such call. It was "slower than the samples' 90th
    percentile": padding a quarter of the calls, or one preempted sample of 12, passed it."""
    from workers.harness import load_chance, replay_confirmed, replayed

    fast = [0.07, 0.071, 0.072, 0.073, 0.07]
    assert replayed(0.071, [0.07, 0.072], [0.40, 0.41])  # the content-keyed replayer
    assert replayed(0.071, [0.07, 0.96], [0.40, 0.41])  # one seen call padded or preempted
    assert not replayed(0.071, [0.07, 0.072], [0.40, 0.12])  # one unseen call fast
    assert not replayed(0.071, [0.30, 0.31], [0.40, 0.41])  # both seen calls as slow: drift
    first = {"median_ms": 0.071, "seen_ms": [0.07, 0.072], "unseen_ms": [0.40, 0.41]}
    padded = fast * 3 + [1.0] * 5  # a quarter of 20 samples padded to 1 ms
    # 5 of the 22 calls on seen sets (samples, seen calls) over the line: p = 6/24
    assert load_chance({**first, "samples_ms": padded}) == pytest.approx(0.25 ** 2)
    # 4 slow calls on new sets: 0.0039, load may explain it; 6: 0.00024, it does not
    assert not replay_confirmed({**first, "samples_ms": padded,
                                 "recheck_unseen_ms": [0.39, 0.4]})
    assert replay_confirmed({**first, "samples_ms": padded,
                             "recheck_unseen_ms": [0.39, 0.4, 0.41, 0.38]})
    one_stray = fast * 2 + [0.07, 0.6]  # 12 contest rounds, one preempted
    assert replay_confirmed({**first, "samples_ms": one_stray,
                             "recheck_unseen_ms": [0.39, 0.4]})
    # both seen calls of the first round padded: the recheck's seen calls set the line
    both = {**first, "seen_ms": [0.96, 0.97], "samples_ms": fast}
    assert not replayed(0.071, both["seen_ms"], both["unseen_ms"])
    assert replay_confirmed({**both, "recheck_seen_ms": [0.07] * 6,
                             "recheck_unseen_ms": [0.39, 0.4, 0.41, 0.38, 0.4, 0.4]})
    # the machine slower since the samples (drift): every seen call as slow, not a replay
    assert not replay_confirmed({**both, "seen_ms": [0.3, 0.31], "recheck_seen_ms": [0.3, 0.3],
                                 "recheck_unseen_ms": [0.39, 0.4]})
    # a cut recheck: the rounds before it stand
    assert replay_confirmed({**first, "samples_ms": padded, "recheck_unseen_ms": [0.39, 0.4],
                             "recheck_cut": True})


def test_a_replayer_that_pads_a_quarter_of_its_calls_is_replayed(tmp_path, harness):
    """MODE 1 with every fourth call padded to three honest calls' cost: its unseen calls
    were never slower than the samples' 90th percentile, `ok` at 0.07 ms against the honest
    0.35. The recheck goes on until load alone cannot explain the slow calls on new sets."""
    from workers.harness import load_chance

    res = harness.run(attack_job(tmp_path, 4))
    assert res["status"] == "replayed", res
    assert res["median_ms"] < 0.5 * min(res["unseen_ms"] + res["recheck_unseen_ms"])
    assert len(res["recheck_unseen_ms"]) >= 2 and load_chance(res) < 1e-3


def _honest_2s(tmp_path):
    return job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp",
               PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]},
               timing={**TIMING, "timeout_s": 2})


def test_the_check_own_time_is_not_taken_from_the_candidate_budget(tmp_path, monkeypatch):
    """The float64 comparison of every output element (made to take 1.1 s per check here;
    two checks of 128 MB arrays took 16-60 s on a loaded 2-core machine) counted in the
    candidate's timing.timeout_s: an honest memory-bound kernel was `too_slow`. The
    harness's own time is added to the budget, and said to the sandbox (progress ``own``)
    so that it waits as long."""
    from workers.sandbox import Sandbox as Sb

    check, said = Harness.check, []

    def slow_check(self, *a, **kw):
        time.sleep(1.1)
        return check(self, *a, **kw)

    monkeypatch.setattr(Harness, "check", slow_check)
    res = Harness("cpu", progress=said.append).run(_honest_2s(tmp_path))
    assert res["status"] == "ok", res
    assert res["n_samples"] >= TIMING["min_samples"] and len(res["unseen_ms"]) == 2
    own = [m["s"] for m in said if m["stage"] == "own"]
    assert len(own) == 2 and min(own) >= 1.1
    # the sandbox waits the harness's own time longer
    assert Sb._extend({"progress": True, "stage": "own", "s": 3.0}, 10.0, 2.0, 0.0) == 13.0


def test_a_recheck_draw_does_not_cut_the_recheck(tmp_path, monkeypatch):
    """Drawing a recheck's input sets (ref.py's inputs() and reference(), made to take 2.1 s
    of a 2 s budget here) counted in the candidate's budget: the recheck of an honest kernel
    whose first calls on new sets a burst of load slowed was cut, and a cut recheck
    confirms the first round: `replayed`. The draw is the harness's own time."""
    from workers.harness import N_SETS, N_UNSEEN

    draw, call = Harness._draw, Harness.call

    def slow_draw(self, mod, job, scalars, shapes, ref_name, reference, seeds):
        if seeds[0] >= job["seed"] + N_SETS + N_UNSEEN:  # a recheck's sets
            time.sleep(2.1)
        return draw(self, mod, job, scalars, shapes, ref_name, reference, seeds)

    def burst(self, lib, job, d, b=0):  # load landing on the first round's new sets
        if b == 0 and N_SETS <= self.last_set < N_SETS + N_UNSEEN:
            time.sleep(0.03)
        call(self, lib, job, d, b)

    monkeypatch.setattr(Harness, "_draw", slow_draw)
    monkeypatch.setattr(Harness, "call", burst)
    res = Harness("cpu").run(_honest_2s(tmp_path))
    assert res["status"] == "ok", res
    assert min(res["unseen_ms"]) > 30.0 and len(res["recheck_unseen_ms"]) >= 2
    assert not res["recheck_cut"]


def test_outputs_computed_on_their_first_read_are_escaped(tmp_path):
    """MODE 2: solve protects its output pages (mprotect PROT_NONE) and returns; a SIGSEGV
    handler computes them when the harness first reads them: `ok` at 0.12 ms against the
    honest 0.32. After every call the harness asks the kernel to read a byte of every output
    page (process_vm_readv, which fails on a protected page instead of faulting): a page it
    cannot read makes the candidate `escaped`. In a sandbox process, as kopt runs it: its
    SIGSEGV handler and protected pages stay out of the test's process."""
    from workers.sandbox import Sandbox

    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        res = sb.run(attack_job(tmp_path, 2), timeout_s=60)
    finally:
        sb.close()
    assert res["status"] == "escaped", res
    assert res["error"].startswith("solve returned with output 'buf' unreadable")
    assert "write every output before returning" in res["error"]


def test_answers_made_before_the_run_for_the_sweep_seeds_are_replayed(tmp_path):
    """MODE 9: the seed is in sweep.yaml and the held-back sets' seeds followed it (seed + 2,
    ...), so ref.py's answers for seeds 3 to 42 can be made before the run and shipped
    with the candidate (here a file it reads): `ok` at 0.07 ms against the honest 0.31, as
    fast on the held-back sets as on the check's. The held-back sets' seeds are drawn at
    random in the harness: nothing made in advance holds them."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("pack_ref", PACK / "ref.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    recs = []
    for seed in range(3, 43):
        ins = ref.inputs(seed, 4096)
        out = ref.reference(ins["x"].clone(), ins["buf"].clone(), 4096)
        recs.append(torch.cat([ins["x"][:1], out["y"], out["buf"]]))
    answers = tmp_path / "answers.bin"
    answers.write_bytes(torch.stack(recs).numpy().tobytes())
    j = job(artifact(tmp_path, ATTACKS, {"MODE": 9, "ANSWERS": f'"{answers}"'}), ATTACKS,
            PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]})
    h = Harness("cpu")
    res = h.run(j)
    assert res["status"] == "replayed", res
    assert res["median_ms"] < 0.5 * min(res["unseen_ms"] + res["recheck_unseen_ms"])
    d = next(iter(h.data.values()))
    held = [s.seed for s in d.unseen + d.reserve]
    assert len(held) == 2 + len(res["recheck_unseen_ms"]) and not set(held) & set(range(3, 43))
