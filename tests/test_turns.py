"""A contest's contenders each in a harness of its own, taking turns (workers.turns)."""

import os
import platform
from pathlib import Path

import pytest
from test_faults import PACK, artifact, job

from conftest import faults_running_python
from workers import hold, turns
from workers.device_actor import DeviceActor
from workers.replay import REPLAY_FACTOR, REPLAY_MS
from workers.sandbox import Sandbox

ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
ROUNDS = 8


def contender(tmp_path, src, defines, key, n=4096):
    """A contest job of the fault pack's ref.py (N=``n``) for ``src`` built with
    ``defines``, with its build id and artifact bytes as the device actor takes them."""
    art = artifact(tmp_path, src, defines)
    j = job(art, PACK / "faults.cpp", PACK / "ref.py", {"N": n}, ARGS, job_key=key)
    return {**j, "build_id": Path(art).parent.name}, Path(art).read_bytes()


def against_honest(tmp_path, src, defines, key, n=4096):
    """The device actor's contest (:data:`ROUNDS` rounds, in turns) of the fault pack's
    honest MODE 0 ("honest") and tests/fixtures/faultpack/``src`` built with ``defines``
    (``key``), at N=``n``; returns its answer."""
    h, art_h = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "honest", n)
    o, art_o = contender(tmp_path, PACK / src, defines, key, n)
    actor = DeviceActor("cpu")
    try:
        return actor.contest([h, o], ROUNDS, art_h, art_o)
    finally:
        actor.shutdown()


def in_turns(boxes: list[Sandbox], jobs: list[dict]) -> list[dict]:
    """workers.turns ``run_in_turns`` of contest jobs ``jobs`` (:data:`ROUNDS` rounds) in
    ``boxes``, every sandbox closed after."""
    try:
        return turns.run_in_turns(
            boxes, [{**j, "contest": [j], "rounds": ROUNDS, "turns": True} for j in jobs], 60)
    finally:
        for b in boxes:
            b.close()


def test_contenders_take_turns_each_in_a_harness_of_its_own(tmp_path, monkeypatch):
    """Two honest contenders, each in its own sandbox: a first turn each for its load,
    checks and warm-up, then every round gives each one turn (rotating who goes first),
    each harness takes its own samples, both `ok`."""
    given: list[int] = []
    give = turns.Turns.give
    monkeypatch.setattr(turns.Turns, "give", lambda self, i: (given.append(i), give(self, i)))
    jobs = [contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, k)[0] for k in ("a", "b")]
    boxes = [Sandbox("cpu", {"OMP_NUM_THREADS": "1"}) for _ in jobs]
    try:
        answers = turns.run_in_turns(
            boxes, [{**j, "contest": [j], "rounds": ROUNDS, "turns": True} for j in jobs], 60)
        pids = {b.host_pid for b in boxes}
    finally:
        for b in boxes:
            b.close()
    res = turns.combined(jobs, answers)
    assert res["status"] == "ok", res
    assert [r["n_samples"] for r in res["results"]] == [ROUNDS, ROUNDS]
    assert len(pids) == 2 and None not in pids  # two harness processes
    firsts = [set(given[2 * r:2 * r + 2]) for r in range(ROUNDS + 1)]
    assert firsts == [{0, 1}] * (ROUNDS + 1), given  # the checks' and each round's: one each
    assert given[:4] == [0, 1, 1, 0], given  # who goes first rotates


def test_a_contender_that_fails_is_named_and_its_rivals_are_not(tmp_path, monkeypatch):
    """Fault pack MODE 3 (honest for two calls, then nothing) fails its samples' check in
    its own harness: the contest names it alone (`wrong_result`); the honest rival, stopped
    with the contest, is not named."""
    a, art_a = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "honest")
    b, art_b = contender(tmp_path, PACK / "faults.cpp", {"MODE": 3}, "lazy")
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    actor = DeviceActor("cpu")
    try:
        res = actor.contest([a, b], ROUNDS, art_a, art_b)
    finally:
        actor.shutdown()
    assert res["status"] == "wrong_result", res
    assert res["failed"] == ["lazy"] and res["failed_status"] == {"lazy": "wrong_result"}, res


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the framer writes an x86-64 jump over the victim's solve")
@pytest.mark.parametrize("slow", [False, True])
def test_a_framer_cannot_reach_its_rival_in_a_contest(tmp_path, monkeypatch, slow):
    """tests/fixtures/faultpack/framer.cpp (red-team round 14), honest itself, leaves a
    thread that rewrites every other loaded ``solve`` to a wrapper slow on values it has
    not seen (its rival named `replayed`, in company and again in company: dropped), or,
    with SLOW_ALL, slow on every call (its rival 2.6x slower side by side, nothing named).
    With each contender in a harness of its own, the framer's thread never sees its rival:
    the rival is `ok`, as fast as the framer (both do the same work, timed in turns), and
    fast on new values."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    defines = {"SLOW_ALL": 1, "PAD": 2} if slow else {}
    f, art_f = contender(tmp_path, PACK / "framer.cpp", defines, "framer")
    v, art_v = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "victim")
    actor = DeviceActor("cpu")
    try:
        res = actor.contest([f, v], 20, art_f, art_v)
    finally:
        actor.shutdown()
    assert res["status"] == "ok", res
    framer, victim = res["results"]
    assert victim["median_ms"] <= 1.5 * framer["median_ms"], res
    assert min(victim["unseen_ms"]) <= REPLAY_FACTOR * victim["median_ms"] + REPLAY_MS, res


def test_a_held_rival_that_used_cpu_escaped_its_hold():
    """A contender whose sandbox used more than ESCAPED_CPU_MS of CPU while held for its
    rivals' turns is `suspect`; at the bound, or failed already, its answer stands."""
    ok = {"status": "ok", "results": [{}]}
    assert turns._escaped(ok, turns.ESCAPED_CPU_MS) is ok
    bad = turns._escaped(ok, turns.ESCAPED_CPU_MS + 1)
    assert bad["status"] == "suspect" and "escaped the hold" in bad["error"]
    wrong = {"status": "wrong_result", "error": "x"}
    assert turns._escaped(wrong, 50.0) is wrong


