# ruff: noqa
"""Red-team 53, attack A: at the closing (clock=True), a contender already cleared by the
outside clock at a size is later settled (named crashed in company twice, passed alone
twice): _judged_alone calls _clocked([c], dims, alone), which SKIPS contenders already in
self.clocked, so the settled solo figures (from a harness whose clock the cheater patched)
are never timed outside its process."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_strategies import TIMING, Faults, ScriptedDevice  # noqa: E402

from kopt.core.catalog import load_catalog  # noqa: E402
from kopt.loop.contests import SideBySide  # noqa: E402
from kopt.run.context import RunContext  # noqa: E402


class Settler(ScriptedDevice):
    """a (ba): real 1.0 ms. Honest in the first 3-way contest (so the clock clears it), then
    crashed in every contest of >1 contender, and alone reports 1/100 (patched clock).
    b (bb): honest 0.5 ms. d (bd, accomplice): patched clock always (reports 0.01, real 1.0):
    the outside clock flags it in company and alone -> dropped -> the contest reruns with
    self.clocked left as it was."""

    REAL = {"ba": 1.0, "bb": 0.5, "bd": 1.0}

    def __init__(self) -> None:
        super().__init__(dict(self.REAL), set(), names=True)
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
        builds = [j["build_id"] for j in jobs]
        self.log.append(f"contest {builds}")
        if len(jobs) > 1:
            self.company += 1
        if "ba" in builds and len(jobs) > 1 and self.company > 1:
            key = next(j["job_key"] for j in jobs if j["build_id"] == "ba")
            self.calls.append(builds)
            return {"status": "crashed", "failed": [key], "failed_status": {key: "crashed"},
                    "error": f"{key}: harness died"}
        patched = {"bd"} | ({"ba"} if len(jobs) == 1 else set())
        self.ms = {b: (m / 100 if b in patched else m) for b, m in self.REAL.items()}
        return super().call(i, method, *args, timeout=timeout)


def test_settled_contender_skips_the_outside_clock(tmp_path):
    from kopt.run.builder import LocalBuilder

    dev, faults = Settler(), Faults()
    builder = LocalBuilder()
    builder.artifacts.update({b: b"so" for b in dev.REAL})
    ctx = RunContext(None, tmp_path, "r1", None, builder, dev, load_catalog(),
                     observers=[faults], common={"timing": TIMING})
    by_cand = {c: {"[8]": (f"key-{c}", f"b{c}", 1.0, 0.01)} for c in ("a", "b", "d")}
    side = SideBySide(ctx, 0, "cpu-a", by_cand, clock=True)
    results, dropped, error = side.run()
    print("log:", dev.log)
    print("faults:", faults.seen)
    print("dropped:", dropped)
    print("results:", {c: per["[8]"]["median_ms"] for c, per in results.items()})
    print("own_figures(a):", repr(side.own_figures("a")))
    # FOOLED if a keeps 0.01 ms (its real time is 1.0 ms) and beats honest b (0.5 ms)
    assert results["a"]["[8]"]["median_ms"] == 0.01
    assert "d" in dropped and error == ""
