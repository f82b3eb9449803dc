"""The ledgers without Ray: where a submitted version's idea came from (the kinds of
``kopt submit --idea``), and the evidence digest of an iteration read from two real H200 NCU
profiles (tests/data/ncu-h200: the vector_add report as the parent's, the sgemm report as
the winner's)."""

from types import SimpleNamespace

import pytest
from test_ncu import rows as ncu_rows

from kopt.core.bottleneck import aggregate
from kopt.core.catalog import load_catalog
from kopt.loop.guided import evidence_rows
from kopt.loop.propose import trigger_digest
from kopt.loop.state import IterState
from kopt.loop.submitted import SubmitError
from kopt.store.database import Database
from kopt.store.files import now, write_table
from kopt.tools.submit import parse_idea

TC, CP = "compute.thread_coarsening", "memory.cache_policy"
IPC = "sm__inst_executed.avg.per_cycle_active"
OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
HIT = "lts__t_sector_hit_rate.pct"
DC = "nvidia-h200-sm90"


@pytest.mark.parametrize("text,kind,ref", [
    (TC, "catalog", TC), (f"catalog:{TC}", "catalog", TC),
    ("https://github.com/NVIDIA/cccl", "url", "https://github.com/NVIDIA/cccl"),
    ("paper: Merrill & Garland, Single-pass Parallel Prefix Scan", "paper",
     "Merrill & Garland, Single-pass Parallel Prefix Scan"),
    ("kernel:cub::BlockReduce", "kernel", "cub::BlockReduce"),
    ("a colleague's trick", "other", "a colleague's trick"),
    ("https://example.org/a b", "other", "https://example.org/a b")])
def test_an_idea_gets_its_kind(text, kind, ref):
    assert parse_idea(text, load_catalog()) == (kind, ref)


@pytest.mark.parametrize("text,says", [
    ("catalog:compute.nope", "--idea catalog:compute.nope: not a catalog method"),
    ("url:not a url", "--idea url:not a url: not a URL"),
    ("paper:  ", "--idea: empty")])
def test_a_bad_idea_is_refused_with_one_line(text, says):
    with pytest.raises(SubmitError) as e:
        parse_idea(text, load_catalog())
    assert len(e.value.lines) == 1 and e.value.lines[0].startswith(says)


def test_trigger_digest_reads_each_condition_on_both_profiles():
    before, after = aggregate(ncu_rows("vadd_full")), aggregate(ncu_rows("sgemm_full"))
    ipc, occ = trigger_digest(TC, before, after)
    assert (ipc["metric"], ipc["op"], ipc["threshold"]) == (IPC, "<", 1)
    assert ipc["before"] == pytest.approx(0.712071, abs=1e-6)
    assert ipc["after"] == pytest.approx(2.723379, abs=1e-6)
    assert (ipc["holds_before"], ipc["holds_after"]) == (True, False)
    assert (occ["metric"], occ["op"], occ["threshold"]) == (OCC, ">=", 50)
    assert occ["before"] == pytest.approx(74.248206, abs=1e-6)
    assert occ["after"] == pytest.approx(42.864463, abs=1e-6)
    # a ratio reads as num/den; a stall by rank reads its rank among the stall reasons
    ratio, _, stall = trigger_digest("memory.vectorized_access", before, {})
    assert ratio["metric"] == ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_"
                               "elapsed/sm__throughput.avg.pct_of_peak_sustained_elapsed")
    assert ratio["before"] == pytest.approx(1.633717, abs=1e-6) and ratio["after"] is None
    assert (stall["op"], stall["threshold"], stall["before"], stall["holds_before"]) == (
        "rank<=", 3, 14, False)
    assert ratio["holds_after"] is None  # no profile: undecided, not false


def test_evidence_rows_of_a_profiled_iteration(tmp_path):
    """Iteration 2 on an H200: the winner w (thread coarsening) beat its parent p; a version
    submitted into the iteration claimed cache_policy. Each trigger condition of both is a
    row with its figure on p (before) and on w (after)."""
    write_table(tmp_path, "versions", "demo", "r1", [{
        "run_id": "r1", "sweep": "demo", "iteration": 2, "try_no": 1, "source_hash": "h",
        "name": "v2.cu", "claimed_methods": CP, "created_at": now()}])
    ctx = SimpleNamespace(run_id="r1", sweep=SimpleNamespace(name="demo"), store=tmp_path,
                          backend="cuda", catalog=load_catalog(), unprofiled={}, agg={
                              (2, DC, "p"): aggregate(ncu_rows("vadd_full")),
                              (2, DC, "w"): aggregate(ncu_rows("sgemm_full"))})
    ranked = [{"candidate_id": "w", "triple": [TC, None, None], "is_baseline": False},
              {"candidate_id": "p", "triple": [None, None, None], "is_baseline": True}]
    st = IterState(iteration=2, best={"candidate_id": "w", "iteration": 2})
    got = evidence_rows(ctx, 2, DC, ranked, st)
    assert [(r["method"], r["source"], r["metric"]) for r in got] == [
        (TC, "selected", IPC), (TC, "selected", OCC), (CP, "claimed", HIT)]
    assert all((r["parent_id"], r["winner_id"], r["accepted"], r["note"]) == ("p", "w", True, None)
               for r in got)
    assert got[2]["before"] == pytest.approx(33.852075, abs=1e-6)
    assert got[2]["after"] == pytest.approx(93.373666, abs=1e-6)
    assert (got[2]["op"], got[2]["threshold"]) == ("<", 50)
    # through the store: the rows are a table SQL reads
    Database(tmp_path).commit("evidence", "demo", "r1", got)
    _, back = Database(tmp_path).query("select method, metric, round(before, 4), "
                                       "round(after, 4) from evidence order by all")
    assert back == [(TC, IPC, 0.7121, 2.7234), (TC, OCC, 74.2482, 42.8645),
                    (CP, HIT, 33.8521, 93.3737)]


