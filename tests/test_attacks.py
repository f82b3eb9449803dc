"""Candidates that got past the guards of issue 11 (found by attacking the harness as a
code-generating agent would, on the CPU backend): each was `ok` and named faster than the
honest kernel before its fix. Attacks that cannot be stopped in-process are listed in
workers/harness.py's "What is not caught" instead."""

import pytest
from test_faults import PACK, TIMING, artifact, job

from workers.harness import REPLAY_FACTOR, Harness

ATTACKS = PACK / "attacks.cpp"


def attack_job(tmp_path, mode):
    return job(artifact(tmp_path, ATTACKS, {"MODE": mode}), ATTACKS, PACK / "ref.py",
               {"N": 4096}, {"x": ["N"], "buf": ["N"], "y": ["N"]})


@pytest.fixture(scope="module")
def harness():
    return Harness("cpu")


def test_a_replay_keyed_by_input_content_is_replayed(tmp_path, harness):
    """A hash of 16 input elements picks a stored result: it computed on the two check sets
    only and replayed every timed call, `ok` at 0.073 ms against the honest 0.40 ms.
    Calls on input sets held back until after the samples expose it."""
    res = harness.run(attack_job(tmp_path, 1))
    assert res["status"] == "replayed", res
    assert len(res["unseen_ms"]) == 2 and len(res["seen_ms"]) == 2
    assert min(res["unseen_ms"]) > REPLAY_FACTOR * max(res["median_ms"], *res["seen_ms"])
    assert "never seen" in res["error"] and "compute every call from its inputs" in res["error"]


def test_outputs_computed_on_their_first_read_are_escaped(tmp_path, harness):
    """solve protects its output pages and returns; a SIGSEGV handler computes them when the
    harness first reads them (the verification, outside the timed interval): `ok` at 0.12 ms
    against the honest 0.40 ms."""
    res = harness.run(attack_job(tmp_path, 2))
    assert res["status"] == "escaped", res
    assert res["full_ms"] > 2 * res["median_ms"]
    assert "before its outputs were written" in res["error"]


def test_honest_kernel_is_neither(tmp_path, harness):
    """The checks above cost an honest kernel nothing: same problem, status ok."""
    res = harness.run(job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}),
                          PACK / "faults.cpp", PACK / "ref.py", {"N": 4096},
                          {"x": ["N"], "buf": ["N"], "y": ["N"]}))
    assert res["status"] == "ok", res
    assert len(res["unseen_ms"]) == 2 and res["escaped_ms"] >= 0.0
    assert res["n_samples"] >= TIMING["min_samples"]
