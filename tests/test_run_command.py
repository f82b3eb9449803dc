"""kopt.util.command.run_command, which runs a review step: a command that leaves a
background child on its stdout is done when it exits (a review that exited 0 at once was
recorded as timed out), and one that hangs is killed at its timeout."""

from __future__ import annotations


def test_a_command_that_leaves_a_background_child_is_done_when_it_exits(tmp_path):
    """Before: kopt waited for the end of the output pipe, which the child (`sleep 20 &`)
    holds open: a review that exited 0 at once was recorded as timed out at 5 s."""
    from kopt.util.command import run_command

    step = run_command("review", "sleep 20 & echo checked; echo warn >&2", tmp_path, 5)
    assert (step.exit_status, step.timed_out, step.output_tail) == (0, False, "checked\n\nwarn\n")
    assert step.duration_s < 4
    hung = run_command("review", "echo started; sleep 20", tmp_path, 1)
    assert (hung.timed_out, hung.output_tail, hung.exit_status) == (True, "started\n", -9)
