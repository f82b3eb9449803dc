import pytest

from kopt.contract import ContractError, parse_signature


def test_inputs_outputs_scalars_and_types():
    sig = parse_signature('''
        // a comment with extern "C" void solve(int nope)
        #include <cuda_fp16.h>
        extern "C" void solve(const float* __restrict__ A, const __half* B,
                              __nv_bfloat16 *C, double* D, int M, size_t K, float alpha) {}
    ''')
    assert [(a.name, a.kind, a.dtype) for a in sig.args] == [
        ("A", "input", "float32"), ("B", "input", "float16"), ("C", "output", "bfloat16"),
        ("D", "output", "float64"), ("M", "scalar", "int32"), ("K", "scalar", "int64"),
        ("alpha", "scalar", "float32")]
    assert sig.describe().startswith("solve(const float* A, const __half* B, __nv_bfloat16* C")


def test_integer_pointer_types():
    sig = parse_signature('extern "C" void solve(const int8_t* a, const uint8_t* b, '
                          'int64_t* c, unsigned int n) {}')
    assert [a.dtype for a in sig.args] == ["int8", "uint8", "int64", "int64"]


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
