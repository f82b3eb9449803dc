"""Benchmark: a finished run's wall time against its bound (issue #5, ``overhead``).

    python bench/overhead.py RUN_ID [--store DIR] [--cores N] [--devices N]

The bound is what the run could not have beaten with perfect scheduling:
``max(compile CPU-seconds / cores, device busy seconds / devices)``, both from the run's
``finished`` row in the store (``runs.compile_cpu_s``: the seconds of every build compiled in
this run, cache hits excluded; ``runs.device_busy``: JSON actor -> seconds the actor spent
in jobs). The ratio is ``runs.wall_s / bound``; target <= 1.3 on the H200 sgemm sweep.

Cores: the Ray cluster's CPUs during the run, read from the run's ``env`` JSON
(``cluster_cpus``) when the run recorded them; for runs that did not, ``--cores``
(default: this machine's ``os.cpu_count()``), and the output says which. Devices: the
number of device actors in ``device_busy`` (or ``--devices``). Each device actor holds one
Ray CPU, so the output also gives the compile bound over the CPUs left to builds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


class OverheadError(RuntimeError):
    """The run is missing or did not record the figures the bound needs."""


def overhead(run_id: str, store: Path, cores: float | None = None,
             devices: int | None = None) -> dict[str, Any]:
    """The figures of ``run_id``'s bound and ratio as a dict (seconds, counts, sources).

    Raises:
        OverheadError: no such run, the run did not finish, or it has no
            ``compile_cpu_s``/``device_busy`` (a run from before they were recorded).
    """
    from kopt.store.database import run_record

    rec = run_record(store, run_id)
    if rec is None:
        raise OverheadError(f"no run {run_id} in {store}")
    if rec.get("status") != "finished":
        raise OverheadError(f"run {run_id} is {rec.get('status')!r}, not finished: its wall "
                            "time is not a sweep's")
    if rec.get("compile_cpu_s") is None or rec.get("device_busy") is None:
        raise OverheadError(f"run {run_id} has no compile_cpu_s/device_busy (written by kopt "
                            "since commit 5a23613); re-run the sweep")
    env = json.loads(rec.get("env") or "{}")
    busy = json.loads(rec["device_busy"])
    if cores is not None:
        cores_src = "--cores"
    elif env.get("cluster_cpus"):
        cores, cores_src = float(env["cluster_cpus"]), "the run's env.cluster_cpus"
    else:
        cores, cores_src = float(os.cpu_count() or 1), "os.cpu_count() here (not recorded)"
    n_dev = devices or len(busy) or len(json.loads(rec.get("devices") or "[]")) or 1
    busy_s = float(sum(busy.values()))
    compile_s = float(rec["compile_cpu_s"])
    compile_bound, device_bound = compile_s / cores, busy_s / n_dev
    bound = max(compile_bound, device_bound)
    wall = float(rec["wall_s"])
    return {"run_id": run_id, "sweep": rec["sweep"], "backend": rec["backend"],
            "n_candidates": rec["n_candidates"], "n_jobs": rec["n_jobs"], "wall_s": wall,
            "compile_cpu_s": compile_s, "cores": cores, "cores_source": cores_src,
            "compile_bound_s": compile_bound, "device_busy_s": busy_s, "device_busy": busy,
            "devices": n_dev, "device_bound_s": device_bound, "bound_s": bound,
            "bound_by": "compile" if compile_bound >= device_bound else "devices",
            "ratio": wall / bound if bound > 0 else float("inf"),
            # per device actor: share of the run it was busy, and idle waiting for builds
            "busy_fraction": {k: v / wall for k, v in busy.items()} if wall > 0 else {},
            "wait_build_fraction": {k: v / wall for k, v in json.loads(
                rec.get("device_wait_build") or "{}").items()} if wall > 0 else {}}


def print_overhead(o: dict[str, Any]) -> None:
    """Print the figures of :func:`overhead` as the benchmark's report."""
    print(f"run {o['run_id']} ({o['sweep']}, {o['backend']}): {o['n_candidates']} candidates, "
          f"{o['n_jobs']} jobs")
    print(f"wall                                  {o['wall_s']:9.2f} s")
    print(f"compile CPU-s / cores                 {o['compile_cpu_s']:9.2f} / {o['cores']:g} "
          f"= {o['compile_bound_s']:.2f} s   (cores: {o['cores_source']})")
    busy = ", ".join(f"{k} {v:.2f}" for k, v in sorted(o["device_busy"].items()))
    print(f"device busy s / devices               {o['device_busy_s']:9.2f} / {o['devices']} "
          f"= {o['device_bound_s']:.2f} s   ({busy})")
    print(f"bound (max, {o['bound_by']})".ljust(38) + f"{o['bound_s']:9.2f} s")
    free = o["cores"] - o["devices"]
    if free > 0:  # context: each device actor holds one Ray CPU that builds cannot use
        print(f"  (builds had {free:g} CPUs beside the {o['devices']} device actor(s): compile "
              f"bound {o['compile_cpu_s'] / free:.2f} s)")
    print(f"overhead ratio wall / bound           {o['ratio']:9.2f}   "
          f"(issue #5 target <= 1.3 on the H200 sgemm sweep)")
    for k in sorted(o["busy_fraction"]):
        w = o["wait_build_fraction"].get(k)
        print(f"  {k}: busy {100 * o['busy_fraction'][k]:.1f}% of the wall"
              + (f", idle waiting for builds {100 * w:.1f}%" if w is not None else ""))


def main() -> None:
    """CLI: print the overhead ratio of one finished run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_id")
    ap.add_argument("--store", type=Path, default=None,
                    help="store root (default: $KOPT_STORE or ./kopt-store)")
    ap.add_argument("--cores", type=float, default=None,
                    help="CPUs the builds had (default: the run's record, else os.cpu_count())")
    ap.add_argument("--devices", type=int, default=None,
                    help="devices the run had (default: the actors in runs.device_busy)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args()
    from kopt.store.files import default_root

    try:
        o = overhead(a.run_id, a.store or default_root(), a.cores, a.devices)
    except OverheadError as e:
        sys.exit(f"overhead: {e}")
    if a.json:
        print(json.dumps(o, indent=2))
    else:
        print_overhead(o)


if __name__ == "__main__":
    main()
