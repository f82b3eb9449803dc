"""Names and values that reach the compiler as -DNAME=VALUE: names that would break every
build are refused at load; a name no source reads, a value that is no number and launch
configs a restriction cannot evaluate load with one `note:` line each."""

import pytest
from click.testing import CliRunner

from conftest import VADD_CPP, VADD_REF, assert_spec_error, write_sweep
from kopt.cli.main import main
from kopt.core.names import reserved
from kopt.core.spec import load_sweep

SPEC = "kernel: k.cpp\ndims: [{N: 1024}]\nargs: {x: [N], y: [N]}\n"
# reads CHUNK and VEC (VADD_CPP) and ITEMS, U
READS = VADD_CPP + "#if defined(ITEMS) || defined(U)\n#endif\n"


def make(tmp_path, yaml_text, src=READS, **files):
    return write_sweep(tmp_path / "s", SPEC + yaml_text,
                       {"k.cpp": src, "ref.py": VADD_REF, **files})


@pytest.mark.parametrize("name, why", [
    ("int", "is a C++ keyword ([lex.key])"),
    ("float", "is a C++ keyword ([lex.key])"),
    ("restrict", "is a C keyword"),
    ("_Bool", "is a C keyword"),
    ("and", "is a C++ operator keyword"),
    ("override", "is a C++ identifier with special meaning"),
    ("defined", "is a name of the preprocessor itself"),
    ("__cplusplus", "is reserved to the compiler: names beginning with __ or with _ and an "
                    "upper-case letter"),
    ("__CUDACC__", "is reserved to the compiler"),
    ("_OPENMP", "is reserved to the compiler"),
    ("linux", "is a macro the compiler or the standard and CUDA headers already define"),
    ("NULL", "is a macro the compiler or the standard and CUDA headers already define"),
    ("blockDim", "is a CUDA built-in"),
    ("size_t", "is a type or namespace name"),
    ("solve", "is the kernel's entry point"),
    ("KOPT_DEVICE_CLASS", "is kopt's own prefix"),
    ("kopt_synchronize", "is kopt's own prefix"),
])
def test_a_param_name_that_breaks_every_build_is_refused_at_load(tmp_path, name, why):
    """Such a name loaded, and -DNAME=... made every candidate a compile_error. (Quoted:
    YAML reads a bare NULL as null.)"""
    msg = assert_spec_error(make(tmp_path, f'params: {{"{name}": [1, 2]}}\n'),
                            f"field 'params.{name}'", f"{name!r} {why}",
                            f"passed as a macro (-D{name}=...)", "every candidate would be a "
                            "compile_error: rename the param, e.g. to ")
    assert "\n" not in msg, msg


def test_the_refusal_is_one_line_with_file_field_and_fix(tmp_path):
    d = make(tmp_path, "params: {int: [1, 2]}\n")
    msg = assert_spec_error(d)
    assert msg == (f"{d / 'sweep.yaml'}: field 'params.int': 'int' is a C++ keyword "
                   "([lex.key]); it is passed as a macro (-Dint=...), which would rewrite "
                   "that name in the kernel and in every header the compiler reads, so every "
                   "candidate would be a compile_error: rename the param, e.g. to INT")


@pytest.mark.parametrize("block, field, fix", [
    ("methods:\n  memory.vectorized_access: {defines: {__cplusplus: 1}}\n",
     "methods.memory.vectorized_access.defines.__cplusplus", "rename the define, e.g. to "
     "CPLUSPLUS"),
    ("methods:\n  compute.ilp_unroll: {params: {defined: [2, 4]}}\n",
     "methods.compute.ilp_unroll.params.defined", "rename the param, e.g. to DEFINED"),
    ("params: {KOPT_DEVICE_CLASS: [1]}\n", "params.KOPT_DEVICE_CLASS",
     "rename the param, e.g. to DEVICE_CLASS"),
    ('params: {"NULL": [1]}\n', "params.NULL", "rename the param, e.g. to P_NULL"),
])
def test_method_params_and_defines_are_checked_too(tmp_path, block, field, fix):
    assert_spec_error(make(tmp_path, block), f"field '{field}'", fix)


def test_the_kernel_modes_kernel_name_is_refused(tmp_path):
    """In kernel mode the entry point is the __global__ kernel's name."""
    from test_kernel_mode import SAXPY, SAXPY_CU, SAXPY_REF

    d = write_sweep(tmp_path / "k", SAXPY.replace("ITEMS: [1, 4]}", "ITEMS: [1, 4], saxpy: [1]}"),
                    {"saxpy.cu": SAXPY_CU, "ref.py": SAXPY_REF})
    assert_spec_error(d, "field 'params.saxpy'", "'saxpy' is the kernel's entry point")
    assert reserved("saxpy", "saxpy") and reserved("saxpy") is None


def test_ordinary_names_are_free():
    for name in ("THREADS", "block_size_x", "N_", "Int", "use_padding", "VEC", "solver", "a__b"):
        assert reserved(name) is None, name


