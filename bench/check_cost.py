"""Benchmark: what issue 11's guards cost, and that they change no honest figure.

    python bench/check_cost.py SWEEP_DIR [--backend auto] [--n 30] [--seed 0] [--out DIR]

Expands SWEEP_DIR's iteration-1 space (kopt.core.expand, the shipped catalog), draws ``--n``
candidates (kopt.core.expand.cap: the baseline and a seeded uniform sample), builds them in
parallel (workers.build, one process per core), then runs every candidate twice, back to back
in one sandbox on one device, the order alternating per candidate:

- guarded: what ``kopt sweep`` does (workers.harness): the check on two input sets in
  separate buffers, every input restored and every output poisoned before each timed call and
  verified after it, the probe for work outside the timed interval, the device memory check;
- unguarded: kopt's procedure before issue 11: one checked call on one input set, then samples
  with nothing restored or verified and no probe (the job key ``bench_unguarded``, which only
  this benchmark sets).

Both use the sweep's timing (warm-up, L2 flush, samples until the median is stable). Per
candidate it reports the job's wall seconds (the harness's answer time, sandbox round trip
included) and the median; the summary gives the extra seconds per candidate (mean, median) and
how many honest medians differ beyond noise (kopt.core.compare.label, NVBench's rule) between the
two procedures, the per-candidate ratio of walls (median), and where each procedure's wall
went (each part's median, workers.harness ``Harness.lap``). Prints one JSON report; writes
check_cost.json under --out.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import write_report  # noqa: E402
from kopt.core.catalog import load_catalog  # noqa: E402
from kopt.core.compare import label  # noqa: E402
from kopt.core.expand import cap, iter_candidates, stable_hash  # noqa: E402
from kopt.core.spec import load_sweep  # noqa: E402
from kopt.run.builder import build_id, job_base
from workers import build as wbuild  # noqa: E402
from workers.harness import UNGUARDED  # noqa: E402
from workers.sandbox import Sandbox  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("."))
    a = ap.parse_args()
    import torch

    sweep = load_sweep(a.sweep_dir)
    backend = a.backend
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() and "cuda" in sweep.spaces else "cpu"
    space = sweep.space(backend)
    sm = None
    if backend == "cuda":
        major, minor = torch.cuda.get_device_capability(0)
        sm = major * 10 + minor
    digest = stable_hash(space.source_text())
    cands = cap(iter_candidates(space, load_catalog(), sm, source_digest=digest), a.n,
                seed=a.seed)
    ident = wbuild.compiler_identity(space.toolchain)
    cache = Path(tempfile.mkdtemp(prefix="kopt-check-cost-"))
    jobs = [wbuild.BuildJob(build_id(space, c, digest, ident, platform.machine()), backend,
                            space.source_text(), space.source.name, str(space.source.parent),
                            c.defines, space.flags, c.target, space.include_dirs,
                            mode=space.mode, launch=space.launch_spec()) for c in cands]
    with cf.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        built = list(ex.map(lambda j: wbuild.build(j, cache=cache), jobs))
    sb = Sandbox(backend, {"OMP_NUM_THREADS": "1"} if backend == "cpu" else None)
    sb.start()
    base = job_base(sweep, space)
    rows: list[dict[str, Any]] = []
    try:
        for i, (c, j, (res, data)) in enumerate(zip(cands, jobs, built)):
            if not res.ok:
                continue
            art = str(wbuild.ensure_artifact(j.build_id, data, cache=cache))
            job = {**base, "artifact": art, "build_id": j.build_id, "job_key": c.candidate_id,
                   "dims": space.dims[0]}
            order = ("guarded", "unguarded") if i % 2 == 0 else ("unguarded", "guarded")
            got = {}
            for kind in order:
                jj = {**job, UNGUARDED: True} if kind == "unguarded" else job
                got[kind] = sb.run(jj, space.timing.timeout_s)
            rows.append({"candidate_id": c.candidate_id, "params": c.params,
                         **{f"{k}_{f}": got[k].get(f) for k in got
                            for f in ("status", "median_ms", "iqr_ms", "n_samples", "wall_s",
                                      "parts_ms")}})
    finally:
        sb.close()
    both = [r for r in rows if r["guarded_status"] == r["unguarded_status"] == "ok"]
    extra = [r["guarded_wall_s"] - r["unguarded_wall_s"] for r in rows
             if r["guarded_wall_s"] and r["unguarded_wall_s"]]
    labels = [label((r["unguarded_median_ms"], r["unguarded_iqr_ms"]),
                    (r["guarded_median_ms"], r["guarded_iqr_ms"])) for r in both]
    ratio = [r["guarded_median_ms"] / r["unguarded_median_ms"] for r in both]
    report = {
        "sweep": sweep.name, "backend": backend, "dims": space.dims[0],
        "device": sb.info.get("name"), "candidates": len(rows),
        "status_changed": [r for r in rows if r["guarded_status"] != r["unguarded_status"]],
        "extra_s_per_candidate": {"mean": statistics.fmean(extra) if extra else None,
                                  "median": statistics.median(extra) if extra else None},
        "wall_s_per_candidate": {
            "guarded": statistics.fmean(r["guarded_wall_s"] for r in rows) if rows else None,
            "unguarded": statistics.fmean(r["unguarded_wall_s"] for r in rows) if rows
            else None},
        "median_ratio_guarded_over_unguarded": {
            "median": statistics.median(ratio) if ratio else None,
            "min": min(ratio, default=None), "max": max(ratio, default=None)},
        "labels": {k: labels.count(k) for k in ("TIED", "FASTER", "SLOWER")},
        # per candidate: the mean is set by any one whose samples do not settle (hundreds
        # of samples on one side: docs/verified/2026-12-06-session46.md)
        "wall_ratio_per_candidate": {
            "median": statistics.median(wall) if (wall := [
                r["guarded_wall_s"] / r["unguarded_wall_s"] for r in both]) else None},
        "parts_ms_median": parts_medians(both),
        "rows": rows}
    write_report(a.out, "check_cost", report)


def parts_medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per procedure (guarded, unguarded) and part of a job's wall time (workers.harness
    ``Harness.lap``: prepare, check, warm_up, time, draws, own, probe), the median over
    ``rows`` (ms; a part a job did not have counts 0)."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("guarded", "unguarded"):
        got = [r.get(f"{kind}_parts_ms") or {} for r in rows]
        names = sorted({k for g in got for k in g})
        out[kind] = {k: statistics.median(g.get(k, 0.0) for g in got) for k in names}
    return out


if __name__ == "__main__":
    main()
