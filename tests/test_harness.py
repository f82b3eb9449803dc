"""The sandboxed harness without Ray: correctness check, timing, and faults as outcomes."""

import dataclasses
import math
import os
import shutil

import pytest

from conftest import FIXTURES, write_sweep
from kopt.core.contract import parse_signature_file
from workers import build as wb
from workers.sandbox import Sandbox

TIMING = {"warmup_ms": 5, "min_samples": 5, "max_samples": 15, "max_time_ms": 500,
          "target_rel_error": 0.01, "timeout_s": 10}


def artifact(tmp_path, src, mode, name="faulty.cpp"):
    job = wb.BuildJob(f"t{mode}-{abs(hash(src)) % 10**8}", "cpu", src.read_text(), name,
                      str(src.parent), {"MODE": mode})
    res, data = wb.build(job, cache=tmp_path)
    assert res.ok, res.error
    return str(wb.ensure_artifact(job.build_id, data, cache=tmp_path))


def job(art, src, ref, **kw):
    sig = [dataclasses.asdict(a) for a in parse_signature_file(src).args]
    return {"artifact": art, "signature": sig, "reference": str(ref), "dims": {"N": 4096},
            "seed": 3, "args": {"x": ["N"]}, "scalars": {},
            "tolerance": {"atol": 1e-6, "rtol": 1e-6}, "timing": TIMING, **kw}


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    sb.start()
    yield sb
    sb.close()


def test_faults_are_outcomes_and_the_sandbox_recovers(tmp_path, sandbox):
    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    out = {m: sandbox.run(job(artifact(tmp_path, src, m), src, ref), timeout_s=5)
           for m in (0, 1, 2, 3, 4, 0)}
    ok = out[0]
    assert ok["status"] == "ok" and ok["max_abs_err"] == 0.0
    assert 5 <= ok["n_samples"] <= 15 and len(ok["samples_ms"]) == ok["n_samples"]
    assert ok["min_ms"] <= ok["median_ms"] and ok["iqr_ms"] >= 0
    assert out[1]["status"] == "wrong_result"
    assert "1 of 4096 elements differ (first at (2048,)" in out[1]["error"]
    assert out[1]["max_abs_err"] == pytest.approx(1.0)
    assert out[2]["status"] == "crashed" and "SIGSEGV" in out[2]["error"]
    assert out[3]["status"] == "timeout" and "no answer within 5 s" in out[3]["error"]
    assert out[4]["status"] == "crashed" and "SIGABRT" in out[4]["error"]
    assert sandbox.restarts == 3


def test_a_go_between_jobs_is_skipped(tmp_path, sandbox):
    """The sandbox sends "go" only to a clock job waiting for it (the outside clock's
    start); one that reaches the harness between jobs (a clock job that failed before it
    waited) is skipped, and the next job is served by the same harness as usual."""
    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    j = job(artifact(tmp_path, src, 0), src, ref)
    assert sandbox.run(j, timeout_s=10)["status"] == "ok"
    pid, restarts = sandbox.pid, sandbox.restarts
    sandbox.w.send(("go", None))
    res = sandbox.run(j, timeout_s=10)
    assert res["status"] == "ok" and res["max_abs_err"] == 0.0, res
    assert (sandbox.pid, sandbox.restarts) == (pid, restarts)


def test_unwritten_output_never_passes(tmp_path, sandbox):
    d = write_sweep(tmp_path / "lazy", "kernel: k.cpp\ndims: [{N: 8}]\n", {
        "k.cpp": 'extern "C" void solve(const float* x, float* y, int N) {'
                 ' for (int i = 0; i < N - 1; ++i) y[i] = 2 * x[i]; }',
        "ref.py": "def reference(x, N):\n    return 2 * x\n"})
    res = sandbox.run(job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp",
                          d / "ref.py"), timeout_s=10)
    assert res["status"] == "wrong_result"
    assert "got nan" in res["error"] and res["max_abs_err"] == float("inf")


def test_an_output_with_a_band_of_its_own_is_checked_by_it(tmp_path, sandbox):
    """tolerance.outputs: y's error of 1e-4 relative lies in the sweep's band (rtol 1e-3) and
    fails y's own exact band, in the check and (the same candidate passing) in the samples'
    verification; z keeps the sweep's band."""
    d = write_sweep(tmp_path / "two", "kernel: k.cpp\ndims: [{N: 64}]\n", {
        "k.cpp": 'extern "C" void solve(const float* x, float* y, float* z, int N) {'
                 ' for (int i = 0; i < N; ++i) { y[i] = x[i] * 1.0001f; z[i] = x[i]; } }',
        "ref.py": "def reference(x, N):\n    return {'y': x.double(), 'z': x.double()}\n"})
    art = artifact(tmp_path, d / "k.cpp", 0, "k.cpp")
    wide = {"atol": 0.0, "rtol": 1e-3}
    base = job(art, d / "k.cpp", d / "ref.py", dims={"N": 64}, args={"x": ["N"]})
    ok = sandbox.run({**base, "tolerance": wide}, timeout_s=10)
    assert ok["status"] == "ok" and 0 < ok["max_abs_err"] < 1e-3
    exact_y = {**wide, "outputs": {"y": {"atol": 0.0, "rtol": 0.0}}}
    bad = sandbox.run({**base, "tolerance": exact_y}, timeout_s=10)
    assert bad["status"] == "wrong_result"
    assert bad["error"].startswith("y: 64 of 64 elements differ") and "z:" not in bad["error"]
    exact_z = {**wide, "outputs": {"z": {"atol": 0.0, "rtol": 0.0}}}
    assert sandbox.run({**base, "tolerance": exact_z}, timeout_s=10)["status"] == "ok"