def test_evidence_rows_say_why_when_nothing_was_profiled(tmp_path):
    """The parent was not profiled (top_k 0): the figures are NULL and the note says why; an
    iteration with no winner beyond its baseline and no claim is one row, method NULL."""
    ctx = SimpleNamespace(run_id="r1", sweep=SimpleNamespace(name="demo"), store=tmp_path,
                          backend="cuda", catalog=load_catalog(), agg={(1, DC, "p"): {}},
                          unprofiled={(1, DC, "p"): "not_profiled: ncu unavailable or top_k "
                                                    "is 0"})
    ranked = [{"candidate_id": "w", "triple": [TC, None, None], "is_baseline": False},
              {"candidate_id": "p", "triple": [None, None, None], "is_baseline": True}]
    got = evidence_rows(ctx, 1, DC, ranked, IterState(best={"candidate_id": "w",
                                                            "iteration": 1}))
    assert [(r["metric"], r["before"], r["after"], r["holds_before"]) for r in got] == [
        (IPC, None, None, None), (OCC, None, None, None)]
    assert got[0]["note"] == ("no NCU metrics for p: not_profiled: ncu unavailable or top_k "
                              "is 0")
    [one] = evidence_rows(ctx, 1, DC, ranked[1:], IterState(best={"candidate_id": "p"}))
    assert (one.get("method"), one["winner_id"], one["accepted"], one["note"]) == (
        None, "p", False, "no method selected or claimed in this iteration")


def test_a_lineage_node_compares_its_candidates_over_every_problem_size():
    """A node's best is the candidate correct on the most sizes with the highest geometric
    mean speedup; its figures are geometric means over those sizes (a candidate fast on one
    size only, or a node's figure from one size, would compare unlike with like)."""
    from kopt.tools.submit import Node, _settle, _take

    n = Node(("a", 2, "h"), "it 2 sweep (source h)", "", parent="b1")
    rows = [("c1", "d1", 1.0, 2.0), ("c1", "d2", 4.0, 1.0), ("c2", "d1", 0.5, 4.0),
            ("c2", "d2", None, None), ("c3", "d1", 2.0, 1.0), ("c3", "d2", 2.0, 1.0)]
    for cid, dims, ms, sp in rows:
        _take(n, {"status": "ok" if ms else "wrong_result", "candidate_id": cid, "dims": dims,
                  "median_ms": ms, "speedup": sp, "compute_method": None,
                  "memory_method": "memory.vectorized_access" if cid == "c1" else None,
                  "latency_method": None})
    _settle(n)
    assert (n.best, n.median_ms, n.speedup) == ("c1", 2.0, pytest.approx(2 ** 0.5))
    assert n.methods == "memory.vectorized_access" and n.members == ["c1", "c2", "c3"]
    assert n.statuses == {"ok": 5, "wrong_result": 1}
    assert n.line().endswith("1.41x over its parent (geometric mean of 2 sizes); "
                             "ok 5, wrong_result 1")


def test_a_lineage_root_says_its_speedup_is_over_its_baseline_not_a_parent():
    """A first iteration's node has no parent: its speedup is over its own iteration's
    baseline, and `kopt lineage` said "over its parent" (new-user trial); the caption says
    a child's speedup is over its parent as re-measured in the child's own iteration, so it
    need not be the ratio of the two nodes' medians."""
    from kopt.tools.submit import LINEAGE_CAPTION, Node, _settle, _take

    root = Node(("a", 1, "h"), "it 1 sweep (source h)", "")
    kid = Node(("a", 2, "v"), "it 2 v2.cpp (try 1, me, source v)", "compute.ilp_unroll",
               parent="r1")
    for n, cid, ms, sp in ((root, "r1", 0.1296, 1.0), (kid, "k1", 0.1303, 1.117)):
        _take(n, {"status": "ok", "candidate_id": cid, "dims": "d", "median_ms": ms,
                  "speedup": sp, "compute_method": None, "memory_method": None,
                  "latency_method": None})
        _settle(n)
    assert root.line() == ("it 1 sweep (source h) [no methods]: best r1 median 0.1296 ms, 1x "
                           "over its iteration's baseline; ok 1")
    assert kid.line() == ("it 2 v2.cpp (try 1, me, source v) [compute.ilp_unroll]: best k1 "
                          "median 0.1303 ms, 1.12x over its parent; ok 1")
    assert LINEAGE_CAPTION == (
        "best: the node's fastest correct candidate over its parent; named best: the loop's "
        "pick (its closing contest's, as `kopt best` names it), in the node that holds it; "
        "speedup: over its "
        "parent re-measured in the node's own iteration (a first iteration's: over its "
        "baseline), not the ratio of two nodes' medians; accepted / rejected: the review "
        "gate's verdict on the iteration's winner, in the node that holds it")
