"""sweep.yaml's `derived:`: names for expressions, used in restrictions, launch geometry,
args, flops and bytes; validated at load (one line naming `derived.NAME` and the fix); they
change no candidate id, build id or launch geometry."""

import hashlib
import json
import re
from pathlib import Path

import pytest

from conftest import ROOT, VADD_CPP, VADD_REF, assert_spec_error, write_sweep
from kopt.core.catalog import load_catalog
from kopt.core.expand import Context, expand
from kopt.core.spec import SpecError, launch_geometry, load_sweep

GOOD = """
    kernel: k.cpp
    dims: [{N: 1024}]
    scalars: {alpha: 2}
    args: {x: [N], y: [HALF * 2]}
    derived:
      HALF: "N // 2"
      TILE: "CHUNK * VEC"
      BIG: "TILE > HALF // 4"
    flops: "HALF * 2"
    bytes: "12 * N"
    params: {CHUNK: [64, 128, 256]}
    restrictions: ["TILE <= HALF", "not BIG or CHUNK == 64"]
    methods:
      memory.vectorized_access: {params: {VEC: [4, 8]}}
"""
# GOOD with every derived name written out by hand
INLINED = re.sub(r"    derived:\n(      .*\n)+", "", GOOD)
for old, new in [("[HALF * 2]", "[N // 2 * 2]"), ('"HALF * 2"', '"N // 2 * 2"'),
                 ('"TILE <= HALF"', '"CHUNK * VEC <= N // 2"'),
                 ('"not BIG or', '"not CHUNK * VEC > N // 2 // 4 or')]:
    assert old in INLINED
    INLINED = INLINED.replace(old, new)

def make(tmp_path, yaml_text=GOOD, name="s"):
    return write_sweep(tmp_path / name, yaml_text, {"k.cpp": VADD_CPP, "ref.py": VADD_REF})


def expect(tmp_path, yaml_text, *needles):
    """A SpecError of one line naming sweep.yaml and every needle."""
    msg = assert_spec_error(make(tmp_path, yaml_text), *needles)
    assert "\n" not in msg, msg
    return msg


def test_inline_substitutes_with_the_parentheses_precedence_needs():
    from kopt.core.restrictions import inline

    assert inline("(N + BN - 1) // BN", {"BN": "BX * TN"}) == "(N + BX * TN - 1) // (BX * TN)"
    assert inline("-A ** 2 + B", {"A": "-x", "B": "p < q"}) == "-(-x) ** 2 + (p < q)"
    assert inline("min(W, 3)", {"W": "a if c else b"}) == "min(a if c else b, 3)"
    text = "N  +  1"  # names no derived quantity: the text as written, byte for byte
    assert inline(text, {"BN": "BX"}) is text


def test_derived_names_give_the_candidates_of_the_expressions_written_out(tmp_path):
    sw = load_sweep(make(tmp_path))
    hand = load_sweep(make(tmp_path, INLINED, "hand"))
    sp, hp = sw.space("cpu"), hand.space("cpu")
    assert sp.derived == {"HALF": "N // 2", "TILE": "CHUNK * VEC",
                          "BIG": "CHUNK * VEC > N // 2 // 4"}
    assert sp.restrictions == ["TILE <= HALF", "not BIG or CHUNK == 64"]  # as written
    cat = load_catalog()
    got = [(c.candidate_id, c.defines, c.dims_ok) for c in expand(sp, cat, None, (), "x")]
    want = [(c.candidate_id, c.defines, c.dims_ok) for c in expand(hp, cat, None, (), "x")]
    assert got == want
    assert [c[1] for c in got] == [  # TILE <= 512 and (TILE <= 128 or CHUNK == 64)
        {"CHUNK": 64}, {"CHUNK": 128}, {"CHUNK": 256},
        {"CHUNK": 64, "VEC": 4}, {"CHUNK": 64, "VEC": 8}]
    assert sw.work({"N": 1024}) == (1024.0, 12288.0)
    assert sw.args["y"] == ["N // 2 * 2"]
    assert sp.derived_values({"N": 1024, "CHUNK": 128}) == {"HALF": 512}  # no VEC: no TILE
    assert sp.derived_values({"N": 1024, "CHUNK": 128, "VEC": 4}) == {
        "HALF": 512, "TILE": 512, "BIG": True}


def test_a_number_is_a_derived_quantity_too(tmp_path):
    sw = load_sweep(make(tmp_path, GOOD.replace('HALF: "N // 2"', "LIM: 512\n      HALF: LIM")))
    assert sw.space("cpu").derived["HALF"] == "512"


