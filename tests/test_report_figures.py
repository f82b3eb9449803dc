"""The report's NCU column reads a multi-kernel ``solve`` as the loop does: every launch of
one call, weighted by its duration (kopt.core.bottleneck.aggregate). Figures: the bf16x3 winner of
sweeps/gemm_cutlass_fp32 on the H200 (docs/verified/2026-11-30-h200-cutlass-fp32.md), two
split kernels then the CUTLASS GEMM; the report used to show the last row's (a split's)."""

from __future__ import annotations

import pytest

from kopt.tools.report import winner_figures

SOL = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DUR = "gpu__time_duration.sum"
LAUNCHES = [(0, 11.14, 64192.0), (1, 16.65, 66496.0), (2, 92.58, 516896.0)]


def _rows(dims: str, launches: list[tuple[int, float, float]]) -> list[dict]:
    out = []
    for launch, sol, ns in launches:
        for metric, value in ((SOL, sol), (DUR, ns)):
            out.append({"iteration": 1, "device_class": "h200-sm90", "candidate_id": "78ed7c59",
                        "dims": dims, "launch": launch, "metric": metric, "value": value})
    return out


def test_every_launch_of_a_call_weighted_by_its_duration():
    # the GEMM last and first: the order of the rows does not matter
    for order in (LAUNCHES, LAUNCHES[::-1]):
        got = winner_figures(_rows('{"M": 4096}', order))[(1, "h200-sm90", "78ed7c59")]
        assert got[DUR] == 647584.0  # ns: the call's kernels together
        assert got[SOL] == pytest.approx((11.14 * 64192 + 16.65 * 66496 + 92.58 * 516896)
                                         / 647584)  # 76.7 %, not 11.14 or 16.65
        assert got[SOL] == pytest.approx(76.71, abs=0.01)


def test_one_problem_size_is_read_not_a_mix_of_two():
    rows = _rows('{"M": 1024}', [(0, 50.0, 1000.0)]) + _rows('{"M": 4096}', LAUNCHES)
    got = winner_figures(rows)[(1, "h200-sm90", "78ed7c59")]
    assert got[DUR] == 647584.0 and got[SOL] == pytest.approx(76.71, abs=0.01)


def test_a_contest_pick_the_review_gate_rejected_is_not_called_the_named_best():
    """summary.md said a tie's member with the fewest methods "was named" and marked no
    contender, while the best was the parent: the review gate had rejected the contest's
    pick. It now says so and names the best that stayed."""
    from kopt.loop.state import IterState
    from kopt.tools.report import _contest_lines

    contest = {"c1": {"label": "TIED", "median_ms": 1.0}, "c2": {"label": "TIED",
                                                                "median_ms": 1.01}}
    cand = [{"candidate_id": k, "iteration": 2, "device_class": "d", "compute_method": None,
             "memory_method": "memory.x", "latency_method": None, "params": '{"T": 1}'}
            for k in contest]
    kept = IterState(iteration=2, contest=contest, tie=["c1", "c2"],
                     best={"candidate_id": "b0"})
    head = _contest_lines("d", kept, cand)[0]
    assert "a **tie** within noise between 2 candidates" in head
    assert head.endswith("the review gate then rejected it (the `reviews` table and `kopt "
                         "wait` say why), so b0 stays the best:")
    named = IterState(iteration=2, contest=contest, tie=["c1", "c2"],
                      best={"candidate_id": "c1"})
    lines = _contest_lines("d", named, cand)
    assert "review gate" not in lines[0] and lines[1].startswith("  - **named** ")


def test_the_iteration_table_gives_a_kept_parent_no_gain():
    """An iteration whose winner was not kept (rejected by the review gate, or no gain
    beyond noise) keeps the parent as its best: its row shows the parent with no speedup,
    not the rejected challenger's 2.0x beside the parent's figures."""
    from kopt.loop.state import IterState
    from kopt.tools.report import _iteration_lines

    parent = {"candidate_id": "p", "triple": [None, None, None], "params": {"T": 1},
              "median_ms": 4.0, "iteration": 1}
    kept = IterState(iteration=2, best=parent, baseline={"candidate_id": "p"}, gain=2.0,
                     stop="the review gate rejected the winner")
    won = IterState(iteration=3, best={**parent, "candidate_id": "w", "median_ms": 2.0,
                                       "iteration": 3}, baseline={"candidate_id": "p"},
                    gain=2.0)
    rows = [ln for ln in _iteration_lines("cpu-x", [kept, won], {}, [], [])
            if ln.startswith(("| 2 ", "| 3 "))]
    assert rows[0].split(" | ")[6] == "- (kept)" and "2x" not in rows[0]
    assert rows[1].split(" | ")[6] == "2x"


