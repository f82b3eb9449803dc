"""The outside clock's rule (kopt.core.clock) and its two halves: the harness's clock job and
the sandbox's figure from outside the harness process."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults import PACK, artifact, job
from test_isolation import HELD_STATE, HOLDS, ISOLATED, _how

from conftest import faults_running_python
from kopt.core.clock import (
    CLOCK_FACTOR,
    CLOCK_MAX_CALLS,
    CLOCK_PREP_NOISE,
    CLOCK_SLACK_MS,
    ClockError,
    clock_calls,
    clock_limit_ms,
    clock_suspect,
    outside_blocks,
)
from workers.harness import Harness, clock_sets


def test_a_block_lasts_about_50_ms_at_the_claimed_median():
    assert clock_calls(1.0) == 50 and clock_calls(0.5) == 100 and clock_calls(20.0) == 3
    assert clock_calls(200.0) == 3  # never fewer than 3 calls
    assert clock_calls(1e-6) == CLOCK_MAX_CALLS  # a tiny claim cannot ask for endless calls
    assert clock_calls(0.005, prep_ms=10.0) == 5  # a call's preparation counts too
    with pytest.raises(ValueError):
        clock_calls(0.0)


def test_suspect_only_when_every_block_is_past_the_limit():
    assert clock_limit_ms(1.0) == CLOCK_FACTOR * 1.0 + CLOCK_SLACK_MS == 4.01
    assert clock_limit_ms(1.0, prep_ms=2.0) == 4.01 + CLOCK_PREP_NOISE * 2.0 == 5.01
    assert clock_suspect(1.0, []) == ""
    assert clock_suspect(1.0, [(200.0, 50, 0.0)]) == ""  # 4.0 ms a call: within 4.01
    assert clock_suspect(1.0, [(400.0, 50, 0.0), (190.0, 50, 0.0)]) == ""  # one within: load
    assert clock_suspect(1.0, [(250.0, 50, 100.0)]) == ""  # 5 ms: within 5.01 (2 ms preps)
    why = clock_suspect(0.01, [(500.0, 100, 0.0), (480.0, 100, 0.0), (510.0, 100, 1.0)])
    assert why == ("its contest median is 0.01 ms by its own process's clock, but 3 blocks "
                   "of its calls took 5, 4.8, 5.1 ms a call by a clock outside its process "
                   "(more than 4x the median + 0.01 ms, 0.055 ms at most with the "
                   "preparations' noise): its process's clock does not tell its time")
    with pytest.raises(ValueError):
        clock_suspect(1.0, [(1.0, 0, 0.0)])


def _scripted(calls_ms, preps_ms=(), fail=None):
    """A device's ``clock(n, loads_only)`` answering from a script: a preparation takes
    1 ms, or in each block of the preparations alone in turn ``preps_ms`` (then 1 ms), each
    block of calls in turn ``calls_ms`` a call on top of its preparations; ``fail``: the
    answer every block of that kind gets instead. The calls it got are in its ``log``."""
    figures, preps = iter(calls_ms), iter(preps_ms)

    def clock(n, loads_only):
        clock.log.append((n, loads_only))
        if fail is not None and fail[0] == loads_only:
            return fail[1]
        ms = n * next(preps, 1.0) if loads_only else n * (1.0 + next(figures))
        return {"status": "ok", "error": "", "outside_ms": ms}

    clock.log = []
    return clock


def test_the_tries_stop_at_the_first_that_clears_and_a_failure_says_whose_it_is():
    """A median of 1 ms and preparations of 1 ms a call: 3 preparations size the blocks
    (25 calls, 50 ms), then the preparations alone, and each try is a block of calls and
    the preparations alone again (the shorter of the two around it is subtracted); a first
    try at 9 ms a call is past the limit (4.51 ms), the second at 2 ms clears it, and no
    third is made. Wrong outputs after a block of calls are the contender's fault; the
    preparations alone failing is not (ClockError)."""
    clock = _scripted([9.0, 2.0, 2.0])
    blocks, fault = outside_blocks(clock, 1.0)
    assert clock.log == [(3, True), (25, True), (25, False), (25, True), (25, False),
                         (25, True)]
    assert fault == "" and blocks == [(225.0, 25, 25.0), (50.0, 25, 25.0)]
    assert clock_suspect(1.0, blocks[:1]) and clock_suspect(1.0, blocks) == ""
    # the preparations after the first block took 3 ms each (load): the shorter one counts
    blocks, _ = outside_blocks(_scripted([9.0, 2.0], preps_ms=[1.0, 1.0, 3.0]), 1.0)
    assert blocks[0] == (250.0 - 25.0, 25, 25.0)

    def counted(n, loads_only):  # the sandboxes' CPU time too: 1 ms a call of it, 0.5 a prep
        wall = _scripted([9.0])(n, loads_only)
        return {**wall, "outside_cpu_ms": n * (0.5 if loads_only else 1.5)}

    blocks, _ = outside_blocks(counted, 1.0)  # the wall's 9 ms a call was others' turns
    assert blocks == [(25.0, 25, 12.5)]
    wrong = {"status": "wrong_result", "error": "after 25 calls ..., the last one's outputs "
                                                "(input set 2) were wrong"}
    blocks, fault = outside_blocks(_scripted([9.0], fail=(False, wrong)), 1.0)
    assert (blocks, fault) == ([], "wrong_result: outside the contest, after 25 calls ..., "
                                   "the last one's outputs (input set 2) were wrong")
    with pytest.raises(ClockError, match=r"^the preparations alone, timed for the clock "
                       r"outside the contender's process: crashed: killed by SIGKILL$"):
        outside_blocks(_scripted([], fail=(True, {"status": "crashed",
                                                  "error": "killed by SIGKILL"})), 1.0)


def test_a_sandbox_that_used_cpu_while_held_makes_its_contender_suspect_at_once():
    """The device reports the CPU time the contender's held sandbox used during each block
    of preparations (``held_cpu_ms``): 0 when the hold held. Past ``HELD_CPU_MS`` after
    the first try's block of calls (a figure the patched clock would otherwise be judged
    by), the tries end there and the contender is suspect; within it, nothing changes."""
    from kopt.core.clock import HELD_CPU_MS

    def device(held_ms):
        base, held = _scripted([9.0, 2.0]), iter(held_ms)

        def clock(n, loads_only):
            res = base(n, loads_only)
            return {**res, "held_cpu_ms": next(held)} if loads_only else res

        return clock

    blocks, fault = outside_blocks(device([0.0, 0.0, 40.0]), 1.0)
    assert blocks == [] and fault == (
        "suspect: outside the contest, its sandbox used 40 ms of CPU while held still for a "
        f"block of preparations timed beside it (more than {HELD_CPU_MS:g} ms; a frozen or "
        "stopped process uses none): code it left running escaped the hold and took the "
        "CPUs from the block its clock is judged by")
    blocks, fault = outside_blocks(device([0.0, HELD_CPU_MS, 0.0, 0.0]), 1.0)
    assert fault == "" and blocks == [(225.0, 25, 25.0), (50.0, 25, 25.0)]


def test_the_harness_times_a_block_of_calls_prepared_as_samples(tmp_path):
    """The harness's own half: ``calls`` calls, each prepared as a sample is (an input set
    loaded, outputs poisoned, the cache flushed), outputs verified after the last; or the
    preparations alone (``clock_loads_only``), which the outside figure subtracts."""
    h = Harness("cpu")
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    sent = []
    h.progress = sent.append
    res = h.run({**j, "clock_calls": 7})
    assert res["status"] == "ok" and res["calls"] == 7 and res["inside_ms"] > 0, res
    # the outside clock stops at "clocked", before the checks run the reference
    # (its first "prepared" says so: workers.harness ``Harness.prepared``)
    assert sent == [{"stage": "prepared", "first": True}, {"stage": "clock"},
                    {"stage": "clocked"}]
    # input sets of their own for this many calls: no more than 1 GiB of x and buf, 4096
    # floats each, nor than 0.25 s of drawing them allows (clock_sets: below)
    assert 3 <= res["clock_sets"] <= (1 << 30) // (2 * 4096 * 4), res
    res = h.run({**j, "clock_calls": 7, "clock_loads_only": True})
    assert res["status"] == "ok" and res["calls"] == 7, res
    bad = job(artifact(tmp_path, src, {"MODE": 3}), src, PACK / "ref.py", {"N": 4096},
              {"x": ["N"], "buf": ["N"], "y": ["N"]})  # works only for its first two calls
    res = h.run({**bad, "clock_calls": 5})
    assert res["status"] == "wrong_result", res
    # every call on a set drawn for the block, never on the check's
    assert res["error"].startswith("of 5 calls outside the contest's rounds, the last one's "
                                   "outputs (on a fresh input set, seed "), res


def test_outputs_left_on_protected_pages_fail_the_clock_block(tmp_path):
    """Attack MODE 2 (tests/fixtures/faultpack/attacks.cpp) returns with its output pages
    protected and computes them in its SIGSEGV handler when they are first read. In the clock
    block, where a red-team candidate did so only on calls it took for the block's, the
    copies of checked calls and the check read them: only checked calls were computed, and
    a 1/100 clock cleared 14 of 15 times. Every output page is made readable again after
    each call of the block, and the handler it left installed after its first call makes it
    `escaped` (workers/harness.py ``_signals``)."""
    from test_attacks import attack_job

    h = Harness("cpu")
    res = h.run({**attack_job(tmp_path, 2), "clock_calls": 6})
    assert res["status"] == "escaped", res
    assert res["error"] == (
        "outside the contest's rounds: solve left a handler of its own for SIGSEGV (outputs "
        "computed in a fault or trap handler on their first read, after the call, are not "
        "timed); a kernel must not install signal handlers"), res


def test_outputs_computed_when_first_read_are_computed_inside_the_clock_block(tmp_path):
    """tests/fixtures/faultpack/lazy_trap.cpp does only the head of each call and finishes
    it in a SIGTRAP handler when a hardware breakpoint on its output's first bytes reports
    the first read (a red-team trial: the checks read only the checked calls, after the
    clock stopped, and a 1/100 clock cleared 3 of 4 times). Every output of every call of
    a block is now read inside it: every call is computed there; and the handler it left
    makes it `escaped`. (In a sandbox the system-call filter refuses perf_event_open as
    well: test_isolation.)"""
    import ctypes

    import numpy as np

    src = PACK / "lazy_trap.cpp"
    j = job(artifact(tmp_path, src, {"HEAD": 16}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    h = Harness("cpu")  # this process: no system-call filter, perf_event_open allowed
    lib = ctypes.CDLL(j["artifact"], mode=os.RTLD_LOCAL | os.RTLD_NOW)
    for f in (lib.lazy_calls, lib.lazy_done):
        f.restype = ctypes.c_long
    res = h.run({**j, "clock_calls": 40})
    assert res["status"] == "escaped" and "handler of its own for SIGTRAP" in res["error"], res
    made, done = lib.lazy_calls(), lib.lazy_done()
    assert made == 40 and done == 40, (made, done)
    # the trap is set on this machine: a call of the test's own is left unfinished
    x, buf, y = (np.random.default_rng(0).random(4096, dtype=np.float32) for _ in range(3))
    lib.solve(*(a.ctypes.data_as(ctypes.c_void_p) for a in (x, buf, y)), ctypes.c_int(4096))
    assert (lib.lazy_calls(), lib.lazy_done()) == (41, 40)


def _device(j, backend="cpu"):
    """A device of job ``j``'s own (workers.device_actor in this process, as
    kopt.run.runner.LocalRunner runs it), ``j`` with the ``build_id`` it needs, and a
    ``clock(n, loads_only)`` of ``j`` on it (kopt.core.clock.outside_blocks calls it)."""
    from kopt.run.runner import LocalRunner

    art = Path(j["artifact"])
    j, data = {**j, "build_id": art.parent.name}, art.read_bytes()
    runner = LocalRunner(backend)

    def clock(n, loads_only):
        res = runner.call(0, "clock", j, n, data, loads_only)
        # outside: from the sandbox's "go", which the harness's calls wait for
        assert res["status"] == "ok" and res["outside_ms"] >= res["inside_ms"], res
        return res

    return runner, j, data, clock


def test_the_outside_clock_starts_at_the_sandboxs_go_so_a_late_read_cannot_shorten_it(
        tmp_path, monkeypatch):
    """The sandbox reads the harness's "clock" message half a second late (a loaded machine,
    or a candidate's threads loading it): the harness's calls wait for the sandbox's "go",
    sent after that read, so the outside figure still holds every call (at least the
    harness's own figure for them). Timed from the message's read, as before, the block
    had ended by then and read about 0 ms: a clock patched any amount would have passed."""
    import time

    import workers.sandbox as sandbox
    from workers.sandbox import Sandbox

    read = sandbox.read_answer

    def late(conn):
        msg = read(conn)
        if msg.get("stage") == "clock":
            time.sleep(0.5)
        return msg

    monkeypatch.setattr(sandbox, "read_answer", late)
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        for loads_only in (False, True):
            res = sb.run({**j, "clock_calls": 40, "clock_loads_only": loads_only},
                         timeout_s=60)
            assert res["status"] == "ok" and res["calls"] == 40, res
            assert res["inside_ms"] > 0 and res["outside_ms"] >= res["inside_ms"], res
        again = sb.run(j, timeout_s=60)  # a plain job after them: no "go" left in the way
        assert again["status"] == "ok" and sb.restarts == 0, again
    finally:
        sb.close()


def _judged(j, backend="cpu"):
    """(contest median, outside blocks) of job ``j`` on a device of its own, as the loop's
    closing judges a contender: a contest of it alone, then kopt.core.clock.outside_blocks
    (the device's tries until one clears)."""
    runner, j, data, clock = _device(j, backend)
    try:
        con = runner.call(0, "contest", [j], 12, data)
        assert con["status"] == "ok", con
        med = con["results"][0]["median_ms"]
        blocks, fault = outside_blocks(clock, med)
        assert fault == "" and blocks, (fault, blocks)
        return med, blocks
    finally:
        runner.close()


@pytest.mark.usefixtures("outside_clock_alone")
def test_a_patched_clock_is_suspect_by_the_clock_outside_its_process(tmp_path):
    """Attack MODE 10 (tests/fixtures/faultpack/attacks.cpp) scales the harness's
    ``time.perf_counter_ns`` by 1/100 from its first call: its contest median, from that
    clock, is a hundredth of the honest kernel's while it does the same work. MODE 11 also
    skips its work when its outputs were not poisoned since its last call on the same
    inputs (it beat a block of calls back to back). The sandbox's clock (this process) times
    blocks of their calls, prepared as samples, from the outside: suspect. The honest
    kernel is not. Each in a sandbox of its own, as kopt runs them. At ``BLOCK_N``: at 4096
    (0.2 ms of work a call against 0.275 ms of preparation, half of which the block's limit
    allows) a fresh clone's suite read MODE 10's third block at 0.12 ms a call, within its
    0.156 ms limit, and the patched clock cleared (2026-12-08)."""
    from test_attacks import attack_job

    src = PACK / "faults.cpp"
    honest = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": BLOCK_N},
                 {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key="honest")
    figures = {"honest": _judged(honest)}
    for mode in (10, 11):
        figures[mode] = _judged({**attack_job(tmp_path, mode, n=BLOCK_N),
                                 "job_key": f"m{mode}"})
        # the patched clock: 100x fewer ms for the same work
        assert figures[mode][0] < figures["honest"][0] / 20, figures
        assert clock_suspect(*figures[mode]).startswith(
            f"its contest median is {figures[mode][0]:.4g} ms by its own process's clock")
    assert clock_suspect(*figures["honest"]) == "", figures


def _hogs(cpu, k=9):
    """``k`` busy processes on CPU ``cpu``, each in a session of its own (the scheduler
    shares a CPU between sessions' groups first, where the kernel groups them:
    ``sched_autogroup_enabled``), so that a harness beside them gets about a ``k + 1``-th
    of its time."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
                             start_new_session=True) for _ in range(k)]


def test_an_honest_kernel_timed_beside_a_cpu_hog_is_not_suspect(tmp_path):
    """An honest kernel's harnesses on one CPU, and nine busy processes there while each
    block of its calls is timed (not its preparations'): the worst a
    burst of load can do to the outside clock. By wall time alone those blocks are mostly
    the hogs' turns, and the calls took several times their median (two test suites at
    once, a load average of 12 on 2 cores, made it 2-3 ms a call against 0.25:
    `suspect`). The sandboxes' CPU time, counted by their cgroups, is not lengthened by
    another process: not suspect."""
    import signal

    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key="honest")
    mask = os.sched_getaffinity(0)
    cpu = min(mask)
    hogs: list[subprocess.Popen] = []
    runner = None

    def hogged(n, loads_only):
        for h in hogs if not loads_only else ():
            h.send_signal(signal.SIGCONT)
        try:
            return clock(n, loads_only)
        finally:
            for h in hogs:
                h.send_signal(signal.SIGSTOP)

    try:
        os.sched_setaffinity(0, {cpu})  # the harnesses started from here inherit it
        runner, j, data, clock = _device(j)
        if runner.devices[0].sandbox._cpu_ns() is None:
            pytest.skip("no cgroup counts the sandbox's CPU time here (kopt env: limits)")
        con = runner.call(0, "contest", [j], 12, data)
        assert con["status"] == "ok", con
        med = con["results"][0]["median_ms"]
        hogs = _hogs(cpu)
        for h in hogs:
            h.send_signal(signal.SIGSTOP)
        blocks, fault = outside_blocks(hogged, med)
        assert fault == "" and clock_suspect(med, blocks) == "", (med, blocks)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        if runner is not None:
            runner.close()
        os.sched_setaffinity(0, mask)


SPARSE_REF = """import torch
def inputs(seed, V, D, K):
    g = torch.Generator().manual_seed(seed)
    return {"param": torch.randn(V, D, generator=g),
            "idx": torch.randperm(V, generator=g)[:K].to(torch.int32),
            "g": torch.randn(K, D, generator=g)}
def reference(param, idx, g, V, D, K):
    p = param.clone(); p.index_add_(0, idx.long(), -0.1 * g); return {"param": p}
"""
SPARSE_CPP = """extern "C" void solve(float* param, const int* idx, const float* g, int V, int D,
                      int K) {
  for (int k = 0; k < K; ++k) {
    float* row = param + (long)idx[k] * D;
    for (int j = 0; j < D; ++j) row[j] -= 0.1f * g[(long)k * D + j];
  }
}
"""


def sparse_job(tmp_path):
    """The job of SPARSE_CPP (64 rows of a 16 MB in/out table), built under ``tmp_path``."""
    (tmp_path / "ref.py").write_text(SPARSE_REF)
    src = tmp_path / "sparse.cpp"
    src.write_text(SPARSE_CPP)
    return job(artifact(tmp_path, src, {}), src, tmp_path / "ref.py",
               {"V": 262144, "D": 16, "K": 64},
               {"param": ["V", "D"], "idx": ["K"], "g": ["K", "D"]}, job_key="sparse")


# its contest without witness turns: its calls (microseconds) sit within their bound's 0.05 ms
# margin, which the harness's own work around a call filled beside a loaded machine in 1 of
# 26 runs (docs/verified/2026-12-05-session41.md); this test is the outside clock's
@pytest.mark.usefixtures("outside_clock_alone")
def test_an_honest_kernel_on_a_few_rows_of_a_large_in_out_table_is_not_suspect(tmp_path):
    """A sparse update of 64 rows of a 16 MB in/out table (an SGD step on an embedding):
    each call needs the table reloaded, 1000x the kernel's own traffic. Timed outside with
    the reloads in the block, both honest winners of a red-team trial were `suspect`; the
    loads' own block, subtracted, leaves the calls."""
    med, blocks = _judged(sparse_job(tmp_path))
    assert clock_suspect(med, blocks) == "", (med, blocks)


def test_a_median_not_above_zero_is_suspect_whatever_the_harness_said():
    """A clock patched to run backwards gave a candidate an `ok` median of -61 ms, and the
    geometric mean of it stopped the sweep (a red-team trial): the sandbox makes such an
    answer `suspect`, for a job and for a contest's contender."""
    from workers.sandbox import _clock_broken

    res = _clock_broken({"status": "ok", "median_ms": -61.3, "error": ""}, {"job_key": "k"})
    assert res["status"] == "suspect" and res["error"] == (
        "a median of -61.3 ms, by the clock of the process that loaded its code: no call "
        "takes no time, that process's clock was changed")
    two = {"contest": [{"job_key": "a"}, {"job_key": "b"}]}

    def figures(m):
        return {"median_ms": m, "iqr_ms": 0.01, "n_samples": 2, "samples_ms": [m, m]}
    con = _clock_broken({"status": "ok", "results": [figures(0.2), figures(0.0)]}, two)
    assert con["status"] == "suspect" and con["failed"] == ["b"]
    assert con["error"].startswith("b: a median of 0.0 ms")
    for odd in (float("inf"), float("nan")):
        assert _clock_broken({"status": "ok", "median_ms": odd}, {})["status"] == "suspect"
    fine = {"status": "ok", "median_ms": 0.2}
    assert _clock_broken(fine, {}) is fine
    passed = {"status": "ok", "results": [figures(0.2), figures(0.3)]}
    assert _clock_broken(passed, two) is passed


@pytest.mark.parametrize("results, said", [
    ([1, 2], "a contender's figures that are not an object"),
    ([{"median_ms": 0.2}], "a contest result that is not a list of 2 contenders' figures"),
    (None, "a contest result that is not a list of 2 contenders' figures"),
    ([{"median_ms": 0.2, "iqr_ms": 0.0, "n_samples": 2**40, "samples_ms": [0.2]}] * 2,
     "a contender's n_samples that is not a whole number of 1 to 2**31 - 1"),
    ([{"median_ms": "0.2", "iqr_ms": 0.0, "n_samples": 1, "samples_ms": [0.2]}] * 2,
     "a contender's median_ms or iqr_ms that is not a number"),
    ([{"median_ms": 0.2, "iqr_ms": 0.0, "n_samples": 1, "samples_ms": [[0.2]]}] * 2,
     "a contender's samples_ms that is not a list of numbers")])
def test_a_forged_contest_answer_is_a_crash_that_names_nobody(results, said):
    """Candidate code can write the harness's answer pipe: a contest answered ``ok`` with
    ``results: [1, 2]`` (red-team round 10) stopped the driver with a KeyError at the
    loop's closing. A passed contest's results of another shape are a crash naming no
    contender (no ``failed``): the driver then runs each contender alone to find it."""
    from workers.sandbox import _clock_broken

    got = _clock_broken({"status": "ok", "results": results},
                        {"contest": [{"job_key": "a"}, {"job_key": "b"}]})
    assert got == {"status": "crashed", "error": f"the harness answered {said}"}


@pytest.mark.usefixtures("outside_clock_alone")
def test_the_preparations_alone_are_timed_where_no_candidates_code_runs(tmp_path):
    """Attack MODE 13 (tests/fixtures/faultpack/attacks.cpp): MODE 10's clock, scaled to a
    hundredth, and a thread of its own that holds Python's GIL 100 ms at a time whenever no
    call of it came for 2 ms: in its own harness the outside clock's block of the
    preparations alone (no call) is many times as long, and the calls' block less that
    one cleared the patched clock. The device times the preparations alone in a second
    harness that never loads a candidate's code (workers.device_actor ``clock``): there
    they take what they take, and the patcher is suspect. (How much its thread slows them
    in its own harness depends on when the thread gets Python's lock: 6387 ms against 43 ms
    for 500 preparations once, no slowdown at all in a loaded suite another time, so it is
    not asserted: docs/verified/2026-12-05-clock-under-load.md.)"""
    from test_attacks import attack_job

    runner, j, data, clock = _device({**attack_job(tmp_path, 13), "job_key": "m13"})
    try:
        con = runner.call(0, "contest", [j], 12, data)
        assert con["status"] == "ok", con
        med = con["results"][0]["median_ms"]
        blocks, fault = outside_blocks(clock, med)
        assert fault == "" and blocks, (fault, blocks)  # every try that counted disagreed
        assert clock_suspect(med, blocks).startswith(
            f"its contest median is {med:.4g} ms by its own process's clock"), (med, blocks)
        dev = runner.devices[0]
        bare = dev.bare.pid  # the second harness: a process of its own, ended with the clock
        assert bare not in (None, dev.sandbox.pid)
        dev.clock_end()
        assert dev.bare is None
        with pytest.raises(ProcessLookupError):
            os.kill(bare, 0)
    finally:
        runner.close()


def _members(leader: int) -> list[int]:
    """The processes of the sandbox whose first process is ``leader``: its PID namespace's,
    or its process group where it has none."""
    from workers import hold

    return hold._members(leader, hold.sandbox_ns(leader), ())


@pytest.mark.parametrize("how", HOLDS)
def test_the_candidates_sandbox_is_held_while_the_preparations_alone_are_timed(
        tmp_path, monkeypatch, how):
    """While the second harness times the preparations alone, every process of the
    contender's sandbox is frozen or stopped (workers.hold: ``how``, as in
    tests/test_isolation.py), seen from inside that harness's run:
    threads or processes a candidate left spinning there would otherwise take the CPUs
    from the preparations and lengthen the block the outside clock subtracts. They run
    again once it is done."""
    from workers import hold
    from workers.sandbox import Sandbox

    _how(how, monkeypatch)
    state = HELD_STATE[how]
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key="honest")
    runner, j, data, clock = _device(j)
    seen: list[dict[int, str]] = []
    real = Sandbox.run

    def run(self, job, timeout_s):
        if self is runner.devices[0].bare:
            seen.append({p: hold._stat(p)[0] for p in _members(leader)})
        return real(self, job, timeout_s)

    try:
        clock(5, False)
        leader = runner.devices[0].sandbox.proc.pid
        monkeypatch.setattr(Sandbox, "run", run)
        assert clock(5, True)["held_cpu_ms"] == 0.0  # held: its processes used no CPU
        assert len(seen) == 1 and seen[0], seen
        assert set(seen[0].values()) == {state}, seen  # the harness, and jail if isolated
        deadline = time.monotonic() + 10  # released as it is told; a margin
        while state in {hold._stat(p)[0] for p in _members(leader)} and (
                time.monotonic() < deadline):
            time.sleep(0.01)
        assert state not in {hold._stat(p)[0] for p in _members(leader)}
    finally:
        runner.close()


def test_the_second_harness_started_ahead_is_the_one_that_times_the_preparations(tmp_path):
    """``clock_ready`` (cast by the loop while a GPU device profiles, before its closing)
    starts the outside clock's second harness in the background; the preparations alone
    are then timed in that harness, not in one started on the spot."""
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key="honest")
    runner, j, data, clock = _device(j)
    try:
        dev = runner.devices[0]
        dev.clock_ready()
        bare = dev.bare
        assert bare is not None and dev._bare_start is not None
        dev.clock_ready()  # once only
        assert dev.bare is bare
        clock(5, True)
        assert dev.bare is bare and bare.pid is not None and bare.restarts == 0
        assert bare.pid != dev.sandbox.pid
        dev.clock_end()
        assert dev.bare is None and dev._bare_start is None
    finally:
        runner.close()


