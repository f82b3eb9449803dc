"""A sweep folder kopt cannot use is refused when it is loaded, in one line naming the file,
the field and the fix, never a traceback: files that are folders, not UTF-8, never end or are
nested too deeply; kernel prototypes and arguments; expressions; names, params and seeds."""

from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner

from conftest import assert_spec_error, write_sweep
from kopt.cli.main import main

ADD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n'  # noqa: E501


REF = "def reference(x, N):\n    return x\n"


def base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n", **files):
    return write_sweep(tmp_path / "s", yaml, {"add.cpp": ADD, "ref.py": REF, **files})


DEEP = 5000  # brackets inside one another: past Python's recursion limit (1000)


KERNEL_MODE = ("kernel: k.cu\ndims: [{N: 64}]\nargs: {x: [N]}\n"
               "launch: {kernel: k, block: [32], grid: [2]}\n")


def test_a_macro_for_the_arguments_is_named(tmp_path):
    d = base(tmp_path, **{"add.cpp": '#define ARGS const float* x, float* y, int N\n'
                                     'extern "C" void solve(ARGS) {}\n'})
    assert_spec_error(d, "field 'kernel'", "arguments must be written out in its prototype")


@pytest.mark.parametrize("what", ["add.cpp", "ref.py"])
def test_a_folder_where_a_file_goes_is_named(tmp_path, what):
    d = base(tmp_path)
    (d / what).unlink()
    (d / what).mkdir()
    assert_spec_error(d, f"{what}: is a directory, not a file")


def test_sweep_yaml_as_a_folder(tmp_path):
    from kopt.core.spec import SpecError, load_sweep

    d = base(tmp_path)
    (d / "sweep.yaml").unlink()
    (d / "sweep.yaml").mkdir()
    with pytest.raises(SpecError, match=r"sweep.yaml: is a directory, not a file"):
        load_sweep(d)


@pytest.mark.parametrize("what", ["sweep.yaml", "add.cpp"])
def test_text_that_is_not_utf8_is_named(tmp_path, what):
    from kopt.core.spec import SpecError, load_sweep

    d = base(tmp_path)
    (d / what).write_bytes(b"\xff\xfe" + (d / what).read_bytes())
    with pytest.raises(SpecError, match=rf"{what}: not UTF-8 text \(byte 0xff at offset 0\); "
                                        r"save it as UTF-8"):
        load_sweep(d)


def test_a_buffer_no_device_holds_is_refused_at_load(tmp_path):
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 1048576}]\nargs: {x: [N, N, N]}\n")
    assert_spec_error(d, "field 'args.x'", "1,152,921,504,606,846,976 elements",
                      "no device holds that")


@pytest.mark.parametrize("expr, why", [("max()", "max(...): max expected at least 1"),
                                       ("abs(1, 2)", "abs(...): abs() takes exactly one")])
def test_a_function_called_with_the_wrong_arguments_is_named(tmp_path, expr, why):
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            f"params: {{T: [1, 2]}}\nrestrictions: ['{expr}']\n")
    assert_spec_error(d, "restrictions[0]", why)


def test_a_solve_of_void_is_read_as_no_arguments(tmp_path):
    from kopt.core.contract import parse_signature

    assert parse_signature('extern "C" void solve(void) { }', "k.cpp").args == ()


def test_a_timeout_no_clock_holds_is_refused_at_load(tmp_path):
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            "timing: {timeout_s: 1.0e+30}\n")
    assert_spec_error(d, "timing", "86400")


def test_an_expression_nested_too_deeply(tmp_path):
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            "params: {T: [1, 2]}\nrestrictions: ['" + "-" * 1500 + "1']\n")
    assert_spec_error(d, "restrictions[0]", "nested too deeply")


@pytest.mark.parametrize("src", [
    'extern "C" { void solve(const float* x, float* y, int N) { } }',
    'extern "C" {\n#include <cmath>\nstatic int h(int a) { if (a) { return a; } return 0; }\n'
    "__host__ void solve(const float* x, float* y, int N) { }\n}\n",
    'extern "C" void solve(const float* x, float* y, int N __attribute__((unused))) { }',
    'extern "C" void solve(const float* x, float* y, [[maybe_unused]] int N = (1 << 4)) { }',
], ids=["block", "block-with-more", "attribute", "default-value"])
def test_prototypes_cpp_allows_are_read(src):
    from kopt.core.contract import parse_signature

    assert parse_signature(src, "k.cpp").describe() == "solve(const float* x, float* y, int N)"


def test_an_extern_c_block_builds_and_runs(tmp_path):
    from kopt.core.spec import load_sweep
    from kopt.tools.preflight import run_preflight

    d = base(tmp_path, **{"add.cpp": 'extern "C" {\nvoid solve(const float* x, float* y, '
                                     "int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n}\n"})
    assert run_preflight(load_sweep(d), "cpu")["status"] == "ok"


