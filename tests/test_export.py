"""``kopt export``: the best configuration per device class and problem size as a C header
(compiled here into a small C++ program with g++ and run), as T4 JSON, and as sources."""

import json
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from conftest import VADD_CPP, VADD_REF, write_sweep
from kopt.cli.main import main
from kopt.store.files import now, write_table
from kopt.tools.export import device_macro

X86, ARM = "cpu-x86_64", "cpu-aarch64"

MAIN = r"""
#include <cstdio>
#include "HEADER"
#ifndef VEC
#define VEC 1
#endif
int main() {
  std::printf("%s %s N=%d CHUNK=%d VEC=%d %.2f\n", KOPT_DEVICE_CLASS, KOPT_CANDIDATE_ID,
              KOPT_DIM_N, CHUNK, VEC, KOPT_MEDIAN_MS);
  return 0;
}
"""


def build_and_run(tmp_path, header, *flags):
    """Compile MAIN against ``header`` with ``flags``; (g++ exit, program output or g++'s
    errors)."""
    src = tmp_path / "main.cpp"
    src.write_text(MAIN.replace("HEADER", str(header)))
    exe = tmp_path / "main"
    cc = subprocess.run(["g++", "-std=c++17", *flags, str(src), "-o", str(exe)],
                        capture_output=True, text=True)
    if cc.returncode:
        return cc.returncode, cc.stderr
    return 0, subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def cand(run, dc, cid, dims, median_ms, defines, base=False):
    return {"run_id": run, "sweep": "demo", "iteration": 1, "job_key": f"{dc}{cid}{dims}",
            "candidate_id": cid, "is_baseline": base, "status": "ok", "median_ms": median_ms,
            "iqr_ms": median_ms / 50, "samples_ms": [median_ms] * 3, "compile_s": 0.5,
            "n_samples": 3, "dims": json.dumps({"N": dims}), "device_class": dc,
            "backend": "cpu", "memory_method": "memory.vectorized_access"
            if "VEC" in defines else None, "params": json.dumps({"CHUNK": defines["CHUNK"]}),
            "defines": json.dumps(defines, sort_keys=True), "created_at": now()}