@pytest.mark.parametrize("derived, needles", [
    # an unknown name, with the closest known one
    ('HALF: "N // 2"\n      TILE: "CHUNK * VECS"',
     ["field 'derived.TILE'", "names ['VECS']", "nor derived names above it",
      "did you mean 'VEC'?"]),
    # a cycle
    ('A: "B + 1"\n      B: "A + 1"',
     ["field 'derived.A'", "uses 'B', and derived.B uses 'A': a cycle"]),
    ('A: "B + 1"\n      B: "C + 1"\n      C: "A * 2"',
     ["field 'derived.A'", "a cycle; define one of them without the other"]),
    ('A: "A + 1"', ["field 'derived.A'", "uses 'A' itself"]),
    # a name used above its definition (evaluated in order)
    ('A: "B + 1"\n      B: "N"',
     ["field 'derived.A'", "which is defined below it: move derived.B above derived.A"]),
    # shadowing a param, a method param, a dim, a scalar
    ('CHUNK: "N // 2"', ["field 'derived.CHUNK'", "already a param", "rename the derived"]),
    ('VEC: "4"', ["field 'derived.VEC'",
                  "already a param of methods.memory.vectorized_access"]),
    ('N: "1024"', ["field 'derived.N'", "already a dim"]),
    ('alpha: "1"', ["field 'derived.alpha'", "already a scalar"]),
    # bad expressions and names
    ('HALF: "N //"', ["field 'derived.HALF'", "not a valid expression", "write one expression"]),
    ('HALF: "x.real"', ["field 'derived.HALF'", "Attribute is not allowed"]),
    ('HALF: "9 ** 9 ** 9"', ["field 'derived.HALF'", "bits"]),
    ("lambda: 1", ["field 'derived.lambda'", "cannot be named in an expression"]),
    ("max: 1", ["field 'derived.max'", "neither a Python keyword nor min/max/abs"]),
])
def test_a_bad_derived_quantity_is_one_line_naming_it(tmp_path, derived, needles):
    text = GOOD.replace('HALF: "N // 2"\n      TILE: "CHUNK * VEC"\n      BIG: "TILE > HALF // 4"',
                        derived)
    text = text.replace('args: {x: [N], y: [HALF * 2]}', "args: {x: [N], y: [N]}")
    text = text.replace('flops: "HALF * 2"', 'flops: "N"')
    text = text.replace('["TILE <= HALF", "not BIG or CHUNK == 64"]', "[]")
    expect(tmp_path, text, *needles)


def test_a_derived_quantity_nested_too_long_is_named(tmp_path):
    chain = "\n      ".join(['D0: "N + N + N + N"'] + [
        f'D{i}: "D{i - 1} + D{i - 1} + D{i - 1} + D{i - 1}"' for i in range(1, 6)])
    text = GOOD.replace('HALF: "N // 2"', f'HALF: "N // 2"\n      {chain}')
    expect(tmp_path, text, "field 'derived.D4'", "with the derived names it uses inlined",
           "over 2000")


def test_where_a_derived_name_cannot_reach_it_says_so(tmp_path):
    # flops/bytes see dims and scalars only: not a param through a derived name
    expect(tmp_path, GOOD.replace('flops: "HALF * 2"', 'flops: "TILE"'), "field 'flops'",
           "names ['CHUNK', 'VEC'] through its derived names (TILE)", "not dims or scalars")
    # args see dims and scalars only
    expect(tmp_path, GOOD.replace("[HALF * 2]", "[TILE]"), "field 'args.y[0]'",
           "'TILE' names 'CHUNK' through its derived names (TILE)", "neither a dim")
    # an error in a derived name's value is named where it is used, as written there
    expect(tmp_path, GOOD.replace('HALF: "N // 2"', 'HALF: "N // 0"'), "field 'flops'",
           "'HALF * 2' divides by zero at dims[0]")
    # restrictions see no scalars
    expect(tmp_path, GOOD.replace('HALF: "N // 2"', 'HALF: "N // alpha"'),
           "field 'restrictions[0]'", "names ['alpha'] through its derived names (HALF, TILE)",
           "not scalars")
    # a restriction naming neither a known nor a derived name
    expect(tmp_path, GOOD.replace('"TILE <= HALF"', '"TILES <= HALF"'),
           "field 'restrictions[0]'", "names ['TILES']", "nor derived names")


