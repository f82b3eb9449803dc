"""Shell commands a user names (a port's build, test and bench, the review gate's command),
run in a session of their own with a timeout, their output kept; and the bench figure read
from a bench command's output.

Bench figure: the last number (``12.5``, ``-3``, ``1.2e-3``; a unit after it is ignored) on
the last line of the bench command's standard output that holds one, e.g. ``time_ms 0.42``
or ``0.42 ms``. None when no line holds a number.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAIL = 4000  # characters of each command's output kept in the store


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass
class Step:
    """One command run for a port (``step``: build_before, bench_before, build, test,
    bench; ``duration_s`` seconds; ``exit_status`` -9 when killed at the timeout;
    ``run_no``: a bench run's round, from 1, None for other commands)."""

    step: str
    command: str
    exit_status: int
    duration_s: float
    timed_out: bool
    output_tail: str
    bench_value: float | None = None
    run_no: int | None = None


def bench_figure(output: str) -> float | None:
    """The last number on the last line of ``output`` that holds one (see the module doc);
    a number no float holds (``1e999``) is no figure: it would make every ratio NaN."""
    for line in reversed(output.splitlines()):
        nums = [v for v in map(float, _NUMBER.findall(line)) if math.isfinite(v)]
        if nums:
            return nums[-1]
    return None


def run_command(step: str, command: str, cwd: Path, timeout_s: float,
                env: dict[str, str] | None = None, log: Path | None = None) -> Step:
    """Run ``command`` through the shell in ``cwd`` (``env``: its environment, default this
    process's) in a session of its own; its exit status is the shell's own, also when it
    leaves a background process running (its output goes to temporary files, not pipes, so
    nothing waits for such a process to close them). At ``timeout_s`` seconds the whole
    process group is killed (exit status -9); after the shell exits, whatever it left
    running in its group is killed too. ``log``: a file that gets its whole output (standard
    output, then standard error; its folder is made).

    Raises:
        OSError: the command cannot start (``cwd`` is gone, no shell).
    """
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as fout, tempfile.TemporaryFile() as ferr:
        p = subprocess.Popen(command, shell=True, cwd=cwd,
                             stdout=fout, stderr=ferr, start_new_session=True, env=env)
        timed_out = False
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(p.pid)
        p.wait()
        out, err = _read_back(fout), _read_back(ferr)
    text = out + (("\n" + err) if err else "")
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(text)
    return Step(step=step, command=command, exit_status=p.returncode,
                duration_s=time.monotonic() - t0, timed_out=timed_out,
                output_tail=text[-TAIL:],
                bench_value=bench_figure(out) if step.startswith("bench") else None)


def _kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid`` (a command's session); nothing left in it is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_back(f: Any) -> str:
    """The text a command wrote to temporary file ``f`` (undecodable bytes replaced)."""
    f.seek(0)
    return f.read().decode("utf-8", errors="replace")
