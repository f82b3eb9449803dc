"""Cold vs warm (issue 14.3): one sweep run alone ``--cold`` times, then on a kopt service
(`kopt serve start`, its own Ray head on this machine) ``--warm`` times; per run the process
wall, the run's ``devices`` phase and its first result (seconds since the sweep's process
started, from the run's ``phases`` rows), and the service's own start-up.

    python bench/warm_queue.py sweeps/sgemm_kt -- --backend cuda

Everything after ``--`` goes to each `kopt sweep`. Every run writes a store of its own;
the build cache (a fresh ``$KOPT_CACHE`` for the whole bench) is empty for the first cold run
only, so the second cold run and the warm runs differ by their devices alone.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kopt.store.database import Database

RUN_ID = re.compile(r"run (\d{8}-\d{6}-[0-9a-f]{6})")


def kopt(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run ``kopt ARGS``; returns (process wall s, stdout + stderr). Exits on failure."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", *args], capture_output=True,
                       text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"kopt {' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return wall, p.stdout + p.stderr


def one_sweep(label: str, sweep: str, extra: list[str], env: dict[str, str],
              tmp: Path) -> dict[str, float | str]:
    """One `kopt sweep` into a store of its own: its figures."""
    store = tmp / f"store-{label}"
    wall, out = kopt(["sweep", sweep, "--store", str(store), *extra], env)
    m = RUN_ID.search(out)
    if m is None:
        sys.exit(f"{label}: no run id in the output: {out[-2000:]}")
    rows = Database(store).phases(m.group(1))
    run = {r["phase"]: r for r in rows if not r.get("device")}
    return {"run": label, "wall_s": wall,
            "devices_s": run["devices"]["end_s"] - run["devices"]["start_s"],
            "first_result_s": run["first_result"]["end_s"] if "first_result" in run else -1.0,
            "run_s": run["run"]["end_s"] - run["run"]["start_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep")
    ap.add_argument("--cold", type=int, default=2, help="runs without the service (first)")
    ap.add_argument("--warm", type=int, default=2, help="runs on the service (then)")
    ap.add_argument("extra", nargs="*", help="after --: options of every `kopt sweep`")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kopt-warm-"))
    env = {**os.environ, "KOPT_CACHE": str(tmp / "cache")}
    backend = [x for k, x in enumerate(a.extra) if k and a.extra[k - 1] == "--backend"]
    out = [one_sweep(f"cold {k + 1}", a.sweep, a.extra, env, tmp) for k in range(a.cold)]
    start_s, text = kopt(["serve", "start", "--backend", (backend or ["auto"])[0]], env)
    print(text.strip().splitlines()[0])
    try:
        out += [one_sweep(f"warm {k + 1}", a.sweep, [*a.extra, "--queue"], env, tmp)
                for k in range(a.warm)]
    finally:
        kopt(["serve", "stop"], env)
    print(f"kopt serve start: {start_s:.1f} s (once)")
    print(f"{'run':8} {'wall s':>8} {'run s':>8} {'devices s':>10} {'first result s':>15}")
    for r in out:
        print(f"{r['run']:8} {r['wall_s']:8.1f} {r['run_s']:8.1f} {r['devices_s']:10.2f} "
              f"{r['first_result_s']:15.2f}")


if __name__ == "__main__":
    main()