def test_a_backend_block_has_its_own_derived_names(tmp_path):
    text = GOOD + """
    cuda:
      kernel: k.cu
      derived: {T: "THREADS * 2"}
      params: {THREADS: [128, 256]}
      restrictions: ["T <= 256 or HALF > 0"]
    """
    files = {"k.cpp": VADD_CPP, "ref.py": VADD_REF, "k.cu": VADD_CPP}
    bad = write_sweep(tmp_path / "b", text, files)
    # the top level's names are not the block's
    msg = assert_spec_error(bad, "field 'cuda.restrictions[0]'", "names ['HALF']")
    assert "\n" not in msg
    ok = write_sweep(tmp_path / "ok", text.replace(" or HALF > 0", ""), files)
    sp = load_sweep(ok).space("cuda")
    assert sp.derived == {"T": "THREADS * 2"}
    assert [c.defines for c in expand(sp, load_catalog(), 90, (), "x")] == [{"THREADS": 128}]


# -- kernel mode: geometry with derived names reaches the node as plain expressions ---------
SAXPY_CU = """
    #ifndef ITEMS
    #define ITEMS 1
    #endif
    __global__ void saxpy(const float* x, float* y, float a, int N) {}
"""
SAXPY_REF = """
    def reference(x, y, a, N):
        return a * x + y
"""
SAXPY = """
    kernel: saxpy.cu
    dims: [{N: 100000}]
    scalars: {a: 2.0}
    derived:
      PER_BLOCK: "THREADS * ITEMS"
      BLOCKS: "(N + PER_BLOCK - 1) // PER_BLOCK"
    launch:
      kernel: saxpy
      block: [THREADS]
      grid: [BLOCKS]
      smem_bytes: "4 * PER_BLOCK"
    params: {THREADS: [128, 256], ITEMS: [1, 4]}
    restrictions: ["BLOCKS >= 100"]
"""


def test_kernel_mode_launch_geometry_uses_derived_names(tmp_path):
    sp = load_sweep(write_sweep(tmp_path / "k", SAXPY, {"saxpy.cu": SAXPY_CU,
                                                        "ref.py": SAXPY_REF})).space("cuda")
    # what builds carry to the node (and build ids hash): expressions over params and dims
    assert sp.launch_spec() == {
        "kernel": "saxpy", "block": ["THREADS"],
        "grid": ["(N + THREADS * ITEMS - 1) // (THREADS * ITEMS)"],
        "smem_bytes": "4 * (THREADS * ITEMS)"}
    cands = expand(sp, load_catalog(), 90, (), "x")
    assert [c.defines for c in cands] == [{"THREADS": 128, "ITEMS": 1},
                                          {"THREADS": 128, "ITEMS": 4},
                                          {"THREADS": 256, "ITEMS": 1}]  # 256 x 4: 98 blocks
    assert launch_geometry(sp.launch, {"N": 100000, "THREADS": 128, "ITEMS": 4}) == {
        "block": [128, 1, 1], "grid": [196, 1, 1], "smem_bytes": 2048}
    # the node evaluates it without kopt
    from workers.launch_geometry import launch_geometry as node_geometry
    assert node_geometry(sp.launch_spec(), {"N": 100000, "THREADS": 128, "ITEMS": 4}) == {
        "block": [128, 1, 1], "grid": [196, 1, 1], "smem_bytes": 2048}


def test_kernel_mode_geometry_through_a_derived_method_param_is_refused(tmp_path):
    text = SAXPY.replace("params: {THREADS: [128, 256], ITEMS: [1, 4]}",
                         "params: {THREADS: [128, 256]}\n    methods:\n"
                         "      compute.thread_coarsening: {params: {ITEMS: [1, 4]}}")
    msg = assert_spec_error(write_sweep(tmp_path / "k", text, {"saxpy.cu": SAXPY_CU,
                                                               "ref.py": SAXPY_REF}),
                            "field 'launch.grid[0]'",
                            "names ['ITEMS'] through its derived names (BLOCKS)",
                            "make a name the geometry needs a launch param")
    assert "\n" not in msg


