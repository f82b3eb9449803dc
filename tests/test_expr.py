import pytest

from kopt.expr import ExprError, parse


def test_arithmetic_comparisons_and_names():
    e = parse("BM * BK <= 4096 and N % (THREADS * VEC) == 0")
    assert e.names == {"BM", "BK", "N", "THREADS", "VEC"}
    assert e({"BM": 64, "BK": 64, "N": 1024, "THREADS": 256, "VEC": 4}) is True
    assert e({"BM": 128, "BK": 64, "N": 1024, "THREADS": 256, "VEC": 4}) is False


def test_functions_ternary_and_chained_compare():
    assert parse("max(A, B) // min(A, B)")({"A": 3, "B": 12}) == 4
    assert parse("1 if X > 2 else 0")({"X": 3}) == 1
    assert parse("0 < X < 4")({"X": 4}) is False


@pytest.mark.parametrize("bad", ["__import__('os')", "x.y", "a[0]", "lambda: 1", "open('f')",
                                 "'text'", "f(1)"])
def test_disallowed_constructs(bad):
    with pytest.raises(ExprError):
        parse(bad)


def test_syntax_error_names_text():
    with pytest.raises(ExprError, match="THREADS <"):
        parse("THREADS <")


def test_unbound_name_raises_keyerror():
    with pytest.raises(KeyError):
        parse("A + 1")({})
