"""The loop played on the CPU backend the way an agent drives
it, through the CLI only: a baseline sweep, ``kopt propose --format json``, two versions
submitted for iteration 2 (one correct and faster, one wrong), a resubmitted fix
(``--retry``), iteration 3, ``kopt lineage``; then the provenance and evidence ledgers and
``kopt methods`` checked by SQL, and the report's lineage picture."""

import json

import pytest
from click.testing import CliRunner

from kopt.cli.main import main
from kopt.core.spec import load_sweep
from kopt.driver.sweep import run_sweep
from kopt.loop.state import IterState, credit_line, rank
from kopt.store.database import Database
from kopt.store.files import now, write_table
from kopt.tools.submit import LINEAGE_CAPTION, lineage, lineage_text
from kopt.tools.wait import verdict

pytestmark = pytest.mark.slow

FAST, VEC = "compute.thread_coarsening", "memory.vectorized_access"
FAST_CLAIM = f"{FAST},memory.none,latency.none"  # every axis said
VEC_CLAIM = "compute.none,memory.vectorized_access,latency.none"
IPC = "sm__inst_executed.avg.per_cycle_active"
OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
NO_NCU = "no NCU metrics: the cpu backend has no profiler (NCU needs cuda)"
CUB = "https://github.com/NVIDIA/cccl/tree/main/cub"


