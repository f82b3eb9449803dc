"""The search strategies (kopt.strategy) as objects, each tested without Ray on
fixed fixtures: exhaustive, random, successive halving, the NCU-guided loop's decisions and
the side-by-side contest's culprit search (on a scripted device)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from kopt.core.bottleneck import Evidence
from kopt.core.catalog import load_catalog
from kopt.core.expand import Candidate, sample_key, stable_hash
from kopt.core.winner import Verdict
from kopt.loop.contests import SideBySide
from kopt.loop.guided import NO_TRIPLE, NcuLoop
from kopt.loop.state import IterState
from kopt.run.context import RunContext
from kopt.run.runner import DeviceError, Runner
from kopt.strategy import Exhaustive, Job, RandomSample, SuccessiveHalving, make
from kopt.strategy.random_sample import RANDOM_FRACTION

TIMING = {"warmup_ms": 10.0, "min_samples": 20, "max_samples": 200, "timeout_s": 30.0}


def cands(n: int) -> list[Candidate]:
    """The baseline and ``n - 1`` others, ids ``c01``..; the baseline's id sorts last."""
    base = Candidate("zz-base", (None, None, None), {}, {}, [0, 1], is_baseline=True)
    return [base] + [Candidate(f"c{k:02d}", (f"m{k}", None, None), {}, {}, [0, 1])
                     for k in range(1, n)]


def jobs_of(cs: list[Candidate], dc: str = "cpu-a", timing: dict | None = None) -> list[Job]:
    return [Job(f"{c.candidate_id}/{dc}/{d}", c, dc, d, {"N": 8 << d}, "b-" + c.candidate_id,
                timing=timing) for c in cs for d in c.dims_ok]


def ranked(*ids: str) -> list[dict[str, Any]]:
    return [{"candidate_id": c, "is_baseline": c == "zz-base"} for c in ids]


def test_exhaustive_measures_the_whole_selection_once_with_the_spec_timing():
    cs = cands(7)
    s = Exhaustive(None)
    assert s.select(iter(cs)) == cs
    assert [c.candidate_id for c in Exhaustive(3).select(iter(cs))] == ["zz-base", "c01",
                                                                        "c02"]
    assert s.first_timing() is None and s.sample_reason() == "capped by --max-candidates"
    jobs = jobs_of(cs)
    s.start(jobs)
    assert s.generate() == jobs and not s.needs_ranking()
    assert s.generate() is None


def test_random_draws_a_quarter_of_the_space_by_the_seed():
    cs = cands(12)
    for seed in (0, 1):
        got = RandomSample(None, seed).select(iter(cs))
        others = sorted(cs[1:], key=sample_key(seed))
        n = max(2, math.ceil(RANDOM_FRACTION * 12))
        assert n == 3 and got == [cs[0]] + others[:n - 1]
    assert RandomSample(None, 0).sample_reason() == "--strategy random samples 25%"
    five = RandomSample(5, 7).select(iter(cs))
    assert five == [cs[0]] + sorted(cs[1:], key=sample_key(7))[:4]
    assert RandomSample(5, 7).sample_reason() == "capped by --max-candidates"


def test_halving_keeps_the_best_third_and_the_baseline_rung_by_rung():
    cs = cands(10)  # the baseline and 9 others, each on 2 problem sizes
    s = SuccessiveHalving(None, TIMING)
    screen = {**TIMING, "min_samples": 5, "max_samples": 5, "warmup_ms": 2.0}
    assert s.first_timing() == screen
    rung0 = jobs_of(cs, timing=screen)
    s.start(rung0)
    assert s.generate() == rung0 and s.needs_ranking()
    # 10 correct candidates: keep max(ceil(10 / 3), 3) = 4 ranked first, and the baseline
    s.notify({"cpu-a": ranked("c05", "c02", "zz-base", "c09", "c01", "c03", "c04", "c06",
                              "c07", "c08")})
    rung1 = s.generate()
    assert {j.candidate.candidate_id for j in rung1} == {"c05", "c02", "c09", "zz-base"}
    assert len(rung1) == 8 and {j.rung for j in rung1} == {1}
    assert {j.timing["min_samples"] for j in rung1} == {15}
    first = next(j for j in rung0 if j.candidate.candidate_id == "c05" and j.dims_index == 0)
    assert stable_hash({"job": first.job_key, "rung": 1}) in {j.job_key for j in rung1}
    assert s.needs_ranking()
    # 3 correct (c09 failed): max(ceil(3 / 3), min(3, 3)) = 3 kept; the last rung has the
    # spec's own timing, and nothing is ranked after it
    s.notify({"cpu-a": ranked("c02", "zz-base", "c05")})
    rung2 = s.generate()
    assert {j.candidate.candidate_id for j in rung2} == {"c02", "c05", "zz-base"}
    assert {j.timing for j in rung2} == {None} and {j.rung for j in rung2} == {2}
    assert not s.needs_ranking() and s.generate() is None


