"""Kernel mode (`launch:`): spec validation, real NVRTC builds for sm_90, the build cache,
the artifact format and, on a GPU (marked gpu), launches through the driver API."""

import sys
from pathlib import Path

import pytest

from conftest import ROOT, VADD_CPP, VADD_REF, assert_spec_error, write_sweep
from kopt.core.catalog import load_catalog
from kopt.core.expand import expand, stable_hash
from kopt.core.spec import launch_geometry, load_sweep
from kopt.run.builder import build_id, job_base
from workers import build as wb
from workers import nvrtc

try:
    nvrtc.version()
    HAVE_NVRTC = True
except nvrtc.NvrtcMissing:
    HAVE_NVRTC = False
needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="cuda-bindings / NVRTC not installed")

KT = ROOT / "sweeps" / "sgemm_kt"

SAXPY_CU = """
    #ifndef ITEMS
    #define ITEMS 1
    #endif
    __global__ void __launch_bounds__(1024) saxpy(const float* __restrict__ x,
                                                  float* y, float a, int N) {
      int i = (blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
      for (int k = 0; k < ITEMS; ++k)
        if (i + k < N) y[i + k] = a * x[i + k] + y[i + k];
    }
"""
SAXPY_REF = """
    import torch

    def inputs(seed, N):
        g = torch.Generator().manual_seed(seed)
        return {"x": torch.randn(N, generator=g), "y": torch.randn(N, generator=g)}

    def reference(x, y, a, N):
        return (a * x.double() + y.double()).float()
"""
SAXPY = """
    kernel: saxpy.cu
    dims: [{N: 100000}]
    scalars: {a: 2.0}
    launch:
      kernel: saxpy
      block: [THREADS]
      grid: ["(N + THREADS * ITEMS - 1) // (THREADS * ITEMS)"]
    params: {THREADS: [128, 256], ITEMS: [1, 4]}
"""


def make(tmp_path, yaml_text=SAXPY, **files):
    files = {"saxpy.cu": SAXPY_CU, "ref.py": SAXPY_REF, **files}
    return write_sweep(tmp_path / "s", yaml_text, files)


def expect(tmp_path, yaml_text, *needles, **files):
    return assert_spec_error(make(tmp_path, yaml_text, **files), *needles)


# -- spec -----------------------------------------------------------------------------------
def test_kernel_mode_spec_loads(tmp_path):
    sw = load_sweep(make(tmp_path))
    sp = sw.space("cuda")
    assert sp.mode == "kernel" and sp.toolchain == "nvrtc"
    assert sp.signature.name == "saxpy"
    assert [(a.name, a.kind) for a in sp.signature.args] == [
        ("x", "input"), ("y", "output"), ("a", "scalar"), ("N", "scalar")]
    assert sp.launch_spec() == {
        "kernel": "saxpy", "block": ["THREADS"],
        "grid": ["(N + THREADS * ITEMS - 1) // (THREADS * ITEMS)"], "smem_bytes": 0}
    assert launch_geometry(sp.launch, {"N": 100000, "THREADS": 256, "ITEMS": 4}) == {
        "block": [256, 1, 1], "grid": [98, 1, 1], "smem_bytes": 0}
    assert len(expand(sp, load_catalog(), 90)) == 4


def test_the_shipped_kernel_mode_sweep():
    sp = load_sweep(KT).space("cuda")
    assert sp.mode == "kernel" and sp.signature.describe() == (
        "__global__ void sgemm_kernel(const float* A, const float* B, float* C, int M, int N, "
        "int K)")
    cands = expand(sp, load_catalog(), 90)
    assert len(cands) == 160 and cands[0].is_baseline
    assert cands[0].params == {"block_size_x": 16, "block_size_y": 16, "tile_size_x": 1,
                               "tile_size_y": 1, "use_padding": 0, "read_only": 0}
    env = {**sp.dims[0], **cands[0].defines}
    assert launch_geometry(sp.launch, env) == {"block": [16, 16, 1], "grid": [256, 256, 1],
                                               "smem_bytes": 4 * (16 * 16 + 16 * 16)}
    big = [c for c in cands if c.params["block_size_x"] == 64 and c.params["tile_size_x"] == 8]
    assert big and all(launch_geometry(sp.launch, {**sp.dims[0], **c.defines})["smem_bytes"]
                       > 48 * 1024 for c in big)


