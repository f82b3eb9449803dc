"""The H200 walk-through (docs/verified/h200_triage_port.sh) on CPU: its fixture — toyllm's
repository and the layer-norm sweep completed from a triage skeleton — fits what kopt triage
writes for the checked-in H200 trace, loads for both backends, and the repository's CPU kernel
passes the sweep's reference. (The whole script runs here with --cpu-dry-run; it takes
minutes, so CI checks its parts.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

from conftest import FIXTURES, ROOT
from kopt.core.catalog import load_catalog
from kopt.core.expand import iter_candidates, space_digest
from kopt.core.spec import launch_geometry, load_sweep
from kopt.tools.preflight import run_preflight
from kopt.tools.triage import triage

FIX = FIXTURES / "walkthrough"
GRAPH = ROOT / "tests" / "data" / "triage-h200" / "toy_graph1.json.gz"
EAGER = ROOT / "tests" / "data" / "triage-h200" / "toy_graph0.json.gz"
SCRIPT = ROOT / "docs" / "verified" / "h200_triage_port.sh"


def complete(skel: Path, repo: Path) -> None:
    """What the script's step 4 does to the skeleton."""
    for f in skel.glob("*.cu"):
        f.unlink()
    text = (FIX / "sweep" / "sweep.yaml").read_text()
    (skel / "sweep.yaml").write_text(text.replace("@REPO@", os.path.relpath(repo, skel)))
    shutil.copy(FIX / "sweep" / "ref.py", skel / "ref.py")


def test_the_completed_layer_norm_sweep_keeps_the_traced_launch(tmp_path):
    t = triage(GRAPH, mapping=EAGER, known=FIX / "routes.yaml", sweeps=tmp_path / "sweeps")
    sweeps = [a for a in t.actions if a["action"] == "sweep"]
    # the routes cover the GEMMs, the attention and the GELU: the layer norm alone is left
    assert [a["rank"] for a in sweeps] == [5] and "vectorized_layer_norm" in sweeps[0]["kernel"]
    assert [a["action"] for a in t.actions[:7]] == ["tune"] * 4 + ["sweep", "tune", "tune"]
    skel = Path(sweeps[0]["sweep_dir"])
    traced = yaml.safe_load((skel / "sweep.yaml").read_text())
    repo = tmp_path / "toyllm"
    shutil.copytree(FIX / "repo", repo)
    complete(skel, repo)
    sw = load_sweep(skel)
    cuda = sw.space("cuda")
    assert cuda.source == (repo / "csrc" / "layer_norm.cu").resolve()
    assert cuda.signature.describe() == (
        "__global__ void layer_norm_kernel(const __half* x, const __half* gamma, "
        "const __half* beta, __half* y, int ROWS, int D, float eps)")
    # the baseline launches as the trace did: 2048 blocks (one per row) of 32 x 4 threads
    skel_geo = launch_geometry({"smem_bytes": 0, **traced["launch"]},
                               {**traced["dims"][0], **traced["baseline"]})
    geo = launch_geometry(cuda.launch, {**cuda.dims[0], **cuda.baseline, "eps": 1e-5})
    assert skel_geo["grid"] == geo["grid"] == [2048, 1, 1]
    assert skel_geo["block"] == [32, 4, 1] and geo["block"] == [128, 1, 1]
    cands = list(iter_candidates(cuda, load_catalog(), 90, source_digest=space_digest(cuda)))
    assert len(cands) == 39
    fused = [c for c in cands if c.defines.get("LN_CACHE_ROW") == 1]
    assert all(c.defines["LN_ITEMS"] * c.defines["LN_THREADS"] * c.defines["LN_VEC"] >= 1024
               for c in fused) and len(fused) == 19
    cpu = sw.space("cpu")
    assert cpu.source == (repo / "csrc" / "layer_norm.cpp").resolve()
    r = run_preflight(sw, "cpu", None)  # the repository's CPU kernel against ref.py
    assert r["status"] == "ok", r
    assert r["max_abs_err"] <= 2e-3


def test_the_script_parses_and_refuses_unknown_arguments():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    r = subprocess.run(["bash", str(SCRIPT), "--gpu-please"], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 2 and r.stderr.startswith("usage: ")
