"""Benchmark: what starting a CPU harness costs, forked from a zygote and the plain way.

    python bench/harness_start.py [--n 10] [--out DIR]

Starts ``--n`` harnesses one after another in one sandbox object (workers.sandbox.Sandbox,
a CPU device, the host's isolation), each started, answered its hello and killed, as a
sweep restarts its harness after a fatal job; once forked from a zygote (workers.zygote:
the first start also starts the zygote, which imports torch) and once the plain way
(``KOPT_ZYGOTE=0``: ``unshare``, ``python -m workers.jail``, ``python -m workers.harness``),
the two runs alternating in one process, ``--rounds`` times. Per start it reports the wall
seconds from ``Sandbox.start`` to the harness's hello, and the host's CPU seconds over the
same span (all cores, from /proc/stat: what the start costs the machine, the zygote's own
work and every process of the sandbox included; run it on an otherwise idle machine).
Prints one JSON report; writes harness_start.json under --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import write_report  # noqa: E402
from workers import isolation  # noqa: E402
from workers.sandbox import Sandbox  # noqa: E402

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def busy_s() -> float:
    """CPU seconds every core of the host has spent busy since boot (/proc/stat's first
    line: every field but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) * TICK_S


def starts(how: str, n: int) -> list[dict[str, Any]]:
    """``n`` starts of one sandbox's harness, ``how`` = ``forked`` or ``plain``."""
    os.environ["KOPT_ZYGOTE"] = "1" if how == "forked" else "0"
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1", "KOPT_BENCH_START": how})
    out = []
    try:
        for _ in range(n):
            cpu0, t0 = busy_s(), time.perf_counter()
            sb.start()
            wall, cpu = time.perf_counter() - t0, busy_s() - cpu0
            out.append({"how": sb.started.split(":")[0], "wall_s": round(wall, 4),
                        "host_cpu_s": round(cpu, 3)})
            sb.kill()
    finally:
        sb.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10, help="starts per run")
    ap.add_argument("--rounds", type=int, default=2, help="forked and plain runs, alternating")
    ap.add_argument("--out", default=tempfile.gettempdir())
    args = ap.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"forked": [], "plain": []}
    for r in range(args.rounds):
        for how in (("forked", "plain") if r % 2 == 0 else ("plain", "forked")):
            runs[how] += starts(how, args.n)
    summary = {}
    for how, rows in runs.items():
        later = [x for i, x in enumerate(rows) if i % args.n]  # the first of a run starts
        summary[how] = {  # the zygote too: reported apart
            "first_wall_s": [x["wall_s"] for i, x in enumerate(rows) if i % args.n == 0],
            "median_wall_s": statistics.median(x["wall_s"] for x in later),
            "median_host_cpu_s": statistics.median(x["host_cpu_s"] for x in later),
            "started": sorted({x["how"] for x in rows})}
    report = {"host": platform.node(), "cpus": os.cpu_count(),
              "isolation": isolation.available().kind, "n": args.n, "rounds": args.rounds,
              "summary": summary,
              "wall_ratio_plain_to_forked": round(summary["plain"]["median_wall_s"]
                                                  / summary["forked"]["median_wall_s"], 1)}
    write_report(Path(args.out), "harness_start", {**report, "rows": runs})


if __name__ == "__main__":
    main()
