"""The outside clock's paced tries (kopt.core.clock ``paced_blocks``): each call timed on its
own, for a contender whose call costs far less than its preparation as a sample, where a
block of calls less the preparations alone cannot resolve it (a red-team candidate with a
1/100 clock on a 1M-element vector add, 0.35 ms a call against 13 ms of preparation, was
named best at 336x)."""

import os
from pathlib import Path

import pytest
from test_clock import _device, sparse_job
from test_faults import PACK, artifact, job

from kopt.core.clock import (
    CLOCK_FACTOR,
    CLOCK_MIN_CALLS,
    CLOCK_PACED_CALLS,
    CLOCK_PACED_SLACK_MS,
    CLOCK_PREP_NOISE,
    CLOCK_SLACK_MS,
    ClockError,
    clock_suspect,
    needs_paced,
    outside_blocks,
    paced_blocks,
)
from workers.harness import Harness

ROOT = Path(__file__).resolve().parent.parent
CLOCKADD = PACK / "clockadd.cpp"
VADD_REF = ROOT / "sweeps" / "vector_add" / "ref.py"
VADD_ARGS = {"x": ["N"], "y": ["N"], "out": ["N"]}


def test_paced_only_where_the_preparations_noise_outweighs_what_the_factor_allows():
    assert needs_paced(0.0035, 13.0) and needs_paced(0.35, 13.0)  # 6.5 ms > 0.014 / 1.4
    assert not needs_paced(2.0, 13.0)  # 6.5 ms < 8 ms: a block resolves it
    assert needs_paced(1.0, 8.01) and not needs_paced(1.0, 8.0)
    assert not needs_paced(1.0, -5.0)


def _paced_device(call_ms, idle_ms, prep_ms=13.0, sets=40, fail=None, cpu=None):
    """A device's ``clock(n, loads_only, paced=False)`` from a script: a preparation takes
    ``prep_ms``; a paced answer holds ``n`` calls, the k-th try's ``call_ms[k]`` (a list
    per call, cycled) or, for the calls without work, ``idle_ms``; ``cpu``: (calls, idle),
    the CPU ms of each, given the same way, where the sandbox read them; ``fail``:
    (loads_only, answer) that every such paced answer gets instead. Its ``log`` holds (n,
    loads_only, paced) per call."""
    tries = iter(call_ms)
    cpu_tries = iter(cpu[0]) if cpu else None

    def clock(n, loads_only, paced=False):
        clock.log.append((n, loads_only, paced))
        if not paced:
            return {"status": "ok", "error": "", "outside_ms": n * prep_ms,
                    "clock_sets": sets}
        if fail is not None and fail[0] == loads_only:
            return fail[1]
        per = idle_ms if loads_only else next(tries)
        res = {"status": "ok", "error": "", "outside_ms": 1.0,
               "outside_calls_ms": [per[i % len(per)] for i in range(n)]}
        if cpu:
            per = cpu[1] if loads_only else next(cpu_tries)
            res["outside_calls_cpu_ms"] = [per[i % len(per)] for i in range(n)]
        return res

    clock.log = []
    return clock


