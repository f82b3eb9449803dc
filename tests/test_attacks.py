"""Candidates that got past the guards of issue 11 (found by attacking the harness as a
code-generating agent would, on the CPU backend): each was `ok` and named faster than the
honest kernel before its fix. Attacks that cannot be stopped in-process are listed in
workers/harness.py's "What is not caught" instead."""

import platform
import re
import time

import pytest
from test_faults import PACK, TIMING, artifact, job

from workers.harness import Harness
from workers.replay import REPLAY_ALPHA, REPLAY_FACTOR, REPLAY_MS, load_chance

ATTACKS = PACK / "attacks.cpp"


def attack_job(tmp_path, mode, n=4096, **defines):
    return job(artifact(tmp_path, ATTACKS, {"MODE": mode, **defines}), ATTACKS, PACK / "ref.py",
               {"N": n}, {"x": ["N"], "buf": ["N"], "y": ["N"]})


def honest_job(tmp_path, **kw):
    return job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp",
               PACK / "ref.py", {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]}, **kw)


def no_gain(res):
    """A replayer's outcome is `replayed`, or a figure no more than the rule allows faster
    than its computing calls (those on never-seen sets: one of them within ``REPLAY_FACTOR``
    x the figure's median plus ``REPLAY_MS``, workers.replay): never `ok` at its replays'
    speed. (It asked for more than twice the median, stricter than the rule by
    ``REPLAY_MS``; it failed once beside a CPU hog, figures not kept.)"""
    return res["status"] == "replayed" or (
        REPLAY_FACTOR * res["median_ms"] + REPLAY_MS >= min(res["unseen_ms"]))


@pytest.fixture(scope="module")
def harness():
    return Harness("cpu")


def test_a_replay_keyed_by_input_content_is_replayed(tmp_path, harness):
    """A hash of 16 input elements picks a stored result: it computed on the two check sets
    only and replayed every timed call, `ok` at 0.073 ms against the honest 0.40 ms.
    Calls on never-seen sets, at random places among the samples, expose it."""
    res = harness.run(attack_job(tmp_path, 1))
    assert res["status"] == "replayed", res
    assert len(res["unseen_ms"]) >= 2
    assert min(res["unseen_ms"]) > REPLAY_FACTOR * res["median_ms"]
    assert load_chance(res["samples_ms"], res["unseen_ms"], res["seen_ms"]) < REPLAY_ALPHA
    assert "never seen" in res["error"] and "compute every call from its inputs" in res["error"]
    assert re.search(r"^all \d+ calls on input values it had never seen, made at random places "
                     r"among its \d+ samples", res["error"])


def test_a_replay_that_turns_honest_on_new_values_gains_nothing(tmp_path, harness):
    """Replays by content until it meets values other than the check's two sets, then
    computes every call (MODE 3): its median lay between the two (`ok` at 0.19 ms against
    the honest 0.24). The samples after its first call on new values, slower than those
    before, are the figure: its honest work's."""
    res = harness.run(attack_job(tmp_path, 3))
    assert res["status"] == "ok", res
    # the figure computes: split where it met new values after 5 samples or more, else at
    # most 4 replays among 10 samples or more, under the median
    assert res["median_ms"] > 0.5 * min(res["unseen_ms"]), res
    assert res["n_samples"] >= TIMING["min_samples"]


def _flagged(tmp_path, mode):
    """A MODE 5 job (honest while a file exists) and that file."""
    flag = tmp_path / "first_job"
    flag.write_text("")
    return attack_job(tmp_path, mode, HONEST_FLAG=f'"{flag}"'), flag