def _version(folder, name, work, wrong=False, sub="versions"):
    """A copy of the fixture's source doing ``work`` units (a wrong result with ``wrong``)
    as ``folder/sub/name``."""
    text = (folder / "base.cpp").read_text().replace("#define WORK 64", f"#define WORK {work}")
    if wrong:
        text = text.replace("x[i] + y[i]", "x[i] - y[i]")
    path = folder / sub / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def kopt(*args):
    """``kopt ARGS`` in-process; its stdout (exit status 0 asserted)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.stdout


def state(db, run, it):
    _, rows = db.query(f"select state from iterations where run_id = '{run}' and iteration = "
                       f"{it} order by created_at desc limit 1")
    return json.loads(rows[0][0])


def test_the_loop_played_by_an_agent_on_the_cpu(ray_local, copy_fixture, tmp_path):
    folder = copy_fixture("submit")
    store = tmp_path / "store"
    run = run_sweep(load_sweep(folder), store, backend="cpu").run_id
    db = Database(store)
    st1 = state(db, run, 1)
    base1, best1 = st1["baseline"]["candidate_id"], st1["best"]["candidate_id"]
    # the parent of iteration 2: the loop's named best (the closing contest may find T=1 and
    # T=2, the same work, in the other order than iteration 1's ranking did)
    named1 = IterState.from_json(json.dumps(st1)).named().best["candidate_id"]

    # the plan as JSON: no NCU on a CPU, so every catalog method counts as triggered
    [plan] = json.loads(kopt("propose", folder, "--store", store, "--format", "json"))
    dc = plan["device_class"]
    assert (plan["run_id"], plan["next_iteration"], plan["sm"]) == (run, 2, None)
    assert (plan["evidence"], plan["trigger_evidence"], plan["triples"]) == (False, None, [])
    assert plan["best"]["candidate_id"] == named1
    assert plan["best_source"] == str(folder / "base.cpp")
    admitted = {s["method"]: s["admitted"] for a in plan["catalog_scan"].values() for s in a}
    assert admitted[FAST] is True and admitted[VEC] is True
    # the claim propose says needs no note passes the claim check with none (strict_triple,
    # picked among the sweep's own realizations, was refused without one)
    from kopt.core.claims import check_claim_for_plan, parse_claim

    assert plan["strict_claim"].count(",") == 2
    assert check_claim_for_plan(parse_claim(plan["strict_claim"]), plan, reason="").ok
    assert not check_claim_for_plan(parse_claim(VEC_CLAIM), plan, reason="").ok  # a lower one

    # iteration 2: a folder of two versions (v2_fast: 16x less work; v2_wrong: a wrong sum)
    _version(folder, "v2_fast.cpp", 4, sub="it2")
    _version(folder, "v2_wrong.cpp", 4, wrong=True, sub="it2")
    (folder / "why.md").write_text("the chain dominates: coarsen (priority 4; 1-3 need tensor "
                                   "cores, fp16 or a launch_config change this kernel does "
                                   "not need; no kernel_fusion, coalesced_access or "
                                   "tiling_smem to do: "
                                   "one pass, contiguous, no reuse)")
    out2 = json.loads(kopt("submit", run, "--source", folder / "it2", "--methods", FAST_CLAIM,
                           "--note", folder / "why.md", "--submitter", "agent-x", "--idea",
                           CUB, "--idea", "paper:Volkov 2010, Better performance at lower "
                           "occupancy", "--store", store, "--format", "json"))
    assert out2["iteration"] == 2
    assert [v["name"] for v in out2["versions"]] == ["v2_fast.cpp", "v2_wrong.cpp"]
    fast_ids = out2["versions"][0]["candidates"]
    # an idea that names no catalog method is refused in one line before anything is recorded
    res = CliRunner().invoke(main, ["submit", run, "--source", str(folder / "it2"), "--methods",
                                    FAST_CLAIM, "--idea",
                                    "catalog:compute.coarsening", "--retry",
                                    "--store", str(store)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert res.output.splitlines() == ["refused: --idea catalog:compute.coarsening: not a "
                                       "catalog method (`kopt catalog` lists them); write "
                                       "paper:, kernel: or other: for an idea from elsewhere"]
    assert db.submit_tries(run, 2) == 1
    # a version identical to its parent (here the sweep's own source under a new name) is
    # refused: it would get its parent's candidate ids and nothing new would be measured
    same = folder / "same" / "copy.cpp"
    same.parent.mkdir()
    same.write_text((folder / "base.cpp").read_text())
    res = CliRunner().invoke(main, ["submit", run, "--source", str(same), "--methods", FAST_CLAIM,
                                    "--retry", "--store", str(store)])
    assert res.exit_code == 1 and len(res.output.splitlines()) == 1, res.output
    assert res.output.startswith(f"refused: --source {same}: identical to its parent's source")
    assert db.submit_tries(run, 2) == 1
    # the fix, resubmitted into iteration 2 (its idea: a catalog method, named as such)
    _version(folder, "v2_fix.cpp", 8, sub="fix")
    out_fix = json.loads(kopt("submit", run, "--source", folder / "fix" / "v2_fix.cpp",
                              "--methods", FAST_CLAIM, "--submitter", "agent-x", "--retry",
                              "--idea", FAST, "--store", store, "--format", "json"))
    assert out_fix["iteration"] == 2
    # the same fix again: measured already, refused before anything is recorded (a try
    # that would build and run nothing, and use up one of the iteration's tries)
    res = CliRunner().invoke(main, ["submit", run, "--source", str(folder / "fix" / "v2_fix.cpp"),
                                    "--methods", FAST_CLAIM, "--retry", "--store", str(store)])
    assert res.exit_code == 1 and len(res.output.splitlines()) == 1, res.output
    assert res.output.startswith(f"refused: --source {folder / 'fix' / 'v2_fix.cpp'}: identical "
                                 "to a version of try 2 of this iteration")
    assert db.submit_tries(run, 2) == 2
    # the retry gave no --note: the try keeps the iteration's analysis
    _, notes = db.query(f"select try_no, note from versions where run_id = '{run}' and "
                        "iteration = 2 order by try_no, name")
    assert notes == [(1, (folder / "why.md").read_text())] * 2 + [
        (2, (folder / "why.md").read_text())]
    st2 = state(db, run, 2)
    parent2, w2 = st2["baseline"]["candidate_id"], st2["best"]["candidate_id"]
    assert parent2 == named1 and w2 in fast_ids and st2["selected"] == [FAST]

    # iteration 3 under iteration 2's winner
    _version(folder, "v3.cpp", 1, sub="it3")
    out3 = json.loads(kopt("submit", run, "--source", folder / "it3", "--methods", VEC_CLAIM,
                           "--note", folder / "why.md", "--submitter", "agent-y", "--idea",
                           "kernel:cub::BlockLoad (vectorized)", "--store", store,
                           "--format", "json"))
    v3_ids = out3["versions"][0]["candidates"]
    st3 = state(db, run, 3)
    assert st3["baseline"]["candidate_id"] == w2 and st3["best"]["candidate_id"] in v3_ids
    assert st3["selected"] == [FAST, VEC] and st3["ineffective"] == {}
    # each method's credit is the gain it was judged by: VEC's, iteration 3's version over
    # its parent (claimed alone, so not shared); FAST's stays iteration 2's
    assert st3["credit"][VEC]["iteration"] == 3 and st3["credit"][FAST]["iteration"] == 2
    assert st3["credit"][VEC]["against"] == w2 and st3["credit"][VEC]["shared_with"] == []
    # the triple's fastest over the parent (the contest may name a tied other one best)
    fastest = max(r["speedup"] for r in rank(store, run, 3, dc) if not r["is_baseline"])
    assert st3["credit"][VEC]["speedup"] == round(fastest, 4)
    assert st3["credit"][VEC]["label"] == "FASTER"
    # each submitted candidate's lineage columns, and the stored copy of its source
    _, rows = db.query(f"select candidate_id, parent_id, submitter, claimed_methods, status "
                       f"from candidates where run_id = '{run}' and iteration = 3 and not "
                       "is_baseline order by 1")
    assert rows == [(c, w2, "agent-y", VEC, "ok") for c in sorted(v3_ids)]
    _, src = db.query("select text from sources where source_hash = "
                      f"'{out2['versions'][0]['source_hash']}'")
    assert src == [((folder / "it2" / "v2_fast.cpp").read_text(),)]
    # the loop's closing contest re-measured the first baseline and every winner side by
    # side (iteration 2's winner rebuilt from its stored copy): iteration 3's is the best
    closing = st3["closing"]
    assert closing["best"]["candidate_id"] in v3_ids and closing["winner_of"][w2] == 2
    assert closing["speedup"] > 8  # 64 units of work -> 1

    # lineage: the tree, each submitted node under the node holding its parent
    *tree, caption = kopt("lineage", run, "--store", store).splitlines()
    assert caption == LINEAGE_CAPTION
    assert [t.split(" (")[0] for t in tree] == [
        "it 1 sweep", "  └─ it 2 v2_fast.cpp", "    └─ it 3 v3.cpp", "  └─ it 2 v2_wrong.cpp",
        "  └─ it 2 v2_fix.cpp"]
    assert "v2_wrong.cpp (try 1, agent-x" in tree[3] and "no correct candidate" in tree[3]
    assert "wrong_result 2" in tree[3] and "it 2 v2_fix.cpp (try 2, agent-x" in tree[4]
    # the same tree as JSON, for a loop driver: one object per node in the text's order
    nodes = json.loads(kopt("lineage", run, "--store", store, "--format", "json"))
    assert [(n["depth"], n["iteration"]) for n in nodes] == [(0, 1), (1, 2), (2, 3), (1, 2),
                                                               (1, 2)]
    assert [n["label"].split(" (")[0] for n in nodes] == [
        "it 1 sweep", "it 2 v2_fast.cpp", "it 3 v3.cpp", "it 2 v2_wrong.cpp", "it 2 v2_fix.cpp"]
    assert nodes[3]["best"] is None and nodes[3]["statuses"] == {"wrong_result": 2}
    # the review gate's verdict per node: iteration 2's winner accepted in the node holding
    # it, the wrong version failed, the fix measured but not the winner
    assert [nodes[i]["verdict"] for i in (1, 3, 4)] == [
        "accepted", "failed", "not the iteration's winner"]
    assert tree[3].endswith("; failed") and tree[1].endswith("; accepted")
    assert nodes[2]["best"] in v3_ids and nodes[2]["parent"] in nodes[1]["members"]
    assert nodes[2]["speedup"] > 1 and nodes[2]["median_ms"] > 0
    # `kopt wait`'s verdict says why a try failed: each candidate's status and error text
    (v2c,) = verdict(store, run, 2)["classes"]
    by_id = {r["candidate_id"]: r for r in v2c["results"]}
    assert sorted(by_id) == sorted(v2c["candidates"])
    assert {by_id[c]["status"] for c in nodes[3]["members"]} == {"wrong_result"}
    assert all(by_id[c]["error"] and by_id[c]["sizes_ok"] == 0 for c in nodes[3]["members"])
    assert {by_id[c]["status"] for c in nodes[1]["members"]} == {"ok"}
    # a correct loser says how far it was: its median and speedup (the lineage node's figures
    # for the fastest), its version and launch config; a failed one has no figures
    fast = by_id[nodes[1]["best"]]
    assert fast["median_ms"] == pytest.approx(nodes[1]["median_ms"])
    assert fast["speedup"] == pytest.approx(nodes[1]["speedup"])
    assert {by_id[c]["version"] for c in nodes[1]["members"]} == {"v2_fast.cpp"}
    assert {by_id[c]["version"] for c in nodes[4]["members"]} == {"v2_fix.cpp"}
    # two tries of one iteration told apart: the try and the source each result came from
    assert {(by_id[c]["try"], by_id[c]["source_hash"]) for c in nodes[4]["members"]} == {
        (2, nodes[4]["source_hash"])}
    assert {by_id[c]["try"] for c in nodes[1]["members"]} == {1}
    assert all(by_id[c]["median_ms"] > 0 and set(by_id[c]["params"]) == {"T"}
               for c in nodes[1]["members"])
    assert all(by_id[c]["median_ms"] is None for c in nodes[3]["members"])

    # the provenance ledger, by SQL: each version's ideas, claimed methods as catalog ideas
    _, prov = db.query(f"select p.iteration, p.try_no, v.name, p.kind, p.ref from provenance p "
                       f"join versions v using (run_id, iteration, try_no, source_hash) "
                       f"where p.run_id = '{run}' order by all")
    vol = "Volkov 2010, Better performance at lower occupancy"
    assert prov == [
        (2, 1, "v2_fast.cpp", "catalog", FAST), (2, 1, "v2_fast.cpp", "paper", vol),
        (2, 1, "v2_fast.cpp", "url", CUB), (2, 1, "v2_wrong.cpp", "catalog", FAST),
        (2, 1, "v2_wrong.cpp", "paper", vol), (2, 1, "v2_wrong.cpp", "url", CUB),
        (2, 2, "v2_fix.cpp", "catalog", FAST),
        (3, 1, "v3.cpp", "catalog", VEC),
        (3, 1, "v3.cpp", "kernel", "cub::BlockLoad (vectorized)")]

    # the evidence digest, by SQL (each iteration's latest closing): on a CPU the trigger's
    # metrics and thresholds with NULL figures and the reason; the parent and the winner
    # are the iteration's baseline and best
    _, ev = db.query(f"""
        select iteration, method, source, metric, op, threshold, before, after, parent_id,
               winner_id, accepted, note from evidence where run_id = '{run}'
        qualify created_at = max(created_at) over (partition by iteration, device_class)
        order by iteration, method, metric""")
    ratio = ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed/"
             "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    stall = "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio"
    w3 = st3["best"]["candidate_id"]
    # iteration 1 (the sweep's: launch configs only) selected nothing; its winner is the
    # fastest of T=1 (the baseline) and T=2, kept only when beyond noise
    win1 = ev[0][9]
    assert ev[0] == (1, None, None, None, None, None, None, None, base1, win1,
                     win1 == best1 != base1, "no method selected or claimed in this iteration")
    assert ev[1:] == [
        (2, FAST, "selected,claimed", IPC, "<", 1.0, None, None, parent2, w2, True, NO_NCU),
        (2, FAST, "selected,claimed", OCC, ">=", 50.0, None, None, parent2, w2, True, NO_NCU),
        (3, VEC, "selected,claimed", "gpu__compute_memory_throughput.avg.pct_of_peak_"
         "sustained_elapsed", "<", 70.0, None, None, w2, w3, True, NO_NCU),
        (3, VEC, "selected,claimed", ratio, ">", 1.0, None, None, w2, w3, True, NO_NCU),
        (3, VEC, "selected,claimed", stall, "rank<=", 3.0, None, None, w2, w3, True, NO_NCU)]
    # iteration 2 was closed twice (the first try, then the retry): two row sets
    _, sets = db.query(f"select count(distinct created_at) from evidence where run_id = "
                       f"'{run}' and iteration = 2")
    assert sets == [(2,)]

    # kopt methods over the store: each method tried once, kept once, never ineffective (the
    # parent's FAST in iteration 3 is not counted as tried again)
    rows = json.loads(kopt("methods", "--store", store, "--format", "json"))
    assert [(r["method"], r["device_class"], r["bottleneck"], r["tried"], r["accepted"],
             r["ineffective"], r["measured"]) for r in rows] == [
        (FAST, dc, "unknown", 1, 1, 0, 1), (VEC, dc, "unknown", 1, 1, 0, 1)]
    assert rows[0]["median_gain"] > 4 and rows[1]["median_gain"] > 2

    # the report's lineage picture, its labels from the store
    kopt("report", run, "--store", store, "--out", tmp_path / "rep")
    assert (tmp_path / "rep" / "lineage.png").stat().st_size > 10_000
    summary = (tmp_path / "rep" / "summary.md").read_text()
    assert "![the version tree](lineage.png)" in summary
    assert "\n".join(lineage_text(lineage(store, run))) in summary
    n3 = lineage(store, run)[-1]
    _, [(ms, sp)] = db.query(f"select median_ms, speedup from candidates where run_id = '{run}' "
                             f"and iteration = 3 and candidate_id = '{n3.best}'")
    # the node holding the loop's named best (the closing contest's pick) shows that one
    assert n3.named and n3.best == closing["best"]["candidate_id"]
    assert n3.caption().split("\n") == [
        "it 3 v3.cpp (try 1, agent-y)", VEC, f"named best: {ms:.4g} ms, {sp:.3g}x over parent",
        "ok 2"]

    # the run folder the manual workflow leaves, from the store
    kopt("report", run, "--store", store, "--out", tmp_path / "wf", "--workflow")
    wf = tmp_path / "wf"
    summary = (wf / "summary.md").read_text()
    assert ("Effective (selected), each with the gain it was judged by: "
            f"{credit_line(FAST, st3['credit'][FAST])}; "
            f"{credit_line(VEC, st3['credit'][VEC])}.") in summary
    assert sorted(json.loads((wf / "state.json").read_text())) == [dc]
    assert sorted(p.name for p in wf.glob("iteration-*")) == [
        "iteration-1", "iteration-2", "iteration-3"]
    # iteration 3's winner's source byte for byte (the store's copy), after its defines
    k3 = (wf / "iteration-3" / "kernel.cpp").read_text()
    assert k3.endswith("\n\n" + (folder / "it3" / "v3.cpp").read_text())
    assert k3.startswith(f"// kopt: iteration 3's best on {dc}, candidate "
                         f"{st3['best']['candidate_id']}")
    m2 = json.loads((wf / "iteration-2" / "methods.json").read_text())
    assert (m2["best"], m2["selected"]) == (w2, [FAST])
    assert m2["credit"] == {FAST: st2["credit"][FAST]}  # judged in iteration 2: its own
    assert m2["credit"][FAST]["against"] == parent2
    assert [(c["version"], c["try"], c["methods"]) for c in m2["claimed"]] == [
        ("v2_fast.cpp", 1, [FAST]), ("v2_wrong.cpp", 1, [FAST]), ("v2_fix.cpp", 2, [FAST])]
    assert (folder / "why.md").read_text().strip() in (wf / "iteration-2" / "analysis.md"
                                                      ).read_text()
    assert "No version was submitted into this iteration" in (
        wf / "iteration-1" / "analysis.md").read_text()
    assert "No Nsight Compute profile" in (wf / "iteration-3" / "profile.md").read_text()

    # a submission into iteration 4 that never closed (a detached try killed: its versions
    # row, no iterations row): a new submission is refused until it is retried or closes
    write_table(store, "versions", "submit", run, [{
        "run_id": run, "sweep": "submit", "iteration": 4, "try_no": 1, "source_hash": "x",
        "name": "v4.cpp", "parent_id": st3["best"]["candidate_id"], "submitter": "agent-y",
        "claimed_methods": VEC, "note": "", "created_at": now()}])
    res = CliRunner().invoke(main, ["submit", run, "--source", str(folder / "it3"),
                                    "--methods", VEC_CLAIM, "--store", str(store)])
    assert res.exit_code == 1 and res.output.splitlines() == [
        f"refused: run {run}: iteration 4 was submitted and has not closed (`kopt wait {run}` "
        "says why); retry it with --retry, or wait for it to close"]


def test_a_submitted_try_rebuilds_every_winner_the_closing_contest_re_measures(tmp_path):
    """The closing contest re-measures each iteration's stored winner; where the closing
    named another best (the first baseline, faster side by side), the named best alone was
    rebuilt for the next submitted iteration, and the stored winner was "not at hand" and
    dropped from every later closing contest. Both are re-measured (and rebuilt) now."""
    from kopt.loop.state import IterState
    from kopt.tools.submit import _contested

    store = tmp_path / "store"
    first = {"candidate_id": "base", "iteration": 1}
    closing = {"best": {"candidate_id": "base", "triple": []}, "first_baseline": "base"}
    st = IterState(iteration=1, best={"candidate_id": "won1", "iteration": 1}, baseline=first,
                   closing=closing)
    assert st.named().best["candidate_id"] == "base"
    write_table(store, "iterations", "s", "r1", [{
        "run_id": "r1", "sweep": "s", "iteration": 1, "device_class": "cpu",
        "state": st.to_json(), "created_at": now()}])
    db = Database(store)
    states = {1: {"cpu": st.named()}}
    assert _contested(db, "r1", 2, states, retry=False) == {"base", "won1"}
