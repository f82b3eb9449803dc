"""What else the seventh fresh-clone trial left unfixed (docs/verified/2026-11-30-trial7.md,
its table's #5 and #8): a review command that leaves a background child, and `kopt wait` on
a run interrupted in its first iteration. Each test failed before its fix."""

from __future__ import annotations

import pytest


# -- trial 7 #8: `kopt wait` on a run interrupted inside iteration 1 ---------------------------
def test_wait_on_a_run_interrupted_in_its_first_iteration(tmp_path):
    """Before: "run R has no iteration 0 (its last is 0)": the run has none stored yet, and
    the one it was in is 1. Now the line says it was interrupted and how to resume it."""
    from kopt.database import Database
    from kopt.wait import WaitError, pending

    w = Database(tmp_path).writer("s", "r1")
    w.add("runs", [{"run_id": "r1", "sweep": "s", "event": "running", "sweep_dir": "/x/s"}])
    w.flush()  # no lock held: the run reads as interrupted
    with pytest.raises(WaitError) as ei:
        pending(tmp_path, "r1", None)
    assert str(ei.value) == ("run r1 was interrupted before iteration 1 closed; resume it "
                             "with `kopt sweep /x/s --resume r1`")


# -- trial 7 #5: a review command that leaves a background child on its stdout ---------------
def test_a_command_that_leaves_a_background_child_is_done_when_it_exits(tmp_path):
    """Before: kopt waited for the end of the output pipe, which the child (`sleep 20 &`)
    holds open: a review that exited 0 at once was recorded as timed out at 5 s."""
    from kopt.port import run_command

    step = run_command("review", "sleep 20 & echo checked; echo warn >&2", tmp_path, 5)
    assert (step.exit_status, step.timed_out, step.output_tail) == (0, False, "checked\n\nwarn\n")
    assert step.duration_s < 4
    hung = run_command("review", "echo started; sleep 20", tmp_path, 1)
    assert (hung.timed_out, hung.output_tail, hung.exit_status) == (True, "started\n", -9)
