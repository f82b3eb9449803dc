"""Claim checking (kopt.core.claims): the methods a submitted version claims, held to the
catalog."""

import pytest

from kopt.core.catalog import load_catalog, parse_catalog
from kopt.core.claims import catalog_scan, check_claim, check_claim_for_plan, parse_claim
from kopt.core.expand import Context

CAT = load_catalog()

# a small catalog with values taken from the shipped one, plus an sm_90a-only method below
# sm_90 (the shipped wgmma-class methods gate at min_sm 90 already)
SMALL = parse_catalog({"methods": [
    {"id": "compute.tensor_core", "axis": "compute", "priority": 1, "min_sm": 70},
    {"id": "compute.warp_specialization", "axis": "compute", "priority": 2, "min_sm": 80,
     "needs_sm90a": True, "requires": ["memory.async_copy"]},
    {"id": "memory.async_copy", "axis": "memory", "priority": 1, "min_sm": 80},
    {"id": "memory.ldmatrix", "axis": "memory", "priority": 2, "min_sm": 75,
     "requires": ["compute.tensor_core"]},
    {"id": "latency.async_pipeline", "axis": "latency", "priority": 1, "min_sm": 80,
     "conflicts": ["latency.register_prefetch"]},
    {"id": "latency.register_prefetch", "axis": "latency", "priority": 2},
]}, source="fixture")


def lines(*methods, **kw):
    return check_claim(methods, **{"catalog": CAT, **kw}).lines()


def test_a_claim_that_keeps_every_rule_is_ok():
    chk = check_claim(["compute.warp_reduction", "memory.vectorized_access",
                       "latency.warp_shuffle_sync"], CAT, 90)
    assert chk.ok and chk.lines() == ["ok"]
    assert chk.methods == ("compute.warp_reduction", "memory.vectorized_access",
                           "latency.warp_shuffle_sync")


def test_parse_claim_takes_any_subset_and_drops_none():
    assert parse_claim(" compute.ilp_unroll , memory.none,,latency.split_k") == [
        "compute.ilp_unroll", "latency.split_k"]
    assert parse_claim("") == [] and parse_claim("none") == []


def test_unknown_method_suggests_the_closest_id():
    assert lines("memory.vectorised_access") == [
        "unknown_method: memory.vectorised_access is not a catalog method; did you mean "
        "memory.vectorized_access? (`kopt catalog` lists them)"]
    # the right name on the wrong axis: the method's own axis is suggested
    assert lines("compute.vectorized_access")[0].startswith(
        "unknown_method: compute.vectorized_access is not a catalog method; did you mean "
        "memory.vectorized_access?")
    assert lines("compute.zzzz") == [
        "unknown_method: compute.zzzz is not a catalog method (`kopt catalog` lists them)"]


def test_two_methods_on_one_axis():
    assert lines("compute.tensor_core", "compute.fast_math", sm=90) == [
        "one_method_per_axis: compute.tensor_core and compute.fast_math are all on the "
        "compute axis; claim at most one method per axis"]


def test_arch_gates_min_sm_and_sm90a():
    assert lines("compute.tensor_core", sm=61) == [
        "arch_gate: compute.tensor_core needs sm_70 or newer; the device is sm_61"]
    assert lines("memory.async_copy", sm=None) == [  # a CPU device: no GPU-only method
        "arch_gate: memory.async_copy is GPU hardware (sm_80 or newer); the device is a CPU"]
    assert lines("compute.ilp_unroll", sm=None) == ["ok"]
    assert check_claim(["compute.warp_specialization", "memory.async_copy"], SMALL, 80
                       ).lines() == [
        "arch_gate: compute.warp_specialization needs the sm_90a target (an sm_90 device "
        "only); the device is sm_80"]
    assert check_claim(["compute.warp_specialization", "memory.async_copy"], SMALL, 90).ok
    # sm_90a code does not run on a newer arch (sm_100): the gate is exact
    assert check_claim(["compute.warp_specialization", "memory.async_copy"], SMALL, 100
                       ).lines() == [
        "arch_gate: compute.warp_specialization needs the sm_90a target (an sm_90 device "
        "only); the device is sm_100"]


def test_conflicts_in_the_claim_and_with_selected_methods():
    assert lines("compute.launch_config", "latency.persistent_kernel", sm=90) == [
        "conflict: compute.launch_config and latency.persistent_kernel conflict in the "
        "catalog: claim one of them"]
    assert lines("compute.launch_config", sm=90, selected=["latency.persistent_kernel"]) == [
        "conflict: compute.launch_config conflicts with latency.persistent_kernel, which the "
        "current best already applies"]
    assert check_claim(["latency.register_prefetch"], SMALL, 90,
                       selected=["latency.async_pipeline"]).lines()[0].startswith(
        "conflict: latency.register_prefetch conflicts with latency.async_pipeline")


def test_requires_is_met_by_the_claim_or_by_a_selected_method():
    assert lines("compute.warp_specialization", sm=90) == [
        "requires: compute.warp_specialization requires memory.async_copy: claim it too (or "
        "select it in an earlier iteration)"]
    assert lines("compute.warp_specialization", "memory.async_copy", sm=90) == ["ok"]
    assert lines("compute.warp_specialization", sm=90, selected=["memory.async_copy"]) == [
        "ok"]
    assert check_claim(["memory.ldmatrix"], SMALL, 90).lines() == [
        "requires: memory.ldmatrix requires compute.tensor_core: claim it too (or select it "
        "in an earlier iteration)"]