def test_reference_problems_are_reported(tmp_path, sandbox):
    d = write_sweep(tmp_path / "zeros", "kernel: k.cpp\ndims: [{N: 8}]\n", {
        "k.cpp": 'extern "C" void solve(const float* x, float* y, int N) {}',
        "ref.py": "import torch\n"
                  "def inputs(seed, N):\n    return {'x': torch.zeros(N)}\n"
                  "def reference(x, N):\n    return x\n"})
    res = sandbox.run(job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp",
                          d / "ref.py"), timeout_s=10)
    assert res["status"] == "error" and "input 'x' is all zeros" in res["error"]


def test_contract_breaches_are_caught_and_inputs_restored(tmp_path, sandbox):
    d = write_sweep(tmp_path / "bad", "kernel: k.cpp\ndims: [{N: 64}]\n", {
        "k.cpp": '#ifndef MODE\n#define MODE 0\n#endif\n'
                 'extern "C" void solve(const float* x, float* y, int N) {\n'
                 '  for (int i = 0; i < N; ++i) y[i] = 2 * x[i];\n'
                 '  if (MODE == 1) const_cast<float*>(x)[0] = 7.0f;  // writes a const input\n'
                 '  if (MODE == 2) y[N + 5] = 1.0f;                   // past the end\n}\n',
        "ref.py": "def reference(x, N):\n    return 2 * x\n"})
    src, ref = d / "k.cpp", d / "ref.py"
    outs = [sandbox.run(job(artifact(tmp_path, src, m, "k.cpp"), src, ref, dims={"N": 64}),
                        timeout_s=10) for m in (1, 0, 2, 0)]
    assert outs[0]["status"] == "wrong_result"
    assert "wrote to its const input 'x'" in outs[0]["error"]
    assert outs[1]["status"] == "ok"  # the next candidate got pristine inputs
    assert outs[2]["status"] == "wrong_result" and "past the end of output 'y'" in outs[2]["error"]
    assert outs[3]["status"] == "ok"


def test_nan_in_the_reference_is_the_references_fault(tmp_path, sandbox):
    d = write_sweep(tmp_path / "nanref", "kernel: k.cpp\ndims: [{N: 8}]\n", {
        "k.cpp": 'extern "C" void solve(const float* x, float* y, int N) {}',
        "ref.py": "def reference(x, N):\n    y = 2 * x\n    y[3] = float('nan')\n    return y\n"})
    res = sandbox.run(job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp",
                          d / "ref.py", prepare_only=True), timeout_s=10)
    assert res["status"] == "error" and "reference output 'y' contains NaN" in res["error"]


class _ThrottledNvml:
    """NVML stand-in for the CPU backend: reports SW thermal slowdown (0x20) for the first
    ``n_hot`` readings, then a clean clock (the harness reads it before and after a batch)."""

    def __init__(self, n_hot: int):
        self.n, self.n_hot = 0, n_hot

    def sample(self) -> dict:
        self.n += 1
        hot = self.n <= self.n_hot
        return {"sm_clock_mhz": 1200.0 if hot else 1980.0, "temperature_c": 80.0,
                "throttle_reasons": 0x20 if hot else 0x1}


def test_throttled_batches_are_set_aside_and_remeasured(tmp_path):
    from workers.harness import Harness
    from workers.observers import NvmlObserver

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    h = Harness("cpu")
    j = job(artifact(tmp_path, src, 0), src, ref)
    batches, samples = [], h.samples
    # each batch's picks, and the seen sets: those past them are never-seen ones
    h.samples = lambda calls, d, flush, picks=None: (batches.append((picks, len(d.sets))),
                                                     samples(calls, d, flush, picks))[1]
    # the first two batches (5 calls each, samples and calls on never-seen sets) are throttled
    h.observers = [NvmlObserver(_ThrottledNvml(n_hot=4))]
    res = h.run(j)
    new = sum(k >= n for b, n in batches[:2] for k in b)
    assert len(batches[0][0]) == len(batches[1][0]) == 5
    assert res["status"] == "ok" and res["throttled_samples"] == 10 - new
    assert not res["throttled"]
    assert res["n_samples"] >= TIMING["min_samples"] and res["throttle_reasons"] == 0x21
    h.observers = [NvmlObserver(_ThrottledNvml(n_hot=10**6))]  # throttled throughout: flagged
    res = h.run(j)
    assert res["throttled"] and res["throttled_samples"] == res["n_samples"] > 0
    assert res["sm_clock_mhz"] == 1200.0 and res["power_w"] is None  # the stand-in has none


def _timed_calls(res: dict) -> int:
    """The timed calls of a job's outcome: its samples, those past them or before a split
    (workers.replay ``split_after``) that are not the figure, and its calls on never-seen
    sets."""
    n = res["timed_calls"]
    assert n >= res["n_samples"] + res.get("split_at", 0) + len(res["unseen_ms"])
    return n


