"""Names that reach the compiler as -DNAME=VALUE: names that would break every build are
refused at load."""

import pytest

from conftest import VADD_CPP, VADD_REF, assert_spec_error, write_sweep
from kopt.names import reserved

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