def write_two_classes(root, sweep_dir):
    """Two CPU classes, two problem sizes each; no loop state, so each size's fastest."""
    b, c1, c2 = {"CHUNK": 64}, {"CHUNK": 256, "VEC": 4}, {"CHUNK": 1024}
    rows = []
    for dc, medians in ((X86, {1024: (2.0, 1.0, 1.5), 4096: (8.0, 6.0, 4.0)}),
                        (ARM, {1024: (3.0, 3.5, 3.25), 4096: (9.0, 7.0, 8.0)})):
        for n, (mb, m1, m2) in medians.items():
            rows += [cand("r1", dc, "b", n, mb, b, base=True), cand("r1", dc, "c1", n, m1, c1),
                     cand("r1", dc, "c2", n, m2, c2)]
    write_table(root, "candidates", "demo", "r1", rows)
    write_table(root, "runs", "demo", "r1", [{
        "run_id": "r1", "sweep": "demo", "event": "finished", "backend": "cpu",
        "sweep_dir": str(sweep_dir), "created_at": now()}])


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_header_compiles_and_picks_by_class_and_size(tmp_path):
    sweep_dir = write_sweep(tmp_path / "s", "kernel: k.cpp\ndims: [{N: 1024}, {N: 4096}]\n"
                            "params: {CHUNK: [64, 256, 1024]}\n",
                            {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    write_two_classes(tmp_path / "st", sweep_dir)
    r = CliRunner().invoke(main, ["export", "demo", "--store", str(tmp_path / "st"), "--out",
                                  str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    header = tmp_path / "out" / "demo.h"
    assert device_macro(X86) == "KOPT_DEVICE_CPU_X86_64"
    assert build_and_run(tmp_path, header, "-DKOPT_DEVICE_CPU_X86_64") == (
        0, "cpu-x86_64 c1 N=1024 CHUNK=256 VEC=4 1.00\n")
    assert build_and_run(tmp_path, header, "-DKOPT_DEVICE_CPU_X86_64",
                         "-DKOPT_PROBLEM_SIZE=1") == (
        0, "cpu-x86_64 c2 N=4096 CHUNK=1024 VEC=1 4.00\n")
    assert build_and_run(tmp_path, header, "-DKOPT_DEVICE_CPU_AARCH64") == (
        0, "cpu-aarch64 b N=1024 CHUNK=64 VEC=1 3.00\n")
    assert build_and_run(tmp_path, header, "-DKOPT_DEVICE_CPU_AARCH64",
                         "-DKOPT_PROBLEM_SIZE=1") == (
        0, "cpu-aarch64 c1 N=4096 CHUNK=256 VEC=4 7.00\n")
    rc, err = build_and_run(tmp_path, header)
    assert rc != 0 and ("kopt export: define one device class macro: "
                        "-DKOPT_DEVICE_CPU_AARCH64, -DKOPT_DEVICE_CPU_X86_64") in err
    rc, err = build_and_run(tmp_path, header, "-DKOPT_DEVICE_CPU_X86_64",
                            "-DKOPT_PROBLEM_SIZE=2")
    assert rc != 0 and "KOPT_PROBLEM_SIZE must be 0..1 for cpu-x86_64" in err
    # T4: one result per class and size, the build's defines as the configuration
    t4 = json.loads((tmp_path / "out" / "demo.t4.json").read_text())
    assert t4["schema_version"] == "1.0.0" and len(t4["results"]) == 4
    first = t4["results"][0]
    assert first["configuration"] == {"CHUNK": 64}
    assert first["times"] == {"compilation_time": 500.0, "runtimes": [3.0, 3.0, 3.0]}
    assert (first["invalidity"], first["correctness"], first["objectives"]) == (
        "correct", 1, ["time"])
    assert {m["name"]: m["value"] for m in first["measurements"]} == {
        "time": 3.0, "time_iqr": 0.06, "device_class": ARM, "problem_size": "N=1024",
        "methods": [], "candidate_id": "b"}
    # realized sources: one per chosen candidate of a class
    names = sorted(p.name for p in (tmp_path / "out").glob("best-*"))
    assert names == ["best-cpu-aarch64-b.cpp", "best-cpu-aarch64-c1.cpp",
                     "best-cpu-x86_64-c1.cpp", "best-cpu-x86_64-c2.cpp"]
    text = (tmp_path / "out" / "best-cpu-x86_64-c1.cpp").read_text()
    assert "#define CHUNK 256\n#define VEC 4\n" in text and 'extern "C" void solve' in text


def test_export_of_an_unknown_sweep_is_one_line(tmp_path):
    write_two_classes(tmp_path / "st", tmp_path / "gone")
    r = CliRunner().invoke(main, ["export", "other", "--store", str(tmp_path / "st")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "no correct candidate of sweep 'other'" in r.output


TINY = """
    name: tiny
    kernel: tiny.cpp
    dims: [{N: 256}]
    args: {x: [N]}
    tolerance: {atol: 1.0e-6, rtol: 1.0e-6}
    params: {T: [1]}
    methods:
      compute.thread_coarsening: {defines: {A: 1}}
    timing: {warmup_ms: 1, min_samples: 5, max_samples: 10, target_rel_error: 0.05,
             timeout_s: 30}
    iterations: 1
"""
TINY_CPP = """
    // y = 3 x after a dependent integer chain that A cuts 32-fold: A certainly wins
    #ifndef A
    #define A 0
    #endif
    extern "C" void solve(const float* x, float* y, int N) {
      long work = A ? 2000 : 64000;
      unsigned s = 1;
      for (long k = 0; k < work; ++k) {
        s = s * 1664525u + 1013904223u;
        __asm__ __volatile__("" : "+r"(s));
      }
      for (int i = 0; i < N; ++i) y[i] = 3.0f * x[i] + (float)(s & 0u);
    }
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_cpu_sweep_exported_into_a_cpp_build(ray_local, tmp_path):
    """A one-iteration CPU sweep of two candidates whose winner is certain (A does 32x less
    work); the exported header carries it into a C++ build."""
    from kopt.core.spec import load_sweep
    from kopt.driver.sweep import run_sweep

    d = write_sweep(tmp_path / "tiny", TINY, {"tiny.cpp": TINY_CPP,
                                             "ref.py": "def reference(x, N):\n"
                                                       "    return 3.0 * x\n"})
    s = run_sweep(load_sweep(d), tmp_path / "st", backend="cpu")
    dc = next(iter(s.states))
    r = CliRunner().invoke(main, ["export", "tiny", "--store", str(tmp_path / "st"),
                                  "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    src = tmp_path / "p.cpp"
    src.write_text('#include <cstdio>\n#include "' + str(tmp_path / "out" / "tiny.h")
                   + '"\nint main() { std::printf("%s A=%d T=%d N=%d\\n", '
                   "KOPT_DEVICE_CLASS, A, T, KOPT_DIM_N); }\n")
    subprocess.run(["g++", f"-D{device_macro(dc)}", str(src), "-o", str(tmp_path / "p")],
                   check=True)
    got = subprocess.run([str(tmp_path / "p")], capture_output=True, text=True, check=True)
    assert got.stdout == f"{dc} A=1 T=1 N=256\n"
    assert (tmp_path / "out" / f"best-{dc}.cpp").read_text().count("#define A 1\n") == 1
