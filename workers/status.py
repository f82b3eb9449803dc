"""A job's status, the closed set every failure is a row of (standard library only: the
driver, the device actor, the sandbox and the Nsight Compute reader all import it)."""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """A job's status (the ``status`` column). A ``str`` enum: each member equals its stored
    string (``Status.OK == "ok"``), so rows, JSON and the store schema are unchanged."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"  # the build failed (BuildResult.error)
    WRONG_RESULT = "wrong_result"  # outputs outside the tolerance, or inputs written to
    LAUNCH_ERROR = "launch_error"  # kernel mode: the launch was refused
    CRASHED = "crashed"  # the harness process died, or the CUDA context broke
    TIMEOUT = "timeout"  # no answer within timing.timeout_s
    TOO_SLOW = "too_slow"  # the samples that fit in the budget are reported
    ESCAPED = "escaped"  # solve returned before its work was done
    REPLAYED = "replayed"  # results reused across calls with the same inputs
    LEAKED = "leaked"  # device memory grew over the job
    SUSPECT = "suspect"  # a clock outside its process disagreed with its own figures
    LOST = "lost"  # no live device of its class was left to run it, or its harness did not start
    ERROR = "error"  # anything else (the error text says what)
    NOT_PROFILED = "not_profiled"  # profile_status: NCU was not run for this candidate

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
