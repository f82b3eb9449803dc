"""``kopt propose --format json``: what a loop driver needs, from a store holding a real H200
profile (tests/data/ncu-h200/vadd_full.ncu-rep) of an iteration's winner."""

import json
import shutil

import pytest
from click.testing import CliRunner
from test_ncu import rows as ncu_rows

from conftest import ROOT
from kopt.cli.main import main
from kopt.core.bottleneck import aggregate, triggers
from kopt.loop.state import IterState
from kopt.store.files import dumps, now, write_table

SWEEP = ROOT / "sweeps" / "vector_add"
DC = "nvidia-h200-sm90"
CP = "memory.cache_policy"


def store_with_a_profiled_winner(root):
    """Run r1 of vector_add: iteration 1 won with memory.cache_policy (candidate w1), whose
    NCU profile is the real H200 vector_add report."""
    prof = ncu_rows("vadd_full")
    best = {"candidate_id": "w1", "build_id": "b1", "triple": [None, CP, None],
            "params": {"THREADS": 256}, "defines": {"THREADS": 256, "CACHE_HINTS": 1},
            "speedup": 1.2, "median_ms": 1.5, "dims": '{"N": 67108864}', "iteration": 1}
    st = IterState(iteration=1, selected=[CP], best=best, bottleneck_before="memory",
                   bottleneck_after="memory", triggered=triggers(aggregate(prof)))
    write_table(root, "runs", "vector_add", "r1", [{
        "run_id": "r1", "sweep": "vector_add", "event": "finished", "backend": "cuda",
        "sweep_dir": str(SWEEP), "created_at": now(),
        "devices": dumps([{"device_class": DC, "sm": 90, "name": "NVIDIA H200"}])}])
    write_table(root, "iterations", "vector_add", "r1", [{
        "run_id": "r1", "sweep": "vector_add", "iteration": 1, "device_class": DC,
        "state": st.to_json(), "created_at": now()}])
    write_table(root, "metrics", "vector_add", "r1", [{
        "run_id": "r1", "sweep": "vector_add", "iteration": 1, "candidate_id": "w1",
        "device_class": DC, "dims": '{"N": 67108864}', "created_at": now(), **r}
        for r in prof])


