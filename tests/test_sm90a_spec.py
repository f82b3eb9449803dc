"""sweep.yaml's ``needs_sm90a: true`` (every candidate built for sm_90a, refused on other
archs) and ``include_dirs`` entries that name a folder inside an installed Python package
(``pkg:cutlass_library/source/include``), as sweeps/gemm_cutlass uses them. CPU only."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import write_sweep
from kopt.core.catalog import load_catalog
from kopt.core.expand import iter_candidates, scan_axes
from kopt.core.spec import SpecError, load_sweep

CU = """
    extern "C" void solve(const float* x, float* y, int N) {}
"""
REF = {"ref.py": """
    def reference(x, N):
        return x
    """}


def _sweep(tmp_path: Path, extra: str, kernel: str = "k.cu", src: str = CU) -> Path:
    return write_sweep(tmp_path / "s", f"""
        kernel: {kernel}
        dims: [{{N: 1024}}]
        args: {{x: [N], y: [N]}}
        params: {{T: [1, 2]}}
        {extra}
        """, {kernel: src, **REF})


def test_needs_sm90a_builds_every_candidate_for_sm90a(tmp_path):
    sp = load_sweep(_sweep(tmp_path, "needs_sm90a: true")).space("cuda")
    assert sp.needs_sm90a
    assert [c.target for c in iter_candidates(sp, load_catalog(), 90)] == ["sm_90a", "sm_90a"]
    # without it: the device's own arch, as before
    plain = load_sweep(_sweep(tmp_path / "p", "")).space("cuda")
    assert [c.target for c in iter_candidates(plain, load_catalog(), 90)] == ["sm_90", "sm_90"]


def test_needs_sm90a_refuses_another_arch_in_one_line(tmp_path):
    sp = load_sweep(_sweep(tmp_path, "needs_sm90a: true")).space("cuda")
    with pytest.raises(SpecError) as e:
        next(iter_candidates(sp, load_catalog(), 80))
    assert str(e.value) == ("k.cu needs the sm_90a target (sweep.yaml: `needs_sm90a: true`), "
                            "which an sm_80 device cannot run: run the sweep on an sm_90 device "
                            "(H100/H200)")


def test_needs_sm90a_on_a_cpu_source_is_a_spec_error(tmp_path):
    d = _sweep(tmp_path, "needs_sm90a: true", "k.cpp",
               'extern "C" void solve(const float* x, float* y, int N) {}\n')
    with pytest.raises(SpecError, match=r"field 'needs_sm90a': sm_90a is a GPU target; k.cpp "
                                        r"is a cpu source"):
        load_sweep(d).space("cpu")


def test_pkg_include_dir_is_the_folder_inside_the_installed_package(tmp_path):
    # json is a package of the standard library: installed everywhere
    where = Path(importlib.util.find_spec("json").submodule_search_locations[0])
    sp = load_sweep(_sweep(tmp_path, "include_dirs: ['pkg:json', 'pkg:json/__pycache__/..']")
                    ).space("cuda")
    assert sp.include_dirs == [str(where.resolve()), str(where.resolve())]


def test_pkg_include_dir_of_a_missing_package_names_it_and_pip(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("kopt.core.spec").core.spec.PIP_NAMES, "kopt_no_such_pkg",
                        "kopt-no-such-dist")
    d = _sweep(tmp_path, "include_dirs: ['pkg:kopt_no_such_pkg/source/include']")
    with pytest.raises(SpecError) as e:
        load_sweep(d)
    assert str(e.value) == (
        f"{d / 'sweep.yaml'}: field 'include_dirs[0]': 'pkg:kopt_no_such_pkg/source/include' "
        "names the Python package 'kopt_no_such_pkg', which is not installed here: "
        "pip install kopt-no-such-dist")
    d2 = _sweep(tmp_path / "2", "include_dirs: ['pkg:kopt_other_pkg/include']")
    with pytest.raises(SpecError, match="pip install the distribution that provides it$"):
        load_sweep(d2)


def test_pkg_include_dir_that_the_package_lacks(tmp_path):
    d = _sweep(tmp_path, "include_dirs: ['pkg:json/no_such_folder']")
    with pytest.raises(SpecError, match=r"field 'include_dirs\[0\]': 'pkg:json/no_such_folder': "
                                        r"the package 'json' \(at .*\) has no folder "
                                        r"'no_such_folder'; name a folder inside it$"):
        load_sweep(d)


def test_cutlass_names_nvidia_cutlass():
    from kopt.core.spec import PIP_NAMES

    assert PIP_NAMES["cutlass_library"] == "nvidia-cutlass"


def test_a_realization_needing_sm90a_is_built_for_it_and_gated_elsewhere(tmp_path):
    # a kernel's realization of a method the catalog allows from sm_80
    # (memory.async_copy: cp.async) may need sm_90a (its TMA form feeding wgmma)
    extra = """methods:
          memory.async_copy: {needs_sm90a: true, defines: {TMA: 1}}
          memory.tiling_smem: {defines: {TILED: 1}}"""
    sp = load_sweep(_sweep(tmp_path, extra)).space("cuda")
    assert sp.methods["memory.async_copy"].needs_sm90a and not sp.needs_sm90a
    targets = {(c.triple[1], c.target) for c in iter_candidates(sp, load_catalog(), 90)}
    assert targets == {(None, "sm_90"), ("memory.tiling_smem", "sm_90"),
                       ("memory.async_copy", "sm_90a")}
    # on an sm_80 device (where the catalog admits cp.async) the realization is refused
    scan = scan_axes(sp, load_catalog(), 80)["memory"]
    assert [(s.method, s.reason) for s in scan] == [("memory.tiling_smem", ""),
                                                    ("memory.async_copy", "arch_incompatible")]
    assert {c.triple[1] for c in iter_candidates(sp, load_catalog(), 80)} == {
        None, "memory.tiling_smem"}


def test_a_realization_needing_sm90a_on_a_cpu_source_is_a_spec_error(tmp_path):
    d = _sweep(tmp_path, "methods: {memory.async_copy: {needs_sm90a: true}}", "k.cpp",
               'extern "C" void solve(const float* x, float* y, int N) {}\n')
    with pytest.raises(SpecError, match=r"field 'methods.memory.async_copy.needs_sm90a': sm_90a "
                                        r"is a GPU target; k.cpp is a cpu source"):
        load_sweep(d).space("cpu")


def test_gemm_cutlass_fp32_hopper_methods_are_sm90a_and_refused_on_sm87():
    from conftest import ROOT

    sp = load_sweep(ROOT / "sweeps" / "gemm_cutlass_fp32").space("cuda")
    cands = list(iter_candidates(sp, load_catalog(), 90))
    hopper = [c for c in cands if c.triple != (None, None, None)]
    assert {c.triple for c in hopper} == {
        (None, "memory.async_copy", None),
        ("compute.warp_specialization", "memory.async_copy", None)}
    assert {c.target for c in hopper} == {"sm_90a"} and len(hopper) == 10
    assert all(c.defines["BF16X3"] == 1 for c in hopper)
    assert {c.target for c in cands if c not in hopper} == {"sm_90"}
    reasons = {s.method: s.reason for axis in scan_axes(sp, load_catalog(), 87).values()
               for s in axis}
    assert reasons == {"compute.warp_specialization": "arch_incompatible",
                       "memory.async_copy": "arch_incompatible"}
    assert {c.triple for c in iter_candidates(sp, load_catalog(), 87)} == {(None, None, None)}