def test_the_cache_flush_runs_before_every_sample_unless_turned_off(tmp_path):
    """Before every sample and every call on a never-seen set (workers.replay)."""
    from workers.harness import Harness

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    h = Harness("cpu")
    real, flushed = h.flush, []
    h.flush = lambda buf: (flushed.append(buf), real(buf))
    art = artifact(tmp_path, src, 0)
    for flush in (True, False):
        flushed.clear()
        res = h.run(job(art, src, ref, timing={**TIMING, "flush": flush}))
        assert res["status"] == "ok" and res["n_samples"] >= TIMING["min_samples"]
        assert len(flushed) == (_timed_calls(res) if flush else 0)
        d = next(iter(h.data.values()))
        assert all(b is d.bufs[0] for b in flushed)  # the buffers the timed call gets


def test_the_cpu_flush_evicts_every_line_of_the_candidates_buffers(tmp_path, monkeypatch):
    """No buffer of twice the last-level cache (600 MB on a VM whose L3 reads 300 MB): the
    flush writes back and invalidates every cache line of the storages the timed call gets
    (each input copy, each output with its canary elements), and nothing else."""
    from workers import native
    from workers.harness import GUARD, Harness

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    h = Harness("cpu")
    assert h.native is not None and h.flush_buf is None, native.WHY_NOT
    seen: list[list[tuple[int, int]]] = []
    real = native.evict
    monkeypatch.setattr(native, "evict", lambda rs: (seen.append(list(rs)), real(seen[-1]))[1])
    res = h.run(job(artifact(tmp_path, src, 0), src, ref))
    assert res["status"] == "ok" and len(seen) == _timed_calls(res)
    b = next(iter(h.data.values())).bufs[0]
    want = sorted({(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
                   for t in [*b.inputs.values(), *b.outputs.values()]})
    assert all(rs == want for rs in seen)
    outs = list(b.outputs.values())
    for t in outs:  # each output and its canary inside an evicted range
        end = t.data_ptr() + (t.numel() + GUARD) * t.element_size()
        assert any(p <= t.data_ptr() and end <= p + n for p, n in want)
    # the outputs share one arena of pages of their own (workers.harness._OutputArena):
    # what is evicted beyond them is at most that arena's page padding
    arena = {t.untyped_storage().data_ptr() for t in outs}
    assert len(arena) == 1
    used = sum(-(-(t.numel() + GUARD) * t.element_size() // 64) * 64 for t in outs)
    assert outs[0].untyped_storage().nbytes() <= used + 2 * os.sysconf("SC_PAGE_SIZE")
    assert Harness("cpu").flush_buf is None


def test_a_flushed_sample_loads_its_buffers_by_streaming_stores(tmp_path, monkeypatch):
    """Before a flushed sample the inputs are copied and the outputs poisoned by stores that
    bypass the caches (workers.native ``stream_copy``/``stream_fill``), then evicted as
    before: each timed call streams every input and every output with its canaries. A job
    with the flush turned off loads with plain stores (its inputs are meant to be warm)."""
    from workers import native
    from workers.harness import Harness

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    h = Harness("cpu")
    copied, filled = [], []
    real_copy, real_fill = native.stream_copy, native.stream_fill
    monkeypatch.setattr(native, "stream_copy",
                        lambda d, s: (copied.append(d.data_ptr()), real_copy(d, s))[1])
    monkeypatch.setattr(native, "stream_fill", lambda d, v, as_bytes=False: (
        filled.append(d.data_ptr()), real_fill(d, v, as_bytes))[1])
    art = artifact(tmp_path, src, 0)
    res = h.run(job(art, src, ref))
    assert res["status"] == "ok"
    b = next(iter(h.data.values())).bufs[0]
    assert copied == [b.inputs["x"].data_ptr()] * _timed_calls(res)
    assert sorted(set(filled)) == sorted({b.outputs["y"].data_ptr(), b.guards["y"].data_ptr()})
    assert len(filled) == 2 * _timed_calls(res)
    copied.clear()
    filled.clear()
    res = h.run(job(art, src, ref, timing={**TIMING, "flush": False}))
    assert res["status"] == "ok" and copied == [] and filled == []


def test_streaming_stores_keep_the_values_at_any_alignment():
    """``stream_copy`` copies every byte and ``stream_fill`` writes the element's NaN (or a
    byte) to every element, whatever the start's alignment, touching nothing around."""
    import torch

    from workers import native

    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32):
        for off in (0, 1, 3, 7, 9):
            base = torch.zeros(1003 + off, dtype=dt)
            t = base[off:]
            src = (torch.arange(1003) % 97 + 1).to(dt)
            native.stream_copy(t, src)
            assert torch.equal(t, src) and not base[:off].any()
            native.stream_fill(t, 0x5A, as_bytes=True)
            assert bool((t.view(torch.uint8) == 0x5A).all()) and not base[:off].any()
            if dt.is_floating_point:
                native.stream_fill(t, float("nan"))
                assert bool(t.isnan().all()) and not base[:off].any()
    with pytest.raises(ValueError, match="contiguous CPU tensors of one size"):
        native.stream_copy(torch.zeros(4), torch.zeros(5))


def test_an_output_page_protected_by_the_candidate_is_made_readable_again():
    """After a timed call the harness makes the outputs' pages readable and writable again
    (``Harness.reopen``: one mprotect) rather than probing every page: a page the candidate
    protected then holds the poison, and the verification's read cannot fault into the
    candidate's handler."""
    import ctypes

    import torch

    from workers.harness import Buffers, Harness, _OutputArena, _unreadable_at

    page = os.sysconf("SC_PAGE_SIZE")
    out = _OutputArena([(4 * page, torch.float32)]).take()
    ptr = out.data_ptr() - out.data_ptr() % page + page  # a page wholly inside the output
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(ptr), ctypes.c_size_t(page), 0) == 0  # PROT_NONE
    assert _unreadable_at(ptr, page)
    h = Harness("cpu")
    assert h.reopen(Buffers({}, {"y": out}, {})) == ""
    assert not _unreadable_at(ptr, page)
    out.fill_(2.0)
    assert bool((out == 2.0).all())


def test_eviction_keeps_the_values_and_a_machine_without_a_compiler_zeroes_the_llc(
        monkeypatch):
    """Evicting writes modified lines back first: the values survive. Without a C compiler
    the harness falls back to zeroing twice the last-level cache, and says so."""
    import shutil

    import torch

    from workers import native
    from workers.harness import Harness, _llc_bytes, device_info

    x = torch.arange(1 << 20, dtype=torch.float32)
    x += 1  # dirty lines
    assert native.evict(native.storage_ranges([x, x[5:]])) == x.numel() * 4  # one storage
    assert torch.equal(x, torch.arange(1 << 20, dtype=torch.float32) + 1)
    assert native.library().kopt_line_bytes() in (32, 64, 128, 256)
    monkeypatch.setattr(native, "_LIB", [])
    monkeypatch.setattr(shutil, "which", lambda _c: None)
    h = Harness("cpu")
    assert h.native is None and h.flush_buf.numel() == max(2 * _llc_bytes(), 1 << 20)
    assert "no C compiler on the PATH" in device_info(h)["cpu_flush"]


def test_a_contest_times_contenders_side_by_side(tmp_path):
    """Two builds of the same kernel, interleaved in one process: every contender gets the
    same number of samples, and a wrong one fails the contest instead of being timed."""
    from workers.harness import Harness

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    h = Harness("cpu")
    ok, wrong = artifact(tmp_path, src, 0), artifact(tmp_path, src, 1)
    entries = [job(ok, src, ref, job_key="a"), job(ok, src, ref, job_key="b")]
    res = h.run({**entries[0], "contest": entries, "rounds": 12})
    assert res["status"] == "ok" and len(res["results"]) == 2
    assert [r["n_samples"] for r in res["results"]] == [12, 12]
    assert all(r["median_ms"] > 0 and len(r["samples_ms"]) == 12 for r in res["results"])
    entries[1] = job(wrong, src, ref, job_key="b")
    res = h.run({**entries[0], "contest": entries, "rounds": 12})
    assert res["status"] == "wrong_result" and res["error"].startswith("b: ")


def test_what_a_refusing_kernel_prints_is_in_the_error(tmp_path, sandbox):
    """A solve that refuses the sizes (sgemm.cu's whole-tile check) leaves the output
    unwritten and says why on stderr: the wrong_result error carries that text."""
    d = write_sweep(tmp_path / "refuse", "kernel: k.cpp\ndims: [{N: 8}]\n", {
        "k.cpp": '#include <cstdio>\nextern "C" void solve(const float* x, float* y, int N) {'
                 ' if (N % 3) { fprintf(stderr, "k.cpp: needs N %% 3 == 0 (got N=%d)\\n", N);'
                 ' return; } for (int i = 0; i < N; ++i) y[i] = 2 * x[i]; }',
        "ref.py": "def reference(x, N):\n    return 2 * x\n"})
    res = sandbox.run(job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp",
                          d / "ref.py"), timeout_s=10)
    assert res["status"] == "wrong_result"
    assert "the kernel printed: k.cpp: needs N % 3 == 0 (got N=4096)" in res["error"], res["error"]


