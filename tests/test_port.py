"""kopt port: a CPU sweep's winner into a small git repository (a C++ kernel, a Makefile, a
test), on a new branch in its own worktree; the user's branch and changes stay untouched."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest
from click.testing import CliRunner

from conftest import write_sweep
from kopt.cli.main import main
from kopt.util.command import bench_figure

KERNEL = """
    #ifndef CHUNK
    #define CHUNK 1
    #endif
    extern "C" int kernel_chunk() { return CHUNK; }
    extern "C" void solve(const float* x, const float* y, float* out, int N) {
      for (int c = 0; c < N; c += CHUNK)
        for (int i = c; i < c + CHUNK && i < N; ++i) out[i] = x[i] + y[i];
    }
"""
MAIN = """
    #include <chrono>
    #include <cstdio>
    #include <cstdlib>
    #include <cstring>
    #include <vector>
    extern "C" int kernel_chunk();
    extern "C" void solve(const float* x, const float* y, float* out, int N);
    int main(int argc, char** argv) {
      int n = 1 << 16;
      std::vector<float> x(n, 1.5f), y(n, 2.0f), out(n, 0.f);
      auto t0 = std::chrono::steady_clock::now();
      solve(x.data(), y.data(), out.data(), n);
      double ms = std::chrono::duration<double, std::milli>(
          std::chrono::steady_clock::now() - t0).count();
      for (int i = 0; i < n; ++i) if (out[i] != 3.5f) { std::puts("wrong sum"); return 1; }
      bool expect = argc > 2 && !std::strcmp(argv[1], "--expect-chunk");
      if (expect && kernel_chunk() != std::atoi(argv[2])) {
        std::printf("CHUNK is %d, expected %s\\n", kernel_chunk(), argv[2]);
        return 1;
      }
      if (argc > 1 && !std::strcmp(argv[1], "--bench")) std::printf("solve took %.6f ms\\n", ms);
      else std::puts("ok");
      return 0;
    }
