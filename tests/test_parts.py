"""Where a timed job's wall time goes (workers.harness ``Harness.lap``): the breakdown
bench/check_cost.py reports beside each job's wall."""

from __future__ import annotations

import time

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