def test_unsigned_buffers_and_scalars_have_their_real_width(tmp_path):
    """`unsigned*` buffers were int64 tensors (8 bytes per 4-byte element: wrong
    results) and an `unsigned` scalar above 2**31 was checked as int64. A real g++ build of
    a solve over unsigned buffers and an unsigned scalar of 3e9 passes the check."""
    from workers.harness import Harness

    d = write_sweep(tmp_path / "uns", "kernel: k.cpp\ndims: [{N: 64}]\n", {
        "k.cpp": 'extern "C" void solve(const unsigned* x, unsigned* y, unsigned k, int N) {'
                 ' for (int i = 0; i < N; ++i) y[i] = x[i] * k + 1u; }',
        "ref.py": "import torch\n"
                  "def inputs(seed, N):\n"
                  "    g = torch.Generator().manual_seed(seed)\n"
                  "    return {'x': torch.randint(1, 1000, (N,), generator=g,"
                  " dtype=torch.uint32)}\n"
                  "def reference(x, k, N):\n"
                  "    return (x.long() * k + 1) % 2**32\n"})
    src = d / "k.cpp"
    h = Harness("cpu")
    res = h.run(job(artifact(tmp_path, src, 0, "k.cpp"), src, d / "ref.py", dims={"N": 64},
                    args={}, scalars={"k": 3_000_000_000}, check_only=True))
    assert res["status"] == "ok", res["error"]
    assert res["max_abs_err"] == 0.0


HALF_SOURCE = """
    #include <cstdint>
    #include <cstring>
    {typedefs}
    static float widen_bf16(bfloat16 b) {{ uint32_t u = (uint32_t)BITS(b) << 16; float f;
                                          std::memcpy(&f, &u, 4); return f; }}
    extern "C" void solve(const float* x, half a, bfloat16 b, float* y, int N) {{
      for (int i = 0; i < N; ++i) y[i] = x[i] * HALF2FLOAT(a) + widen_bf16(b);
    }}
"""