@pytest.mark.skipif(not ISOLATED.isolated, reason="needs the sandbox")
def test_a_contender_whose_code_escapes_the_hold_is_suspect(tmp_path, monkeypatch, threads_kept):
    """A red-team helper's candidate escaped the hold (workers.hold) while the preparations
    alone were timed: a thread stuck in a long system call kept its cgroup from freezing,
    and processes whose leaders had exited, continued by a ring of ``SIGCONT`` timers, ran
    through the signals; spinning meanwhile, they lengthened the preparations' block,
    which shortens the figure a patched clock is judged by. The device reports the CPU
    time the held sandbox used (``held_cpu_ms``): none for escape.cpp MODE 19's spinners
    held; once they escape (simulated: let go right after the hold, as it fails), more
    than ``HELD_CPU_MS``, and the contender is suspect before any block of its calls."""
    from test_harness import artifact as built
    from test_harness import job as escape_job
    from test_isolation import SRC

    from kopt.core.clock import HELD_CPU_MS
    from workers import hold

    j = escape_job(built(tmp_path, SRC, 19, "escape.cpp"), SRC, SRC.parent / "ref.py")
    runner, j, data, clock = _device(j)
    real = hold.hold

    def escaped(leader, cgroup_dirs=()):  # held, then let go: what an escape leaves
        held = real(leader, cgroup_dirs)
        hold.release(held)
        deadline = time.monotonic() + 30  # the spinners run again: CPU time comes
        while (hold.used_ms(held) or 0.0) <= HELD_CPU_MS and time.monotonic() < deadline:
            time.sleep(0.01)
        return held

    try:
        clock(3, False)  # MODE 19 leaves a thread and a process spinning
        assert clock(3, True)["held_cpu_ms"] == 0.0
        monkeypatch.setattr(hold, "hold", escaped)
        blocks, fault = outside_blocks(clock, 1.0)
        assert blocks == [] and fault.startswith(
            "suspect: outside the contest, its sandbox used "), fault
        assert float(fault.split(" used ")[1].split(" ms")[0]) > HELD_CPU_MS, fault
    finally:
        runner.close()