def test_launch_on_a_cpu_source(tmp_path):
    bad = ("kernel: k.cpp\ndims: [{N: 8}]\nargs: {x: [N], y: [N]}\n"
           "launch: {kernel: k, block: [1], grid: [1]}\n")
    expect(tmp_path, bad, "field 'launch'", "CUDA __global__ kernel",
           **{"k.cpp": VADD_CPP, "ref.py": VADD_REF})


def test_unknown_kernel_name(tmp_path):
    expect(tmp_path, SAXPY.replace("kernel: saxpy\n", "kernel: saxpy2\n"),
           "field 'launch.kernel'", "no `__global__ void saxpy2", "kernels in the file: saxpy")


def test_unknown_name_in_geometry(tmp_path):
    expect(tmp_path, SAXPY.replace("block: [THREADS]", "block: [THREADS, TY]"),
           "field 'launch.block[1]'", "['TY']", "not launch params, dims or scalars")


def test_bad_expression(tmp_path):
    expect(tmp_path, SAXPY.replace("block: [THREADS]", "block: ['THREADS +']"),
           "field 'launch.block[0]'", "not a valid expression")


def test_float_division_is_named(tmp_path):
    expect(tmp_path, SAXPY.replace('grid: ["(N + THREADS * ITEMS - 1) // (THREADS * ITEMS)"]',
                                   "grid: ['N / THREADS']").replace("N: 100000", "N: 102400"),
           "field 'launch'", "use // for integer division")


def test_too_many_threads_for_the_baseline(tmp_path):
    expect(tmp_path, SAXPY.replace("block: [THREADS]", "block: [THREADS, 16]"),
           "field 'launch.block'", "2048 threads", "at most 1024")


def test_schema_errors_name_the_field(tmp_path):
    expect(tmp_path, SAXPY.replace("      block: [THREADS]\n", ""), "field 'launch.block'",
           "required field is missing")
    expect(tmp_path, SAXPY.replace("block: [THREADS]", "block: [THREADS, 1, 1, 1]"),
           "field 'launch.block'", "at most 3")


def test_zero_blocks(tmp_path):
    expect(tmp_path, SAXPY.replace('grid: ["(N + THREADS * ITEMS - 1) // (THREADS * ITEMS)"]',
                                   "grid: ['N // 1000000']"),
           "field 'launch'", "grid[0]", "must be >= 1")


def test_kernel_without_solve_hints_at_launch(tmp_path):
    expect(tmp_path, "kernel: saxpy.cu\ndims: [{N: 1024}]\nscalars: {a: 2.0}\n",
           "field 'kernel'", "no `extern \"C\" void solve", "for kernel mode", "(saxpy)",
           "`launch:`")


def test_launch_in_a_cuda_block(tmp_path):
    text = """
        kernel: k.cpp
        dims: [{N: 1024}]
        args: {x: [N], y: [N]}
        scalars: {a: 2.0}
        cuda:
          kernel: saxpy.cu
          launch: {kernel: saxpy, block: [256], grid: ["(N + 255) // 256", 1, 1]}
    """
    sw = load_sweep(make(tmp_path, text, **{"k.cpp": VADD_CPP, "ref.py": VADD_REF}))
    assert sw.space("cpu").mode == "solve" and sw.space("cuda").mode == "kernel"
    expect(tmp_path, text.replace('"(N + 255) // 256"', "NB"), "field 'cuda.launch.grid[0]'",
           **{"k.cpp": VADD_CPP, "ref.py": VADD_REF})


# -- builds ---------------------------------------------------------------------------------
def _job(space, cand, target=None):
    digest = stable_hash(space.source_text())
    bid = build_id(space, cand, digest, wb.compiler_identity(space.toolchain))
    return wb.BuildJob(bid, space.backend, space.source_text(), space.source.name,
                       str(space.source.parent), cand.defines, space.flags,
                       target or cand.target, space.include_dirs, space.mode,
                       space.launch_spec())


