"""Loop state: winners beyond noise, selected / ineffective methods, the next scan."""

import platform

import pytest

from conftest import VADD_CPP, VADD_REF, write_sweep
from kopt.core.catalog import load_catalog
from kopt.core.compare import speedup_label, speedup_threshold
from kopt.core.expand import Context, expand, scan_axes
from kopt.core.spec import load_sweep
from kopt.loop.state import IterState, close_iteration


def cand(cid, triple, speedup, base=False, rel_iqr=0.01, params=None):
    return {"candidate_id": cid, "build_id": "b" + cid, "triple": list(triple),
            "params": params or {"T": 1}, "defines": params or {"T": 1}, "speedup": speedup,
            "median_ms": 1.0 / speedup, "dims": "{}", "is_baseline": base, "rel_iqr": rel_iqr}


V = "memory.vectorized_access"
U = "compute.ilp_unroll"
P = "latency.persistent_kernel"


def test_gain_selects_the_winner_and_records_ineffective_methods():
    ranked = [cand("w", (U, V, None), 1.8, params={"T": 2}), cand("v", (None, V, None), 1.3),
              cand("b", (None, None, None), 1.0, base=True), cand("p", (None, None, P), 0.97)]
    st = close_iteration(IterState(), ranked, 1, {"memory": 0.9}, "memory")
    assert st.stop == "" and st.selected == [U, V]
    assert st.best["candidate_id"] == "w" and st.best["speedup"] == 1.8
    assert st.best["iteration"] == 1
    assert st.ineffective == {P: "memory"}
    ctx = st.context()
    assert ctx.baseline_params == {"T": 2} and ctx.selected == [U, V]
    # iteration 2 from there: the winner becomes the baseline; the state holds the speedup
    # over that iteration's own baseline only, never a product across timing runs (the loop's
    # total comes from its closing contest: kopt.core.winner.close_loop)
    ranked2 = [cand("x", (None, None, P), 1.5), cand("w", (None, None, None), 1.0, base=True)]
    st2 = close_iteration(st, ranked2, 2, {}, "latency")
    assert st2.best["speedup"] == 1.5 and st2.best["iteration"] == 2
    assert "total_speedup" not in st2.to_json() and P not in st2.ineffective


def test_within_noise_is_no_gain():
    ranked = [cand("a", (U, None, None), 1.015, rel_iqr=0.04),
              cand("b", (None, None, None), 1.0, base=True, rel_iqr=0.04)]
    st = close_iteration(IterState(), ranked, 1, {}, None)
    assert st.stop.startswith("no gain beyond noise") and st.selected == []
    # kopt.core.compare's threshold: the larger relative sigma (IQR / 1.349), not an IQR
    # no profiler: judged on the baseline it lost against (kopt.core.expand.judged_under)
    assert st.noise == pytest.approx(0.04 / 1.349) and st.ineffective == {U: "unprofiled:b"}
    assert st.best["candidate_id"] == "b"


def test_an_iteration_whose_only_correct_candidate_is_the_baseline_says_so():
    """When every other candidate failed (e.g. each submitted version is wrong), no
    comparison took place: the stop says so and how to see why, not "no gain beyond noise"."""
    st = close_iteration(IterState(), [cand("b", (None, None, None), 1.0, base=True)], 3,
                         {}, None)
    assert st.stop == ("no candidate but the baseline was correct on every problem size in "
                       "iteration 3 (`kopt query \"select status, error from candidates where "
                       "iteration = 3\"` says why)")
    assert st.selected == [] and st.best["candidate_id"] == "b"


