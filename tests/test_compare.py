"""FASTER / SLOWER / TIED (NVBench's rule on robust figures) and the contest's verdict."""

import pytest

from kopt.core.compare import geo_mean, label, rel_noise
from kopt.core.winner import contenders, decide


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
    """The final winner (iteration 3's) is slower side by side than
    iteration 1's beyond noise: iteration 1's is named, the total is the first baseline's
    median over its median (no product), and the note says the later iterations did not
    improve on it."""
    from kopt.core.winner import close_loop

    winner_of = {"b": 0, "w1": 1, "w2": 2, "w3": 3}
    side = {"b": [(10.0, 0.1)], "w1": [(1.0, 0.01)], "w2": [(1.4, 0.01)], "w3": [(1.5, 0.01)]}
    c = close_loop("b", "w3", winner_of, side)
    assert c["best_id"] == "w1" and c["speedup"] == pytest.approx(10.0)
    assert c["labels"] == {"b": "SLOWER", "w1": "TIED", "w2": "SLOWER", "w3": "SLOWER"}
    assert c["note"].endswith("the iterations after 1 did not improve on it")
    # no earlier winner is faster beyond noise (w1 within w2's 30% noise): w2 stays; the
    # only note is that noise (kopt.core.winner NOISY_REL)
    c = close_loop("b", "w2", winner_of, {"b": side["b"], "w1": [(1.2, 0.5)],
                                          "w2": [(1.4, 0.6)]})
    assert c["best_id"] == "w2" and c["speedup"] == pytest.approx(10 / 1.4)
    assert c["note"].startswith("side by side, the samples of iteration 1's winner, "
                                "iteration 2's winner were noisy"), c["note"]


def test_the_loops_close_says_when_its_contenders_were_noisy():
    """A closing contender whose side-by-side IQR is a third of its median or more (sigma
    above 25 %: other work on the machine) makes the closing note say the verdict may not
    hold and to run again on an idle machine (a new user's loaded run named the baseline
    best over a winner whose IQR exceeded its median, without a word); none below."""
    from kopt.core.winner import close_loop

    winner_of = {"b": 0, "w1": 1}
    quiet = close_loop("b", "w1", winner_of, {"b": [(1.894, 0.02)], "w1": [(1.3, 0.13)]})
    assert quiet["note"] == "" and quiet["best_id"] == "w1"
    loud = close_loop("b", "w1", winner_of, {"b": [(1.894, 0.02)], "w1": [(3.232, 3.67)]})
    assert loud["best_id"] == "b" and loud["labels"]["w1"] == "SLOWER"
    assert loud["note"].endswith(
        "side by side, the samples of iteration 1's winner were noisy (IQR up to 114% of the "
        "median): other work on the machine slowed some of them, so this verdict may not "
        "hold: run the sweep again on an idle machine"), loud["note"]
    # at the threshold: IQR / 1.349 / median = 0.25 is not above it
    edge = close_loop("b", "w1", winner_of, {"b": [(2.0, 0.02)], "w1": [(1.0, 0.25 * 1.349)]})
    assert "noisy" not in edge["note"]


def test_the_loops_close_never_names_a_contender_that_failed_its_check():
    from kopt.core.winner import close_loop

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


