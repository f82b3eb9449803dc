"""Witness turns on a GPU (workers.witness_gpu), marked gpu: they run on the GPU host
(docs/verified/) and skip cleanly elsewhere. Each contest is the device actor's, in turns,
of two contenders at the fault pack's GPU size (N = 2^24: an honest call about 1.5 ms)."""

import dataclasses

import pytest

from conftest import FIXTURES
from kopt.core.contract import parse_signature_file
from workers import build as wb
from workers import witness
from workers.device_actor import DeviceActor

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

PACK = FIXTURES / "faultpack"
SAID = f"{witness.MAX_TURNS} witness turns each"
ROUNDS = 8
TIMING = {"warmup_ms": 25, "min_samples": 10, "max_samples": 200, "max_time_ms": 2000,
          "target_rel_error": 0.005, "timeout_s": 10}


def gpu_contender(tmp_path, name, defines, key):
    """A contest job of the fault pack's ref.py at N = 2^24 for tests/fixtures/faultpack/
    ``name`` built as CUDA with ``defines``, and its artifact's bytes."""
    src = PACK / name
    b = wb.BuildJob(f"gw{abs(hash((name, str(sorted(defines.items()))))) % 10**10}", "cuda",
                    src.read_text(), src.stem + ".cu", str(PACK), defines, target="sm_90")
    res, data = wb.build(b, cache=tmp_path)
    assert res.ok, res.error
    sig = [dataclasses.asdict(a) for a in parse_signature_file(PACK / "faults.cu").args]
    return {"signature": sig, "reference": str(PACK / "ref.py"), "dims": {"N": 1 << 24},
            "seed": 3, "args": {"x": ["N"], "buf": ["N"], "y": ["N"]}, "scalars": {},
            "tolerance": {"atol": 1e-5, "rtol": 1e-4}, "timing": TIMING, "job_key": key,
            "build_id": b.build_id}, data


def gpu_contest(tmp_path, name, defines, key):
    """The device actor's contest of faults.cu's honest MODE 0 ("honest") and ``name``
    built with ``defines`` (``key``); its answer."""
    h, art_h = gpu_contender(tmp_path, "faults.cu", {"MODE": 0}, "honest")
    o, art_o = gpu_contender(tmp_path, name, defines, key)
    actor = DeviceActor("cuda")
    try:
        return actor.contest([h, o], ROUNDS, art_h, art_o)
    finally:
        actor.shutdown()


def test_honest_gpu_contenders_pass_their_witness_turns(tmp_path):
    """Two honest kernels: both `ok` after 8 witness turns each, their outputs copied in and
    out of device memory by the device actor, and each witnessed figure (a turn's wall time
    less the judge's) near its median sample."""
    res = gpu_contest(tmp_path, "faults.cu", {"MODE": 0, "GOOD": 1}, "honest2")
    print(res)
    assert res["status"] == "ok" and res["witness"] == SAID, res
    for r in res["results"]:
        assert 0.5 * r["median_ms"] < r["actor_ms"] < 1.5 * r["median_ms"] + 0.1, r


def test_gpu_forgers_are_caught_by_their_witness_turns(tmp_path):
    """tests/fixtures/faultpack/turnforge.cpp built as CUDA. Red-team round 17's forger
    (MODE 1: every round's turn taken, samples and answer written by its own code, no work)
    was `ok` at 36x on a GPU, which had no witness turns: it takes none (`suspect`); one
    that takes them with the harness's own code and computes nothing is `wrong_result`;
    one that computes honestly in them but claims 5 us samples is `suspect` by the turns'
    wall time, in a second take too. The honest rival is not named."""
    out = {}
    for name, defines in {"round17": {"MODE": 1}, "taken": {"MODE": 4, "WRONG": 1},
                          "computed": {"MODE": 4, "WRONG": 0}}.items():
        res = gpu_contest(tmp_path, "turnforge.cpp", defines, "forger")
        print(name, res)
        assert res.get("failed") == ["forger"], (name, res)
        out[name] = (res["failed_status"]["forger"], res["error"], res["witness"])
    assert out["round17"][0] == "suspect" and out["round17"][1].startswith(
        "forger: it took 0 witness turns (0 stray) of the 8 asked for"), out
    assert out["taken"][0] == "wrong_result" and " calls on fresh input sets, written into " \
        "its memory and its outputs read back by the device actor, were wrong: " in \
        out["taken"][1], out
    assert out["round17"][2] == out["taken"][2] == SAID, out
    assert out["computed"][0] == "suspect" and out["computed"][1].startswith(
        "forger: its calls on fresh inputs took at least "), out
    assert out["computed"][2] == (f"{SAID}; taken again, forger having been suspect by the "
                                  "GPU bound in the first take"), out


def test_a_gpu_ref_py_that_starts_a_process_keeps_its_harness_and_names_no_one_escaped(
        tmp_path):
    """A ref.py whose import starts a lasting process (torch.compile's worker pool), on a
    GPU device: the jail's ``/proc`` is read-only there too but for the harness's own
    (workers.jail ``own_proc``: CUDA's start names its threads there), so the process is the
    sandbox's own, as on a CPU device. Before, on a GPU, it ended the harness after every
    job and made both honest contenders of a contest `escaped`."""
    ref = tmp_path / "wref" / "ref.py"
    ref.parent.mkdir()
    (ref.parent / "coef.h").write_bytes((PACK / "coef.h").read_bytes())  # ref.py reads it
    ref.write_text((PACK / "ref.py").read_text() + (
        "\nimport subprocess as _sp\nimport sys as _sys\n"
        "_WORKER = _sp.Popen([_sys.executable, '-c', 'import time; time.sleep(600)'])\n"))
    (h, art_h), (o, art_o) = (gpu_contender(tmp_path, "faults.cu", d, k) for d, k in (
        ({"MODE": 0}, "honest"), ({"MODE": 0, "GOOD": 1}, "honest2")))
    h, o = {**h, "reference": str(ref)}, {**o, "reference": str(ref)}
    actor = DeviceActor("cuda", spares=0)
    try:
        res = actor.contest([h, o], ROUNDS, art_h, art_o)
        box = actor.sandbox
        before = box.restarts  # a GPU contest ends the device's own harness first (fresh)
        outs = [box.run_retrying({**h, "artifact": str(wb.ensure_artifact(
            h["build_id"], art_h, cache=tmp_path)), "job_key": f"k{i}"}, 60) for i in range(2)]
        restarts, own = box.restarts - before, box.infra - {box.host_pid or 0}
    finally:
        actor.shutdown()
    assert res["status"] == "ok" and not res.get("failed"), res
    assert [x["status"] for x in outs] == ["ok", "ok"], outs
    assert restarts == 0 and own, (restarts, own)  # ref.py's process: the sandbox's own
