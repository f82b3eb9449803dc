"""A GPU's witness turns (workers.witness_gpu, workers.devmem): the judgement of their
figures and the failures said in one line, on any machine (the turns themselves run on a
GPU: tests/test_gpu_witness.py)."""

import os

import pytest

from workers import devmem, judge, witness, witness_gpu
from workers.witness import Null, Record

OK = {"status": "ok", "error": "", "results": [{"median_ms": 0.5}]}
NULL = Null(main_cpu_ms=0.05, wall_ms=0.08, read_ms=0.02, put_ms=0.03, after_ms=0.01)


def _taking(records, median=0.5):
    plan = witness_gpu.DevicePlan(0, [], null=NULL)
    return witness.Taking(plan, list(records), median_ms=median)


def _turn(wall, read=0.02, put=0.03, after=0.01):
    return Record(0.5, 0.1, None, wall_ms=wall, read_ms=read, put_ms=put, after_ms=after)


def test_a_gpu_contender_is_held_to_its_turns_wall_time():
    """Its least turn's wall time less the judge's (0.08 ms), plus what its outputs' copy
    took beyond the judge's (0.02 ms), must keep within GPU_FACTOR x median +
    GPU_MARGIN_MS: 1.5 ms at a 0.5 ms median."""
    allowed = witness_gpu.GPU_FACTOR * 0.5 + witness_gpu.GPU_MARGIN_MS
    assert allowed == pytest.approx(1.5)
    ok = [""] * witness.MAX_TURNS
    near = [_turn(0.08 + 1.5)] + [_turn(3.0)] * 7
    out = witness.judged(OK, _taking(near), ok)
    assert out["status"] == "ok" and out["results"][0]["actor_ms"] == pytest.approx(1.5), out
    # a copy of its outputs that waited behind its own kernel counts
    late = [_turn(0.08 + 1.3, read=0.02 + 0.25)] * 8
    out = witness.judged(OK, _taking(late), ok)
    assert out["status"] == "suspect" and out[witness.BOUND] is True, out
    assert out["error"].startswith(
        "its calls on fresh inputs took at least 1.55 ms of wall time (less the judge's "
        "turns with no call) in each of 8 witness turns, its samples' median is 0.5 ms"), out


def test_a_kernel_left_running_after_its_turn_is_suspect():
    """The device probed once the contender is held again after its turn: BUSY_MS more than
    after the judge's turns means a kernel of its own still ran (a held rival's leftover
    work was waited out before its turn, so it frames nobody)."""
    ok = [""] * witness.MAX_TURNS
    fine = [_turn(0.6, after=0.01 + witness_gpu.BUSY_MS)] * 8
    assert witness.judged(OK, _taking(fine), ok)["status"] == "ok"
    busy = [_turn(0.6)] * 7 + [_turn(0.6, after=2.2)]
    out = witness.judged(OK, _taking(busy), ok)
    assert out["status"] == "suspect" and out[witness.BOUND] is True, out
    assert out["error"].startswith(
        "a kernel of its own still ran on the device after a witness turn ended: a write of "
        "the device actor's then took 2.2 ms, after the judge's turns 0.01 ms"), out
    # a slow write of its inputs is no one's verdict: the GPU was waited for before it
    slow_put = [_turn(0.6, put=5.0)] * 8
    assert witness.judged(OK, _taking(slow_put), ok)["status"] == "ok"


def test_wrong_outputs_and_missing_turns_are_judged_as_on_a_cpu():
    wrong = ["y: 5 of 16 elements differ"] + [""] * 7
    out = witness.judged(OK, _taking([_turn(0.6)] * 8), wrong)
    assert out["status"] == "wrong_result" and "were wrong: y: 5 of 16" in out["error"], out
    out = witness.judged(OK, _taking([_turn(0.6)] * 3), [""] * 8)
    assert out["status"] == "suspect" and out["error"].startswith(
        "it took 3 witness turns (0 stray) of the 8 asked for"), out