"""
MAKEFILE = "check: kernel.cpp main.cpp\n\tg++ -O2 -o check kernel.cpp main.cpp\n"


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in (r.output or ""), r.output
    return r


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def swept(ray_local, tmp_path_factory):
    """A finished CPU sweep over CHUNK (the baseline 1 against 64 and 512) and its store."""
    from kopt.core.spec import load_sweep
    from kopt.driver.sweep import run_sweep

    tmp = tmp_path_factory.mktemp("port")
    d = write_sweep(tmp / "vadd", """
        name: vadd
        kernel: vadd.cpp
        dims: [{N: 262144}]
        tolerance: {atol: 1.0e-6, rtol: 1.0e-6}
        args: {x: [N], y: [N], out: [N]}
        params: {CHUNK: [1, 64, 512]}
        baseline: {CHUNK: 1}
        timing: {warmup_ms: 1, min_samples: 3, max_samples: 5}
        """, {"vadd.cpp": KERNEL, "ref.py": """
        def reference(x, y, N):
            return (x.double() + y.double()).float()
        """})
    s = run_sweep(load_sweep(d), tmp / "store", backend="cpu")
    assert s.status_counts == {"ok": 3}
    return s.run_id, tmp / "store"


def make_repo(path):
    path.mkdir()
    (path / "kernel.cpp").write_text(textwrap.dedent(KERNEL))
    (path / "main.cpp").write_text(textwrap.dedent(MAIN))
    (path / "Makefile").write_text(MAKEFILE)
    (path / ".gitignore").write_text("check\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "-c", "user.name=u", "-c", "user.email=u@x", "add", "-A")
    git(path, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "the kernel")
    return path


def test_bench_figure_format():
    assert bench_figure("warming up 3 runs\nsolve took 0.25 ms\n") == 0.25
    assert bench_figure("time_ms=1.5e-3\nbye\n") == 1.5e-3
    assert bench_figure("no figures here\n") is None


def test_port_builds_tests_benches_on_a_new_branch(swept, tmp_path):
    run_id, store = swept
    repo = make_repo(tmp_path / "repo")
    (repo / "main.cpp").write_text((repo / "main.cpp").read_text() + "// my edit\n")  # dirty
    head = git(repo, "rev-parse", "HEAD")
    best = json.loads(run("best", "vadd", "--store", store, "--format", "json").output)
    chunk = json.loads(best[0]["params"])["CHUNK"]
    r = run("port", run_id, "--to", repo / "kernel.cpp", "--store", store, "--build", "make",
            "--test", f"./check --expect-chunk {chunk}", "--bench", "./check --bench",
            "--bench-runs", 2)
    # a real bench of a tiny kernel: FASTER (0), SLOWER (3) or TIED (4), as it measures
    assert r.exit_code in (0, 3, 4), r.output
    assert "bench before: median " in r.output and "bench after: median " in r.output
    assert ("ported: branch kopt/port-" in r.output) == (r.exit_code == 0)
    # the user's checkout: same branch, same commit, the uncommitted edit still there
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "rev-parse", "HEAD") == head
    assert (repo / "main.cpp").read_text().endswith("// my edit\n")
    assert "#define CHUNK" not in (repo / "kernel.cpp").read_text().split("#ifndef")[0]
    rows = json.loads(run("query", "--store", store, "--format", "json",
                          "select * from ports order by created_at, step").output)
    steps = {x["step"]: x for x in rows}
    assert set(steps) == {"build_before", "bench_before", "build", "test", "bench"}
    assert [x["step"] for x in rows].count("bench") == 2
    assert sorted(x["run_no"] for x in rows if x["step"].startswith("bench")) == [1, 1, 2, 2]
    status = {0: "ok", 3: "slower", 4: "tied"}[r.exit_code]
    assert all(x["exit_status"] == 0 and x["status"] == status for x in rows)
    assert steps["bench_before"]["bench_value"] is not None
    assert steps["bench"]["bench_value"] is not None and steps["test"]["output_tail"] == "ok\n"
    branch = steps["build"]["branch"]
    ported = git(repo, "show", f"{branch}:kernel.cpp")
    assert ported.startswith("// kopt port: sweep vadd, run " + run_id)
    # the sweep's figure to 4 significant digits, not Python's repr (3.2215914999999997)
    figure = f"{float(best[0]['median_ms']):.4g} ms in the sweep)\n"
    assert ported.splitlines(keepends=True)[0].endswith(figure)
    assert f"#define CHUNK {chunk}\n" in ported.split("#ifndef")[0]
    assert git(repo, "rev-parse", f"{branch}~1") == head
    assert git(repo, "diff", "--name-only", head, branch) == "kernel.cpp"


def test_failing_test_is_recorded_and_the_branch_left(swept, tmp_path):
    run_id, store = swept
    repo = make_repo(tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD")
    r = run("port", run_id, "--to", repo / "kernel.cpp", "--store", store, "--build", "make",
            "--test", "./check --expect-chunk 7", "--timeout", "60")
    assert r.exit_code == 1 and "test failed" in r.output and "untouched" in r.output
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo, "rev-parse", "HEAD") == head and not git(repo, "status", "--porcelain")
    rows = json.loads(run("query", "--store", store, "--format", "json",
                          f"select * from ports where repo = '{repo}' order by step").output)
    assert [x["step"] for x in rows] == ["build", "test"]
    assert {x["status"] for x in rows} == {"test_failed"}
    test_row = rows[1]
    assert test_row["exit_status"] == 1 and "expected 7" in test_row["output_tail"]
    assert git(repo, "branch", "--list", rows[0]["branch"])  # left for inspection


def test_port_refuses_a_dirty_file_or_a_merge_in_progress(swept, tmp_path):
    run_id, store = swept
    repo = make_repo(tmp_path / "repo")
    (repo / "kernel.cpp").write_text("// half-done edit\n")
    r = run("port", run_id, "--to", repo / "kernel.cpp", "--store", store)
    assert r.exit_code == 2 and "uncommitted changes" in r.output
    assert (repo / "kernel.cpp").read_text() == "// half-done edit\n"
    git(repo, "checkout", "-q", "kernel.cpp")
    # a merge stopped on a conflict
    cfg = ["-c", "user.name=u", "-c", "user.email=u@x"]
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "Makefile").write_text("# other\n")
    git(repo, *cfg, "commit", "-qam", "other")
    git(repo, "checkout", "-q", "main")
    (repo / "Makefile").write_text("# main\n")
    git(repo, *cfg, "commit", "-qam", "main")
    subprocess.run(["git", "-C", str(repo), *cfg, "merge", "other"], capture_output=True)
    r = run("port", run_id, "--to", repo / "kernel.cpp", "--store", store)
    assert r.exit_code == 2 and "in the middle of a merge" in r.output
    assert git(repo, "branch", "--list", "kopt/*") == ""
