"""Typed records across the driver -> device actor -> sandbox boundary
(workers.records): the Status enum keeps the stored strings, outcomes keep what the harness
said, and the tuning record is exactly the ``candidates`` table's columns."""

from __future__ import annotations

import dataclasses
import json
import pickle

from kopt.store.files import SCHEMAS
from workers.records import RunJob, RunOutcome, TuningRecord
from workers.status import Status


def test_status_values_are_the_stored_strings():
    assert Status.OK == "ok" and Status("wrong_result") is Status.WRONG_RESULT
    assert f"{Status.LOST}: gone" == "lost: gone" and str(Status.TIMEOUT) == "timeout"
    assert json.dumps({"status": Status.CRASHED}) == '{"status": "crashed"}'
    assert pickle.loads(pickle.dumps(Status.LEAKED)) is Status.LEAKED


def test_an_outcome_keeps_every_figure_and_what_it_does_not_know():
    o = RunOutcome.from_dict({"status": "too_slow", "error": "slow", "median_ms": 2.5,
                              "samples_ms": [2.5], "notes": ["n"], "seen_ms": [1.0]})
    assert (o.status, o.error, o.median_ms, o.samples_ms) == (Status.TOO_SLOW, "slow", 2.5,
                                                              [2.5])
    assert o.extra == {"notes": ["n"], "seen_ms": [1.0]}
    assert RunOutcome.from_dict({"status": "no such"}).status is Status.ERROR
    assert RunOutcome.from_dict({}).status is Status.ERROR


def test_a_run_job_is_the_harness_job():
    common = {"reference": "ref.py", "timing": {"timeout_s": 30.0, "min_samples": 20}}
    j = RunJob("k1", "b1", {"N": 8}, common)
    assert j.payload() == {**common, "build_id": "b1", "job_key": "k1", "dims": {"N": 8}}
    screen = dataclasses.replace(j, timing={"timeout_s": 5.0}, artifact="/c/b1.so")
    assert screen.payload()["timing"] == {"timeout_s": 5.0} and screen.timeout_s == 5.0
    assert screen.payload()["artifact"] == "/c/b1.so" and j.timeout_s == 30.0


def test_the_tuning_record_is_the_candidates_table():
    """Every field of the record is a column of ``candidates`` and the reverse: the
    measurement guards' figures (input sets, full/escaped time, leaked bytes) and NVML's
    power are stored (they were computed but dropped before: no column)."""
    names = [f.name for f in dataclasses.fields(TuningRecord)]
    assert sorted(names) == sorted(SCHEMAS["candidates"].names)
    for col in ("input_sets", "full_ms", "escaped_ms", "leaked_bytes", "power_w"):
        assert col in SCHEMAS["candidates"].names


def test_the_guards_figures_reach_the_store(tmp_path):
    """A leaked and an escaped candidate's figures are queryable (they were dropped before)."""
    from kopt.store.database import Database
    from kopt.store.files import write_table

    rows = [{"run_id": "r", "sweep": "s", "job_key": "a", "status": "leaked",
             "leaked_bytes": 1 << 30, "input_sets": 2},
            {"run_id": "r", "sweep": "s", "job_key": "b", "status": "escaped",
             "full_ms": 0.865, "escaped_ms": 0.84, "power_w": 512.5, "input_sets": 2}]
    write_table(tmp_path, "candidates", "s", "r", rows)
    cols, got = Database(tmp_path).query(
        "select job_key, status, input_sets, full_ms, escaped_ms, leaked_bytes, power_w "
        "from candidates order by job_key")
    assert got == [("a", "leaked", 2, None, None, 1 << 30, None),
                   ("b", "escaped", 2, 0.865, 0.84, None, 512.5)]
