"""Spec validation: every error names the file, the field and what was expected."""

import pytest

from conftest import VADD_CPP, VADD_REF, assert_spec_error, write_sweep
from kopt.core.spec import SpecError, load_sweep

GOOD = """
    kernel: k.cpp
    dims: [{N: 1024}]
    args: {x: [N], y: [N]}
    params: {CHUNK: [64, 128]}
    restrictions: ["CHUNK <= N"]
    methods:
      memory.vectorized_access: {params: {VEC: [4, 8]}}
"""


def make(tmp_path, yaml_text=GOOD, **files):
    files = {"k.cpp": VADD_CPP, "ref.py": VADD_REF, **files}
    return write_sweep(tmp_path / "s", yaml_text, files)


def test_good_spec_loads(tmp_path):
    sw = load_sweep(make(tmp_path))
    assert sw.name == "s" and sw.primary == "cpu"
    sp = sw.space("cpu")
    assert sp.baseline == {"CHUNK": 64}
    assert [a.name for a in sp.signature.args] == ["x", "y", "out", "N"]
    assert sp.timing.min_samples == 10


def expect(tmp_path, yaml_text, *needles, **files):
    return assert_spec_error(make(tmp_path, yaml_text, **files), *needles)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_sweep(tmp_path / "nope")


def test_yaml_syntax(tmp_path):
    expect(tmp_path, "kernel: [unclosed", "not valid YAML")


def test_yaml_syntax_error_is_one_line_with_its_place(tmp_path):
    """PyYAML's own message spans four lines (context, problem, two marks with the source
    line and a caret); kopt's is one: the file, where, what, and the fix."""
    text = "kernel: k.cpp\ndims: [{N: 1024}]\nparams: [\nbaseline: {CHUNK: 64}\n"
    msg = expect(tmp_path, text, "not valid YAML")
    assert "\n" not in msg, msg
    assert msg.endswith(
        "sweep.yaml: not valid YAML: line 5, column 1: expected ',' or ']', but got "
        "'<stream end>' (while parsing a flow sequence that starts at line 3, column 9); "
        "fix the YAML there (docs/spec.md shows a whole sweep.yaml)"), msg
    tab = expect(tmp_path, "kernel: k.cpp\n\tdims: [{N: 1024}]\n", "not valid YAML")
    assert "\n" not in tab and "line 2, column 1: found character '\\t' that cannot " \
        "start any token" in tab, tab


def test_missing_required_field(tmp_path):
    expect(tmp_path, "kernel: k.cpp\n", "field 'dims'", "required field is missing")


def test_unknown_field(tmp_path):
    expect(tmp_path, GOOD + "    parms: {A: [1]}\n", "field 'parms'", "unknown field")


def test_param_not_a_list(tmp_path):
    expect(tmp_path, GOOD.replace("CHUNK: [64, 128]", "CHUNK: 64"), "field 'params.CHUNK'",
           "valid list")


def test_unknown_method(tmp_path):
    expect(tmp_path, GOOD.replace("memory.vectorized_access", "memory.vectorised"),
           "field 'methods.memory.vectorised'", "unknown method id",
           "did you mean 'memory.vectorized_access'?", "kopt catalog")


def test_baseline_outside_the_restrictions(tmp_path):
    expect(tmp_path, GOOD.replace('"CHUNK <= N"', '"CHUNK >= 128"'), "field 'restrictions[0]'",
           "the baseline {'CHUNK': 64} violates 'CHUNK >= 128'", "dims[0] = {'N': 1024}",
           "change `baseline` or the restriction")


def test_args_names_an_unknown_dim(tmp_path):
    """An extent that is the unknown name itself says so once (it read "'Q' names 'Q'");
    one that only uses it names it."""
    expect(tmp_path, GOOD.replace("args: {x: [N], y: [N]}", "args: {x: [Q], y: [N]}"),
           "field 'args.x[0]'", "'Q' is neither a dim of the top-level dims[0] "
           "(N) nor in `scalars`; write the extent over those names, or give Q in every "
           "problem size of dims (or in `scalars`)")
    expect(tmp_path, GOOD.replace("args: {x: [N], y: [N]}", "args: {x: [Q * 2], y: [N]}"),
           "field 'args.x[0]'", "'Q * 2' names 'Q', which is neither a dim of the top-level "
           "dims[0] (N)")