# The size of the replaying and skipping candidates judged by blocks of calls: the block's
# limit allows half the preparations' time a call (kopt.core.clock CLOCK_PREP_NOISE). At N =
# 4096 their work, about 0.2 ms a call, came within it once the preparations took 0.3 ms a
# call (0.075 ms idle): a fresh clone's suite beside other work read a block of 55 calls at
# no more than its preparations alone, and the replay cleared the clock. At 16384 a call's
# work is 0.8 ms, its preparation (mostly the cache flush) 0.11 ms, idle. (The loop judges
# so small a claimed median on a CPU by paced calls instead: kopt.core.clock
# ``needs_paced``; tests/test_clock_paced.py.)
BLOCK_N = 16384


@pytest.mark.usefixtures("outside_clock_alone")
@pytest.mark.parametrize("fixture", ["cycle_replay.cpp", "hold_replay.cpp"])
def test_a_replay_that_tells_the_clock_block_apart_is_suspect(tmp_path, fixture):
    """Both fixtures (tests/fixtures/faultpack/) patch the clock (1/100, as MODE 10) and
    compute honestly except in what they take for the outside clock's block, where they
    replay outputs they stored for inputs they have seen. cycle_replay.cpp tells the block
    by its inputs repeating in a short cycle: with the block's sets in a fixed cycle it
    cleared the clock (6 of 6 runs). hold_replay.cpp tells it by the hold before it (a
    thread's 1 ms sleep that wakes far late): with the block's calls on the check's sets it
    cleared the clock (4 of 4). With the sets picked at random, as samples pick them, and
    no call on inputs seen before (rescaled, a fresh held-back set last), both compute
    there too and are suspect. At N = 16384 (:data:`BLOCK_N`)."""
    src = PACK / fixture
    j = job(artifact(tmp_path, src, {}), src, PACK / "ref.py", {"N": BLOCK_N},
            {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key=fixture)
    med, blocks = _judged(j)
    assert clock_suspect(med, blocks).startswith(
        f"its contest median is {med:.4g} ms by its own process's clock"), (med, blocks)


@pytest.mark.usefixtures("outside_clock_alone")
def test_a_candidate_that_skips_calls_on_seen_sets_scaled_is_suspect(tmp_path):
    """tests/fixtures/faultpack/scaled_skip.cpp patches the clock (1/100) and, on calls
    whose inputs are a set it has seen scaled by one factor, does no work (SKIP=1; SKIP=2
    replays the outputs it computed for the unscaled set). When the block's calls
    were the check's sets scaled by a factor near 1 and only the last was verified, SKIP=1
    cleared the clock (a red-team trial, 6 of 6). Every call of the block is on a set drawn
    for it now: it finds nothing to skip, computes, and its clock is suspect. At N = 16384
    (:data:`BLOCK_N`)."""
    src = PACK / "scaled_skip.cpp"
    j = job(artifact(tmp_path, src, {"SKIP": 1}), src, PACK / "ref.py", {"N": BLOCK_N},
            {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key="skip")
    med, blocks = _judged(j)
    assert clock_suspect(med, blocks).startswith(
        f"its contest median is {med:.4g} ms by its own process's clock"), (med, blocks)


@pytest.mark.usefixtures("outside_clock_alone")
def test_a_candidate_that_says_clocked_early_is_suspect(tmp_path):
    """tests/fixtures/faultpack/forge_clocked.cpp computes honestly with its clock patched
    (1/100) and has the harness say "clocked" at the block's first call (through Python's
    C API): the sandbox's clock stopped there, and the block's figure, less than the
    preparations alone, was clamped to 0 and cleared (a red-team trial, 3 of 3). The
    harness says it once; the sandbox, reading it twice, makes the block `suspect`."""
    src = PACK / "forge_clocked.cpp"
    j = job(artifact(tmp_path, src, {}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key="forge")
    runner, j, data, _ = _device(j)
    try:
        con = runner.call(0, "contest", [j], 12, data)
        assert con["status"] == "ok", con
        blocks, fault = outside_blocks(
            lambda n, loads_only: runner.call(0, "clock", j, n, data, loads_only),
            con["results"][0]["median_ms"])
        assert blocks == [] and fault.startswith("suspect: outside the contest, its harness "
                                                 "said its calls were done 2 times "), fault
    finally:
        runner.close()


MASK_REF = """import torch


def inputs(seed, N):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(N, generator=g), "b": torch.randn(N, generator=g),
            "m": (torch.rand(N, generator=g) < 0.5).float()}


def reference(a, b, m, N):
    return {"y": torch.where(m != 0, a, b)}
"""
MASK_CPP = """extern "C" void solve(const float* a, const float* b, const float* m, float* y,
                      int N) {
  for (int i = 0; i < N; ++i) y[i] = m[i] * a[i] + (1.0f - m[i]) * b[i];
}
"""


def test_an_honest_kernel_that_relies_on_its_inputs_distribution_clears_the_clock(tmp_path):
    """A select by a 0/1 float mask written as ``m * a + (1 - m) * b``: exact for every
    input ref.py's ``inputs()`` draws. The block's calls on the check's sets scaled by 0.5
    to 0.9 made the mask fractional and failed it, an honest kernel (a red-team trial, 2
    of 2); the block's sets are drawn by ``inputs()`` now."""
    (tmp_path / "ref.py").write_text(MASK_REF)
    src = tmp_path / "select.cpp"
    src.write_text(MASK_CPP)
    j = job(artifact(tmp_path, src, {}), src, tmp_path / "ref.py", {"N": 65536},
            {"a": ["N"], "b": ["N"], "m": ["N"], "y": ["N"]}, job_key="select")
    med, blocks = _judged(j)
    assert clock_suspect(med, blocks) == "", (med, blocks)


def test_a_block_of_calls_shorter_than_its_preparations_alone_is_suspect():
    """The rule on its own: calls' blocks of 2 ms against 10 ms of the same preparations
    alone (a "clocked" said early) on every try are suspect, naming both figures; 6 ms
    (within the preparations' noise) is not. A try whose block of calls read short is
    left out and the next one judges: one preparations' block lengthened (a garbage
    collection fell in it, or load) no longer made an honest kernel suspect at once; nor
    does one lengthened preparations' block around a try (the shorter one counts)."""
    def clock(calls_ms, preps_ms=()):
        calls, preps = iter(calls_ms), iter(preps_ms)
        asked = []

        def run(n, loads_only):
            asked.append(loads_only)
            return {"status": "ok", "outside_ms": next(preps, 10.0) if loads_only
                    else next(calls)}
        run.asked = asked
        return run

    every = clock([2.0, 2.0, 2.0])
    blocks, fault = outside_blocks(every, 1.0)
    assert blocks == [] and fault == (
        "suspect: outside the contest, a block of its 12 calls with their preparations took "
        "2 ms, less than the 10 ms the same preparations alone took: its process said the "
        "calls were done before they were"), fault
    assert every.asked == [True, True, False, True, False, True, False, True]
    blocks, fault = outside_blocks(clock([6.0]), 1.0)
    assert fault == "" and blocks == [(0.0, 12, 10.0)], (blocks, fault)
    # both preparations' blocks around the first try read 387 ms: that try is left out
    once = clock([16.0, 16.0, 16.0], preps_ms=[10.0, 387.0, 387.0, 10.0])
    blocks, fault = outside_blocks(once, 1.0)
    assert fault == "" and blocks == [(6.0, 12, 10.0)], (blocks, fault)
    assert once.asked == [True, True, False, True, False, True]
    # one of them did: the shorter one counts
    blocks, fault = outside_blocks(clock([16.0], preps_ms=[10.0, 387.0, 10.0]), 1.0)
    assert fault == "" and blocks == [(6.0, 12, 10.0)], (blocks, fault)

    # the sandboxes' CPU time: the figure subtracts the longer preparations' block (load
    # lengthens CPU time little), but a calls' block is short only against the shorter
    wall = clock([16.0, 16.0, 16.0])

    def counted(n, loads_only):
        res = wall(n, loads_only)
        cpu = [10.0, 387.0, 10.0][sum(wall.asked) - 1] if loads_only else 16.0
        return {**res, "outside_cpu_ms": cpu}

    blocks, fault = outside_blocks(counted, 1.0)
    assert fault == "" and blocks == [(0.0, 12, 387.0)], (blocks, fault)


def test_a_block_makes_no_more_calls_than_the_harness_has_input_sets_of_their_own():
    """Each call of a block is on an input set of its own, drawn for it; where the sets'
    sizes allow fewer than the claimed median asks for (large inputs), the blocks make that
    many calls (3 at least): sets reused within a block could be replayed."""
    asked = []

    def clock(n, loads_only):
        asked.append((n, loads_only))
        return {"status": "ok", "outside_ms": 10.0 if loads_only else 12.0, "clock_sets": 4}

    blocks, fault = outside_blocks(clock, 1.0)
    assert fault == "" and asked == [(3, True), (4, True), (4, False), (4, True)], asked


def test_the_sets_a_block_may_draw_are_bounded_by_bytes_and_by_drawing_time():
    """workers.harness.clock_sets: 1 GiB of sets and 0.25 s of drawing them, 3 at least (an
    sgemm's 4096^2 inputs, 128 MB a set drawn in about 0.2 s, get 3)."""
    assert clock_sets(32768, 0.0) == 32768
    assert clock_sets(32768, 1e-4) == 2500
    assert clock_sets(128 << 20, 0.0) == 8
    assert clock_sets(128 << 20, 0.2) == 3
    assert clock_sets(2 << 30, 0.0) == 3


def test_a_block_of_calls_draws_its_sets_whatever_drawing_took_here(tmp_path):
    """A candidate's thread holding Python's lock stretched the draw that its own harness
    timed, and that figure, deciding how many sets the block got, gave it 3 to replay (a
    red-team trial cleared a 1/100 clock 4 of 6). A block of calls draws the ``n`` sets it
    is asked for (within the bytes); only the preparations alone, in the second harness,
    go by the drawing time."""
    h = Harness("cpu")
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    d = h.prepare(j)
    d.draw_s = 10.0  # as if every set took 10 s to draw
    sets = h._block_sets(j, d, 12, fresh=True)
    assert len(sets) == 12 and len({s.seed for s in sets}) == 12
    assert len(h._block_sets(j, d, 12, fresh=False)) == 3


FLAKY_REF = """import sys
sys.path.insert(0, {pack!r})
from ref import reference  # noqa: F401
import ref as _ref


FLAKY = False  # set once the check's sets are drawn


def inputs(seed, N):
    if FLAKY and seed % 4 == 0:
        raise ValueError(f"no inputs for seed {{seed}}")
    return _ref.inputs(seed, N)
"""


def test_a_seed_whose_inputs_fail_is_skipped_for_another(tmp_path):
    """ref.py's ``inputs()`` failing on a quarter of the seeds (never on the check's): the
    clock's block draws hundreds of random seeds, and one failure made the closing an
    `error` or dropped an honest contender (a red-team trial). A seed that fails is
    skipped for another; the block gets every set it asked for."""
    import random

    (tmp_path / "ref.py").write_text(FLAKY_REF.format(pack=str(PACK)))
    h = Harness("cpu")
    h.rng = random.Random(7)  # the same seeds every run
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, tmp_path / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    d = h.prepare(j)
    h.ref_module(j["reference"]).FLAKY = True
    sets = h._block_sets(j, d, 40, fresh=True)
    assert len(sets) == 40 and all(s.seed % 4 for s in sets)
    res = h.run({**j, "clock_calls": 20})
    assert res["status"] == "ok", res


def test_a_clock_answer_that_is_not_the_harnesss_own_is_suspect(monkeypatch):
    """Candidate code can write the answer pipe (its file descriptor is on the harness's
    command line): a red-team candidate wrote an `ok` answer natively in the middle of a
    block, with no "clocked", and the outside clock stopped there (a 1/100 clock cleared
    5 of 5); with a "clocked" first and an exit after, 2 of 2. The sandbox's side
    (workers.sandbox ``_clock_answer``): an `ok` without exactly one "clocked" is suspect;
    so is one whose harness does not answer a ping with the same value next (killed)."""
    import threading
    from multiprocessing import Pipe

    from workers import sandbox as sb
    from workers.harness import answer

    box = object.__new__(sb.Sandbox)
    box.r, to_box = Pipe(duplex=False)  # harness -> sandbox
    from_box, box.w = Pipe(duplex=False)  # sandbox -> harness
    killed = []
    box.kill = lambda ended=False: killed.append(ended)
    ok = {"status": "ok", "error": "", "calls": 9}
    for n in (0, 2):
        res = box._clock_answer(ok, sb._ClockMarks(t0=1.0, clocked=n))
        assert res["status"] == "suspect" and res["error"].startswith(
            f"its harness said its calls were done {n} times in one block"), res

    def harness():  # the real one, back in its loop after answering
        kind, nonce = from_box.recv()
        answer(to_box, {"pong": nonce})

    t = threading.Thread(target=harness)
    t.start()
    assert box._clock_answer(ok, sb._ClockMarks(t0=1.0, clocked=1)) == ok
    t.join()
    assert killed == []
    # the real harness still in its block (or gone): no answer to the ping
    monkeypatch.setattr(sb, "PING_S", 0.5)  # the wait is all this case takes
    res = box._clock_answer(ok, sb._ClockMarks(t0=1.0, clocked=1))
    assert res["status"] == "suspect" and "did not answer a ping" in res["error"], res
    assert killed == [False]
    assert from_box.recv()[0] == "ping"  # the unanswered ping, sent


def test_a_clock_replaced_in_the_harness_times_no_later_job(tmp_path):
    """tests/fixtures/faultpack/clockadd.cpp ROLE 1 replaces the harness's
    ``time.perf_counter_ns`` (1/100) at its first call. The harness compares its clocks and
    its own functions with those it took at its start after every job (workers.harness
    ``watched``) and ends after one that replaced any (its own figures stand: the closing's
    outside clock judges them); the honest job after it in the same sandbox is timed by a
    fresh harness's clock, not a hundredth of it. Before, the patch stayed for every later
    candidate of the harness: an honest first baseline's own row read 100x fast, disagreed
    with its figure side by side at the closing and was dropped, and no best was named
    (red-team round 12). A clock job whose block rebound one of the harness's own functions
    is ``crashed`` (round 12 did a paced call's work in a rebound ``_keep``)."""
    from test_clock_paced import CLOCKADD, VADD_ARGS, VADD_REF

    from workers.sandbox import Sandbox

    def vadd(role):
        return job(artifact(tmp_path, CLOCKADD, {"ROLE": role}), CLOCKADD, VADD_REF,
                   {"N": 1 << 18}, VADD_ARGS, job_key=f"role{role}")

    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        first = sb.run(vadd(0), timeout_s=60)
        assert first["status"] == "ok" and sb.restarts == 0, first
        patched = sb.run(vadd(1), timeout_s=60)
        assert patched["status"] == "ok" and sb.restarts == 1, patched
        assert patched["median_ms"] < first["median_ms"] / 20, (first, patched)
        again = sb.run(vadd(0), timeout_s=60)
        assert again["status"] == "ok" and sb.restarts == 1, again
        assert again["median_ms"] > first["median_ms"] / 10, (first, again)
        # a clock replaced in a clock job is the outside clock's to judge: its figures stand
        block = sb.run({**vadd(1), "clock_calls": 4, "clock_paced": True}, timeout_s=60)
        assert block["status"] == "ok" and sb.restarts == 2, block
        # one of the harness's own functions rebound in a block of the contender's calls
        block = sb.run({**vadd(3), "clock_calls": 4, "clock_paced": True}, timeout_s=60)
        assert block["status"] == "crashed" and re.match(
            r"code in the harness's process replaced its (__main__|workers\.harness)\._keep "
            "during a block of its calls", block["error"]), block
    finally:
        sb.close()


# Python a candidate runs in the harness's process (Python's C API) to rebind
# workers.timing.quantile (which the harness's ``summarize`` calls through workers.timing's
# globals, not the harness module's) to a hundredth of itself (a red-team review's attack)
QUANTILE_PATCH = ("import workers.timing as _t\n_q = _t.quantile\n"
                  "_t.quantile = lambda xs, q: _q(xs, q) / 100\n")


def test_a_function_of_another_workers_module_replaced_in_the_harness_times_no_later_job(
        tmp_path):
    """The harness's watch covers every module of workers it loaded (and the standard
    modules its figures go through), not only its own: a candidate that rebound
    ``workers.timing.quantile`` (a hundredth of itself) had its own median and the next
    honest candidate's in that harness read 100x faster. Now the harness ends after that
    job, the job's row says what was replaced, and the honest job after it is timed by a
    fresh harness."""
    src = faults_running_python(tmp_path / "quantile", QUANTILE_PATCH)
    honest = PACK / "faults.cpp"
    args = {"x": ["N"], "buf": ["N"], "y": ["N"]}
    from workers.sandbox import Sandbox

    def vjob(path):
        return job(artifact(tmp_path, path, {"MODE": 0}), path, PACK / "ref.py",
                   {"N": 1 << 16}, args)

    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        first = sb.run(vjob(honest), timeout_s=60)
        patched = sb.run(vjob(src), timeout_s=60)
        restarts = sb.restarts
        again = sb.run(vjob(honest), timeout_s=60)
    finally:
        sb.close()
    assert first["status"] == patched["status"] == again["status"] == "ok", (first, again)
    assert restarts == 1 and patched["error"].startswith(
        "code in the harness's process replaced its workers.timing.quantile during the "
        "job"), patched
    assert again["median_ms"] > first["median_ms"] / 10, (first, again)


# Python a candidate runs in the harness's process: the same function objects with other
# code (``__code__``), and a profile function on the harness's thread (red-team attacks)
CODE_SWAP = ("import workers.timing as _t\n_g = {}\n"
             "exec('def quantile(xs, q):\\n    return xs[0] * 100\\n', _g)\n"
             "_t.quantile.__code__ = _g['quantile'].__code__\n")
PROFILE = ("import sys, time\n"
           "def _slow(frame, event, arg):\n"
           "    if event == 'call' and frame.f_code.co_name == 'call':\n"
           "        time.sleep(0.001)\n"
           "sys.setprofile(_slow)\n")
# and a threshold of workers' turned off: no later job in that harness named `replayed`
NO_REPLAYS = "import workers.replay as _r\n_r.REPLAY_ALPHA = -1.0\n"
# torch's check made to pass every element, or a method every tensor's check calls shadowed
ISCLOSE = ("import torch\n_i = torch.isclose\n"
           "torch.isclose = lambda a, b, **k: _i(a, a, **k)\n")
SHADOW = "import torch\ntorch.Tensor.all = lambda self, *a, **k: torch.ones((), dtype=torch.bool)\n"
# a red-team review's (session 55): the checks' native comparisons made to pass, a torch
# function mode left pushed, the tensor base's dict changed through gc, every later
# library's solve wrapped (ctypes), and the process's OpenMP threads, floating-point modes
# and nice value changed
NATIVE = ("import workers.native as nv\nlib = nv._LIB[0]\n"
          "setattr(lib, 'kopt_compare_f32', lambda *a: None)\n"
          "setattr(lib, 'kopt_all_close_f32', lambda *a: 1)\n")
MODE = ("import torch\nfrom torch.overrides import TorchFunctionMode\n"
        "class M(TorchFunctionMode):\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        if func is torch.Tensor.__iand__:\n            return args[0]\n"
        "        return func(*args, **(kwargs or {}))\n"
        "M().__enter__()\n")
BASE = ("import gc, ctypes, torch\nd = gc.get_referents(torch._C.TensorBase.__dict__)[0]\n"
        "d['__iand__'] = lambda self, other: self\n"
        "ctypes.pythonapi.PyType_Modified(ctypes.py_object(torch._C.TensorBase))\n")
WRAP = ("import ctypes\n_ga = ctypes.CDLL.__getattr__\n"
        "ctypes.CDLL.__getattr__ = lambda self, name: _ga(self, name)\n")
# a thread left spinning in Python: every later call's return waits for the lock
SPIN = ("import threading\ndef _spin():\n    while True:\n        pass\n"
        "threading.Thread(target=_spin, daemon=True).start()\n")
LEFT = {"code": (CODE_SWAP, "workers.timing.quantile"),
        "profile": (PROFILE, "sys.settrace/setprofile"),
        "constant": (NO_REPLAYS, "workers.replay.REPLAY_ALPHA"),
        "torch": (ISCLOSE, "torch.isclose"), "tensor": (SHADOW, "Tensor.all"),
        "sort": ("import torch\n_s = torch.sort\ntorch.sort = lambda *a, **k: _s(*a, **k)\n",
                 "torch.sort"),
        "native": (NATIVE, "workers.native.kopt_compare_f32"),
        "mode": (MODE, "torch function/dispatch modes"), "base": (BASE, "TensorBase.__iand__"),
        "ctypes": (WRAP, "CDLL.__getattr__"),
        "omp": ("import ctypes\nctypes.CDLL('libgomp.so.1').omp_set_num_threads(3)\n",
                "OpenMP threads"),
        "ftz": ("import torch\ntorch.set_flush_denormal(True)\n", "floating-point modes"),
        "round": ("import ctypes\nctypes.CDLL('libm.so.6').fesetround(0x800)\n",
                  "floating-point modes"),  # FE_UPWARD on x86-64 (glibc's fenv.h)
        "nice": ("import os\nos.setpriority(os.PRIO_PROCESS, 0, 5)\n", "nice value"),
        # a thread left spinning in Python, and the interval each wait for the lock lasts
        "spin": (SPIN, "Python threads (one left running)"),
        "switch": ("import sys\nsys.setswitchinterval(0.05)\n", "switch interval"),
        # a red-team review of the thread list: a collection in every later call, and a
        # callback of the collector's that waits there (no thread left)
        "gc": ("import gc\ngc.set_threshold(1)\ngc.callbacks.append(lambda phase, info: None)\n",
               "garbage collector"),
        # a red-team review of that check: the spinner hidden from ``sys._current_frames``,
        # the check's method rebound, the harness's checker swapped for one that sees none
        "frames": (SPIN + "import sys\nsys._current_frames = lambda: {}\n",
                   "Python threads (one left running)"),
        "left": ("import workers.harness as _h\n_h.RefThreads.left = lambda self: set()\n",
                 "RefThreads.left"),
        "swap": (SPIN + "import gc\nimport workers.harness as _h\n"
                 "class _Blind(_h.RefThreads):\n    def left(self):\n        return set()\n"
                 "for _o in gc.get_objects():\n    if type(_o) is _h.Harness:\n"
                 "        _o.ref_threads = _Blind()\n", "Harness.ref_threads")}


@pytest.mark.parametrize("attack", sorted(LEFT))
def test_code_swapped_or_a_profile_function_left_in_the_harness_ends_it(tmp_path, attack):
    """A candidate that left a watched function's object in place but swapped its code
    (``workers.timing.quantile.__code__``: the honest job after it 100x slower), left a
    profile function that slept in the harness's calls (its rivals timed after it 1.7x
    slower), rebound a threshold (``workers.replay.REPLAY_ALPHA``: no replay named in
    that harness again), or rebound a torch function the checks call (``torch.isclose``) or
    shadowed a tensor method (``Tensor.all``: a later candidate's wrong outputs passed), or
    left the process in another state (a red-team review's: the checks' native functions
    rebound, a torch function mode pushed, the tensor base's dict changed, ctypes' symbol
    lookup wrapped, the OpenMP thread count, flush-to-zero, the nice value) is
    seen after its job: the harness ends (the next job runs in a
    fresh one) and the row says what changed."""
    from workers.sandbox import Sandbox

    python, what = LEFT[attack]
    src = faults_running_python(tmp_path / attack, python)
    args = {"x": ["N"], "buf": ["N"], "y": ["N"]}
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        patched = sb.run(job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py",
                             {"N": 4096}, args), timeout_s=60)
        restarts = sb.restarts
    finally:
        sb.close()
    assert patched["status"] == "ok" and restarts == 1, patched
    said = "code in the harness's process replaced its "
    assert patched["error"].startswith(said) and what in patched["error"].split(
        " during the job")[0], patched


def test_the_threads_a_job_may_leave_are_the_harness_s_and_those_ref_py_started():
    """workers.harness ``RefThreads``: a Python thread started while ref.py's code runs
    inside it (its context) is known, as is one running when ``update`` was called; one
    started outside it is ``left`` until it ends."""
    import threading

    from workers.harness import RefThreads

    stop = threading.Event()
    threads = RefThreads()
    threads.update()
    with threads:
        refs = threading.Thread(target=stop.wait, daemon=True)
        refs.start()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert threads.left() == {(other.ident, other)}, (threads.left(), refs.ident)
    finally:
        stop.set()
        refs.join()
        other.join()
    assert threads.left() == set()


# a candidate's native thread, left running, that waits until another artifact is loaded
# (its file name in this process's maps) and lowers the harness's thread's priority then:
# a change made during that artifact's job, by code that is not its own
LATER_NICE = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static const char* kopt_test_target = "%s";
static void* kopt_test_later(void*) {
  pid_t main_tid = getpid();
  for (;;) {
    FILE* f = fopen("/proc/self/maps", "r");
    char line[4096];
    bool seen = false;
    while (f && fgets(line, sizeof line, f)) seen = seen || strstr(line, kopt_test_target);
    if (f) fclose(f);
    if (seen) break;
    usleep(200);
  }
  setpriority(PRIO_PROCESS, main_tid, 7);
  return nullptr;
}
static void kopt_test_start_later() {
  static bool done = false;
  if (done) return;
  done = true;
  pthread_t t;
  pthread_create(&t, nullptr, kopt_test_later, nullptr);
  pthread_detach(t);
}
"""


PACK_ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}


def _pack_with(tmp_path, name: str, prelude: str, call: str) -> Path:
    """The fault pack's faults.cpp with C++ ``prelude`` before ``solve`` and ``call`` at its
    head, written to ``tmp_path/name/faults.cpp``."""
    from conftest import SOLVE_HEAD

    src = tmp_path / name / "faults.cpp"
    src.parent.mkdir()
    src.write_text((PACK / "faults.cpp").read_text().replace(
        SOLVE_HEAD, prelude + SOLVE_HEAD + "\n  " + call))
    return src


def _then_honest(tmp_path, first: dict) -> tuple[dict, int, bool, dict, int]:
    """``first`` (a job), then the pack's honest job (MODE 0, N=4096), in one CPU sandbox,
    each through ``run_retrying``: (the first's outcome, the harness's restarts and whether
    it ran after it, the honest job's outcome, the restarts after it)."""
    from workers.sandbox import Sandbox

    honest = job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}), PACK / "faults.cpp",
                 PACK / "ref.py", {"N": 4096}, PACK_ARGS)
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        res = sb.run_retrying(first, timeout_s=60)
        ended, alive = sb.restarts, sb.running
        later = sb.run_retrying(honest, timeout_s=60)
        return res, ended, alive, later, sb.restarts
    finally:
        sb.close()


