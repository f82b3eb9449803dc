import pytest

from kopt.core.contract import ContractError, parse_signature


def test_inputs_outputs_scalars_and_types():
    sig = parse_signature('''
        // a comment with extern "C" void solve(int nope)
        #include <cuda_fp16.h>
        extern "C" void solve(const float* __restrict__ A, const __half* B,
                              __nv_bfloat16 *C, double* D, int M, size_t K, float alpha) {}
    ''')
    assert [(a.name, a.kind, a.dtype) for a in sig.args] == [
        ("A", "input", "float32"), ("B", "input", "float16"), ("C", "output", "bfloat16"),
        ("D", "output", "float64"), ("M", "scalar", "int32"), ("K", "scalar", "uint64"),
        ("alpha", "scalar", "float32")]
    assert sig.describe().startswith("solve(const float* A, const __half* B, __nv_bfloat16* C")


def test_integer_pointer_types():
    sig = parse_signature('extern "C" void solve(const int8_t* a, const uint8_t* b, '
                          'int64_t* c, unsigned int n) {}')
    assert [a.dtype for a in sig.args] == ["int8", "uint8", "int64", "uint32"]


def test_missing_solve_names_file():
    with pytest.raises(ContractError, match=r"k\.cu: no `extern \"C\" void solve"):
        parse_signature("__global__ void k() {}", "k.cu")


def test_unsupported_type_is_named():
    with pytest.raises(ContractError, match="'p'.*'struct_t'|struct_t"):
        parse_signature('typedef int struct_t;\nextern "C" void solve(const struct_t* p) {}',
                        "k.cu")


def test_pointer_to_pointer_rejected():
    with pytest.raises(ContractError, match="pointers to pointers"):
        parse_signature('extern "C" void solve(float** p) {}', "k.cu")


def test_every_c_type_has_its_real_width_and_range():
    """`unsigned*` buffers were torch int64 (8 bytes for a 4-byte type) and an
    `unsigned` scalar was range-checked as int64. Each C type's torch dtype has the C type's
    width, and its range is the C type's."""
    import ctypes

    import torch

    from workers.ctypes_map import C_TYPES, scalar_range

    for ctype, (dtype, cname) in C_TYPES.items():
        width = getattr(torch, dtype).itemsize
        assert width == ctypes.sizeof(getattr(ctypes, cname)), ctype
        lo, hi, integral = scalar_range(ctype)
        if integral and dtype != "bool":
            assert (lo, hi) == (torch.iinfo(getattr(torch, dtype)).min,
                                torch.iinfo(getattr(torch, dtype)).max), ctype
    assert C_TYPES["unsigned int"][0] == "uint32" and C_TYPES["size_t"][0] == "uint64"
    assert scalar_range("unsigned int") == (0, 2**32 - 1, True)
    assert scalar_range("half") == (-65504.0, 65504.0, False)
    assert scalar_range("bool") == (0, 1, True)
    sig = parse_signature('extern "C" void solve(const unsigned* a, unsigned short* b, '
                          'long unsigned int c, signed d, uint32_t e) {}')
    assert [(a.ctype, a.dtype) for a in sig.args] == [
        ("unsigned int", "uint32"), ("unsigned short", "uint16"), ("unsigned long", "uint64"),
        ("int", "int32"), ("uint32_t", "uint32")]


def test_structs_and_unknown_types_name_the_argument_and_the_supported_types():
    """`const struct Pair*` gave "unsupported type node Struct" with no argument
    name and no list of supported types."""
    with pytest.raises(ContractError) as ei:
        parse_signature('struct Pair { float a, b; };\n'
                        'extern "C" void solve(const struct Pair* p, float* out, int N) {}',
                        "k.cu")
    msg = str(ei.value)
    assert msg.startswith("k.cu: solve argument 'p' is a struct Pair; pass plain buffers")
    assert "supported types: _Bool, __half," in msg and "unsigned short" in msg
    with pytest.raises(ContractError, match=r"k\.cu: solve argument 'p' \(`const Pair\* p`\) "
                                            "has a type kopt does not know; argument types "
                                            "must be one of: _Bool"):
        parse_signature('extern "C" void solve(const Pair* p, float* out, int N) {}', "k.cu")