def test_results_kept_from_an_earlier_job_of_the_same_artifact_are_replayed(tmp_path):
    """Computes honestly and keeps every result in its first job, then replays by content
    (MODE 5). A loaded artifact keeps its state, and a later job of it in the same harness
    (a halving rung, a re-run) was called on the same held-back sets: `ok` at 0.08 ms
    against the honest 0.35. Each job of an artifact gets held-back sets it has never been
    called on."""
    h = Harness("cpu")
    j, flag = _flagged(tmp_path, 5)
    first = h.run(j)
    assert first["status"] == "ok", first  # honest in its first job
    flag.unlink()
    again = h.run(j)
    assert again["status"] == "replayed", again
    d = next(iter(h.data.values()))
    spent = h.spent[(d.key, j["artifact"])]
    # the pool is what this one artifact was handed, and every call it made on a new set
    # was on one of them, each once
    assert len(d.unseen) + len(d.reserve) == spent
    assert spent >= len(first["unseen_ms"]) + len(again["unseen_ms"])
    # the Data dropped and made again (other sizes in between): still new sets for it
    h.data.clear()
    third = h.run(j)
    assert third["status"] == "replayed", third
    d = next(iter(h.data.values()))
    now = h.spent[(d.key, j["artifact"])]
    assert now >= spent + len(third["unseen_ms"]) and len(d.unseen) + len(d.reserve) == now


def test_a_contest_calls_every_contender_on_sets_it_has_never_seen(tmp_path):
    """The contest's rounds called on the check's two sets only: the same candidate, honest
    in its own job, replayed them and beat the honest kernel side by side (0.08 ms against
    0.35). Its calls on never-seen sets, mixed among the rounds, name it."""
    h = Harness("cpu")
    honest = honest_job(tmp_path, job_key="honest")
    j, flag = _flagged(tmp_path, 5)
    keeper = {**j, "job_key": "keeper"}
    assert h.run(keeper)["status"] == "ok"  # its own job: honest
    flag.unlink()
    res = h.run({**honest, "contest": [honest, keeper], "rounds": 12})
    assert res["status"] == "replayed", res
    assert res["failed"] == ["keeper"] and res["error"].startswith("keeper: all ")
    # two honest contenders pass, each on sets new to it. A `replayed` verdict is final only
    # where a second contest agrees (kopt.loop.contests, as workers.sandbox
    # ``run_retrying`` for a job): beside two suites at once, load made all 13 calls of one
    # on new sets slow (0.21 ms against its median under 0.1), and the contest is run again
    pair = {**honest, "contest": [honest, {**honest, "job_key": "h2"}], "rounds": 12}
    res = h.run(pair)
    if res["status"] == "replayed":
        res = h.run(pair)
    assert res["status"] == "ok", res
    assert all(r["unseen_ms"] and r["n_samples"] == 12 for r in res["results"])


def test_a_replayer_that_pads_long_runs_of_calls_gains_nothing(tmp_path):
    """MODE 1 with runs of calls padded to three honest calls' cost (6 of every 17, and every
    call once it met new values, MODE 7): seen calls made after the samples fell in a
    padded run often, raising the line the calls on new sets had to pass (`ok` in 6 of 8
    jobs at 0.08 ms against the honest 0.35); a load gauge that decided when they counted
    was the candidate's to slow. Mixed among the samples, its calls on new values meet the
    samples' own line, and the padding after them is the figure."""
    h = Harness("cpu")
    for i in range(3):
        res = h.run(attack_job(tmp_path, 7, COPY=i))
        assert res["status"] in ("replayed", "ok") and no_gain(res), res


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the attack reads the x86 time-stamp counter")
def test_a_replayer_that_replays_only_the_figures_samples_gains_at_most_the_rule(tmp_path):
    """MODE 12 (a red team's): replays just over half of the samples that make the figure
    and computes the calls after them, so that the median of all its samples, which set the
    line, was the work's: `ok` at 0.012-0.04 ms against the honest 0.22-0.26 in 11 of 13
    jobs. The verdict is on the figure's own samples: `replayed`; `too_slow` with no replay
    verdict (with just under half of its samples over the line, 14 calls on new values
    cannot tell it from load: workers.replay); or `ok` no more than the rule's factor 2
    faster than its calls on new values (its replays are 10x faster)."""
    h = Harness("cpu")
    for i in range(3):
        res = h.run(attack_job(tmp_path, 12, COPY=i))
        assert res["status"] in ("replayed", "ok", "too_slow"), res
        if res["status"] == "too_slow":
            # all of its calls on new values (14, or fewer where its budget ran out first)
            assert res["error"].startswith(
                f"no replay verdict: all {len(res['unseen_ms'])} of its calls"), res
        assert res["status"] != "ok" or res["median_ms"] > 0.25 * min(res["unseen_ms"]), res