def _later_nice(tmp_path) -> dict:
    """The pack's job whose code leaves :data:`LATER_NICE`'s thread, waiting for the honest
    library's folder (the one :func:`_then_honest` builds) to be mapped."""
    honest = artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0})
    src = _pack_with(tmp_path, "later", LATER_NICE % Path(honest).parent.name,
                     "kopt_test_start_later();")
    return job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
               PACK_ARGS)


def test_a_change_made_during_a_later_job_by_a_thread_left_there_frames_no_one(
        tmp_path, threads_kept):
    """A candidate's native thread, left in the harness, that changes the process's state
    (the harness thread's nice value) only once a later candidate's library is loaded:
    the harness's check after each job took that change for the later job's own (its
    row said so, with the figures the change slowed). Now a job that met a change in a
    harness where another candidate's code had run is run again in a fresh harness
    (workers.sandbox ``run_retrying``), where it meets none, and its row says why."""
    left, restarts, _, later, again = _then_honest(tmp_path, _later_nice(tmp_path))
    assert left["status"] == "ok" and not left.get("error") and restarts == 0, left
    assert later["status"] == "ok" and later["error"].startswith(
        "retried in a fresh harness: the first run, after another candidate's job, found "
        "the harness's nice value changed"), later
    assert again == 1, again  # the second run's harness ran no other candidate's code


