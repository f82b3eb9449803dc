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


def test_honest_kernel_is_neither(tmp_path, harness):
    """An honest kernel is not `replayed`: same problem, status ok, the unseen calls made."""
    res = harness.run(job(artifact(tmp_path, PACK / "faults.cpp", {"MODE": 0}),
                          PACK / "faults.cpp", PACK / "ref.py", {"N": 4096},
                          {"x": ["N"], "buf": ["N"], "y": ["N"]}))
    assert res["status"] == "ok", res
    assert len(res["unseen_ms"]) == 2 and "escaped_ms" not in res  # no CPU probe
    assert res["n_samples"] >= TIMING["min_samples"]


def test_a_tolerance_that_zeros_pass_is_refused(tmp_path):
    """Outputs smaller than atol everywhere: a kernel that wrote zeros was `ok` (0.07 ms,
    max error 4e-7). Refused before anything is built, naming ref.py and the fix."""
    from conftest import write_sweep
    from workers.harness import JobError

    zeros = ('extern "C" void solve(const float* x, float* out, int N) '
             '{ for (int i = 0; i < N; ++i) out[i] = 0.f; }')
    d = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 256}]\n", {
        "k.cpp": zeros, "ref.py": "def reference(x, N):\n    return x * 1e-7\n"})
    j = job("", d / "k.cpp", d / "ref.py", {"N": 256}, {"x": ["N"], "out": ["N"]},
            prepare_only=True)
    with pytest.raises(JobError, match=r"^ref.py: a kernel that writes zeros to 'out' passes "
                       r"the check: every expected value \(\|out\| <= 3.1e-07\) lies within "
                       r"the tolerance \(atol=1e-05, rtol=1e-05\) of 0; lower `tolerance:`"):
        Harness("cpu").run(j)
    d2 = write_sweep(tmp_path / "s2", "kernel: k.cpp\ndims: [{N: 256}]\n", {
        "k.cpp": zeros, "ref.py": "def reference(x, N):\n    return x * 1e-3\n"})
    ok = Harness("cpu").run(job("", d2 / "k.cpp", d2 / "ref.py", {"N": 256},
                                {"x": ["N"], "out": ["N"]}, prepare_only=True))
    assert ok["status"] == "ok"


def test_the_replay_rule_needs_unseen_calls_slower_than_every_sample():
    """Replayed: both unseen calls over 2x the seen ones and over the samples' 90th
    percentile. An honest candidate on a loaded CPU, whose samples already showed calls that
    slow (preemption) often, is not named (it was, under load: an honest kernel `replayed`);
    one stray preempted sample does not hide a replayer."""
    from workers.harness import replayed

    fast = [0.07, 0.071, 0.072, 0.073, 0.07]
    assert replayed(0.071, [0.07, 0.072], [0.40, 0.41], fast)  # the content-keyed replayer
    assert replayed(0.071, [0.07, 0.072], [0.40, 0.41], fast * 4 + [4.08])  # one stray
    assert not replayed(0.071, [0.07, 0.072], [0.40, 0.41], fast + [0.45, 0.5])  # noisy
    assert not replayed(0.071, [0.07, 0.072], [0.40, 0.12], fast)  # one unseen call fast
    assert not replayed(0.071, [0.07, 0.30], [0.40, 0.41], fast)  # a seen call as slow
