"""The fault pack: candidates written to fool the check or the clock, run through
the real harness on the CPU backend. Each test failed on the harness before the fix."""

import dataclasses

import pytest

from conftest import FIXTURES, write_sweep
from kopt.core.contract import parse_signature_file
from workers import build as wb
from workers.harness import Harness
from workers.sandbox import Sandbox

PACK = FIXTURES / "faultpack"
TIMING = {"warmup_ms": 5, "min_samples": 10, "max_samples": 30, "max_time_ms": 400,
          "target_rel_error": 0.02, "timeout_s": 30}


def artifact(cache, src, defines):
    job = wb.BuildJob(f"f{abs(hash((src.read_text(), str(defines)))) % 10**10}", "cpu",
                      src.read_text(), src.name, str(src.parent), defines)
    res, data = wb.build(job, cache=cache)
    assert res.ok, res.error
    return str(wb.ensure_artifact(job.build_id, data, cache=cache))


def job(art, src, ref, dims, args, **kw):
    sig = [dataclasses.asdict(a) for a in parse_signature_file(src).args]
    return {"artifact": art, "signature": sig, "reference": str(ref), "dims": dims, "seed": 3,
            "args": args, "scalars": {}, "tolerance": {"atol": 1e-5, "rtol": 1e-5},
            "timing": TIMING, "job_key": "k", **kw}


def pack_job(tmp_path, mode, **kw):
    src = PACK / "faults.cpp"
    return job(artifact(tmp_path, src, {"MODE": mode}), src, PACK / "ref.py", {"N": 4096},
               {"x": ["N"], "buf": ["N"], "y": ["N"]}, **kw)


@pytest.fixture(scope="module")
def harness():
    return Harness("cpu")


def test_state_kept_between_calls_never_passes(tmp_path, harness):
    """Replaying a saved result, skipping the work for pointers seen before, and working only
    for the first calls were all `ok` (281x) when one input set was checked once and the
    timed calls were never checked."""
    honest = harness.run(pack_job(tmp_path, 0))
    # the check's 2, and 4 more its timed calls cycle through (workers.harness timed_sets)
    assert honest["status"] == "ok" and honest["input_sets"] == 6
    assert honest["n_samples"] >= TIMING["min_samples"]
    replay = harness.run(pack_job(tmp_path, 1))
    assert replay["status"] == "wrong_result"
    assert replay["error"].startswith("input set 2 (seed 4): buf: ")  # the 2nd set
    same_ptr = harness.run(pack_job(tmp_path, 2))
    assert same_ptr["status"] == "wrong_result"
    assert "a timed call on input set" in same_ptr["error"]
    assert same_ptr["error"].endswith("(during timing)")
    first_calls = harness.run(pack_job(tmp_path, 3))
    assert first_calls["status"] == "wrong_result" and "timed call" in first_calls["error"]


def test_in_out_buffers_are_restored_before_every_timed_call(tmp_path, harness):
    """An insertion sort was timed on its own sorted output and ranked ahead of std::sort;
    with `buf` restored before each call it pays for sorting random data."""
    fast = harness.run(pack_job(tmp_path, 0))
    insertion = harness.run(pack_job(tmp_path, 4))
    assert fast["status"] == insertion["status"] == "ok"
    # 4096 random floats: ~4M element moves against std::sort's ~50k comparisons
    assert insertion["median_ms"] > 5 * fast["median_ms"], (insertion, fast)


VADD = 'extern "C" void solve(const float* x, const float* y, float* out, int N) {' \
       ' for (int i = 0; i < N; ++i) out[i] = x[i] + y[i]; }'
ACC = 'extern "C" void solve(const float* x, float* out, int N) {' \
      ' for (int i = 0; i < N; ++i) out[i] += x[i]; }'
NOTHING = 'extern "C" void solve(const float* x, float* out, int N) {}'
INOUT_INPUTS = ("import torch\n"
                "def inputs(seed, N):\n"
                "    g = torch.Generator().manual_seed(seed)\n"
                "    return {'x': torch.randn(N, generator=g),\n"
                "            'out': torch.randn(N, generator=g)}\n")