def test_halving_keeps_the_baseline_when_it_failed_in_a_rung():
    """The baseline failed in rung 1 (not in the ranking): it is measured again in the last
    rung, whose ranking the loop closes on (before: left out, and the loop stopped on
    "the baseline failed")."""
    s = SuccessiveHalving(None, TIMING)
    s.start(jobs_of(cands(10)))
    s.generate()
    s.notify({"cpu-a": ranked("c05", "c02", "c09", "c01", "c03", "c04", "c06", "c07", "c08",
                              "zz-base")})
    assert {j.candidate.candidate_id for j in s.generate()} == {"c05", "c02", "c09", "c01",
                                                                "zz-base"}
    s.notify({"cpu-a": ranked("c02", "c05", "c09", "c01")})  # the baseline failed
    assert {j.candidate.candidate_id for j in s.generate()} == {"c02", "c05", "c09",
                                                                "zz-base"}


def test_halving_drops_a_class_with_nothing_correct():
    s = SuccessiveHalving(None, TIMING)
    s.start(jobs_of(cands(4), "cpu-a") + jobs_of(cands(4), "cpu-b"))
    s.generate()
    s.notify({"cpu-a": ranked("c01", "zz-base", "c02", "c03")})
    assert {j.device_class for j in s.generate()} == {"cpu-a"}
    s.notify({})
    assert s.generate() is None


def test_strategies_by_name():
    assert [type(make(n, None, 0, TIMING)).__name__ for n in ("exhaustive", "random",
                                                              "halving")] == [
        "Exhaustive", "RandomSample", "SuccessiveHalving"]
    with pytest.raises(ValueError, match="expected one of exhaustive, random, halving"):
        make("grid", None, 0, TIMING)


def row(cid: str, speedup: float, triple: list, base: bool = False) -> dict[str, Any]:
    return {"candidate_id": cid, "build_id": "b" + cid, "triple": triple, "params": {},
            "defines": {}, "speedup": speedup, "median_ms": 1.0 / speedup, "dims": "[]",
            "rel_iqr": 0.01, "is_baseline": base}


def test_the_ncu_loop_stops_a_class_whose_plan_holds_only_the_baseline():
    loop = NcuLoop(["a", "b"], 3)
    loop.exhausted(1, {"a": 1, "b": 5})  # iteration 1 always runs
    assert loop.active() == ["a", "b"]
    loop.exhausted(2, {"a": 1, "b": 5})
    assert loop.active() == ["b"] and loop.states["a"].stop == NO_TRIPLE.format(it=2)
    assert loop.contexts(["b"])["b"].selected == []


def test_the_ncu_loop_closes_an_iteration_from_contest_and_evidence():
    loop = NcuLoop(["a"], 2)
    rows = [row("x", 2.2, ["m2", None, None]), row("w", 2.0, ["m1", None, None]),
            row("bad", 3.0, ["m3", None, None]), row("base", 1.0, [None, None, None], True)]
    verdict = Verdict(winner="w", tied=["w", "x"], labels={"w": "TIED", "x": "TIED"},
                      medians_ms={"w": 0.5, "x": 0.51})
    order = loop.order(rows, verdict, {"bad": "wrong_result: off by one"})
    assert [r["candidate_id"] for r in order] == ["w", "x", "base"]
    ev = {"base": Evidence(scores={"memory": 0.9}, ranked=["memory"]),
          "w": Evidence(scores={"compute": 0.8}, ranked=["compute"])}
    st = loop.close(1, "a", order, verdict, {"bad": "wrong_result: off by one"}, ev,
                    {"m2": True})
    assert loop.states["a"] is st and st.iteration == 1 and st.stop == ""
    assert st.best["candidate_id"] == "w" and st.selected == ["m1"]
    assert st.scores_before == {"memory": 0.9} and st.bottleneck_before == "memory"
    assert st.scores_after == {"compute": 0.8} and st.bottleneck_after == "compute"
    assert st.triggered == {"m2": True} and st.tie == ["w", "x"]
    assert st.contest == {"w": {"label": "TIED", "median_ms": 0.5},
                          "x": {"label": "TIED", "median_ms": 0.51}}
    assert st.dropped == {"bad": "wrong_result: off by one"}
    # the last iteration stops the loop; no evidence: the winner's scores stay unknown
    st2 = loop.close(2, "a", [row("v", 1.9, ["m1", "m4", None]),
                              row("w", 1.0, ["m1", None, None], True)], None, {}, {}, None)
    assert st2.stop == "reached --iterations 2" and st2.selected == ["m1", "m4"]
    assert st2.scores_after == {} and st2.bottleneck_before == "compute"