@pytest.mark.parametrize("mode", [10, 11])
def test_a_contender_that_patches_its_own_clock_is_suspect_in_company(tmp_path, monkeypatch,
                                                                      mode):
    """Attack MODE 10 (tests/fixtures/faultpack/attacks.cpp) scales its harness's
    ``time.perf_counter_ns`` by 1/100 from its first call (MODE 11 also skips calls on
    outputs not poisoned since its last). In one shared harness that clock timed every
    contender alike; in a harness of its own it times only the patcher, which then won its
    contest against an honest rival by the factor (red-team round 15, at 1/2: 2x). Its own
    harness holds only its code: a clock replaced there is `suspect`, and the rival is not
    named."""
    from test_attacks import attack_job

    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    h, art_h = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "honest")
    a = {**attack_job(tmp_path, mode), "job_key": "patcher"}
    a["build_id"] = Path(a["artifact"]).parent.name
    actor = DeviceActor("cpu")
    try:
        res = actor.contest([h, a], ROUNDS, art_h, Path(a["artifact"]).read_bytes())
    finally:
        actor.shutdown()
    assert res["failed"] == ["patcher"] and res["failed_status"] == {"patcher": "suspect"}, res
    assert "replaced time.perf_counter_ns" in res["error"], res



@pytest.mark.parametrize("rivals", [True, False])
def test_a_contender_judged_alone_against_rivals_has_its_clocks_watched(tmp_path, monkeypatch,
                                                                       rivals):
    """A contest of one contender leaves its harness's clocks to the outside clock, unless its
    figures may stand against rivals' (``rivals``: kopt.loop.contests judges a contender
    alone after it was named so in company): a red-team cheater crashed in company on
    purpose, scaled its clock by 10/18 in the solo contest that settled it, and won at
    1.7x. With ``rivals``, attack MODE 10 (its clock at 1/100) is `suspect` for the clock
    it replaced; without, its clocks are not looked at (what catches MODE 10's 1/100 there
    is another guard: its witness turns' CPU bound, which 10/18 passed)."""
    from test_attacks import attack_job

    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    a = {**attack_job(tmp_path, 10), "job_key": "patcher"}
    a["build_id"] = Path(a["artifact"]).parent.name
    actor = DeviceActor("cpu")
    try:
        res = actor.contest([{**a, "rivals": True} if rivals else a], ROUNDS,
                            Path(a["artifact"]).read_bytes())
    finally:
        actor.shutdown()
    if rivals:
        assert res["failed"] == ["patcher"] and res["failed_status"] == {
            "patcher": "suspect"}, res
        assert "replaced time.perf_counter_ns" in res["error"], res
    else:
        assert "replaced time.perf_counter_ns" not in str(res.get("error")), res

def test_a_device_harness_that_ran_while_held_is_ended_and_the_contest_run_again(
        tmp_path, monkeypatch):
    """The device's own harness, where an earlier job's code may have left threads, is held
    still through a contest of rivals; when it used CPU anyway (a red-team leftover's long
    system calls escaped holds; the figure is scripted here), it is ended and the contest
    run again without it: `ok`, its figures from the second run."""
    from workers import hold

    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    (a, art_a), (b, art_b) = (contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, k)
                              for k in ("a", "b"))
    actor = DeviceActor("cpu")
    pid, real, seen = actor.sandbox.proc.pid, hold.used_ms, []

    def used(h):
        if h.leader == pid:
            seen.append(pid)
            return 5.0
        return real(h)

    monkeypatch.setattr(hold, "used_ms", used)
    try:
        res = actor.contest([a, b], ROUNDS, art_a, art_b)
        ended = actor.sandbox.proc is None and actor.sandbox.restarts == 1
    finally:
        actor.shutdown()
    assert res["status"] == "ok", res
    assert seen == [pid] and ended