def test_calls_on_new_sets_are_weighed_against_the_samples_made_beside_them():
    """The line comes from the figure's samples, the count from every sample made while
    calls on new sets were made: a burst of load after the figure's 20 samples (2 over the
    line) slowed the next 6 samples and the 7 calls on new sets made among them. Counted
    over the figure alone that was `replayed` (C(9, 7) / C(27, 7) = 4e-5) for honest work;
    over the samples beside them it is load (C(15, 7) / C(33, 7) = 1.5e-3): `open`."""
    from workers.replay import replay_state

    figure = [0.10] * 18 + [0.30, 0.31]
    burst = [0.35, 0.40, 0.33, 0.38, 0.36, 0.34]
    new = [0.36, 0.39, 0.41, 0.33, 0.37, 0.35, 0.38]
    assert replay_state(figure, new) == "replayed"  # the old count
    assert load_chance(figure, new, figure + burst) == pytest.approx(6435 / 4272048)
    assert replay_state(figure, new, figure + burst) == "open"
    # a replayer's calls beside them stay fast: the count only grows, decided sooner
    assert replay_state(figure, new, figure + [0.10] * 40) == "replayed"


def test_the_replay_state_weighs_the_calls_on_new_sets_against_the_samples():
    """`clear` once a call on new values is under 2x the samples' median (+0.01 ms);
    `replayed` when all are over it and load is unlikely to explain that (the chance that
    the calls on new sets, at random places, are all among the calls over the line);
    `open` in between. It was "slower than the samples' 90th percentile": padding a
    quarter of the calls, or one preempted sample of 12, passed that."""
    from workers.replay import replay_state, split_after

    fast = [0.07, 0.071, 0.072, 0.073, 0.07] * 4
    assert replay_state(fast, []) == "open"  # no call on a new set yet
    assert replay_state(fast, [0.40, 0.12]) == "clear"  # one under 0.151 ms
    assert replay_state(fast, [0.40, 0.41, 0.39]) == "open"  # 1 / C(23, 3): 5.6e-4
    assert replay_state(fast, [0.40, 0.41, 0.39, 0.4]) == "replayed"  # 1 / C(24, 4) < 1e-4
    padded = fast[:15] + [1.0] * 5  # a quarter padded: 5 of 20 over the line
    assert load_chance(padded, [0.4] * 5) == pytest.approx(252 / 53130)  # C(10,5) / C(25,5)
    assert replay_state(padded, [0.4] * 9) == "open"  # C(14, 9) / C(29, 9) = 2.0e-4
    assert replay_state(padded, [0.4] * 10) == "replayed"  # C(15, 10) / C(30, 10) < 1e-4
    one_stray = fast[:11] + [0.6]  # 12 samples, one preempted
    assert replay_state(one_stray, [0.4] * 7) == "open"  # C(8, 7) / C(19, 7) = 1.6e-4
    assert replay_state(one_stray, [0.4] * 8) == "replayed"  # C(9, 8) / C(20, 8) = 7.1e-5
    # an honest ~3 ms kernel's job beside another sweep on the 2-core machine (stored row of
    # a failed test_queue run): load came in a burst, its samples undercount it; the earlier
    # rule, (2/12) ** 4 = 7.7e-4, named it `replayed`; the exact chance is 5/1001
    burst = [6.964594, 5.460142, 3.40083, 2.940686, 4.997154, 3.050863, 2.963129, 2.914247,
             2.98547, 2.741002]
    assert load_chance(burst, [6.6, 6.9, 7.2, 6.505]) == pytest.approx(5 / 1001)
    assert replay_state(burst, [6.6, 6.9, 7.2, 6.505]) == "open"
    # a line from the median: padding more than half makes the median the padded calls'
    assert replay_state(fast[:9] + [1.0] * 11, [0.4, 0.41]) == "clear"
    # the samples after the first call on new values, slower than 2x those before: the figure
    assert split_after(fast[:6] + [0.3] * 14, 6) == [0.3] * 14
    assert split_after(fast, 6) is None and split_after(fast, None) is None
    assert split_after(fast[:6] + [0.3] * 14, 0) is None  # none before: nothing to split
    assert split_after(fast[:4] + [0.3] * 14, 4) is None  # too few before to split at