def test_the_workflow_folders_profile_digest_lists_the_figures_the_loop_read():
    """profile.md of `kopt report --workflow`: one row per NCU metric of the winner (as
    kopt.tools.report.winner_figures combines them) and the axis scores; without figures,
    the reason there are none."""
    from kopt.loop.state import IterState
    from kopt.tools.workflow import _profile

    st = IterState(iteration=2, best={"candidate_id": "w2"},
                   scores_after={"memory": 0.812, "compute": 0.301})
    text = _profile("h200-sm90", st, {"dram__throughput.avg.pct_of_peak_sustained_elapsed":
                                      81.234, "sm__throughput.avg.pct_of_peak_sustained_elapsed":
                                      30.1})
    assert text.splitlines() == [
        "# Profile of w2 (iteration 2, h200-sm90)", "", "| metric | value |", "|---|---|",
        "| dram__throughput.avg.pct_of_peak_sustained_elapsed | 81.23 |",
        "| sm__throughput.avg.pct_of_peak_sustained_elapsed | 30.1 |", "",
        "Axis scores the bottleneck was read from (kopt.core.bottleneck): compute 0.301, "
        "memory 0.812"]
    assert "No Nsight Compute profile" in _profile("cpu", IterState(iteration=1), None)


def test_the_iteration_table_says_which_size_its_median_is():
    """With several problem sizes the winner's median in the report's iteration table is
    its fastest size's (the speedup a geometric mean over the sizes): unlabelled, it read as
    one figure for the whole run. The table now names the size and says what each is; with
    one size nothing changes."""
    from kopt.loop.state import IterState
    from kopt.tools.report import _iteration_lines

    best = {"candidate_id": "w", "triple": ["compute.ilp_unroll", None, None],
            "params": {"T": 2}, "median_ms": 0.5, "speedup": 2.0, "iteration": 1,
            "dims": '{"N": 1024}'}
    st = IterState(iteration=1, best=best, baseline={"candidate_id": "b"}, gain=2.0,
                   n_candidates=4)
    cand = [{"device_class": "cpu-x", "dims": d, "iteration": 1, "compute_method": None,
             "memory_method": None, "latency_method": None}
            for d in ('{"N": 1024}', '{"N": 4096}')]
    lines = _iteration_lines("cpu-x", [st], {}, cand, [])
    head = next(ln for ln in lines if ln.startswith("| it |"))
    row = next(ln for ln in lines if ln.startswith("| 1 |"))
    assert "| median ms (its fastest size) | speedup (geometric mean over the sizes) |" in head
    assert "| T=2 | 0.5 at N=1024 | 2x |" in row
    one = _iteration_lines("cpu-x", [st], {}, cand[:1], [])
    assert "| median ms | speedup |" in next(ln for ln in one if ln.startswith("| it |"))
    assert "| T=2 | 0.5 | 2x |" in next(ln for ln in one if ln.startswith("| 1 |"))


def test_a_best_whose_closing_failed_is_reported_unverified():
    """When the closing contest could not run (its outside clock failed, say), the class's
    best is its last iteration's winner, timed only by the clock inside its own process: the
    report says so, as a candidate that made the closing fail on purpose would otherwise be
    named with no word of it. A closing that ran says nothing of the kind."""
    from kopt.loop.state import CLOSING_FAILED, IterState
    from kopt.tools.report import _best_lines

    best = {"candidate_id": "c1", "iteration": 2, "median_ms": 0.25, "speedup": 1.5}
    failed = IterState(iteration=2, best=best, closing={
        "speedup": None, "note": f"{CLOSING_FAILED}: error: the preparations alone failed"})
    md = "\n".join(_best_lines("cpu-x86_64", [failed], best, []))
    assert "- **unverified**: the closing contest failed, so this winner" in md
    assert f"**{CLOSING_FAILED}: error: the preparations alone failed**" in md
    ran = IterState(iteration=2, best=best, closing={
        "speedup": 1.5, "first_baseline_ms": 0.375, "best_ms": 0.25, "medians_ms": {"c1": 0.25},
        "best": best})
    assert "unverified" not in "\n".join(_best_lines("cpu-x86_64", [ran], best, []))


def test_a_best_without_the_selected_methods_says_the_closing_named_it():
    """The iterations selected a method, but the closing contest named a best without it
    (the first baseline, faster beyond noise): the report said "selected over the run:
    memory.cache_policy" beside a best of no method, which a new user read as a
    contradiction. It says the closing named a best without them; nothing where the best
    has them."""
    from kopt.loop.state import IterState
    from kopt.tools.report import _best_lines

    base = {"candidate_id": "b", "iteration": 1, "median_ms": 1.9, "speedup": 1.0,
            "triple": [None, None, None]}
    st = IterState(iteration=1, best=base, selected=["memory.cache_policy"], closing={
        "speedup": 1.0, "first_baseline_ms": 1.9, "best_ms": 1.9, "medians_ms": {"b": 1.9},
        "best": base})
    md = "\n".join(_best_lines("cpu-x86_64", [st], base, []))
    assert ("- methods: (no method); the iterations selected: memory.cache_policy (the "
            "closing contest named a best without them)") in md, md
    won = {**base, "candidate_id": "w", "triple": [None, "memory.cache_policy", None]}
    md = "\n".join(_best_lines("cpu-x86_64", [IterState(
        iteration=1, best=won, selected=["memory.cache_policy"], closing={})], won, []))
    assert "the iterations selected: memory.cache_policy\n" in md + "\n", md
    assert "without them" not in md