def test_a_kernel_file_typo_gets_a_did_you_mean(tmp_path):
    """A kernel file name one letter off names the file that is there (a new user's
    saxpi.cpp); none where nothing is close."""
    expect(tmp_path, GOOD.replace("kernel: k.cpp", "kernel: kk.cpp"), "field 'kernel'",
           "kk.cpp does not exist; did you mean 'k.cpp'?")
    msg = expect(tmp_path, GOOD.replace("kernel: k.cpp", "kernel: other_thing.cu"),
                 "field 'kernel'", "other_thing.cu does not exist")
    assert "did you mean" not in msg


def test_a_renamed_scalar_is_named_beside_the_missing_one(tmp_path):
    """solve's scalar ``a`` missing while `scalars` gives ``alpha``, which solve does not
    take: the line names both (a new user's rename was blamed on dims[0] alone)."""
    saxpy = ('extern "C" void solve(const float* x, float* y, float a, int N) '
             "{ for (int i = 0; i < N; ++i) y[i] = a * x[i] + y[i]; }\n")
    msg = expect(tmp_path, GOOD + "    scalars: {alpha: 2.5}\n", "field 'dims[0]'",
                 "solve argument 'a' is a scalar but is neither a dim nor in `scalars`; add "
                 "a: <value> to one of them (`scalars` gives 'alpha', which solve does not "
                 "take: a rename?)", **{"k.cpp": saxpy})
    assert msg.count("alpha") == 1


def test_a_value_of_no_allowed_type_is_one_line_not_one_per_type(tmp_path):
    """A launch param value may be an integer, a number or a string: a list in its place was
    three lines, one per type tried (`params.CHUNK[0].int`, `.float`, `.str`)."""
    msg = expect(tmp_path, GOOD.replace("CHUNK: [64, 128]", "CHUNK: [[64], 128]"))
    path = tmp_path / "s" / "sweep.yaml"
    assert msg == (f"{path}: field 'params.CHUNK[0]': Input should be an integer, a number or a "
                   "string (got [64]); write it in the form docs/spec.md shows for "
                   "`params.CHUNK[0]`"), msg


def test_a_work_figure_naming_an_unknown_name_says_the_fix(tmp_path):
    msg = expect(tmp_path, GOOD + '    flops: "2 * M"\n', "field 'flops'")
    assert msg.endswith("field 'flops': '2 * M' names ['M'], which are neither dims, scalars "
                        "nor derived names; write it over the dims (N) and scalars, or add the "
                        "name to `scalars` or `derived:`"), msg


def test_bad_restriction(tmp_path):
    expect(tmp_path, GOOD.replace('"CHUNK <= N"', '"__import__(1)"'), "field 'restrictions[0]'")


def test_baseline_not_in_values(tmp_path):
    expect(tmp_path, GOOD + "    baseline: {CHUNK: 32}\n", "field 'baseline.CHUNK'",
           "not one of the values [64, 128]")


def test_scalar_without_value(tmp_path):
    expect(tmp_path, GOOD.replace("{N: 1024}", "{M: 1024}").replace("[N]", "[M]"),
           "field 'dims[0]'", "'N' is a scalar", "add N: <value>")


def test_args_names_unknown_argument(tmp_path):
    expect(tmp_path, GOOD.replace("args: {x: [N], y: [N]}", "args: {z: [N]}"), "field 'args.z'",
           "no solve argument 'z'")


def test_reference_missing_function(tmp_path):
    expect(tmp_path, GOOD, "field 'reference'", "def reference", **{"ref.py": "x = 1\n"})


def test_kernel_suffix(tmp_path):
    expect(tmp_path, GOOD.replace("kernel: k.cpp", "kernel: k.f90"), "field 'kernel'",
           "unknown source suffix")


def test_kernel_without_solve(tmp_path):
    expect(tmp_path, GOOD, "field 'kernel'", "no `extern \"C\" void solve",
           **{"k.cpp": "int main() {}\n"})


def test_method_param_shadowing_launch_param(tmp_path):
    expect(tmp_path, GOOD.replace("{params: {VEC: [4, 8]}}", "{params: {CHUNK: [4]}}"),
           "methods.memory.vectorized_access.params.CHUNK", "already a launch param")