@pytest.mark.parametrize("left", ["later", "framer", "spinner"])
def test_a_thread_a_candidate_leaves_ends_its_harness_before_the_next_job(tmp_path, left):
    """The sandbox lists the harness's threads after every job (workers.sandbox
    ``Sandbox._threads_left``, from ``/proc``, outside the harness): a job whose code left
    one running there ends its harness, its row keeping its status and figures and saying
    so, and the next candidate's job runs in a fresh one, never beside it. The threads:
    one that waits to lower the harness's priority once a later library loads
    (:data:`LATER_NICE`), framer.cpp's, which rewrites every later ``solve`` (red-team round
    14), and escape.cpp MODE 19's, spinning (with a process in a session of its own)."""
    from test_harness import artifact as built
    from test_harness import job as escape_job
    from test_isolation import SRC

    from workers.sandbox import THREADS_LEFT

    if left == "spinner":
        first = escape_job(built(tmp_path, SRC, 19, "escape.cpp"), SRC, SRC.parent / "ref.py")
    elif left == "later":
        first = _later_nice(tmp_path)
    else:
        first = job(artifact(tmp_path, PACK / "framer.cpp", {}), PACK / "faults.cpp",
                    PACK / "ref.py", {"N": 4096}, PACK_ARGS)
    res, ended, alive, later, again = _then_honest(tmp_path, first)
    assert res["status"] == "ok" and f"{THREADS_LEFT} (1)" in res["error"], res
    assert ended == 1 and not alive, (ended, alive)
    assert later["status"] == "ok" and not later["error"] and again == 1, later


