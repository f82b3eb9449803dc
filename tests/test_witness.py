"""Witness turns (workers.witness): a contender's outputs checked, and its claimed time
bounded, from outside its process, on a CPU device."""

import ctypes
import os

import pytest
from test_attacks import attack_job
from test_clock import _device
from test_faults import PACK, artifact, job
from test_honest import ALL_SIZES, HONEST
from test_turns import against_honest

from workers import witness
from workers.device_actor import DeviceActor
from workers.witness import Record

ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}


def test_bytes_are_copied_between_processes_and_an_unmapped_address_is_said():
    src = ctypes.create_string_buffer(b"witness turn bytes", 32)
    dst = ctypes.create_string_buffer(32)
    me = os.getpid()
    assert witness.vm_copy(me, ctypes.addressof(src), me, ctypes.addressof(dst), 18) == ""
    assert dst.raw[:18] == b"witness turn bytes"
    why = witness.vm_copy(me, 8, me, ctypes.addressof(dst), 18)
    assert why.startswith(f"could not read 18 bytes at 0x8 of process {me} ("), why


def test_the_buffers_a_harness_names_must_be_its_problems():
    src = [{"inputs": {"x": [100, 16]}, "outputs": {"y": [200, 16]}}]
    plan = witness.Plan(os.getpid(), src)
    other = {"inputs": {"x": [5, 16], "z": [6, 4]}, "outputs": {"y": [7, 16]}}
    assert plan.put(os.getpid(), other, 0).startswith("its harness named other inputs than")
    small = {"inputs": {"x": [5, 8]}, "outputs": {"y": [7, 16]}}
    assert plan.put(os.getpid(), small, 0).startswith("its harness named other inputs than")
    assert plan.put(os.getpid(), src[0], 1) == "a witness turn (2) beyond the 1 asked for"


def _ok(median):
    return {"status": "ok", "error": "", "results": [{"median_ms": median}]}


def test_a_contender_is_held_to_the_cpu_its_witness_calls_used():
    """The least main-thread CPU of its turns, less the judge's null turn, against its
    median: at most CPU_FACTOR x median + CPU_MARGIN_MS; the cgroup's over its CPUs with
    SPIN_MARGIN_MS more."""
    null = (0.05, 0.08)
    turns = [Record(0.2, 0.05 + 0.25, 0.4), Record(0.2, 0.05 + 0.29, 0.4)]
    limit = witness.CPU_FACTOR * 0.1 + witness.CPU_MARGIN_MS  # 0.25 ms
    assert witness.judged(_ok(0.1), turns, 0, ["", ""], null, 2)["status"] == "ok"
    out = witness.judged(_ok(0.1 - 0.01), turns, 0, ["", ""], null, 2)
    assert out["status"] == "suspect" and out["error"].startswith(
        "its calls on fresh inputs used at least 0.25 ms of CPU on the thread that called "
        "solve, its samples' median is 0.09 ms"), out
    assert limit == pytest.approx(0.25)
    # work on threads the main one waits for: the cgroup's CPU over 2 CPUs
    threads = [Record(0.2, 0.06, 0.08 + 2 * (0.25 + witness.SPIN_MARGIN_MS) + 0.02)] * 2
    out = witness.judged(_ok(0.1), threads, 0, ["", ""], null, 2)
    assert out["status"] == "suspect" and "per CPU it may use (2)" in out["error"], out
    assert witness.judged(_ok(0.1), threads, 0, ["", ""], null, 4)["status"] == "ok"


def test_missing_stray_or_unreadable_witness_turns_are_suspect_and_wrong_outputs_wrong():
    null, one = (0.05, None), Record(0.1, 0.1, None)
    said = {n: witness.judged(_ok(0.1), recs, stray, verdicts, null, 2) for n, (
        recs, stray, verdicts) in {
            "missing": ([one], 0, ["", ""]), "stray": ([one, one], 1, ["", ""]),
            "unreadable": ([one, Record(0.1, 0.1, None, "could not read")], 0, ["", ""]),
            "wrong": ([one, one], 0, ["", "y: 3 of 4 elements differ"])}.items()}
    assert said["missing"]["error"].startswith("it took 1 witness turns (0 stray) of the 2")
    assert said["stray"]["error"].startswith("it took 2 witness turns (1 stray) of the 2")
    assert said["unreadable"]["error"].startswith("its witness turn's buffers: could not read")
    assert said["wrong"] == {"status": "wrong_result", "error": (
        "1 of 2 calls on fresh input sets, written into its memory and its outputs read back "
        "by the device actor, were wrong: y: 3 of 4 elements differ")}
    assert {n: s["status"] for n, s in said.items()} == {
        "missing": "suspect", "stray": "suspect", "unreadable": "suspect",
        "wrong": "wrong_result"}
    failed = {"status": "crashed", "error": "x"}
    assert witness.judged(failed, [], 0, ["", ""], null, 2) is failed