def test_a_paced_try_judges_the_median_call_less_the_median_call_without_work():
    """13 ms to prepare a call: with ``paced``, after the 3 preparations that size it, each
    try is 15 calls without work (in the harness that holds no candidate's code) then 15
    calls, each timed on its own. A claimed median of 0.0035 ms against calls of 0.45 ms
    (two stretched to 9 ms) less 0.1 ms without work (two of 4 ms) is suspect on every
    try; a claimed 0.35 ms clears the first. Without ``paced`` (a GPU) the blocks are as
    before."""
    calls = [0.45] * 13 + [9.0, 9.0]
    idle = [0.1] * 13 + [4.0, 4.0]
    clock = _paced_device([calls] * 3, idle)
    blocks, fault = outside_blocks(clock, 0.0035, paced=True)
    assert clock.log == [(3, True, False)] + [(15, True, True), (15, False, True)] * 3
    assert fault == "" and len(blocks) == 3
    fig, n, prep = blocks[0]
    assert (n, fig) == (1, pytest.approx(0.45 - 0.1))
    assert prep * CLOCK_PREP_NOISE == pytest.approx(CLOCK_PACED_SLACK_MS)
    why = clock_suspect(0.0035, blocks)
    assert why.startswith("its contest median is 0.0035 ms by its own process's clock, but 3 "
                          "blocks of its calls took 0.35, 0.35, 0.35 ms a call"), why
    limit = CLOCK_FACTOR * 0.0035 + CLOCK_SLACK_MS + CLOCK_PACED_SLACK_MS
    assert why.endswith(f"{limit:.4g} ms at most with the preparations' noise): its "
                        "process's clock does not tell its time"), why
    clock = _paced_device([calls] * 3, idle)
    blocks, fault = outside_blocks(clock, 0.35, paced=True)
    assert len(clock.log) == 3 and clock_suspect(0.35, blocks) == "" and fault == ""
    clock = _paced_device([calls] * 3, idle)
    outside_blocks(clock, 0.0035)  # not paced: blocks of calls, as before
    assert all(not p for _, _, p in clock.log) and len(clock.log) > 3


def test_a_paced_try_judges_cpu_time_where_the_sandbox_read_it():
    """By the wall, a burst of load during the calls without work alone (all 15 at 0.6 ms)
    leaves 0.45 - 0.6 < 0: a 1/100 clock cleared so beside two test suites. The harnesses'
    CPU time (0.4 ms a call, 0.05 without work) is not stretched by other processes'
    turns: suspect. Where only one answer holds CPU time, the wall is compared."""
    blocks, _ = paced_blocks(_paced_device([[0.45]] * 3, [0.6]), 0.0035)
    assert blocks[0][0] == 0.0 and clock_suspect(0.0035, blocks) == ""
    clock = _paced_device([[0.45]] * 3, [0.6], cpu=([[0.4]] * 3, [0.05]))
    blocks, _ = paced_blocks(clock, 0.0035)
    assert [b[0] for b in blocks] == [pytest.approx(0.35)] * 3
    assert clock_suspect(0.0035, blocks) != ""

    def half(n, loads_only, paced=False):  # CPU time for the calls without work only
        res = _paced_device([[0.45]], [0.1], cpu=([[0.4]], [0.05]))(n, loads_only, paced)
        if not loads_only:
            res.pop("outside_calls_cpu_ms")
        return res

    blocks, _ = paced_blocks(half, 0.0035)
    assert blocks[0][0] == pytest.approx(0.35)  # the wall's 0.45 less 0.1


def test_a_paced_try_makes_no_more_calls_than_its_block_has_sets_of_their_own():
    clock = _paced_device([[0.45]] * 3, [0.1], sets=5)
    paced_blocks(clock, 0.0035, 5)
    assert {n for n, _, _ in clock.log} == {5}
    clock = _paced_device([[0.45]] * 3, [0.1], sets=1)
    paced_blocks(clock, 0.0035, 1)
    assert {n for n, _, _ in clock.log} == {CLOCK_MIN_CALLS}
    clock = _paced_device([[0.45]] * 3, [0.1])
    paced_blocks(clock, 0.0035)
    assert {n for n, _, _ in clock.log} == {CLOCK_PACED_CALLS}


