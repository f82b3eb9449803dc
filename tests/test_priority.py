"""sweep.yaml ``timing.realtime``: the CPU harness's jobs at SCHED_FIFO (workers.priority)."""

import os

import pytest
from test_harness import artifact, job

from conftest import write_sweep
from kopt.core.spec import load_sweep
from kopt.driver.checks import realtime_notes
from workers import priority
from workers.sandbox import Sandbox

# a machine whose kernel refuses this process SCHED_FIFO (not root, no CAP_SYS_NICE, or a
# container with no real-time budget: the H200 host's, docs/verified/2026-12-03-cpu-realtime.md)
# cannot run what these tests check; what it does there instead is the note test below
NO_FIFO = priority.why_not(0)
needs_fifo = pytest.mark.skipif(NO_FIFO != "", reason=f"this machine refuses it: {NO_FIFO}")

# y = 2x when the calling thread runs under SCHED_FIFO at priority 1 and a thread it
# starts does not (SCHED_RESET_ON_FORK: nothing the candidate leaves behind keeps the
# priority), else y = -x: the candidate's own view of the priority its calls (checked and
# timed) ran at
POLICY_CPP = """
#include <pthread.h>
#include <sched.h>
static void* policy_of(void* out) {
  *(int*)out = sched_getscheduler(0);
  return nullptr;
}
extern "C" void solve(const float* x, float* y, int N) {
  sched_param p;
  int child = -1;
  pthread_t t;
  if (pthread_create(&t, nullptr, policy_of, &child) == 0) pthread_join(t, nullptr);
  const bool rt = (sched_getscheduler(0) & ~SCHED_RESET_ON_FORK) == SCHED_FIFO
                  && sched_getparam(0, &p) == 0 && p.sched_priority == 1
                  && child == SCHED_OTHER;
  for (int i = 0; i < N; ++i) y[i] = rt ? 2 * x[i] : -x[i];
}
"""


@needs_fifo
def test_the_block_runs_at_fifo_and_the_thread_gets_its_policy_back():
    before = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    with priority.realtime(0) as on:
        assert on is True
        assert os.sched_getscheduler(0) == os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
        assert os.sched_getparam(0).sched_priority == priority.RT_PRIORITY == 1
        child = os.fork()  # starts at the normal policy
        if child == 0:
            os._exit(0 if os.sched_getscheduler(0) == os.SCHED_OTHER else 1)
        assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before
    with priority.realtime(None) as on:
        assert on is False and os.sched_getscheduler(0) == before[0]
    assert priority.why_not(0) == ""


def test_a_refused_policy_changes_nothing_and_says_the_fix(monkeypatch):
    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with priority.realtime(0) as on:
        assert on is False
    why = priority.why_not(0)
    assert why == ("SCHED_FIFO was refused (Operation not permitted): kopt needs root "
                   "or CAP_SYS_NICE for timing.realtime")
    with pytest.raises(PermissionError), priority.realtime(0, strict=True):
        pass


@needs_fifo
def test_a_realtime_job_runs_its_calls_at_fifo_and_the_next_job_does_not(tmp_path):
    """The candidate computes right only under SCHED_FIFO, with a thread it starts at the
    normal policy: with timing.realtime its checked and timed calls are all right (`ok`);
    the same artifact in the same harness right after, without the setting, is
    `wrong_result` (the harness's thread got its normal policy back); the device's info
    says the harness can take the policy."""
    d = write_sweep(tmp_path / "rt", "kernel: k.cpp\ndims: [{N: 64}]\n", {
        "k.cpp": POLICY_CPP, "ref.py": "def reference(x, N):\n    return 2 * x\n"})
    art = artifact(tmp_path, d / "k.cpp", 0, "k.cpp")
    base = job(art, d / "k.cpp", d / "ref.py", dims={"N": 64})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    sb.start()
    try:
        assert sb.info["realtime"] == "available"
        rt = sb.run({**base, "timing": {**base["timing"], "realtime": True}}, timeout_s=20)
        plain = sb.run(base, timeout_s=20)
    finally:
        sb.close()
    assert rt["status"] == "ok", rt.get("error")
    assert rt["n_samples"] >= 5
    assert plain["status"] == "wrong_result", plain.get("error")


def test_a_device_that_cannot_take_the_policy_is_one_note(tmp_path):
    d = write_sweep(tmp_path / "s", """\
        kernel: k.cpp
        dims: [{N: 64}]
        timing: {realtime: true}
        """, {"k.cpp": POLICY_CPP, "ref.py": "def reference(x, N):\n    return 2 * x\n"})
    space = load_sweep(d).space("cpu")
    assert space.timing.realtime is True
    infos = [{"device_class": "cpu-x86_64", "node": "n1", "realtime": "available"},
             {"device_class": "cpu-x86_64", "node": "n2", "realtime": "SCHED_FIFO was refused "
              "(Operation not permitted): kopt needs root or CAP_SYS_NICE for "
              "timing.realtime"}]
    assert realtime_notes(space, infos) == [
        "sweep.yaml timing.realtime: cpu-x86_64 on n2 times at normal priority: SCHED_FIFO "
        "was refused (Operation not permitted): kopt needs root or CAP_SYS_NICE for "
        "timing.realtime"]
    off = load_sweep(write_sweep(tmp_path / "off", "kernel: k.cpp\ndims: [{N: 64}]\n", {
        "k.cpp": POLICY_CPP, "ref.py": "def reference(x, N):\n    return 2 * x\n"}))
    assert realtime_notes(off.space("cpu"), infos) == []


def test_the_harness_is_found_below_its_sandboxs_first_process(tmp_path):
    """unshare (10) -> workers.jail (11, whose command line names the harness too) ->
    the harness (12): the harness's own pid; none where no process runs it."""
    procs = {10: (b"unshare\0--pid\0--fork\0python\0-m\0workers.jail\0", "11"),
             11: (b"python\0-m\0workers.jail\0/s\0--\0python\0-m\0workers.harness\0", "12"),
             12: (b"python\0-m\0workers.harness\x003\x004\0", "")}
    for pid, (argv, kids) in procs.items():
        (tmp_path / str(pid) / "task" / str(pid)).mkdir(parents=True)
        (tmp_path / str(pid) / "cmdline").write_bytes(argv)
        (tmp_path / str(pid) / "task" / str(pid) / "children").write_text(kids)
    assert priority.harness_pid(10, tmp_path) == 12
    assert priority.harness_pid(12, tmp_path) == 12
    (tmp_path / "11" / "task" / "11" / "children").write_text("")
    assert priority.harness_pid(10, tmp_path) is None