def test_the_closing_names_the_best_of_every_winner_side_by_side():
    def state(it: int, base: str, best: str) -> IterState:
        return IterState(iteration=it, baseline={"candidate_id": base, "speedup": 1.0},
                         best={"candidate_id": best, "speedup": 2.0})

    hist = [state(1, "b0", "w1"), state(2, "w1", "w2"), state(3, "w2", "w2")]
    first, winner_of = NcuLoop.winners(hist[-1], hist)
    assert first["candidate_id"] == "b0" and winner_of == {"b0": 0, "w1": 1, "w2": 2}
    assert NcuLoop.winners(IterState(), []) is None

    def res(ms: float) -> dict[str, dict[str, Any]]:
        return {"[8]": {"median_ms": ms, "iqr_ms": ms * 0.01, "job_key": "k"}}

    closing, best, failed = NcuLoop.closing(first, "w2", winner_of, hist,
                                            {"b0": res(8.0), "w1": res(2.0), "w2": res(1.0)},
                                            {}, "")
    assert best == "w2" and failed == "" and closing["speedup"] == pytest.approx(8.0)
    assert closing["best"] == {"iteration": 1, "candidate_id": "w2", "speedup": 2.0}
    closing, best, failed = NcuLoop.closing(first, "w2", winner_of, hist, {}, {},
                                            "lost: device actor failed")
    assert best is None and failed == "lost: device actor failed"
    assert closing["speedup"] is None and closing["final_winner"] == "w2"
    assert NcuLoop.no_winner(first, "b0", {"b0": 0})["speedup"] == 1.0


class ScriptedDevice(Runner):
    """One device whose contests answer from a script: a contender whose build id is in
    ``wrong`` fails the check (named by its job key when ``names``), the others measure
    ``ms[build id]``; ``dead``: every call fails as a dead actor would."""

    def __init__(self, ms: dict[str, float], wrong: set[str], names: bool,
                 dead: bool = False):
        super().__init__()
        self.infos = [{"device_class": "cpu-a"}]
        self.ms, self.wrong, self.names, self.down = ms, wrong, names, dead
        self.calls: list[list[str]] = []

    def run(self, inputs):  # pragma: no cover - contests only
        raise NotImplementedError

    def collect(self, fut):  # pragma: no cover - contests only
        raise NotImplementedError

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        jobs, rounds = args[0], args[1]
        self.calls.append([j["build_id"] for j in jobs])
        if self.down:
            raise DeviceError("device actor failed: RayActorError")
        bad = [j for j in jobs if j["build_id"] in self.wrong]
        if bad:  # as workers.harness contest: the job keys at fault in ``failed``
            return {"status": "wrong_result",
                    "error": f"{bad[0]['job_key']}: out[3] off" if self.names else "mismatch",
                    **({"failed": [bad[0]["job_key"]]} if self.names else {})}
        return {"status": "ok", "results": [
            {"median_ms": self.ms[j["build_id"]], "iqr_ms": 0.01, "n_samples": rounds,
             "samples_ms": [self.ms[j["build_id"]]] * rounds} for j in jobs]}


class Faults:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.stages: list[tuple[str, str]] = []

    def on_stage(self, device_class: str, stage: str) -> None:
        self.stages.append((device_class, stage))

    def on_fault(self, message: str) -> None:
        self.seen.append(message)


