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


def test_below_an_admitted_higher_priority_method_needs_an_analysis_naming_them():
    """Passing over higher-priority methods the scan admits takes an analysis that names
    each of them (by id, by name or in words); any other text does not lift the rule."""
    scan = catalog_scan(CAT, 90, Context())  # no NCU evidence: every method is admitted
    refusal = [
        "priority_order: memory.vectorized_access (priority 4) is below "
        "memory.kernel_fusion (priority 1), which the scan admits on the memory axis; claim "
        "memory.kernel_fusion, or say in the analysis note why not, naming each method passed "
        "over: memory.kernel_fusion, memory.coalesced_access, memory.tiling_smem"]
    assert lines("memory.vectorized_access", sm=90, scan=scan) == refusal
    assert lines("memory.vectorized_access", sm=90, scan=scan, reason="  \n") == refusal
    # with a note, the refusal says which methods the note leaves unnamed
    owed = refusal[0].rsplit(": ", 1)[0] + " (the note does not name: {})"
    assert lines("memory.vectorized_access", sm=90, scan=scan, reason="faster, trust me") == [
        owed.format("memory.kernel_fusion, memory.coalesced_access, memory.tiling_smem")]
    # two of three named: the third is still owed
    assert lines("memory.vectorized_access", sm=90, scan=scan,
                 reason="one kernel already, so no kernel fusion; memory.coalesced_access "
                        "holds") == [owed.format("memory.tiling_smem")]
    assert lines("memory.vectorized_access", sm=90, scan=scan,
                 reason="one kernel already: no Kernel Fusion; loads are coalesced_access "
                        "already; no reuse, so tiling_smem cannot help") == ["ok"]
    # the evidence rules the higher ones out: vectorized access leads its axis
    off = {m: False for m in ("memory.kernel_fusion", "memory.coalesced_access",
                              "memory.tiling_smem")}
    scan = catalog_scan(CAT, 90, Context(triggered=off))
    assert lines("memory.vectorized_access", sm=90, scan=scan) == ["ok"]


def test_a_method_the_scan_skipped_is_tried_only_where_the_rules_allow():
    """``no_trigger`` yields to an analysis that names the method; ``already_selected`` and
    ``ineffective`` (the bottleneck unchanged) yield to nothing; the catalog's hard rules
    neither."""
    ctx = Context(selected=["compute.warp_reduction"], ineffective={
        "memory.cache_policy": "memory"}, bottleneck="memory",
        triggered={"memory.kernel_fusion": False, "memory.coalesced_access": False,
                   "memory.tiling_smem": False, "memory.vectorized_access": False})
    scan = catalog_scan(CAT, 90, ctx)
    assert lines("memory.vectorized_access", sm=90, scan=scan,
                 selected=ctx.selected) == [
        "not_admitted: memory.vectorized_access was skipped by the scan: its NCU trigger does "
        "not hold on the current evidence (no_trigger); say in the analysis note why to try "
        "it all the same, naming it"]
    assert lines("memory.vectorized_access", sm=90, scan=scan, selected=ctx.selected,
                 reason="vectorized access halves the load instructions") == ["ok"]
    hard = "memory.cache_policy: it was ineffective under the current bottleneck, which has " \
        "not changed since (the evidence decides that, not a note); claim another memory " \
        "method, or memory.none"
    for why in (None, "memory.cache_policy: this time the hints will help"):
        got = lines("memory.cache_policy", sm=90, scan=scan, selected=ctx.selected,
                    reason=why)
        assert got[-1] == "ineffective: " + hard
    for why in (None, "compute.warp_reduction again, differently"):
        assert lines("compute.warp_reduction", sm=90, scan=scan, selected=ctx.selected,
                     reason=why)[-1] == (
            "already_selected: compute.warp_reduction: it is already selected (the current "
            "best applies it), and a method is applied once; claim another compute method, "
            "or compute.none")
    # once the bottleneck changed, the ineffective method is admitted again
    moved = catalog_scan(CAT, 90, Context(ineffective={"memory.cache_policy": "memory"},
                                          bottleneck="latency"))
    assert "ineffective" not in " ".join(lines("memory.cache_policy", sm=90, scan=moved))
    # a reason lifts the scan's soft rules, never the catalog's hard ones
    assert lines("memory.vectorized_access", "compute.tensor_core", sm=61, scan=scan,
                 reason="vectorized_access: wider loads") == [
        "arch_gate: compute.tensor_core needs sm_70 or newer; the device is sm_61"]


def test_the_pipeline_pair_is_never_claimed_together():
    """memory.multi_stage_pipeline and latency.async_pipeline are one change seen from two
    axes: claimed together they are refused, whatever the analysis; each alone is not."""
    pair = ["memory.multi_stage_pipeline", "latency.async_pipeline"]
    got = check_claim(pair, CAT, 90, reason="both, on purpose").lines()
    assert got == ["pipeline_pair: memory.multi_stage_pipeline and latency.async_pipeline are "
                   "one change seen from two axes: claim one of them"]
    assert check_claim(pair[:1], CAT, 90).ok and check_claim(pair[1:], CAT, 90).ok


def test_every_axis_is_claimed_or_stated_as_skipped():
    from kopt.core.claims import unstated_axes

    assert unstated_axes("compute.ilp_unroll") == ["memory", "latency"]
    assert unstated_axes("compute.ilp_unroll,memory.none") == ["latency"]
    assert unstated_axes("compute.ilp_unroll, memory.none ,latency.split_k") == []
    assert unstated_axes("none") == [] and unstated_axes("memory.none") == ["compute",
                                                                          "latency"]


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
        "latency.reduce_sync_count, or say in the analysis note why not, naming each method "
        "passed over: latency.reduce_sync_count, latency.register_prefetch"]
    half = check_claim_for_plan(["latency.split_k"], plan, reason="no barriers to reduce "
                                "(reduce_sync_count)")
    assert half.lines()[0].endswith("naming each method passed over (the note does not name: "
                                    "latency.register_prefetch)")
    assert check_claim_for_plan(["latency.split_k"], plan, reason="no barriers to reduce "
                                "(reduce_sync_count) and no tile to prefetch "
                                "(register prefetch)").ok


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


def test_with_no_profiler_an_ineffective_method_waits_for_another_best():
    """On a device with no profiler there is no bottleneck to change; the best a method was
    judged on stands for it: while that is still the best the method stays ``ineffective``
    (refused whatever the analysis), under another best it is admitted again."""
    from kopt.core.expand import judged_under

    mark = judged_under(None, "cand-a")
    assert mark == "unprofiled:cand-a" and judged_under("memory", "cand-a") == "memory"
    same = catalog_scan(CAT, None, Context(ineffective={"compute.ilp_unroll": mark},
                                           best_id="cand-a"))
    other = catalog_scan(CAT, None, Context(ineffective={"compute.ilp_unroll": mark},
                                            best_id="cand-b"))
    row = {r["method"] if isinstance(r, dict) else r.method: r for r in same["compute"]}
    assert row["compute.ilp_unroll"].reason == "ineffective"
    row = {r.method: r for r in other["compute"]}
    assert row["compute.ilp_unroll"].admitted
    assert check_claim(["compute.ilp_unroll"], CAT, None, same, reason="compute.ilp_unroll "
                       "again").lines()[-1].startswith("ineffective: compute.ilp_unroll")