def test_a_clock_swapped_below_its_python_object_is_suspect_in_company(tmp_path, monkeypatch):
    """tests/fixtures/faultpack/mlswap.cpp (red-team round 16) points the builtin
    ``time.perf_counter_ns``'s method definition at one of its own (half the time) from
    its first call: the object stays the same, and it won its contest in turns at 2x. The
    harness reads the C pointers a call of each watched clock runs: `suspect`."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    res = against_honest(tmp_path, "mlswap.cpp", {"SCALE": 50}, "swapper")
    assert res["failed"] == ["swapper"] and res["failed_status"] == {"swapper": "suspect"}, res
    assert "replaced time.perf_counter_ns" in res["error"], res


def test_the_c_pointers_of_the_clocks_are_read_and_unchanged_in_an_untouched_process():
    """workers.harness ``c_taken`` reads every clock of the time module the harness watches
    (this interpreter's layout is the one it knows), and nothing has moved since."""
    from workers.harness import CLOCK_NAMES, c_swapped, c_taken, watched

    watch = watched("cpu")
    taken = c_taken(watch)
    assert {f"time.{n}" for n in CLOCK_NAMES} <= set(taken), sorted(taken)
    clocks = {n: taken[n][1] for n in taken if n.startswith("time.")}
    assert all(None not in parts and parts[0] for parts in clocks.values()), clocks
    assert c_swapped(taken) == []


def test_a_harness_that_does_not_start_names_no_contender(tmp_path, monkeypatch):
    """A contender's harness that cannot start (the device's fault: no memory for another
    CUDA context, say) stops the contest as the device's failure (``actor``) and names no
    contender; the rival that started is stopped, not named."""
    jobs = [contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, k)[0] for k in ("a", "b")]
    boxes = [Sandbox("cpu", {"OMP_NUM_THREADS": "1"}) for _ in jobs]

    def refuse(e):
        raise RuntimeError("no harness today")

    def not_ready():
        boxes[1].kill()
        raise RuntimeError("harness did not start: no memory for its context")

    monkeypatch.setattr(boxes[1], "ready", not_ready)  # its process started, not set up,
    monkeypatch.setattr(boxes[1], "fall_back", refuse)  # nor started outside the sandbox
    answers = in_turns(boxes, jobs)
    res = turns.combined(jobs, answers)
    assert res["actor"] is True and "failed" not in res, res
    assert res["error"] == "a contender's harness did not start: RuntimeError('no harness today')"
    assert answers[0]["status"] == "aborted", answers


def test_a_forged_contest_answer_is_suspect_by_its_turns(tmp_path, monkeypatch):
    """tests/fixtures/faultpack/turnforge.cpp MODE 0 (red-team round 16) writes a complete `ok`
    answer of 60 us samples to its harness's answer pipe in its first round, and the
    ping's pong: it won at 2.7x against the honest 0.16 ms (0.060 ms). Its sandbox timed one turn of
    rounds, not 20: `suspect`, named alone."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    res = against_honest(tmp_path, "turnforge.cpp", {"MODE": 0, "FAKE_US": 60, "WRONG": 0},
                         "forger")
    assert res["failed"] == ["forger"] and res["failed_status"] == {"forger": "suspect"}, res
    # (its forged answer: its rounds' samples and 3 on held-back sets)
    assert f"answered {ROUNDS + 3} samples after 1 turn of rounds" in res["error"], res


def test_figures_that_no_turn_could_hold_are_suspect():
    """workers.turns ``in_its_turns`` on answers as a harness (or code in its process)
    writes them: the honest shape passes, its median taken from its samples, not its
    word; more samples than turns, a sample longer than its turn, or samples that are not
    its rounds' are `suspect`; a failed answer, or one of a job not in turns, is left as
    it is."""
    one = {"median_ms": 0.001, "iqr_ms": 0.0, "n_samples": 3, "samples_ms": [0.3, 0.1, 0.2],
           "seen_ms": [0.3, 0.1, 0.2, 0.25], "unseen_ms": [0.4]}
    ok = {"status": "ok", "error": "", "results": [one]}
    turns_ms = [50.0, 0.35, 0.5, 0.3, 0.45, 0.3]  # the load turn, then five rounds
    got = turns.in_its_turns(ok, turns_ms, 3)
    assert got["status"] == "ok" and got["results"][0]["median_ms"] == 0.2, got
    assert got["results"][0]["n_samples"] == 3
    cases = {"after 4 turns": turns_ms[:-1],
             "longer than the turn": [50.0, 0.35, 0.39, 0.3, 0.35, 0.3]}
    for why, ts in cases.items():
        bad = turns.in_its_turns(ok, ts, 3)
        assert bad["status"] == "suspect" and why in bad["error"], (why, bad)
    other = {**ok, "results": [{**one, "samples_ms": [0.1, 0.1, 0.1]}]}
    assert "not the first 3" in turns.in_its_turns(other, turns_ms, 3)["error"]
    for bad_x in (-1.0, 0.0, float("inf"), float("nan")):
        odd = {**ok, "results": [{**one, "unseen_ms": [bad_x]}]}
        assert "not a positive finite time" in turns.in_its_turns(odd, turns_ms, 3)["error"]
    assert turns.in_its_turns({"status": "wrong_result"}, turns_ms, 3) == {
        "status": "wrong_result"}
    assert turns.in_its_turns(ok, [], 3) is ok


def test_a_contender_judged_alone_is_held_to_its_turns_too(tmp_path, monkeypatch):
    """A contender flagged in company is judged alone (kopt.loop.contests): its solo
    contest was not in turns, and the forger (turnforge.cpp MODE 0, ALWAYS=1) won it with its forged
    60 us figures. A solo contest is in turns too (no rival to hold, its clocks left to
    the outside clock): `suspect`."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    f, art_f = contender(tmp_path, PACK / "turnforge.cpp",
                         {"MODE": 0, "FAKE_US": 60, "WRONG": 0, "ALWAYS": 1}, "forger")
    actor = DeviceActor("cpu")
    try:
        res = actor.contest([f], ROUNDS, art_f)
    finally:
        actor.shutdown()
    assert res["failed"] == ["forger"] and res["failed_status"] == {"forger": "suspect"}, res