@pytest.mark.parametrize("kernel, ref, status", [
    (VADD, "def reference(x, y, N):\n    return x.add_(y)\n", "ok"),
    (ACC, INOUT_INPUTS + "def reference(x, out, N):\n    out += x\n    return out\n", "ok"),
    (NOTHING, INOUT_INPUTS + "def reference(x, out, N):\n    out.mul_(2.0)\n"
     "    return {'out': out}\n", "wrong_result"),
], ids=["mutates-input", "mutates-inout", "inout-mutated-kernel-idle"])
def test_a_reference_that_works_in_place_changes_nothing(tmp_path, harness, kernel, ref, status):
    """The reference gets copies: the pristine inputs every candidate sees stay pristine (a
    correct kernel was `wrong_result`, a kernel that wrote nothing passed with error 0)."""
    d = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 256}]\n",
                    {"k.cpp": kernel, "ref.py": ref})
    res = harness.run(job(artifact(tmp_path, d / "k.cpp", {}), d / "k.cpp", d / "ref.py",
                          {"N": 256}, {"x": ["N"], "y": ["N"], "out": ["N"]}))
    assert res["status"] == status, res.get("error")
    if status == "ok":
        assert res["max_abs_err"] < 1e-5


def test_a_slow_candidate_is_measured_not_called_a_hang(tmp_path):
    """400 ms per call with timeout_s 3: `timeout` with no figure before; now the samples that
    fit the budget, status `too_slow` and a line that says why."""
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        j = pack_job(tmp_path, 5, timing={**TIMING, "timeout_s": 3})
        res = sb.run(j, timeout_s=3)
    finally:
        sb.close()
    assert res["status"] == "too_slow", res
    assert 0.39 <= res["median_ms"] / 1e3 < 1.0 and 1 <= res["n_samples"] < 10
    assert "one call takes" in res["error"] and "Not a hang" in res["error"]
    assert res["wall_s"] < 3 + 10  # the budget, plus the sandbox's grace at most


def test_a_hang_is_still_a_timeout(tmp_path):
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    d = write_sweep(tmp_path / "hang", "kernel: k.cpp\ndims: [{N: 8}]\n", {
        "k.cpp": 'extern "C" void solve(const float* x, float* y, int N) '
                 '{ volatile int s = 1; while (s) {} }',
        "ref.py": "def reference(x, N):\n    return x\n"})
    try:
        res = sb.run(job(artifact(tmp_path, d / "k.cpp", {}), d / "k.cpp", d / "ref.py",
                         {"N": 8}, {"x": ["N"]}, timing={**TIMING, "timeout_s": 2}),
                     timeout_s=2)
    finally:
        sb.close()
    assert res["status"] == "timeout" and "no answer within 2 s" in res["error"]


def _prepare_error(tmp_path, harness, ref_text, kernel=VADD, args=None):
    d = write_sweep(tmp_path / "r", "kernel: k.cpp\ndims: [{N: 64}]\n",
                    {"k.cpp": kernel, "ref.py": ref_text})
    res = harness.run(job("", d / "k.cpp", d / "ref.py", {"N": 64},
                          args or {"x": ["N"], "y": ["N"], "out": ["N"]}, prepare_only=True))
    return res


def test_inputs_that_ignore_the_seed_are_refused(tmp_path):
    """Two input sets with the same values could not tell a replaying kernel from a real
    one: refused before anything is built, naming ref.py and the fix."""
    from workers.harness import JobError

    ref = ("import torch\n"
           "def inputs(seed, N):\n"
           "    return {'x': torch.arange(1, N + 1.0), 'y': torch.ones(N)}\n"
           "def reference(x, y, N):\n    return x + y\n")
    with pytest.raises(JobError, match=r"ref.py: inputs\(\) returned the same values for "
                       r"seeds 3 and 4.*draw the inputs from the seed"):
        _prepare_error(tmp_path, Harness("cpu"), ref)


def test_a_reference_without_an_in_out_argument_says_how_it_gets_there(tmp_path):
    """Was a bare TypeError."""
    from workers.harness import JobError

    ref = "def reference(x, out, N):\n    return x\n"
    with pytest.raises(JobError, match=r"reference\(\) takes out that kopt cannot give: 'out' "
                       r"is an output of solve; an in/out argument reaches reference\(\) only "
                       r"when inputs\(\) returns it"):
        _prepare_error(tmp_path, Harness("cpu"), ref, kernel=ACC,
                       args={"x": ["N"], "out": ["N"]})


