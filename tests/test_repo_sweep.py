"""Repo-local sweeps: the kernel and its headers live in a repository outside the sweep
folder (``kernel: ../repo/src/k.cpp``, ``include_dirs: [../repo/include]``). Every header
the source reaches there counts in the spec hash, the candidate ids and the build key, so an
edit in the repository is a new build."""

from __future__ import annotations

from conftest import write_sweep
from kopt.core.expand import space_digest
from kopt.core.spec import load_sweep
from kopt.tools.preflight import run_preflight

KERNEL = """
    #include "common.h"
    extern "C" void solve(const float* x, const float* y, float* out, int N) {
      for (int i = 0; i < N; ++i) out[i] = SCALE * (x[i] + y[i]);
    }
"""


def test_headers_of_a_repo_outside_the_sweep_folder_are_in_the_build_key(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "include" / "inner").mkdir(parents=True)
    (repo / "src" / "k.cpp").write_text(KERNEL)
    (repo / "include" / "common.h").write_text('#include "inner/scale.h"\n')
    (repo / "include" / "inner" / "scale.h").write_text("#define SCALE 1.0f\n")
    d = write_sweep(tmp_path / "sweep", """
        name: repo_vadd
        kernel: ../repo/src/k.cpp
        include_dirs: [../repo/include]
        dims: [{N: 4096}]
        args: {x: [N], y: [N], out: [N]}
        params: {T: [1]}
        baseline: {T: 1}
        """, {"ref.py": """
        def reference(x, y, N):
            return (x.double() + y.double()).float()
        """})
    sw = load_sweep(d)
    space = sw.space("cpu")
    assert space.source == (repo / "src" / "k.cpp").resolve()
    assert space.include_dirs == [str((repo / "include").resolve())]
    assert set(space.local_inputs()) == {"../include/common.h", "../include/inner/scale.h"}
    r = run_preflight(sw, "cpu", None)  # -I reaches the repository's include folder
    assert r["status"] == "ok", r
    before = (sw.spec_hash, space_digest(space))
    # an edit two includes deep in the repository: a new spec hash and a new build key
    (repo / "include" / "inner" / "scale.h").write_text("#define SCALE 2.0f\n")
    sw2 = load_sweep(d)
    after = (sw2.spec_hash, space_digest(sw2.space("cpu")))
    assert after[0] != before[0] and after[1] != before[1]
    r = run_preflight(sw2, "cpu", None)  # and the rebuilt kernel sees it (off by 2x)
    assert r["status"] == "wrong_result", r
