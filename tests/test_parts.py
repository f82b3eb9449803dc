"""Where a timed job's wall time goes (workers.harness ``Harness.lap``): the breakdown
bench/check_cost.py reports beside each job's wall."""

from __future__ import annotations

import time
from pathlib import Path

from test_attacks import honest_job

from workers.harness import UNGUARDED, Harness, _run_one


def test_a_jobs_answer_says_where_its_wall_time_went(tmp_path):
    """A guarded job's answer has ``parts_ms``: prepare, check, time (its warm-up within),
    the probe and the harness's own work, each a real duration that together fit in the
    job's wall; an unguarded one (bench/check_cost.py's) has no probe."""
    h = Harness("cpu")
    t0 = time.perf_counter()
    res = _run_one(h, honest_job(tmp_path))
    wall_ms = (time.perf_counter() - t0) * 1e3
    assert res["status"] == "ok", res
    parts = res["parts_ms"]
    assert {"prepare", "check", "warm_up", "time", "probe", "own"} <= set(parts), parts
    assert all(v > 0 for v in parts.values()), parts
    assert parts["warm_up"] < parts["time"]
    assert sum(parts[k] for k in ("prepare", "check", "time", "probe")) <= wall_ms
    plain = _run_one(h, {**honest_job(tmp_path), UNGUARDED: True})
    assert plain["status"] == "ok" and "probe" not in plain["parts_ms"], plain["parts_ms"]
    assert _run_one(h, {**honest_job(tmp_path), "witness_of": "nothing"}).get(
        "parts_ms") is None  # a special job: none


def test_a_contests_answer_says_where_its_wall_time_went(tmp_path):
    """The device actor's contest of two honest contenders answers ``parts_ms`` (its
    harness ended, the judge's sets and null turns, the contenders in turns with the
    slowest one's own parts, the judge's check) and ``takes``; the loop's phase detail
    says them in seconds (kopt.loop.contests ``parts_text``)."""
    from test_faults import PACK
    from test_turns import ROUNDS, contender

    from kopt.loop.contests import parts_text
    from kopt.util.words import counted
    from workers.device_actor import DeviceActor

    h, art_h = contender(tmp_path, PACK / "faults.cpp", {"MODE": 0}, "honest")
    o, art_o = contender(tmp_path / "o", PACK / "faults.cpp", {"MODE": 0}, "other")
    actor = DeviceActor("cpu")
    t0 = time.perf_counter()
    try:
        res = actor.contest([h, o], ROUNDS, art_h, art_o)
    finally:
        actor.shutdown()
    wall_ms = (time.perf_counter() - t0) * 1e3
    assert res["status"] == "ok", res
    parts, takes = res["parts_ms"], res["takes"]
    assert takes >= 1
    assert {"fresh", "judge", "turns", "check", "contender_prepare", "contender_check",
            "contender_warm_up", "contender_rounds", "contender_witness"} <= set(parts), parts
    assert parts["judge"] > 0 and parts["turns"] > parts["contender_rounds"] > 0, parts
    assert sum(parts[k] for k in ("fresh", "judge", "turns", "check")) <= wall_ms
    said = parts_text(res)
    assert said.startswith(f"; {counted(takes, 'take')}: "), said
    for k, v in parts.items():  # each part of 0.05 s or more, in seconds; none below
        shown = f"{k.removeprefix('contender_')} {v / 1e3:.1f} s"
        assert (shown in said) == (v >= 50), (k, v, said)


def test_a_contests_parts_are_said_in_seconds():
    """kopt.loop.contests ``parts_text``: the device actor's parts first, then the slowest
    contender's; parts under 0.05 s left out; nothing for an answer without parts."""
    from kopt.loop.contests import parts_text

    res = {"takes": 2, "parts_ms": {"fresh": 3.0, "judge": 4100.0, "turns": 20349.0,
                                    "contender_prepare": 6200.0, "contender_rounds": 9000.0,
                                    "contender_wait": 12.0, "check": 800.0}}
    assert parts_text(res) == ("; 2 takes: judge 4.1 s, turns 20.3 s, check 0.8 s, the "
                               "slowest contender's prepare 6.2 s, rounds 9.0 s")
    assert parts_text({"status": "error", "error": "lost"}) == ""
    assert parts_text({"takes": 0, "parts_ms": {}}) == ""


