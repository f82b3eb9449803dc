# ruff: noqa
"""Red-team 53, attack C (commit 23316a3): a thread left in the harness by redteam53/
forger.cpp forges "prepared" messages (FIRST=1: {"first": True}; FIRST=0: plain) during the
NEXT candidate's job, in both sandbox counting modes (cgroup, PID namespace), with and
without a forked child. The next honest job (run_retrying, as the device actor runs jobs)
must end `ok`, its harness fresh; a time_reference job (Sandbox.run, no retry) is shown too.
Run: cd /tmp/rt53 && PYTHONPATH=/tmp/rt53 timeout 600 python -m pytest -q -s -p no:cacheprovider \
    redteam53/test_forged_first.py"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_faults import PACK, artifact, job  # noqa: E402
from test_turns import ARGS, _counted_by  # noqa: E402

from workers import hold  # noqa: E402
from workers.sandbox import Sandbox  # noqa: E402

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("counted", ["cgroup", "namespace"])
@pytest.mark.parametrize("first,child", [(1, 0), (1, 1), (0, 0)])
def test_a_leftover_forger_cannot_frame_the_next_job(tmp_path, monkeypatch, counted, first,
                                                     child):
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    _counted_by(counted, monkeypatch)
    src, honest = HERE / "forger.cpp", PACK / "faults.cpp"
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        att = box.run_retrying(job(artifact(tmp_path, src, {"FIRST": first, "CHILD": child}),
                                   src, PACK / "ref.py", {"N": 4096}, ARGS), 30)
        left = box.end_leftovers()
        infra_before = set(box.infra)
        time.sleep(0.5)  # the forger's thread is idle long enough to start forging
        restarts = box.restarts
        t0 = time.perf_counter()
        nxt = box.run_retrying(job(artifact(tmp_path, honest, {"MODE": 0}), honest,
                                   PACK / "ref.py", {"N": 2048}, ARGS), 30)
        wall = time.perf_counter() - t0
        print(f"\n[{counted} first={first} child={child}] attacker={att['status']} "
              f"left={left} restarts {restarts}->{box.restarts} next={nxt['status']} "
              f"wall={wall:.1f}s infra={sorted(box.infra)} (before {sorted(infra_before)}) "
              f"err={str(nxt.get('error'))[:300]!r}")
        own = box.left_running()
    finally:
        box.close()
    assert att["status"] == "ok", att
    assert nxt["status"] == "ok", nxt
    assert wall < 25, wall
    assert not own


@pytest.mark.parametrize("counted", ["cgroup", "namespace"])
def test_a_leftover_forger_during_the_reference_timing(tmp_path, monkeypatch, counted):
    """device_actor.time_reference runs Sandbox.run (no retry) in the device's own harness,
    after the first iteration's candidate jobs ran there."""
    monkeypatch.setenv("KOPT_CACHE", str(tmp_path / "cache"))
    _counted_by(counted, monkeypatch)
    src = HERE / "forger.cpp"
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        att = box.run_retrying(job(artifact(tmp_path, src, {"FIRST": 1}), src, PACK / "ref.py",
                                   {"N": 4096}, ARGS), 30)
        box.end_leftovers()
        time.sleep(0.5)
        ref = job(None, PACK / "faults.cpp", PACK / "ref.py", {"N": 4096}, ARGS,
                  job_key="reference", build_id="")
        ref.pop("artifact")
        res = box.run({**ref, "time_reference": True}, 30)
    finally:
        box.close()
    print(f"\n[{counted}] reference timing after a forger: {res.get('status')} "
          f"{str(res.get('error'))[:200]!r}")