def test_a_forger_that_takes_every_turn_and_computes_nothing_is_caught(tmp_path):
    """Red-team round 17's forger (tests/fixtures/faultpack/turnforge.cpp MODE 1: every
    round's turn taken, the time it claims spent, all-zero outputs) won its contest at 36x:
    it answers without its witness turns (suspect). Taking them with the harness's own code
    (MODE 4), its outputs are wrong (WRONG=1) or, computed, its claimed samples are far
    below the CPU its calls used (WRONG=0). The honest rival is not named."""
    out = {}
    for name, defines in {"round17": {"MODE": 1}, "taken": {"MODE": 4, "WRONG": 1},
                          "computed": {"MODE": 4, "WRONG": 0}}.items():
        res = against_honest(tmp_path, "turnforge.cpp", defines, "forger")
        assert res["failed"] == ["forger"] and res["witness"] == "4 witness turns each", res
        out[name] = (res["failed_status"]["forger"], res["error"])
    assert out["round17"][0] == "suspect" and out["round17"][1].startswith(
        "forger: it took 0 witness turns (0 stray) of the 4 asked for"), out
    assert out["taken"][0] == "wrong_result" and "4 of 4 calls on fresh input sets" in \
        out["taken"][1], out
    assert out["computed"][0] == "suspect" and out["computed"][1].startswith(
        "forger: its calls on fresh inputs used at least"), out


ATTACKERS = {  # the outside clock's (tests/test_clock.py): patched clocks, replays, skips
    "m10": lambda tmp: attack_job(tmp, 10),
    "m11": lambda tmp: attack_job(tmp, 11),
    "m13": lambda tmp: attack_job(tmp, 13),
    "cycle_replay": lambda tmp: _pack(tmp, "cycle_replay.cpp", {}),
    "hold_replay": lambda tmp: _pack(tmp, "hold_replay.cpp", {}),
    "scaled_skip": lambda tmp: _pack(tmp, "scaled_skip.cpp", {"SKIP": 1}),
    "forge_clocked": lambda tmp: _pack(tmp, "forge_clocked.cpp", {}),
}


def _pack(tmp, name, defines):
    src = PACK / name
    return job(artifact(tmp, src, defines), src, PACK / "ref.py", {"N": 4096}, ARGS)


@pytest.mark.parametrize("name", list(ATTACKERS))
def test_the_outside_clocks_attackers_are_caught_in_their_contest(tmp_path, name):
    """Each contender the closing's outside clock is tested against (a clock patched to
    1/100, replays that tell its block apart, skipped calls, a forged "clocked") is judged
    alone in a contest, as the loop's closing judges it: its witness calls used far more CPU
    than its samples claim, so it is `suspect` before any clock block."""
    runner, j, data, _ = _device({**ATTACKERS[name](tmp_path), "job_key": name})
    try:
        con = runner.call(0, "contest", [j], 12, data)
    finally:
        runner.close()
    assert con["status"] == "suspect" and con["error"].startswith(
        f"{name}: its calls on fresh inputs used at least "), con


@pytest.fixture(scope="module")
def honest_contests(tmp_path_factory):
    """Mode -> the contest answer of each honest kernel of tests/fixtures/honest (the
    OpenMP ones, MODE 16-19, on two threads) judged alone, witness turns included, on one
    device."""
    tmp = tmp_path_factory.mktemp("honest")
    src = HONEST / "honest.cpp"
    art = artifact(tmp, src, {})
    actor = DeviceActor("cpu", threads=2)
    try:
        out = {}
        for m, n in sorted(ALL_SIZES.items()):
            j = job(art, src, HONEST / "ref.py", {"N": n, "MODE": m}, {"x": ["N"], "y": ["N"]},
                    tolerance={"atol": 1e-5, "rtol": 1e-4}, job_key=f"m{m}")
            j = {**j, "build_id": os.path.basename(os.path.dirname(art))}
            out[m] = actor.contest([j], 8, open(art, "rb").read())
        return out
    finally:
        actor.shutdown()


def test_honest_kernels_pass_their_witness_turns(honest_contests):
    """All 20 honest kernels, OpenMP ones included, `ok` in a contest with witness turns
    (run beside the rest of the suite in CI, under its load)."""
    bad = {m: (r["status"], r.get("error", "")[:300]) for m, r in honest_contests.items()
           if r["status"] != "ok" or r.get("witness") != "4 witness turns each"}
    assert bad == {} and len(honest_contests) == 20
