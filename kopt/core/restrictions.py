"""Sweep-spec expressions: the safe parser/evaluator lives on the node side
(:mod:`workers.expr`, which the harness uses for shapes without loading the driver); its
public names are re-exported here, with :func:`all_of`, the driver's compiled form of a
conjunction of restrictions (evaluated once per candidate of a space)."""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workers.expr import _FUNCS, MAX_BITS, Expr, ExprError, _lshift, _pow, parse  # noqa: F401

_FAST_GLOBALS: dict[str, Any] = {"__builtins__": {}, "_kopt_pow": _pow,
                                 "_kopt_lshift": _lshift, "_kopt_bool": bool,
                                 **{f"_kopt_{k}": f for k, f in _FUNCS.items()}}


class _Fast(ast.NodeTransformer):
    """Rewrites a validated tree (workers.expr.Expr) into plain Python with the same truth
    value, ~10x faster than the tree walk: bounded ``**`` and ``<<``, ``and``/``or``
    giving booleans, min/max/abs by private names, and each name either a slot of the
    values tuple or a constant folded in."""

    def __init__(self, at: Mapping[str, int], bound: Mapping[str, Any]):
        self.at, self.bound = at, bound

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.at:
            return ast.Subscript(ast.Name("_kopt_v", ast.Load()),
                                 ast.Constant(self.at[node.id]), ast.Load())
        if node.id in self.bound:
            return ast.Constant(self.bound[node.id])
        return node  # unbound: NameError, and the tree walk raises the KeyError

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        fn = {ast.Pow: "_kopt_pow", ast.LShift: "_kopt_lshift"}.get(type(node.op))
        if fn is None:
            return node
        return ast.Call(ast.Name(fn, ast.Load()), [node.left, node.right], [])

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        return ast.Call(ast.Name("_kopt_bool", ast.Load()), [node], [])

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node.args = [self.visit(a) for a in node.args]
        node.func = ast.Name(f"_kopt_{node.func.id}", ast.Load())  # type: ignore[attr-defined]
        return node


def all_of(exprs: Sequence[Expr], names: Sequence[str], bound: Mapping[str, Any]
           ) -> Callable[[Sequence[Any]], bool]:
    """A predicate over a tuple of values for ``names``: whether every expression of
    ``exprs`` is true in ``{**bound, **dict(zip(names, values))}``, compiled into one
    evaluation with ``bound`` folded in (what a restriction check costs per candidate; no
    dict is built). Any exception sends the call to each expression's own evaluation, in
    order, so it raises exactly what they raise (KeyError, ZeroDivisionError, ExprError).
    """
    if not exprs:
        return lambda values: True
    fast = _Fast({n: i for i, n in enumerate(names)}, bound)
    trees = [fast.visit(ast.parse(e.text, mode="eval").body) for e in exprs]
    tree = ast.BoolOp(ast.And(), trees) if len(trees) > 1 else trees[0]
    fn = ast.Lambda(ast.arguments([], [ast.arg("_kopt_v")], None, [], [], None, []),
                    ast.Call(ast.Name("_kopt_bool", ast.Load()), [tree], []))
    compiled = eval(compile(ast.fix_missing_locations(ast.Expression(fn)), "<all_of>", "eval"),
                    dict(_FAST_GLOBALS))  # noqa: S307 (validated trees, no builtins)

    def holds(values: Sequence[Any]) -> bool:
        try:
            return compiled(values)
        except Exception:  # noqa: BLE001,S110 - each expression raises its documented error
            pass
        env = {**bound, **dict(zip(names, values))}
        return all(e(env) for e in exprs)
    return holds


class _Inline(ast.NodeTransformer):
    """Replaces each name bound in ``defs`` (name -> a parsed definition) by a copy of its
    definition; function names (``min`` in ``min(a, b)``) stay."""

    def __init__(self, defs: Mapping[str, ast.expr]):
        self.defs = defs

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.defs[node.id]) if node.id in self.defs else node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node.args = [self.visit(a) for a in node.args]
        return node


def inline(text: str, defs: Mapping[str, str]) -> str:
    """``text`` with every name of ``defs`` (sweep.yaml's ``derived:``, name -> expression)
    replaced by its definition, parenthesised where precedence needs it (``ast.unparse``):
    ``inline("(N + BN - 1) // BN", {"BN": "BX * TN"})`` is
    ``"(N + BX * TN - 1) // (BX * TN)"``. Definitions are substituted as given, so each must
    already be inlined over the ones before it (``derived`` evaluates in order). ``text``
    comes back unchanged, byte for byte, when it names none of them: an expression without
    derived names evaluates (and hashes) as written.

    Raises:
        ExprError: ``text`` or a definition it uses does not parse (see :func:`parse`).
    """
    used = parse(text).names & defs.keys()
    if not used:
        return text
    trees = {n: ast.parse(parse(defs[n]).text, mode="eval").body for n in used}
    tree = _Inline(trees).visit(ast.parse(text, mode="eval"))
    return ast.unparse(tree)
