"""Expansion: triples (priority, arch gates, conflicts, requires), restrictions, dedup, cap."""

from conftest import VADD_CPP, VADD_REF, write_sweep
from kopt.core.catalog import load_catalog
from kopt.core.expand import Tally, admissible_triples, cap, expand, iter_candidates, scan_axes
from kopt.core.spec import load_sweep

CAT = load_catalog()

SPEC = """
    kernel: k.cu
    dims: [{N: 4096}, {N: 1000}]
    args: {x: [N], y: [N]}
    params: {THREADS: [128, 256, 512]}
    restrictions:
      - "THREADS * ITEMS <= 1024"
      - "N % (THREADS * VEC) == 0"
    baseline: {THREADS: 256}
    methods:
      compute.thread_coarsening: {params: {ITEMS: [2, 4]}}
      compute.launch_config: {defines: {LB: 1}}
      memory.vectorized_access: {defines: {VEC: 4}}
      memory.async_copy: {defines: {ASYNC: 1}}
      latency.persistent_kernel: {defines: {PERSIST: 1}}
      latency.warp_shuffle_sync: {defines: {SHFL: 1}}
      compute.warp_reduction: {defines: {SHFL: 1}}
      compute.warp_specialization: {defines: {WS: 1}}
"""


def space(tmp_path, text=SPEC):
    d = write_sweep(tmp_path / "s", text, {"k.cu": VADD_CPP, "ref.py": VADD_REF})
    return load_sweep(d).space("cuda")


def test_scan_orders_by_priority_and_gates_arch(tmp_path):
    sp = space(tmp_path)
    scans = scan_axes(sp, CAT, sm=75)
    assert [s.method for s in scans["compute"]] == [
        "compute.launch_config", "compute.thread_coarsening", "compute.warp_reduction",
        "compute.warp_specialization"]
    reasons = {s.method: s.reason for a in scans.values() for s in a}
    assert reasons["memory.async_copy"] == "arch_incompatible"        # cp.async: sm_80
    assert reasons["compute.warp_specialization"] == "arch_incompatible"
    assert reasons["memory.vectorized_access"] == ""
    sel = scan_axes(sp, CAT, sm=90, selected=["memory.vectorized_access"])
    assert {s.method: s.reason for s in sel["memory"]}["memory.vectorized_access"] == \
        "already_selected"


def test_conflicts_and_requires_drop_triples(tmp_path):
    sp = space(tmp_path)
    triples = admissible_triples(sp, CAT, sm=90)
    assert triples[0] == (None, None, None)
    assert ("compute.launch_config", None, "latency.persistent_kernel") not in triples
    assert ("compute.launch_config", None, None) in triples
    # warp specialization requires memory.async_copy in the triple (or selected before)
    assert ("compute.warp_specialization", None, None) not in triples
    assert ("compute.warp_specialization", "memory.async_copy", None) in triples
    assert ("compute.warp_specialization", None, None) in admissible_triples(
        sp, CAT, sm=90, selected=["memory.async_copy"])


def test_sm90a_target_only_for_wgmma_methods(tmp_path):
    cands = expand(space(tmp_path), CAT, sm=90)
    targets = {c.target for c in cands if c.triple[0] == "compute.warp_specialization"}
    assert targets == {"sm_90a"}
    assert {c.target for c in cands if c.triple[0] != "compute.warp_specialization"} == {"sm_90"}


def test_restrictions_per_dims_and_method_params(tmp_path):
    cands = expand(space(tmp_path), CAT, sm=90)
    base = cands[0]
    assert base.is_baseline and base.params == {"THREADS": 256} and base.triple == (None,) * 3
    assert base.dims_ok == [0, 1]
    # ITEMS exists only with thread_coarsening; THREADS*ITEMS <= 1024 filters 512x4
    co = [c for c in cands if c.triple == ("compute.thread_coarsening", None, None)]
    assert sorted((c.params["THREADS"], c.params["ITEMS"]) for c in co) == [
        (128, 2), (128, 4), (256, 2), (256, 4), (512, 2)]
    # N % (THREADS*VEC) == 0 holds for N=4096 but not N=1000: vectorized candidates skip dims 1
    vec = [c for c in cands if c.triple[1] == "memory.vectorized_access"]
    assert vec and all(c.dims_ok == [0] for c in vec)


def test_identical_builds_collapse(tmp_path):
    cands = expand(space(tmp_path), CAT, sm=90)
    ids = [c.candidate_id for c in cands]
    assert len(ids) == len(set(ids))
    # warp_reduction and warp_shuffle_sync are realized by the same define: one candidate
    shfl = [c for c in cands if c.defines == {"THREADS": 128, "SHFL": 1}]
    assert len(shfl) == 1
    assert shfl[0].aliases  # the other triples that realized it
    assert expand(space(tmp_path), CAT, sm=90)[5].candidate_id == cands[5].candidate_id


