"""Issue 13.2: typed records across the driver -> device actor -> sandbox boundary
(workers.records): the Status enum keeps the stored strings, outcomes keep what the harness
said, and the tuning record is exactly the ``candidates`` table's columns."""

from __future__ import annotations

import dataclasses
import json
import pickle

from kopt.store import SCHEMAS
from workers.records import RunJob, RunOutcome, Status, TuningRecord


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
    """Every column of ``candidates`` is a field of the record; the four figures the table
    has no column for are named (the row has carried them, unstored, since before)."""
    names = {f.name for f in dataclasses.fields(TuningRecord)}
    assert names - set(TuningRecord.NOT_STORED) == set(SCHEMAS["candidates"].names)
    assert set(TuningRecord.NOT_STORED) <= names