def _call_half_solve(path: str, src, backend: str) -> list[float]:
    """Call a HALF_SOURCE build with a = 1/3, b = 0.1 through the ctypes argtypes that
    workers.ctypes_map.scalar_ctype gives (what workers.harness.Harness.lib sets)."""
    import ctypes

    import torch

    from kopt.core.contract import parse_signature_file
    from workers.ctypes_map import scalar_ctype

    lib = ctypes.CDLL(path)
    sig = parse_signature_file(src)
    assert [a.ctype for a in sig.scalars] == ["half", "bfloat16", "int"]
    lib.solve.argtypes = [ctypes.c_void_p if a.is_pointer else scalar_ctype(a.ctype, backend)
                          for a in sig.args]
    x, y = torch.arange(1, 5, dtype=torch.float32), torch.zeros(4)
    lib.solve(x.data_ptr(), 1 / 3, 0.1, y.data_ptr(), 4)
    return y.tolist()


def test_half_and_bfloat16_scalars_reach_a_real_cpu_build(tmp_path):
    """`half`/`bfloat16` scalars failed every candidate with a ctypes
    ArgumentError. On the CPU, `half` is `_Float16` (a floating register) and `bfloat16` a
    uint16_t holding the bits; the kernel sees exactly torch's float16/bfloat16 values."""
    import torch

    src = tmp_path / "k.cpp"
    src.write_text(HALF_SOURCE.format(typedefs="typedef _Float16 half; typedef uint16_t "
                                      "bfloat16;\n#define BITS(b) (b)\n#define HALF2FLOAT(a)"
                                      " ((float)(a))"))
    job_ = wb.BuildJob("half-cpu", "cpu", src.read_text(), "k.cpp", str(tmp_path), {})
    res, data = wb.build(job_, cache=tmp_path)
    assert res.ok, res.error
    got = _call_half_solve(str(wb.ensure_artifact(job_.build_id, data, cache=tmp_path)), src, "cpu")
    a = torch.tensor(1 / 3, dtype=torch.float16).item()
    b = torch.tensor(0.1, dtype=torch.bfloat16).item()
    assert got == [i * a + b for i in (1.0, 2.0, 3.0, 4.0)]
    assert a == 0.333251953125 and b == 0.10009765625


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_half_and_bfloat16_scalars_reach_a_real_nvcc_build(tmp_path):
    """The same through nvcc's host code, where `__half`/`__nv_bfloat16` are structs of one
    unsigned short (integer registers). Built for sm_90; the host function runs on any
    machine."""
    import torch

    src = tmp_path / "k.cu"
    src.write_text(HALF_SOURCE.format(typedefs="#include <cuda_fp16.h>\n#include <cuda_bf16.h>"
                                      "\ntypedef __half half; typedef __nv_bfloat16 bfloat16;"
                                      "\n#define BITS(b) __bfloat16_as_ushort(b)\n"
                                      "#define HALF2FLOAT(a) __half2float(a)"))
    job_ = wb.BuildJob("half-cuda", "cuda", src.read_text(), "k.cu", str(tmp_path), {},
                       target="sm_90")
    res, data = wb.build(job_, cache=tmp_path)
    assert res.ok, res.error
    got = _call_half_solve(str(wb.ensure_artifact(job_.build_id, data, cache=tmp_path)), src,
                           "cuda")
    a = torch.tensor(1 / 3, dtype=torch.float16).item()
    b = torch.tensor(0.1, dtype=torch.bfloat16).item()
    assert got == [i * a + b for i in (1.0, 2.0, 3.0, 4.0)]


def test_an_edited_ref_py_is_read_again_by_a_warm_harness(tmp_path, sandbox):
    """A warm device (kopt serve) keeps its harness between sweeps: a ref.py edited since
    it was last imported is imported again, its reference outputs made again."""
    d = tmp_path / "edited"
    shutil.copytree(FIXTURES / "faulty", d)
    ref, src = d / "ref.py", d / "faulty.cpp"
    art = artifact(tmp_path, src, 0)
    assert sandbox.run(job(art, src, ref), timeout_s=10)["status"] == "ok"
    ref.write_text("def reference(x, N):\n    return (3.0 * x.double()).float()\n")
    os.utime(ref, ns=(ref.stat().st_atime_ns, ref.stat().st_mtime_ns + 10**9))
    again = sandbox.run(job(art, src, ref), timeout_s=10)
    assert again["status"] == "wrong_result", again


def test_warm_up_by_time_only_after_the_device_idled(tmp_path):
    """timing.warmup_ms is spent when the device was idle before the job (its first job, or
    more than IDLE_WARM_S since the last); a job sent back to back warms with two calls."""
    from workers.harness import IDLE_WARM_S, Harness

    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    j = job(artifact(tmp_path, src, 0), src, ref,
            timing={**TIMING, "warmup_ms": 200, "max_time_ms": 50})
    h = Harness("cpu")
    first = h.run(j)  # a new harness: idle since forever
    h.idle_s = IDLE_WARM_S / 10
    busy = h.run(j)
    h.idle_s = IDLE_WARM_S * 2
    idled = h.run(j)
    assert first["status"] == busy["status"] == idled["status"] == "ok"
    assert busy["warmup_runs"] == 2
    # 200 ms of calls of a ~4096-element add: far more than two
    assert first["warmup_runs"] > 20 and idled["warmup_runs"] > 20