def test_cap_keeps_baseline_and_is_deterministic(tmp_path):
    cands = expand(space(tmp_path), CAT, sm=90)
    a, b = cap(cands, 7), cap(list(reversed(cands)), 7)
    assert len(a) == 7 and a[0].is_baseline
    assert {c.candidate_id for c in a} == {c.candidate_id for c in b}
    assert cap(cands, None) is cands


def test_cpu_devices_get_no_gpu_only_method(tmp_path):
    text = SPEC.replace("kernel: k.cu", "kernel: k.cpp")
    d = write_sweep(tmp_path / "c", text, {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    cands = expand(load_sweep(d).space("cpu"), CAT, sm=None)
    assert cands and not any(c.triple[1] == "memory.async_copy" for c in cands)
    assert {c.target for c in cands} == {"host"}


def test_unknown_name_in_restriction(tmp_path):
    import pytest

    from kopt.core.spec import SpecError
    with pytest.raises(SpecError, match="THREDS"):
        expand(space(tmp_path, SPEC.replace('"THREADS * ITEMS <= 1024"', '"THREDS < 4"')),
               CAT, sm=90)


def test_cap_of_the_stream_is_the_sample_of_the_list(tmp_path):
    """cap over the lazy generator keeps what cap over the full list kept, and the same
    sample kopt drew before expansion streamed (ids below: the list-based cap's)."""
    sp = space(tmp_path)
    cands = expand(sp, CAT, sm=90)
    for n, seed in ((1, None), (5, None), (5, 7), (30, 3), (200, 3)):
        streamed = cap(iter_candidates(sp, CAT, sm=90), n, seed=seed)
        assert [c.candidate_id for c in streamed] == \
            [c.candidate_id for c in cap(cands, n, seed=seed)]
    assert [c.candidate_id for c in cap(iter_candidates(sp, CAT, sm=90), 5, seed=7)] == [
        "48a00d6b56fa0142", "109b9bfc2fc8c282", "8bfc9ce92e4eb240", "bb768d90bbd9453c",
        "af3324e8a38475d3"]
    assert [c.candidate_id for c in cap(iter_candidates(sp, CAT, sm=90), 4)] == [
        "48a00d6b56fa0142", "02880448aa2fd780", "04ddc51dae675118", "08a3dbb209973aba"]
    t = Tally(iter_candidates(sp, CAT, sm=90))
    assert len(cap(t, 3)) == 3 and t.n == len(cands) == 108


MILLION = """
    kernel: k.cpp
    dims: [{{N: 4096}}]
    args: {{x: [N], y: [N]}}
    params: {{A: {v}, B: {v}, C: {v}, D: {v}}}
    restrictions: ["A + B + C + D < 128"]
"""

CAP_A_MILLION = """
import json, resource, sys, time
from kopt.core.catalog import load_catalog
from kopt.core.expand import Tally, cap, iter_candidates
from kopt.core.spec import load_sweep

sp, cat = load_sweep(sys.argv[1]).space("cpu"), load_catalog()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.process_time()
tally = Tally(iter_candidates(sp, cat, None))
kept = cap(tally, 10)
cpu_s = time.process_time() - t
grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
print(json.dumps({"cpu_s": cpu_s, "grown_mb": grown_kb / 1024, "total": tally.n,
                  "kept": len(kept), "baseline": kept[0].is_baseline}))
"""


def test_cap_streams_a_million_candidate_space(tmp_path):
    """--max-candidates 10 over 32**4 launch configs: expansion is a generator and the cap a
    bounded heap, so it takes seconds and a few MB, and counts the space on the way (it took
    minutes and ~1 GB holding every candidate). A fresh process, so that its peak RSS is
    this expansion's (tracemalloc slows a million allocations 30x); CPU time, not wall time,
    so that the box's other load does not count."""
    import json
    import os
    import subprocess
    import sys

    from conftest import ROOT
    d = write_sweep(tmp_path / "m", MILLION.format(v=list(range(1, 33))),
                    {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    out = subprocess.run([sys.executable, "-c", CAP_A_MILLION, str(d)], capture_output=True,
                         text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["total"] == 32**4 - 1  # only A = B = C = D = 32 breaks the restriction
    assert r["kept"] == 10 and r["baseline"]
    assert r["cpu_s"] < 10, r
    assert r["grown_mb"] < 100, r