def test_the_gain_test_is_the_shared_noise_rule():
    """kopt.loop.state decides a gain with kopt.core.compare's rule (NVBench's smaller noise), for
    every
    speedup and noise; the cases where that changed the loop's outcome are explicit."""
    for sp in (1.005, 1.0101, 1.0102, 1.02, 1.035, 1.06, 1.1, 1.3, 11.5):
        for rw, rb in ((0.0, 0.0), (0.01, 0.01), (0.04, 0.04), (0.1, 0.0), (0.3, 0.0),
                       (2.88, 0.43)):
            st = close_iteration(IterState(), [cand("a", (U, None, None), sp, rel_iqr=rw),
                                               cand("b", (None, None, None), 1.0, base=True,
                                                    rel_iqr=rb)], 1, {}, None)
            assert (st.stop == "") == (speedup_label(sp, rb, rw) == "FASTER")
            assert st.noise == speedup_threshold(rb, rw)

    def gain(sp, rw, rb):
        return close_iteration(IterState(), [cand("a", (U, None, None), sp, rel_iqr=rw),
                                             cand("b", (None, None, None), 1.0, base=True,
                                                  rel_iqr=rb)], 1, {}, None)

    # 1.035x at 4% relative IQR on both sides: beyond max(1%, 0.04 / 1.349) now; the loop's
    # old rule (1 + max(1%, 0.04/2 + 0.04/2)) called it no gain
    assert gain(1.035, 0.04, 0.04).selected == [U]
    # noiseless: 1.0101x is 0.9999% less time, within the 1% floor (the old 1.01x passed it)
    assert gain(1.0101, 0.0, 0.0).stop.startswith("no gain beyond noise")
    assert gain(1.0102, 0.0, 0.0).selected == [U]
    # a fast candidate with a long tail (IQR 2.9x its median, a loaded CPU): the quieter
    # baseline's noise decides, so 11.5x is a gain (the larger noise would veto any speedup)
    assert gain(11.5, 2.88, 0.43).selected == [U]


def test_a_method_is_judged_on_the_noise_of_the_two_candidates_compared():
    """V adds 4.6% to P (both 1% noisy): beyond their noise, so V is effective even though
    the baseline is 20% noisy (the old rule judged every method on the winner's and the
    baseline's noise and called V ineffective)."""
    ranked = [cand("w", (U, None, None), 2.0), cand("vp", (None, V, P), 1.36),
              cand("p", (None, None, P), 1.30),
              cand("b", (None, None, None), 1.0, base=True, rel_iqr=0.2)]
    st = close_iteration(IterState(), ranked, 1, {}, "memory")
    assert st.stop == "" and st.selected == [U] and st.ineffective == {}
    # the same pair within noise of each other: V is ineffective, P (1.3x vs 20%) is not
    ranked[1] = cand("vp", (None, V, P), 1.305)
    st = close_iteration(IterState(), ranked, 1, {}, "memory")
    assert st.ineffective == {V: "memory"}


def test_failed_baseline_stops():
    st = close_iteration(IterState(), [cand("a", (U, None, None), 1.0)], 1, {}, None)
    assert "baseline failed" in st.stop


def test_state_round_trips_as_json():
    st = IterState(iteration=2, selected=[U], ineffective={V: "memory"}, triggered={U: True})
    assert IterState.from_json(st.to_json()) == st


SPEC = """
    kernel: k.cpp
    dims: [{N: 64}]
    params: {T: [1, 2]}
    methods:
      compute.ilp_unroll: {defines: {UNROLL: 4}}
      compute.launch_config: {defines: {LB: 1}}
      memory.vectorized_access: {defines: {VEC: 4}}
      latency.persistent_kernel: {defines: {PERSIST: 1}}
"""


