"""`kopt submit` and `kopt lineage` (issue 15) on the CPU backend: a baseline run, two
versions submitted for iteration 2 (one correct and 16x less work, one wrong), a resubmitted
fix, the version tree and the lineage rows read back by SQL."""

import json
import os

import pytest
from click.testing import CliRunner

from kopt.cli import main
from kopt.database import Database
from kopt.pipeline import run_sweep
from kopt.spec import load_sweep
from kopt.submit import SubmitError, lineage, lineage_text, run_submission

pytestmark = pytest.mark.slow

FAST = "compute.thread_coarsening"


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


def test_submit_versions_retry_and_lineage(ray_local, copy_fixture, tmp_path):
    folder = copy_fixture("submit")
    store = tmp_path / "store"
    s = run_sweep(load_sweep(folder), store, backend="cpu")
    run = s.run_id
    db = Database(store)
    # a sweep's own candidates: no parent, submitted by 'sweep', their source stored
    _, rows = db.query(f"select distinct parent_id, submitter, claimed_methods, source_hash "
                       f"from candidates where run_id = '{run}'")
    assert len(rows) == 1 and rows[0][:3] == (None, "sweep", None)
    sweep_hash = rows[0][3]
    _, src = db.query(f"select name, text from sources where source_hash = '{sweep_hash}'")
    assert src == [("base.cpp", (folder / "base.cpp").read_text())]

    # a claim that breaks a catalog rule is refused by the CLI, one line, exit 1, nothing run
    fast = _version(folder, "v2_fast.cpp", 4)
    wrong = _version(folder, "v2_wrong.cpp", 4, wrong=True)
    res = CliRunner().invoke(main, ["submit", run, "--source", str(fast), "--methods",
                                    f"{FAST},compute.ilp_unroll", "--store", str(store)])
    assert res.exit_code == 1
    assert "one_method_per_axis" in res.output and "Traceback" not in res.output
    assert db.submit_tries(run, 2) == 0

    note = "coarsen: each thread does 16x less chain work"
    sub, summ = run_submission(store, run, sorted([fast, wrong]), [FAST], note, "agent-x")
    assert sub.iteration == 2 and not summ.interrupted
    by_name = {v.name: v for v in sub.versions}
    assert sorted(by_name) == ["v2_fast.cpp", "v2_wrong.cpp"]
    assert all(len(sub.created[v.source_hash]) == 2 for v in sub.versions)  # T = 1, 2
    state = json.loads(db.query(f"select state from iterations where run_id = '{run}' and "
                                "iteration = 2 order by created_at desc limit 1")[1][0][0])
    parent = state["baseline"]["candidate_id"]
    assert state["best"]["candidate_id"] in sub.created[by_name["v2_fast.cpp"].source_hash]
    assert state["selected"] == [FAST] and state["gain"] > 4

    fix = _version(folder, "v2_fix.cpp", 8)
    sub2, _ = run_submission(store, run, [fix], [FAST], note, "agent-x", retry=True,
                             max_tries=2)
    assert sub2.iteration == 2 and db.submit_tries(run, 2) == 2
    with pytest.raises(SubmitError, match="already had 2 tries"):
        run_submission(store, run, [fix], [FAST], note, "agent-x", retry=True, max_tries=2)

    # the lineage rows, by SQL: every submitted candidate names its parent, source, claim
    _, rows = db.query(
        f"select v.name, v.try_no, c.status, c.parent_id, c.submitter, c.claimed_methods, "
        f"c.note, c.speedup from candidates c join versions v using (run_id, source_hash) "
        f"where c.run_id = '{run}' and c.iteration = 2 and not c.is_baseline order by 1")
    by = {}
    for name, tr, status, pid, who, claimed, nt, sp in rows:
        assert (pid, who, claimed, nt) == (parent, "agent-x", FAST, note)
        by.setdefault((name, tr), []).append((status, sp))
    assert sorted(by) == [("v2_fast.cpp", 1), ("v2_fix.cpp", 2), ("v2_wrong.cpp", 1)]
    assert [st for st, _ in by[("v2_wrong.cpp", 1)]] == ["wrong_result"] * 2
    assert all(st == "ok" and sp > 4 for st, sp in by[("v2_fast.cpp", 1)])
    assert all(st == "ok" and sp > 2 for st, sp in by[("v2_fix.cpp", 2)])
    _, src = db.query(f"select text from sources where source_hash = "
                      f"'{by_name['v2_fast.cpp'].source_hash}'")
    assert src == [(fast.read_text(),)]

    nodes = lineage(store, run)
    assert [n.label.split(" (")[0] for n in nodes] == [
        "it 1 sweep", "it 2 v2_fast.cpp", "it 2 v2_wrong.cpp", "it 2 v2_fix.cpp"]
    root, nfast, nwrong, nfix = nodes
    assert root.parent is None and parent in root.members
    assert nfast.parent == nwrong.parent == nfix.parent == parent
    assert nfast.speedup > 4 and nfast.methods == FAST and nfast.statuses == {"ok": 2}
    assert nwrong.best is None and nwrong.statuses == {"wrong_result": 2}
    text = lineage_text(nodes)
    assert text[0].startswith("it 1 sweep") and all(t.startswith("  └─ it 2") for t in text[1:])
    res = CliRunner().invoke(main, ["lineage", run, "--store", str(store)])
    assert res.exit_code == 0 and res.output.splitlines() == text
    assert os.path.isfile(store / "source-files" / by_name["v2_fast.cpp"].source_hash
                          / "v2_fast.cpp")

    # iteration 3 through the CLI (a folder of versions, JSON out): its parent is iteration
    # 2's winner, a submitted version rebuilt from its stored copy
    v3 = _version(folder, "v3.cpp", 1, sub="it3")
    (folder / "note.md").write_text("vectorize: a quarter of the chain again")
    # iteration 2's winner after the retry re-closed it (v2_fast at T=1 or T=2: equal work)
    w2 = json.loads(db.query(f"select state from iterations where run_id = '{run}' and "
                             "iteration = 2 order by created_at desc limit 1")[1][0][0]
                    )["best"]["candidate_id"]
    assert w2 in sub.created[by_name["v2_fast.cpp"].source_hash]
    res = CliRunner().invoke(main, ["submit", run, "--source", str(v3.parent), "--methods",
                                    "memory.vectorized_access", "--note",
                                    str(folder / "note.md"), "--submitter", "agent-y",
                                    "--store", str(store), "--format", "json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.splitlines()[-1])
    assert out["iteration"] == 3 and [v["name"] for v in out["versions"]] == ["v3.cpp"]
    made = out["versions"][0]["candidates"]
    _, rows = db.query(f"select candidate_id, is_baseline, status, parent_id, submitter, speedup "
                       f"from candidates where run_id = '{run}' and iteration = 3 order by 1")
    assert {r[0] for r in rows if not r[1]} == set(made) and len(made) == 2
    assert [r[0] for r in rows if r[1]] == [w2]  # the parent, re-measured as the baseline
    assert all(r[2] == "ok" and r[3] == w2 and r[4] == "agent-y" and r[5] > 2
               for r in rows if not r[1])
    # the loop's closing contest re-measured the first baseline and every winner (their
    # builds made again in this process): iteration 3's winner is the loop's best
    closing = json.loads(db.query(f"select state from iterations where run_id = '{run}' and "
                                  "iteration = 3 order by created_at desc limit 1")[1][0][0]
                         )["closing"]
    assert closing["final_winner"] in made and closing["winner_of"][w2] == 2
    assert closing["best"]["candidate_id"] in made and closing["speedup"] > 8
    n3 = lineage(store, run)[-1]
    assert n3.label.startswith("it 3 v3.cpp (try 1, agent-y") and n3.parent == w2
    assert [t.split(" (")[0] for t in lineage_text(lineage(store, run))] == [
        "it 1 sweep", "  └─ it 2 v2_fast.cpp", "    └─ it 3 v3.cpp", "  └─ it 2 v2_wrong.cpp",
        "  └─ it 2 v2_fix.cpp"]  # iteration 3 under iteration 2's winner