# a candidate that starts an OpenMP team on the harness's own pool (started before any
# candidate code, so the sandbox's thread list accepts its threads) and never ends it: the
# team's second thread spins on after the job
OPEN_REGION = r"""
#include <omp.h>
extern "C" void GOMP_parallel_start(void (*)(void*), void*, unsigned);
static void kopt_test_spin(void*) {
  if (omp_get_thread_num() != 0) for (volatile unsigned long i = 0;; ++i) {}
}
static void kopt_test_open() {
  static bool done = false;
  if (done) return;
  done = true;
  GOMP_parallel_start(kopt_test_spin, nullptr, 2);  // no GOMP_parallel_end: left open
}
"""


def test_an_openmp_region_a_candidate_leaves_open_ends_its_harness(tmp_path):
    """The harness starts the host libgomp's team before any candidate code loads
    (workers.harness ``_warm_teams``), so that an honest OpenMP job's threads are not new
    to the sandbox's thread list; a candidate can start a region on that team and return
    without ending it, its function running on after the job on a thread the list
    accepts. The harness reads ``omp_in_parallel`` after every job (``STATES``): its row
    names the open region, the harness ends, and the next job runs in a fresh one."""
    src = _pack_with(tmp_path, "open", OPEN_REGION, "kopt_test_open();")
    res, ended, alive, later, _ = _then_honest(tmp_path, job(
        artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, PACK_ARGS))
    assert "OpenMP region left open" in res["error"], res
    assert ended == 1 and not alive, (ended, alive)
    assert later["status"] == "ok" and not later["error"], later