def side_by_side(tmp_path: Path, device: ScriptedDevice, faults: Faults):
    from kopt.run.builder import LocalBuilder

    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in ("ba", "bb", "bc")})
    ctx = RunContext(None, tmp_path, "r1", None, builder, device, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {c: {"[8]": (f"key-{c}", f"b{c}", 1.0, 0.01), "[16]": (f"key2-{c}", f"b{c}",
                                                                     2.0, 0.01)}
               for c in ("a", "b", "c")}
    return SideBySide(ctx, 0, "cpu-a", by_cand).run()


def test_a_contender_named_by_the_error_is_dropped_and_the_rest_measured(tmp_path):
    dev, faults = ScriptedDevice({"ba": 1.0, "bc": 3.0}, {"bb"}, names=True), Faults()
    results, dropped, error = side_by_side(tmp_path, dev, faults)
    assert error == "" and dropped == {"b": "wrong_result: key2-b: out[3] off"}
    assert {c: {d: r["median_ms"] for d, r in per.items()} for c, per in results.items()} == {
        "a": {"[16]": 1.0, "[8]": 1.0}, "c": {"[16]": 3.0, "[8]": 3.0}}
    assert results["a"]["[8]"]["job_key"] == "key-a"
    assert dev.calls == [["ba", "bb", "bc"], ["ba", "bc"], ["ba", "bc"]]
    assert faults.seen == ["contest on cpu-a: candidate b failed its check (wrong_result: "
                           "key2-b: out[3] off); dropped: it cannot win"]
    # what the progress lines say meanwhile (kopt.cli.console ConsoleProgress.on_stage)
    assert faults.stages == [("cpu-a", "contest: 3 contenders re-measured side by side"),
                             ("cpu-a", "")]


def test_a_lone_contenders_progress_line_says_it_is_measured_alone(tmp_path):
    """A contest of one contender says so in the singular, "alone" (a new user read "1
    contenders re-measured side by side")."""
    from kopt.run.builder import LocalBuilder

    dev, faults = ScriptedDevice({"ba": 1.0}, set(), names=True), Faults()
    builder = LocalBuilder()
    builder.artifacts["ba"] = b"so"
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    results, dropped, error = SideBySide(ctx, 0, "cpu-a", {"a": {"[8]": (
        "key-a", "ba", 1.0, 0.01)}}).run()
    assert error == "" and dropped == {} and results["a"]["[8]"]["median_ms"] == 1.0
    assert faults.stages == [("cpu-a", "contest: 1 contender re-measured alone"),
                             ("cpu-a", "")]


def test_an_unnamed_failure_is_found_by_running_each_contender_alone(tmp_path):
    dev, faults = ScriptedDevice({"ba": 1.0, "bc": 3.0}, {"bb"}, names=False), Faults()
    results, dropped, error = side_by_side(tmp_path, dev, faults)
    assert error == "" and dropped == {"b": "wrong_result: mismatch"}
    assert dev.calls[:4] == [["ba", "bb", "bc"], ["ba"], ["bb"], ["bc"]]
    assert sorted(results) == ["a", "c"]


class Framer(ScriptedDevice):
    """Contender ``c`` (build ``bc``) prints ``a``'s job key and aborts whenever ``a``'s code
    shares its harness (red-team round 10: a crash's error holds what the dying harness
    printed); alone, each contender passes."""

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        builds = {j["build_id"] for j in args[0]}
        if {"ba", "bc"} <= builds:
            self.calls.append(sorted(builds))
            key = next(j["job_key"] for j in args[0] if j["build_id"] == "ba")
            return {"status": "crashed", "error": f"harness died: killed by SIGABRT. {key}"}
        return super().call(i, method, *args, timeout=timeout)


def test_a_crash_that_prints_a_rivals_job_key_does_not_drop_the_rival(tmp_path):
    """Only the harness's ``failed`` list names contenders at fault, never the error's text:
    ``a``, framed by ``c``'s crash, is not dropped (it was, and ``c`` won); each contender
    then passes alone, so the contest cannot run and names nobody."""
    dev, faults = Framer({"ba": 1.0, "bb": 2.0, "bc": 0.5}, set(), names=True), Faults()
    results, dropped, error = side_by_side(tmp_path, dev, faults)
    assert dropped == {} and results == {}
    assert error == ("crashed: harness died: killed by SIGABRT. key2-a (yet every contender "
                     "passes alone; nothing was dropped)")
    assert dev.calls == [["ba", "bb", "bc"], ["ba"], ["bb"], ["bc"]]


def test_a_dead_device_stops_the_contest_with_its_reason(tmp_path):
    dev, faults = ScriptedDevice({}, set(), names=True, dead=True), Faults()
    results, dropped, error = side_by_side(tmp_path, dev, faults)
    assert (results, dropped) == ({}, {})
    assert error == "lost: device actor failed: RayActorError"


class CompanyPatcher(ScriptedDevice):
    """A device whose contender ``a`` (build ``ba``, 1 ms a call) patches its harness's clock
    to 1/100 only when another contender's code shares its harness (a red-team helper's
    candidate told so from the libraries mapped in its process), and is honest alone;
    ``b`` is honest at 0.5 ms. The outside clock times what each call really takes (0.1 ms
    of preparation each), and no held sandbox used CPU."""

    REAL = {"ba": 1.0, "bb": 0.5}

    def __init__(self) -> None:
        super().__init__(self.REAL, set(), names=True)
        self.log: list[str] = []
        self.loaded: set[str] = set()

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        if method == "fresh":
            self.loaded = set()
        if method in ("fresh", "clock_end"):
            self.log.append(method)
            return None
        if method == "clock":
            job, n, _, loads_only, *_ = args  # paced: never here (0.1 ms preparations)
            ms = n * 0.1 + (0 if loads_only else n * self.REAL[job["build_id"]])
            self.log.append("clock" + ("" if loads_only else f" {job['build_id']}"))
            return {"status": "ok", "error": "", "calls": n, "inside_ms": ms,
                    "outside_ms": ms, "outside_cpu_ms": ms, "held_cpu_ms": 0.0}
        self.loaded |= {j["build_id"] for j in args[0]}
        shared = len(self.loaded) > 1
        self.ms = {b: m / 100 if b == "ba" and shared else m for b, m in self.REAL.items()}
        self.log.append(f"contest {sorted(j['build_id'] for j in args[0])}")
        return super().call(i, method, *args, timeout=timeout)


def test_a_contender_that_patches_its_clock_only_in_company_is_judged_by_its_solo_figures(
        tmp_path):
    """The loop's closing (SideBySide with the outside clock): ``a`` is flagged in the
    shared contest and cleared alone; the contest is run again and every contender clocked
    again (a red-team helper's finding: the contest run again was kept unclocked, and ``a``
    won at 0.01 ms against an honest 0.5). Flagged in company again, ``a`` is judged by its
    solo figures: 1 ms, and the honest ``b`` is the faster."""
    from kopt.run.builder import LocalBuilder

    dev, faults = CompanyPatcher(), Faults()
    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in dev.REAL})
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {c: {"[8]": (f"key-{c}", f"b{c}", 1.0, 0.01)} for c in ("a", "b")}
    results, dropped, error = SideBySide(ctx, 0, "cpu-a", by_cand, clock=True).run()
    assert (error, dropped, faults.seen) == ("", {}, [])
    assert {c: per["[8]"]["median_ms"] for c, per in results.items()} == {"a": 1.0, "b": 0.5}
    assert results["a"]["[8]"]["job_key"] == "key-a"
    contests = [x for x in dev.log if x.startswith("contest")]
    assert contests == ["contest ['ba', 'bb']", "contest ['ba']", "contest ['ba', 'bb']"]
    # after the contest run again, both contenders' calls were clocked again
    again = dev.log[dev.log.index(contests[2], dev.log.index(contests[1])):]
    assert {x for x in again if x.startswith("clock ")} == {"clock ba", "clock bb"}


