"""Honest CPU kernels (tests/fixtures/honest: memory-bound, compute-bound, value-dependent)
through the sandboxed harness, as kopt runs candidates: every one is `ok`. A guard that flags
honest work (`replayed`, `escaped`, `too_slow`, `suspect`) is as wrong as one that lets an
attack through, and CI runs this beside the rest of the suite, under its load.

The fixture's four OpenMP kernels (MODE 16-19, two threads) are not here: beside CPU hogs
the earlier replay protocol named one of them `replayed` in 4 of 256 jobs (2026-12-03, this
project's 2-core machine); with the calls on new sets mixed among the samples, 0 of 256 in
the same bench, which bounds the rate under about 1.2 %, not at 0.
``bench/honest_under_load.py`` counts it; workers/harness.py lists it."""

import pytest
from test_faults import TIMING, artifact, job

from conftest import FIXTURES
from workers.sandbox import Sandbox

HONEST = FIXTURES / "honest"
# MODE -> N: memory-bound kernels over 4 MB arrays (past the L2), compute-bound ones over
# 64k elements; the OpenMP ones (bench/honest_under_load.py) as their one-thread twins
ALL_SIZES = {**{m: 1 << 20 for m in (0, 1, 2, 3, 4, 5, 16, 19)},
             **{m: 1 << 16 for m in (6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 18)}}
KINDS = {"memory-bound": range(0, 6), "compute-bound": range(6, 12),
         "value-dependent": range(12, 16)}
SIZES = {m: ALL_SIZES[m] for r in KINDS.values() for m in r}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Mode -> the outcome of one job per kernel, all in one sandboxed harness."""
    tmp = tmp_path_factory.mktemp("honest")
    src = HONEST / "honest.cpp"
    art = artifact(tmp, src, {})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "2"})
    sb.start()
    try:
        return {m: sb.run(job(art, src, HONEST / "ref.py", {"N": n, "MODE": m}, {
            "x": ["N"], "y": ["N"]}, tolerance={"atol": 1e-5, "rtol": 1e-4}, job_key=f"m{m}"),
            timeout_s=120) for m, n in sorted(SIZES.items())}
    finally:
        sb.close()


@pytest.mark.parametrize("kind", list(KINDS))
def test_honest_kernels_are_ok(results, kind):
    bad = {m: (results[m]["status"], results[m].get("error", "")[:300])
           for m in KINDS[kind] if results[m]["status"] != "ok"}
    assert bad == {}
    for m in KINDS[kind]:
        r = results[m]
        assert r["n_samples"] >= TIMING["min_samples"] and r["median_ms"] > 0
        assert r["unseen_ms"]  # a never-seen set was called on, not skipped


def test_the_suite_holds_sixteen_kernels_of_three_kinds():
    assert sorted(SIZES) == list(range(16)) and sorted(ALL_SIZES) == list(range(20))


@pytest.mark.parametrize("omp_threads", ["1", "2"])
def test_honest_openmp_kernels_leave_no_thread_that_ends_their_harness(tmp_path, omp_threads):
    """The fixture's OpenMP kernels (MODE 16-19, ``num_threads(2)``) one after another in one
    harness: their team's thread outlives each call, and the sandbox ends a harness whose
    process runs a thread it did not run before any candidate code loaded
    (workers.sandbox ``Sandbox._threads_left``). The harness starts the host libgomp's team
    on every CPU it may use first (workers.harness ``_warm_teams``), so no honest OpenMP
    job ends it, under the CPU device's default ``OMP_NUM_THREADS=1`` (a team of two is
    then the candidate's own) or 2. Without it, under 1 each first job ended its harness."""
    from workers.sandbox import THREADS_LEFT

    src = HONEST / "honest.cpp"
    art = artifact(tmp_path, src, {})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": omp_threads})
    try:
        said = [sb.run(job(art, src, HONEST / "ref.py", {"N": 1 << 16, "MODE": m}, {
            "x": ["N"], "y": ["N"]}, tolerance={"atol": 1e-5, "rtol": 1e-4}, job_key=f"m{m}"),
            timeout_s=120).get("error") or "" for m in (16, 17, 18, 19, 16)]
        restarts = sb.restarts
    finally:
        sb.close()
    assert [THREADS_LEFT in e for e in said] == [False] * 5, said
    assert restarts == 0, (restarts, said)