def test_a_draw_of_new_sets_follows_a_call_on_one(tmp_path, monkeypatch):
    """More never-seen sets are drawn (ref.py's inputs() and reference(), in this process)
    only after a batch that called on one: a draw before a batch, or inside it, would tell a
    replayer that a call on new values was coming (a pause it can time). The first ones
    are ready before the first timed call."""
    from workers.harness import Harness as H

    events: list[str] = []
    fresh, samples = H.fresh_sets, H.samples

    def rec_fresh(self, job, d, n):
        events.append("draw")
        return fresh(self, job, d, n)

    def rec_samples(self, calls, d, flush, picks=None):
        events.append("new" if picks and any(k >= len(d.sets) for k in picks) else "seen")
        return samples(self, calls, d, flush, picks)

    monkeypatch.setattr(H, "fresh_sets", rec_fresh)
    monkeypatch.setattr(H, "samples", rec_samples)
    res = H("cpu").run(attack_job(tmp_path, 1))  # open for a while: draws during its samples
    assert res["status"] == "replayed", res
    assert events[0] == "draw" and events.count("draw") >= 2, events
    assert all(events[i - 1] == "new" for i, e in enumerate(events) if e == "draw" and i)


def test_one_sample_made_to_sleep_does_not_skip_the_calls_on_new_sets(tmp_path, harness,
                                                                      monkeypatch):
    """MODE 1 with one timed sample made to sleep 1 s of a 4 s budget: the calls on
    never-seen sets, made after the samples and sized by the slowest, no longer fit and
    were skipped; `ok` at 0.08 ms (median of the others) against the honest 0.35. Mixed
    among the samples they are made before the budget ends; where none fits, the candidate
    is too_slow (they are part of the check), not `ok`."""
    import workers.harness as wh

    res = harness.run(attack_job(tmp_path, 6, SLEEP_MS=1000) | {
        "timing": {**TIMING, "timeout_s": 4}})
    assert res["status"] == "replayed", res
    monkeypatch.setattr(wh, "Q_UNSEEN", 1e-9)  # no call on a new set placed in the budget
    honest = harness.run(honest_job(tmp_path, timing={**TIMING, "timeout_s": 2}))
    assert honest["status"] == "too_slow" and honest["unseen_ms"] == [], honest
    assert "when the calls on input sets it has never seen (about" in honest["error"]


def test_load_around_the_calls_on_new_sets_does_not_name_an_honest_kernel(tmp_path,
                                                                         monkeypatch):
    """A burst of load that lands on the calls on the held-back sets made an honest kernel
    `replayed` on a loaded 2-core machine (CI, 2026-12-01), when those calls came after
    the samples. Mixed among the samples, a burst slows the samples around them too (here:
    every call 3 ms slower for 60 ms from the first call on a new set): `ok`."""
    h = Harness("cpu")
    call, start = Harness.call, []

    def burst(self, lib, job, d, b=0):
        if b == 0 and self.last_set >= len(d.sets) and not start:
            start.append(time.perf_counter())
        if start and time.perf_counter() - start[0] < 0.06:
            time.sleep(0.003)
        call(self, lib, job, d, b)

    monkeypatch.setattr(Harness, "call", burst)
    res = h.run(honest_job(tmp_path))
    assert res["status"] == "ok", res
    assert start and max(res["samples_ms"]) > 3.0 and max(res["unseen_ms"]) > 3.0


def test_honest_kernel_is_neither(tmp_path, harness):
    """An honest kernel is not `replayed`: same problem, status ok, a call on a new set made
    and as fast as the samples."""
    res = harness.run(honest_job(tmp_path))
    assert res["status"] == "ok", res
    assert res["unseen_ms"] and "escaped_ms" not in res  # no CPU probe
    assert min(res["unseen_ms"]) <= REPLAY_FACTOR * res["median_ms"] + 0.01
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