def test_a_gpu_plan_checks_the_buffers_named_before_any_copy():
    src = [{"inputs": {"x": [7, 4096, 2 << 20]}, "outputs": {"y": [8, 4096, 2 << 20]}}]
    plan = witness_gpu.DevicePlan(os.getpid(), src)
    other = {"inputs": {"x": [3, 2048, 2 << 20]}, "outputs": {"y": [4, 4096, 2 << 20]}}
    assert plan.put(os.getpid(), other, 0).startswith("its harness named other inputs than")
    # nor another allocation size (the actor would map and keep whatever size it named)
    big = {"inputs": {"x": [3, 4096, 1 << 40]}, "outputs": {"y": [4, 4096, 2 << 20]}}
    assert plan.put(os.getpid(), big, 0).startswith("its harness named other inputs than")
    # a CPU's span (address, bytes) is not a GPU's
    cpu = {"inputs": {"x": [3, 4096]}, "outputs": {"y": [4, 4096]}}
    assert plan.put(os.getpid(), cpu, 0).startswith("its harness named other inputs than")
    assert plan.put(os.getpid(), src[0], 1) == "a witness turn (2) beyond the 1 asked for"
    # descriptors: its own range, one per buffer
    odd = {"inputs": {"x": [-3, 4096, 2 << 20]}, "outputs": {"y": [4, 4096, 2 << 20]}}
    assert plan.put(os.getpid(), odd, 0) == "its harness named descriptor -3 for x"
    same = {"inputs": {"x": [9, 4096, 2 << 20]}, "outputs": {"y": [9, 4096, 2 << 20]}}
    assert plan.put(os.getpid(), same, 0) == "its harness named descriptor 9 for both x and y"
    with pytest.raises(devmem.DevMemError, match="^8192 bytes asked of an allocation of 4096$"):
        devmem.Importer().address(os.getpid(), 1, 8192, 4096)
    assert plan.take(os.getpid(), src[0], 0, "why") == "why"
    assert plan.take(os.getpid(), src[0], 0, b"") == ""


def test_a_descriptor_of_another_process_is_taken_and_a_gone_one_is_said():
    r, w = os.pipe()
    try:
        got = devmem.take_fd(os.getpid(), w)
        os.write(got, b"ok")
        os.close(got)
        assert os.read(r, 2) == b"ok"
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(devmem.DevMemError, match=r"^pidfd_getfd\(\d+, 999\): Bad file desc"):
        devmem.take_fd(os.getpid(), 999)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="a machine with an NVIDIA driver")
def test_without_a_driver_a_gpu_plan_says_why_in_one_line():
    """On a machine with no NVIDIA driver the device actor's copies fail with one line
    naming the driver call; the contest then has no witness turns (workers.judge)."""
    src = [{"inputs": {"x": [7, 4096, 2 << 20]}, "outputs": {"y": [8, 4096, 2 << 20]}}]
    plan = witness_gpu.DevicePlan(os.getpid(), src)
    why = plan.put(os.getpid(), src[0], 0)
    assert why.startswith("cuInit: ") and "\n" not in why, why
    with pytest.raises(devmem.DevMemError, match="^cuMemGetAllocationGranularity: "):
        devmem.allocate(4096, 0)


class _FailingJudge:
    """A judge whose check fails (as one out of device memory would)."""

    def run(self, job, timeout_s):
        return {"status": "error", "error": "CUDA out of memory"}


def test_a_failed_check_sets_every_ok_answer_aside():
    """No answer passes unchecked: when the judge's check fails (a contender can exhaust the
    device's memory after its turns), each `ok` becomes `error`, marked for a new judge,
    and the contest says its turns were not checked."""
    judging = judge.Judging([witness.Plan(0, [])])
    answers = [OK, {"status": "wrong_result", "error": "y differs"}]
    out = judge.judged(_FailingJudge(), judging, [None, None], answers, 5.0)
    assert out[0]["status"] == "error" and out[0][witness.UNCHECKED] is True, out
    assert out[0]["error"] == ("its witness turns were not judged (the judge's check "
                               "failed: CUDA out of memory): its answer is not taken")
    assert out[1] == answers[1]
    assert judging.said == (f"{witness.MAX_TURNS} witness turns each, not checked: the "
                            "judge's check failed: CUDA out of memory")


def test_a_contest_whose_check_failed_is_taken_again_with_a_new_judge(monkeypatch):
    """Once, with a new judge (workers.device_actor ``clock_end``); that take stands, and
    where its check fails too the contest is the device's failure."""
    from workers.device_actor import DeviceActor

    actor = DeviceActor("cpu")
    takes, ended = [], []
    unchecked = witness.unchecked(OK, "the judge's check failed: x")

    def take(jobs, each, timeout_s, fresh=False):
        takes.append(fresh)
        answers = [unchecked] if len(takes) == 1 else [OK]
        return {"status": answers[0]["status"], "witness": "w"}, answers, 0.0

    monkeypatch.setattr(actor, "_take", take)
    monkeypatch.setattr(actor, "clock_end", lambda: ended.append(1))
    try:
        res = actor._in_turns([{"job_key": "a"}], [{}], 5.0)
        assert takes == [False, False] and ended == [1] and res["status"] == "ok", (takes, res)
        # failed twice: the device's failure, no contender's (the loop names nobody)
        monkeypatch.setattr(actor, "_take", lambda *a, **k: (
            {"status": "error", "witness": "w"}, [unchecked], 0.0))
        res = actor._in_turns([{"job_key": "a"}], [{}], 5.0)
        assert res == {"status": "error", "actor": True, "witness": "w", "error": (
            "the witness turns could not be judged twice: its witness turns were not judged "
            "(the judge's check failed: x): its answer is not taken")}, res
    finally:
        actor.shutdown()