@pytest.mark.parametrize("val", ["float('-inf')", "0.0"])
def test_samples_that_are_no_positive_time_are_suspect(tmp_path, monkeypatch, val):
    """tests/fixtures/faultpack/turnforge.cpp MODE 2 (red-team round 17) takes every turn
    itself and claims samples of -inf (its median computed here was NaN, which won a
    comparison) or 0 ms (the comparison raised): `suspect`."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    res = against_honest(tmp_path, "turnforge.cpp", {"MODE": 2, "VAL": val}, "forger")
    assert res["failed"] == ["forger"] and res["failed_status"] == {"forger": "suspect"}, res
    assert "not a positive finite time" in res["error"], res


def test_a_contender_cannot_say_the_device_failed(tmp_path, monkeypatch):
    """turnforge.cpp MODE 3 (red-team round 17) writes {"status": "error", "unstarted":
    true} to its answer pipe: the contest stopped as the device's failure (``actor``),
    nobody named, its honest rival never measured. Only the sandbox says a harness did not
    start: the forger's answer is its own failure, and it is named."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    res = against_honest(tmp_path, "turnforge.cpp", {"MODE": 3}, "forger")
    assert "actor" not in res and res["failed"] == ["forger"], res
    assert res["failed_status"] == {"forger": "error"}, res


@pytest.mark.parametrize("counted,leader_exits", [("cgroup", 0), ("namespace", 0),
                                                  ("namespace", 1)])