@needs_nvrtc
def test_nvrtc_builds_sgemm_kt_for_sm90_and_caches(tmp_path):
    sp = load_sweep(KT).space("cuda")
    cands = expand(sp, load_catalog(), 90)
    tiled = next(c for c in cands if c.params == {
        "block_size_x": 32, "block_size_y": 8, "tile_size_x": 4, "tile_size_y": 4,
        "use_padding": 1, "read_only": 1})
    results = {}
    for c in (cands[0], tiled):
        res, data = wb.build(_job(sp, c), cache=tmp_path)
        assert res.ok, res.error
        assert not res.cached and 0 < res.compile_s < 120
        assert res.command.startswith("nvrtc 13.") and "--gpu-architecture=sm_90 " in res.command
        assert "--ptxas-options=-v" in res.command and "nvcc" not in res.command
        meta, cubin = nvrtc.unpack(data)
        assert cubin[:4] == b"\x7fELF"
        assert meta["kernel"] == "sgemm_kernel" and meta["lowered"] == "_Z12sgemm_kernelPKfS0_Pfiii"
        assert meta["defines"] == c.defines and meta["launch"] == sp.launch_spec()
        assert [(k["name"], k["arch"]) for k in res.kernels] == [(meta["lowered"], "sm_90")]
        assert 16 <= res.registers <= 255 and res.spill_bytes == 0
        assert res.smem_bytes == 0  # the tiles are dynamic shared memory
        results[c.candidate_id] = (res, data)
    base, tile = results[cands[0].candidate_id][0], results[tiled.candidate_id][0]
    assert tile.registers > base.registers  # 16 accumulators per thread vs 1
    # the cache: same bytes and figures, no compile
    res2, data2 = wb.build(_job(sp, tiled), cache=tmp_path)
    assert res2.cached and data2 == results[tiled.candidate_id][1]
    assert res2.compile_s == tile.compile_s and res2.registers == tile.registers
    entry = tmp_path / _job(sp, tiled).build_id
    assert sorted(p.name for p in entry.iterdir()) == ["kernel.kopt", "meta.json", "verify.json"]
    art = wb.ensure_artifact("other", data2, cache=tmp_path)
    assert art.name == "kernel.kopt" and nvrtc.is_kernel_file(art)


@needs_nvrtc
def test_nvrtc_sm90a_and_compile_errors(tmp_path):
    sw = load_sweep(make(tmp_path))
    sp = sw.space("cuda")
    base = expand(sp, load_catalog(), 90)[0]
    res, data = wb.build(_job(sp, base, target="sm_90a"), cache=tmp_path / "c")
    assert res.ok, res.error
    assert "--gpu-architecture=sm_90a" in res.command and res.kernels[0]["arch"] == "sm_90a"
    assert nvrtc.unpack(data)[0]["lowered"] == "_Z5saxpyPKfPffi"
    bad = wb.BuildJob("bad1", "cuda", "__global__ void saxpy(float* y) { oops; }", "saxpy.cu",
                      str(tmp_path), {}, target="sm_90", mode="kernel",
                      launch={"kernel": "saxpy", "block": [1], "grid": [1], "smem_bytes": 0})
    r, d = wb.build(bad, cache=tmp_path / "c")
    assert not r.ok and d is None and "saxpy.cu(1)" in r.error and "oops" in r.error
    assert not (tmp_path / "c" / "bad1").exists()
    # a bad NVRTC option is a compile error too, and the compiler process survives it
    worse = wb.BuildJob("bad2", "cuda", SAXPY_CU, "saxpy.cu", str(tmp_path), {},
                        flags=["--no-such-option"], target="sm_90", mode="kernel",
                        launch=bad.launch)
    r, _ = wb.build(worse, cache=tmp_path / "c")
    assert not r.ok and "no-such-option" in r.error
    host = wb.BuildJob("bad3", "cuda", SAXPY_CU, "saxpy.cu", str(tmp_path), {}, target="host",
                       mode="kernel", launch=bad.launch)
    r, _ = wb.build(host, cache=tmp_path / "c")
    assert not r.ok and "sm_XX" in r.error


@needs_nvrtc
def test_compiler_process_restarts_after_it_dies(tmp_path):
    c = nvrtc.compiler(wb.COMPILE_MEM_GB)
    req = {"source": "__global__ void k(float* x) { x[0] = 1; }", "name": "k.cu", "kernel": "k",
           "options": ["--gpu-architecture=sm_90"]}
    assert c.compile(req, 60)["ok"]
    pid = c.proc.pid
    c.proc.kill()
    c.proc.wait()
    out = c.compile(req, 60)
    assert out["ok"] and out["lowered"] == "_Z1kPf" and c.proc.pid != pid