def test_missing_backend_block(tmp_path):
    sw = load_sweep(make(tmp_path))
    with pytest.raises(SpecError, match="no cuda source.*add a `cuda:` block"):
        sw.space("cuda")


def test_every_shipped_sweep_validates():
    from conftest import ROOT

    for d in sorted((ROOT / "sweeps").iterdir()):
        sw = load_sweep(d)
        assert "cuda" in sw.spaces, d


def test_name_must_be_a_safe_partition_name(tmp_path):
    expect(tmp_path, GOOD + "    name: ../../evil\n",
           "field 'name': the name '../../evil' holds '/'")


def test_duplicate_keys_are_rejected(tmp_path):
    expect(tmp_path, GOOD + "    params: {A: [1]}\n", "not valid YAML", "'params' is given twice")


def test_scalar_must_fit_its_c_type(tmp_path):
    expect(tmp_path, GOOD.replace("{N: 1024}", "{N: 3000000000}"), "field 'dims[0].N'",
           "does not fit `int N`")


def test_dims_are_positive_integers(tmp_path):
    expect(tmp_path, GOOD.replace("{N: 1024}", "{N: -5}"), "field 'dims[0].N'",
           "-5 is not a problem size: dims must be >= 1")
    expect(tmp_path, GOOD.replace("{N: 1024}", '{N: "1024"}'), "field 'dims[0].N'")


def test_a_schema_error_is_one_line_per_field_with_the_file_and_the_fix(tmp_path):
    """A wrong type or a missing field is one line naming the file and the field (in the
    `dims[0].N` form every other check uses) and what to write; two errors are two such
    lines, never a header line of their own."""
    one = expect(tmp_path, GOOD.replace("[{N: 1024}]", "{N: 1024}"), "field 'dims'")
    path = tmp_path / "s" / "sweep.yaml"
    assert one == (f"{path}: field 'dims': Input should be a valid list (got {{'N': 1024}}); "
                   "write it in the form docs/spec.md shows for `dims`"), one
    two = expect(tmp_path, "kernel: k.cpp\ndimz: [{N: 1024}]\n", "field 'dims'")
    assert two.splitlines() == [
        f"{path}: field 'dims': required field is missing; add `dims:` (docs/spec.md "
        "describes it)",
        f"{path}: field 'dimz': unknown field; did you mean 'dims'? remove it or correct its "
        "name (docs/spec.md lists the fields a sweep.yaml takes)"], two
    nested = expect(tmp_path, GOOD + "    cpu: {params: {A: [1]}}\n", "field 'cpu.kernel'")
    assert nested == (f"{path}: field 'cpu.kernel': required field is missing; add `kernel:` "
                      "under `cpu:` (docs/spec.md describes it)"), nested


def test_min_samples_above_max(tmp_path):
    expect(tmp_path, GOOD + "    timing: {min_samples: 50, max_samples: 5}\n", "field 'timing'",
           "min_samples (50) is above max_samples (5)")


def test_restriction_names_are_checked_in_every_backend_section(tmp_path):
    """A typo in the CUDA section's restrictions is caught on a machine that will only run
    the CPU section, and each error names its own section's field."""
    both = """
    kernel: k.cu
    dims: [{N: 1024}]
    args: {x: [N], y: [N]}
    params: {THREADS: [128, 256]}
    restrictions: ["THREAD <= N"]
    cpu:
      kernel: k.cpp
      params: {CHUNK: [64, 128]}
      restrictions: ["CHUNK <= N"]
"""
    files = {"k.cu": VADD_CPP}
    expect(tmp_path, both, "field 'restrictions[0]'", "names ['THREAD']", "THREADS", **files)
    fixed = both.replace('"THREAD <= N"', '"THREADS <= N"')
    expect(tmp_path, fixed.replace('"CHUNK <= N"', '"CHUNKS <= N"'),
           "field 'cpu.restrictions[0]'", "names ['CHUNKS']", **files)
    assert load_sweep(make(tmp_path, fixed, **files)).space("cpu").restrictions == ["CHUNK <= N"]


def test_zero_division_in_args_or_a_baseline_restriction(tmp_path):
    expect(tmp_path, GOOD.replace("args: {x: [N], y: [N]}", 'args: {x: ["N // (N - N)"], y: [N]}'),
           "field 'args.x[0]'", "divides by zero with dims[0] = {'N': 1024}")
    expect(tmp_path, GOOD.replace('"CHUNK <= N"', '"N // (CHUNK - 64) > 0"'),
           "field 'restrictions[0]'", "divides by zero in 'N // (CHUNK - 64) > 0'")