def test_a_reference_of_the_wrong_dtype_is_caught_before_building(tmp_path):
    """An int32 reference for a float* output made every candidate
    `wrong_result`; a lower-precision one is a note."""
    from workers.harness import JobError

    with pytest.raises(JobError, match=r"reference\(\) returned output 'out' as torch.int32 "
                       r"but solve's out is float\* \(torch.float32\); return a float tensor"):
        _prepare_error(tmp_path, Harness("cpu"),
                       "def reference(x, y, N):\n    return (x + y).int()\n")
    res = _prepare_error(tmp_path, Harness("cpu"),
                         "def reference(x, y, N):\n    return (x + y).half()\n")
    assert res["status"] == "ok"
    assert res["notes"] == ["ref.py: reference output 'out' is torch.float16, lower precision "
                            "than solve's float (torch.float32): the check compares against "
                            "rounded values; compute the reference in the output's precision "
                            "or higher"]


def _both_ways(harness, tmp_path, src: str, ref: str, n: int, define: str) -> dict:
    """Outcomes of kernel ``src`` (``solve(x, y, N)``) against ``ref`` at ``N = n``, built with
    ``define`` 0 (honest) and 1 (the fault), by that value."""
    d = write_sweep(tmp_path / "s", f"kernel: k.cpp\ndims: [{{N: {n}}}]\n",
                    {"k.cpp": src, "ref.py": ref})
    return {v: harness.run(job(artifact(tmp_path, d / "k.cpp", {define: v}), d / "k.cpp",
                               d / "ref.py", {"N": n}, {"x": ["N"], "y": ["N"]}))
            for v in (0, 1)}


def test_an_infinite_expected_value_passes_when_matched(tmp_path, harness):
    """A reference with infinities (log of 0) and a kernel that gives the same: the check
    passed it (inf == inf), then every timed call failed verification, since the band
    ``inf -/+ (atol + rtol * inf)`` is NaN at one end: an honest kernel was `wrong_result`.
    An infinite expected value's band is the value itself; a finite value there still fails."""
    log = ('extern "C" void solve(const float* x, float* y, int N) '
           '{ for (int i = 0; i < N; ++i) y[i] = BAD && i == 7 ? 1e30f : __builtin_logf(x[i]); }')
    ref = ("import torch\n"
           "def inputs(seed, N):\n"
           "    g = torch.Generator().manual_seed(seed)\n"
           "    x = torch.rand(N, generator=g) + 0.5\n"
           "    x[::7] = 0.0\n"
           "    return {'x': x}\n"
           "def reference(x, N):\n    return torch.log(x)\n")
    run = _both_ways(harness, tmp_path, log, ref, 256, "BAD")
    assert run[0]["status"] == "ok", run[0]
    assert run[0]["max_abs_err"] < 1e-5 and run[0]["n_samples"] >= TIMING["min_samples"]
    assert run[1]["status"] == "wrong_result"
    assert run[1]["error"] == ("y: 1 of 256 elements differ (first at (7,): got "
                               "1.0000000150474662e+30, expected -inf); max abs err inf "
                               "(band atol 1e-05 + rtol 1e-05 x |expected|)")


def test_empty_inputs_are_refused_as_empty(tmp_path):
    """Dims that make every input empty (N: 0) were refused as "inputs() returned the same
    values for seeds 3 and 4 ... draw the inputs from the seed", which sent the user to
    ref.py; the line names the dims."""
    from workers.harness import JobError

    with pytest.raises(JobError, match=r"^every input of dims \{'N': 0\} is empty \(x: \[0\], "
                       r"y: \[0\]\): nothing to check or time; give sizes above 0 in "
                       r"sweep.yaml `dims:` or `args:`$"):
        d = write_sweep(tmp_path / "r", "kernel: k.cpp\ndims: [{N: 0}]\n",
                        {"k.cpp": VADD, "ref.py": "def reference(x, y, N):\n    return x + y\n"})
        Harness("cpu").run(job("", d / "k.cpp", d / "ref.py", {"N": 0},
                               {"x": ["N"], "y": ["N"], "out": ["N"]}, prepare_only=True))


