"""Fresh harnesses kept started for a device's contests (workers.spares)."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_faults import PACK
from test_turns import ROUNDS, contender

from workers import isolation
from workers.build import spares_wanted
from workers.device_actor import DeviceActor
from workers.sandbox import Sandbox
from workers.spares import Spares

ROOT = Path(__file__).resolve().parent.parent


def _recording(monkeypatch) -> list[tuple[Sandbox, int | None, int, bool]]:
    """Each sandbox :meth:`Spares.take` hands out, with its harness's host pid, the jobs it
    had answered and whether its process ran, as it was handed out."""
    taken: list[tuple[Sandbox, int | None, int, bool]] = []
    take = Spares.take

    def recorded(self):
        box = take(self)
        taken.append((box, box.host_pid, box.served,
                       box.proc is not None and box.proc.poll() is None))
        return box

    monkeypatch.setattr(Spares, "take", recorded)
    return taken


def test_a_contest_runs_each_contender_in_a_spare_started_ahead(tmp_path, monkeypatch):
    """Two contenders take the two spares the device started ahead, each running and
    unused when taken, one each; the contest is `ok` with every round's sample, and its
    harnesses end with it (none is put back)."""
    taken = _recording(monkeypatch)
    h, art_h = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "a")
    o, art_o = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "b")
    actor = DeviceActor("cpu", spares=2)
    try:
        res = actor.contest([h, o], ROUNDS, art_h, art_o)
        left = actor.spares.ready()
        n_taken = actor.spares.taken
    finally:
        actor.shutdown()
    assert res["status"] == "ok", res
    assert [r["n_samples"] for r in res["results"]] == [ROUNDS, ROUNDS]
    assert n_taken == 2 and not left
    assert [(served, ran) for _, _, served, ran in taken] == [(0, True), (0, True)]
    pids = {pid for _, pid, _, _ in taken}
    assert len(pids) == 2 and None not in pids
    assert all(box.proc is None for box, _, _, _ in taken)  # ended with the contest


def test_the_own_harness_a_contest_ended_is_a_spare_and_keeps_its_count(tmp_path,
                                                                        monkeypatch):
    """After :meth:`DeviceActor.fresh` (what a GPU contest does first), the next job runs in
    the spare that was started ahead (its pid), not in a harness started then; the
    device's restart count goes on (1)."""
    taken = _recording(monkeypatch)
    j, art = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "a")
    actor = DeviceActor("cpu", spares=1)
    try:
        first = actor.sandbox
        actor.fresh()
        res = actor.time_reference(j)
        own, pid, stats = actor.sandbox, actor.sandbox.pid, actor.stats()
    finally:
        actor.shutdown()
    assert res["status"] == "ok", res
    assert len(taken) == 1 and taken[0][3] and taken[0][2] == 0
    assert own is taken[0][0] and own is not first
    assert stats["restarts"] == 1 and stats["harness_pid"] == pid is not None


def test_a_spare_that_did_not_start_in_its_sandbox_is_not_handed_out(tmp_path, monkeypatch):
    """A spare whose harness did not set up (a candidate that took the device's memory
    while it started, say) is neither handed out nor started again outside the sandbox:
    the contender gets a new sandbox, not started, of the host's isolation, which the
    contest starts itself, and the contest is `ok`; no spare is started after that."""
    def refused(box):
        box.kill()
        raise RuntimeError("harness did not start: CUDA out of memory")

    monkeypatch.setattr(Spares, "_ready", staticmethod(refused))  # the spares' wait alone
    kinds: list[str] = []
    take = Spares.take
    monkeypatch.setattr(Spares, "take", lambda self: (b := take(self),
                                                      kinds.append(b.isolation.kind))[0])
    taken = _recording(monkeypatch)
    h, art_h = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "a")
    actor = DeviceActor("cpu", spares=1)
    try:
        res = actor.contest([h], 3, art_h)
        n_taken, broken = actor.spares.taken, actor.spares.broken
        actor.spares.fill()
        refilled = actor.spares.ready()
    finally:
        actor.shutdown()
    assert res["status"] == "ok", res
    assert n_taken == 0 and broken and not refilled
    assert [(pid, ran) for _, pid, _, ran in taken] == [(None, False)]  # not started
    assert kinds == [isolation.available().kind]


