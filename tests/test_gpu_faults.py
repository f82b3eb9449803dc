"""The fault pack and the GPU paths that had no test on a GPU, marked gpu: they run
on the H200 (docs/verified/) and skip cleanly elsewhere."""

import dataclasses
import json
import shutil
import statistics
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT
from kopt.core.contract import parse_signature_file
from workers import build as wb
from workers.sandbox import Sandbox

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

PACK = FIXTURES / "faultpack"
TIMING = {"warmup_ms": 25, "min_samples": 10, "max_samples": 200, "max_time_ms": 2000,
          "target_rel_error": 0.005, "timeout_s": 3}


def cuda_job(tmp_path, mode, good=0, **kw):
    src = PACK / "faults.cu"
    b = wb.BuildJob(f"g{mode}-{good}-{abs(hash(src.read_text())) % 10**8}", "cuda",
                    src.read_text(), src.name, str(src.parent), {"MODE": mode, "GOOD": good},
                    target="sm_90")
    res, data = wb.build(b, cache=tmp_path)
    assert res.ok, res.error
    sig = [dataclasses.asdict(a) for a in parse_signature_file(src).args]
    return {"artifact": str(wb.ensure_artifact(b.build_id, data, cache=tmp_path)),
            "signature": sig, "reference": str(PACK / "ref.py"), "dims": {"N": 1 << 24},
            "seed": 0, "args": {"x": ["N"], "buf": ["N"], "y": ["N"]}, "scalars": {},
            "tolerance": {"atol": 1e-5, "rtol": 1e-4}, "timing": TIMING,
            "job_key": f"mode{mode}", **kw}


def test_the_fault_pack_on_the_gpu(tmp_path):
    """Each gaming candidate gets its status, and the honest candidate run after each one is
    measured as before it (nothing a fault did is charged to the next job)."""
    sb = Sandbox("cuda")
    plan = [(0, 0), (1, 0), (0, 1), (2, 0), (0, 2), (3, 0), (0, 3), (4, 0), (0, 4), (5, 0),
            (0, 5)]
    try:
        out = [(m, sb.run(cuda_job(tmp_path, m, g), timeout_s=TIMING["timeout_s"]))
               for m, g in plan]
    finally:
        sb.close()
    for m, r in out:
        print(f"MODE {m}: {r['status']} median {r.get('median_ms')} full {r.get('full_ms')} "
              f"leaked {r.get('leaked_bytes')} :: {(r.get('error') or '')[:160]}")
    by = {m: r for m, r in out if m}
    honest = [r for m, r in out if m == 0]
    assert all(r["status"] == "ok" for r in honest)
    meds = [r["median_ms"] for r in honest]
    assert max(meds) / min(meds) < 1.05, meds  # within noise after every fault
    assert by[1]["status"] == "wrong_result"  # replay from a private buffer
    assert by[2]["status"] in ("escaped", "wrong_result")  # its own stream
    if by[2]["status"] == "escaped":
        assert by[2]["full_ms"] > 0.5 * statistics.median(meds)
    assert by[3]["status"] == "leaked" and by[3]["leaked_bytes"] > 1 << 30
    assert by[4]["status"] == "wrong_result"  # skips pointers seen before
    assert by[5]["status"] == "too_slow" and 350 < by[5]["median_ms"] < 2000


