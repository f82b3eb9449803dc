"""FASTER / SLOWER / TIED (NVBench's rule on robust figures) and the contest's verdict."""

import pytest

from kopt.compare import geo_mean, label, rel_noise
from kopt.contest import contenders, decide


def test_labels_follow_the_smaller_noise_with_a_one_percent_floor():
    assert rel_noise(1.0, 0.1349) == pytest.approx(0.1)
    # 5% apart; noises 10% and 1%: the smaller (1%) decides -> a real difference
    assert label((1.0, 0.1349), (0.95, 0.0095 * 1.349)) == "FASTER"
    assert label((1.0, 0.1349), (1.05, 0.0105 * 1.349)) == "SLOWER"
    # both noisy (10%): 5% apart is within noise
    assert label((1.0, 0.1349), (0.95, 0.1349 * 0.95)) == "TIED"
    # noiseless samples: the 1% floor still ties 0.5% apart
    assert label((1.0, 0.0), (0.995, 0.0)) == "TIED"
    assert label((1.0, 0.0), (0.98, 0.0)) == "FASTER"
    # screening takes the larger noise: 5% apart, noises 10% and 1% -> a contender
    assert label((1.0, 0.1349), (0.95, 0.0095 * 1.349), inclusive=True) == "TIED"
    with pytest.raises(ValueError):
        rel_noise(0.0, 0.1)
    assert geo_mean([1.0, 4.0]) == pytest.approx(2.0)


def _r(cid, sp, triple):
    return {"candidate_id": cid, "speedup": sp, "triple": triple}


def test_contenders_and_the_simplest_member_of_a_tie_wins():
    ranked = [_r("a", 2.0, ["c.x", "m.y", None]), _r("b", 1.99, ["c.x", None, None]),
              _r("c", 1.5, [None, None, None])]
    per_dims = {"a": [(1.0, 0.05)], "b": [(1.005, 0.05)], "c": [(1.33, 0.01)]}
    cands = contenders(ranked, per_dims)
    assert [c["candidate_id"] for c in cands] == ["a", "b"]  # c is clearly slower
    v = decide(cands, {"a": [(1.0, 0.04)], "b": [(1.002, 0.04)]})
    assert v.winner == "b" and v.tied == ["a", "b"] and v.labels == {"a": "TIED", "b": "TIED"}
    # side by side, b is clearly slower: a wins outright
    v = decide(cands, {"a": [(1.0, 0.001)], "b": [(1.10, 0.001)]})
    assert v.winner == "a" and v.tied == ["a"] and v.labels["b"] == "SLOWER"
    with pytest.raises(ValueError):
        decide(cands, {})