class _DrawingJudge:
    """A judge that answers its "sets" job as told (and would take no null turns)."""

    host_pid = 1

    def __init__(self, answer):
        self.answer = answer

    def run(self, job, timeout_s, plan=None):
        return self.answer


def test_a_judge_kept_out_by_other_processes_memory_sets_the_answers_aside():
    """A GPU judge that only memory other processes hold keeps from its sets (one a
    co-tenant could take on purpose) gives no witness turns and marks the contest
    unjudged, whose answers are then set aside as for a failed check; one whose problem
    is too large for the device gives none, said, and the answers stand."""
    short = judge.prepare(_DrawingJudge({"status": "error", "error": "other processes hold "
                                         "the rest", "unjudged": True}), [{}], 5.0, gpu=True)
    assert short.plans is None and short.unjudged
    assert short.said == "none: the judge did not draw input sets: other processes hold the rest"
    large = judge.prepare(_DrawingJudge({"status": "error", "error": "do not fit in the "
                                         "device's memory", "witnessless": True}), [{}], 5.0,
                          gpu=True)
    assert large.plans is None and not large.unjudged
    assert large.said == ("none: the judge did not draw input sets: do not fit in the "
                          "device's memory")


class _NullJudge(_DrawingJudge):
    """A judge that draws its sets, then answers its null turns as told (or raises it);
    with ``stuck``, its plan finds the GPU busy before a turn."""

    taking = None

    def __init__(self, null, stuck=0):
        super().__init__({"status": "ok", "src": [], "dst": [[]]})
        self.null, self.stuck = null, stuck

    def run(self, job, timeout_s, plan=None):
        if job["witness_of"] == "sets":
            return self.answer
        plan.stuck = self.stuck
        if isinstance(self.null, Exception):
            raise self.null
        return self.null


def test_any_other_failure_of_a_judge_leaves_the_contest_unjudged(monkeypatch):
    """Every failure of the judge but the problem's own (``witnessless``) marks the contest
    unjudged, on a GPU and on a CPU: a failed draw, its null turns refused, stuck behind a
    busy GPU or raising, its host pid unknown (another process can bring each about: every
    GPU of a host is reachable from every sandbox, host memory is shared); a witnessless
    one gives no witness turns, said, the answers standing."""
    monkeypatch.setattr(witness_gpu.DevicePlan, "close", lambda self: None)
    failed_draw = _DrawingJudge({"status": "error", "error": "CUDA error: out of resources"})
    cases = {
        "the judge did not draw input sets: CUDA error: out of resources": failed_draw,
        "its null turns: the device actor could not map it": _NullJudge(
            {"status": "error", "error": "the device actor could not map it"}),
        "the GPU stayed busy before the judge's null turns (work of a held process): no "
        "baseline for witness turns": _NullJudge({"status": "ok"}, stuck=1),
        "the judge failed: OSError('gone')": _NullJudge(OSError("gone")),
        "the judge took no witness turn": _NullJudge({"status": "ok"}),
    }
    nopid = _NullJudge({"status": "ok"})
    nopid.host_pid = None
    cases["the judge's host pid is not known"] = nopid
    for gpu in (True, False):
        for why, j in cases.items():
            got = judge.prepare(j, [{}], 5.0, gpu=gpu)
            assert (got.plans, got.why, got.unjudged) == (None, why, True), (gpu, why, got)
        ref = _DrawingJudge({"status": "error", "error": "ref.py: inputs() raised",
                             "witnessless": True})
        got = judge.prepare(ref, [{}], 5.0, gpu=gpu)
        assert (got.plans, got.unjudged) == (None, False), got