def test_an_argument_named_twice_is_refused_at_load(tmp_path):
    d = base(tmp_path, **{"add.cpp": 'extern "C" void solve(const float* x, float* x, int N) {}'})
    assert_spec_error(d, "solve argument 'x' is named twice; give every argument its own name")


@pytest.mark.parametrize("seed, why", [(2**70, "less than or equal to"),
                                       (-1, "greater than or equal to 0")])
def test_a_seed_torch_cannot_take_is_refused_at_load(tmp_path, seed, why):
    """2**70 was "ref.py: inputs() raised ValueError('Overflow when unpacking long long')" on
    every candidate: the reference blamed for the spec's field."""
    d = base(tmp_path, yaml=f"kernel: add.cpp\ndims: [{{N: 64}}]\nargs: {{x: [N]}}\nseed: {seed}\n")
    assert_spec_error(d, "field 'seed'", why)


@pytest.mark.parametrize("what", ["sweep.yaml", "add.cpp", "ref.py"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge"])
def test_a_file_that_never_ends_is_refused_not_read(tmp_path, what, kind):
    """A FIFO blocked kopt for ever; /dev/zero (a symlink to it) or a 65 MiB file was read
    into memory until the machine ran out of it."""

    from kopt.core.spec import SpecError, load_sweep

    d = base(tmp_path)
    (d / what).unlink()
    if kind == "fifo":
        os.mkfifo(d / what)
    elif kind == "dev-zero":
        (d / what).symlink_to("/dev/zero")
    else:
        with open(d / what, "wb") as f:
            f.truncate(65 * 2**20)  # sparse: no disk used
    why = ("not a regular file (a device, FIFO or socket); name the file itself"
           if kind != "huge" else "65 MiB, over the 64 MiB kopt reads as a source, spec or "
                                  "reference")
    with pytest.raises(SpecError, match=re.escape(f"{d / what}: {why}")):
        load_sweep(d)


@pytest.mark.parametrize("what", ["sweep.yaml", "ref.py", "kernel-prototype"])
def test_a_file_nested_too_deeply_is_named_not_a_traceback(tmp_path, what):
    """Each was a RecursionError traceback (PyYAML, Python's parser, pycparser): sweep.yaml
    with `extra: [[[...]]]`, a ref.py with `x = 1+1+...+1`, a kernel-mode prototype with
    `int ((((N))))` 900 deep."""
    if what == "sweep.yaml":
        d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                                "extra: " + "[" * DEEP + "]" * DEEP + "\n")
        parser, shown = "YAML", str(d / "sweep.yaml")
    elif what == "ref.py":
        d = base(tmp_path, **{"ref.py": REF + "x = 1" + " + 1" * 100_000 + "\n"})
        parser, shown = "Python", str((d / "ref.py").resolve())
    else:
        d = base(tmp_path, yaml=KERNEL_MODE, **{"k.cu": "__global__ void k(const float* x, int "
                                                         + "(" * 900 + "N" + ")" * 900 + ") {}\n"})
        parser, shown = "C", f"{(d / 'k.cu').resolve()} (k prototype)"
    r = CliRunner().invoke(main, ["preflight", str(d), "--backend", "cpu"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    assert (f"{shown}: nested too deeply for a {parser} parser (brackets or operators inside "
            "one another past Python's recursion limit); write it flatter") in r.output


def test_a_sweep_name_no_folder_can_hold_is_refused_at_load(tmp_path):
    """`name: aaa...` (300 characters) started Ray, then stopped at the store's folder
    `sweep=aaa...`: "File name too long"."""
    d = base(tmp_path, yaml=f"name: {'a' * 300}\nkernel: add.cpp\ndims: [{{N: 64}}]\n"
                            "args: {x: [N]}\n")
    assert_spec_error(d, "field 'name'", "at most 128 characters")


def test_a_nameless_sweep_in_a_folder_too_long_for_a_name_is_refused_at_load(tmp_path):
    """A sweep without `name:` in a folder of 250 characters took the folder's name and
    stopped after Ray started ("File name too long" for `sweep=bbb...`)."""
    d = write_sweep(tmp_path / ("b" * 250), "kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n",
                    {"add.cpp": ADD, "ref.py": REF})
    assert_spec_error(d, "field 'name': missing, and the folder's name (250 characters) is too "
                      "long to be the sweep's store folder; give `name:` (at most 128")


@pytest.mark.parametrize("field", ["flops", "bytes"])
def test_a_negative_amount_of_work_is_refused_at_load(tmp_path, field):
    """`flops: "-N"` was accepted: the rate column showed a negative TFLOP/s."""
    d = base(tmp_path, yaml=f"kernel: add.cpp\ndims: [{{N: 64}}]\nargs: {{x: [N]}}\n"
                            f"{field}: '0 - 4 * N'\n")
    assert_spec_error(d, f"field '{field}': '0 - 4 * N' is -256 at dims[0] = {{'N': 64}}; "
                      f"{field} counts the work of one call: 0 or more")


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_an_include_dir_that_is_no_folder_is_refused_at_load(tmp_path, where):
    """`include_dirs: [nope]` was accepted (the compiler ignores a missing -I folder)."""
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            "include_dirs: [inc, nope]\n")
    (d / "inc").mkdir()
    if where == "a-file":
        (d / "nope").write_text("x")
    what = "missing" if where == "missing" else "a file"
    assert_spec_error(d, "field 'include_dirs[1]'", f"'nope' ({d.absolute() / 'nope'}) is {what}, "
                      "not a folder; give an existing folder (relative paths are from the sweep "
                      "folder) or drop the entry")


@pytest.mark.parametrize("decl, why", [
    ("auto N", "`auto` is a storage class or specifier"),
    ("register N", "`register` is a storage class or specifier"),
    ("const N", "it has no type (C would read an implicit int)"),
], ids=["auto", "register", "const-only"])
def test_an_argument_without_a_c_type_is_refused_naming_it(tmp_path, decl, why):
    """`auto N` (C++: a template parameter) and `const N` were read as `int N`."""
    from kopt.core.contract import supported_types

    d = base(tmp_path, **{"add.cpp": f'extern "C" void solve(const float* x, float* y, {decl}) '
                                     "{ }\n"})
    assert_spec_error(d, f"add.cpp: solve argument 'N' is declared `{decl}`: {why}, not a C "
                      "type; write it as `TYPE N` (or `const TYPE* N`, `TYPE* N`) with TYPE one "
                      f"of: {supported_types()}")


def test_a_name_that_is_both_a_dim_and_a_scalar_is_refused_at_load(tmp_path):
    """`scalars: {N: 5}` beside `dims: [{N: 64}]` was accepted: the load checked the `args`
    shapes with the scalar (5) while the run used the dim (64), the scalar ignored."""
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            "scalars: {N: 5}\n")
    assert_spec_error(d, "field 'scalars.N': 'N' is also a dim (dims[0]); a name is a dim or a "
                      "scalar, not both (the load's checks read one value, the run the other): "
                      "drop one of them")


@pytest.mark.parametrize("params, field, says", [
    ("{'1NT': [1]}", "params.1NT", "'1NT' is not a C identifier"),
    ("{'a-b': [2]}", "params.a-b", "'a-b' is not a C identifier"),
    ("{'': [3]}", "params.", "'' is not a C identifier"),
    ("{N: [1, 2]}", "params.N", "'N' is also a dim and solve argument"),
    ("{x: [1, 2]}", "params.x", "'x' is also a solve argument"),
])
def test_param_names_are_checked_at_load(tmp_path, params, field, says):
    """A param that is no C identifier, or that is also a dim or a solve
    argument, reached the compiler as -DNAME=...: every candidate a compile_error."""
    d = base(tmp_path, yaml=f"kernel: add.cpp\ndims: [{{N: 64}}]\nargs: {{x: [N]}}\n"
                            f"params: {params}\n")
    assert_spec_error(d, f"field '{field}'", says, "passed as a macro")


def test_method_param_names_are_checked_at_load(tmp_path):
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\nmethods:\n"
                            "  compute.ilp_unroll: {params: {N: [2, 4]}}\n")
    assert_spec_error(d, "field 'methods.compute.ilp_unroll.params.N'", "'N' is also a dim")