_DIES = """
import os, signal, sys
from workers.spares import Spares
sp = Spares("cpu", {"OMP_NUM_THREADS": "1"}, 1)
sp.fill()
sp.settle()
box = sp.take()
start = [open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[19]
         for p in (box.proc.pid, box.host_pid)]
print(box.proc.pid, box.host_pid, *start, flush=True)
os.kill(box.host_pid, signal.SIGSTOP)  # reads no end of file: as a harness a candidate keeps
os.kill(os.getpid(), signal.SIGKILL)
"""


def _gone(pid: int, start: str) -> bool:
    """Whether process ``pid``, started at ``start`` (clock ticks after boot, field 22 of
    ``/proc/PID/stat``), has exited (a zombie counts: it runs no more; a pid reused by a
    process started later is not it)."""
    try:
        after = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return after[0] in ("Z", "X") or after[19] != start


@pytest.mark.parametrize("zygote", ["1", "0"])
def test_a_spare_dies_with_the_process_that_started_it(zygote):
    """A spare's harness is started from the device actor's thread, not the thread that
    waits for it: the actor killed (SIGKILL), the spare's processes end too, whether forked
    from the zygote or started the plain way, even a harness that does not read the end of
    its pipe (stopped here; a candidate's code that loops at exit, say). Started from a pool
    thread the plain way, a spare outlived the actor: the parent-death signal follows the
    starting thread, and workers.reap gives none off the main thread."""
    env = {**os.environ, "KOPT_ZYGOTE": zygote}
    out = subprocess.run([sys.executable, "-c", _DIES], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, env=env)
    assert out.returncode == -signal.SIGKILL, out.stderr
    said = out.stdout.split()
    assert len(said) == 4
    procs = list(zip(map(int, said[:2]), said[2:]))
    deadline = time.monotonic() + 60  # a condition waited for, not a timing
    while not all(_gone(*p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid, start in procs if not _gone(pid, start)]
    for p in left:  # none should be; a regression must not leave them running
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert left == []


def test_spares_are_closed_with_the_device():
    """:meth:`Spares.close` ends every spare's harness and hands out no more: a later
    :meth:`Spares.take` gives a new, unstarted sandbox."""
    sp = Spares("cpu", {"OMP_NUM_THREADS": "1"}, 2)
    sp.fill()
    sp.settle()
    boxes = [f.result() for f in sp._starting]
    assert len(boxes) == 2 and all(b.proc is not None for b in boxes)
    procs = [b.proc for b in boxes]
    sp.close()
    assert all(b.proc is None for b in boxes)
    assert all(p.poll() is not None for p in procs)  # their processes ended
    after = sp.take()
    try:
        assert after.proc is None and sp.taken == 0
    finally:
        after.close()


def test_a_cpu_device_keeps_no_spares_by_default(monkeypatch):
    """A CPU device's harnesses fork from a zygote and its timing shares the cores: none
    kept, whatever ``$KOPT_SPARES`` says (a GPU's count: 3 unset, else its value)."""
    monkeypatch.delenv("KOPT_SPARES", raising=False)
    assert spares_wanted() == (3, "")
    monkeypatch.setenv("KOPT_SPARES", "5")
    assert spares_wanted() == (5, "")
    actor = DeviceActor("cpu")
    try:
        assert actor.spares.n == 0 and not actor.spares.ready()
    finally:
        actor.shutdown()


def test_a_bad_KOPT_SPARES_is_one_line_naming_it():
    """``KOPT_SPARES`` that is not a whole number from 0 to 8 is refused before anything
    runs, in one line naming the variable, its value and the range."""
    for value, said in (("lots", "expected a number from 0 to 8"),
                        ("9", "expected a number from 0 to 8"),
                        ("1.5", "expected a whole number from 0 to 8")):
        out = subprocess.run(
            [sys.executable, "-c", "from workers.build import check_env; check_env(False)"],
            capture_output=True, text=True, cwd=ROOT, timeout=120,
            env={"PATH": "/usr/bin:/bin", "KOPT_SPARES": value, "HOME": str(ROOT)})
        assert out.returncode == 1
        assert out.stderr.strip().splitlines()[-1] == (
            f"workers.build.EnvError: $KOPT_SPARES={value!r}: {said}")