def test_a_host_that_cannot_take_gpu_witness_turns_says_so_once(monkeypatch):
    """A GPU device actor on a host that cannot take witness turns (workers.witness_gpu
    ``host_why``: no ptrace access, no schedstat, the driver refusing exportable memory:
    nothing a candidate can change) runs its contests without them, said, asking the host
    once; where the host can, or cannot tell now, the judge is asked."""
    from workers.device_actor import DeviceActor

    actor = DeviceActor("cpu")
    actor.backend = "cuda"  # the GPU's branch alone: no GPU is touched
    answers = [None, "no ptrace", "never asked"]
    monkeypatch.setattr(witness_gpu, "host_why", lambda gpu=True: gpu and answers.pop(0))
    monkeypatch.setattr(judge, "prepare", lambda *a, **k: judge.Judging(None, why="asked"))
    try:
        # not known now (the driver out of memory): the judge is asked, the host again later
        assert actor._judging([{}], 5.0).why == "asked"
        for _ in range(2):
            got = actor._judging([{}], 5.0)
            assert (got.said, got.unjudged) == (
                "none: this host cannot take them: no ptrace", False), got
        assert answers == ["never asked"]
        actor.host_why = ""
        assert actor._judging([{}], 5.0).why == "asked"
    finally:
        actor.backend = "cpu"
        actor.shutdown()


def test_a_retake_without_witness_turns_leaves_the_first_take_standing(monkeypatch):
    """A contender `suspect` by the bound is taken again; where that take has no witness
    turns (its judge could not draw its sets), the first take's answer stands, not the
    unwitnessed one."""
    from workers.device_actor import DeviceActor

    actor = DeviceActor("cpu")
    takes = []
    bound = {"status": "suspect", "error": "its calls took longer", witness.BOUND: True}

    def take(jobs, each, timeout_s, fresh=False):
        takes.append(fresh)
        if len(takes) == 1:
            return ({"status": "suspect", "failed": ["a"], "witness": "8 witness turns each"},
                    [bound], 0.0)
        return {"status": "ok", "witness": "none: the judge failed: x"}, [OK], 0.0

    monkeypatch.setattr(actor, "_take", take)
    try:
        res = actor._in_turns([{"job_key": "a"}], [{}], 5.0)
    finally:
        actor.shutdown()
    assert takes == [False, True]
    assert res == {"status": "suspect", "failed": ["a"], "witness": (
        "8 witness turns each; its retake had no witness turns (none: the judge failed: x): "
        "the first take stands")}, res


def test_a_retake_unjudged_twice_is_the_devices_failure_not_the_first_takes(monkeypatch):
    """Suspect by the bound (a verdict load can bring), then two takes whose judge was kept
    from its sets: the device's failure, naming nobody; the first take's `suspect` would
    have let memory taken on purpose, with load, drop an honest contender."""
    from workers.device_actor import DeviceActor

    actor = DeviceActor("cpu")
    takes = []
    bound = {"status": "suspect", "error": "its calls took longer", witness.BOUND: True}
    unjudged = witness.unchecked(OK, "other processes hold the rest")

    def take(jobs, each, timeout_s, fresh=False):
        takes.append(fresh)
        if len(takes) == 1:
            return ({"status": "suspect", "failed": ["a"], "witness": "8 witness turns each"},
                    [bound], 0.0)
        return ({"status": "error", "witness": "none: the judge did not draw input sets: y"},
                [unjudged], 0.0)

    monkeypatch.setattr(actor, "_take", take)
    monkeypatch.setattr(actor, "clock_end", lambda: None)
    try:
        res = actor._in_turns([{"job_key": "a"}], [{}], 5.0)
    finally:
        actor.shutdown()
    assert takes == [False, True, True]
    assert res["status"] == "error" and res["actor"] is True, res
    assert res["error"].startswith("the witness turns could not be judged twice"), res


def test_kopt_env_says_whether_witness_turns_can_be_taken(monkeypatch):
    """workers.witness ``describe`` (``kopt env``'s ``witness``) tries a child as the device
    actor tries a harness: here (root, cuda-python installed) both ways reach it."""
    assert witness.describe() == ("yes: process_vm_readv and pidfd_getfd reach a child; GPU "
                                  "buffers through cuda-python's driver bindings")
    def no_fd(pid, fd):
        raise devmem.DevMemError(f"pidfd_getfd({pid}, {fd}): Operation not permitted")

    monkeypatch.setattr(devmem, "take_fd", no_fd)  # a CPU's witness turns need none
    assert witness.host_why() == ""
    assert witness.describe().startswith("yes: process_vm_readv reaches a child; no GPU "
                                         "witness turns: pidfd_getfd(")
    monkeypatch.setattr(witness, "vm_read", lambda pid, addr, n: "no ptrace access")
    assert witness.describe() == "none: no ptrace access (contests run without witness turns)"


