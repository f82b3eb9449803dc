from kopt.core.catalog import AXES, load_catalog, load_metric_guide


def test_catalog_shape():
    cat = load_catalog()
    counts = {a: len(cat.axis(a)) for a in AXES}
    assert counts == {"compute": 9, "memory": 10, "latency": 8}
    for a in AXES:
        assert [m.priority for m in cat.axis(a)] == list(range(1, counts[a] + 1))
    assert cat.axis("compute")[0].id == "compute.tensor_core"
    assert cat.axis("memory")[0].id == "memory.kernel_fusion"


def test_relations_from_the_notes():
    cat = load_catalog()
    assert cat.conflict("compute.launch_config", "latency.persistent_kernel")
    assert cat.conflict("latency.persistent_kernel", "compute.launch_config")
    assert "latency.async_pipeline" in cat.methods["memory.multi_stage_pipeline"].couples
    assert "memory.async_copy" in cat.methods["compute.warp_specialization"].requires
    assert cat.methods["compute.warp_specialization"].needs_sm90a
    assert cat.methods["memory.async_copy"].min_sm == 80
    assert not cat.methods["memory.async_copy"].arch_ok(75)
    assert not cat.methods["memory.async_copy"].arch_ok(None)  # GPU hardware: not on a CPU
    assert cat.methods["compute.ilp_unroll"].arch_ok(None)


def test_metric_guide_loads():
    g = load_metric_guide()
    assert "gpu__time_duration.sum" in g["always"]
    assert g["stall_reasons"]["long_scoreboard"]["axis"] == "latency"