def test_a_contender_that_leaves_a_process_running_is_escaped_before_its_rivals_turn(
        tmp_path, monkeypatch, counted, leader_exits):
    """tests/fixtures/faultpack/leaver.cpp, honest work, leaves a process of its own in its
    sandbox from its load: held still, such processes still hold what they took (a red-team
    helper's used up the host's open files and its honest rival's load failed, dropping the
    rival). The contest stops before the rival's next turn: the leaver is `escaped`, its
    rival not named, and nothing of the leaver's is left running. Where no cgroup counts
    the sandboxes (the H100 hosts lent none), their PID namespaces tell the same, a process
    whose first thread exited while another runs on included (a red-team helper's hiding:
    its /proc/PID/stat said "Z")."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    _counted_by(counted, monkeypatch)
    given: list[int] = []
    give = turns.Turns.give
    monkeypatch.setattr(turns.Turns, "give", lambda self, i: (given.append(i), give(self, i)))
    lv, _ = contender(tmp_path, PACK / "leaver.cpp", {"LEADER_EXITS": leader_exits},
                      "leaver")
    h, _ = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "honest")
    boxes = [Sandbox("cpu", {"OMP_NUM_THREADS": "1"}) for _ in range(2)]
    left: list[int] = []
    real = Sandbox.left_running

    def seen(self: Sandbox) -> list[int]:
        pids = real(self)
        left.extend(p for p in pids if p not in left)
        return pids

    monkeypatch.setattr(Sandbox, "left_running", seen)
    jobs = [lv, h]
    answers = in_turns(boxes, jobs)
    res = turns.combined(jobs, answers)
    assert res["failed"] == ["leaver"] and res["failed_status"] == {"leaver": "escaped"}, res
    assert "1 process(es) besides its harness" in res["error"], res
    assert given == [0], given  # the leaver's load turn; none of its rival's after it
    # each gone, or dead with nothing held (a zombie its namespace's reaper has not reaped,
    # or a process in its exit: its namespace unreadable, its memory let go)
    assert left and not any(hold.alive(p) for p in left), left


def _counted_by(how: str, monkeypatch) -> None:
    """Sandboxes whose processes a cgroup counts (``"cgroup"``: skipped where the host lends
    kopt none, as tests/test_isolation.py's cgroup tests are; an H100 host lent none,
    docs/verified/2026-12-07-session52.md) or none does (``"namespace"``: their PID
    namespaces tell them)."""
    from workers import cgroup

    if how == "namespace":
        monkeypatch.setattr(cgroup, "make", lambda: (None, "none made in this test"))
        return
    made, why = cgroup.make()
    if made is None:
        pytest.skip(f"this host lends kopt no cgroup: {why}")
    made.remove()


@pytest.mark.parametrize("counted,leader_exits", [("cgroup", 0), ("namespace", 0),
                                                  ("cgroup", 1)])
def test_processes_a_job_left_running_end_with_its_harness(tmp_path, monkeypatch, counted,
                                                           leader_exits):
    """tests/fixtures/faultpack/leaver.cpp's job in a device's harness (run_retrying, then
    end_leftovers, as the device actor runs jobs) leaves a process in the sandbox: the
    harness ends after the job, the process with it, and the next candidate's job runs in
    a fresh harness (a red-team helper's spinning children made the next honest job 2.6x
    slower, both `ok`); an honest job's harness is kept. Where no cgroup counts the
    sandbox, its PID namespace tells the same; a process whose first thread exited while
    another runs on is one too."""
    from test_faults import artifact as built
    from test_faults import job as pack_job

    _counted_by(counted, monkeypatch)

    src, honest = PACK / "leaver.cpp", PACK / "faults.cpp"
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        box.start()
        first = box.host_pid
        left = box.run_retrying(pack_job(built(tmp_path, src, {"LEADER_EXITS": leader_exits}),
                                         src, PACK / "ref.py",
                                         {"N": 4096}, ARGS), 30)
        ended = box.end_leftovers()
        gone = not box.running
        after = box.run_retrying(pack_job(built(tmp_path, honest, {"MODE": 0}), honest,
                                          PACK / "ref.py", {"N": 4096}, ARGS), 30)
        kept = not box.end_leftovers() and box.running
        left_now = box.left_running()
        second, by_cgroup = box.host_pid, box.counted is not None
    finally:
        box.close()
    assert left["status"] == "ok" and after["status"] == "ok", (left, after)
    # the process its code started after the harness said "prepared" (Sandbox.before_code)
    assert len(ended) == 1, ended
    assert gone and second != first and left_now == [], (first, second, left_now)
    assert kept and by_cgroup == (counted == "cgroup"), box.limits


@pytest.mark.parametrize("counted", ["cgroup", "namespace"])
def test_a_job_whose_code_left_a_process_running_is_escaped(tmp_path, monkeypatch, counted):
    """The device actor's job of tests/fixtures/faultpack/leaver.cpp (honest outputs, a
    process of its own left in its sandbox from its load) is ``escaped``, its harness
    ended: a red-team candidate's children held the host's open files while its job ran
    (other devices' jobs then `lost`) and its own row stayed `ok`. The honest job after it,
    in a fresh harness, is `ok`."""
    from test_faults import artifact as built
    from test_faults import job as pack_job

    from workers.records import RunJob

    _counted_by(counted, monkeypatch)
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    outs = []
    actor = DeviceActor("cpu", spares=0)
    try:
        for src, defines in ((PACK / "leaver.cpp", {"LEADER_EXITS": 0}),
                             (PACK / "faults.cpp", {"MODE": 0})):
            art = Path(built(tmp_path, src, defines))
            payload = pack_job(str(art), src, PACK / "ref.py", {"N": 4096}, ARGS)
            common = {k: v for k, v in payload.items()
                      if k not in ("artifact", "dims", "job_key")}
            outs.append(actor.run(RunJob(f"k-{src.stem}", art.parent.name, {"N": 4096},
                                         common), art.read_bytes()))
        restarts = actor.stats()["restarts"]
    finally:
        actor.shutdown()
    assert [o.status for o in outs] == ["escaped", "ok"], outs
    assert outs[0].error.startswith("its code left 1 process(es) running in its sandbox "
                                    "after its job (pids "), outs[0].error
    assert outs[0].median_ms is not None and restarts == 1  # its figures kept; one restart


class _ScriptedBox:
    """A sandbox stand-in for workers.device_actor ``_attributed``: each run answers `ok`,
    each end_leftovers the next of ``left``; ``loaded`` the artifacts its harness was sent."""

    def __init__(self, left: list[list[int]], loaded: set[str]):
        self.left, self.loaded, self.runs = list(left), set(loaded), 0

    def run_retrying(self, job, timeout_s):
        self.runs += 1
        self.loaded.add(job.artifact)
        return {"status": "ok", "error": "", "median_ms": float(self.runs)}

    def end_leftovers(self):
        got = self.left.pop(0)
        if got:
            self.loaded = set()  # ended: the next run starts a fresh harness
        return got


@pytest.mark.parametrize("before, left, runs, status", [
    (set(), [[7]], 1, "escaped"),                    # its harness ran no other code: its own
    ({"other.so"}, [[7], [8]], 2, "escaped"),        # again in a fresh harness: its own
    ({"other.so"}, [[7], []], 2, "ok"),              # not in a fresh one: another's doing
    ({"other.so"}, [[]], 1, "ok")])                  # none left
def test_a_process_left_in_a_shared_harness_is_judged_in_a_fresh_one(before, left, runs,
                                                                     status):
    """A process left in the sandbox after a job whose harness had run other candidates'
    code could be the doing of a thread one of them left there: the job runs once more in a
    fresh harness, and that run's outcome is its own (as a crash is retried, so that one
    candidate cannot frame the next)."""
    from workers.device_actor import _attributed
    from workers.records import RunJob

    box = _ScriptedBox(left, before)
    res = _attributed(box, RunJob("k", "b", {"N": 1}, {"timing": {"timeout_s": 5}},
                                  artifact="mine.so"))
    assert (res.status, box.runs) == (status, runs), res
    assert res.median_ms == float(runs)  # the last run's figures
    # the row says why it ran twice where the second run stands
    assert ("run again in a fresh harness: 1 process(es)" in res.error) == (
        status == "ok" and runs == 2), res.error


def test_a_process_started_between_jobs_ends_its_harness_before_the_next(tmp_path,
                                                                         monkeypatch):
    """A process that joins the sandbox after a job ended (a red-team candidate's thread
    forked one once its job was over: it ran beside the next candidate's job, and neither
    row said so) ends the harness before the next job, which runs in a fresh one; without
    such a process the harness is kept."""
    import subprocess

    from test_faults import artifact as built
    from test_faults import job as pack_job

    _counted_by("cgroup", monkeypatch)
    honest = PACK / "faults.cpp"
    payload = pack_job(built(tmp_path, honest, {"MODE": 0}), honest, PACK / "ref.py",
                       {"N": 4096}, ARGS)
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    stray = None
    try:
        first = box.run_retrying(payload, 30)
        pid1 = box.host_pid
        kept = box.run_retrying(payload, 30)
        pid2 = box.host_pid
        stray = subprocess.Popen(["sleep", "600"])
        with open(Path(box.counted.dirs[0]) / "cgroup.procs", "w") as f:
            f.write(str(stray.pid))  # a process of the sandbox's now, started between jobs
        assert stray.pid in box.left_running()
        after = box.run_retrying(payload, 30)
        pid3, restarts = box.host_pid, box.restarts
    finally:
        box.close()
        if stray is not None:
            stray.kill()
            stray.wait()
    assert [r["status"] for r in (first, kept, after)] == ["ok", "ok", "ok"]
    assert pid1 == pid2 != pid3 and restarts == 1, (pid1, pid2, pid3, restarts)
    assert stray.returncode is not None


@pytest.mark.parametrize("counted", ["cgroup", "namespace"])
def test_processes_ref_py_started_in_the_first_job_are_not_held_against_it(
        tmp_path, monkeypatch, counted):
    """A ref.py whose import starts a lasting process (torch.compile's worker pool): the
    job whose preparation started it is not `escaped` (it was there at the harness's first
    "prepared"), and the harness is kept (the sandbox counted it as its own then)."""
    from test_faults import artifact as built
    from test_faults import job as pack_job

    from workers.records import RunJob

    _counted_by(counted, monkeypatch)
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    ref = tmp_path / "wref" / "ref.py"
    ref.parent.mkdir()
    ref.write_text((PACK / "ref.py").read_text() + (
        "\nimport subprocess as _sp\n_WORKER = _sp.Popen(['sleep', '600'])\n"))
    honest = PACK / "faults.cpp"
    art = Path(built(tmp_path, honest, {"MODE": 0}))
    payload = pack_job(str(art), honest, ref, {"N": 4096}, ARGS)
    common = {k: v for k, v in payload.items() if k not in ("artifact", "dims", "job_key")}
    actor = DeviceActor("cpu", spares=0)
    try:
        outs = [actor.run(RunJob(f"k{i}", art.parent.name, {"N": 4096}, common),
                          art.read_bytes()) for i in range(2)]
        restarts = actor.stats()["restarts"]
    finally:
        actor.shutdown()
    assert [o.status for o in outs] == ["ok", "ok"], outs
    assert restarts == 0  # ref.py's process is the sandbox's own: no job ended its harness
# a ref.py whose work starts a process of its own that stays (torch.compile's worker pool,
# a multiprocessing pool): the fault pack's, plus one such process started at its import
WORKER_REF = ("\nimport subprocess as _sp\nimport sys as _sys\n"
              "_WORKER = _sp.Popen([_sys.executable, '-c', 'import time; time.sleep(600)'])\n")


def worker_ref(tmp_path: Path, extra: str = WORKER_REF) -> Path:
    """A copy of the fault pack's ref.py with ``extra`` added: by default, it starts a
    lasting process when imported."""
    ref = tmp_path / "wref" / "ref.py"
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text((PACK / "ref.py").read_text() + extra)
    return ref


@pytest.mark.parametrize("counted", ["cgroup", "namespace"])
def test_processes_ref_py_started_are_not_a_candidates_leftovers(tmp_path, monkeypatch,
                                                                 counted):
    """A ref.py whose work starts processes that stay (torch.compile's worker pool) made
    every job's harness end after it, as if the candidate had left them running. They
    start before any candidate code loads (the harness's first "prepared" waits for the
    sandbox to count them: workers.harness ``Harness.prepared``): honest jobs keep their
    harness, ref.py's process lives on with it and ends with it, and a candidate that does
    leave one (tests/fixtures/faultpack/leaver.cpp) still ends it."""
    from test_faults import artifact as built
    from test_faults import job as pack_job

    _counted_by(counted, monkeypatch)
    ref, honest, leaver = worker_ref(tmp_path), PACK / "faults.cpp", PACK / "leaver.cpp"
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        box.start()
        first, infra0 = box.host_pid, set(box.infra)
        answers, kept = [], []
        for mode in (0, 0):
            answers.append(box.run_retrying(pack_job(
                built(tmp_path, honest, {"MODE": mode}), honest, ref, {"N": 4096}, ARGS), 30))
            kept.append(not box.end_leftovers() and box.host_pid == first)
        workers = box.infra - infra0
        alive_with_it = [hold.alive(p) for p in workers]
        left = box.run_retrying(pack_job(built(tmp_path, leaver, {"LEADER_EXITS": 0}),
                                         leaver, ref, {"N": 4096}, ARGS), 30)
        ended = box.end_leftovers()
    finally:
        box.close()
    assert [a["status"] for a in answers] == ["ok", "ok"], answers
    assert kept == [True, True] and len(workers) == 1 and alive_with_it == [True], (
        kept, workers, alive_with_it)
    assert left["status"] == "ok" and ended
    assert not any(hold.alive(p) for p in workers), workers


@pytest.mark.parametrize("when", ["between", "during"])
def test_a_stopped_process_of_ref_py_ends_the_harness_not_the_next_job(tmp_path, monkeypatch,
                                                                      when):
    """ref.py's processes live with the harness (they are the sandbox's own) and candidate
    code can stop one (SIGSTOP): a red-team candidate stopped ref.py's multiprocessing pool
    worker, and the next honest job's reference() waited on it until the preparation's time
    limit (600 s in a sweep). Stopped between jobs, the harness ends before the next job
    (Sandbox.end_strays); stopped while a job waits on it, the job ends at once,
    ``crashed``, and is run again in a fresh harness: ``ok``, well within the limit."""
    import signal
    import time

    from test_faults import artifact as built
    from test_faults import job as pack_job

    _counted_by("cgroup", monkeypatch)
    ref = worker_ref(tmp_path, POOL_REF)
    honest = PACK / "faults.cpp"
    art = built(tmp_path, honest, {"MODE": 0})
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        first = box.run_retrying(pack_job(art, honest, ref, {"N": 4096}, ARGS), 30)
        pool = sorted(box.infra - {p for p in box.infra if not _is_pool_worker(p, box)})
        for p in pool:
            os.kill(p, signal.SIGSTOP)
        stop_by = time.perf_counter() + 30  # a signal lands when its process next runs
        while any(hold.state(p) != "T" for p in pool) and time.perf_counter() < stop_by:
            time.sleep(0.01)
        if when == "during":
            box.end_strays = lambda: False  # as if it was stopped once the job began
        # a new size (so reference() runs, waiting on the pool), its calls ~0.1 ms: at N=2048
        # (0.03 ms) a fresh harness's first calls were once slow enough to be `replayed`
        second = box.run_retrying(pack_job(art, honest, ref, {"N": 32768}, ARGS), 30)
    finally:
        box.close()
    assert first["status"] == "ok" and len(pool) == 1, (first, pool)
    assert second["status"] == "ok", second
    # "during": ended at once as stopped, not after the preparation's limit (a timeout)
    assert ("retried in a fresh harness: the first run crashed (the harness, or a process "
            "of its sandbox that ref.py started, was stopped" in second["error"]) == (
        when == "during"), second


# Python a candidate runs in the harness's process (Python's C API) to have ref.py's
# multiprocessing pool worker run code of its own: through the pool's task pipe, which the
# harness's process holds (a red-team review's attack; its worker then spun beside every
# later candidate's job)
POOL_HIJACK = ("import gc, multiprocessing.pool as _mpp\n"
               "_code = 'import threading, time\\n"
               "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\\n'\n"
               "for _o in gc.get_objects():\n"
               "    if isinstance(_o, _mpp.Pool):\n"
               "        _o.apply(exec, (_code, {}))\n")


def test_ref_pys_processes_end_before_another_candidates_job(tmp_path, monkeypatch, entry_kept):
    """ref.py's processes live with its harness, but candidate code can drive them through
    what the harness's process holds (a red-team candidate had ref.py's pool worker run its
    code, which then spun beside every later candidate's job in that harness: an honest
    one `ok` 10x slower). Before a job of another candidate's code, a harness where they
    live ends (Sandbox.end_shared): the worker the candidate drove is gone before the
    honest job, which runs in a fresh harness; the same candidate's next job keeps it."""
    from test_faults import artifact as built
    from test_faults import job as pack_job

    _counted_by("namespace", monkeypatch)
    src = faults_running_python(tmp_path / "hijack", POOL_HIJACK)
    ref, honest = worker_ref(tmp_path, POOL_REF), PACK / "faults.cpp"
    hijacker = pack_job(built(tmp_path, src, {"MODE": 0}), src, ref, {"N": 4096}, ARGS)
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        runs = [box.run_retrying(hijacker, 30) for _ in range(2)]
        pool, kept = {p for p in box.infra if _is_pool_worker(p, box)}, box.restarts
        after = box.run_retrying(pack_job(built(tmp_path, honest, {"MODE": 0}), honest, ref,
                                          {"N": 4096}, ARGS), 30)
        gone = not any(hold.alive(p) for p in pool)
    finally:
        box.close()
    assert [r["status"] for r in runs] == ["ok", "ok"] and kept == 0 and len(pool) == 1, (
        runs, kept, pool)
    assert after["status"] == "ok" and box.restarts == 1 and gone, (after, box.restarts)


