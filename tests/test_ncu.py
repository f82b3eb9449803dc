"""NCU reports from a real H200 (../shared/data/ncu-h200): rows, units, scores, triggers."""

import csv
import json
import lzma
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from kopt.core.bottleneck import (
    aggregate,
    analyze,
    resolve_metrics,
    triggers,
    wanted_metrics,
)
from workers import ncu
from workers.ncu import parse_query_metrics

DATA = Path(__file__).resolve().parent / "data" / "ncu-h200"  # see its README.md
SCALE = {"us": 1e3, "ms": 1e6, "Mbyte": 1e6, "Kbyte": 1e3, "Gbyte": 1e9, "": 1.0, "%": 1.0,
         "inst": 1.0, "byte": 1.0, "ns": 1.0, "register/thread": 1.0}


def rows(name, metrics=None):
    return [asdict(r) for r in ncu.read_report(DATA / f"{name}.ncu-rep", metrics)]


def test_sgemm_report_matches_ncu_csv_in_base_units():
    raw = list(csv.reader(open(DATA / "sgemm_full_raw.csv")))
    head, units, vals = raw[0], raw[1], raw[2]
    names = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
             "dram__bytes_read.sum", "launch__grid_size", "launch__registers_per_thread",
             "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"]
    got = {r["metric"]: r for r in rows("sgemm_full", names)}
    assert set(got) == set(names)
    assert {r["kernel"] for r in got.values()} == {"matmul_kernel"}
    for m in names:
        i = head.index(m)
        expect = float(vals[i].replace(",", "")) * SCALE[units[i]]
        assert got[m]["value"] == pytest.approx(expect, rel=1e-5), m
    assert got["gpu__time_duration.sum"]["unit"] == "ns"
    assert got["gpu__time_duration.sum"]["value"] == pytest.approx(935424.0)
    assert got["dram__bytes_read.sum"]["unit"] == "byte"
    assert got["sm__throughput.avg.pct_of_peak_sustained_elapsed"]["unit"] == "%"


def test_a_report_is_read_in_a_process_of_its_own_where_torch_is_loaded(tmp_path, monkeypatch):
    """On an H200 host, Nsight Compute 2025.3.1's ``ncu_report`` and torch in one process
    crashed it (a segmentation fault in ``IMetric.unit``, or in ``import torch`` once
    ``ncu_report`` was loaded): where torch is loaded, the report is read by a child
    process that never imports it, with the same rows; one that cannot be read is one
    RuntimeError naming the file."""
    import torch  # noqa: F401 -- loaded here, as in a process that holds a harness

    rep = DATA / "sgemm_full.ncu-rep"
    here = ncu._read_here(rep, None)
    assert len(here[0]) > 1000 and here[1] == 1
    apart_rows, launches = ncu._read_apart(rep, None)
    assert (list(map(repr, apart_rows)), launches) == (list(map(repr, here[0])), 1)  # NaN too
    apart = []
    monkeypatch.setattr(ncu, "_read_apart", lambda p, m: apart.append(p) or here)
    assert ncu.read_report(rep) == here[0] and apart == [rep]
    monkeypatch.undo()
    bad = tmp_path / "gone.ncu-rep"
    with pytest.raises(RuntimeError, match=rf"^{bad}: the process reading the report ended "
                       rf"with code 1: {bad}: not a readable Nsight Compute report"):
        ncu._read_apart(bad, ["gpu__time_duration.sum"])


def test_absent_metrics_are_absent_not_zero():
    got = rows("sgemm_full", ["gpu__time_duration.sum", "no__such_metric.sum"])
    assert [r["metric"] for r in got] == ["gpu__time_duration.sum"]