def test_sandbox_jobs_back_to_back_skip_the_timed_warm_up(tmp_path):
    """The harness process measures the idle gap itself (workers.harness.main): its first
    job warms up by time, the next one, sent at once, with two calls."""
    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    j = job(artifact(tmp_path, src, 0), src, ref,
            timing={**TIMING, "warmup_ms": 200, "max_time_ms": 50})
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    sb.start()
    try:
        first, second = sb.run(j, timeout_s=10), sb.run(j, timeout_s=10)
    finally:
        sb.close()
    assert first["warmup_runs"] > 20 and second["warmup_runs"] == 2


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_the_one_pass_check_agrees_with_torch_on_every_edge_value(dtype):
    """workers.native's compare and all-close test give what the torch path gives (isclose
    with equal_nan=False; |got - exp| with NaN as infinite and equal infinities as 0) on
    NaN, both infinities, zeros, subnormals and values at the tolerance's edge."""
    import torch

    from workers import native
    from workers.harness import _abs_diff, abs_rel_error

    dt = getattr(torch, dtype)
    inf, nan = math.inf, math.nan
    tiny = torch.finfo(dt).tiny / 4
    e = torch.tensor([1.0, 1.0, 0.0, inf, inf, -inf, nan, 2.0, 1e-3, tiny, -5.0, 3.0, 0.0,
                      1e30], dtype=dt)
    g = torch.tensor([1.0, 1.0 + 2e-5, 1e-6, inf, 1e30, inf, nan, nan, 1e-3 + 1.1e-8, 0.0,
                      -5.0 - 5e-5, -inf, -0.0, 1e30 * (1 + 1e-6)], dtype=dt)
    atol, rtol = 1e-8, 1e-5
    c = native.compare(g, e, atol, rtol)
    ok = torch.isclose(g.double(), e.double(), rtol=rtol, atol=atol, equal_nan=False)
    assert c.bad == int((~ok).sum()) and c.bad > 3
    assert c.first == int((~ok).nonzero()[0])
    assert c.max_abs == float(_abs_diff(g.double(), e.double()).max()) == inf
    assert c.max_rel == abs_rel_error(g, e)[1]
    fine = torch.tensor([1.0, 2.0, -3.0], dtype=dt)
    c = native.compare(fine + 1e-6, fine, 0.0, 1e-5)
    assert c.bad == 0 and c.first == -1
    assert c.max_abs == pytest.approx(float(((fine + 1e-6).double() - fine.double()).abs().max()))
    assert native.all_close(g, e, atol, rtol) is False
    for i in range(len(e)):  # element by element, and each placed in a long array
        want = bool(ok[i])
        assert native.all_close(g[i:i + 1], e[i:i + 1], atol, rtol) is want
        big_g, big_e = torch.ones(10_000, dtype=dt), torch.ones(10_000, dtype=dt)
        big_g[7777], big_e[7777] = g[i], e[i]
        assert native.all_close(big_g, big_e, atol, rtol) is want
    with pytest.raises(ValueError, match="contiguous CPU tensors of one size: float32, "
                       "float64, bfloat16 or float16 outputs, expected values of their dtype "
                       "or float64"):
        native.compare(g.double(), e.float(), atol, rtol)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_one_pass_check_widens_every_16_bit_value_as_torch_does(dtype):
    """workers.native reads bfloat16 and float16 outputs itself (the judge's check of a
    bfloat16 problem of 16 M elements took 5.2 s of a CPU contest through torch's float64
    copies): each of the 65 536 bit patterns, against its neighbour one bit away, gives
    torch's verdict, differences and relative errors exactly (subnormals, both
    infinities, NaN among them)."""
    import torch

    from workers import native
    from workers.harness import abs_rel_error

    dt = getattr(torch, dtype)
    every = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(dt)
    near = (torch.arange(65536, dtype=torch.int32) ^ 1).to(torch.int16).view(dt)
    for atol, rtol in ((0.0, 0.0), (1e-3, 1e-2), (0.0, 2.0 ** -7)):
        c = native.compare(every, near, atol, rtol)
        ok = torch.isclose(every.double(), near.double(), rtol=rtol, atol=atol,
                           equal_nan=False)
        assert (c.bad, c.first) == (int((~ok).sum()), int((~ok).nonzero()[0]))
        assert native.all_close(every, near, atol, rtol) is False
        assert native.all_close(every[ok], near[ok], atol, rtol) is True
    finite = torch.isfinite(every.double()) & torch.isfinite(near.double())
    g, e = every[finite].contiguous(), near[finite].contiguous()
    c = native.compare(g, e, 0.0, 0.0)
    assert c.max_abs == float((g.double() - e.double()).abs().max())
    assert c.max_rel == abs_rel_error(g.double(), e.double())[1] > 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_one_pass_check_takes_outputs_against_a_float64_reference(dtype):
    """Outputs of float32, bfloat16 or float16 against expected values in float64 (a
    reference computed in float64, as the decode sweeps' are) are checked in one pass with
    torch's verdict, first failing element and errors; an output rounded once to its dtype
    is close, one a few of its ulps off is not."""
    import torch

    from workers import native
    from workers.harness import abs_rel_error

    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(7)
    exp = torch.randn(50_003, dtype=torch.float64, generator=gen) * 3
    exp[11], exp[12] = math.inf, 0.0
    got = exp.to(dt)  # one rounding: within rtol of 2 ulps of its dtype
    rtol = 2.0 * torch.finfo(dt).eps
    assert native.native_dtype(got, exp) == {"float32": "f32", "bfloat16": "bf16",
                                             "float16": "f16"}[dtype] + "_f64"
    assert native.all_close(got, exp, 0.0, rtol) is True
    got[30_001] = (exp[30_001] * (1 + 4 * rtol)).to(dt)
    got[40_000] = math.nan
    for g in (got, got.clone()):
        c = native.compare(g, exp, 0.0, rtol)
        ok = torch.isclose(g.double(), exp, rtol=rtol, atol=0.0, equal_nan=False)
        assert (c.bad, c.first) == (int((~ok).sum()), int((~ok).nonzero()[0])) == (2, 30_001)
        assert c.max_abs == math.inf and native.all_close(g, exp, 0.0, rtol) is False
    fine = ~torch.isnan(got.double()) & torch.isfinite(exp)
    c = native.compare(got[fine].contiguous(), exp[fine].contiguous(), 0.0, rtol)
    assert c.max_rel == abs_rel_error(got[fine].double(), exp[fine])[1]


