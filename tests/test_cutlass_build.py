"""The CUTLASS sweeps build: kopt's own builder compiles sweeps/gemm_cutlass's baseline
(a CUTLASS 3.x warp-specialized TMA GEMM from the `nvidia-cutlass` package's headers) for
sm_90a, and the artifact holds sm_90a code only (with the bf16x3 kernel, `device_host`: 1-3
minutes of a CI worker each, built with the GPU tests on the H200 host); gemm_cutlass_fp32's
(3xTF32, CUTLASS 2.x) for sm_90, in CI.
The package is installed by the README's install line (`pip install -e '.[test,cutlass]'`),
so the tests run wherever nvcc does."""

from __future__ import annotations

import importlib.util
import platform
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from kopt.core.catalog import load_catalog
from kopt.core.expand import iter_candidates, space_digest
from kopt.core.spec import load_sweep
from kopt.run.builder import build_id, build_job
from workers import build as wb

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def _cuobjdump() -> str:
    """cuobjdump on PATH, else the one of the nvidia-cuda-cuobjdump wheel (the test extra)."""
    exe = shutil.which("cuobjdump")
    spec = importlib.util.find_spec("nvidia")
    for d in (spec.submodule_search_locations or []) if exe is None and spec else []:
        exe = next((str(p) for p in sorted(Path(d).glob("*/bin/cuobjdump"))), None)
        if exe:
            break
    assert exe, "no cuobjdump: pip install nvidia-cuda-cuobjdump (kopt's test extra)"
    return exe


def _build_baseline(name: str, tmp_path: Path, pick: Any = None) -> tuple[Any, Any, Any, bytes]:
    """(space, candidate, build result, artifact) of sweeps/NAME's baseline (or the first
    candidate for which pick(candidate) is true) built through kopt's builder for an sm_90
    device, into a fresh cache."""
    space = load_sweep(ROOT / "sweeps" / name).space("cuda")
    base = next(c for c in iter_candidates(space, load_catalog(), 90)
                if (pick(c) if pick else c.is_baseline))
    bid = build_id(space, base, space_digest(space), wb.compiler_identity(space.toolchain),
                   platform.machine())
    res, data = wb.build(build_job(space, base, bid, space.source_text()), cache=tmp_path)
    assert res.ok, res.error
    # ptxas compiled the kernel (CUTLASS's shared memory is dynamic) without spills
    assert res.kernels and res.registers and res.spill_bytes == 0
    return space, base, res, data


def _archs(data: bytes, tmp_path: Path) -> set[str]:
    so = tmp_path / "solve.so"
    so.write_bytes(data)
    elf = subprocess.run([_cuobjdump(), "-lelf", str(so)], capture_output=True, text=True,
                         check=True).stdout
    return set(re.findall(r"sm_\d+a?", elf))


@pytest.mark.device_host  # 80-190 s of one CI worker (CUTLASS 3.x): built on the H200 host;
# the sm_90a gencode path stays in CI (tests/test_build.py::test_sm90a_target_uses_gencode)
def test_gemm_cutlass_baseline_builds_for_sm90a(tmp_path):
    space, base, res, data = _build_baseline("gemm_cutlass", tmp_path)
    assert base.target == "sm_90a"
    assert {"KSCHED": 0, "ESCHED": 0, "TILE_M": 128, "TILE_N": 128}.items() <= base.defines.items()
    assert "-gencode=arch=compute_90a,code=sm_90a" in res.command
    assert _archs(data, tmp_path) == {"sm_90a"}
    # the CUTLASS headers count as the build's inputs: a new nvidia-cutlass is a new build
    assert any(p.endswith("cutlass/gemm/kernel/gemm_universal.hpp") for p in space.local_inputs())


def test_gemm_cutlass_fp32_baseline_builds_for_sm90(tmp_path):
    # 3xTF32 through CUTLASS 2.x's Sm80 kernel (mma.sync): plain sm_90, no sm_90a needed
    space, base, res, data = _build_baseline("gemm_cutlass_fp32", tmp_path)
    assert base.target == "sm_90" and not space.needs_sm90a
    assert "-gencode=arch=compute_90,code=sm_90" in res.command
    assert _archs(data, tmp_path) == {"sm_90"}


@pytest.mark.device_host  # 98-108 s of one CI worker: built on the H200 host instead
def test_gemm_cutlass_fp32_warp_specialized_bf16x3_builds_for_sm90a(tmp_path):
    # compute.warp_specialization (with memory.async_copy's TMA form) realized as a
    # CUTLASS 3.x warp-specialized cooperative wgmma GEMM of the bf16x3 split: sm_90a only
    space, cand, res, data = _build_baseline(
        "gemm_cutlass_fp32", tmp_path,
        lambda c: c.triple[0] == "compute.warp_specialization" and c.params["WSCHED"] == 2)
    assert cand.target == "sm_90a" and not cand.is_baseline
    assert {"BF16X3": 1, "WS": 1, "WSCHED": 2}.items() <= cand.defines.items()
    assert "-gencode=arch=compute_90a,code=sm_90a" in res.command
    assert _archs(data, tmp_path) == {"sm_90a"}
    # the split kernel and the CUTLASS kernel, each compiled by ptxas
    assert len(res.kernels) == 2 and any("split_operand" in k["name"] for k in res.kernels)
