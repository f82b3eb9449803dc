"""sweeps/gate_up_prefill (the MLP's gate and up projections at prefill, two CUTLASS 3.x GEMMs)
builds in CI through kopt's builder for sm_90a, both GEMMs and the elementwise kernel compiled
by ptxas without spills; on an sm_87 device (Jetson Orin) kopt refuses the sweep in one line.
A file of its own, so that pytest-xdist (--dist loadfile) can put its minute of nvcc beside the
other CUTLASS builds rather than after them."""

from __future__ import annotations

import shutil

import pytest
from test_cutlass_build import _archs, _build_baseline

from conftest import ROOT
from kopt.core.catalog import load_catalog
from kopt.core.expand import expand
from kopt.core.spec import SpecError, load_sweep

SWEEP = ROOT / "sweeps" / "gate_up_prefill"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_gate_up_prefill_baseline_builds_for_sm90a(tmp_path):
    space, base, res, data = _build_baseline("gate_up_prefill", tmp_path)
    assert base.target == "sm_90a" and space.needs_sm90a
    assert base.defines == {"TILE_M": 128, "TILE_N": 128, "CLUSTER_M": 1, "CLUSTER_N": 1,
                            "KSCHED": 2}
    assert "-gencode=arch=compute_90a,code=sm_90a" in res.command
    assert _archs(data, tmp_path) == {"sm_90a"}
    # the GEMM (run twice: gate, then up into the scratch) and the SiLU * up kernel
    names = [k["name"] for k in res.kernels]
    assert len(names) == 2 and any("silu_mul" in n for n in names), names


def test_gate_up_prefill_space_and_its_refusal_on_sm87():
    sp = load_sweep(SWEEP).space("cuda")
    cands = expand(sp, load_catalog(), 90)
    # tiles x clusters x schedules kept by the restrictions: 9 of 128 x 128, 2 each of
    # 128 x 256 and 256 x 128 (cooperative only: 128 accumulators per thread at most)
    assert len(cands) == 13 and cands[0].is_baseline
    assert {c.target for c in cands} == {"sm_90a"}
    assert all(c.defines["TILE_M"] * c.defines["TILE_N"] // (128 * (2 if c.defines["KSCHED"]
               == 2 else 1)) <= 128 for c in cands)
    with pytest.raises(SpecError, match=r"needs the sm_90a target .* run the sweep on an sm_90 "
                                        r"device"):
        expand(sp, load_catalog(), 87)