def test_propose_json_has_triples_reasons_evidence_and_the_best_source(tmp_path):
    store_with_a_profiled_winner(tmp_path / "st")
    r = CliRunner().invoke(main, ["propose", str(SWEEP), "--store", str(tmp_path / "st"),
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    [plan] = json.loads(r.stdout)
    assert plan["device_class"] == DC and plan["run_id"] == "r1" and plan["sm"] == 90
    assert plan["next_iteration"] == 2 and plan["selected"] == [CP]
    assert plan["bottleneck"] == "memory" and plan["evidence"] is True
    reasons = {s["method"]: s["reason"] for a in plan["scan"].values() for s in a}
    assert reasons == {"compute.thread_coarsening": "", "compute.launch_config": "no_trigger",
                       "memory.vectorized_access": "no_trigger", CP: "already_selected",
                       "latency.persistent_kernel": "no_trigger"}
    assert plan["triples"] == [["compute.thread_coarsening", None, None]]
    assert plan["strict_triple"] == ["compute.thread_coarsening", None, None]
    assert plan["best"]["candidate_id"] == "w1"
    assert plan["best"]["defines"] == {"THREADS": 256, "CACHE_HINTS": 1}
    assert plan["best_source"] == str(SWEEP / "vector_add.cu")
    ev = plan["trigger_evidence"]
    assert ev["candidate_id"] == "w1" and ev["iteration"] == 1
    assert ev["dims"] == {"N": 67108864} and ev["bottleneck"] == "memory"
    assert ev["scores"]["memory"] == pytest.approx(0.8056, abs=1e-3)
    # the metric, its value and the threshold behind each verdict
    tc = ev["triggers"]["compute.thread_coarsening"]
    assert tc["verdict"] is True and tc["conditions"]["holds"] is True
    ipc, occ = tc["conditions"]["all"]
    assert ipc["metric"] == "sm__inst_executed.avg.per_cycle_active"
    assert ipc["value"] == pytest.approx(0.71207, abs=1e-4)
    assert (ipc["op"], ipc["threshold"], ipc["holds"]) == ("<", 1, True)
    assert occ["value"] == pytest.approx(74.248, abs=1e-3) and occ["threshold"] == 50
    lc = ev["triggers"]["compute.launch_config"]["conditions"]
    assert lc["holds"] is False
    assert lc["any"][0]["metric"] == "launch__waves_per_multiprocessor"
    assert lc["any"][0]["value"] == pytest.approx(62.0606, abs=1e-3)
    assert lc["any"][1]["values"] == pytest.approx([74.248206, 100.0])
    assert lc["any"][1]["value"] == pytest.approx(0.742482, abs=1e-5)
    assert (lc["any"][1]["op"], lc["any"][1]["threshold"]) == ("<", 0.7)
    va = ev["triggers"]["memory.vectorized_access"]["conditions"]["all"][2]
    assert (va["stall"], va["rank"], va["rank_top"], va["holds"]) == ("lg_throttle", 14, 3,
                                                                      False)
    assert ev["triggers"]["memory.kernel_fusion"] == {
        "text": ev["triggers"]["memory.kernel_fusion"]["text"], "verdict": None,
        "conditions": None}  # a text-only trigger: NCU cannot decide it
    # every verdict is the loop's own (kopt.core.bottleneck.triggers) on the same figures
    assert {m: t["verdict"] for m, t in ev["triggers"].items()} == triggers(
        aggregate(ncu_rows("vadd_full")))


def test_propose_json_without_a_stored_run_has_no_best_or_evidence(tmp_path):
    r = CliRunner().invoke(main, ["propose", str(ROOT / "tests" / "fixtures" / "steps"),
                                  "--store", str(tmp_path / "st"), "--format", "json"])
    assert r.exit_code == 0, r.output
    [plan] = json.loads(r.stdout)
    assert plan["run_id"] is None and plan["best"] is None
    assert plan["trigger_evidence"] is None
    assert plan["best_source"] == str(ROOT / "tests" / "fixtures" / "steps" / "steps.cpp")
    assert plan["triples"] == [["compute.thread_coarsening", None, None],
                               ["compute.ilp_unroll", None, None],
                               ["compute.branch_eliminate", None, None]]
    # the strict scan's pick: the highest-priority compute method (thread_coarsening)
    order = [s["method"] for s in plan["scan"]["compute"]]
    assert order.index("compute.thread_coarsening") < order.index("compute.ilp_unroll")
    assert plan["strict_triple"] == ["compute.thread_coarsening", None, None]


def test_propose_json_after_a_submitted_winner_scans_the_catalog_and_names_its_copy(tmp_path):
    """Iteration 2 of r1 was won by a submitted version claiming compute.warp_reduction, a
    method vector_add does not realize: propose plans iteration 3 (no -D triples: the sweep's
    realizations do not describe that source), the catalog scan says the method is selected,
    and best_source is the version's stored copy (re-written from the store when missing)."""
    root = tmp_path / "st"
    store_with_a_profiled_winner(root)
    wr, text = "compute.warp_reduction", "// v2: warp shuffles\n"
    best = {"candidate_id": "v2c", "triple": [wr, None, None], "params": {"THREADS": 256},
            "defines": {"THREADS": 256}, "speedup": 1.3, "median_ms": 1.2, "iteration": 2}
    st = IterState(iteration=2, selected=[CP, wr], best=best, bottleneck_before="memory",
                   bottleneck_after="memory")
    write_table(root, "iterations", "vector_add", "r1", [{
        "run_id": "r1", "sweep": "vector_add", "iteration": 2, "device_class": DC,
        "state": st.to_json(), "created_at": now()}])
    write_table(root, "candidates", "vector_add", "r1", [{
        "run_id": "r1", "sweep": "vector_add", "iteration": 2, "candidate_id": "v2c",
        "device_class": DC, "status": "ok", "params": dumps({"THREADS": 256}),
        "defines": dumps({"THREADS": 256}), "source_hash": "h2", "submitter": "agent",
        "claimed_methods": wr, "created_at": now()}])
    write_table(root, "sources", "vector_add", "r1", [{
        "source_hash": "h2", "name": "v2.cu", "text": text, "created_at": now()}])
    r = CliRunner().invoke(main, ["propose", str(SWEEP), "--store", str(root),
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    [plan] = json.loads(r.stdout)
    assert plan["next_iteration"] == 3 and plan["selected"] == [CP, wr]
    assert plan["triples_from"] == "catalog" and plan["empty_triples"] == []
    assert plan["triples"] and all(wr not in t for t in plan["triples"])
    scan = {s["method"]: s for a in plan["catalog_scan"].values() for s in a}
    assert scan[wr]["reason"] == "already_selected" and not scan[wr]["admitted"]
    assert scan["latency.warp_shuffle_sync"]["admitted"] is True  # no evidence: all held
    copy = root / "source-files" / "h2" / "v2.cu"
    assert plan["best"]["candidate_id"] == "v2c" and plan["best_source"] == str(copy)
    assert copy.read_text() == text
    # the sources table lost (a damaged store): one line naming the source, no traceback
    shutil.rmtree(root / "sources")
    shutil.rmtree(root / "source-files")
    r = CliRunner().invoke(main, ["propose", str(SWEEP), "--store", str(root),
                                  "--format", "json"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output == (f"error: {root}: no stored source h2 (table sources): candidate v2c "
                        "of run r1 is a submitted version and the source it was measured from "
                        "is lost; `kopt propose` needs it to plan from the current best\n")


def test_propose_plans_from_the_closing_contests_best(tmp_path):
    """The loop's closing contest found the first baseline faster side by side
    than iteration 1's winner; `kopt best` and `kopt export` name the baseline, but
    `kopt propose` planned from the losing winner (its methods already selected)."""
    from kopt.store.database import Database

    root = tmp_path / "st"
    store_with_a_profiled_winner(root)
    first = {"candidate_id": "b0", "build_id": "b0", "triple": [None, None, None],
             "params": {"THREADS": 128}, "defines": {"THREADS": 128}, "speedup": 1.0,
             "median_ms": 1.4, "dims": '{"N": 67108864}'}
    st = IterState.from_json(Database(root).latest_states("vector_add")[0]["state"])
    st.closing = {"speedup": 1.0, "first_baseline": "b0", "final_winner": "w1",
                  "best": {"iteration": 1, **first}, "winner_of": {"b0": 0, "w1": 1},
                  "note": "the first baseline is faster beyond noise"}
    write_table(root, "iterations", "vector_add", "r1", [{
        "run_id": "r1", "sweep": "vector_add", "iteration": 1, "device_class": DC,
        "state": st.to_json(), "created_at": now()}])
    r = CliRunner().invoke(main, ["propose", str(SWEEP), "--store", str(root),
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    [plan] = json.loads(r.stdout)
    assert plan["best"]["candidate_id"] == "b0" and plan["selected"] == []
    assert plan["best"]["params"] == {"THREADS": 128}
    # `kopt submit` derives the next iteration from the same best: the one propose planned
    # from (CI at 5172507: the sweep's winner was the parent while propose named another)
    from kopt.tools.submit import _prior
    it, states = _prior(Database(root), "r1", retry=False)
    assert it == 2 and states[1][DC].best["candidate_id"] == "b0"
    assert states[1][DC].selected == []


def test_the_strict_scan_takes_each_axis_highest_priority_method_that_leaves_a_triple():
    """strict_triple: compute first, then memory, then latency, each the highest-priority
    method (the scan's order) among the admissible triples; an axis with no method stays
    as it is (None), a triple whose pair is not admissible is passed over."""
    from kopt.loop.propose import strict_triple

    scan = {"compute": [{"method": "compute.a"}, {"method": "compute.b"}],
            "memory": [{"method": "memory.x"}, {"method": "memory.y"}],
            "latency": [{"method": "latency.p"}]}
    triples = [["compute.b", "memory.x", None], ["compute.a", "memory.y", None],
               ["compute.a", None, "latency.p"], [None, "memory.x", "latency.p"]]
    # memory.x with compute.a is not admissible: the scan keeps compute.a, takes memory.y
    assert strict_triple(scan, triples) == ["compute.a", "memory.y", None]
    assert strict_triple(scan, triples[2:]) == ["compute.a", None, "latency.p"]
    assert strict_triple(scan, []) is None