def test_the_fields_exploit_classes_on_the_gpu(tmp_path):
    """More of the field's known tricks, each followed by the honest kernel in the same
    sandbox (measured as before it): a replay keyed by the inputs' content (MODE 7: four
    entries, so every input set the check and the samples use is served from memory, 0.086
    ms a call against the honest 1.5 ms on an H200) keeps its cache in device memory outside
    torch that it never frees, and is `leaked` before the replay check runs (a cache in host
    memory would cost more to copy back than the work); a write to a const input (8), a NaN
    in one output (9), the work in fp16 (10) and outputs left partly unwritten (11) are
    `wrong_result`."""
    sb = Sandbox("cuda")
    plan = [(0, 0), (7, 0), (0, 1), (8, 0), (0, 2), (9, 0), (0, 3), (10, 0), (0, 1), (11, 0),
            (0, 2)]
    try:
        out = [(m, sb.run(cuda_job(tmp_path, m, g, timing={**TIMING, "timeout_s": 10}),
                          timeout_s=30)) for m, g in plan]
    finally:
        sb.close()
    for m, r in out:
        print(f"MODE {m}: {r['status']} median {r.get('median_ms')} :: "
              f"{(r.get('error') or '')[:200]}")
    by = {m: r for m, r in out if m}
    honest = [r for m, r in out if m == 0]
    assert all(r["status"] == "ok" for r in honest)
    meds = [r["median_ms"] for r in honest]
    assert max(meds) / min(meds) < 1.05, meds
    assert by[7]["status"] == "leaked" and by[7]["leaked_bytes"] >= 128 << 20, by[7]
    assert {by[m]["status"] for m in (8, 9, 10, 11)} == {"wrong_result"}, by
    assert "wrote to its const input 'x'" in by[8]["error"]
    assert "got nan" in by[9]["error"]


def _persisting_l2_limit() -> int:
    """cuCtxGetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE) of the current context, bytes."""
    import ctypes

    from workers.harness import CU_LIMIT_PERSISTING_L2_CACHE_SIZE

    v = ctypes.c_size_t(0)
    rc = ctypes.CDLL("libcuda.so.1").cuCtxGetLimit(
        ctypes.byref(v), ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE))
    assert rc == 0, rc
    return v.value


def test_l2_set_aside_by_one_job_is_reset_before_the_next(tmp_path):
    """Fault pack MODE 12 sets up to 32 MB of L2 aside for persisting accesses (and a window over
    its input) and leaves it so; the harness resets the limit and the persisting lines before
    every job: MODE 13, honest but wrong wherever it finds such L2 set aside when called, is
    `ok` right after it in the same process, and so is the honest kernel."""
    from workers.harness import Harness

    h = Harness("cuda")
    assert h.run(cuda_job(tmp_path, 12))["status"] == "ok"  # it could set the limit
    assert _persisting_l2_limit() >= 1 << 20  # and left it set after its job
    h.reset_persisting_l2()
    assert _persisting_l2_limit() == 0
    h.run(cuda_job(tmp_path, 12))
    for mode in (13, 0):  # each job starts with the limit reset
        r = h.run(cuda_job(tmp_path, mode))
        assert r["status"] == "ok", (mode, r)


def test_nvml_is_read_around_the_samples(tmp_path):
    from workers.harness import Harness

    h = Harness("cuda")
    s = h.observers[0].reader.sample()
    assert s["sm_clock_mhz"] > 100 and 0 < s["temperature_c"] < 120
    assert isinstance(s["throttle_reasons"], int) and 10 < s["power_w"] < 2000
    r = h.run(cuda_job(tmp_path, 0))
    assert r["status"] == "ok" and r["sm_clock_mhz"] > 100 and r["temperature_c"] > 0
    assert 10 < r["power_w"] < 2000  # W; a data-centre GPU reports its power