def test_a_param_no_source_reads_is_noted(tmp_path):
    """NT (read in a comment only) was swept in silence: 3x the candidates, identical
    builds. ITEMS, read by a local header the source includes, and CHUNK are read."""
    src = ('#include "tile.h"\n// NT: OpenMP threads (not used yet)\n'
           '/* VEC */ const char* s = "NT";\n' + VADD_CPP)
    d = make(tmp_path, "params: {NT: [1, 2, 4], ITEMS: [1, 2], CHUNK: [64]}\nmethods:\n"
             "  memory.vectorized_access: {defines: {WIDTH: 4}}\n", src=src,
             **{"tile.h": "#define STEP ITEMS\n"})
    sw = load_sweep(d)
    spec = d / "sweep.yaml"
    assert sw.warnings == [
        f"{spec}: params.NT: no source file of this sweep reads 'NT' (k.cpp and the local "
        "headers it includes, comments and strings aside): its 3 values make 3x the "
        "candidates, the same build each; use NT in the kernel or drop the param",
        f"{spec}: methods.memory.vectorized_access.defines.WIDTH: no source file of this "
        "sweep reads 'WIDTH' (k.cpp and the local headers it includes, comments and strings "
        "aside): the method's candidates build the same code as without it; use WIDTH in the "
        "kernel or drop the define"]


def test_a_kernel_mode_param_the_launch_geometry_reads_is_not_noted(tmp_path):
    """THREADS is read by `launch: block` only; NOPE by nothing."""
    from test_kernel_mode import SAXPY, SAXPY_CU, SAXPY_REF

    d = write_sweep(tmp_path / "k", SAXPY.replace("ITEMS: [1, 4]}", "ITEMS: [1, 4], NOPE: [1]}"),
                    {"saxpy.cu": SAXPY_CU, "ref.py": SAXPY_REF})
    assert load_sweep(d).warnings == [
        f"{d / 'sweep.yaml'}: params.NOPE: no source file of this sweep reads 'NOPE' "
        "(saxpy.cu and the local headers it includes, comments and strings aside, nor "
        "`launch:`): it changes nothing in the build; use NOPE in the kernel or drop the param"]


def test_a_value_that_is_no_number_is_noted(tmp_path):
    """`CHUNK: [64, two]` was a sweep of compile errors without a word; a number written
    as a string ("128") is a number."""
    d = make(tmp_path, 'params: {CHUNK: [64, two, "128", "0x10"]}\nmethods:\n'
             "  memory.vectorized_access: {defines: {VEC: wide}}\n")
    spec = d / "sweep.yaml"
    assert load_sweep(d).warnings == [
        f"{spec}: params.CHUNK: 'two' is not a number; kopt passes it as-is, as -D text "
        "(-DCHUNK=two): if you meant a number, write it as one; text is right only for a "
        "macro the kernel expands as code (a type name, say)",
        f"{spec}: methods.memory.vectorized_access.defines.VEC: 'wide' is not a number; kopt "
        "passes it as-is, as -D text (-DVEC=wide): if you meant a number, write it as one; "
        "text is right only for a macro the kernel expands as code (a type name, say)"]


def test_configs_a_restriction_divides_by_zero_for_are_noted(tmp_path):
    """A restriction that divided by zero dropped those configs in silence. The second
    one's zero divisor is excluded by a restriction of its own: no note."""
    d = make(tmp_path, "params: {CHUNK: [64, 128], ITEMS: [2, 1, 3]}\n"
             'restrictions: ["N // (ITEMS - 1) > 4", "U != 0", "CHUNK % U == 0"]\n'
             "methods:\n  compute.ilp_unroll: {params: {U: [0, 2]}}\n")
    spec = d / "sweep.yaml"
    assert load_sweep(d).warnings == [
        f"{spec}: restrictions[0] ('N // (ITEMS - 1) > 4') divides by zero for 2 of 6 launch "
        "configs at the problem size {'N': 1024} (e.g. {'ITEMS': 1}); expansion drops them "
        "there without a row: if they should run, guard the division (`D == 0 or ...`, D its "
        "divisor); if not, exclude them by a restriction of their own (`D != 0`)"]
    d2 = make(tmp_path / "m", "params: {CHUNK: [64, 128]}\n"
              'restrictions: ["CHUNK % U == 0"]\n'
              "methods:\n  compute.ilp_unroll: {params: {U: [0, 2, 4]}}\n")
    assert load_sweep(d2).warnings == [
        f"{d2 / 'sweep.yaml'}: restrictions[0] ('CHUNK % U == 0') divides by zero for 2 of 6 "
        "launch configs of methods.compute.ilp_unroll's candidates at the problem size "
        "{'N': 1024} (e.g. {'CHUNK': 64, 'U': 0}); expansion drops them there without a row: "
        "if they should run, guard the division (`D == 0 or ...`, D its divisor); if not, "
        "exclude them by a restriction of their own (`D != 0`)"]


def test_the_notes_are_printed_before_the_work(tmp_path):
    """`kopt propose` (as `kopt sweep` and `kopt preflight`) prints each as a note: line."""
    d = make(tmp_path, "params: {NT: [1, 2]}\n")
    r = CliRunner().invoke(main, ["propose", str(d), "--store", str(tmp_path / "st")])
    assert "note: " in r.output and "params.NT: no source file of this sweep reads 'NT'" in \
        " ".join(r.output.split()), r.output