class HonestClock(ScriptedDevice):
    """A device whose contests and outside clock say what each call really takes (``REAL``,
    ms), with 0.1 ms of preparation a call."""

    REAL = {"ba": 1.0, "bb": 0.5}

    def __init__(self) -> None:
        super().__init__(self.REAL, set(), names=True)

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        if method in ("fresh", "clock_end"):
            return None
        if method == "clock":
            job, n, _, loads_only, *_ = args  # paced: never here (0.1 ms preparations)
            ms = n * 0.1 + (0 if loads_only else n * self.REAL[job["build_id"]])
            return {"status": "ok", "error": "", "calls": n, "inside_ms": ms,
                    "outside_ms": ms, "outside_cpu_ms": ms, "held_cpu_ms": 0.0}
        return super().call(i, method, *args, timeout=timeout)


def test_a_contender_whose_own_job_ran_on_a_patched_clock_is_dropped_at_the_closing(
        tmp_path):
    """A red-team candidate patched its harness's clock to 1/100 in its own job only and was
    honest in every contest: its row's median (what ``kopt best`` and ``export`` show) said
    325x, and it was named over a faster honest candidate. At the closing a contender whose
    own job's median is more than 4x below its median side by side (+ 0.01 ms, the outside
    clock's rule) is ``suspect`` and dropped; ``b``, whose row agrees, stays."""
    from kopt.run.builder import LocalBuilder

    dev, faults = HonestClock(), Faults()
    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in dev.REAL})
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {"a": {"[8]": ("key-a", "ba", 0.01, 0.001)},  # its own job: 1/100 of 1.0
               "b": {"[8]": ("key-b", "bb", 0.45, 0.01)}}
    side = SideBySide(ctx, 0, "cpu-a", by_cand, clock=True)
    results, dropped, error = side.run()
    assert (error, dropped, sorted(results)) == ("", {}, ["a", "b"])
    why = side.own_figures("a")
    assert why == ("suspect: its own job's median, 0.01 ms, is more than 4x below its median "
                   "side by side at the closing, 1 ms: its own job was not timed by the "
                   "harness's clock")
    assert side.own_figures("b") == ""
    side.drop("a", why)  # kopt.loop.guided: before it is named; the best of the rest then
    assert (list(results), dropped) == (["b"], {"a": why})