def _warm_then_build(sp, cand, cache, out):
    out["first"] = nvrtc.compiler(wb.COMPILE_MEM_GB).proc  # None: a fresh thread has none
    out["warm_s"] = wb.warm_nvrtc()
    out["warm_pid"] = nvrtc.compiler(wb.COMPILE_MEM_GB).proc.pid
    out["res"] = wb.build(_job(sp, cand), cache=cache)[0]
    out["build_pid"] = nvrtc.compiler(wb.COMPILE_MEM_GB).proc.pid
    nvrtc.compiler(wb.COMPILE_MEM_GB).kill()


@needs_nvrtc
def test_warm_nvrtc_starts_the_compiler_the_next_build_uses(tmp_path):
    import threading

    sp = load_sweep(KT).space("cuda")
    cand = expand(sp, load_catalog(), 90)[0]
    out: dict = {}
    t = threading.Thread(target=_warm_then_build, args=(sp, cand, tmp_path, out))
    t.start()
    t.join(120)
    assert out["first"] is None and 0 < out["warm_s"] < 60
    assert out["res"].ok and not out["res"].cached
    assert out["build_pid"] == out["warm_pid"]  # the build did not start another process


@needs_nvrtc
def test_identities_and_the_solve_build_flags():
    ident = wb.compiler_identity("nvrtc")
    assert len(ident) == 16 and ident != wb.compiler_identity("cuda")
    assert "nvrtc 13." in nvrtc.identity_text() and "sha256" in nvrtc.identity_text()
    job = wb.BuildJob("x", "cuda", "", "k.cu", "/s", {"A": 1}, target="sm_90")
    cmd = wb.command(job, Path("k.cu"), Path("k.so"))
    assert "-gencode=arch=compute_90,code=sm_90" in cmd and "-nodlink" in cmd
    job.flags = ["-rdc=true"]
    assert "-nodlink" not in wb.command(job, Path("k.cu"), Path("k.so"))


def test_missing_cuda_python_is_named(monkeypatch, tmp_path):
    from workers import launcher

    try:
        import cuda.bindings

        for mod in ("nvrtc", "driver"):
            monkeypatch.delattr(cuda.bindings, mod, raising=False)
    except ImportError:
        pass
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
    with pytest.raises(nvrtc.NvrtcMissing, match="cuda-bindings"):
        nvrtc.version()
    job = wb.BuildJob("nocp", "cuda", SAXPY_CU, "saxpy.cu", str(tmp_path), {}, target="sm_90",
                      mode="kernel", launch={"kernel": "saxpy", "block": [1], "grid": [1],
                                             "smem_bytes": 0})
    res, data = wb.build(job, cache=tmp_path)
    assert not res.ok and data is None and "cuda-bindings" in res.error
    with pytest.raises(launcher.LauncherError, match="cuda-bindings") as ei:
        launcher._driver()
    assert ei.value.missing


def test_artifact_format_and_geometry_errors():
    data = nvrtc.pack({"kernel": "k", "lowered": "_Z1kv"}, b"\x7fELFcubin")
    assert nvrtc.is_kernel_artifact(data) and not nvrtc.is_kernel_artifact(b"\x7fELF....")
    assert nvrtc.unpack(data) == ({"kernel": "k", "lowered": "_Z1kv"}, b"\x7fELFcubin")
    with pytest.raises(ValueError, match="bad magic"):
        nvrtc.unpack(b"\x7fELF")
    spec = {"kernel": "k", "block": ["T", 2], "grid": ["N // T"], "smem_bytes": "S * 4"}
    zspec = {**spec, "grid": ["N // Z"]}
    assert launch_geometry(spec, {"T": 64, "N": 640, "S": 10}) == {
        "block": [64, 2, 1], "grid": [10, 1, 1], "smem_bytes": 40}
    for sp, env, msg in [(spec, {"T": 0, "N": 1, "S": 0}, "gives 0; it must be >= 1"),
                         (spec, {"T": 64, "N": 640}, "no value for 'S'"),
                         (spec, {"T": 64, "N": 640, "S": -1}, "must be >= 0"),
                         (spec, {"T": 64, "N": 640, "S": 0.3}, "not an integer"),
                         (spec, {"T": 64, "N": 640, "S": 0.5}, "a float: use //"),
                         (zspec, {"T": 64, "N": 640, "S": 1, "Z": 0}, "division by zero")]:
        with pytest.raises(ValueError, match=msg):
            launch_geometry(sp, env)


