"""Iteration 1's builds made before Ray (kopt.prebuild) and handed over to the Ray builder
once it is up (issue 14.2)."""

import time
import uuid
from pathlib import Path

import pytest

from kopt.builder import RayBuilder
from kopt.phases import PhaseRecorder
from kopt.prebuild import PreBuilder, ahead_workers
from workers import build as wb

GOOD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }'  # noqa: E501
BAD = 'extern "C" void solve(const float* x, float* y, int N) { y[0] = undeclared; }'


def _job(tmp_path, text, name):
    src = tmp_path / f"{name}.cpp"
    src.write_text(text)
    return wb.BuildJob(f"pb-{name}-{uuid.uuid4().hex[:10]}", "cpu", text, src.name,
                       str(tmp_path), {})


@pytest.fixture
def made(tmp_path, monkeypatch):
    """A good and a bad build, made by a PreBuilder into a fresh build cache and waited
    for (both finished: none left to cancel)."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    good, bad = _job(tmp_path, GOOD, "good"), _job(tmp_path, BAD, "bad")
    phases = PhaseRecorder()
    pre = PreBuilder([good, bad], phases, workers=2)
    deadline = time.monotonic() + 240
    while len(pre.results) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return pre, phases, good, bad


def test_builds_before_ray_are_results_of_the_run_with_their_artifacts_cached(made):
    pre, phases, good, bad = made
    got = pre.finish()
    assert set(got) == {good.build_id, bad.build_id}
    assert got[good.build_id].ok and not got[good.build_id].cached
    assert got[good.build_id].compile_s > 0
    assert not got[bad.build_id].ok and "undeclared" in got[bad.build_id].error
    hit = wb.cached(good)
    assert hit is not None and len(hit[1]) > 0  # the artifact waits in the build cache
    assert wb.cached(bad) is None
    assert pre.finish() == got  # idempotent
    # each build's row is placed where it finished, not where the driver took it over
    assert set(phases._built) == {good.build_id, bad.build_id}


def test_the_ray_builder_hands_out_the_builds_made_before_ray(made, ray_local):
    """submit() gives a build made before Ray as this run's result (not a cache hit; its
    artifact from the cache, a compile error as the error), without a Ray task; a build
    not made before Ray still becomes a task."""
    pre, phases, good, bad = made
    builder = RayBuilder(phases)
    builder.ahead = pre
    f_good = builder.submit(good)
    assert f_good.ref is None and f_good.result.ok and not f_good.result.cached
    assert builder.artifacts[good.build_id] == wb.cached(good)[1]
    assert builder.built_ok(good.build_id) and builder.ahead is None
    f_bad = builder.submit(bad)
    assert f_bad.ref is None and not f_bad.result.ok and "undeclared" in f_bad.result.error
    assert not builder.built_ok(bad.build_id)
    other = _job(Path(good.source_dir), GOOD.replace("x[i]", "2 * x[i]"), "other")
    f_other = builder.submit(other)
    assert f_other.ref is not None  # a Ray task
    res = None
    while res is None:
        res = builder.collect(f_other)
    assert res.ok and not res.cached


def test_ahead_workers_leave_cpus_for_ray_and_the_harness():
    assert ahead_workers(16) == 13
    assert ahead_workers(2) == 1 and ahead_workers(1) == 1