class _Importer:
    """workers.devmem's Importer as a DevicePlan uses it, in host memory terms: addresses
    are descriptor x 1000, copies are listed, the device idle or not as told."""

    def __init__(self, idle):
        self.is_idle, self.copies = idle, []

    def idle(self, limit_ms, busy_ms):
        return self.is_idle

    def current(self):
        pass

    def address(self, pid, fd, n, size):
        return pid * 10**6 + fd * 1000

    def copy(self, dst, src, n):
        self.copies.append((dst, src, n))

    def sync(self):
        pass

    def probe_ms(self):
        return 0.02

    def release(self):
        pass


def test_a_gpu_turn_is_written_once_the_device_is_idle_and_probed_after(monkeypatch):
    """The inputs, then the poisoned outputs, copied from the judge's (pid 1) set into the
    contender's (pid 2) buffers, the turn's clock started just before; the probe after the
    turn read. A device that never became idle: the turn is taken, counted as stuck, and
    its probe not held against it (the work may be a held rival's)."""
    src = [{"inputs": {"x": [7, 4096, 2 << 20]}, "outputs": {"y": [8, 4096, 2 << 20]}}]
    mine = {"inputs": {"x": [3, 4096, 2 << 20]}, "outputs": {"y": [4, 4096, 2 << 20]}}
    imp = _Importer(idle=True)
    monkeypatch.setattr(devmem, "importer", lambda: imp)
    plan = witness_gpu.DevicePlan(1, src)
    assert plan.put(2, mine, 0) == "" and plan.started is not None
    assert imp.copies == [(2003000, 1007000, 4096), (2004000, 1008000, 4096)]
    assert plan.stuck == 0 and plan.after() == 0.02
    imp.is_idle = False
    assert plan.put(2, mine, 0) == "" and plan.stuck == 1 and plan.after() == 0.0
    # its outputs, as soon as it says "witnessed", into the judge's buffers for that turn
    plan = witness_gpu.DevicePlan(1, src, [{"y": [9, 4096, 2 << 20]}])
    got, ms = plan.early(2, mine, 0)
    assert got == b"" and ms >= 0 and imp.copies[-1] == (1009000, 2004000, 4096)
    assert plan.take(2, mine, 0, got) == ""


def test_the_host_is_asked_what_no_candidate_can_change(monkeypatch):
    """workers.witness_gpu ``host_why``: "" where the host can take GPU witness turns; the
    driver's refusal of exportable memory is the host's (said); its running out of memory
    is not known now (None: another process can bring it about); so is a check that cannot
    start. workers.witness ``host_why`` tries a child for real: here (root) it is reached,
    and a host whose schedstat or children cannot be read is said."""
    assert witness.host_why(gpu=True) == ""
    monkeypatch.setattr(devmem, "self_check", lambda: None)
    assert witness_gpu.host_why() == ""
    refusals = {"cuMemCreate: CUDA_ERROR_NOT_SUPPORTED":
                "the driver: cuMemCreate: CUDA_ERROR_NOT_SUPPORTED",
                "cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY": None,
                "cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY": None}
    for msg, said in refusals.items():
        def refused(msg=msg):
            raise devmem.DevMemError(msg)
        monkeypatch.setattr(devmem, "self_check", refused)
        assert witness_gpu.host_why() == said, msg
        assert witness_gpu.host_why(gpu=False) == ""  # a CPU's: no device memory asked
    monkeypatch.setattr(witness, "host_why", lambda gpu=False: (_ for _ in ()).throw(
        BlockingIOError(11, "Resource temporarily unavailable")))
    assert witness_gpu.host_why() is None
    monkeypatch.undo()
    monkeypatch.setattr(witness, "threads_cpu_ns", lambda pids: {})
    assert witness.host_why(gpu=True) == ("a child's thread CPU time cannot be read "
                                          "(/proc/PID/task/PID/schedstat)")
    monkeypatch.undo()
    monkeypatch.setattr(witness, "_children", lambda: [])
    assert witness.host_why().startswith("a process's children cannot be read")


def test_a_hosts_glitch_does_not_turn_witness_turns_off(monkeypatch):
    """A host is found unable only when ``HOST_TRIES`` checks in a row say so: one check
    that a glitch fails (a thread of the actor ending while its children were read) is
    asked again at once. The children read are the calling thread's, its child's pid
    among them."""
    import subprocess

    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        assert str(child.pid) in witness._children()
    finally:
        child.kill()
        child.wait()
    said = ["a process's children cannot be read", "", "never asked"]
    monkeypatch.setattr(witness, "host_why", lambda gpu=False: said.pop(0))
    assert witness_gpu.host_why(gpu=False) == "" and said == ["never asked"]
    said[:] = ["no ptrace"] * (witness_gpu.HOST_TRIES + 1)
    assert witness_gpu.host_why(gpu=False) == "no ptrace" and said == ["no ptrace"]