def test_a_real_ncu_capture(tmp_path):
    from workers import ncu

    if ncu.ncu_exe() is None:
        pytest.fail("ncu is not on this GPU machine")
    job = {**cuda_job(tmp_path, 0), "device": "cuda"}
    res = ncu.capture(job, ["_Z4polyPKfPfi"], ["gpu__time_duration.sum",
                                      "sm__throughput.avg.pct_of_peak_sustained_elapsed"])
    assert res.status == "ok", res.error
    assert "--clock-control none" in res.command
    names = {r.metric for r in res.rows}
    assert {"gpu__time_duration.sum",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed"} <= names
    dur = [r.value for r in res.rows if r.metric == "gpu__time_duration.sum"]
    assert dur and all(v > 0 for v in dur)


def test_preflight_on_a_gpu():
    from click.testing import CliRunner

    from kopt.cli.main import main

    r = CliRunner().invoke(main, ["preflight", str(ROOT / "sweeps" / "vector_add")])
    assert r.exit_code == 0, r.output
    assert "cuda" in r.output and "ok" in r.output


def vector_add_at(tmp_path: Path, n: int) -> Path:
    """A copy of sweeps/vector_add in ``tmp_path`` whose one problem size is ``N = n``."""
    d = shutil.copytree(ROOT / "sweeps" / "vector_add", tmp_path / "vector_add")
    text = (d / "sweep.yaml").read_text()
    assert "{N: 67108864}" in text
    (d / "sweep.yaml").write_text(text.replace("{N: 67108864}", f"{{N: {n}}}", 1))
    return d


def test_a_two_iteration_ncu_loop(ray_local, tmp_path):
    """The NCU-guided loop's two iterations on the vector_add sweep at N = 2^24 (64 MB
    arrays, past an H100's or H200's L2): at the sweep's 2^26 the test took 212 s and over
    270 s on H100 hosts, much of it (by the code) ref.py's input sets drawn on the host
    (docs/verified/2026-12-06-session47.md); what it checks does not depend on the size."""
    from kopt.core.spec import load_sweep
    from kopt.driver.sweep import run_sweep
    from kopt.store.database import query

    s = run_sweep(load_sweep(vector_add_at(tmp_path, 1 << 24)), tmp_path / "st",
                  backend="cuda", iterations=2, max_candidates=8)
    assert s.status_counts.get("ok", 0) >= 8
    _, its = query("select iteration, state from iterations order by iteration", tmp_path / "st")
    assert [i for i, _ in its][:1] == [1]
    first = json.loads(its[0][1])
    assert first["bottleneck_before"] in ("compute", "memory", "latency")
    _, m = query("select count(*), count(distinct candidate_id) from metrics", tmp_path / "st")
    assert m[0][0] > 0 and m[0][1] >= 2


def test_the_leak_measure_is_this_process_own(tmp_path):
    """Device memory outside torch is this process's (NVML's per-process figure): another
    process making a context and 1 GiB on the same GPU during a job is not the candidate's
    leak (with the whole device's free memory, it was); 256 MiB this process takes outside
    torch (cuMemAlloc) is."""
    import os
    import subprocess
    import sys

    from cuda.bindings import driver as drv

    from workers.harness import LEAK_BYTES, Harness

    h = Harness("cuda")
    before = h._device_used()
    assert h._nvml.process_bytes(os.getpid()) is not None  # NVML lists this process
    other = subprocess.Popen(
        [sys.executable, "-c", "import sys, torch; x = torch.empty(1 << 30, dtype=torch.uint8, "
         "device='cuda'); torch.cuda.synchronize(); print('ready', flush=True); "
         "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "ready"
        assert abs(h._device_used() - before) < LEAK_BYTES
    finally:
        other.communicate("", timeout=60)
    err, ptr = drv.cuMemAlloc(256 << 20)
    assert err == drv.CUresult.CUDA_SUCCESS
    try:
        assert h._device_used() - before >= 256 << 20
    finally:
        drv.cuMemFree(ptr)


@pytest.mark.usefixtures("outside_clock_alone")
def test_a_patched_gpu_clock_is_suspect_by_the_clock_outside_its_process(tmp_path):
    """Fault pack MODE 6 does the honest work but, from its first call, has Python scale
    torch.cuda.Event.elapsed_time (the harness's GPU clock) and time.perf_counter by 1/10: a
    red-team trial on the H200 had it `ok` and named best at 10.0x. Its contest median, from
    that clock, is a tenth of the honest kernel's; blocks of its calls, prepared as samples
    and timed by the device actor's clock (outside the harness: kopt.core.clock.outside_blocks,
    the preparations alone in a second harness), make it suspect, and the honest kernel is
    not. Each on a device of its own, as the loop's closing judges a flagged contender.
    Its contests have no witness turns here (``outside_clock_alone``), the outside clock's
    test: with them its contest was not `ok` on an H100 (docs/verified/2026-12-06-session44.md;
    the run was cut before pytest printed why: its turns' wall-time bound, workers.witness_gpu,
    is the expected cause, not seen)."""
    from test_clock import _judged

    from kopt.core.clock import clock_suspect

    figures = {mode: _judged(cuda_job(tmp_path, mode), "cuda") for mode in (0, 6)}
    print(figures)
    assert figures[6][0] < figures[0][0] / 5, figures  # the patched events: a tenth
    assert clock_suspect(*figures[6]).startswith(
        f"its contest median is {figures[6][0]:.4g} ms by its own process's clock"), figures
    assert clock_suspect(*figures[0]) == "", figures


CLOCK_SWEEP = """kernel: faults.cu
dims: [{N: 16777216}]
tolerance: {atol: 1.0e-5, rtol: 1.0e-4}
args: {x: [N], buf: [N], y: [N]}
params: {MODE: [0, 6]}
timing: {timeout_s: 10}
ncu: {top_k: 0}
"""


def test_a_clock_patcher_is_never_the_loops_named_best(ray_local, copy_fixture):
    """The whole loop on the GPU: fault pack MODE 6 (the harness's CUDA-event clock scaled by
    1/10) against the honest baseline, NCU off. The order the shared harness runs the two
    in is not fixed. At 8fd65fe on an H200 the patcher won its iteration at about 10x and
    the loop's closing, re-timing both outside their process and each flagged one alone in
    a fresh harness, dropped it as `suspect`; at 5787202 the iteration named the baseline
    (likely: the patcher ran first, and its patch scaled the baseline's samples too). Either
    way the loop names the honest baseline, never the patcher."""
    from kopt.core.spec import load_sweep
    from kopt.driver.sweep import run_sweep

    d = copy_fixture("faultpack")
    (d / "sweep.yaml").write_text(CLOCK_SWEEP)
    s = run_sweep(load_sweep(d), d / "store", backend="cuda")
    (st,) = s.states.values()
    base = st.baseline["candidate_id"]
    named = ((st.closing or {}).get("best") or st.best)["candidate_id"]
    assert named == base, (st.best, st.closing)


HONEST = FIXTURES / "honest"
# MODE -> N: memory-bound kernels over 64 MB arrays (past the 60 MB L2), the prefix sum over
# 64k (each block sums its whole prefix itself), compute-bound ones over 4M elements
HONEST_SIZES = {**{m: 1 << 24 for m in (0, 1, 2, 3, 4, 16, 19)}, 5: 1 << 16,
                **{m: 1 << 22 for m in (6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 18)}}


def test_twenty_honest_gpu_kernels_are_ok(tmp_path):
    """The GPU twin of tests/test_honest.py (tests/fixtures/honest/honest.cu): memory-bound,
    compute-bound, value-dependent (warp divergence) kernels and other launch shapes (two
    launches, a persistent grid, shared-memory staging and tiles), one sandboxed harness:
    every one is `ok`, no guard flags honest work."""
    src = HONEST / "honest.cu"
    b = wb.BuildJob(f"honest-{abs(hash(src.read_text())) % 10**8}", "cuda", src.read_text(),
                    src.name, str(src.parent), {}, target="sm_90")
    res, data = wb.build(b, cache=tmp_path)
    assert res.ok, res.error
    art = str(wb.ensure_artifact(b.build_id, data, cache=tmp_path))
    sig = [dataclasses.asdict(a) for a in parse_signature_file(src).args]
    sb = Sandbox("cuda")
    try:
        out = {m: sb.run({"artifact": art, "signature": sig, "reference": str(HONEST / "ref.py"),
                          "dims": {"N": n, "MODE": m}, "seed": 0,
                          "args": {"x": ["N"], "y": ["N"]}, "scalars": {},
                          "tolerance": {"atol": 1e-5, "rtol": 1e-4}, "timing": TIMING,
                          "job_key": f"honest{m}"}, timeout_s=60)
               for m, n in sorted(HONEST_SIZES.items())}
    finally:
        sb.close()
    for m, r in out.items():
        print(f"MODE {m}: {r['status']} median {r.get('median_ms')} n {r.get('n_samples')} "
              f":: {(r.get('error') or '')[:200]}")
    assert {m: r["status"] for m, r in out.items() if r["status"] != "ok"} == {}
    assert all(r["unseen_ms"] for r in out.values())  # a never-seen set called on


def _faulty_cuda_job(tmp_path, mode):
    """A job of tests/fixtures/faulty's CUDA kernel (0 correct, 2 an illegal address)."""
    src, ref = FIXTURES / "faulty" / "faulty.cu", FIXTURES / "faulty" / "ref.py"
    b = wb.BuildJob(f"pf{mode}-{abs(hash(src.read_text())) % 10**8}", "cuda", src.read_text(),
                    src.name, str(src.parent), {"MODE": mode}, target="sm_90")
    res, data = wb.build(b, cache=tmp_path)
    assert res.ok, res.error
    sig = [dataclasses.asdict(a) for a in parse_signature_file(src).args]
    return {"artifact": str(wb.ensure_artifact(b.build_id, data, cache=tmp_path)),
            "signature": sig, "reference": str(ref), "dims": {"N": 65536}, "seed": 0,
            "args": {"x": ["N"]}, "scalars": {}, "tolerance": {"atol": 1e-6, "rtol": 1e-6},
            "timing": TIMING, "job_key": f"faulty{mode}"}


def test_a_prestarted_cuda_harness_is_taken_over_and_judges_as_its_own(tmp_path):
    """On the GPU as on the CPU (tests/test_prestart.py): the harness started before Ray, its
    CUDA context made, is adopted by the device actor's sandbox after the token handshake (its
    hello proves the token) and judges a candidate `ok`; one that faults the context (an
    illegal address) is `crashed`,
    and the sandbox then starts a harness of its own, which judges the next one `ok`. (A peer
    without the token is refused by the socket, whatever the device: tests/test_prestart.py.)"""
    from workers.prestart import Prestarter

    pre = Prestarter("cuda", ["0"])
    sb = Sandbox("cuda")
    try:
        p = pre.started["0"]
        assert p.token and sb.adopt(p) and sb.adopted and sb.pid == p.pid
        assert sb.info["backend"] == "cuda" and sb.info["multiprocessors"] > 1
        ok = sb.run(_faulty_cuda_job(tmp_path, 0), timeout_s=30)
        assert ok["status"] == "ok" and ok["max_abs_err"] == 0.0, ok.get("error")
        assert sb.pid == p.pid and sb.restarts == 0
        crash = sb.run(_faulty_cuda_job(tmp_path, 2), timeout_s=30)
        assert crash["status"] == "crashed" and "illegal" in crash["error"], crash.get("error")
        again = sb.run(_faulty_cuda_job(tmp_path, 0), timeout_s=30)
        assert again["status"] == "ok" and sb.pid not in (None, p.pid) and sb.restarts == 1
    finally:
        sb.close()
        pre.close()


def test_the_plausibility_gate_is_armed_on_the_gpu(ray_local, tmp_path, monkeypatch):
    """The DRAM peak kopt judges a GPU row against is found for the real device (its NVML
    name in kopt.run.devices.PEAKS: 4800 GB/s on an H200), and honest vector_add rows stay
    under it; with the peak said to be 1 GB/s, every row of the same sweep is `suspect` with
    the gate's line and none is named best. At N = 2^24 (64 MB arrays, past the L2: every
    row's figure is DRAM's; the sweep's 2^26 took 148 s on an H100 host,
    docs/verified/2026-12-06-session47.md)."""
    from kopt.core.spec import load_sweep
    from kopt.driver import sweep as driver
    from kopt.store.database import query

    sw = load_sweep(vector_add_at(tmp_path, 1 << 24))
    honest = tmp_path / "honest"
    s = driver.run_sweep(sw, honest, backend="cuda", max_candidates=2)
    assert s.status_counts == {"ok": 2}
    _, ref = query("select device_name, peak_gbps from reference", honest)
    assert ref and all(peak and peak >= 3000 for _, peak in ref), ref
    if any("H200" in (name or "") for name, _ in ref):
        assert {peak for _, peak in ref} == {4800.0}
    monkeypatch.setattr(driver, "peaks", lambda name, dtype: (None, 1.0))
    gated = tmp_path / "gated"
    s = driver.run_sweep(sw, gated, backend="cuda", max_candidates=2)
    assert s.status_counts == {"suspect": 2}
    _, rows = query("select status, error from candidates", gated)
    assert all(st == "suspect" and "above the device's DRAM peak of 1 GB/s" in err
               for st, err in rows), rows