# -- the shipped sweeps: rewritten with derived names, the same spaces ----------------------
def space_figures(sweep_dir: Path) -> dict[str, str]:
    """sha256 per backend of everything a sweep's space gives the rest of kopt, with the
    source digest fixed (an edited kernel does not change it): every candidate's id, triple,
    defines, dims, target, baseline flag and aliases, and in kernel mode its launch geometry
    at each of its dims, for sm_80 and sm_90 (CPU: the host), with no method selected and
    with each realized method selected (its params' first values in the baseline), plus the
    launch block builds carry (and build ids hash), the flags, the args and flops/bytes.
    Uses only APIs that main had before `derived:` (so main's figures could be computed)."""
    sw, cat = load_sweep(sweep_dir), load_catalog()
    out = {}
    for backend, sp in sorted(sw.spaces.items()):
        rows: list = [sp.launch_spec(), sp.flags, sw.args]
        for d in sp.dims:
            try:
                rows.append(sw.work(d))
            except KeyError:
                rows.append("no work")
        ctxs = [Context()] + [
            Context(selected=[m], baseline_params={
                **sp.baseline, **{k: v[0] for k, v in real.params.items()}})
            for m, real in sp.methods.items()]
        for sm in ([80, 90] if backend == "cuda" else [None]):
            for ctx in ctxs:
                try:
                    cands = expand(sp, cat, sm, (), "fixed", ctx)
                except SpecError as e:
                    rows.append(["error", str(e)])
                    continue
                for c in cands:
                    geo = [launch_geometry(sp.launch, {**sw.scalars, **sp.dims[i], **c.defines})
                           for i in c.dims_ok] if sp.launch is not None else None
                    rows.append([c.candidate_id, c.triple, c.defines, c.dims_ok, c.target,
                                 c.is_baseline, c.aliases, geo])
        out[backend] = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()
                                      ).hexdigest()[:16]
    return out


# computed once with space_figures on main at cfae7ce, before the rewrite (sweeps/*/sweep.yaml
# without `derived:`); a change here is a change of a shipped space, not of its wording
MAIN_FIGURES = {
    # added after the rewrite, pinned as first written
    "gemm_cutlass": {"cuda": "91067e3d5c9fe85e"},
    # fde88f3 changed this space on purpose: STAGES [3, 4] (was [3, 4, 5]) and the two Hopper
    # methods (bf16x3 on wgmma), 114 candidates at sm_90 (was 156)
    "gemm_cutlass_fp32": {"cuda": "441f0fe40f510a89"},
    # the decode-time sweeps of issue 26 (tests/test_decode_sweeps.py), pinned as first written;
    # their CPU forms (tests/test_decode_cpu.py) added later, pinned as first written
    "decode_attention": {"cpu": "c8556834159fc581", "cuda": "a0d256998399e54a"},
    "gate_up_silu": {"cpu": "cf75250bb2049c59", "cuda": "d3f0de2d2727e074"},
    "lm_head_top1": {"cpu": "2385c3f687ee6884", "cuda": "b05e6856c0b42e96"},
    "rmsnorm_residual": {"cpu": "a1605b32cf5fabfa", "cuda": "c1b93da805d8b06e"},
    "rotary": {"cpu": "9f3543f1dc2c8cdb", "cuda": "4c00b2ea61ed193a"},
    "w4a16_gemv": {"cpu": "e9e3b417f84775f5", "cuda": "c0e8d0b457362911"},
    "w8a8_gemm": {"cpu": "4d97ac1629c388fa", "cuda": "ff9cd06ccdceb7a5"},
    # the prefill form of gate_up_silu (CUTLASS, sm_90a), pinned as first written
    "gate_up_prefill": {"cuda": "98195c675b4ff90f"},
    "reduction": {"cpu": "63cff460944a58c5", "cuda": "f68f9f3bd0ddaef7"},
    "sgemm": {"cpu": "c929c4495ed84fb8", "cuda": "89a10c96cdb3cadc"},
    "sgemm_kt": {"cuda": "9893cd777ca29439"},
    "softmax": {"cuda": "3a8878d98f3535ca"},
    # the CPU size changed on purpose: N = 2^21 (was 2^22), the main job in 2 minutes
    "vector_add": {"cpu": "43e03ef807720258", "cuda": "0b095508df43dc00"},
}


@pytest.mark.parametrize("name", sorted(MAIN_FIGURES))
def test_the_rewritten_shipped_sweeps_expand_as_before(name):
    assert space_figures(ROOT / "sweeps" / name) == MAIN_FIGURES[name]


def test_every_shipped_sweep_is_pinned():
    assert sorted(MAIN_FIGURES) == sorted(p.parent.name for p in
                                          (ROOT / "sweeps").glob("*/sweep.yaml"))


def test_the_written_out_winner_states_its_derived_quantities(tmp_path):
    from kopt.core.spec import load_sweep
    from kopt.tools.report import realized_source

    space = load_sweep(make(tmp_path)).space("cpu")
    text = realized_source(space.source_text(), space, {"CHUNK": 128, "VEC": 4}, "winner")
    assert text.splitlines()[:5] == [
        "// winner", "// kopt: the candidate's -D defines, written into the source",
        "#define CHUNK 128", "#define VEC 4",
        "// sweep.yaml's derived quantities: TILE=512"]  # HALF and BIG need the dims
    space = load_sweep(make(tmp_path, INLINED, "hand")).space("cpu")
    plain = realized_source(space.source_text(), space, {"CHUNK": 128}, "w")
    assert "derived" not in plain
