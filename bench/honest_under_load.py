"""Benchmark: how often an honest CPU kernel gets a false verdict beside CPU load.

    python bench/honest_under_load.py [--runs 8] [--modes 16 17 18 19] [--hogs 2]
        [--mem-hogs 0] [--threads 2] [--calls FILE]

Runs tests/fixtures/honest/honest.cpp's kernels (default: the four OpenMP ones, two threads)
through one sandboxed CPU harness per run, as tests/test_honest.py does, with ``--hogs``
busy-looping processes (``yes``-like, one niced) beside it, and prints each run's statuses
and the count of verdicts other than ``ok``. Measured 2026-12-03 on the project's 2-core
machine, ``--runs 32`` twice in each tree, alternately: the protocol before the calls on new
sets were mixed among the samples (5181498) 4 false ``replayed`` in 256 jobs (MODE 16 three
times, MODE 17 once); mixed (d1cf681) 0 in 256
(docs/verified/2026-12-03-h200-replay-mixed.md). A timing
claim, so it lives here and not in the suite.

``--mem-hogs`` adds processes that copy 256 MB buffers in a loop (memory bandwidth and the
last-level cache, as a second test suite's builds and Ray start-ups load them);
``--calls FILE`` writes every job's timed calls in order (workers.harness ``calls_ms``,
``unseen_at``) as JSON lines and prints how much slower a call on a never-seen input set is
than the calls on seen sets next to it (the median over up to ``NEAR`` of them on either
side), beside the same figure for the seen calls themselves: the replay verdict's
permutation test assumes load lands on both alike.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_faults import artifact, job  # noqa: E402
from test_honest import ALL_SIZES, HONEST  # noqa: E402

from workers.sandbox import Sandbox  # noqa: E402

NEAR = 3  # seen calls on either side that a call is compared with
MEM_HOG = ("import torch\ntorch.set_num_threads(1)\na = torch.ones(1 << 26)\n"
           "b = torch.empty(1 << 26)\nwhile True:\n    b.copy_(a)\n")


def near_ratios(calls_ms: list[float], unseen_at: list[int]) -> tuple[list[float], list[float]]:
    """Per call, its time over the median of the up to :data:`NEAR` seen calls on each side
    of it (itself left out): (the ratios of the calls on never-seen sets, of the seen
    calls)."""
    new = set(unseen_at)
    seen = [i for i in range(len(calls_ms)) if i not in new]
    out: tuple[list[float], list[float]] = ([], [])
    for i, x in enumerate(calls_ms):
        before = [j for j in seen if j < i][-NEAR:]
        after = [j for j in seen if j > i][:NEAR]
        near = [calls_ms[j] for j in before + after]
        if near:
            out[0 if i in new else 1].append(x / statistics.median(near))
        # (a job whose calls are all on new sets has none to compare with)
    return out


def summary(records: list[dict]) -> str:
    """The neighbour ratios of ``records`` (one per job: ``calls_ms``, ``unseen_at``) as
    lines: per kind of call, how many, their median ratio, and the share over 2 (the replay
    line's factor, workers.replay ``REPLAY_FACTOR``)."""
    new: list[float] = []
    seen: list[float] = []
    for r in records:
        a, b = near_ratios(r["calls_ms"], r["unseen_at"])
        new += a
        seen += b
    lines = []
    for name, xs in (("never-seen", new), ("seen", seen)):
        if xs:
            over = sum(x > 2 for x in xs) / len(xs)
            lines.append(f"{name} calls: {len(xs)}, time over their neighbours' median: "
                         f"median {statistics.median(xs):.3f}, "
                         f"90th percentile {statistics.quantiles(xs, n=10)[-1]:.3f}, "
                         f"over 2x {100 * over:.1f} %")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--modes", type=int, nargs="+", default=[16, 17, 18, 19])
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--mem-hogs", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of the harness")
    ap.add_argument("--calls", type=Path, help="JSON lines of every job's timed calls")
    a = ap.parse_args()
    hogs = [subprocess.Popen(["nice", "-n", str(10 * i), sys.executable, "-c",
                              "while True: pass"]) for i in range(a.hogs)]
    hogs += [subprocess.Popen([sys.executable, "-c", MEM_HOG]) for _ in range(a.mem_hogs)]
    records: list[dict] = []
    bad: collections.Counter = collections.Counter()
    try:
        tmp = Path(tempfile.mkdtemp(prefix="kopt-honest-"))
        src = HONEST / "honest.cpp"
        art = artifact(tmp, src, {})
        for r in range(a.runs):
            sb = Sandbox("cpu", {"OMP_NUM_THREADS": str(a.threads)})
            sb.start()
            try:
                got = {m: sb.run(job(art, src, HONEST / "ref.py", {"N": ALL_SIZES[m],
                                 "MODE": m}, {"x": ["N"], "y": ["N"]},
                                 tolerance={"atol": 1e-5, "rtol": 1e-4}, job_key=f"m{m}"),
                                 timeout_s=120) for m in a.modes}
            finally:
                sb.close()
            print(f"run {r + 1}: " + ", ".join(f"MODE {m} {g['status']}" for m, g in got.items()),
                  flush=True)
            bad.update(f"MODE {m} {g['status']}" for m, g in got.items() if g["status"] != "ok")
            records += [{"run": r, "mode": m, "status": g["status"],
                         "calls_ms": g.get("calls_ms", []), "unseen_at": g.get("unseen_at", [])}
                        for m, g in got.items()]
    finally:
        for h in hogs:
            h.kill()
    print(f"{a.runs} runs of {len(a.modes)} kernels beside {a.hogs} hogs and {a.mem_hogs} "
          f"memory hogs (cpus: {os.cpu_count()}): not ok: {dict(bad) or 'none'}")
    if a.calls:
        a.calls.write_text("".join(json.dumps(r) + "\n" for r in records))
        print(summary(records))


if __name__ == "__main__":
    main()
