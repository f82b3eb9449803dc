"""The decode-time sweeps' CPU forms run end to end on the CPU backend (a C++ kernel beside
the CUDA one, a `cpu:` block in sweep.yaml): the baseline and one more candidate built, checked
against ref.py (bf16 outputs within the band, in-place outputs such as rmsnorm's residual
exactly) and timed, the contender timed beside them, and a best named. The figures themselves
are not asserted (a shared CPU's timings are noise); what is asserted holds on any machine.

Each runs here on one OpenMP thread (the copy's `NT: [1]`): an honest two-thread OpenMP
kernel is now and then named `replayed` beside CPU load (workers/harness.py, "named
wrongly"; bench/honest_under_load.py counts it), a verdict these tests are not about; the
OpenMP path is the same code under one pragma, and tests/test_pipeline.py sweeps OpenMP
candidates of vector_add."""

from __future__ import annotations

import shutil

import pytest
import yaml

from conftest import ROOT
from kopt.core.spec import load_sweep
from kopt.driver import sweep as driver
from kopt.store.database import query

# name -> (CPU candidates at NT 1, problem sizes)
# name -> problem sizes. Each runs its baseline and one more candidate (--max-candidates 2,
# the strategy's deterministic sample): the suite is near CI's time limit
CPU_FORMS = {
    "decode_attention": 4,   # NT 1 x (none, VEC 8) x (none, SPLITS 8)
    "gate_up_silu": 2,       # NT 1 x (none, RPB 4) x (none, VEC 8)
    "lm_head_top1": 2,       # NT 1 x (none, RPB 4) x (none, VEC 8)
    "rmsnorm_residual": 3,   # NT 1 x (none, VEC 8, VEC 16)
    "rotary": 3,             # NT 1 x (none, ITEMS 4) x (none, SMEM_CS)
    "w4a16_gemv": 4,         # NT 1 x (none, RPB 4) x (none, VEC 8)
    "w8a8_gemm": 4,          # NT 1 x (none, TN 8) x (none, VEC 16)
}
N_CANDS = 2


def one_thread_copy(name: str, dst):
    """sweeps/NAME copied to ``dst`` with its `cpu:` block's NT param at [1]."""
    shutil.copytree(ROOT / "sweeps" / name, dst)
    spec = yaml.safe_load((dst / "sweep.yaml").read_text())
    spec["cpu"]["params"]["NT"] = [1]
    (dst / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return dst


@pytest.mark.parametrize("name", sorted(CPU_FORMS))
def test_a_decode_sweeps_cpu_form_runs_end_to_end(ray_local, tmp_path, name):
    n_cands, n_dims = N_CANDS, CPU_FORMS[name]
    store = tmp_path / "store"
    sweep = load_sweep(one_thread_copy(name, tmp_path / name))
    s = driver.run_sweep(sweep, store, backend="cpu", max_candidates=N_CANDS)
    if s.status_counts != {"ok": n_cands * n_dims}:
        _, bad = query("select dims, params, status, error from candidates where status != 'ok'",
                       store)
        pytest.fail(f"{s.status_counts}: {bad}")
    _, rows = query("select count(distinct candidate_id), count(distinct dims) from candidates "
                    "where median_ms > 0", store)
    assert rows == [(n_cands, n_dims)]
    _, ref = query("select impl, status from reference order by dims", store)
    assert ref == [("contender", "ok")] * n_dims
    # the closing contest named a best among them
    (state,) = s.states.values()
    _, ids = query("select distinct candidate_id from candidates", store)
    assert state.best and state.best["candidate_id"] in {i for (i,) in ids}