@needs_nvrtc
def test_a_cubin_on_the_cpu_harness_is_an_error(tmp_path):
    from workers.harness import Harness, JobError

    sp = load_sweep(make(tmp_path)).space("cuda")
    base = expand(sp, load_catalog(), 90)[0]
    job = _job(sp, base)
    res, data = wb.build(job, cache=tmp_path / "c")
    art = wb.ensure_artifact(job.build_id, data, cache=tmp_path / "c")
    with pytest.raises(JobError, match="cuda backend only"):
        Harness("cpu").lib(str(art), [])


@needs_nvrtc
def test_without_a_driver_loading_a_cubin_is_a_clear_error(tmp_path):
    import torch

    from workers.launcher import KernelLauncher, LauncherError

    if torch.cuda.is_available():
        pytest.skip("a driver is installed here")
    sp = load_sweep(make(tmp_path)).space("cuda")
    job = _job(sp, expand(sp, load_catalog(), 90)[0])
    _, data = wb.build(job, cache=tmp_path / "c")
    art = wb.ensure_artifact(job.build_id, data, cache=tmp_path / "c")
    with pytest.raises(LauncherError, match="cuInit") as ei:
        KernelLauncher(str(art), [])
    assert not ei.value.missing


@needs_nvrtc
def test_preflight_builds_a_kernel_mode_sweep_without_a_gpu():
    import torch

    from kopt.tools.preflight import run_preflight

    if torch.cuda.is_available():
        pytest.skip("with a GPU, preflight runs the kernel (test_gpu_kernel_mode_launches)")
    out = run_preflight(load_sweep(KT), backend="cuda")
    assert out["status"] == "built", out
    assert out["command"].startswith("nvrtc ") and out["registers"] > 0
    assert out["signature"].startswith("__global__ void sgemm_kernel(")
    # the baseline (16 x 16 threads, 1 x 1 tiles, no padding) at 4096^3: 256 x 256 blocks,
    # A and B tiles of 16 x 16 floats in dynamic shared memory
    assert out["launch"].startswith("grid [256, 256, 1] x block [16, 16, 1], dynamic shared "
                                    "memory 2048 B")


# -- on a GPU -------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_nvrtc
def test_gpu_kernel_mode_launches(tmp_path):
    """sgemm_kt candidates through the sandboxed harness: the baseline, a register-tiled
    one, one with > 48 KiB of dynamic shared memory, and a launch the driver refuses."""
    import torch

    from workers.sandbox import Sandbox

    sw = load_sweep(KT)
    sp = sw.space("cuda")
    major, minor = torch.cuda.get_device_capability(0)
    cands = expand(sp, load_catalog(), major * 10 + minor)
    tiled = next(c for c in cands if c.params["block_size_x"] == 32
                 and c.params["tile_size_x"] == 4 and c.params["tile_size_y"] == 4)
    big = next(c for c in cands if c.params["block_size_x"] == 64
               and c.params["tile_size_x"] == 8 and c.params["tile_size_y"] == 8)
    dims = {"M": 1024, "N": 1024, "K": 1024}
    base_job = {**job_base(sw, sp), "dims": dims}
    base_job["timing"] = {**base_job["timing"], "max_samples": 20, "max_time_ms": 200.0}
    sb = Sandbox("cuda")
    sb.start()
    try:
        outs = {}
        for name, c, launch in [("base", cands[0], None), ("tiled", tiled, None),
                                ("big", big, None),
                                ("refused", cands[0], {**sp.launch_spec(), "block": [2048]})]:
            job = _job(sp, c)
            if launch is not None:
                job.build_id, job.launch = job.build_id + "-refused", launch
            res, data = wb.build(job, cache=tmp_path)
            assert res.ok, res.error
            art = wb.ensure_artifact(job.build_id, data, cache=tmp_path)
            outs[name] = sb.run({**base_job, "artifact": str(art), "build_id": job.build_id,
                                 "job_key": name}, 120)
    finally:
        sb.close()
    for name in ("base", "tiled", "big"):
        o = outs[name]
        assert o["status"] == "ok", o
        assert o["max_abs_err"] < 1e-2 and 0 < o["median_ms"] < 1000 and o["n_samples"] >= 10
    assert outs["refused"]["status"] == "launch_error"
    assert "CUDA_ERROR_INVALID_VALUE" in outs["refused"]["error"], outs["refused"]