def _is_pool_worker(pid: int, box: Sandbox) -> bool:
    """Whether ``pid`` is a child of ``box``'s harness (the pool's worker, forked)."""
    return hold.parent(pid) == box.host_pid


# a ref.py whose reference() waits on a multiprocessing pool started at its import
POOL_REF = ("\nimport multiprocessing as _mp\n_POOL = _mp.get_context('fork').Pool(1)\n"
            "_ref0 = reference\n\n\ndef reference(*args, **kw):\n"
            "    assert _POOL.apply(int, (7,)) == 7\n    return _ref0(*args, **kw)\n")


def test_a_contest_with_a_ref_py_that_starts_processes_names_no_one_escaped(tmp_path,
                                                                            monkeypatch):
    """Two honest contenders of a ref.py whose import starts a lasting process, each in a
    harness of its own: each sandbox holds that process before the rival's turns, and
    neither is `escaped` (both were before the harness's first "prepared" waited for the
    sandbox to count ref.py's processes)."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    ref = worker_ref(tmp_path)
    jobs = []
    for key in ("one", "two"):
        art = artifact(tmp_path / key, PACK / "faults.cpp", {"MODE": 0})
        jobs.append({**job(art, PACK / "faults.cpp", ref, {"N": 4096}, ARGS, job_key=key),
                     "build_id": Path(art).parent.name})
    answers = in_turns([Sandbox("cpu", {"OMP_NUM_THREADS": "1"}) for _ in range(2)], jobs)
    res = turns.combined(jobs, answers)
    assert res["status"] == "ok" and not res.get("failed"), res


def test_a_device_contest_with_a_ref_py_that_starts_a_process_keeps_its_judges_sets(
        tmp_path, monkeypatch):
    """The device actor's contest of two honest contenders of a ref.py whose import starts a
    lasting process: the judge (the device's second harness, which never loads candidate
    code) made the witness turns' input sets, and ref.py's process started there ended it
    before the null turns (the judge's sandbox took the process for a stray): "witness
    turns asked for before their input sets", the contest unjudged twice, `error`. The
    judge's processes are its own: both contenders `ok`, their witness turns judged."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    ref = worker_ref(tmp_path)
    h, art_h = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "honest")
    o, art_o = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0, "GOOD": 1}, "honest2")
    actor = DeviceActor("cpu", spares=0)
    try:
        res = actor.contest([{**h, "reference": str(ref)}, {**o, "reference": str(ref)}],
                            ROUNDS, art_h, art_o)
        judge_restarts = actor.judge().restarts
    finally:
        actor.shutdown()
    assert res["status"] == "ok" and not res.get("failed"), res
    assert res["witness"] == "8 witness turns each" and judge_restarts == 0, res


