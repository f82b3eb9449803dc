import pytest

from workers.expr import ExprError, parse


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


def test_power_and_shift_are_bounded():
    """`**` and `<<` refuse results above MAX_BITS bits instead of computing them
    for minutes; a constant one is refused when the expression is parsed."""
    with pytest.raises(ExprError, match=r"'9\*\*9\*\*9': 9 \*\* 387420489 has about"):
        parse("9**9**9")
    with pytest.raises(ExprError, match=r"'THREADS \*\* 2 \*\* 20 > 0': 256 \*\* 1048576"):
        parse("THREADS ** 2 ** 20 > 0")({"THREADS": 256})
    with pytest.raises(ExprError, match="up to 4096 bits"):
        parse("X << 2 ** 20")({"X": 3})
    with pytest.raises(ExprError, match="overflows a float"):
        parse("X ** 400.0")({"X": 10})
    with pytest.raises(ExprError, match="negative shift count"):
        parse("X << -1")({"X": 3})
    assert parse("2 ** 12 + X")({"X": 1}) == 4097
    assert parse("X ** 4096")({"X": 2}) == 2 ** 4096  # the limit itself is allowed
    assert parse("X ** -1")({"X": 4}) == 0.25
    with pytest.raises(ZeroDivisionError):  # callers name division by zero themselves
        parse("N // (N - N)")({"N": 3})


def test_the_issues_expression_fails_in_milliseconds():
    """`THREADS ** 9 ** 9 > 0` took seconds to minutes; bounded it fails at once (run in a
    child process so that a regression cannot hang the suite)."""
    import subprocess
    import sys

    code = ("from workers.expr import parse, ExprError\n"
            "try:\n    parse('THREADS ** 9 ** 9 > 0')({'THREADS': 256})\n"
            "except ExprError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30)
    assert "256 ** 387420489 has about" in out.stdout, out.stderr


def test_compiled_restrictions_match_the_tree_walk():
    """kopt.core.restrictions.all_of compiles restrictions (they run per candidate, a million
    times for a
    large space); its verdicts and errors are the tree walk's."""
    from kopt.core.restrictions import all_of
    from workers.expr import Expr

    env = {"A": 3, "B": 0, "C": 2.5, "N": 4096, "S": -7}
    names = ["A", "C"]
    texts = ["A * C <= N", "A and B", "B or A", "not B", "A if B else C", "min(A, C) + abs(S)",
             "N % (A * 4) == 0", "A < C < N", "2 ** A > 7", "1 << A", "-A // 2", "~A", "A ^ B",
             "max(A, B, C) / 2", "(A > 1) and (C or B)", "B"]
    for text in texts:
        bound = {k: v for k, v in env.items() if k not in names}
        assert all_of([Expr(text)], names, bound)((3, 2.5)) is bool(Expr(text)(env)), text
    for text, exc in (("A / B", ZeroDivisionError), ("N ** 5000", ExprError),
                      ("C << 2", ExprError), ("Q + 1", KeyError), ("~C", ExprError)):
        with pytest.raises(exc):
            all_of([Expr("A > 0"), Expr(text)], ["A"], env)((3,))
    holds = all_of([Expr("A * C <= N"), Expr("N % A == 1")], ["A", "C"], {"N": 4096})
    assert holds((3, 2.5)) and not holds((2, 2.5)) and not holds((3, 2000.0))
    assert holds((5, 1)) is True
    assert all_of([Expr("min(A, 2) == 2")], ["min", "A"], {})((0, 5))  # a param named min