def test_a_paced_try_that_fails_says_whose_fault_it_is():
    wrong = {"status": "wrong_result", "error": "of 15 calls ..., call 4's outputs were wrong"}
    blocks, fault = paced_blocks(_paced_device([[0.45]], [0.1], fail=(False, wrong)), 0.01)
    assert (blocks, fault) == ([], "wrong_result: outside the contest, of 15 calls ..., "
                                   "call 4's outputs were wrong")
    with pytest.raises(ClockError, match=r"^the preparations alone, each timed for the "
                       r"clock outside the contender's process: crashed: killed$"):
        paced_blocks(_paced_device([], [0.1], fail=(True, {"status": "crashed",
                                                           "error": "killed"})), 0.01)
    # an `ok` with no call timed one by one: its harness never said "call" / "called"
    untimed = {"status": "ok", "error": "", "outside_ms": 5.0}
    blocks, fault = paced_blocks(_paced_device([[0.45]], [0.1], fail=(False, untimed)), 0.01)
    assert blocks == [] and fault == ("suspect: outside the contest, its calls were not "
                                      "timed one by one as its harness was asked to")

    def escaped(n, loads_only, paced=False):  # the held sandbox ran meanwhile
        res = _paced_device([[0.45]], [0.1])(n, loads_only, paced)
        return {**res, "held_cpu_ms": 40.0} if loads_only else res

    blocks, fault = paced_blocks(escaped, 0.01)
    assert blocks == [] and fault.startswith("suspect: outside the contest, its sandbox used "
                                             "40 ms of CPU while held still")


def test_the_sandbox_times_each_paced_call_and_a_message_out_of_turn_is_suspect():
    """workers.sandbox: each "call" is answered "go" and its clock runs to the next
    "called"; a "called" with no call running, a "call" while one runs, or fewer calls timed
    than the harness says it made (code in its process spoke for it) make the answer
    suspect."""
    from multiprocessing import Pipe

    from workers import sandbox as sb

    box = object.__new__(sb.Sandbox)
    box.r, _ = Pipe(duplex=False)
    from_box, box.w = Pipe(duplex=False)
    box._pinged = lambda: True
    box.host_pid = os.getpid()  # the "harness" whose threads' CPU time is read
    box.device, box.counted, box.env = "cpu", None, {}  # no cgroup counts its CPU time
    box.threads_known = None  # no harness started: none of its threads known
    box.entered_now = []  # no message said the job's code entered the interpreter
    marks = sb._ClockMarks(t0=1.0)
    for stage in ("call", "called", "call", "called"):
        box._clock_mark(marks, stage)
        assert from_box.recv() == ("go", None)
        assert not from_box.poll()  # one "go" a message: a second would start a call early
    assert len(marks.calls) == 2 and marks.stray == 0
    assert all(ms >= 0 and cpu is not None and cpu >= 0 for ms, cpu in marks.calls)
    marks.clocked = 1
    ok = {"status": "ok", "error": "", "calls": 2}
    assert box._clock_answer(ok, marks, paced=True) == ok
    res = box._clock_answer({**ok, "calls": 3}, marks, paced=True)
    assert res["status"] == "suspect" and res["error"] == (
        "its harness said a call began or ended out of turn 0 times, and 2 calls were timed "
        "of the 3 it made: code in its process spoke for it"), res
    for stage in ("called", "call", "call"):  # a "called" early, a "call" twice
        box._clock_mark(marks, stage)
        assert from_box.recv() == ("go", None) and not from_box.poll()
    assert marks.stray == 2
    res = box._clock_answer(ok, marks, paced=True)
    assert res["status"] == "suspect" and "out of turn 2 times" in res["error"], res
    # the figure is the sandbox's alone: one the harness's answer carries is dropped
    box.log, box.served = Path("/dev/null"), 0
    box.tail = lambda pos, n=1500: ""
    out = box._answered({**ok, "outside_calls_ms": [0.0, 0.0], "outside_calls_cpu_ms": [0.0]},
                        0.0, 0, sb._ClockMarks())
    assert "outside_calls_ms" not in out and "outside_calls_cpu_ms" not in out
    out = box._answered(dict(ok), 0.0, 0, marks)
    assert out["outside_calls_ms"] == [ms for ms, _ in marks.calls]
    assert out["outside_calls_cpu_ms"] == [cpu for _, cpu in marks.calls]


