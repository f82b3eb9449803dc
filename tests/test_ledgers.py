"""Issue 15's ledgers without Ray: where a submitted version's idea came from (the kinds of
``kopt submit --idea``), and the evidence digest of an iteration read from two real H200 NCU
profiles (tests/data/ncu-h200: the vector_add report as the parent's, the sgemm report as
the winner's)."""

from types import SimpleNamespace

import pytest
from test_ncu import rows as ncu_rows

from kopt.bottleneck import aggregate
from kopt.catalog import load_catalog
from kopt.database import Database
from kopt.loop import IterState
from kopt.propose import trigger_digest
from kopt.store import now, write_table
from kopt.strategy.ncu_loop import evidence_rows
from kopt.submit import SubmitError, parse_idea

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
