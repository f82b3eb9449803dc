"""Every run records where its time went (the ``phases`` table) and
``kopt report`` draws it."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kopt.core.spec import load_sweep
from kopt.driver.sweep import run_sweep
from kopt.store.database import Database
from kopt.tools.report import write_report
from kopt.util.phases import RUN_PHASES, PhaseRecorder, phase_summary, start_epoch

ROOT = Path(__file__).resolve().parent.parent
DEV = {"device_class": "cpu-x", "device_id": "n/cpu-1", "node_ip": "n"}


def test_kopts_start_is_before_this_test_and_the_clock_counts_from_it():
    """The recorder's zero is kopt's start in this process (the package's first import,
    the imports after it counted), not the moment the recorder was made."""
    import kopt

    t0 = start_epoch()
    assert t0 == kopt.STARTED_AT < time.time()
    rec = PhaseRecorder()
    assert abs(rec.started - t0) < 0.05
    before = time.time() - t0
    now = rec.now()  # between two readings of the wall clock, however long load parts them
    assert before - 0.05 <= now <= time.time() - t0 + 0.05


def test_busy_intervals_queue_behind_the_last_job_and_build_waits_join():
    rec = PhaseRecorder(started=time.time())
    a = rec.job_sent()
    b = rec.job_sent()  # a second job queued on the same device (inflight 2)
    time.sleep(0.02)
    rec.job_done(0, DEV, a)
    time.sleep(0.02)
    rec.job_done(0, DEV, b)
    busy = [r for r in rec.rows if r["phase"] == "busy"]
    assert len(busy) == 2 and busy[1]["start_s"] == busy[0]["end_s"]  # not from when sent
    assert [r["phase"] for r in rec.rows].count("first_result") == 1
    p = time.perf_counter()
    rec.waited(0, DEV, p, p + 1.0)
    rec.waited(0, DEV, p + 1.0, p + 2.5)  # the next turn of the scheduler's loop
    waits = [r for r in rec.rows if r["phase"] == "build_wait"]
    assert len(waits) == 1 and waits[0]["end_s"] - waits[0]["start_s"] == pytest.approx(2.5)
    table = {(ph, where): secs for ph, where, _, _, secs in phase_summary(rec.rows)}
    assert table[("build_wait", "cpu-x n/cpu-1")] == pytest.approx(2.5)
    assert table[("first_result", "run")] > 0.0
    # the device's 2 busy intervals are summed, and the label says so (it read as a span)
    assert table[("busy x2", "cpu-x n/cpu-1")] == pytest.approx(
        sum(r["end_s"] - r["start_s"] for r in busy))


@pytest.fixture(scope="module")
def vector_add_run(ray_local, tmp_path_factory):
    here = tmp_path_factory.mktemp("phases")
    store, d = here / "store", here / "vector_add"
    shutil.copytree(ROOT / "sweeps" / "vector_add", d)
    src = d / "vector_add.cpp"  # a new digest: a cold build cache whatever ran before
    src.write_text(src.read_text() + f"\n// cold cache {uuid.uuid4().hex}\n")
    os.environ["KOPT_RAY_TIMELINE"] = str(here / "timeline.json")
    try:
        s = run_sweep(load_sweep(d), store, backend="cpu", max_candidates=2)
    finally:
        del os.environ["KOPT_RAY_TIMELINE"]
    return s, store, time.time() - start_epoch()


def test_kopt_ray_timeline_writes_rays_own_timeline_of_the_run(vector_add_run):
    """$KOPT_RAY_TIMELINE: Ray's Chrome-tracing timeline of the run's job (what the phases
    rows do not show: each build task and device-actor call on its worker)."""
    _, store, _ = vector_add_run
    events = json.loads((store.parent / "timeline.json").read_text())
    names = {e.get("name") for e in events}
    # the build and compiler-identity tasks (functions of workers/, so that their workers
    # import no kopt module), and the device actor's start, info, reference check and jobs
    assert {"workers.build.build", "workers.build.identity_and_env", "__init__", "info",
            "prepare", "run"} <= names, sorted(map(str, names))


def _once(rows, phase):
    mine = [r for r in rows if r["phase"] == phase and r["device"] is None]
    assert len(mine) == 1, (phase, mine)
    return mine[0]


def test_a_vector_add_run_stores_each_phase_once_in_order(vector_add_run):
    s, store, wall = vector_add_run
    rows = Database(store).phases(s.run_id)
    assert {r["phase"] for r in rows if r["device"] is None} == {*RUN_PHASES, "build"}
    p = {ph: _once(rows, ph) for ph in RUN_PHASES}
    assert all(0.0 <= r["start_s"] <= r["end_s"] <= p["end"]["end_s"] for r in rows)
    assert p["end"]["end_s"] <= wall  # the run ended before this test read the store
    assert p["startup"]["start_s"] == 0.0 and p["startup"]["end_s"] > 0.0
    # each moment after the one it waits for
    after = [("checks", "startup"), ("ray", "checks"), ("devices", "ray"),
             ("reference", "devices"), ("first_build", "ray"), ("first_result", "reference"),
             ("run", "ray"), ("stop_devices", "first_result"), ("store", "stop_devices"),
             ("end", "store")]
    assert [(a, b) for a, b in after if p[a]["start_s"] < p[b]["end_s"]] == []
    assert p["run"]["end_s"] - p["run"]["start_s"] >= s.wall_s
    # the device's intervals: its start, the reference, one busy interval per job
    dev = [r for r in rows if r["device"] is not None]
    assert {r["device_class"] for r in dev} == {s.devices[0]["device_class"]}
    busy = sorted((r for r in dev if r["phase"] == "busy"), key=lambda r: r["start_s"])
    assert len(busy) == s.n_jobs == 2
    assert busy[0]["end_s"] <= busy[1]["start_s"]
    assert {"device_start", "reference", "busy"} <= {r["phase"] for r in dev}
    # ref.py is timed once the first iteration's candidates are: the first result does not
    # wait for it (0.2 s of an H200 host's queued sweep), and its row is stored
    timed = [r for r in dev if r["phase"] == "reference" and r["detail"] == "ref.py timed"]
    assert len(timed) == 1 and timed[0]["start_s"] >= busy[-1]["end_s"]
    _, refs = Database(store).query(f"select status, median_ms > 0 from reference where "
                                    f"run_id = '{s.run_id}'")
    assert refs == [("ok", True)]
    # its harness was started before Ray, and the device actor took it over
    assert [r["detail"] for r in dev if r["phase"] == "device_start"] == [
        "sandbox started before Ray"]
    assert s.devices[0]["prestarted"] is True
    _, built = Database(store).query(f"select count(*) from candidates where run_id = "
                                     f"'{s.run_id}' and not build_cached")
    assert len([r for r in rows if r["phase"] == "build"]) == built[0][0]
    assert s.phases and {r["phase"] for r in s.phases} == {r["phase"] for r in rows}


def test_the_report_draws_the_timeline_and_the_phase_table(vector_add_run, tmp_path):
    s, store, _ = vector_add_run
    summary = write_report(s.run_id, store, tmp_path / "report")
    png = tmp_path / "report" / "timeline.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    text = summary.read_text()
    assert "## Where the time went" in text and "![timeline.png](timeline.png)" in text
    assert "| startup | run | 0.00 |" in text and "| first_result | run |" in text


def test_reading_a_device_info_or_node_environment_imports_no_torch(tmp_path):
    """The driver unpickles each device's info and the node's environment before the first
    build result; a ``torch.__version__`` in them (a TorchVersion, not a str) made it import
    torch there (4.0 s of the driver's time under cProfile on a loaded CPU run)."""
    from workers.envinfo import collect
    from workers.harness import Harness, device_info

    blob = tmp_path / "info.pkl"
    blob.write_bytes(pickle.dumps([collect(), device_info(Harness("cpu"))]))
    code = (f"import pickle, sys; pickle.loads(open({str(blob)!r}, 'rb').read()); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_node_environment_is_read_without_importing_torch():
    """The compiler-identity task reads the node's environment before the first builds are
    planned; importing torch there for its version took about 3 s of an H200 host's cold
    start. The version still comes out the same."""
    import importlib.metadata

    code = ("import sys; from workers.envinfo import collect; c = collect(); "
            "print(c['torch'], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [importlib.metadata.version("torch"), "False"]


def test_a_cpu_device_held_back_while_builds_compile_is_waiting_for_them():
    """CPU devices share the compilers' cores, so the scheduler sends them nothing while a
    build is pending (``hold_for_builds``), even with jobs ready: that time is build wait.
    It was not counted (a device with ready jobs was not "starved"): a CPU run's build_wait
    read 0.07 s where its device sat 20 s before the first job. A GPU device with jobs
    ready is sent them, so it is not waiting."""
    from collections import deque
    from types import SimpleNamespace

    from kopt.run.scheduler import Scheduler

    runner = SimpleNamespace(infos=[{"device_class": "cpu-x"}, {"device_class": "cpu-x"}],
                             dead=set())
    job = SimpleNamespace(device_class="cpu-x")
    for hold, want in ((True, {0, 1}), (False, set())):
        s = Scheduler(None, runner, {}, lambda *a: None, [], 1, {}, hold, {})
        s.by_build = {"b1": [job], "b2": [job]}
        s.pending = {"ref2": SimpleNamespace(build_id="b2")}
        s.ready = {"cpu-x": deque([job])}
        assert s._starved() == want
        s.ready = {}  # nothing ready while the class compiles: waiting either way
        assert s._starved() == {0, 1}
        s.pending = {}  # nothing to wait for
        assert s._starved() == set()
