"""sweeps/gate_up_prefill (the MLP's gate and up projections at prefill, two CUTLASS 3.x GEMMs
for sm_90a): its space, its refusal on an sm_87 device (Jetson Orin) and on a CPU machine in one
line, and a cluster with an Orin beside an H200 running it on the H200 alone. Its builds are
not in CI (a minute of nvcc each, and the suite near its time limit): the H200 loop built its
baseline and v2 for sm_90a at all 13 launch configs, every one `ok`
(docs/verified/2026-12-03-h200-gate-up-prefill.md); tests/test_cutlass_build.py builds
gemm_cutlass's, through the same CUTLASS 3.x collectives and kopt's builder."""

from __future__ import annotations

import pytest

from conftest import ROOT
from kopt.core.catalog import load_catalog
from kopt.core.expand import expand
from kopt.core.spec import SpecError, load_sweep
from kopt.driver.checks import classes_for
from kopt.run.runner import SweepError

SWEEP = ROOT / "sweeps" / "gate_up_prefill"


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


def test_a_mixed_cluster_runs_an_sm90a_sweep_on_its_sm90_class_only():
    """An Orin (sm_87) beside an H200 (sm_90): expanding gate_up_prefill for the Orin raised
    in the middle of planning and stopped the whole run; the Orin's class now sits the sweep
    out with a note, and a cluster of Orins alone is refused in one line. A sweep without
    `needs_sm90a` keeps every class."""
    classes = {"h200-sm90": {"sm": 90}, "orin-sm87": {"sm": 87}}
    kept, notes = classes_for(load_sweep(SWEEP).space("cuda"), classes)
    assert kept == {"h200-sm90": {"sm": 90}}
    assert notes == ["gate_up_prefill.cu needs the sm_90a target (sweep.yaml: `needs_sm90a: "
                     "true`): device class orin-sm87 (sm_87) sits this sweep out"]
    with pytest.raises(SweepError, match=r"^gate_up_prefill.cu needs the sm_90a target .*which "
                                         r"no device here can run \(orin-sm87 \(sm_87\)\): run "
                                         r"the sweep on an sm_90 device"):
        classes_for(load_sweep(SWEEP).space("cuda"), {"orin-sm87": {"sm": 87}})
    plain = load_sweep(ROOT / "sweeps" / "rmsnorm_residual").space("cuda")
    assert classes_for(plain, classes) == (classes, [])


@pytest.mark.parametrize("backend", ["auto", "cpu"])
def test_gate_up_prefill_on_a_cpu_machine_is_one_line_naming_sm90a(tmp_path, backend,
                                                                   monkeypatch):
    """A new user's trial: both refusals suggested adding a `cpu:` block to a CUTLASS wgmma
    sweep (and `--backend cpu` did not say where it runs); both now name the sm_90a target and
    the fix."""
    from click.testing import CliRunner

    from kopt.cli.main import main
    from kopt.driver import checks

    monkeypatch.setattr(checks, "local_gpu_count", lambda: 0)
    r = CliRunner().invoke(main, ["sweep", str(SWEEP), "--backend", backend, "--store",
                                  str(tmp_path / "st")])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert out.startswith(f"error: {SWEEP / 'sweep.yaml'}: "), out
    assert out.endswith("gate_up_prefill.cu needs the sm_90a target (sweep.yaml: `needs_sm90a: "
                        "true`): run it on an sm_90 GPU node (H100/H200), e.g. --address or "
                        "--cluster"), out
    assert "`cpu:` block" not in out