def test_a_contenders_forged_parts_reach_no_text():
    """A contender's harness shares its process with candidate code, which may answer any
    ``parts_ms``: only the parts a harness has, each a finite figure from 0 to an hour, are
    counted (its names reach the phases table's text); the slowest is the one whose parts
    sum the most."""
    from workers.device_actor import DeviceActor

    actor = DeviceActor("cpu")
    try:
        actor._slowest([  # each filter decides: without it another dict sums the most
            {"rounds": 10.0, "prepare\\nkopt: candidate x is the named best": 9e9,
             "witness": float("nan"), "wait": 4e6},
            {"rounds": 20.0, "check": 3},
            {"rounds": 1.0, "named best\\nkopt: x": 1000.0},
            {"rounds": 19.0, "check": True, "wait": True, "own": True, "witness": True,
             "draws": True},
            {"rounds": 22.0, "own": -1000.0, "wait": 2.0},
            "not a dict"])
        assert actor.parts == {"takes": 0, "contender_rounds": 22.0, "contender_wait": 2.0}
    finally:
        actor.shutdown()


def test_an_outside_clock_blocks_answer_says_where_its_wall_time_went(tmp_path):
    """The device actor's clock block (workers.device_actor ``clock``) answers where its
    wall went: its own parts (``actor_parts_ms``: the harness taken or started, the block
    awaited) and its harness's (``parts_ms``: prepare, draws, block, check), for a
    contender's calls and for the preparations alone in the second harness; the loop's
    clock phase says them in seconds (kopt.loop.contests ``clock_parts_text``)."""
    from test_prestart import FIXTURES, artifact, job

    from kopt.loop.contests import add_clock_parts, clock_parts_text
    from workers.device_actor import DeviceActor

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    art = Path(artifact(tmp_path, src, 0))
    j = {**job(str(art), src, ref), "build_id": art.parent.name}
    dev = DeviceActor("cpu")
    parts: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        calls = dev.clock(j, 20, art.read_bytes())
        alone = dev.clock(j, 20, art.read_bytes(), loads_only=True)
    finally:
        dev.shutdown()
    wall_ms = (time.perf_counter() - t0) * 1e3
    for res, kind in ((calls, "calls"), (alone, "alone")):
        assert res["status"] == "ok", res
        assert set(res["actor_parts_ms"]) == {"harness", "run"}, res
        own = {k: res["parts_ms"][k] for k in ("prepare", "draws", "block", "check")}
        assert all(v > 0 for v in own.values()), res
        assert sum(own.values()) <= res["actor_parts_ms"]["run"]
        add_clock_parts(parts, res, kind)
    assert sum(parts.values()) - parts["calls run"] - parts["alone run"] <= wall_ms
    assert set(parts) == {f"{kind} {k}" for kind in ("calls", "alone") for k in (
        "harness", "run", "prepare", "draws", "block", "check")}, parts
    said = clock_parts_text(parts)
    segs = dict(seg.split(": ", 1) for seg in said.split("; ")[1:])
    assert set(segs) == {k.split(" ")[0] for k, v in parts.items() if v >= 50}, said
    for k, v in parts.items():  # each part of 0.05 s or more, in seconds; none below
        kind, name = k.split(" ", 1)
        assert (f"{name} {v / 1e3:.1f} s" in segs.get(kind, "")) == (v >= 50), (k, v, said)


def test_a_clock_blocks_forged_parts_reach_no_text():
    """The calls' harness shares its process with candidate code, which may answer any
    ``parts_ms``: only the parts a clock block has, each a finite figure from 0 to an hour,
    are added (kopt.loop.contests ``add_clock_parts``); the text says each kind's in
    seconds, none under 0.05 s, nothing for none."""
    from kopt.loop.contests import add_clock_parts, clock_parts_text

    parts: dict[str, float] = {}
    add_clock_parts(parts, {"actor_parts_ms": {"harness": 1800.0, "run": 600.0, "x": 5.0},
                            "parts_ms": {"prepare": 400.0, "draws": float("nan"),
                                         "block": True, "check": -3.0, "wait": 70.0,
                                         "prepare\nkopt: x is best": 9e9}}, "calls")
    add_clock_parts(parts, {"parts_ms": {"block": 4e6, "check": 20.0, "draws": 149.0}},
                    "alone")
    add_clock_parts(parts, "not a dict", "calls")
    add_clock_parts(parts, {"actor_parts_ms": {"harness": 200.0}}, "calls")
    assert parts == {"calls harness": 2000.0, "calls run": 600.0, "calls prepare": 400.0,
                     "alone check": 20.0, "alone draws": 149.0}
    assert clock_parts_text(parts) == ("; calls: harness 2.0 s, run 0.6 s, prepare 0.4 s; "
                                       "alone: draws 0.1 s")
    assert clock_parts_text({}) == "" and clock_parts_text({"calls run": 49.0}) == ""
