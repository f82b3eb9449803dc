"""The decode-time sweeps' CPU forms run end to end on the CPU backend (a C++ kernel beside
the CUDA one, a `cpu:` block in sweep.yaml): every launch config built, checked against ref.py
(bf16 outputs within the band, the in-place residual exactly) and timed, the contender timed
beside them, and a best named. The figures themselves are not asserted (a shared CPU's
timings are noise); what is asserted holds on any machine."""

from __future__ import annotations

import pytest

from conftest import ROOT
from kopt.core.spec import load_sweep
from kopt.driver import sweep as driver
from kopt.store.database import query

CPU_FORMS = {
    # NT 1/2 x (none, VEC 8/16): 6 candidates, 3 problem sizes
    "rmsnorm_residual": (6, 3),
}


@pytest.mark.parametrize("name", sorted(CPU_FORMS))
def test_a_decode_sweeps_cpu_form_runs_end_to_end(ray_local, tmp_path, name):
    n_cands, n_dims = CPU_FORMS[name]
    store = tmp_path / "store"
    s = driver.run_sweep(load_sweep(ROOT / "sweeps" / name), store, backend="cpu")
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