# Python a candidate runs in the harness's process (Python's C API) to reset the harness's
# once-per-process flag of its first "prepared" (a red-team review's attack)
RESET_FIRST = ("import gc\nfor _o in gc.get_objects():\n"
               "    if type(_o).__name__ == 'Harness':\n"
               "        _o.told_prepared = False\n")


def test_a_harness_that_says_first_prepared_again_ends_the_job_at_once(tmp_path, entry_kept):
    """A harness says its first "prepared" once, before any candidate's code loads, and
    waits for the sandbox's "go". A candidate that set the harness's flag back (Python's C
    API) had the next candidate's job say "first" again and wait for a "go" that never
    came, its whole budget (then `ok` in a fresh harness). Now that job ends at once,
    ``crashed``, and is run again in a fresh harness: ``ok``, its row saying why."""
    src = faults_running_python(tmp_path / "reset", RESET_FIRST)
    honest = PACK / "faults.cpp"
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        attacker = box.run_retrying(job(artifact(tmp_path, src, {"MODE": 0}), src,
                                        PACK / "ref.py", {"N": 4096}, ARGS), 30)
        restarts = box.restarts
        # other dims, so that its inputs are made in that harness; calls of 0.3 ms, not
        # 0.03 (at N=2048 CI's load once had its retry named replayed)
        second = box.run_retrying(job(artifact(tmp_path, honest, {"MODE": 0}), honest,
                                      PACK / "ref.py", {"N": 8192}, ARGS), 30)
    finally:
        box.close()
    assert attacker["status"] == "ok", attacker
    assert second["status"] == "ok" and box.restarts == restarts + 1, second
    assert ("retried in a fresh harness: the first run crashed (the harness said it was "
            "first prepared a second time: code in its process changed its state") in (
                second["error"]), second