def test_the_driver_plans_kernel_mode_builds(tmp_path):
    """The pipeline's plan for sgemm_kt on an sm_90 class: NVRTC build jobs that carry the
    launch block, build ids that depend on it, and one of them built for real."""
    from kopt.core.expand import Context
    from kopt.driver.sweep import Driver

    sw = load_sweep(ROOT / "sweeps" / "sgemm_kt")
    space = sw.space("cuda")
    d = Driver(sw, tmp_path / "store", backend="cuda")
    digest = stable_hash(space.source_text())
    jobs, builds, counts = d._plan(space, {"h200-sm90": {"sm": 90, "platform": "x86_64"}},
                                   {"x86_64": wb.compiler_identity(space.toolchain)}, digest,
                                   1, {"h200-sm90": Context()})
    assert counts == {"h200-sm90": 160} and len(jobs) == 160 and len(builds) == 160
    assert {b.mode for b in builds.values()} == {"kernel"}
    assert {b.launch["kernel"] for b in builds.values()} == {"sgemm_kernel"}
    base = next(j for j in jobs if j.candidate.is_baseline)
    res, data = wb.build(builds[base.build_id], cache=tmp_path / "cache")
    assert res.ok and data and res.registers and res.spill_bytes == 0, res.error


def test_candidates_that_cannot_launch_are_not_expanded(tmp_path):
    """Geometry beyond the device's limits (2048 threads; 300 KiB of dynamic shared memory,
    more than an sm_90 block may opt into) drops the candidate at expansion, like a
    restriction; on sm_75 (64 KiB) the 96 KiB one goes too."""
    yaml = SAXPY.replace("params: {THREADS: [128, 256], ITEMS: [1, 4]}",
                         "params: {THREADS: [128, 2048], ITEMS: [1], SMEM: [0, 98304, 307200]}"
                         ).replace('    grid: ["(N', '    smem_bytes: SMEM\n      grid: ["(N')
    sw = load_sweep(make(tmp_path, yaml))
    space = sw.space("cuda")
    got90 = sorted((c.params["THREADS"], c.params["SMEM"])
                   for c in expand(space, load_catalog(), 90))
    assert got90 == [(128, 0), (128, 98304)]
    got75 = sorted((c.params["THREADS"], c.params["SMEM"])
                   for c in expand(space, load_catalog(), 75))
    assert got75 == [(128, 0)]


def test_unbounded_power_in_the_geometry_names_the_entry(tmp_path):
    """A launch entry whose value would be a gigantic integer names its field."""
    expect(tmp_path, SAXPY.replace('grid: ["(N + THREADS * ITEMS - 1) // (THREADS * ITEMS)"]',
                                   'grid: ["N ** 2 ** 20"]'),
           "field 'launch.grid[0]'", "100000 ** 1048576", "4096 bits")


@pytest.mark.parametrize("flag", ["-arch=sm_80", "-arch=compute_80", "--gpu-architecture=sm_80",
                                  "-gencode=arch=compute_80,code=sm_80", "-code=sm_80",
                                  "--generate-code=arch=compute_80,code=sm_80"])
def test_flags_that_set_the_arch_are_refused(tmp_path, flag):
    """`-arch=sm_80` in flags silently replaced the device's arch (rows said
    sm_90, launches failed with CUDA_ERROR_NO_BINARY_FOR_GPU); refused at load, in kernel
    mode and in solve mode."""
    expect(tmp_path, SAXPY + f'    flags: ["-maxrregcount=64", "{flag}"]\n', "field 'flags'",
           repr(flag), "sets the GPU arch", "sm_90a automatically", "remove it")
    solve = ("kernel: k.cu\ndims: [{N: 8}]\nargs: {x: [N], y: [N]}\n"
             f'flags: ["-lineinfo", "{flag}"]\n')
    expect(tmp_path, solve, "field 'flags'", repr(flag), **{"k.cu": VADD_CPP, "ref.py": VADD_REF})


def test_a_build_job_with_an_arch_flag_is_refused(tmp_path):
    """A build job made without the spec (the worker side) refuses an arch flag too, before
    any compiler runs, so that the `arch` it records is the arch it built."""
    for mode, launch in (("solve", None), ("kernel", {"kernel": "saxpy", "block": [1],
                                                      "grid": [1], "smem_bytes": 0})):
        job = wb.BuildJob(f"arch-{mode}", "cuda", "", "saxpy.cu", str(tmp_path), {},
                          ["-arch", "sm_80"], target="sm_90", mode=mode, launch=launch)
        res, data = wb.build(job, cache=tmp_path)
        assert not res.ok and data is None
        assert res.error == "flag '-arch' sets the GPU arch; kopt builds for the device's own " \
                            "(sm_90): remove it"