@pytest.mark.parametrize("name, why", [("x", "'x' is not an output of solve(const float* x, "
                                             "float* y, int N) (its outputs: y); name one"),
                                        ("yy", "did you mean 'y'?")])
def test_a_band_for_what_is_no_output_is_refused_at_load(tmp_path, name, why):
    """A band of its own (tolerance.outputs) for an input or a misspelt output would check
    nothing: refused, naming the field and solve's outputs."""
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            f"tolerance: {{rtol: 1.0e-3, outputs: {{{name}: {{rtol: 0}}}}}}\n")
    assert_spec_error(d, f"tolerance.outputs.{name}", why)


def test_an_ncu_size_that_is_no_problem_size_is_refused_at_load(tmp_path):
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}, {N: 128}]\nargs: {x: [N]}\n"
                            "ncu: {dims: 2}\n")
    assert_spec_error(d, "ncu.dims", "2 is no index of dims (its 2 problem sizes are 0 .. 1)")


@pytest.mark.parametrize("yaml_tail, field, hint", [
    ("tolerence: {atol: 1}\n", "tolerence", "did you mean 'tolerance'?"),
    ("timing: {timout_s: 3}\n", "timing.timout_s", "did you mean 'timeout_s'?"),
    ("tolerance: {outputs: {y: {rtl: 0}}}\n", "tolerance.outputs.y.rtl", "did you mean 'rtol'?"),
])
def test_a_misspelt_field_is_named_with_the_closest_one(tmp_path, yaml_tail, field, hint):
    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n" + yaml_tail)
    msg = assert_spec_error(d, f"field '{field}': unknown field; {hint}")
    assert msg.count("\n") == 0
