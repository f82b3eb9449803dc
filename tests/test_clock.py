"""The outside clock's rule (kopt.core.clock) and its two halves: the harness's clock job and
the sandbox's figure from outside the harness process."""

import pytest
from test_faults import PACK, artifact, job

from kopt.core.clock import (
    CLOCK_FACTOR,
    CLOCK_MAX_CALLS,
    CLOCK_SLACK_MS,
    clock_calls,
    clock_limit_ms,
    clock_suspect,
)
from workers.harness import Harness


def test_a_block_lasts_about_50_ms_at_the_claimed_median():
    assert clock_calls(1.0) == 50 and clock_calls(0.5) == 100 and clock_calls(20.0) == 3
    assert clock_calls(200.0) == 3  # never fewer than 3 calls
    assert clock_calls(1e-6) == CLOCK_MAX_CALLS  # a tiny claim cannot ask for endless calls
    with pytest.raises(ValueError):
        clock_calls(0.0)


def test_suspect_only_when_every_block_is_past_the_limit():
    assert clock_limit_ms(1.0) == CLOCK_FACTOR * 1.0 + CLOCK_SLACK_MS == 4.01
    assert clock_suspect(1.0, []) == ""
    assert clock_suspect(1.0, [(200.0, 50)]) == ""  # 4.0 ms a call: within 4.01
    assert clock_suspect(1.0, [(400.0, 50), (190.0, 50)]) == ""  # one block within: load
    why = clock_suspect(0.01, [(500.0, 100), (480.0, 100), (510.0, 100)])
    assert why == ("its contest median is 0.01 ms by its own process's clock, but 3 blocks "
                   "of its calls back to back took 5, 4.8, 5.1 ms a call by a clock outside "
                   "its process (more than 4x the median + 0.01 ms = 0.05 ms): its process's "
                   "clock does not tell its time")
    with pytest.raises(ValueError):
        clock_suspect(1.0, [(1.0, 0)])


def test_the_harness_times_a_block_of_calls_and_checks_its_outputs(tmp_path):
    """The harness's own half: ``calls`` calls back to back, outputs verified after the
    last; its ``inside_ms`` covers them (each call of the fault pack's honest kernel sorts
    ``buf`` in place: an in/out argument, reloaded before every call)."""
    h = Harness("cpu")
    src = PACK / "faults.cpp"
    j = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
            {"x": ["N"], "buf": ["N"], "y": ["N"]})
    sent = []
    h.progress = sent.append
    res = h.run({**j, "clock_calls": 7})
    assert res["status"] == "ok" and res["calls"] == 7 and res["inside_ms"] > 0, res
    assert sent == [{"stage": "prepared"}, {"stage": "clock"}]
    bad = job(artifact(tmp_path, src, {"MODE": 3}), src, PACK / "ref.py", {"N": 4096},
              {"x": ["N"], "buf": ["N"], "y": ["N"]})  # works only for its first two calls
    res = h.run({**bad, "clock_calls": 5})
    assert res["status"] == "wrong_result" and "after 5 calls back to back" in res["error"]


def test_a_patched_clock_is_suspect_by_the_clock_outside_its_process(tmp_path):
    """Attack MODE 10 (tests/fixtures/faultpack/attacks.cpp) scales the harness's
    ``time.perf_counter_ns`` by 1/100 from its first call: its contest median, from that
    clock, is a hundredth of the honest kernel's while it does the same work. The sandbox's
    clock (this process) times a block of its calls from the outside: suspect. The honest
    kernel, in a harness of its own, is not. Each in a sandbox, as kopt runs them."""
    from test_attacks import attack_job

    from workers.sandbox import Sandbox

    src = PACK / "faults.cpp"
    honest = job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096},
                 {"x": ["N"], "buf": ["N"], "y": ["N"]}, job_key="honest")
    patcher = {**attack_job(tmp_path, 10), "job_key": "patcher"}
    figures = {}
    for name, j in (("honest", honest), ("patcher", patcher)):
        sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
        try:
            con = sb.run({**j, "contest": [j], "rounds": 12}, timeout_s=60)
            assert con["status"] == "ok", con
            med = con["results"][0]["median_ms"]
            blocks = []
            for _ in range(3):
                res = sb.run({**j, "clock_calls": clock_calls(med)}, timeout_s=60)
                # outside: from the sandbox's read of the "clock" message, which a busy
                # machine may delay past the harness's own start: it can come out a little
                # shorter than the harness's own figure
                assert res["status"] == "ok" and res["outside_ms"] > 0, res
                blocks.append((res["outside_ms"], res["calls"]))
        finally:
            sb.close()
        figures[name] = (med, blocks)
    # the patched clock: 100x fewer ms for the same work, in and outside the contest
    assert figures["patcher"][0] < figures["honest"][0] / 20, figures
    assert clock_suspect(*figures["patcher"]).startswith(
        f"its contest median is {figures['patcher'][0]:.4g} ms by its own process's clock")
    assert clock_suspect(*figures["honest"]) == "", figures
