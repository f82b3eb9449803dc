"""The physical plausibility gate (kopt.core.plausible): a figure above the device's DRAM
peak makes a candidate `suspect`, with figures measured on an H200 this project ran."""

from conftest import ROOT
from kopt.core.plausible import SLACK, implausible
from kopt.core.spec import load_sweep
from kopt.driver import sweep as driver
from kopt.store.database import query

H200_GBPS = 4800.0


def test_real_kernels_pass_and_a_replay_does_not():
    # docs/verified/2026-12-02-h200-decode-loop.md: lm_head_top1 v2 (1.2447 GB in 0.3054 ms,
    # 4.08 TB/s) and decode_attention v2 at L = 32768 (537 MB in 0.1454 ms, 3.69 TB/s)
    assert implausible(0.3054, 1.2447e9, H200_GBPS) == ""
    assert implausible(0.1454, 536.9e6, H200_GBPS) == ""
    # the same attention answered from a copy kept in memory: 0.01 ms for its 537 MB
    why = implausible(0.0100, 536.9e6, H200_GBPS)
    assert why.startswith("53690 GB/s (sweep.yaml's bytes, 5.369e+08, in its median of 0.01 ms) "
                          "is above the device's DRAM peak of 4800 GB/s")
    # the edge: the datasheet's peak times SLACK passes, a little above it does not
    assert implausible(1.0, SLACK * H200_GBPS * 1e6, H200_GBPS) == ""
    assert implausible(1.0, 1.01 * SLACK * H200_GBPS * 1e6, H200_GBPS) != ""
    # nothing to tell it by: no bytes, no known peak (a CPU), no median
    assert implausible(0.01, None, H200_GBPS) == implausible(0.01, 5e8, None) == ""
    assert implausible(None, 5e8, H200_GBPS) == ""


def test_a_sweep_row_above_the_peak_is_suspect_and_cannot_win(ray_local, tmp_path,
                                                             monkeypatch):
    """The driver applies the gate to every row it stores: with the CPU's DRAM peak said to
    be 1 GB/s (every CPU moves vector_add's bytes faster), every candidate is `suspect`
    with the gate's line, and none is named best."""
    monkeypatch.setattr(driver, "peaks", lambda name, dtype: (None, 1.0))
    store = tmp_path / "store"
    s = driver.run_sweep(load_sweep(ROOT / "sweeps" / "vector_add"), store, backend="cpu",
                         max_candidates=2)
    assert s.status_counts == {"suspect": 2}
    _, rows = query("select status, error from candidates", store)
    assert all(st == "suspect" and "above the device's DRAM peak of 1 GB/s" in err
               for st, err in rows), rows
    _, named = query("select count(*) from candidates where status = 'ok'", store)
    assert named == [(0,)]