def test_scan_reasons_follow_the_state(tmp_path):
    sp = load_sweep(write_sweep(tmp_path / "s", SPEC, {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
                    ).space("cpu")
    cat = load_catalog()
    ctx = Context(selected=[P], ineffective={V: "memory"}, bottleneck="memory",
                  triggered={U: False, V: True}, baseline_params={"T": 2})
    reasons = {s.method: s.reason for a in scan_axes(sp, cat, None, ctx=ctx).values() for s in a}
    assert reasons == {"compute.launch_config": "conflict",  # with the selected persistent kernel
                       U: "no_trigger", V: "ineffective", P: "already_selected"}
    ctx.bottleneck = "compute"  # the bottleneck moved: ineffective methods come back
    reasons = {s.method: s.reason for a in scan_axes(sp, cat, None, ctx=ctx).values() for s in a}
    assert reasons[V] == ""
    cands = expand(sp, cat, None, ctx=ctx)
    base = cands[0]
    assert base.is_baseline and base.params == {"T": 2}
    assert all(c.defines.get("PERSIST") == 1 for c in cands)  # selected: always applied
    assert {c.triple for c in cands} == {(None, None, None), (None, V, None)}


def test_a_selected_method_is_never_also_ineffective():
    """The winner (U, V) gains nothing over (U, None) beyond noise, so V alone looks
    ineffective; but V is part of the winner and is selected, so it is not listed as
    ineffective too (a report would otherwise call it both)."""
    ranked = [cand("w", (U, V, None), 1.50), cand("u", (U, None, None), 1.49),
              cand("b", (None, None, None), 1.0, base=True), cand("p", (None, None, P), 0.9)]
    st = close_iteration(IterState(), ranked, 1, {}, "memory")
    assert st.selected == [U, V] and st.best["candidate_id"] == "w"
    assert st.ineffective == {P: "memory"}


def test_a_methods_credit_is_the_gain_it_was_judged_by():
    """Each method is credited with the comparison that judged it, not the winner's whole
    gain: V in the winner (U, V) gained 1.50 / 1.49 over (U, None), TIED, while U gained
    1.49x over the baseline alone; P lost. A submitted version claiming two methods shares
    its gain over the parent between them, and says so."""
    from kopt.loop.state import credit_line

    ranked = [cand("w", (U, V, None), 1.50), cand("u", (U, None, None), 1.49),
              cand("b", (None, None, None), 1.0, base=True), cand("p", (None, None, P), 0.9)]
    st = close_iteration(IterState(), ranked, 1, {}, "memory")
    assert st.credit[V] == {"speedup": round(1.50 / 1.49, 4), "against": "u", "alone": True,
                            "shared_with": [], "label": "TIED", "iteration": 1}
    # U: of its two triples, (U, V) against (None, V) (not run: the baseline, shared with V)
    # and (U, None) against the baseline alone, the first is the better judgment (1.50x)
    assert st.credit[U]["speedup"] == 1.5 and st.credit[U]["label"] == "FASTER"
    assert st.credit[P] == {"speedup": 0.9, "against": "b", "alone": True, "shared_with": [],
                            "label": "SLOWER", "iteration": 1}
    assert credit_line(V, st.credit[V]) == (f"{V} (1.01x TIED against the same triple "
                                            "without it, iteration 1)")
    # the credit is carried; a submitted version (U2, V2) against its parent shares its gain
    U2, V2 = "compute.thread_coarsening", "memory.tiling_smem"
    ranked2 = [cand("s", (U2, V2, None), 2.0), cand("w", (U, V, None), 1.0, base=True)]
    st2 = close_iteration(st, ranked2, 2, {}, None)
    assert st2.credit[V] == st.credit[V] and st2.selected == [U, V, U2, V2]
    assert st2.credit[U2] == {"speedup": 2.0, "against": "w", "alone": False,
                              "shared_with": [V2], "label": "FASTER", "iteration": 2}
    assert credit_line(V2, st2.credit[V2]) == (
        f"{V2} (2x FASTER against the iteration's baseline, shared with {U2}, iteration 2)")


def test_without_the_same_triple_minus_the_method_the_baseline_is_the_reference():
    """A capped sample (--max-candidates) may hold (U, V) but neither (U, None) nor (None, V):
    then each method is judged against the baseline, so a triple that gains nothing marks
    both ineffective (kopt propose would otherwise offer the same triple again)."""
    ranked = [cand("b", (None, None, None), 1.0, base=True), cand("w", (U, V, None), 1.004)]
    st = close_iteration(IterState(), ranked, 1, {}, None)
    assert st.stop.startswith("no gain beyond noise")
    assert st.ineffective == {U: "unprofiled:b", V: "unprofiled:b"}
    # no NCU: the bottleneck stays unknown; the best is still b, so both stay skipped
    ctx = st.context()
    assert ctx.bottleneck is None and ctx.judged_now() == "unprofiled:b"
    assert ctx.ineffective == {U: "unprofiled:b", V: "unprofiled:b"}


def test_propose_sets_apart_triples_the_restrictions_empty(tmp_path):
    """An admissible triple whose every launch config a restriction excludes would run
    nothing: propose lists it apart instead of among the triples to run."""
    from kopt.loop.propose import propose

    spec = SPEC.replace("params: {T: [1, 2]}",
                        'params: {T: [1, 2]}\n    restrictions: ["VEC == 1 or T == 3"]')
    sw = load_sweep(write_sweep(tmp_path / "s", spec, {"k.cpp": VADD_CPP, "ref.py": VADD_REF}))
    plan = propose(sw, tmp_path / "empty-store")[0]
    # the class a CPU run of this machine is named by (before: "local-cpu", which no run has)
    assert plan["device_class"] == f"cpu-{platform.machine()}" and plan["next_iteration"] == 1
    assert [None, V, None] in plan["empty_triples"] and [U, V, None] in plan["empty_triples"]
    assert not any(V in t for t in plan["triples"])
    assert [U, None, None] in plan["triples"]


def test_a_submitted_iterations_parent_keeps_its_methods_out_of_ineffective():
    """A submitted iteration's baseline is its parent, a version whose triple holds
    the methods an earlier iteration selected (U); the new version (V) wins. U was not tried
    in this iteration, so it is not judged (before: the parent "gained nothing over itself"
    and U, selected in iteration 2, was listed ineffective in iteration 3)."""
    prev = IterState(iteration=2, selected=[U], best={"candidate_id": "p", "iteration": 2})
    ranked = [cand("v", (None, V, None), 2.0), cand("p", (U, None, None), 1.0, base=True)]
    st = close_iteration(prev, ranked, 3, {}, None)
    assert st.selected == [U, V] and st.best["candidate_id"] == "v"
    assert st.ineffective == {}


def test_a_ranked_candidates_median_and_dims_belong_together(tmp_path):
    """rank() gives a candidate's smallest median over the problem sizes and the size it was
    measured on (before: the lexicographically first dims, here N=1000003, beside the
    N=65536 median: propose showed a median under the wrong size)."""
    from kopt.loop.state import rank
    from kopt.store.files import write_table

    rows = [{"run_id": "r", "sweep": "s", "iteration": 1, "device_class": "c",
             "candidate_id": cid, "job_key": f"{cid}{n}", "is_baseline": cid == "b",
             "status": "ok", "dims": f'{{"N": {n}}}', "median_ms": ms, "iqr_ms": ms / 100,
             "speedup": sp, "params": "{}", "defines": "{}"}
            for cid, n, ms, sp in [("b", 1000003, 0.9, 1.0), ("b", 65536, 0.15, 1.0),
                                   ("w", 1000003, 0.45, 2.0), ("w", 65536, 0.1, 1.5)]]
    write_table(tmp_path, "candidates", "s", "r", rows)
    ranked = {r["candidate_id"]: r for r in rank(tmp_path, "r", 1, "c")}
    assert (ranked["w"]["median_ms"], ranked["w"]["dims"]) == (0.1, '{"N": 65536}')
    assert (ranked["b"]["median_ms"], ranked["b"]["dims"]) == (0.15, '{"N": 65536}')
    assert ranked["w"]["speedup"] == pytest.approx(3 ** 0.5)


def test_a_rung_whose_baseline_failed_is_ranked_by_medians(tmp_path):
    """Successive halving's rung 1 lost its baseline (timed out): no candidate has a speedup,
    so rank() is empty and the halving ended there (CI, 2026-12-01: a false `replayed` on
    the baseline). rank_rung ranks the rung by the geometric mean of the medians across the
    sizes; rung 0 does not (a baseline failing its screen stops the loop)."""
    from kopt.loop.state import rank, rank_rung
    from kopt.store.files import write_table

    rows = [{"run_id": "r", "sweep": "s", "iteration": 1, "device_class": "c", "rung": rung,
             "candidate_id": cid, "job_key": f"{cid}{n}{rung}", "is_baseline": cid == "b",
             "status": "timeout" if cid == "b" and rung else "ok", "dims": f'{{"N": {n}}}',
             "median_ms": ms, "iqr_ms": ms / 100, "params": "{}", "defines": "{}"}
            for rung in (0, 1)
            for cid, n, ms in [("b", 1, 1.0), ("b", 2, 4.0), ("x", 1, 0.5), ("x", 2, 3.0),
                               ("y", 1, 0.9), ("y", 2, 1.0), ("z", 1, 0.2)]]
    write_table(tmp_path, "candidates", "s", "r", rows)
    assert rank(tmp_path, "r", 1, "c", rung=1) == []
    got = rank_rung(tmp_path, "r", 1, "c", 1)
    # y: sqrt(0.9 * 1.0) = 0.949 ms, x: sqrt(0.5 * 3.0) = 1.22 ms; z lacks N=2
    assert [(r["candidate_id"], r["speedup"]) for r in got] == [("y", None), ("x", None)]
    assert got[0]["gm_ms"] == pytest.approx(0.9 ** 0.5)
    assert [r["candidate_id"] for r in rank_rung(tmp_path, "r", 1, "c", 0)] == ["y", "x", "b"]
