"""Safe evaluation of the small Python-syntax expressions a sweep spec holds.

Restrictions (``"THREADS * VEC <= 4096"``) and shapes (``"M * K"``) are
evaluated over params and dims. Only arithmetic, comparisons, boolean logic,
ternaries and ``min``/``max``/``abs`` are allowed; anything else (attribute
access, calls to other names, subscripts, lambdas) is rejected when the spec
is loaded, so a spec can never run code.

Evaluation is bounded too: ``**`` and ``<<`` refuse integer results above
:data:`MAX_BITS` bits (``9 ** 9 ** 9`` would take minutes and gigabytes), so
every expression evaluates in microseconds; constant sub-expressions are
evaluated when the expression is parsed, so such an error surfaces at spec load.

Shared by the driver (``kopt.core.spec``, ``kopt.core.expand``; ``kopt.core.restrictions``
re-exports it) and the
node side (the harness's shapes, launch geometry); standard library only.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

# Largest integer result (bits) that ``**`` and ``<<`` may produce: 4096 bits is about
# 1e1233, far above any size, and arithmetic on it takes microseconds.
MAX_BITS = 4096


MAX_TEXT = 2000  # characters of one expression


class ExprError(ValueError):
    """An expression uses syntax or names outside the allowed subset, or its value is out of
    bounds (an integer above MAX_BITS bits, a float overflow, a complex result)."""


def _show(v: Any) -> str:
    """``v`` for a message: negative numbers in parentheses, huge integers abbreviated."""
    text = repr(v)
    if len(text) > 24:
        text = f"{text[:12]}...({len(text.lstrip('-'))} digits)"
    return f"({text})" if isinstance(v, (int, float)) and v < 0 else text


def _pow(a: Any, b: Any) -> Any:
    if (isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1
            and (abs(a).bit_length() - 1) * b > MAX_BITS):
        raise ExprError(f"{_show(a)} ** {b} has about {(abs(a).bit_length() - 1) * b} bits; "
                        f"expressions allow integers up to {MAX_BITS} bits")
    r = a ** b
    if isinstance(r, complex):
        raise ExprError(f"{_show(a)} ** {_show(b)} is a complex number")
    return r


def _lshift(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and a and b > 0 \
            and abs(a).bit_length() + b > MAX_BITS:
        raise ExprError(f"{_show(a)} << {b} has {abs(a).bit_length() + b} bits; expressions "
                        f"allow integers up to {MAX_BITS} bits")
    return a << b


_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: _pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
    ast.BitXor: operator.xor, ast.LShift: _lshift, ast.RShift: operator.rshift,
}
_CMPOPS = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
_UNOPS = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
          ast.Invert: operator.invert}
_FUNCS = {"min": min, "max": max, "abs": abs}


class Expr:
    """A parsed, validated expression.

    Args:
        text: the expression source, e.g. ``"BM * BK <= 4096"``.

    Raises:
        ExprError: on a syntax error, a disallowed construct, or a constant sub-expression
            that is out of bounds (``9 ** 9 ** 9``).
    """

    def __init__(self, text: str):
        self.text = text
        if len(text) > MAX_TEXT:
            raise ExprError(f"expression of {len(text)} characters, over {MAX_TEXT}: "
                            f"{text[:40]!r}...")
        try:
            self._tree = ast.parse(text, mode="eval").body
            self.names: frozenset[str] = frozenset(self._check(self._tree))
            self._fold(self._tree)
        except SyntaxError as e:
            raise ExprError(f"not a valid expression: {text!r} ({e.msg})") from None
        except (RecursionError, MemoryError):
            raise ExprError(f"expression nested too deeply: {text[:40]!r}...") from None

    def _fold(self, node: ast.AST) -> None:
        """Evaluate every constant sub-expression once, so that an out-of-bounds one (which
        would fail for every environment) is an error now, at parse time."""
        if isinstance(node, (ast.Constant, ast.Name)):
            return  # nothing to evaluate
        if not any(isinstance(n, ast.Name) for n in ast.walk(node)):
            try:
                _eval(node, {})
            except ZeroDivisionError:
                pass  # callers treat division by zero where they evaluate (see kopt.core.spec)
            except ExprError as e:
                raise ExprError(f"{self.text!r}: {e}") from None
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._fold(child)

    def _check(self, node: ast.AST) -> set[str]:
        names: set[str] = set()
        if isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, bool)):
                raise ExprError(f"only numbers are allowed as constants in {self.text!r}")
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            names |= self._check(node.left) | self._check(node.right)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
            names |= self._check(node.operand)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                names |= self._check(v)
        elif isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
            names |= self._check(node.left)
            for c in node.comparators:
                names |= self._check(c)
        elif isinstance(node, ast.IfExp):
            names |= self._check(node.test) | self._check(node.body) | self._check(node.orelse)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in _FUNCS and not node.keywords):
            for a in node.args:
                names |= self._check(a)
        else:
            raise ExprError(
                f"{type(node).__name__} is not allowed in {self.text!r}; use numbers, names, "
                "arithmetic, comparisons, and/or/not, 'a if c else b', min/max/abs")
        return names

    def __call__(self, env: Mapping[str, Any]) -> Any:
        """Evaluate with ``env`` (name -> number).

        Raises:
            KeyError: an unbound name.
            ZeroDivisionError: a division or modulo by zero.
            ExprError: a value out of bounds (see MAX_BITS) or an operation the operands do
                not support (``1.5 << 2``); the message quotes the expression.
        """
        try:
            return _eval(self._tree, env)
        except ExprError as e:
            raise ExprError(f"{self.text!r}: {e}") from None

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise KeyError(node.id)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        try:
            return _BINOPS[type(node.op)](a, b)
        except ExprError:
            raise
        except OverflowError:
            raise ExprError(f"{ast.unparse(node)} with values {_show(a)}, {_show(b)} overflows "
                            "a float") from None
        except (TypeError, ValueError) as e:
            raise ExprError(f"{ast.unparse(node)} with values {_show(a)}, {_show(b)}: {e}"
                            ) from None
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        try:
            return _UNOPS[type(node.op)](v)
        except TypeError as e:
            raise ExprError(f"{ast.unparse(node)} with value {_show(v)}: {e}") from None
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, env) for v in node.values)
        return any(_eval(v, env) for v in node.values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, c in zip(node.ops, node.comparators):
            right = _eval(c, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
    if isinstance(node, ast.Call):
        args = [_eval(a, env) for a in node.args]
        try:
            return _FUNCS[node.func.id](*args)  # type: ignore[attr-defined]
        except TypeError as e:  # min(), abs(1, 2), min(N)
            raise ExprError(f"{node.func.id}(...): {e}") from None  # type: ignore[attr-defined]
    raise ExprError(f"cannot evaluate {ast.dump(node)}")


@lru_cache(maxsize=4096)
def parse(text: str) -> Expr:
    """Parse and validate ``text`` once (cached). Raises ExprError."""
    return Expr(text)
