"""A GPU's witness turns (workers.witness_gpu, workers.devmem): the judgement of their
figures and the failures said in one line, on any machine (the turns themselves run on a
GPU: tests/test_gpu_witness.py)."""

import os

import pytest

from workers import devmem, witness, witness_gpu
from workers.witness import Null, Record

OK = {"status": "ok", "error": "", "results": [{"median_ms": 0.5}]}
NULL = Null(main_cpu_ms=0.05, wall_ms=0.08, read_ms=0.02, put_ms=0.03)


def _taking(records, median=0.5):
    plan = witness_gpu.DevicePlan(0, [], null=NULL)
    return witness.Taking(plan, list(records), median_ms=median)


def _turn(wall, read=0.02, put=0.03):
    return Record(0.5, 0.1, None, wall_ms=wall, read_ms=read, put_ms=put)


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


def test_a_gpu_busy_while_its_contender_was_held_is_suspect():
    """A turn whose input set took BUSY_MS longer to write than the judge's: a kernel of the
    contender's still ran on the device while its process was stopped."""
    ok = [""] * witness.MAX_TURNS
    fine = [_turn(0.6, put=0.03 + witness_gpu.BUSY_MS)] * 8
    assert witness.judged(OK, _taking(fine), ok)["status"] == "ok"
    busy = [_turn(0.6)] * 7 + [_turn(0.6, put=2.2)]
    out = witness.judged(OK, _taking(busy), ok)
    assert out["status"] == "suspect" and out[witness.BOUND] is True, out
    assert out["error"].startswith(
        "writing a witness turn's inputs while its sandbox was held took 2.2 ms, the "
        "judge's 0.03 ms: the GPU was busy meanwhile (a kernel of its own left running)"), out


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
    # a CPU's span (address, bytes) is not a GPU's
    cpu = {"inputs": {"x": [3, 4096]}, "outputs": {"y": [4, 4096]}}
    assert plan.put(os.getpid(), cpu, 0).startswith("its harness named other inputs than")
    assert plan.put(os.getpid(), src[0], 1) == "a witness turn (2) beyond the 1 asked for"
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