# OPEN_REGION with libgomp's state in the calling thread saved before the region starts and
# put back after it (its TLS block, found with dl_iterate_phdr), so that omp_in_parallel reads
# 0 after the job: a red-team review's hijack of the harness's own OpenMP worker
HIDDEN_REGION = OPEN_REGION.replace("static void kopt_test_open() {", r"""
#include <link.h>
#include <string.h>
struct kopt_test_tls { void* addr; size_t size; };
struct kopt_test_ti { unsigned long mod, off; };
extern "C" void* __tls_get_addr(kopt_test_ti*);
static int kopt_test_find(struct dl_phdr_info* i, size_t, void* p) {
  kopt_test_tls* r = (kopt_test_tls*)p;
  if (!i->dlpi_name || !strstr(i->dlpi_name, "libgomp")) return 0;
  for (int k = 0; k < i->dlpi_phnum; ++k)
    if (i->dlpi_phdr[k].p_type == PT_TLS) {
      kopt_test_ti ti = {i->dlpi_tls_modid, 0};
      r->addr = i->dlpi_tls_data ? i->dlpi_tls_data : __tls_get_addr(&ti);
      r->size = i->dlpi_phdr[k].p_memsz;
    }
  return r->addr != nullptr;
}
static void kopt_test_open() {
  kopt_test_tls t = {nullptr, 0};
  dl_iterate_phdr(kopt_test_find, &t);
  static char saved[65536];
  if (t.addr && t.size <= sizeof saved) memcpy(saved, t.addr, t.size);""").replace(
    "GOMP_parallel_start(kopt_test_spin, nullptr, 2);  // no GOMP_parallel_end: left open",
    "GOMP_parallel_start(kopt_test_spin, nullptr, 2);  // no GOMP_parallel_end: left open\n"
    "  if (t.addr && t.size <= sizeof saved) memcpy(t.addr, saved, t.size);")


