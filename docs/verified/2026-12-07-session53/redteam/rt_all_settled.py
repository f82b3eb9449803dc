# ruff: noqa
"""Red-team 53: every contender named `error` in company at every contest (all of them at
once), each passes alone: all settled, at both sizes; and a settled one the closing's clock
flags alone is dropped."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_strategies import Faults, ScriptedDevice, side_by_side, TIMING  # noqa: E402

from kopt.core.catalog import load_catalog  # noqa: E402
from kopt.loop.contests import SideBySide  # noqa: E402
from kopt.run.context import RunContext  # noqa: E402


class AllBad(ScriptedDevice):
    def __init__(self):
        super().__init__({"ba": 1.0, "bb": 2.0, "bc": 3.0}, set(), names=True)

    def call(self, i, method, *args, timeout=None):
        if method in ("fresh", "clock_end"):
            self.calls.append([method])
            return None
        jobs = args[0]
        if len(jobs) > 1:
            self.calls.append([j["build_id"] for j in jobs])
            keys = [j["job_key"] for j in jobs]
            return {"status": "error", "failed": keys,
                    "failed_status": {k: "error" for k in keys}, "error": "no answer"}
        return super().call(i, method, *args, timeout=timeout)


def test_all_settled(tmp_path):
    dev, faults = AllBad(), Faults()
    results, dropped, error = side_by_side(tmp_path, dev, faults)
    print(dev.calls)
    print(faults.seen)
    assert error == "" and dropped == {}
    assert {c: {d: r["n_samples"] for d, r in per.items()} for c, per in results.items()} == {
        c: {"[8]": 3, "[16]": 3} for c in "abc"}


class ClockFlagsB(AllBad):
    """b's solo figure is patched (0.02 reported, 2.0 real); the outside clock says so."""
    REAL = {"ba": 1.0, "bb": 2.0, "bc": 3.0}

    def call(self, i, method, *args, timeout=None):
        if method == "clock":
            job, n, _, loads_only, *_ = args
            ms = n * 0.1 + (0 if loads_only else n * self.REAL[job["build_id"]])
            return {"status": "ok", "error": "", "calls": n, "inside_ms": ms,
                    "outside_ms": ms, "outside_cpu_ms": ms, "held_cpu_ms": 0.0}
        self.ms = {**self.REAL, "bb": 0.02}
        return super().call(i, method, *args, timeout=timeout)


def test_settled_then_clock_flagged(tmp_path):
    from kopt.run.builder import LocalBuilder
    dev, faults = ClockFlagsB(), Faults()
    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in dev.REAL})
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {c: {"[8]": (f"key-{c}", f"b{c}", 1.0, 0.01)} for c in "abc"}
    results, dropped, error = SideBySide(ctx, 0, "cpu-a", by_cand, clock=True).run()
    print(dropped, {c: per["[8]"]["median_ms"] for c, per in results.items()})
    assert error == "" and list(dropped) == ["b"] and sorted(results) == ["a", "c"]