def test_the_noise_model_edge_cases():
    """kopt.core.compare's one rule, with real values: NVBench's smaller noise, kopt's 1% floor,
    either side of the threshold, zero and unknown IQRs, inclusive."""
    from kopt.core.compare import MIN_REL_NOISE, speedup_label, speedup_threshold, threshold

    # zero IQR on both sides: the floor alone; 0.99% apart ties, 1.01% does not
    assert threshold(0.0, 0.0) == MIN_REL_NOISE == 0.01
    assert label((2.0, 0.0), (1.9802, 0.0)) == "TIED"
    assert label((2.0, 0.0), (1.9798, 0.0)) == "FASTER"
    assert label((2.0, None), (2.03, None)) == "SLOWER"  # unknown IQR: no noise
    # one side noiseless: NVBench's smaller noise is 0, the floor decides
    assert threshold(0.0, 0.2) == 0.01 and label((1.0, 0.0), (0.97, 0.27)) == "FASTER"
    # inclusive: the larger one (0.27 / 1.349 / 0.97 = 20.6%) ties the same pair
    assert threshold(0.0, 0.2, inclusive=True) == 0.2
    assert label((1.0, 0.0), (0.97, 0.27), inclusive=True) == "TIED"
    # above the floor: 3% sigma each, 2.9% apart ties, 3.1% apart does not
    assert threshold(0.03, 0.05) == 0.03 and threshold(0.03, 0.05, inclusive=True) == 0.05
    q = 0.03 * 1.349
    assert label((1.0, q), (1.029, q * 1.029)) == "TIED"
    assert label((1.0, q), (1.031, q * 1.031)) == "SLOWER"
    # the speedup form is the same rule: 1 - 1/s against the threshold of the two IQRs
    assert speedup_threshold(0.04, 0.0, inclusive=True) == pytest.approx(0.04 / 1.349)
    assert speedup_threshold(0.04, 0.0) == 0.01
    assert speedup_label(1.0102, 0.0, 0.0) == "FASTER"  # 1 - 1/1.0102 = 1.01%
    assert speedup_label(1.0101, 0.0, 0.0) == "TIED"  # 1 - 1/1.0101 = 0.99990%
    assert speedup_label(0.98, 0.0, 0.0) == "SLOWER"
    assert speedup_label(1.035, 0.04, 0.04, inclusive=True) == "FASTER"
    assert speedup_label(1.06, 0.0, 0.1, inclusive=True) == "TIED"
    with pytest.raises(ValueError):
        speedup_label(0.0, 0.0, 0.0)


def test_one_geometric_mean_across_sizes():
    from kopt.core.compare import across_sizes

    assert geo_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geo_mean(iter([3.0])) == pytest.approx(3.0)
    for bad in ([], [1.0, 0.0], [-1.0]):
        with pytest.raises(ValueError, match="geometric mean needs positive values"):
            geo_mean(bad)
    # medians 1 ms and 4 ms (rel IQR 10% and 5%): 2 ms with the worst 10%
    assert across_sizes([(1.0, 0.1), (4.0, 0.2)]) == pytest.approx((2.0, 0.2))
    assert across_sizes([(1.0, None)]) == (1.0, 0.0)


def test_rank_takes_the_geometric_mean_and_worst_noise_across_sizes(tmp_path):
    """kopt.loop.state.rank summarises a candidate's sizes with kopt.core.compare.geo_mean (no SQL
    geometric mean of its own) and its worst relative IQR, best speedup first."""
    from kopt.loop.state import rank
    from kopt.store.files import write_table

    def row(cid, dims, med, iqr, base=False):
        return {"run_id": "r1", "sweep": "s", "iteration": 1, "job_key": f"{cid}{dims}",
                "candidate_id": cid, "device_class": "cpu", "dims": dims, "status": "ok",
                "median_ms": med, "iqr_ms": iqr, "is_baseline": base, "params": "{}",
                "defines": "{}"}

    write_table(tmp_path, "candidates", "s", "r1", [
        row("b", '{"N": 1}', 1.0, 0.01, True), row("b", '{"N": 2}', 8.0, 0.08, True),
        row("a", '{"N": 1}', 0.5, 0.05), row("a", '{"N": 2}', 8.0, None),
        row("c", '{"N": 1}', 0.25, 0.0), row("c", '{"N": 2}', 64.0, 0.0)])
    ranked = rank(tmp_path, "r1", 1, "cpu")
    assert [r["candidate_id"] for r in ranked] == ["a", "b", "c"]
    a, b, c = ranked
    assert a["speedup"] == pytest.approx(2 ** 0.5) and a["rel_iqr"] == pytest.approx(0.1)
    assert b["speedup"] == pytest.approx(1.0) and b["rel_iqr"] == pytest.approx(0.01)
    assert c["speedup"] == pytest.approx(0.5 ** 0.5) and c["rel_iqr"] == 0.0


