"""Stored values a user or another tool edited: a review's `reasons` that is not a JSON list
(`kopt wait`), a candidate's median that is not a positive number (`kopt lineage`, `kopt
report`), and an Nsight Systems export with kernel names stored as bytes or a `#` in its file
name (`kopt triage`)."""

from __future__ import annotations

import pytest

from kopt.loop.state import IterState
from kopt.store.files import StoreError
from kopt.tools.submit import Node, _settle, _take
from kopt.tools.wait import _class


def _review(reasons):
    return {"candidate_id": "c1", "accepted": False, "reasons": reasons, "speedup": 1.5,
            "median_ms": 2.0}


def _row(cid, median, speedup, dims='{"N": 8}'):
    return {"status": "ok", "candidate_id": cid, "dims": dims, "median_ms": median,
            "speedup": speedup, "compute_method": None, "memory_method": None,
            "latency_method": None}


@pytest.mark.parametrize("reasons", ["garbage", "5", '{"x": 1}'])
def test_wait_on_a_review_whose_reasons_are_not_a_json_list_is_one_line(reasons):
    """`kopt wait` raised JSONDecodeError / TypeError from a bare json.loads."""
    with pytest.raises(StoreError) as e:
        _class("cpu", IterState(iteration=1), _review(reasons), [])
    assert str(e.value).startswith(f"damaged store row: column 'reasons' holds {reasons!r}, "
                                   "not a JSON list as kopt writes it")


def test_review_reasons_that_are_not_text_are_shown_as_text():
    """`[1]` or `[{"x": 1}]` made the join of the reasons raise TypeError."""
    got = _class("cpu", IterState(iteration=1), _review('[1, {"x": 1}, "slower"]'), [])
    assert got["reasons"] == ["1", "{'x': 1}", "slower"]


@pytest.mark.parametrize("median", [-1.0, 0.0, float("nan"), float("inf"), "x"])
def test_a_node_leaves_out_a_candidate_whose_median_is_not_a_positive_number(median):
    """A negative median (an edited row) made `kopt lineage` and `kopt report` raise
    ValueError from the geometric mean; such a row is not a figure of its node."""
    n = Node(("cpu", 1, "h"), "it 1 sweep", "")
    for r in (_row("bad", median, 2.0), _row("good", 1.0, 1.25)):
        _take(n, r)
    _settle(n)
    assert (n.best, n.median_ms, n.speedup) == ("good", 1.0, 1.25)
    assert n.statuses == {"ok": 2} and n.members == ["bad", "good"]
    # with every ok row damaged, the line says so (it said "no correct
    # candidate; ok 2")
    only = Node(("cpu", 1, "h"), "it 1 sweep", "")
    for r in (_row("bad", median, 2.0), _row("worse", median, 1.0)):
        _take(only, r)
    _settle(only)
    assert only.best is None and only.line() == (
        "it 1 sweep [no methods]: no correct candidate with usable figures (2 ok rows left "
        "out: a median or speedup that is not a positive number, damaged); ok 2")


def test_triage_reads_kernel_names_stored_as_bytes_and_paths_with_hash(tmp_path):
    """An Nsight Systems export whose StringIds values are bytes made `kopt triage`
    raise TypeError; a `#` in the file's name opened (and created) another file."""
    from test_database import _nsys_db

    from kopt.store.database import read_nsys_export

    path = tmp_path / "a#b?c.sqlite"
    _nsys_db(path)
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("update StringIds set value = cast(value as blob) where id = 2")
    con.commit()
    con.close()
    ex = read_nsys_export(path)
    assert ex.strings == {1: "saxpy(float*)", 2: "saxpy", 3: "_Z5saxpyPf", 4: "layer 0"}
    assert len(ex.kernels) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a#b?c.sqlite"]  # nothing made
