"""Trial 12 (docs/verified/2026-12-01-trial12.md): stored values a user or another tool edited
(issue 12): a review's `reasons` that is not a JSON list (Z1), a candidate's median that is
not a positive number (Z2)."""

from __future__ import annotations

import pytest

from kopt.loop import IterState
from kopt.store import StoreError
from kopt.submit import Node, _settle, _take
from kopt.wait import _class


def _review(reasons):
    return {"candidate_id": "c1", "accepted": False, "reasons": reasons, "speedup": 1.5,
            "median_ms": 2.0}


@pytest.mark.parametrize("reasons", ["garbage", "5", '{"x": 1}'])
def test_wait_on_a_review_whose_reasons_are_not_a_json_list_is_one_line(reasons):
    """Z1: `kopt wait` raised JSONDecodeError / TypeError from a bare json.loads."""
    with pytest.raises(StoreError) as e:
        _class("cpu", IterState(iteration=1), _review(reasons), [])
    assert str(e.value).startswith(f"damaged store row: column 'reasons' holds {reasons!r}, "
                                   "not a JSON list as kopt writes it")


def test_review_reasons_that_are_not_text_are_shown_as_text():
    """Z1: `[1]` or `[{"x": 1}]` made the join of the reasons raise TypeError."""
    got = _class("cpu", IterState(iteration=1), _review('[1, {"x": 1}, "slower"]'), [])
    assert got["reasons"] == ["1", "{'x': 1}", "slower"]


def _row(cid, median, speedup, dims='{"N": 8}'):
    return {"status": "ok", "candidate_id": cid, "dims": dims, "median_ms": median,
            "speedup": speedup, "compute_method": None, "memory_method": None,
            "latency_method": None}


@pytest.mark.parametrize("median", [-1.0, 0.0, float("nan"), float("inf"), "x"])
def test_a_node_leaves_out_a_candidate_whose_median_is_not_a_positive_number(median):
    """Z2: a negative median (an edited row) made `kopt lineage` and `kopt report` raise
    ValueError from the geometric mean; such a row is not a figure of its node."""
    n = Node(("cpu", 1, "h"), "it 1 sweep", "")
    for r in (_row("bad", median, 2.0), _row("good", 1.0, 1.25)):
        _take(n, r)
    _settle(n)
    assert (n.best, n.median_ms, n.speedup) == ("good", 1.0, 1.25)
    assert n.statuses == {"ok": 2} and n.members == ["bad", "good"]