def test_a_replayer_that_pads_a_quarter_of_its_calls_is_replayed(tmp_path, harness):
    """MODE 1 with every fourth call padded to three honest calls' cost: its unseen calls
    were never slower than the samples' 90th percentile, `ok` at 0.07 ms against the honest
    0.35. Calls on new sets go on until load alone cannot explain that all are slow:
    `replayed`; or, where load slowed more of its samples than its padding did (at 20
    samples, 8 or more over the line leave 14 calls undecided: workers.replay),
    `too_slow` with no replay verdict. Never `ok`."""
    res = harness.run(attack_job(tmp_path, 4))
    assert res["median_ms"] < 0.5 * min(res["unseen_ms"])
    if res["status"] == "too_slow":
        assert res["error"].startswith(
            f"no replay verdict: all {len(res['unseen_ms'])} of its calls"), res
        assert load_chance(res["samples_ms"], res["unseen_ms"], res["seen_ms"]) >= REPLAY_ALPHA
    else:
        assert res["status"] == "replayed", res
        # as many calls on new sets as load needed ruled out
        assert load_chance(res["samples_ms"], res["unseen_ms"], res["seen_ms"]) < REPLAY_ALPHA


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
    assert res["n_samples"] >= TIMING["min_samples"] and res["unseen_ms"]
    own = [m["s"] for m in said if m["stage"] == "own"]
    assert sum(s >= 1.1 for s in own) == 2  # the two checks (a draw may add its own)
    # the sandbox waits the harness's own time longer
    assert Sb._extend({"progress": True, "stage": "own", "s": 3.0}, 10.0, 2.0, 0.0) == 13.0


def test_a_draw_of_new_sets_does_not_cut_the_calls_on_them(tmp_path, monkeypatch):
    """Drawing more never-seen input sets (ref.py's inputs() and reference(), made to take
    2.1 s of a 2 s budget here) counted in the candidate's budget: the calls of an honest
    kernel whose first calls on new sets load slowed were cut, and the verdict, still
    open, would be `too_slow`. The draw is the harness's own time."""
    import workers.harness as wh
    from workers.harness import N_UNSEEN

    draw, call = Harness._draw, Harness.call

    def slow_draw(self, mod, job, scalars, shapes, ref_name, reference, seeds):
        if job["seed"] not in seeds:  # a draw after the preparation's
            time.sleep(2.1)
        return draw(self, mod, job, scalars, shapes, ref_name, reference, seeds)

    def burst(self, lib, job, d, b=0):  # load landing on the calls on the first two new sets
        if b == 0 and len(d.sets) <= self.last_set < len(d.sets) + N_UNSEEN:
            time.sleep(0.03)
        call(self, lib, job, d, b)

    monkeypatch.setattr(Harness, "_draw", slow_draw)
    monkeypatch.setattr(Harness, "call", burst)
    # calls on new sets every other call or so: two slow ones leave the verdict open, never
    # `replayed` ((1/5) ** 2 after a few samples), and more are drawn
    monkeypatch.setattr(wh, "Q_UNSEEN", 0.5)
    h = Harness("cpu")
    res = h.run(_honest_2s(tmp_path))
    assert res["status"] == "ok", res
    assert min(res["unseen_ms"][:2]) > 30.0 and len(res["unseen_ms"]) >= 3
    d = next(iter(h.data.values()))
    assert d.reserve  # drawn during the samples, 2.1 s each


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