def test_cpu_outputs_lie_in_pages_of_their_own():
    """A candidate that protects the pages between its outputs (attack MODE 2) protected
    other objects of the heap as well, with each output an allocation of its own: a read of
    one of them by the harness set its fault handler off before the check (3 of 16 jobs
    beside a CPU hog). The outputs now share one page-aligned arena: every page from the
    first output's start to the last canary's end belongs to the arena's allocation."""
    import torch

    from workers.harness import _OutputArena

    page = os.sysconf("SC_PAGE_SIZE")
    a = _OutputArena([(1000 + 4096, torch.float32), (7 + 4096, torch.float64),
                      (3, torch.int8), (5, torch.bool)])
    outs = [a.take() for _ in range(4)]
    assert [t.dtype for t in outs] == [torch.float32, torch.float64, torch.int8, torch.bool]
    assert [t.numel() for t in outs] == [5096, 4103, 3, 5]
    assert all(t.data_ptr() % 64 == 0 for t in outs)
    lo = outs[0].data_ptr() - outs[0].data_ptr() % page
    hi = max(t.data_ptr() + t.numel() * t.element_size() for t in outs)
    hi = -(-hi // page) * page
    s = outs[0].untyped_storage()
    assert all(t.untyped_storage().data_ptr() == s.data_ptr() for t in outs)
    assert s.data_ptr() <= lo and hi <= s.data_ptr() + s.nbytes()
    outs[1].fill_(3.5)
    outs[0].fill_(1.0)  # side by side, not overlapping
    assert outs[1].eq(3.5).all() and outs[0].eq(1.0).all()


STRESS_REF = """import torch
def inputs(seed, N):
    g = torch.Generator().manual_seed(seed)
    return {'x': torch.rand(N, generator=g) - 0.5}
def stress_inputs(seed, N):
    g = torch.Generator().manual_seed(seed)
    return {'x': torch.randn(N, generator=g) * torch.exp(3 * torch.randn(N, generator=g))}
def reference(x, N):
    return 2 * x
"""


def test_a_contest_checks_its_contenders_on_the_second_distribution(tmp_path):
    """A kernel that is only right for the values inputs() draws (here it clamps to +-100,
    which uniform inputs in [-0.5, 0.5) never reach) passed every check and could be named
    best. Where ref.py defines stress_inputs() (heavy-tailed, real magnitudes), a contest
    checks each contender on two sets of it before timing: the clamping one fails there,
    named; the honest one passes; without stress_inputs the contest is as before."""
    from conftest import write_sweep
    from workers.harness import Harness

    d = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 4096}]\n", {
        "k.cpp": "#ifndef MODE\n#define MODE 0\n#endif\n"
                 'extern "C" void solve(const float* x, float* y, int N) {\n'
                 "  for (int i = 0; i < N; ++i) {\n"
                 "    float v = 2.f * x[i];\n"
                 "    y[i] = MODE && v > 100.f ? 100.f : MODE && v < -100.f ? -100.f : v;\n"
                 "  }\n}\n",
        "ref.py": STRESS_REF})
    src, ref = d / "k.cpp", d / "ref.py"
    honest, clamps = artifact(tmp_path, src, 0), artifact(tmp_path, src, 1)
    h = Harness("cpu")
    alone = h.run(job(clamps, src, ref, job_key="c"))
    assert alone["status"] == "ok"  # its own job uses inputs() only
    entries = [job(honest, src, ref, job_key="h"), job(clamps, src, ref, job_key="c")]
    res = h.run({**entries[0], "contest": entries, "rounds": 6})
    assert res["status"] == "wrong_result" and res["failed"] == ["c"], res
    assert res["error"].startswith("c: on inputs from ref.py's stress_inputs() (seeds ")
    assert "correct on inputs(): y: " in res["error"] and "elements differ" in res["error"]
    res = h.run({**entries[0], "contest": entries[:1], "rounds": 6})
    assert res["status"] == "ok" and res["results"][0]["n_samples"] == 6
    ref.write_text(STRESS_REF.replace("def stress_inputs", "def _unused"))
    h2 = Harness("cpu")
    res = h2.run({**entries[0], "contest": entries, "rounds": 6})
    assert res["status"] == "ok" and len(res["results"]) == 2