@pytest.mark.parametrize("backend, suspect", [("cpu", False), ("cuda", True)])
def test_a_cpu_contest_sample_made_cold_does_not_make_an_honest_own_job_suspect(
        tmp_path, backend, suspect):
    """On a CPU device a contest turn's sample is the first call after the turn's wait, its
    harness's path gone cold: an honest 4 us vector add was 0.021-0.031 ms a sample side by
    side against 0.004-0.006 ms in its own job (this project's CI machine), past 4x + 0.01
    ms, and both honest contenders of a closing were ``suspect`` in 2 of 2 sweeps. A CPU
    device's rule allows ``OWN_CPU_SLACK_MS`` (0.05 ms) instead; a GPU's keeps 0.01 ms, and a
    CPU contender whose own job ran on a clock patched to 1/100 is still ``suspect``."""
    from kopt.run.builder import LocalBuilder

    dev = ScriptedDevice({"ba": 0.031, "bb": 1.0}, set(), names=True)
    dev.infos = [{"device_class": "cpu-a", "backend": backend}]
    builder = LocalBuilder()
    builder.artifacts.update({"ba": b"so", "bb": b"so"})
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[Faults()], common={"timing": TIMING})
    by_cand = {"a": {"[4096]": ("key-a", "ba", 0.005, 0.001)},  # honest, 4 us
               "b": {"[4096]": ("key-b", "bb", 0.01, 0.001)}}  # its own job: 1/100 of 1.0
    side = SideBySide(ctx, 0, "cpu-a", by_cand)
    results, dropped, error = side.run()
    assert (error, dropped, sorted(results)) == ("", {}, ["a", "b"])
    assert side.own_figures("a") == ("" if not suspect else (
        "suspect: its own job's median, 0.005 ms, is more than 4x below its median side by "
        "side at the closing, 0.031 ms: its own job was not timed by the harness's clock"))
    assert side.own_figures("b").startswith("suspect: its own job's median, 0.01 ms, is more "
                                            "than 4x below its median side by side at the "
                                            "closing, 1 ms")


