"""Real builds: nvcc for sm_90 (every CUDA sweep) and the system C++ compiler; ptxas figures."""

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT
from kopt.core.catalog import load_catalog
from kopt.core.expand import Context, cap, expand, stable_hash
from kopt.core.spec import load_sweep
from kopt.run.builder import build_id
from workers import build as wb
from workers.ptxas import parse_ptxas, summarize

NVCC_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6kernelPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z6kernelPKfPfi
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 69 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 46.084 ms
ptxas info    : Compiling entry function '_Z5otherv' for 'sm_90'
ptxas info    : Function properties for _Z5otherv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
"""


def test_parse_ptxas_log():
    ks = parse_ptxas(NVCC_LOG)
    assert [(k.name, k.registers, k.smem_bytes, k.stack_bytes, k.spill_bytes) for k in ks] == [
        ("_Z6kernelPKfPfi", 69, 1024, 16, 20), ("_Z5otherv", 8, 0, 0, 0)]
    assert summarize(ks) == {"registers": 69, "smem_bytes": 1024, "spill_bytes": 20}
    assert summarize([]) == {"registers": None, "smem_bytes": None, "spill_bytes": None}


def _job(space, cand, target=None):
    digest = stable_hash(space.source_text())
    bid = build_id(space, cand, digest, wb.compiler_identity(space.backend))
    return wb.BuildJob(bid, space.backend, space.source_text(), space.source.name,
                       str(space.source.parent), cand.defines, space.flags,
                       target or cand.target, space.include_dirs)


def test_cpu_build_cache_and_compile_error(tmp_path):
    sp = load_sweep(ROOT / "sweeps" / "vector_add").space("cpu")
    base = expand(sp, load_catalog(), None)[0]
    job = _job(sp, base)
    r1, data = wb.build(job, cache=tmp_path)
    assert r1.ok and not r1.cached and data and data[:4] == b"\x7fELF"
    assert r1.compile_s > 0 and r1.registers is None
    r2, data2 = wb.build(job, cache=tmp_path)
    assert r2.cached and data2 == data and r2.compile_s == r1.compile_s
    bad = wb.BuildJob("bad1", "cpu", 'extern "C" void solve(int N) { oops; }', "k.cpp",
                      str(tmp_path), {})
    r3, d3 = wb.build(bad, cache=tmp_path)
    assert not r3.ok and d3 is None and "oops" in r3.error and "k.cpp:1" in r3.error
    assert not (tmp_path / "bad1").exists()


TEXTBOOK = {"vector_add", "reduction", "softmax", "sgemm"}
DECODE = ("rmsnorm_residual", "rotary", "lm_head_top1", "w4a16_gemv", "gate_up_silu",
          "decode_attention", "w8a8_gemm")
# about a minute of CPU per build, most for sm_90a: gemm_cutlass's and gemm_cutlass_fp32's
# built in tests/test_cutlass_build.py, gate_up_prefill's on the H200 only (see
# tests/test_cutlass_build_gate_up.py)
CUTLASS = {"gemm_cutlass", "gemm_cutlass_fp32", "gate_up_prefill"}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_every_cuda_sweep_builds_for_sm90(tmp_path):
    """Baseline plus a deterministic sample of each solve-mode CUDA sweep, built with nvcc for
    sm_90 (kernel-mode sweeps build with NVRTC: tests/test_kernel_mode.py; the CUTLASS sweeps:
    ``CUTLASS``). The decode-time sweeps (5-13 s of CPU a build on a 2-core machine, a
    minute of the suite's CPU for all seven) build in
    :func:`test_the_decode_sweeps_build_for_the_edge_class`, for sm_87 only: their sources
    have no path of their own for an architecture (asserted there), and sm_87's limits
    (164 KB of shared memory a block) are the tighter; their sm_90 builds run on the H200
    (``pytest -m gpu``)."""
    jobs = []
    for d in sorted((ROOT / "sweeps").iterdir()):
        sp = load_sweep(d).space("cuda")
        if sp.mode == "kernel" or d.name in CUTLASS or d.name in DECODE:
            continue
        cands = expand(sp, load_catalog(), 90)
        picked = cap(cands, 3 if d.name in TEXTBOOK else 1)
        if d.name == "sgemm":  # and one shared-memory tiled, one 3xTF32, one bf16x3 candidate
            picked.append(next(c for c in cands if c.triple[1] == "memory.tiling_smem"))
            picked += [next(c for c in cands if c.triple[0] == m)
                       for m in ("compute.tensor_core", "compute.mixed_precision")]
        for c in picked:
            jobs.append((d.name, c, _job(sp, c)))
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: wb.build(j[2], cache=tmp_path)[0], jobs))
    seen = set()
    for (name, cand, _), res in zip(jobs, results):
        assert res.ok, f"{name} {cand.defines}: {res.error}"
        assert "-gencode=arch=compute_90,code=sm_90 -nodlink" in res.command
        assert res.kernels and all(k["arch"] == "sm_90" for k in res.kernels)
        assert 0 < res.registers <= 255
        assert res.spill_bytes is not None and res.smem_bytes is not None
        seen.add(name)
    assert seen == TEXTBOOK
    tiled = [r for (n, c, _), r in zip(jobs, results)
             if n == "sgemm" and c.triple[1] == "memory.tiling_smem"]
    assert tiled and all(r.smem_bytes > 0 for r in tiled)
    by_method = {c.triple[0]: r for (n, c, _), r in zip(jobs, results) if n == "sgemm"}
    assert by_method["compute.tensor_core"].smem_bytes > 0        # static cp.async ring
    assert by_method["compute.mixed_precision"].smem_bytes == 0   # all of it dynamic


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_decode_sweeps_build_for_the_edge_class(tmp_path):
    """Each decode-time sweep's baseline built with nvcc for sm_87 (Jetson Orin), as kopt
    expands it for that device class: SASS for sm_87 only, no spills. The only nvcc build
    of these sweeps here (:func:`test_every_cuda_sweep_builds_for_sm90` leaves them out), so
    their sources must have no code of their own for another architecture."""
    jobs = []
    for name in DECODE:
        sp = load_sweep(ROOT / "sweeps" / name).space("cuda")
        assert "__CUDA_ARCH__" not in sp.source_text(), (
            f"{name}: a path for an architecture; build it for sm_90 too")
        base = expand(sp, load_catalog(), 87)[0]
        assert base.is_baseline and base.target == "sm_87"
        jobs.append((name, _job(sp, base)))
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda j: wb.build(j[1], cache=tmp_path)[0], jobs))
    for (name, _), res in zip(jobs, results):
        assert res.ok, f"{name}: {res.error}"
        assert "-gencode=arch=compute_87,code=sm_87 -nodlink" in res.command
        assert res.kernels and all(k["arch"] == "sm_87" for k in res.kernels)
        assert res.spill_bytes == 0, name


def test_sgemm_restrictions_keep_tensor_core_tiles_whole():
    """Every 3xTF32 (TC) candidate has K tiles of whole m16n16k8 fragments and every bf16x3
    (MP) one of whole m16n16k16 fragments, whole warps, and the static (TC) or dynamic (MP)
    shared memory within the device limit, with or without thread_coarsening; sgemm.cu
    rejects the others with #error."""
    sp = load_sweep(ROOT / "sweeps" / "sgemm").space("cuda")
    cat = load_catalog()
    stacked = Context(selected=["compute.thread_coarsening", "memory.multi_stage_pipeline"],
                      baseline_params={"BK": 16, "BX": 16, "BY": 8, "STAGES": 2, "TM": 8, "TN": 8})
    cands = expand(sp, cat, 90) + expand(sp, cat, 90, ctx=stacked)
    tc = [c.defines for c in cands if c.defines.get("TC") == 1]
    mp = [c.defines for c in cands if c.defines.get("MP") == 1]
    assert len(tc) > 100 and len(mp) > 100
    assert all(d["BK"] % 8 == 0 and d["BX"] * d["BY"] % 32 == 0 for d in tc)
    assert all(d["BK"] % 16 == 0 and d["BX"] * d["BY"] % 32 == 0 for d in mp)

    def tile(d):  # the sweep's tile model (derived:), with sgemm.cu's TM = TN = 1 default
        return sp.derived_values({**sp.dims[0], "TM": 1, "TN": 1, **d})
    assert tile({"BX": 32, "BY": 8, "TM": 8, "TN": 4, "BK": 16, "STAGES": 2}) == {
        "warps": 8, "WN": 2, "WM": 4, "BM": 64, "BN": 128, "frags": True,
        "tc_smem": 2 * (64 * 20 + 16 * 136) * 4, "tc_smem_min": 2 * (64 * 20 + 16 * 40) * 4,
        "mp_smem": 2 * (64 * 20 + 16 * 128) * 4 + 2 * (64 * 24 + 16 * 136) * 2}
    assert all(tile(d)["frags"] and tile(d)["tc_smem"] <= 49152 for d in tc)
    assert all(tile(d)["frags"] and tile(d)["mp_smem"] <= 232448 for d in mp)
    # no knob a path ignores: PAD on the cp.async ring, VEC on the tensor-core paths
    assert not any(c.defines.get("PAD") and c.defines.get("USE_CP_ASYNC") for c in cands)
    assert not any(d.get("VEC", 1) != 1 for d in tc + mp)
    # and a bf16x3 candidate that does need more than 48 KB is in the space
    assert any(d.get("TM") == 8 and d.get("TN") == 8 and d["BK"] == 32 for d in mp)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_sm90a_target_uses_gencode(tmp_path):
    sp = load_sweep(ROOT / "sweeps" / "vector_add").space("cuda")
    base = expand(sp, load_catalog(), 90)[0]
    res, _ = wb.build(_job(sp, base, target="sm_90a"), cache=tmp_path)
    assert res.ok, res.error
    assert "-gencode=arch=compute_90a,code=sm_90a" in res.command
    assert res.kernels[0]["arch"] == "sm_90a"


def test_a_compiler_and_what_it_started_die_with_the_build(tmp_path):
    """workers.reap: the compiler's whole process group is killed on timeout and when the
    process that started the build dies (PR_SET_PDEATHSIG), so no cc1plus outlives it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pidfile = tmp_path / "grandchild.pid"
    # a "compiler" that starts a long-lived child of its own, like c++ starting cc1plus
    slow = [sys.executable, "-c", "import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(120)"]

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:  # a zombie nobody reaps is dead too
            return f.read().split(") ")[1][0] != "Z"

    def wait_for_pid() -> int:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text():
                return int(pidfile.read_text())
            time.sleep(0.05)
        raise AssertionError("the fake compiler never started its child")

    # 1. past its timeout: exit 124 and the grandchild is gone
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "workers.reap", "1", *slow])
    assert p.returncode == 124 and time.perf_counter() - t0 < 30
    gc = int(pidfile.read_text())
    time.sleep(0.3)
    assert not alive(gc)

    # 2. the process that ran the build (a Ray worker) is killed: the wrapper gets SIGTERM
    pidfile.unlink()
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys; from workers.build import _limit_memory; "
        f"subprocess.run([sys.executable, '-m', 'workers.reap', '100', *{slow!r}], "
        "preexec_fn=_limit_memory)")])
    gc = wait_for_pid()
    assert alive(gc)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        if not alive(gc):
            break
        time.sleep(0.1)
    assert not alive(gc)

    # 3. a compiler that does not exist is a status, not a crash
    p = subprocess.run([sys.executable, "-m", "workers.reap", "5", str(tmp_path / "nvcc")],
                       capture_output=True, text=True)
    assert p.returncode == 127 and p.stderr.startswith("cannot start")


def test_a_build_task_that_raised_is_one_line():
    """A build task that raised (a full disk): its error, not Ray's remote traceback."""
    import ray

    from kopt.run.builder import _task_error

    e = ray.exceptions.RayTaskError(
        "build", "Traceback (most recent call last):\n  File ...\nOSError: no space",
        OSError(28, "No space left on device"))
    assert _task_error(e) == "OSError: [Errno 28] No space left on device"
    assert _task_error(ray.exceptions.RayError("node died\nmore")) == "node died"


_UNDER_HARD_LIMIT = r"""
import resource, subprocess, sys
from workers.reap import limited
hard = 3 * 2**30                                   # `ulimit -v 3145728`: soft and hard
resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
p = subprocess.run([sys.executable, "-c",
                    "import resource; print(*resource.getrlimit(resource.RLIMIT_AS))"],
                   capture_output=True, text=True, preexec_fn=limited(8 * 2**30))
print(p.returncode, p.stdout.strip())
"""


def test_compiler_memory_cap_above_the_hard_limit_is_clamped():
    """Under ``ulimit -v`` below KOPT_COMPILE_MEM_GB the compiler's
    preexec_fn raised (SubprocessError traceback from every build); now the cap is the
    hard limit the process already has."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", _UNDER_HARD_LIMIT], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", str(3 * 2**30), str(3 * 2**30)]