@pytest.mark.parametrize("filtered", [True, False])
@pytest.mark.parametrize("name", ["lazy_bus", "lazy_sys"])
def test_outputs_computed_in_a_sigbus_handler_on_their_first_read_never_pass(tmp_path, name,
                                                                             filtered):
    """tests/fixtures/faultpack/lazy_bus.cpp (red-team round 6): after the check's calls,
    solve lays a truncated memfd mapping over its outputs and returns; the first read
    faults (SIGBUS) and its handler computes them, after the call's timing window: `ok` at
    50x the honest speed before. lazy_sys.cpp (round 7) hid that handler behind a seccomp
    filter of its own (refused since: workers.seccomp).

    In a sandbox as kopt runs it, the system-call filter refuses the shared mapping laid
    over its outputs (``MAP_SHARED | MAP_FIXED``, refused since red-team round 12 laid one
    for a forked child): its outputs keep the poison, `wrong_result`; it also refuses the
    candidate's handler for SIGBUS (a new action for any signal: before the mapping was
    refused, the first read of its outputs killed the harness, `crashed`). Where the
    sandbox is off (no filter), the
    harness's look at the handlers after each call finds the one it left installed:
    `escaped` (a look that fails, lazy_sys's filter, counts as a change), and the harness
    starts afresh after it."""
    from workers import isolation
    from workers.isolation import Isolation
    from workers.sandbox import Sandbox

    src = PACK / f"{name}.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 32768},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    if not filtered:
        sb.isolation = Isolation(isolation.NONE, why="switched off by the test")
    else:
        assert sb.isolation.isolated, sb.isolation.why  # CI's machine and the H200 host can
    try:
        res = sb.run(j, timeout_s=60)
        restarts = sb.restarts
    finally:
        sb.close()
    if filtered:
        assert res["status"] == "wrong_result" and "gave wrong output" in res["error"], res
    else:
        assert res["status"] == "escaped", res
        said = res["error"].split("solve left a handler of its own for ", 1)
        assert len(said) == 2 and "SIGBUS" in said[1].split(" (")[0], res
        assert restarts == 1


