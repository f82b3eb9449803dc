"""Expansion: triples (priority, arch gates, conflicts, requires), restrictions, dedup, cap."""

from conftest import VADD_CPP, VADD_REF, write_sweep
from kopt.catalog import load_catalog
from kopt.expand import admissible_triples, cap, expand, scan_axes
from kopt.spec import load_sweep

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


def test_cpu_devices_have_no_arch_gate(tmp_path):
    text = SPEC.replace("kernel: k.cu", "kernel: k.cpp")
    d = write_sweep(tmp_path / "c", text, {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    cands = expand(load_sweep(d).space("cpu"), CAT, sm=None)
    assert any(c.triple[1] == "memory.async_copy" for c in cands)
    assert {c.target for c in cands} == {"host"}


def test_unknown_name_in_restriction(tmp_path):
    import pytest

    from kopt.spec import SpecError
    with pytest.raises(SpecError, match="THREDS"):
        expand(space(tmp_path, SPEC.replace('"THREADS * ITEMS <= 1024"', '"THREDS < 4"')),
               CAT, sm=90)
