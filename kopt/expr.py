"""Sweep-spec expressions: the safe parser/evaluator lives on the node side
(:mod:`workers.expr`, which the harness uses for shapes without loading the driver); its
public names are re-exported here."""

from workers.expr import MAX_BITS, Expr, ExprError, parse  # noqa: F401