def test_a_contest_checks_its_contenders_at_the_check_dims(tmp_path):
    """A kernel that hard-codes the size it was tuned on (4096) is right there and nowhere
    else, and passed every check. A contest checks each contender at sweep.yaml's
    ``check_dims`` too (here N = 5000, never tuned or timed on): the hard-coded one leaves
    elements unwritten there and is named; the honest one passes."""
    from conftest import write_sweep
    from workers.harness import Harness

    d = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 4096}]\n", {
        "k.cpp": "#ifndef MODE\n#define MODE 0\n#endif\n"
                 'extern "C" void solve(const float* x, float* y, int N) {\n'
                 "  int n = MODE ? 4096 : N;\n"
                 "  for (int i = 0; i < n; ++i) y[i] = 2.f * x[i];\n}\n",
        "ref.py": "def reference(x, N):\n    return 2 * x\n"})
    src, ref = d / "k.cpp", d / "ref.py"
    honest, fixed = artifact(tmp_path, src, 0), artifact(tmp_path, src, 1)
    h = Harness("cpu")
    entries = [job(a, src, ref, job_key=k, check_dims=[{"N": 4096}, {"N": 5000}])
               for a, k in ((honest, "h"), (fixed, "f"))]
    res = h.run({**entries[0], "contest": entries, "rounds": 6})
    assert res["status"] == "wrong_result" and res["failed"] == ["f"], res
    assert res["error"].startswith("f: at dims {'N': 5000} (sweep.yaml check_dims: a problem "
                                   "size it was not tuned on): y: 904 of 5000 elements differ")
    res = h.run({**entries[0], "contest": entries[:1], "rounds": 6})
    assert res["status"] == "ok"
    plain = [{k: v for k, v in e.items() if k != "check_dims"} for e in entries]
    assert h.run({**plain[0], "contest": plain, "rounds": 6})["status"] == "ok"


def test_check_dims_are_problem_sizes_with_the_keys_of_dims(tmp_path):
    from conftest import write_sweep
    from kopt.core.spec import SpecError, load_sweep

    files = {"k.cpp": 'extern "C" void solve(const float* x, float* y, int N) {}\n',
             "ref.py": "def reference(x, N):\n    return 2 * x\n"}
    base = "kernel: k.cpp\ndims: [{N: 4096}]\nargs: {x: [N], y: [N]}\n"
    d = write_sweep(tmp_path / "a", base + "check_dims: [{N: 1000}, {N: 5000}]\n", files)
    assert load_sweep(d).space("cpu").check_dims == [{"N": 1000}, {"N": 5000}]
    assert load_sweep(write_sweep(tmp_path / "b", base, files)).space("cpu").check_dims == []
    d = write_sweep(tmp_path / "c", base + "check_dims: [{M: 3}]\n", files)
    with pytest.raises(SpecError, match=r"check_dims\[0\].*has the keys \['M'\], the problem "
                       r"sizes \['N'\]; give every dim of `dims` and no other"):
        load_sweep(d)
    d = write_sweep(tmp_path / "d", base + "check_dims: [{N: 0}]\n", files)
    with pytest.raises(SpecError, match=r"check_dims\[0\]\.N.*0 is not a problem size"):
        load_sweep(d)


REOPEN_SCRIPT = r"""
import ctypes, os, sys
import torch
from workers.harness import Buffers, Harness, _OutputArena
page = os.sysconf("SC_PAGE_SIZE")
out = _OutputArena([(4 * page, torch.float32)]).take()
out.fill_(3.0)
ptr = out.data_ptr() - out.data_ptr() % page + page  # a page wholly inside the output
libc = ctypes.CDLL(None, use_errno=True)
h = Harness("cpu")
if sys.argv[1] == "pkey":
    key = libc.pkey_alloc(0, 0)
    if key < 0:
        print("unavailable"); sys.exit(0)
    assert libc.pkey_mprotect(ctypes.c_void_p(ptr), ctypes.c_size_t(page), 3, key) == 0
    assert libc.pkey_set(key, 1) == 0  # PKEY_DISABLE_ACCESS on this thread
else:  # MADV_GUARD_INSTALL
    if libc.madvise(ctypes.c_void_p(ptr), ctypes.c_size_t(page), 102) != 0:
        print("unavailable"); sys.exit(0)
if sys.argv[2] == "reopen":
    assert h.reopen(Buffers({}, {"y": out}, {})) == ""
print("sum", float(out.double().sum()))  # reads every page
"""


@pytest.mark.parametrize("how", ["pkey", "guard"])
def test_reopen_undoes_protection_keys_and_guard_regions(tmp_path, how):
    """A candidate's output page made unreadable by a protection key (pkey_mprotect +
    pkey_set: a plain mprotect keeps the key) or a guard region (MADV_GUARD_INSTALL: mprotect
    leaves the marker) faulted into its SIGSEGV handler on the verification's first read,
    which computed the outputs there, outside the timed interval: `ok` at 0.018 ms against
    the honest 0.24 (red team of c0ed74c). ``Harness.reopen`` now clears both: the page
    reads back (its values for a key, zeros for a guard: the saved values are lost), where
    without it the same read dies of SIGSEGV."""
    import subprocess
    import sys

    from conftest import ROOT

    run = [sys.executable, "-c", REOPEN_SCRIPT, how]
    plain = subprocess.run(run + ["none"], cwd=ROOT, capture_output=True, text=True)
    if plain.stdout.strip() == "unavailable":
        pytest.skip(f"this CPU or kernel has no {how} to attack with")
    assert plain.returncode == -11, plain  # the read faults: the attack's hook
    fixed = subprocess.run(run + ["reopen"], cwd=ROOT, capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    n = 4 * os.sysconf("SC_PAGE_SIZE")
    page = os.sysconf("SC_PAGE_SIZE") // 4
    want = 3.0 * n if how == "pkey" else 3.0 * (n - page)
    assert fixed.stdout.split() == ["sum", str(want)]