def test_unbounded_powers_are_named_at_load(tmp_path):
    """A restriction or a work figure whose `**`/`<<` would make a gigantic integer
    is refused at load, naming sweep.yaml, the field and the fix."""
    expect(tmp_path, GOOD.replace('"CHUNK <= N"', '"CHUNK ** 2 ** 20 > 0"'),
           "field 'restrictions[0]'", "64 ** 1048576", "4096 bits", "smaller operands")
    expect(tmp_path, GOOD.replace('"CHUNK <= N"', '"9 ** 9 ** 9 > CHUNK"'),
           "field 'restrictions[0]'", "9 ** 387420489")
    expect(tmp_path, GOOD + '    flops: "N ** 2 ** 20"\n', "field 'flops'",
           "1024 ** 1048576", "dims[0]")
    expect(tmp_path, GOOD + '    bytes: "N << 5000"\n', "field 'bytes'", "4096 bits")


def test_scalars_are_checked_against_their_c_types_real_range(tmp_path):
    """An `unsigned N` of 2**32 + 1 passed (checked as int64) and ctypes wrapped
    it to 1; a half scalar above 65504 would be infinity."""
    src = ('typedef _Float16 half;\n'
           'extern "C" void solve(const float* x, float* out, unsigned N, half a) {}\n')
    spec = "kernel: k.cpp\ndims: [{N: 4294967297}]\nargs: {x: [N]}\nscalars: {a: 0.5}\n"
    expect(tmp_path, spec, "field 'dims[0].N'",
           "4294967297 does not fit `unsigned int N` (integers 0 .. 4294967295)", **{"k.cpp": src})
    expect(tmp_path, spec.replace("4294967297", "4096").replace("0.5", "70000.0"),
           "field 'scalars.a'", "does not fit `half a` (finite values up to +-65504)",
           **{"k.cpp": src})
    sw = load_sweep(make(tmp_path, spec.replace("4294967297", "4294967295"), **{"k.cpp": src}))
    assert [a.dtype for a in sw.space("cpu").signature.args] == [
        "float32", "float32", "uint32", "float16"]


DEAD = """
    kernel: k.cpp
    dims: [{N: 1024}, {N: 4096}]
    args: {x: [N], y: [N]}
    params: {THREADS: [128, 256]}
    restrictions:
      - "THREADS <= N"
      - "ITEMS * THREADS <= 256"
      - "VEC * THREADS <= 256"
      - "ITEMS * THREADS >= 1024"
    methods:
      memory.vectorized_access: {defines: {VEC: 4}}
      compute.thread_coarsening: {params: {ITEMS: [2, 4]}}
      latency.warp_shuffle_sync: {defines: {SHFL: 1}}
    cuda:
      kernel: k.cu
      params: {T: [32, 64]}
      restrictions: ["T * VEC > 512"]
      methods:
        memory.vectorized_access: {defines: {VEC: 4}}
"""


def test_a_method_the_restrictions_exclude_is_warned_about(tmp_path):
    """A method that no launch config carries past the restrictions loads with one line
    naming the method and the restriction(s) that remove it; live methods get none."""
    src = VADD_CPP + "#if defined(THREADS) || defined(ITEMS) || defined(SHFL) || defined(T)\n"
    src += "#endif\n"  # the source reads every name (no unread-name notes)
    sw = load_sweep(make(tmp_path, DEAD, **{"k.cpp": src, "k.cu": src}))
    spec = sw.spec_path
    assert sw.warnings == [
        f"{spec}: methods.memory.vectorized_access: no launch config survives "
        "restrictions[2] ('VEC * THREADS <= 256'); the method can never run",
        f"{spec}: methods.compute.thread_coarsening: no launch config survives "
        "restrictions[1] ('ITEMS * THREADS <= 256') and restrictions[3] "
        "('ITEMS * THREADS >= 1024') together; the method can never run",
        f"{spec}: cuda.methods.memory.vectorized_access: no launch config survives "
        "cuda.restrictions[0] ('T * VEC > 512'); the method can never run"]
    assert load_sweep(make(tmp_path / "g")).warnings == []
