"""The decode-time sweeps (issue #26): each loads, expands to the pinned number of candidates
with every realized method alive, and its ref.py passes kopt's own checks on the CPU at a small
size: inputs() gives solve's dtypes and the `args:` shapes (in/out buffers included), the
reference's outputs have solve's shapes, and the contender (what a user calls instead) lies
within the sweep's tolerance of the reference by the harness's check, integer outputs exactly.
No compiler and no GPU: the kernels' builds are checked by tests/test_build.py."""

from __future__ import annotations

import pytest
import torch

from conftest import ROOT
from kopt.core.catalog import load_catalog
from kopt.core.expand import expand
from kopt.core.spec import load_sweep
from kopt.run.builder import job_base
from workers.expr import parse
from workers.harness import Harness, RefCall

# name -> (candidates at sm_90, a small size of the same shape family, in/out arguments)
DECODE = {
    # THREADS 4 x (none, shuffle, UNROLL 2/4) x (none, VEC, SMEM_ROW) x (none, shuffle,
    # WARP_ROW), less the shuffle+shuffle duplicates, shuffle with WARP_ROW and the 1024-thread
    # configs that spill
    "rmsnorm_residual": (99, {"ROWS": 8, "H": 512}, {"residual"}),
    # THREADS 4 x (none, ITEMS 2/4/8, HEAD_SPLIT 2/4/8) x (none, VEC, SMEM_CS), less 512
    # threads with ITEMS 8 on 16-byte packs
    "rotary": (83, {"T": 8, "HQ": 4, "HK": 2, "D": 64, "MAXPOS": 256}, {"q", "k"}),
    # THREADS 3 x (none, shuffle, RPB 2/4/8) x (none, VEC, FUSED, STREAM) x (none, shuffle,
    # PERSIST x BPS 1/2/4), less the shuffle duplicates and non-resident persistent grids
    "lm_head_top1": (276, {"B": 4, "V": 3000, "K": 256}, set()),
    # THREADS 3 x (none, shuffle, RPB 2/4/8, FAST_DQ) x (none, VEC) x (none, shuffle), less the
    # shuffle duplicates; RPB 4/8 only at M = 1 (RPB * M accumulators)
    "w4a16_gemv": (60, {"M": 4, "N": 96, "K": 512}, set()),
    # THREADS 3 x (none, shuffle, RPB 2/4/8, RPB + shuffle) x (none, VEC, STREAM); RPB only at
    # M = 1 (2 * RPB * M accumulators)
    "gate_up_silu": (72, {"M": 4, "N": 200, "K": 512}, set()),
    # THREADS 2 x (none, shuffle, UNROLL 2/4) x (none, VEC, KEY_LANES 8/16, STREAM, SMEM_P) x
    # (none, shuffle, SPLITS 4/8/16/32), less the shuffle+shuffle duplicates
    "decode_attention": (264, {"B": 2, "H": 4, "L": 300, "D": 128}, set()),
    # THREADS 2 x (CUDA cores: (none, TM 16) x ({none, tiling BK 64/128, VEC, PAD} x {none,
    # cp.async ring, split-K} less tiling with the ring (its BK 64), plus the ring with
    # split-K) = 2 x 14; tensor cores: BM 16/128 x ({none, tiling BK 128, PAD, ldmatrix} x
    # {none, ring} less tiling with the ring) = 2 x 7, and BM 16 with split-K alone, with
    # tiling, PAD, ldmatrix or the ring = 5); VEC never with tensor cores (16-byte copies
    # always), split-K only where TM or BM is 16. M = 16: the contender's padded _int_mm
    "w8a8_gemm": (94, {"M": 16, "N": 256, "K": 512}, set()),
}


@pytest.fixture(scope="module")
def harness():
    return Harness("cpu")


@pytest.mark.parametrize("name", sorted(DECODE))
def test_the_space_expands_to_its_pinned_count_with_every_method_alive(name):
    count, _, _ = DECODE[name]
    sw = load_sweep(ROOT / "sweeps" / name)
    assert sw.warnings == []
    space = sw.space("cuda")
    cands = expand(space, load_catalog(), 90)
    assert len(cands) == count
    assert cands[0].is_baseline and cands[0].triple == (None, None, None)
    assert set(cands[0].defines) == set(space.params)  # the baseline: launch params only
    chosen = {m for c in cands for t in [c.triple, *c.aliases] for m in t if m}
    assert chosen == set(space.methods)
    assert all(c.target == "sm_90" for c in cands)
    assert cands[0].dims_ok == list(range(len(space.dims)))  # the baseline runs every size


@pytest.mark.parametrize("name", sorted(DECODE))
def test_inputs_reference_and_contender_agree_within_the_tolerance(name, harness):
    _, dims, inout = DECODE[name]
    sw = load_sweep(ROOT / "sweeps" / name)
    space = sw.space("cuda")
    sig = space.signature
    assert {a.name for a in sig.outputs if a.name in sw.args} == {a.name for a in sig.outputs}
    job = {**job_base(sw, space), "dims": dims}
    d = harness.prepare(job)  # inputs() and reference() as a candidate's check sees them
    env = {**sw.scalars, **dims}
    shapes = {n: [parse(e)(env) if isinstance(e, str) else e for e in s]
              for n, s in sw.args.items()}
    s0 = d.sets[0]
    assert set(s0.inputs) == {a.name for a in sig.inputs} | inout
    for a in sig.args:
        if a.kind == "scalar":
            continue
        if a.name in s0.inputs:
            t = s0.inputs[a.name]
            assert t.dtype == getattr(torch, a.dtype) and list(t.shape) == shapes[a.name]
        if a.kind == "output":
            assert s0.expected[a.name].numel() == torch.Size(shapes[a.name]).numel()
    for n in inout:  # the reference changed each in/out buffer
        assert not torch.equal(s0.expected[n].double(), s0.inputs[n].double())
    for k in range(len(d.sets)):  # the contender, checked as a candidate's outputs are
        harness.load(d, 0, k)
        got = RefCall(harness.ref_module(job["reference"]).contender, job["signature"],
                      "ref.py").run(d.bufs[0], d.scalars)
        if isinstance(got, torch.Tensor):  # one output
            got = {sig.outputs[0].name: got}
        for n, out in d.bufs[0].outputs.items():
            out.copy_(got[n].reshape(out.shape))
        ok, worst, why = harness.check(d, 0, k, job["tolerance"])
        assert ok, why
        assert worst > 0  # the contender rounds to bf16/fp16: not the reference itself


@pytest.mark.parametrize("name", sorted(DECODE))
def test_the_edge_class_expands_the_same_space_within_its_arch_gates(name):
    """sm_87 (Jetson Orin): every candidate built for sm_87, no method the catalog gates to a
    newer arch or to sm_90a, and (none of these sweeps needs one) the same candidates as at
    sm_90, so a cluster with an Orin beside an H200 expands the sweep on both."""
    sw = load_sweep(ROOT / "sweeps" / name)
    cat = load_catalog()
    space = sw.space("cuda")
    at90, at87 = expand(space, cat, 90), expand(space, cat, 87)
    assert all(c.target == "sm_87" for c in at87)
    used = {m for c in at87 for m in c.triple if m}
    assert all(cat.methods[m].min_sm <= 87 and not cat.methods[m].needs_sm90a for m in used)
    assert not space.needs_sm90a
    assert [c.candidate_id for c in at87] == [c.candidate_id for c in at90]