def test_axis_scores_and_bottleneck():
    sg = analyze(aggregate(rows("sgemm_full")))
    assert sg.scores["compute"] == pytest.approx(0.6819, abs=1e-3)
    assert sg.scores["memory"] == pytest.approx(0.6778, abs=1e-3)
    assert sg.bottleneck == "compute" and sg.ranked[-1] == "latency"
    assert "selected" not in sg.stalls and sg.stalls["long_scoreboard"] == pytest.approx(1.374,
                                                                                         abs=1e-3)
    va = analyze(aggregate(rows("vadd_full")))
    assert va.bottleneck == "memory" and va.scores["memory"] == pytest.approx(0.8056, abs=1e-3)
    assert max(va.stalls, key=va.stalls.get) == "long_scoreboard"


def test_triggers_from_real_reports():
    sg = triggers(aggregate(rows("sgemm_full")))
    assert sg["memory.register_pressure"] is True and sg["memory.bank_conflict"] is True
    assert sg["compute.tensor_core"] is False  # the FMA pipe is not over 40%
    assert sg["memory.kernel_fusion"] is None  # text-only trigger: not decidable from NCU
    va = triggers(aggregate(rows("vadd_full")))
    assert va["memory.cache_policy"] is True and va["memory.bank_conflict"] is False


def test_missing_figures_make_triggers_undecidable():
    t = triggers({})
    assert all(v is None for v in t.values())
    assert analyze({}).bottleneck is None


def test_aggregate_weights_by_duration():
    agg = aggregate([
        {"launch": 0, "metric": "gpu__time_duration.sum", "value": 100.0},
        {"launch": 0, "metric": "x.pct", "value": 10.0},
        {"launch": 1, "metric": "gpu__time_duration.sum", "value": 300.0},
        {"launch": 1, "metric": "x.pct", "value": 50.0}])
    assert agg == {"gpu__time_duration.sum": 400.0, "x.pct": 40.0}