def test_a_hidden_openmp_region_on_the_harness_s_own_worker_ends_its_harness(tmp_path):
    """A region left open on the harness's warm OpenMP team with libgomp's state in the
    calling thread put back, so that ``omp_in_parallel`` reads 0 (``STATES`` sees nothing)
    and no thread is new: its function runs on after the job on a worker the thread list
    accepts. The sandbox reads, from outside, where each of the team's idle workers waits
    (workers.teams: its system call, stack pointer and program counter, taken before any
    candidate code loaded); that worker is not back there after the job: the row says so,
    the harness ends, and the next job runs in a fresh one."""
    from workers.sandbox import TEAM_LEFT

    src = _pack_with(tmp_path, "hidden", HIDDEN_REGION, "kopt_test_open();")
    res, ended, alive, later, again = _then_honest(tmp_path, job(
        artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, PACK_ARGS))
    assert "OpenMP region left open" not in res["error"], res  # hidden from the harness
    assert res["status"] == "ok" and TEAM_LEFT in res["error"], res
    assert ended == 1 and not alive, (ended, alive)
    assert later["status"] == "ok" and not later["error"] and again == 1, later


def test_the_watch_leaves_out_only_the_globals_workers_sets_at_run_time():
    """The harness watches the UPPER_CASE constants of workers' modules, but for
    workers.harness ``RUNTIME_GLOBALS``, which their own code rebinds (``global``): every
    ``global`` statement of workers/ names one of them, else every job whose code path
    rebinds it would end its harness as changed."""
    import ast

    from workers.harness import RUNTIME_GLOBALS

    declared = {name for path in sorted((PACK.parents[2] / "workers").glob("*.py"))
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Global) for name in node.names}
    assert declared and declared <= RUNTIME_GLOBALS, declared - RUNTIME_GLOBALS


def test_the_watch_holds_every_torch_member_workers_calls():
    """workers.harness ``TORCH_CALLED`` names every function, class and module of ``torch``
    (and ``torch.cuda``) that workers' sources name, and each is in the watch: one missing
    could be rebound by a candidate for every later job in its harness."""
    import ast

    import torch

    from workers.harness import _WATCHED_TYPES, TORCH_CALLED, _torch_watch

    def path(node):  # "isclose" for torch.isclose, "cuda.Event" for torch.cuda.Event
        v = node.value
        if isinstance(v, ast.Name) and v.id == "torch":
            return node.attr
        if isinstance(v, ast.Attribute) and v.attr == "cuda" and path(v) == "cuda":
            return f"cuda.{node.attr}"
        return None

    named = set()
    for file in sorted((PACK.parents[2] / "workers").glob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Attribute) and (p := path(node)):
                owner = torch.cuda if p.startswith("cuda.") else torch
                if isinstance(vars(owner).get(p.rpartition(".")[2]), _WATCHED_TYPES):
                    named.add(p)
    assert {"isclose", "cuda.synchronize", "cuda.Event"} <= named, named
    assert named <= set(TORCH_CALLED), sorted(named - set(TORCH_CALLED))
    watch = {f"{getattr(o, '__name__', o)}.{n}" for o, n, _ in _torch_watch()}
    assert {"torch.isclose", "torch.cuda.synchronize", "torch._C._set_grad_enabled",
            "Tensor.all", "Tensor.__torch_function__"} <= watch


def test_torch_compile_in_the_harness_process_replaces_nothing_the_watch_holds():
    """A ref.py may call ``torch.compile`` in the harness, after the watch was taken:
    its first use imports torch's dynamo, which rebinds ``torch.manual_seed``
    (workers.harness ``TORCH_REBINDS``); watched, every such job would end its harness as
    changed. In a fresh interpreter, so that dynamo is imported after the watch."""
    code = ("import torch\nfrom workers.harness import c_taken, replaced, watched\n"
            "w = watched('cpu'); t = c_taken(w)\n"
            "torch.compile(lambda x: (x * 2).relu(), backend='eager')(torch.randn(8))\n"
            "print(replaced(w, t))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACK.parents[2], timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_the_gpu_watch_finds_nothing_replaced_in_an_untouched_process():
    """The GPU harness's watch (workers.harness ``watched("cuda")``: the time module's
    clocks, ``torch.cuda.Event``'s methods, the harness's own functions) read again with
    nothing changed finds nothing replaced, and finds ``Event.elapsed_time`` once it is
    replaced. ``torch.cuda.Event.__new__`` is a ``staticmethod`` in its class's namespace,
    which ``getattr`` unwraps: compared so, every GPU job found it replaced and was
    answered ``crashed`` (all of ``pytest -m gpu`` on the H200 failed, 2026-12-05). The
    class exists in torch's CPU build, so this runs without a GPU."""
    import torch

    from workers.harness import members, rewritten, watched

    class Kinds:  # every kind of member a class's namespace holds
        def plain(self):
            return 1

        @staticmethod
        def static():
            return 2

        @classmethod
        def bound(cls):
            return 3

    watch = watched("cuda")
    names = {f"{getattr(o, '__name__', o)}.{n}" for o, n, _ in watch}
    assert {"Event.__new__", "Event.elapsed_time", "time.perf_counter"} <= names, names
    kinds = members(Kinds)
    assert {n for _, n, _ in kinds} == {"plain", "static", "bound"}
    assert rewritten(watch) == [] and rewritten(kinds) == []
    real = torch.cuda.Event.elapsed_time
    try:
        torch.cuda.Event.elapsed_time = lambda self, end: 0.01
        assert rewritten(watch) == ["Event.elapsed_time"]
    finally:
        torch.cuda.Event.elapsed_time = real
    assert rewritten(watch) == []


def test_a_first_preparations_block_sizes_the_clock_by_its_draw_time(tmp_path):
    """The preparations alone, first in a harness, draw its pool of input sets and time the
    draw: the ``clock_sets`` they answer (how many calls a block may make each on a set of
    its own, kopt.core.clock's cap) is bounded by that draw time
    (workers.harness ``clock_sets``), not by the sets' bytes alone (it was read before the
    draw once: an sgemm's blocks would have drawn 32 sets of 2048^2 inputs each)."""
    from workers.harness import _set_bytes, clock_sets

    h = Harness("cpu")
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    res = h.run({**j, "clock_calls": 3, "clock_loads_only": True})
    assert res["status"] == "ok", res
    [d] = h.data.values()
    assert d.draw_s > 0
    assert res["clock_sets"] == clock_sets(_set_bytes(d), d.draw_s), (res, d.draw_s)
    assert res["clock_sets"] < clock_sets(_set_bytes(d), 0.0)