def test_below_an_admitted_higher_priority_method_needs_a_reason():
    scan = catalog_scan(CAT, 90, Context())  # no NCU evidence: every method is admitted
    assert lines("memory.vectorized_access", sm=90, scan=scan) == [
        "priority_order: memory.vectorized_access (priority 4) is below "
        "memory.kernel_fusion (priority 1), which the scan admits on the memory axis; claim "
        "memory.kernel_fusion, or give a reason (the analysis note) why not"]
    assert lines("memory.vectorized_access", sm=90, scan=scan,
                 reason="one kernel already: nothing to fuse; loads are coalesced") == ["ok"]
    assert lines("memory.vectorized_access", sm=90, scan=scan, reason="  \n") != ["ok"]
    # the evidence rules the higher ones out: vectorized access leads its axis
    off = {m: False for m in ("memory.kernel_fusion", "memory.coalesced_access",
                              "memory.tiling_smem")}
    scan = catalog_scan(CAT, 90, Context(triggered=off))
    assert lines("memory.vectorized_access", sm=90, scan=scan) == ["ok"]


def test_a_method_the_scan_skipped_needs_a_reason():
    ctx = Context(selected=["compute.warp_reduction"], ineffective={
        "memory.cache_policy": "memory"}, bottleneck="memory",
        triggered={"memory.kernel_fusion": False, "memory.coalesced_access": False,
                   "memory.tiling_smem": False, "memory.vectorized_access": False})
    scan = catalog_scan(CAT, 90, ctx)
    assert lines("memory.vectorized_access", sm=90, scan=scan,
                 selected=ctx.selected) == [
        "not_admitted: memory.vectorized_access was skipped by the scan: its NCU trigger does "
        "not hold on the current evidence (no_trigger); give a reason (the analysis note) to "
        "try it all the same"]
    got = lines("memory.cache_policy", sm=90, scan=scan, selected=ctx.selected)
    assert got == [
        "priority_order: memory.cache_policy (priority 10) is below memory.register_pressure "
        "(priority 5), which the scan admits on the memory axis; claim "
        "memory.register_pressure, or give a reason (the analysis note) why not",
        "not_admitted: memory.cache_policy was skipped by the scan: it was ineffective under "
        "the current bottleneck (ineffective); give a reason (the analysis note) to try it "
        "all the same"]
    assert lines("compute.warp_reduction", sm=90, scan=scan, selected=ctx.selected)[1] == (
        "not_admitted: compute.warp_reduction was skipped by the scan: it is already selected "
        "(applied by the current best) (already_selected); give a reason (the analysis note) "
        "to try it all the same")
    # a reason lifts the scan's rules, never the catalog's hard ones
    assert lines("memory.cache_policy", "compute.tensor_core", sm=61, scan=scan,
                 reason="cache hints help the second pass") == [
        "arch_gate: compute.tensor_core needs sm_70 or newer; the device is sm_61"]


def test_every_broken_rule_is_one_line():
    got = lines("compute.tensor_core", "compute.launch_config", "latency.persistent_kernel",
                "memory.nope", sm=61)
    assert [ln.split(":")[0] for ln in got] == [
        "unknown_method", "one_method_per_axis", "arch_gate", "conflict"]
    assert all("\n" not in ln for ln in got)


def test_the_plan_of_kopt_propose_is_the_scan(tmp_path):
    """propose's plan (iteration 1 without a stored run, CPU: GPU-only methods gated, no evidence)
    carries the scan over every catalog method, so a hand-written version is held to it."""
    from conftest import VADD_CPP, VADD_REF, write_sweep
    from kopt.core.spec import load_sweep
    from kopt.loop.propose import propose

    sw = load_sweep(write_sweep(tmp_path / "s", """
        kernel: k.cpp
        dims: [{N: 64}]
        params: {T: [1, 2]}
        methods:
          compute.ilp_unroll: {defines: {UNROLL: 4}}
    """, {"k.cpp": VADD_CPP, "ref.py": VADD_REF}))
    plan = propose(sw, tmp_path / "store")[0]
    assert plan["sm"] is None and plan["selected"] == []
    scan = [(r["method"], r["admitted"]) for r in plan["catalog_scan"]["latency"]][:2]
    assert scan == [("latency.warp_shuffle_sync", False),  # a warp shuffle: GPU hardware
                    ("latency.reduce_sync_count", True)]
    assert check_claim_for_plan(["compute.launch_config"], plan).ok
    assert [r.rule for r in check_claim_for_plan(["compute.tensor_core"], plan).refusals] == [
        "arch_gate"]  # a CPU plan: tensor cores are GPU hardware
    chk = check_claim_for_plan(["latency.split_k"], plan)
    assert chk.lines() == [
        "priority_order: latency.split_k (priority 5) is below latency.reduce_sync_count "
        "(priority 2), which the scan admits on the latency axis; claim "
        "latency.reduce_sync_count, or give a reason (the analysis note) why not"]
    assert check_claim_for_plan(["latency.split_k"], plan, reason="no reduction here").ok


@pytest.mark.parametrize("claim,lines", [
    ("compute.tensor_core,compute.tensor_core",
     ["one_method_per_axis: compute.tensor_core is claimed 2 times; claim it once",
      "arch_gate: compute.tensor_core is GPU hardware (sm_70 or newer); the device is a CPU"]),
    ("compute.foo, compute.foo,compute.foo",
     ["one_method_per_axis: compute.foo is claimed 3 times; claim it once",
      "unknown_method: compute.foo is not a catalog method (`kopt catalog` lists them)"])])
def test_a_method_claimed_twice_is_one_line_per_rule(claim, lines):
    """Before, every rule the method broke was printed once per mention (two identical
    arch_gate / unknown_method lines), after "X and X are all on the compute axis"."""
    from kopt.core.claims import check_claim, parse_claim

    assert check_claim(parse_claim(claim)).lines() == lines