def test_outputs_computed_in_a_timer_signals_handler_after_the_call_never_pass(tmp_path):
    """tests/fixtures/faultpack/lazy_timer.cpp (red-team round 8): solve arms a POSIX timer
    aimed at the harness's own thread (SIGUSR2, not a fault signal) a few microseconds ahead
    and returns at once; its handler does the call's work after the clock stopped and
    before the outputs were read: `ok` at about 100x the honest speed, 11 of 12 jobs. In a
    sandbox the filter refuses the handler (a new action for any signal): the timer's
    signal takes its default action and ends the harness, `crashed`."""
    from workers.sandbox import Sandbox

    src = PACK / "lazy_timer.cpp"
    j = job(artifact(tmp_path, src, {"D_US": 20}), src, PACK / "ref.py", {"N": 32768},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    assert sb.isolation.isolated, sb.isolation.why
    try:
        res = sb.run(j, timeout_s=60)
    finally:
        sb.close()
    assert res["status"] == "crashed" and "SIGUSR2" in res["error"], res


def test_a_handler_changed_between_jobs_is_not_the_next_candidates(tmp_path):
    """A thread a candidate left behind changed a signal handler once its own job was over
    (red-team round 7: SIGFPE set to SIG_IGN after 300 ms idle): the next, honest job was
    `escaped` for it. The harness looks again when each job starts: a change made between
    jobs is nobody's (the framer's own job had ended clean)."""
    import signal

    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    h = Harness("cpu")
    assert h.run(j)["status"] == "ok"
    old = signal.signal(signal.SIGFPE, signal.SIG_IGN)  # as the left-behind thread did
    try:
        res = h.run(j)
    finally:
        signal.signal(signal.SIGFPE, old)
    assert res["status"] == "ok", res


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
    assert res["median_ms"] < 0.5 * min(res["unseen_ms"])
    d = next(iter(h.data.values()))
    held = [s.seed for s in d.unseen + d.reserve]
    assert len(held) >= len(res["unseen_ms"]) and not set(held) & set(range(3, 43))


def test_a_replayer_is_named_replayed_again_when_run_once_more(tmp_path):
    """A job named ``replayed`` is run once more, in a fresh harness, before the verdict is
    final (workers.sandbox ``run_retrying``): beside two test suites at once an honest
    kernel was named so once, its calls on new values slow by load the test assumes lands
    on every call alike, and a red-team candidate's thread left in the harness rewrote the
    next candidate's code to look so. A content replayer (MODE 1) is named so both times:
    the harness was restarted once and the new one served one job, and the answer is the
    second's, with no note of a retry."""
    from workers.sandbox import Sandbox

    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        res = sb.run_retrying(attack_job(tmp_path, 1), timeout_s=60)
        served, restarts = sb.served, sb.restarts
    finally:
        sb.close()
    assert res["status"] == "replayed" and (served, restarts) == (1, 1), (res, served)
    assert res["error"].startswith("all ") and "retried" not in res["error"], res


def test_a_replayed_verdict_that_the_run_again_clears_says_so(monkeypatch):
    """The rule of ``run_retrying`` on the answers it gets (the harness's answers scripted:
    which run of a real kernel load slows cannot be chosen): ``replayed`` then ``ok`` is
    ``ok``, its error naming the first run's verdict; ``replayed`` twice is the second;
    ``ok`` or ``wrong_result`` is never run again."""
    from workers.sandbox import Sandbox

    answers: list[dict] = []
    monkeypatch.setattr(Sandbox, "run", lambda self, job, timeout_s: answers.pop(0))
    sb = Sandbox("cpu")
    first = {"status": "replayed", "error": "all 8 calls on input values it had never seen"}
    answers += [dict(first), {"status": "ok", "median_ms": 0.7}]
    got = sb.run_retrying({}, timeout_s=1)
    assert got == {"status": "ok", "median_ms": 0.7, "error": (
        "retried in a fresh harness: the first run was named replayed (all 8 calls on input "
        "values it had never seen)")}
    answers += [dict(first), {"status": "replayed", "error": "all 9 calls"}]
    assert sb.run_retrying({}, timeout_s=1) == {"status": "replayed", "error": "all 9 calls"}
    for status in ("ok", "wrong_result"):
        answers += [{"status": status}, {"status": "never asked"}]
        assert sb.run_retrying({}, timeout_s=1) == {"status": status}
        assert answers == [{"status": "never asked"}]
        answers.clear()
    sb.close()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the framer writes an x86-64 jump over the victim's solve")
@pytest.mark.parametrize("wrong", [False, True])
def test_a_framer_left_in_the_harness_cannot_get_the_next_candidate_named_replayed(
        tmp_path, wrong, threads_kept):
    """tests/fixtures/faultpack/framer.cpp (red-team round 14): honest itself, it leaves a
    thread in the harness that rewrites every later candidate's ``solve`` to jump to a
    wrapper that does the work but is slow on values it has not seen, so that an honest
    victim looks like a replayer (with WRONG, also writes a wrong output). Its retry ran in
    the same harness, where the patch stood: `replayed` twice, final; a `wrong_result` was
    never run again. A failure in a harness that ran another artifact is run again in a
    fresh harness (no framer there): the victim is `ok` at its own speed."""
    from workers.sandbox import Sandbox

    args = {"x": ["N"], "buf": ["N"], "y": ["N"]}
    framer = job(artifact(tmp_path, PACK / "framer.cpp", {"WRONG": 1} if wrong else {}),
                 PACK / "faults.cpp", PACK / "ref.py", {"N": 4096}, args, job_key="framer")
    # its job long enough (2000 samples, about 0.7 s here) that the framer's thread, polling
    # every 0.5 ms at normal priority, patches it within the job however loaded the
    # machine: the 14-sample job (11 ms) ended unframed once beside another suite
    victim = honest_job(tmp_path, job_key="victim", timing={
        **TIMING, "min_samples": 2000, "max_samples": 2000, "max_time_ms": 5000})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        assert sb.run_retrying(framer, timeout_s=60)["status"] == "ok"
        got = sb.run_retrying(victim, timeout_s=60)
    finally:
        sb.close()
    assert got["status"] == "ok", got
    assert min(got["unseen_ms"]) <= REPLAY_FACTOR * got["median_ms"] + REPLAY_MS, got
    if wrong:  # every call of the framed victim is wrong: its first run was wrong_result
        assert ("retried in a fresh harness: the first run was wrong_result, after another "
                "candidate's job") in got["error"], got