def test_the_harness_says_call_and_called_around_each_paced_call(tmp_path):
    h = Harness("cpu")
    j = job(artifact(tmp_path, CLOCKADD, {"ROLE": 0}), CLOCKADD, VADD_REF, {"N": 4096},
            VADD_ARGS)
    sent = []
    h.progress = sent.append
    res = h.run({**j, "clock_calls": 4, "clock_paced": True})
    assert res["status"] == "ok" and res["calls"] == 4 and res["inside_ms"] > 0, res
    stages = [m["stage"] for m in sent]
    assert stages == ["prepared", "clock"] + ["call", "called"] * 4 + ["clocked"]
    sent.clear()
    res = h.run({**j, "clock_calls": 4, "clock_paced": True, "clock_loads_only": True})
    assert res["status"] == "ok" and [m["stage"] for m in sent] == stages
    # every paced call is checked: one left undone (its 5th of 12) is found, whichever it is
    skip = job(artifact(tmp_path, CLOCKADD, {"ROLE": 0, "SKIP_CALL": 5}), CLOCKADD,
               VADD_REF, {"N": 4096}, VADD_ARGS)
    res = Harness("cpu").run({**skip, "clock_calls": 12, "clock_paced": True})
    assert res["status"] == "wrong_result" and res["error"].startswith(
        "of 12 calls outside the contest's rounds, call 5's outputs"), res


def _judged_paced(j):
    """(contest median, paced tries, fault) of job ``j`` on a sandboxed CPU device of its
    own, as the loop's closing judges a contender there (kopt.loop.contests: ``paced`` on a
    CPU device)."""
    runner, j, data, _ = _device(j)
    try:
        con = runner.call(0, "contest", [j], 12, data)
        assert con["status"] == "ok", con
        med = con["results"][0]["median_ms"]

        def clock(n, loads_only, paced=False):
            return runner.call(0, "clock", j, n, data, loads_only, paced)

        blocks, fault = outside_blocks(clock, med, paced=True)
        return med, blocks, fault
    finally:
        runner.close()


@pytest.mark.usefixtures("outside_clock_alone")
def test_a_patched_clock_on_a_call_cheaper_than_its_preparation_is_suspect(tmp_path):
    """tests/fixtures/faultpack/clockadd.cpp on 1M elements, each in a sandbox of its own:
    ROLE 1's clock runs at 1/100, its contest median a hundredth of its calls' time, far
    less than their preparation's noise: timed one call at a time from outside, it is
    suspect. The honest ROLE 0 (about 0.5 ms a call here, about 1 ms to prepare one:
    blocks resolve it) is not."""
    figures = {}
    for role in (0, 1):
        j = job(artifact(tmp_path, CLOCKADD, {"ROLE": role}), CLOCKADD, VADD_REF,
                {"N": 1 << 20}, VADD_ARGS, job_key=f"role{role}")
        figures[role] = med, blocks, fault = _judged_paced(j)
        assert fault == "" and blocks, figures
    assert all(n == 1 for _, n, _ in figures[1][1]), figures  # paced tries
    assert figures[1][0] < figures[0][0] / 20, figures  # the patched clock's median
    assert clock_suspect(*figures[1][:2]).startswith(
        f"its contest median is {figures[1][0]:.4g} ms by its own process's clock"), figures
    assert clock_suspect(*figures[0][:2]) == "", figures


# its contest without witness turns: its calls (microseconds) sit within their bound's 0.05 ms
# margin, which the harness's own work around a call filled beside a loaded machine in 1 of
# 26 runs (docs/verified/2026-12-05-session41.md); this test is the outside clock's
@pytest.mark.usefixtures("outside_clock_alone")
def test_an_honest_sparse_update_of_a_large_table_clears_its_paced_tries(tmp_path):
    """tests/test_clock.py's sparse update (64 rows of a 16 MB in/out table: the table
    reloaded before each call is about 1000x the call's own traffic) timed one call at a
    time: its calls take about what the same messages take around no call, within the
    limit."""
    med, blocks, fault = _judged_paced(sparse_job(tmp_path))
    assert fault == "" and blocks and all(n == 1 for _, n, _ in blocks), (med, blocks)
    assert clock_suspect(med, blocks) == "", (med, blocks)