class Rows:
    """The scheduler's emit: every job's outcome and device, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[Job, Any, dict | None]] = []

    def emit(self, job: Job, outcome: Any, info: dict | None) -> None:
        self.got.append((job, outcome, info))


def test_a_batch_moves_through_the_in_process_builder_and_runner(tmp_path):
    """The scheduler with kopt.run.builder.LocalBuilder and kopt.run.runner.LocalRunner (the device
    side's code in this process, no Ray): three vector_add candidates and a build that does
    not compile; every job is emitted once, measured or with its compile error."""
    import dataclasses

    from kopt.core.expand import iter_candidates, space_digest
    from kopt.core.spec import load_sweep
    from kopt.run.builder import LocalBuilder, build_id, build_job, job_base
    from kopt.run.runner import LocalRunner
    from kopt.run.scheduler import Scheduler
    from workers.build import compiler_identity
    from workers.status import Status

    sw = load_sweep(Path(__file__).resolve().parent.parent / "sweeps" / "vector_add")
    space = sw.space("cpu")
    digest, ident = space_digest(space), compiler_identity("cpu")
    chosen = Exhaustive(3).select(iter_candidates(space, load_catalog(), None,
                                                  source_digest=digest))
    broken = dataclasses.replace(chosen[1], candidate_id="broken",
                                 defines={**chosen[1].defines, "VEC": "(("})
    builds, jobs = {}, []
    for c in chosen + [broken]:
        bid = build_id(space, c, digest, ident)
        builds[bid] = build_job(space, c, bid, space.source_text())
        jobs.append(Job(f"job-{c.candidate_id}", c, "cpu-test", 0, space.dims[0], bid))
    runner, rows = LocalRunner("cpu", 1, "cpu-test"), Rows()
    try:
        Scheduler(LocalBuilder(), runner, job_base(sw, space), rows.emit, [], 2, {}, True,
                  {}).run(jobs, builds)
    finally:
        runner.close()
    got = {j.candidate.candidate_id: (o, info) for j, o, info in rows.got}
    # the compile error is a row as soon as its build fails; the baseline runs first
    assert [j.candidate.candidate_id for j, _, _ in rows.got] == [
        "broken", *(c.candidate_id for c in chosen)] and chosen[0].is_baseline
    for c in chosen:
        o, info = got[c.candidate_id]
        assert o.status == Status.OK and o.median_ms > 0 and o.n_samples >= 5, o
        assert o.job_key == f"job-{c.candidate_id}" and info["device_class"] == "cpu-test"
    o, info = got["broken"]
    assert o.status == "compile_error" and "operator '>' has no left operand" in o.error
    assert info is None
    # the builder's batch call: results in input order, the error a value, not raised
    bids = [jobs[-1].build_id, jobs[0].build_id]
    res = LocalBuilder().build([builds[b] for b in bids])
    assert [(r.build_id, r.ok) for r in res] == [(bids[0], False), (bids[1], True)]


class Replays(ScriptedDevice):
    """Contender ``b`` (build ``bb``) is named ``replayed`` by the contests of more than one
    contender whose turn is in ``company`` (their count so far, from 1), and ``always``
    also alone; the rest as :class:`ScriptedDevice`."""

    def __init__(self, company: set[int], always: bool = False, status: str = "replayed"
                 ) -> None:
        super().__init__({"ba": 1.0, "bb": 2.0, "bc": 3.0}, set(), names=True)
        self.company, self.always, self.seen, self.status = company, always, 0, status

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        if method == "fresh":  # the harness restarted: logged as a call of its own
            self.calls.append(["fresh"])
            return None
        jobs = args[0]
        b = [j for j in jobs if j["build_id"] == "bb"]
        if len(jobs) > 1:
            self.seen += 1
        if b and ((len(jobs) > 1 and self.seen in self.company) or self.always):
            self.calls.append([j["build_id"] for j in jobs])
            key = b[0]["job_key"]
            return {"status": self.status, "failed": [key], "failed_status": {
                        key: self.status}, "error": f"{key}: all 8 calls on input values "
                    "it had never seen" if self.status == "replayed" else f"{key}: no answer"}
        return super().call(i, method, *args, timeout=timeout)


@pytest.mark.parametrize("case", ["load", "replayer", "starved", "framed"])
def test_a_contender_named_replayed_is_dropped_only_when_so_alone_too(tmp_path, case):
    """A contest that names a contender ``replayed`` runs it alone in a fresh harness
    first: cleared there (load made it look so once: an honest kernel was named so beside
    two test suites at once), it stays and the contest is run again; replayed alone too,
    it is dropped. A ``timeout`` in company is judged alone the same way (``starved``: a
    rival's processes starved a red-team's honest contender during the checks, which run in
    every sandbox at once), and so is an ``error`` (``framed``: a red-team helper's
    processes used up the host's open files, and its honest rival's load failed in
    company)."""
    dev = {"load": Replays({1}), "replayer": Replays({1}, always=True),
           "starved": Replays({1}, status="timeout"),
           "framed": Replays({1}, status="error")}[case]
    faults = Faults()
    results, dropped, error = side_by_side(tmp_path, dev, faults)
    assert error == ""
    first = [["ba", "bb", "bc"], ["fresh"], ["bb"]]  # the size [16] first, b alone
    if case in ("load", "starved", "framed"):
        assert dropped == {} and sorted(results) == ["a", "b", "c"]
        assert dev.calls == first + [["ba", "bb", "bc"], ["ba", "bb", "bc"]]
        assert faults.seen == []
    else:
        assert dropped == {"b": "replayed: key2-b: all 8 calls on input values it had never "
                                "seen"} and sorted(results) == ["a", "c"]
        assert dev.calls == first + [["ba", "bc"], ["ba", "bc"]]


@pytest.mark.parametrize("status,company", [("replayed", {1, 2}), ("error", set(range(1, 9)))])
def test_a_contender_named_so_in_company_again_is_judged_by_its_figures_alone(
        tmp_path, status, company):
    """Named ``replayed`` (or ``error``) in company again after it was cleared alone, a
    contender is judged alone again: cleared there too, it keeps that solo contest's figures
    (3 rounds) and the contest of that size goes on without it, a fault line saying so.
    It was dropped on the second time (a red-team helper's processes used up the host's
    open files in company every time, and its honest rival's load failed: dropped), while
    one that replays only in company is held to what it does alone. ``error`` in company
    at every contest: judged so at both sizes."""
    dev, faults = Replays(company, status=status), Faults()
    results, dropped, error = side_by_side(tmp_path, dev, faults)
    assert error == "" and dropped == {} and sorted(results) == ["a", "b", "c"]
    alone, both = [["fresh"], ["bb"]], ["ba", "bb", "bc"]
    sizes = ["[16]", "[8]"] if status == "error" else ["[16]"]
    size16 = [both, *alone, both, *alone, ["ba", "bc"]]
    assert dev.calls == size16 + ([both, *alone, both, *alone, ["ba", "bc"]]
                                  if status == "error" else [both])
    for dims in ("[16]", "[8]"):
        n = 3 if dims in sizes else 30  # SOLO_ROUNDS alone, CONTEST_ROUNDS in company
        assert (results["b"][dims]["n_samples"], results["b"][dims]["median_ms"]) == (n, 2.0)
        assert results["a"][dims]["n_samples"] == results["c"][dims]["n_samples"] == 30
    assert faults.seen == [f"contest on cpu-a: candidate b was named {status} in company again "
                           "and passed alone again; judged by its figures alone (3 rounds), the "
                           f"contest of size {d} goes on without it" for d in sizes]


class CrashesInCompany(ScriptedDevice):
    """The closing's device: ``a`` (build ``ba``, 1 ms a call) is honest in the first contest,
    then ``crashed`` in every contest with rivals and honest alone; ``b`` is honest at
    0.5 ms; ``d`` (``bd``) reports 1/100 of its 1 ms, so that the outside clock drops it
    after the first contest, which is then run again with ``a`` cleared by the clock. The
    outside clock times what each call really takes (0.1 ms of preparation each). Each
    contest is logged with ``rivals`` where every job of it carries that flag."""

    REAL = {"ba": 1.0, "bb": 0.5, "bd": 1.0}

    def __init__(self) -> None:
        super().__init__({b: m / 100 if b == "bd" else m for b, m in self.REAL.items()},
                         set(), names=True)
        self.log: list[str] = []
        self.company = 0

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        if method in ("fresh", "clock_end"):
            self.log.append(method)
            return None
        if method == "clock":
            job, n, _, loads_only, *_ = args
            ms = n * 0.1 + (0 if loads_only else n * self.REAL[job["build_id"]])
            self.log.append("clock" + ("" if loads_only else f" {job['build_id']}"))
            return {"status": "ok", "error": "", "calls": n, "inside_ms": ms,
                    "outside_ms": ms, "outside_cpu_ms": ms, "held_cpu_ms": 0.0}
        jobs = args[0]
        builds = sorted(j["build_id"] for j in jobs)
        self.log.append(f"contest {builds}" + (" rivals" if all(j.get("rivals") for j in jobs)
                                               else ""))
        self.company += len(jobs) > 1
        if "ba" in builds and len(jobs) > 1 and self.company > 1:
            key = next(j["job_key"] for j in jobs if j["build_id"] == "ba")
            return {"status": "crashed", "failed": [key], "failed_status": {key: "crashed"},
                    "error": f"{key}: harness died"}
        return super().call(i, method, *args, timeout=timeout)


def test_a_contender_judged_by_its_figures_alone_is_watched_as_in_company_and_clocked_again(
        tmp_path):
    """A red-team cheater crashed in company on purpose to be judged by a solo contest, where
    its harness's clocks were left to the outside clock (4x), and won at 1.7x with a clock
    it had scaled there; another was settled after the outside clock had cleared its
    company figures, and its solo figures were never clocked. Now a contender's contests
    alone after it was named so in company carry ``rivals`` (its clocks looked at as in
    company: tests/test_turns.py), and its solo figures are clocked again."""
    from kopt.run.builder import LocalBuilder

    dev, faults = CrashesInCompany(), Faults()
    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in dev.REAL})
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {c: {"[8]": (f"key-{c}", f"b{c}", 1.0, 0.01)} for c in ("a", "b", "d")}
    results, dropped, error = SideBySide(ctx, 0, "cpu-a", by_cand, clock=True).run()
    assert error == "" and list(dropped) == ["d"] and dropped["d"].startswith("suspect"), dropped
    assert {c: (r["[8]"]["median_ms"], r["[8]"]["n_samples"]) for c, r in results.items()} == {
        "a": (1.0, 3), "b": (0.5, 30)}
    contests = [x for x in dev.log if x.startswith("contest")]
    assert contests == ["contest ['ba', 'bb', 'bd']", "contest ['bd'] rivals",
                        "contest ['ba', 'bb']", "contest ['ba'] rivals", "contest ['ba', 'bb']",
                        "contest ['ba'] rivals", "contest ['bb'] rivals"]
    settled = dev.log.index("contest ['ba'] rivals", dev.log.index("contest ['ba'] rivals") + 1)
    assert "clock ba" in dev.log[settled:dev.log.index("contest ['bb'] rivals")], dev.log
    assert faults.seen[-1].startswith("contest on cpu-a: candidate a was named crashed in "
                                      "company again and passed alone again"), faults.seen


class FlagsLogged(Replays):
    """:class:`Replays` whose calls also say which contests carried ``rivals``."""

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        if method != "fresh":
            self.flagged.append(all(j.get("rivals") for j in args[0]))
        return super().call(i, method, *args, timeout=timeout)


def test_the_one_left_beside_a_settled_rival_has_its_clocks_watched(tmp_path):
    """Two contenders; ``b`` is named ``error`` in company twice, passes alone twice and is
    settled: ``a``, left alone in the contest of that size, is timed against ``b``'s solo
    figures, so its contest carries ``rivals`` (its clocks looked at as in company) where a
    contest of one left them to the outside clock: a framer that had its rival settled
    could otherwise scale its own clock there."""
    from kopt.run.builder import LocalBuilder

    dev, faults = FlagsLogged({1, 2}, status="error"), Faults()
    dev.flagged = []
    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in ("ba", "bb")})
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {c: {"[8]": (f"key-{c}", f"b{c}", 1.0, 0.01)} for c in ("a", "b")}
    results, dropped, error = SideBySide(ctx, 0, "cpu-a", by_cand).run()
    assert error == "" and dropped == {} and sorted(results) == ["a", "b"]
    calls = [c for c in dev.calls if c != ["fresh"]]
    assert list(zip(map(tuple, calls), dev.flagged)) == [
        (("ba", "bb"), False), (("bb",), True), (("ba", "bb"), False), (("bb",), True),
        (("ba",), True)]
