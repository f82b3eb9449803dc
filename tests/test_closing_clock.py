"""The loop's closing with a contender that patches its harness's clock: the outside clock
(kopt.core.clock) in a whole CPU sweep. Its own file: a whole three-iteration loop, run
beside the other files' tests (pytest's --dist loadfile)."""

import os

from test_pipeline import FlipAtClosing, _closing_rows, _states

from kopt.core.spec import load_sweep
from kopt.driver.sweep import run_sweep
from kopt.loop import contests
from kopt.store.database import query


def test_a_closing_contender_that_patches_the_harness_clock_is_suspect_and_dropped(
        ray_local, copy_fixture, tmp_path, monkeypatch):
    """As test_pipeline.py's closing-contest test, but at the closing the final winner
    (with C) computes correctly, at 4x its work, and has Python scale the harness's clock
    by 1/25 (attack MODE 10 at 1/25: tests/fixtures/steps/steps.cpp says why): at 1x its
    work it was named best at about 25x. Every contender of the closing contest runs in a
    harness of its own (workers.turns), where a clock replaced during the contest is the
    contender's own doing: the patcher is `suspect` there and dropped; the honest ones,
    measured side by side again without it and each re-timed by the clock outside its
    process, are not, and iteration 1's winner is named best as before. (When contenders
    shared one harness, every median there was scaled, and the outside clock found the
    patcher only after judging each contender alone.)"""
    d = copy_fixture("steps")
    trigger = tmp_path / "closing-started"
    src = d / "steps.cpp"
    src.write_text(f'#define TRIGGER_FILE "{trigger}"\n#define CLOCK_TRICK 1\n'
                   + src.read_text())

    paced_args = []  # what the closing lets the outside clock do on this CPU device
    real = contests.outside_blocks

    def spy(clock, median_ms, paced=False):
        paced_args.append(paced)
        return real(clock, median_ms, paced=paced)

    monkeypatch.setattr(contests, "outside_blocks", spy)
    obs = FlipAtClosing(trigger)
    store = tmp_path / "store"
    s = run_sweep(load_sweep(d), store, backend="cpu", observers=[obs])
    st = s.states["cpu-" + os.uname().machine]
    states = _states(store)
    base = states[1]["baseline"]["candidate_id"]
    w1, w2, w3 = (states[k]["best"]["candidate_id"] for k in (1, 2, 3))
    fin = _closing_rows(store)
    assert set(fin) == {base, w1, w2, w3}
    assert fin[w3] == (None, None, "suspect", False)
    assert [c for c, x in fin.items() if x[3]] == [w1]
    # re-measured in a fresh harness: honest figures (iteration 2's winner does 64x its
    # work at the closing, 8x iteration 1's), not a 25th of them
    assert fin[w2][2] == fin[base][2] == "SLOWER" and fin[w2][0] > 4 * fin[w1][0]
    assert fin[base][0] > 8 * fin[w1][0]
    closing = st.closing
    assert closing["best"]["candidate_id"] == w1 and list(closing["dropped"]) == [w3]
    assert closing["dropped"][w3].startswith("suspect: ")
    assert ("code in its own harness's process replaced time.perf_counter_ns during a "
            "contest") in closing["dropped"][w3]
    assert any(w3 in f and "suspect" in f for f in obs.faults), obs.faults
    # the honest three, each re-timed by the clock outside its process (at least a block
    # each; more where a try's block was inconclusive)
    _, rows = query("select count(*) from phases where phase = 'clock'", store)
    assert rows[0][0] >= 3
    # a CPU device times a call cheaper than its preparation one call at a time
    # (kopt.core.clock ``paced_blocks``)
    assert len(paced_args) == rows[0][0] and all(p is True for p in paced_args), paced_args
