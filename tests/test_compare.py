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


def test_the_loops_close_names_an_earlier_winner_faster_side_by_side():
    """Issue 11 item 8: the final winner (iteration 3's) is slower side by side than
    iteration 1's beyond noise: iteration 1's is named, the total is the first baseline's
    median over its median (no product), and the note says the later iterations did not
    improve on it."""
    from kopt.contest import close_loop

    winner_of = {"b": 0, "w1": 1, "w2": 2, "w3": 3}
    side = {"b": [(10.0, 0.1)], "w1": [(1.0, 0.01)], "w2": [(1.4, 0.01)], "w3": [(1.5, 0.01)]}
    c = close_loop("b", "w3", winner_of, side)
    assert c["best_id"] == "w1" and c["speedup"] == pytest.approx(10.0)
    assert c["labels"] == {"b": "SLOWER", "w1": "TIED", "w2": "SLOWER", "w3": "SLOWER"}
    assert c["note"].endswith("the iterations after 1 did not improve on it")
    # no earlier winner is faster beyond noise (w1 within w2's 30% noise): w2 stays, no note
    c = close_loop("b", "w2", winner_of, {"b": side["b"], "w1": [(1.2, 0.5)],
                                          "w2": [(1.4, 0.6)]})
    assert c["best_id"] == "w2" and c["note"] == "" and c["speedup"] == pytest.approx(10 / 1.4)


def test_the_loops_close_never_names_a_contender_that_failed_its_check():
    from kopt.contest import close_loop

    winner_of = {"b": 0, "w1": 1, "w2": 2}
    c = close_loop("b", "w2", winner_of, {"b": [(4.0, 0.01)], "w1": [(2.0, 0.01)]},
                   {"w2": "wrong_result: out differs"})
    assert c["best_id"] == "w1" and c["speedup"] == pytest.approx(2.0)
    assert c["dropped"] == {"w2": "wrong_result: out differs"} and "w2" not in c["medians_ms"]
    assert c["note"].startswith("the final winner, iteration 2's winner, failed the closing "
                                "contest (wrong_result: out differs)")
    # the first baseline failed: no total, and it is not named either
    c = close_loop("b", "w2", winner_of, {"w1": [(2.0, 0.01)], "w2": [(1.0, 0.01)]},
                   {"b": "crashed: SIGSEGV"})
    assert c["best_id"] == "w2" and c["speedup"] is None
    with pytest.raises(ValueError):
        close_loop("b", "w2", winner_of, {}, {"b": "x", "w1": "x", "w2": "x"})