def test_an_unwritten_bool_output_never_passes(tmp_path, harness):
    """Outputs were poisoned with 0x5A bytes before every call, and a bool tensor reads any
    nonzero byte as True: a kernel that wrote only the False elements of a bool output
    (and left the rest as the poison) passed the check and every timed call's verification.
    Bool outputs are compared byte by byte (0 or 1)."""
    lazy = ('extern "C" void solve(const float* x, bool* y, int N) '
            '{ for (int i = 0; i < N; ++i) if (SKIP == 0 || !(x[i] > 0.f)) y[i] = x[i] > 0.f; }')
    run = _both_ways(harness, tmp_path, lazy, "def reference(x, N):\n    return x > 0\n", 256,
                     "SKIP")
    assert run[0]["status"] == "ok", run[0]
    assert run[1]["status"] == "wrong_result", run[1]
    assert run[1]["error"].startswith("y: ") and " of 256 elements differ" in run[1]["error"]
    # a poison byte (0x5A or 0xA5), not True
    assert "got 90.0, expected 1.0" in run[1]["error"] or \
        "got 165.0, expected 1.0" in run[1]["error"]


def test_an_unwritten_integer_output_never_passes(tmp_path, harness):
    """Integer outputs were poisoned with 0x5A bytes before every call: a uint8 element
    expected to be 90 (0x5A) passed unwritten, in the check and in every timed call. The
    poison alternates between 0x5A and 0xA5 from call to call, so an element left unwritten
    is wrong in one of two calls whatever its value."""
    copy = ('#include <cstdint>\nextern "C" void solve(const uint8_t* x, uint8_t* y, int N) '
            '{ for (int i = 0; i < N; ++i) if (SKIP == 0 || x[i] != 90) y[i] = x[i]; }')
    ref = ("import torch\n"
           "def inputs(seed, N):\n"
           "    g = torch.Generator().manual_seed(seed)\n"
           "    return {'x': torch.randint(0, 256, (N,), generator=g, dtype=torch.uint8)}\n"
           "def reference(x, N):\n    return x.clone()\n")
    run = _both_ways(harness, tmp_path, copy, ref, 4096, "SKIP")
    assert run[0]["status"] == "ok", run[0]
    assert run[1]["status"] == "wrong_result", run[1]
    assert "got 165.0, expected 90.0" in run[1]["error"]  # the other poison byte, 0xA5


def test_timed_sets_grow_for_small_cpu_sizes_only():
    """workers.harness ``timed_sets``: enough seen sets that a CPU job's timed calls cycle
    through 2**16 elements of arguments, 2 to 32 of them; a GPU's always 2."""
    from workers.harness import timed_sets

    vec = {"x": [1024], "buf": [1024], "y": [1024]}
    assert timed_sets(vec, is_cuda=False) == 22  # ceil(65536 / 3072)
    assert timed_sets(vec, is_cuda=True) == 2
    assert timed_sets({"x": [1 << 20]}, is_cuda=False) == 2
    assert timed_sets({"x": [4, 4]}, is_cuda=False) == 32
    assert timed_sets({"n": []}, is_cuda=False) == 32  # a 0-dim argument: 1 element
    assert timed_sets({}, is_cuda=False) == 2  # no argument's shape known


def test_a_small_branchy_honest_kernel_is_timed_on_sets_no_branch_predictor_learns(tmp_path):
    """The fault pack's honest kernel sorts ``buf``: on 1024 elements, cycling the check's
    two sets let this machine's branch predictor learn the sort's branches (14-22 us a
    call against 49-50 us on values never seen), and most jobs were named `replayed`. Its
    timed calls now cycle through 22 seeded sets (workers.harness ``timed_sets``), where
    the calls on new values are as fast as the rest."""
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        src = PACK / "faults.cpp"
        res = sb.run_retrying(job(artifact(tmp_path, src, {"MODE": 0}), src, PACK / "ref.py",
                                  {"N": 1024}, {"x": ["N"], "buf": ["N"], "y": ["N"]}),
                              timeout_s=60)
    finally:
        sb.close()
    assert res["status"] == "ok" and res["input_sets"] == 22, res
