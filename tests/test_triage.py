"""kopt triage on real traces: the product's figures (Python) against figures computed
independently from the same files (DuckDB's JSON reader, sqlite3)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import duckdb
import pytest
import yaml
from click.testing import CliRunner

from conftest import ROOT
from kopt.cli.main import main
from kopt.tools.triage import TriageError, read_trace, triage

DATA = ROOT / "tests" / "data"
EAGER = DATA / "triage-h200" / "toy_graph0.json.gz"  # CUDA graphs off, record_function ranges
GRAPH = DATA / "triage-h200" / "toy_graph1.json.gz"  # one CUDA graph replayed, no ranges
NSYS = DATA / "nsys" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz"  # a real nsys export

EVENTS = ("(select unnest(traceEvents, max_depth := 2) from read_json('{}', "
          "maximum_object_size = 100000000))")


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in (r.output or ""), r.output
    return r


def _duck(sql: str, path) -> list[tuple]:
    return duckdb.connect().sql(sql.format(ev=EVENTS.format(path))).fetchall()


@pytest.mark.parametrize("trace", [EAGER, GRAPH])
def test_top_kernel_shares_match_duckdb_sums(trace):
    t = triage(trace)
    want = _duck("""with k as (select name, dur from {ev} where cat = 'kernel')
                    select name, sum(dur) / (select sum(dur) from k), count(*), min(dur),
                           max(dur) from k group by name order by 2 desc limit 5""", trace)
    got = [(r["kernel"], r["share"], r["calls"], r["min_us"], r["max_us"])
           for r in t.kernels[:5]]
    assert [g[0] for g in got] == [w[0] for w in want]
    for g, w in zip(got, want):
        assert g[1] == pytest.approx(w[1], rel=1e-9) and g[2:] == pytest.approx(w[2:])
    assert t.kernels[0]["kernel"] == "nvjet_sm90_hsh_128x128_64x6_2x1_v_bz_bias_TNT"
    assert sum(r["share"] for r in t.kernels) == pytest.approx(1.0)
    assert all(r["in_graph"] is (trace == GRAPH) for r in t.kernels)


def test_stage_and_layer_attribution_matches_the_ranges():
    """Each kernel's layer and innermost range, per correlation id, against a DuckDB join:
    kernel -> launch call (same correlation) -> record_function ranges on the launching
    thread that enclose the call."""
    want = {(c, lvl): n for c, lvl, n in _duck("""
        with ev as {ev},
        k as (select args.correlation c from ev where cat = 'kernel'),
        call as (select args.correlation c, ts, tid from ev
                 where cat in ('cuda_runtime', 'cuda_driver')),
        r as (select name, ts, ts + dur te, tid, dur from ev where cat = 'user_annotation')
        select k.c, case when r.name like 'layer%' then 'layer' when r.name = 'generate_step'
                    then 'stage' else 'inner' end lvl, r.name
        from k join call using (c) join r on r.tid = call.tid and r.ts <= call.ts
             and call.ts <= r.te""", EAGER)}
    launches = read_trace(EAGER)
    assert len(launches) == 220
    for k in launches:
        assert k.ranges[0] == want[(k.correlation, "stage")] == "generate_step"
        assert (k.ranges[1] if len(k.ranges) > 1 else None) == want.get((k.correlation, "layer"))
        assert k.ranges[-1] == want.get((k.correlation, "inner"), k.ranges[-1])
        if (k.correlation, "inner") in want:
            assert k.ranges[2] == want[(k.correlation, "inner")]
    t = triage(EAGER)
    top = t.kernels[0]  # the qkv/o/up projections: in attention and mlp of every layer
    assert top["stages"] == "generate_step" and top["ranges"] == "attention,mlp"
    assert top["layers"] == "layer_0,layer_1,layer_2,layer_3"
    head = next(r for r in t.kernels if r["kernel"].startswith("sm80_xmma_gemm"))
    assert head["layers"] is None and head["ranges"] == "generate_step"  # the final matmul


def test_mapping_and_formal_attribute_every_graph_kernel():
    eager = triage(EAGER)
    t = triage(GRAPH, mapping=EAGER)
    assert t.notes == [] and len(t.launches) == 220
    assert all(k.in_graph and k.ranges and k.ranges[0] == "generate_step" for k in t.launches)
    per_layer = {}
    for tt in (eager, t):
        counts: dict[tuple, int] = {}
        for k in tt.launches:
            key = (k.name, k.ranges[1] if len(k.ranges) > 1 else None, k.ranges[-1])
            counts[key] = counts.get(key, 0) + 1
        per_layer[id(tt)] = counts
    assert per_layer[id(t)] == per_layer[id(eager)]
    # the timing is the graph trace's own, not the eager one's
    graph_total = _duck("select sum(dur) from {ev} where cat = 'kernel'", GRAPH)[0][0]
    assert sum(r["total_us"] for r in t.kernels) == pytest.approx(graph_total)
    assert t.kernels[0]["layers"] == "layer_0,layer_1,layer_2,layer_3"


def test_real_nsight_systems_export(tmp_path):
    """A real public `nsys export --type sqlite` file (hpcgroup/pipit, MIT; see
    tests/data/nsys/README.md): kernels, mangled names and NVTX ranges by the documented
    schema, against sums read with sqlite3."""
    raw = tmp_path / "saxpy.sqlite"
    raw.write_bytes(gzip.decompress(NSYS.read_bytes()))
    con = sqlite3.connect(raw)
    n, total_ns = con.execute("select count(*), sum(end - start) from "
                              "CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    for path in (NSYS, raw):  # gzipped or not
        t = triage(path)
        (k,) = t.kernels
        assert k["kernel"] == "saxpy(double *, double *, double *, double, int)"
        assert k["mangled"] == "_Z5saxpyPdS_S_di" and k["calls"] == n == 5
        assert k["total_us"] == pytest.approx(total_ns / 1e3)
        assert k["stages"] == "saxpy" and k["grid"] == "2,1,1" and k["block"] == "512,1,1"
        assert not k["in_graph"]


def test_cli_tables_store_csv_json_plot_and_known_routes(tmp_path):
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  - pattern: '^nvjet_'\n    operator: aten::linear\n"
                      "    source: model/linear.py\n    tuning: cublaslt heuristics cache\n"
                      "    owner: gemm-team\n")
    st, rep = tmp_path / "st", tmp_path / "rep"
    r = run("triage", "--mapping", EAGER, "--formal", GRAPH, "--known", routes, "--store", st,
            "--out", rep, "--plot", tmp_path / "p.png")
    assert r.exit_code == 0, r.output
    assert "known paths of the hot kernels" in r.output and "actions" in r.output
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert (rep / "triage.png").is_file() and (rep / "kernels.csv").is_file()
    doc = json.loads((rep / "triage.json").read_text())
    acts = {a["rank"]: a for a in doc["actions"]}
    assert acts[1]["action"] == "tune" and "gemm-team" in acts[1]["why"]
    assert acts[3]["action"] == "sweep"  # sm80_xmma_gemm: hot, no route
    skel = rep / "sweeps" / f"k3_{'sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stag'}"
    assert acts[3]["sweep_dir"] == str(skel)
    assert {p.name for p in skel.iterdir()} == {"sweep.yaml", "ref.py", f"{skel.name[3:]}.cu"}
    assert "NotImplementedError" in (skel / "ref.py").read_text()
    assert all(a["action"] == "leave" for a in doc["actions"] if a["share"] < 0.05)
    r = run("query", "--store", st, "--format", "json",
            "select k.rank, k.share, p.known, a.action from triage_kernels k join triage_paths "
            "p using (triage_id, rank) join triage_actions a using (triage_id, rank) "
            "order by k.rank")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["rank"] for x in rows] == [p["rank"] for p in doc["paths"]]
    assert rows[0]["known"] and rows[0]["action"] == "tune"
    assert rows[0]["share"] == pytest.approx(doc["kernels"][0]["share"])
    r = run("query", "--store", st, "--format", "csv",
            "select count(*) from triage_launches where stage = 'generate_step' and in_graph")
    assert r.output.splitlines()[1] == "220"
    r = run("triage", EAGER, "--format", "csv", "--no-store")
    assert r.exit_code == 0 and r.stdout.startswith("# kernels\nkernel,mangled,total_us,")
    assert "\n# paths\n" in r.output and "\n# actions\n" in r.output


def test_skeleton_launch_is_the_traced_launch(tmp_path):
    """Each sweep skeleton's baseline geometry is the traced launch's on every axis: the layer
    norm's 32 x 4 block (128 threads, not 32), the GEMMs' 2 x 64 grid."""
    t = triage(GRAPH, sweeps=tmp_path)
    skeletons = {a["rank"]: Path(a["sweep_dir"]) for a in t.actions if a["sweep_dir"]}
    assert sorted(skeletons) == [1, 2, 3, 4, 5, 6, 7]
    for k in t.kernels:
        if k["rank"] not in skeletons:
            continue
        doc = yaml.safe_load((skeletons[k["rank"]] / "sweep.yaml").read_text())
        dims, base, launch = doc["dims"][0], doc["baseline"], doc["launch"]
        grid = [dims[n] for n in launch["grid"]] + [1, 1]
        block = [base[n] for n in launch["block"]] + [1, 1]
        assert ",".join(map(str, grid[:3])) == k["grid"].split(" ")[0], k["kernel"]
        assert ",".join(map(str, block[:3])) == k["block"].split(" ")[0], k["kernel"]
    ln = yaml.safe_load((skeletons[5] / "sweep.yaml").read_text())
    assert ln["launch"] == {"kernel": "vectorized_layer_norm_kernel", "block": ["BX", "BY"],
                            "grid": ["GX"]}
    assert ln["baseline"] == {"BX": 32, "BY": 4} and ln["params"]["BY"] == [4]
    assert ln["dims"] == [{"GX": 2048}] and ln["restrictions"] == ["BX * BY <= 1024"]


def test_bad_input_is_one_line(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    r = run("triage", bad, "--no-store")
    assert r.exit_code == 2 and str(bad) in r.output and "PyTorch trace JSON" in r.output
    r = run("triage", tmp_path / "missing.json", "--no-store")
    assert r.exit_code == 2 and "no such trace file" in r.output
    routes = tmp_path / "r.yaml"
    routes.write_text("routes:\n  - operator: x\n")
    r = run("triage", EAGER, "--known", routes, "--no-store")
    assert r.exit_code == 2 and "routes[0].pattern" in r.output and str(routes) in r.output
    with pytest.raises(TriageError, match="no GPU kernels"):
        (tmp_path / "empty.json").write_text('{"traceEvents": []}')
        read_trace(tmp_path / "empty.json")


@pytest.mark.timeout(60)
def test_a_backtracking_route_pattern_matches_in_linear_time_and_a_bad_one_is_one_line(
        tmp_path):
    # `(a+)+$` against a long kernel name took Python's re exponential time (the
    # command hung); RE2 matches it at once. A pattern RE2 cannot take is one line.
    from kopt.tools.triage import load_routes, path_table

    routes = tmp_path / "r.yaml"
    routes.write_text('routes:\n  - pattern: "(a+)+$"\n    owner: x\n'
                      '  - pattern: "CUTLASS"\n    owner: y\n')
    loaded = load_routes(routes)
    kernels = [{"rank": 1, "kernel": "a" * 5000 + "b", "mangled": None, "share": 0.9},
               {"rank": 2, "kernel": "void cutlass::Kernel<Gemm>", "mangled": None,
                "share": 0.1}]
    rows = path_table(kernels, loaded, min_share=0.05)
    assert [(r["known"], r["owner"]) for r in rows] == [(False, None), (True, "y")]
    routes.write_text('routes:\n  - pattern: "(a)\\\\1"\n')
    with pytest.raises(TriageError) as e:
        load_routes(routes)
    assert str(e.value) == (f"{routes}: field 'routes[0].pattern' is not a regex RE2 takes "
                            "(invalid escape sequence: \\1); write a regular expression "
                            "without backreferences or lookaround")
