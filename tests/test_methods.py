"""``kopt methods``: each catalog method's record over the whole store, per device class and
bottleneck, from rows written with the store's own writer (kopt.store.files.write_table)."""

import json

import pytest
from click.testing import CliRunner

from kopt.cli.main import main
from kopt.loop.state import IterState
from kopt.store.database import Database
from kopt.store.files import now, write_table

U, V, P = "compute.ilp_unroll", "memory.vectorized_access", "latency.persistent_kernel"
CPU, GPU = "cpu-x86_64", "nvidia-h200-sm90"


def cand(run, it, dc, cid, triple, median_ms, status="ok", base=False, dims='{"N": 1}'):
    return {"run_id": run, "sweep": "demo", "iteration": it, "job_key": f"{run}{it}{cid}{dims}",
            "candidate_id": cid, "compute_method": triple[0], "memory_method": triple[1],
            "latency_method": triple[2], "is_baseline": base, "status": status,
            "median_ms": median_ms if status == "ok" else None, "dims": dims,
            "device_class": dc, "params": "{}", "defines": "{}", "created_at": now()}


def state(it, best_id, best_triple, best_it, ineffective, bottleneck=None):
    st = IterState(iteration=it, ineffective=ineffective, bottleneck_before=bottleneck,
                   best={"candidate_id": best_id, "triple": best_triple, "iteration": best_it})
    return st.to_json()


def write_history(root):
    """r1 on a CPU (no NCU: bottleneck unknown), two iterations over two problem sizes:
    it 1: U alone 2x, V alone 1x, U+V 1.98x: U wins, V ineffective;
    it 2 (U's build the baseline): P 0.9x, ineffective; no gain.
    r2 on an H200, memory-bound: V 1.5x wins; U fails (wrong result)."""
    rows = []
    for dims in ('{"N": 1}', '{"N": 2}'):
        rows += [cand("r1", 1, CPU, "b", (None, None, None), 2.0, base=True, dims=dims),
                 cand("r1", 1, CPU, "u", (U, None, None), 1.0, dims=dims),
                 cand("r1", 1, CPU, "v", (None, V, None), 2.0, dims=dims),
                 cand("r1", 1, CPU, "uv", (U, V, None), 2.0 / 1.98, dims=dims),
                 cand("r1", 2, CPU, "u", (None, None, None), 1.0, base=True, dims=dims),
                 cand("r1", 2, CPU, "up", (None, None, P), 1.0 / 0.9, dims=dims)]
    write_table(root, "candidates", "demo", "r1", rows)
    write_table(root, "iterations", "demo", "r1", [
        {"run_id": "r1", "sweep": "demo", "iteration": 1, "device_class": CPU,
         "state": state(1, "u", [U, None, None], 1, {V: None}), "created_at": now()},
        {"run_id": "r1", "sweep": "demo", "iteration": 2, "device_class": CPU,
         "state": state(2, "u", [U, None, None], 1, {V: None, P: None}), "created_at": now()}])
    write_table(root, "candidates", "demo", "r2", [
        cand("r2", 1, GPU, "b", (None, None, None), 3.0, base=True),
        cand("r2", 1, GPU, "v", (None, V, None), 2.0),
        cand("r2", 1, GPU, "u", (U, None, None), None, status="wrong_result")])
    write_table(root, "iterations", "demo", "r2", [
        {"run_id": "r2", "sweep": "demo", "iteration": 1, "device_class": GPU,
         "state": state(1, "v", [None, V, None], 1, {}, "memory"), "created_at": now()}])


def test_per_iteration_records_read_each_method_as_the_loop_does(tmp_path):
    write_history(tmp_path)
    got = {(r["method"], r["run_id"], r["iteration"]): r
           for r in Database(tmp_path).method_records()}
    assert set(got) == {(U, "r1", 1), (V, "r1", 1), (P, "r1", 2), (V, "r2", 1), (U, "r2", 1)}
    # V's own gain: V alone over the baseline (1.0), U+V over U (0.99): 1.0 -- not the 1.98
    # it rode along with
    assert got[(V, "r1", 1)]["gain"] == pytest.approx(1.0)
    assert got[(U, "r1", 1)]["gain"] == pytest.approx(2.0)  # U over none, U+V over V (1.98)
    assert got[(P, "r1", 2)]["gain"] == pytest.approx(0.9)
    assert got[(U, "r2", 1)]["gain"] is None  # its only candidate was wrong
    assert {k for k, r in got.items() if r["accepted"]} == {(U, "r1", 1), (V, "r2", 1)}
    assert got[(V, "r1", 1)]["ineffective"] and got[(P, "r1", 2)]["ineffective"]
    assert not got[(U, "r1", 1)]["ineffective"]
    assert got[(V, "r2", 1)]["bottleneck"] == "memory"
    assert got[(V, "r1", 1)]["bottleneck"] == "unknown"


def test_methods_table_and_json_over_the_whole_store(tmp_path):
    write_history(tmp_path)
    eff = {(r["method"], r["device_class"], r["bottleneck"]): r
           for r in Database(tmp_path).method_effectiveness()}
    assert {k: (r["tried"], r["accepted"], r["ineffective"], r["measured"])
            for k, r in eff.items()} == {
        (U, CPU, "unknown"): (1, 1, 0, 1), (V, CPU, "unknown"): (1, 0, 1, 1),
        (P, CPU, "unknown"): (1, 0, 1, 1), (V, GPU, "memory"): (1, 1, 0, 1),
        (U, GPU, "memory"): (1, 0, 0, 0)}
    assert eff[(V, GPU, "memory")]["median_gain"] == pytest.approx(1.5)
    assert eff[(U, GPU, "memory")]["median_gain"] is None
    r = CliRunner().invoke(main, ["methods", "--store", str(tmp_path), "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    # catalog order: compute, then memory, then latency
    assert [(x["method"], x["device_class"]) for x in rows] == [
        (U, CPU), (U, GPU), (V, CPU), (V, GPU), (P, CPU)]
    assert rows[3]["median_gain"] == pytest.approx(1.5)
    r = CliRunner().invoke(main, ["methods", "--store", str(tmp_path)])
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.stdout.splitlines() if V in ln and GPU in ln)
    assert [c.strip() for c in line.split("│")[3:8]] == ["memory", "1", "1", "1.500x", "0"]
    assert "24 catalog methods never tried" in r.stdout


def test_methods_on_a_store_without_iterations(tmp_path):
    r = CliRunner().invoke(main, ["methods", "--store", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no store at" in r.output
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(main, ["methods", "--store", str(tmp_path / "empty")])
    assert r.exit_code == 0 and "no method was tried" in r.output