def test_a_long_drop_reason_is_cut_at_a_word_with_an_ellipsis():
    """The closing note quoted the final winner's drop reason cut at 200 characters, mid
    word ("... (2.092 ms or more): solve k)"): it is cut at a whole word, marked " ..."."""
    from kopt.core.winner import close_loop

    why = ("replayed: calls on input values it had never seen took 4.785 ms or more, calls "
           "on values seen before 0.7963 ms or less, and again on 4 more new input sets "
           "(2.092 ms or more): solve keeps results by input content and replays them, "
           "which a real kernel does not do; " * 3)
    c = close_loop("b", "w1", {"b": 0, "w1": 1}, {"b": [(1.0, 0.01)]}, {"w1": why})
    quoted = c["note"].split("failed the closing contest (")[1].rsplit(") and cannot", 1)[0]
    assert quoted.endswith(" ...") and len(quoted) <= 300
    assert why.startswith(quoted[:-4]) and why[len(quoted) - 4] == " "


def test_contests_rows_say_fastest_for_a_clear_winner_and_tied_for_a_tie():
    from kopt.loop.contests import row_labels

    # labels against the reference, whose own is TIED (kopt.core.winner.decide)
    assert row_labels({"a": "TIED", "b": "SLOWER"}) == {"a": "FASTEST", "b": "SLOWER"}
    assert row_labels({"a": "TIED", "b": "TIED", "c": "SLOWER"}) == {
        "a": "TIED", "b": "TIED", "c": "SLOWER"}
    assert row_labels({}) == {}
    # a lone contender (the rest dropped), or one beside a FASTER rival: no FASTEST
    assert row_labels({"a": "TIED"}) == {"a": "TIED"}
    assert row_labels({"a": "TIED", "b": "FASTER", "c": "SLOWER"}) == {
        "a": "TIED", "b": "FASTER", "c": "SLOWER"}


def test_the_closing_names_none_a_rival_is_faster_than_beyond_noise():
    """NVBench's rule (the smaller of two noises) is not transitive: B (quiet) is FASTER
    than the final winner F, Z (noisy) is TIED with F but FASTER than B. The closing does
    not stop at B: it names Z, which no contender is faster than beyond noise (red-team
    review: B was named, its row FASTEST beside Z's FASTER)."""
    from kopt.core.winner import close_loop

    got = close_loop("b0", "f", {"b0": 0, "b": 1, "z": 2, "f": 3},
                     {"b0": [(2.0, 0.02)], "b": [(0.8, 0.008)], "z": [(0.78, 0.4)],
                      "f": [(1.0, 0.3)]})
    assert got["best_id"] == "z", got
    assert {c: v for c, v in got["labels"].items() if v == "FASTER"} == {}, got


def test_a_closing_best_within_noise_of_the_first_baseline_says_so():
    """A loop whose named best is TIED with the first baseline side by side says its
    speedup is no gain beyond noise (a new user's 6-candidate first look printed 1.01x the
    first baseline and nothing else); a clear gain says nothing of the kind."""
    from kopt.core.winner import close_loop

    tied = close_loop("b0", "w", {"b0": 0, "w": 1}, {"b0": [(1.817, 0.79)],
                                                    "w": [(1.799, 0.79)]})
    assert tied["best_id"] == "w" and tied["labels"] == {"b0": "TIED", "w": "TIED"}
    assert "within noise of the first baseline (TIED)" in tied["note"], tied
    clear = close_loop("b0", "w", {"b0": 0, "w": 1}, {"b0": [(2.0, 0.01)],
                                                     "w": [(1.0, 0.01)]})
    assert clear["labels"]["b0"] == "SLOWER" and "within noise" not in clear["note"], clear