def test_metric_names_resolve_on_gh100_with_aliases():
    avail = parse_query_metrics(lzma.open(DATA / "query_metrics_gh100.txt.xz", "rt").read())
    assert "sm__throughput" in avail and len(avail) > 3000
    wanted = wanted_metrics()
    keep, aliased, missing = resolve_metrics(wanted, avail)
    assert missing == [] and aliased == {} and len(keep) == len(wanted)
    # a device lacking the canonical DRAM name falls back to its alias, and says so
    keep, aliased, missing = resolve_metrics(
        ["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "bogus__metric.sum"],
        avail - {"gpu__dram_throughput"})
    assert keep == ["dram__throughput.avg.pct_of_peak_sustained_elapsed"]
    assert aliased == {"dram__throughput.avg.pct_of_peak_sustained_elapsed":
                       "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"}
    assert missing == ["bogus__metric.sum"]


def test_capture_without_ncu_is_a_status(monkeypatch, tmp_path):
    monkeypatch.setenv("NCU", str(tmp_path / "no-ncu"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "LOCK_PATH", tmp_path / "lock")
    monkeypatch.setattr(ncu, "ncu_exe", lambda: None)  # as on a machine without Nsight Compute
    res = ncu.capture({}, ["k"], ["gpu__time_duration.sum"])
    assert res.status == "no_ncu" and "ncu not found" in res.error and res.rows == []


def test_kernel_regex_is_exact():
    import re
    rx = ncu.kernel_regex(["_Z3fooPf", "bar"]).removeprefix("regex:")
    assert re.match(rx, "_Z3fooPf") and re.match(rx, "bar")
    assert not re.match(rx, "_Z3fooPfX") and not re.match(rx, "solve")


FAKE_NCU = '''#!{python}
# Stands in for ncu: runs the target command it is given (the real workers.ncu_target
# --many), prints one "==PROF== Profiling" line inside the brackets of the jobs named in
# $FAKE_PROF (as ncu does while the target waits in a profiled launch), and writes a
# real H200 report (one launch) as the output.
import os, shutil, subprocess, sys
args = sys.argv[1:]
rep = args[args.index("-o") + 1] + ".ncu-rep"
target = args[args.index("{python}"):]
prof = {{int(x) for x in os.environ["FAKE_PROF"].split(",") if x}}
p = subprocess.Popen(target, stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    sys.stdout.write(line)
    if line.startswith("KOPT_NCU_BEGIN ") and int(line.split()[1]) in prof:
        sys.stdout.write('==PROF== Profiling "matmul_kernel" - 0: 0%....50%....100% - 38 passes\\n')
sys.stdout.flush()
shutil.copy(os.environ["FAKE_REPORT"], rep)
sys.exit(p.wait())
'''


def _fake_ncu(tmp_path, monkeypatch) -> list[dict]:
    """FAKE_NCU as $NCU (reporting the real H200 sgemm report) and two CPU jobs for it."""
    import sys

    from test_harness import artifact, job

    from conftest import FIXTURES

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    fake = tmp_path / "ncu"
    fake.write_text(FAKE_NCU.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    monkeypatch.setenv("FAKE_REPORT", str(DATA / "sgemm_full.ncu-rep"))
    return [{**job(artifact(tmp_path, src, 0), src, ref), "device": "cpu"} for _ in range(2)]


def test_one_ncu_process_profiles_the_top_k_and_splits_their_launches(tmp_path, monkeypatch):
    """capture_many: the real target runs two CPU jobs in one process, bracketed by markers;
    the launches between a job's markers are that job's (values from a real H200 report)."""



    jobs = _fake_ncu(tmp_path, monkeypatch)
    monkeypatch.setattr(ncu, "LOCK_PATH", tmp_path / "lock")
    metrics = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    items = [(j, ["matmul_kernel"]) for j in jobs]

    monkeypatch.setenv("FAKE_PROF", "1")  # the report's one launch came from job 1
    res = ncu.capture_many(items, metrics)
    assert [r.status for r in res] == ["no_kernels", "ok"]
    assert [(r.kernel, r.launch, r.metric, r.value, r.unit) for r in res[1].rows] == [
        ("matmul_kernel", 0, "gpu__time_duration.sum", 935424.0, "ns"),
        ("matmul_kernel", 0, "sm__throughput.avg.pct_of_peak_sustained_elapsed",
         pytest.approx(66.1024209), "%")]
    assert "--many" in res[1].command and "--clock-control none" in res[1].command

    # two launches claimed, one in the report: no guessing, the caller captures one by one
    monkeypatch.setenv("FAKE_PROF", "0,1")
    assert ncu.capture_many(items, metrics) is None


def test_split_launches_needs_every_job_bracketed_in_order():
    prof = '==PROF== Profiling "k" - 0: 0%....100% - 9 passes'
    out = "\n".join(["==PROF== Connected to process 7", "KOPT_NCU_BEGIN 0", prof, prof,
                     "KOPT_NCU_END 0", "KOPT_NCU_BEGIN 1", "KOPT_NCU_FAIL 1 launch_error: bad",
                     "KOPT_NCU_END 1", "KOPT_NCU_BEGIN 2", prof, "KOPT_NCU_END 2"])
    assert ncu.split_launches(out, 3) == ([2, 0, 1], {1: "launch_error: bad"})
    assert ncu.split_launches(out, 4) is None  # job 3 never ran (a fatal error before it)
    assert ncu.split_launches(prof + "\n" + out, 3) is None  # a launch outside any job
    assert ncu.split_launches(out.replace("BEGIN 1", "BEGIN 2", 1), 3) is None


def test_one_ncu_lock_per_gpu(tmp_path, monkeypatch):
    # ncu processes of different GPUs (device actors' CUDA_VISIBLE_DEVICES) do
    # not wait for each other; one GPU's do; no GPU named, or KOPT_NCU_LOCK=node: one per node
    monkeypatch.setattr(ncu, "LOCK_PATH", tmp_path / "kopt-ncu.lock")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("KOPT_NCU_LOCK", raising=False)
    assert ncu.lock_path({"CUDA_VISIBLE_DEVICES": "1"}) == tmp_path / "kopt-ncu-1.lock"
    assert ncu.lock_path({"CUDA_VISIBLE_DEVICES": "GPU-5f3a/0,1"}) == (
        tmp_path / "kopt-ncu-GPU-5f3a_0_1.lock")
    assert ncu.lock_path({}) == tmp_path / "kopt-ncu.lock"
    assert ncu.lock_path({"CUDA_VISIBLE_DEVICES": "1", "KOPT_NCU_LOCK": "node"}) == (
        tmp_path / "kopt-ncu.lock")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert ncu.lock_path() == tmp_path / "kopt-ncu-0.lock"


def test_the_candidates_to_profile_are_shared_round_robin():
    from kopt.loop.profiling import shares

    todo = ["base", "top1", "top2", "top3"]
    assert shares(todo, [3]) == [(3, [0, 1, 2, 3])]
    assert shares(todo, [3, 5]) == [(3, [0, 2]), (5, [1, 3])]
    assert shares(todo[:1], [3, 5]) == [(3, [0])]  # a device with no share is not called


def test_the_profiled_size_is_the_one_sweep_yaml_names():
    """ncu.dims (an index into the backend's dims:) picks the job a profile captures, here
    the largest of three sizes, listed last; without it, or where the candidate did not run
    that size, the size whose dims JSON sorts first (ROWS 16 before ROWS 1)."""
    from types import SimpleNamespace

    from conftest import ROOT
    from kopt.core.spec import load_sweep
    from kopt.loop.profiling import profiled_row

    sw = load_sweep(ROOT / "sweeps" / "rmsnorm_residual")
    rows = [{"dims": json.dumps(d, sort_keys=True), "job_key": str(i)}  # as stored
            for i, d in enumerate(sw.space("cuda").dims)]
    ctx = SimpleNamespace(sweep=sw, backend="cuda")
    assert sw.ncu.dims == 2 and profiled_row(ctx, rows)["job_key"] == "2"  # ROWS 4096
    assert profiled_row(ctx, rows[:2])["job_key"] == "1"  # ROWS 16 sorts before ROWS 1
    plain = SimpleNamespace(sweep=SimpleNamespace(ncu=SimpleNamespace(dims=None),
                                                  spaces=sw.spaces), backend="cuda")
    assert profiled_row(plain, rows)["job_key"] == "1"


def test_ray_runner_calls_devices_at_once_and_reports_each_as_it_finishes(ray_local):
    # kopt.loop.profiling sends each device its share at once and closes each
    # device's ncu phase when its own share is back (Runner.call_many's `done`)
    import time

    import ray

    from kopt.run.runner import DeviceError, RayRunner, Runner

    @ray.remote(num_cpus=0)
    class Echo:
        def slow(self, x, s):
            t = time.time()
            time.sleep(s)
            return x, t, time.time()

        def boom(self):
            raise ValueError("no device")

    runner = RayRunner.__new__(RayRunner)
    Runner.__init__(runner)
    runner.actors = [Echo.remote(), Echo.remote(), Echo.remote()]
    # started first: on a loaded machine an actor's own start took longer than a call
    # (CI: the second began after the first had ended)
    ray.get([a.slow.remote("up", 0.0) for a in runner.actors[:2]], timeout=120)
    order: list[int] = []
    got = runner.call_many([(0, "slow", ("a", 2.0)), (1, "slow", ("b", 2.0)), (2, "boom", ())],
                           done=lambda k, _res: order.append(k))
    (a, a0, a1), (b, b0, b1) = got[:2]
    assert (a, b) == ("a", "b") and b0 < a1 and a0 < b1  # the two ran at the same time
    assert isinstance(got[2], DeviceError) and "no device" in str(got[2])
    assert sorted(order) == [0, 1, 2]
    late = runner.call_many([(0, "slow", ("c", 30.0))], timeout=0.5,
                            done=lambda k, _res: order.append(k))
    assert isinstance(late[0], DeviceError) and order[-1] == 0


def test_a_warm_ncu_waits_for_its_jobs_then_profiles_them_like_a_cold_one(tmp_path,
                                                                          monkeypatch):
    """workers.ncu_warm: ncu and its target start before the jobs are known (the target
    imports its modules and waits); handed the jobs, it profiles them in one process and the
    launches are attributed as capture_many's; the process and its folder are used up."""
    import time

    from workers import ncu_warm

    jobs = _fake_ncu(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_PROF", "1")
    monkeypatch.setattr(ncu, "LOCK_PATH", tmp_path / "lock")
    metrics = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    warm = ncu_warm.start(metrics, device="cpu")  # the fake ncu's jobs are a CPU's
    assert warm is not None and warm.key == (tuple(metrics), ())
    assert warm.command.split()[-4] == "--wait" and warm.command.endswith(" cpu")
    assert "--nvtx --nvtx-include kopt/" in warm.command and "--wait" in warm.command
    time.sleep(3)
    assert warm.alive()  # waiting for its jobs
    res = ncu_warm.capture(warm, [(j, ["matmul_kernel"]) for j in jobs], metrics)
    assert [r.status for r in res] == ["no_kernels", "ok"]
    assert [(r.kernel, r.metric, r.value) for r in res[1].rows][0] == (
        "matmul_kernel", "gpu__time_duration.sum", 935424.0)
    assert not warm.alive() and not warm.tmp.exists()
    # the side-by-side measurement's other arm: the harness made once the jobs come
    monkeypatch.setenv(ncu_warm.AHEAD_ENV, "0")
    late = ncu_warm.start(metrics, device="cpu")
    try:
        assert late is not None and late.command.split()[-3] == "--wait"  # no device
    finally:
        late.close()


def test_a_warm_ncu_target_leaves_when_its_device_actor_is_gone(tmp_path):
    """The waiting target exits (4, nothing run) once the actor that started it is gone, so
    a killed actor leaves no ncu waiting forever."""
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for device in ([], ["cpu"]):  # its harness made before the wait, or not
        p = subprocess.run([sys.executable, "-m", "workers.ncu_target", "--wait",
                            str(tmp_path / "never.json"), str(dead.pid), *device],
                           timeout=120)
        assert p.returncode == 4


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine with no CUDA GPU")
def test_a_warm_ncu_target_makes_its_harness_before_its_jobs_come(tmp_path):
    """With a device, the waiting target makes its harness (on a GPU its CUDA context,
    which ncu connects to) before the jobs come, not after the hand-over: asked for a CUDA
    harness where there is none, it fails at once with the driver's error though no jobs
    file ever comes and the actor that started it lives."""
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "workers.ncu_target", "--wait",
                        str(tmp_path / "never.json"), str(os.getpid()), "cuda"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" in p.stderr, p.stderr[-2000:]
    assert not (tmp_path / "never.json").exists()


def _query_ncu(tmp_path, monkeypatch):
    """A stand-in ncu on $NCU that answers ``--query-metrics`` with an H200's real table
    and logs each call to ``tmp_path/calls``."""
    table = tmp_path / "table.txt"
    table.write_text(lzma.open(DATA / "query_metrics_gh100.txt.xz", "rt").read())
    fake = tmp_path / "ncu"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls\ncat {table}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("NCU", str(fake))
    monkeypatch.setattr(ncu, "_early", [])


def test_the_local_devices_metric_list_comes_from_the_query_started_before_ray(
        tmp_path, monkeypatch):
    """The driver waited 1.9 s (H200, docs/verified/2026-12-01-h200-targets.md) between its
    devices' start and the first job for the device actor's ``ncu --query-metrics``; a
    device on the driver's node (it adopted a harness the driver prestarted) now takes the
    driver's query, started before Ray; another device still asks its actor."""
    import types

    from kopt.core.catalog import load_catalog
    from kopt.core.spec import load_sweep
    from kopt.loop.profiling import resolve
    from kopt.util.phases import PhaseRecorder

    _query_ncu(tmp_path, monkeypatch)
    assert ncu.early_query() == (False, None)  # not started: nothing waits
    ncu.start_query()
    ncu.start_query()  # once per process
    asked: list[int] = []
    runner = types.SimpleNamespace(
        infos=[{"device_class": "h200-sm90", "prestarted": True},
               {"device_class": "h100-sm90", "prestarted": False}],
        call=lambda i, name, timeout: asked.append(i) or ["sm__throughput.avg"])
    sweep = load_sweep(Path(__file__).resolve().parent.parent / "sweeps" / "vector_add")
    ctx = types.SimpleNamespace(sweep=sweep, catalog=load_catalog(), runner=runner,
                                phases=PhaseRecorder(), observers=[])
    names = resolve(ctx)
    assert asked == [1]  # the local device's actor was not asked
    assert (tmp_path / "calls").read_text() == "--query-metrics\n"  # one query, ahead
    want = wanted_metrics(sweep.ncu.metrics or [], ctx.catalog)
    avail = parse_query_metrics(lzma.open(DATA / "query_metrics_gh100.txt.xz", "rt").read())
    assert names["h200-sm90"] == resolve_metrics(want, avail)[0]
    assert len(names["h200-sm90"]) > 40 and names["h100-sm90"] != names["h200-sm90"]
    details = [p["detail"] for p in ctx.phases.rows if p["phase"] == "ncu"]
    assert details == ["ncu --query-metrics (started before Ray)", "ncu --query-metrics"]


PROBE_NCU = '''#!{python}
# Stands in for ncu: says which PID namespace it runs in, whether it can write a host file
# and reach its loopback (ncu talks to its target over 127.0.0.1), and, once the target
# brackets its first job, whether the target has a system-call filter.
import os, subprocess, sys
args = sys.argv[1:]
print("pidns", os.readlink("/proc/self/ns/pid"))
try:
    open({outside!r}, "w").write("x")
    print("wrote outside")
except OSError as e:
    print("outside errno", e.errno)
import socket
with socket.create_server(("127.0.0.1", 0)) as srv, socket.create_connection(
        srv.getsockname(), timeout=10):
    print("loopback up")
p = subprocess.Popen(args[args.index("{python}"):], stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if line.startswith("KOPT_NCU_BEGIN 0"):
        with open(f"/proc/{{p.pid}}/status") as f:
            print("target", [x for x in f if x.startswith("Seccomp:")][0].strip())
sys.exit(p.wait())
'''


def test_ncu_and_its_target_run_in_the_candidates_sandbox(tmp_path, monkeypatch):
    """The profiled target loads candidate code: ncu runs in the harness's sandbox (its own
    PID namespace, host files read-only) and the target takes the system-call filter before
    its first job (Seccomp mode 2 in /proc: a filter)."""
    import errno
    import os
    import sys

    from workers import isolation

    if not isolation.available().isolated:
        pytest.skip(f"no sandbox here: {isolation.available().why}")
    jobs = _fake_ncu(tmp_path, monkeypatch)
    fake = tmp_path / "ncu"
    fake.write_text(PROBE_NCU.format(python=sys.executable, outside=str(tmp_path / "out")))
    monkeypatch.setattr(ncu, "LOCK_PATH", tmp_path / "lock")
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "jobs.json").write_text(json.dumps(jobs))
    res, out = ncu._run_ncu(["--many", str(cap / "jobs.json")], ["k"], ["m"], None, 120, None,
                            cap)
    lines = dict(x.split(" ", 1) for x in out.splitlines() if " " in x)
    assert lines["pidns"] != os.readlink("/proc/self/ns/pid")
    assert lines["outside"] == f"errno {errno.EROFS}" and not (tmp_path / "out").exists()
    assert lines["target"] == "Seccomp:\t2" and lines["loopback"] == "up"
    assert res.command.startswith(str(fake)) and "workers.jail" not in res.command