@pytest.mark.parametrize("third", ["ok", "replayed"])
def test_a_retry_named_replayed_after_a_crash_is_confirmed_by_a_third_run(third):
    """``Sandbox.run_retrying``: a job's first run crashed and its retry in a fresh harness
    was named ``replayed`` (CI's load, an honest 0.03 ms vector add: its 4 calls on new
    values at 0.1 ms and more): that verdict, unlike a first run's, had no second run to
    confirm it. Now a third run in a fresh harness decides: its outcome is the job's, its
    row saying what the runs before it said."""
    outcomes = [{"status": "crashed", "error": "first"}, {"status": "replayed", "error": "second"},
                {"status": third, "error": "" if third == "ok" else "third"}]
    box = Sandbox("cpu")
    runs = []
    box.run = lambda job, timeout_s: runs.append(job) or dict(outcomes[len(runs) - 1])
    res = box.run_retrying({"job_key": "k"}, 30)
    assert len(runs) == 3 and res["status"] == third, res
    if third == "ok":
        assert res["error"] == ("run a third time: the second run was named replayed "
                                "(second); retried in a fresh harness: the first run "
                                "crashed (first)"), res
    else:
        assert res["error"] == ("third; retried in a fresh harness: the first run crashed "
                                "(first)"), res


def test_the_reference_timed_after_a_candidate_that_reset_the_harness_is_run_again(
        tmp_path, entry_kept):
    """ref.py's timing runs in the device's own harness after candidates ran there: one
    that left its harness's state reset (the first "prepared" flag, through Python's C API)
    made the reference's timing end `crashed` (a red-team review: a thread left there that
    forged that message did the same). It is run again in a fresh harness, as a candidate's
    job is: `ok`, its row saying why."""
    from workers.records import RunJob

    src = faults_running_python(tmp_path / "reset", RESET_FIRST)
    art = Path(artifact(tmp_path, src, {"MODE": 0}))
    payload = job(str(art), src, PACK / "ref.py", {"N": 4096}, ARGS)
    common = {k: v for k, v in payload.items() if k not in ("artifact", "dims", "job_key")}
    actor = DeviceActor("cpu", spares=0)
    try:
        cand = actor.run(RunJob("k", art.parent.name, {"N": 4096}, common), art.read_bytes())
        ref = actor.time_reference(
            {**RunJob("reference", "", {"N": 4096}, common).payload(), "job_key": "reference"})
    finally:
        actor.shutdown()
    assert cand.status == "ok", cand
    assert ref["status"] == "ok", ref
    assert ("retried in a fresh harness: the first run crashed (the harness said it was "
            "first prepared a second time") in ref["error"], ref
