"""Benchmark: the CPU backend's cache flush, by cache line against zeroing 2x the LLC.

    python bench/cpu_flush.py [SWEEP_DIR] [--n 12] [--seed 0] [--out DIR]

Expands SWEEP_DIR's (default ``sweeps/vector_add``) CPU space (kopt.core.expand, the shipped
catalog), draws ``--n`` candidates (kopt.core.expand.cap: the baseline and a seeded uniform
sample), builds them, then runs every candidate's job twice, back to back in this process,
the order alternating per candidate, on two CPU harnesses (workers.harness) that differ only
in the flush before each timed call:

- ``line``: what kopt does (``Harness.flush``): every cache line of the candidate's buffers
  (input copies, outputs and their canaries) written back and invalidated (workers.native);
- ``llc``: kopt's flush before it: a buffer of twice the last-level cache that sysfs reports
  zeroed before every timed call.

Per job it records the job's wall seconds (``Harness.run``: check, warm-up, samples, calls on
unseen sets), the median, IQR and sample count. The summary gives, per flush, the cost ratio
the issue's target names (job wall seconds / (median x samples): how many times its own timed
work a candidate costs), and how many medians differ beyond noise between the two flushes
(kopt.core.compare.label, NVBench's rule). Prints one JSON report; writes cpu_flush.json under
--out.
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
from kopt.core.catalog import load_catalog  # noqa: E402
from kopt.core.compare import label  # noqa: E402
from kopt.core.expand import cap, iter_candidates, stable_hash  # noqa: E402
from kopt.core.spec import load_sweep  # noqa: E402
from kopt.run.builder import build_id, job_base
from workers import build as wbuild  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_dir", type=Path, nargs="?", default=ROOT / "sweeps" / "vector_add")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("."))
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from workers.harness import Harness, _llc_bytes

    sweep = load_sweep(a.sweep_dir)
    space = sweep.space("cpu")
    digest = stable_hash(space.source_text())
    cands = cap(iter_candidates(space, load_catalog(), None, source_digest=digest), a.n,
                seed=a.seed)
    ident = wbuild.compiler_identity(space.toolchain)
    cache = Path(tempfile.mkdtemp(prefix="kopt-cpu-flush-"))
    harness = {"line": Harness("cpu"), "llc": Harness("cpu")}
    if harness["line"].native is None:
        sys.exit("bench/cpu_flush.py: no native helpers on this machine (workers.native.WHY_NOT)")
    harness["llc"].flush_buf = torch.empty(max(2 * _llc_bytes(), 1 << 20), dtype=torch.int8)
    base = job_base(sweep, space)
    rows: list[dict[str, Any]] = []
    for i, c in enumerate(cands):
        j = wbuild.BuildJob(build_id(space, c, digest, ident, platform.machine()), "cpu",
                            space.source_text(), space.source.name, str(space.source.parent),
                            c.defines, space.flags, c.target, space.include_dirs,
                            mode=space.mode, launch=space.launch_spec())
        res, data = wbuild.build(j, cache=cache)
        if not res.ok:
            continue
        art = str(wbuild.ensure_artifact(j.build_id, data, cache=cache))
        job = {**base, "artifact": art, "build_id": j.build_id, "job_key": c.candidate_id,
               "dims": space.dims[0]}
        row: dict[str, Any] = {"candidate_id": c.candidate_id, "params": c.params}
        for kind in ("line", "llc") if i % 2 == 0 else ("llc", "line"):
            t0 = time.perf_counter()
            out = harness[kind].run(job)
            row[f"{kind}_wall_s"] = time.perf_counter() - t0
            for f in ("status", "median_ms", "iqr_ms", "n_samples"):
                row[f"{kind}_{f}"] = out.get(f)
        rows.append(row)
    ok = [r for r in rows if r["line_status"] == r["llc_status"] == "ok"]

    def ratio(kind: str) -> list[float]:
        return [r[f"{kind}_wall_s"] * 1e3 / (r[f"{kind}_median_ms"] * r[f"{kind}_n_samples"])
                for r in ok]

    labels = [label((r["llc_median_ms"], r["llc_iqr_ms"]), (r["line_median_ms"],
                                                              r["line_iqr_ms"])) for r in ok]
    report = {
        "sweep": sweep.name, "dims": space.dims[0], "cpu": platform.processor(),
        "llc_bytes": _llc_bytes(), "candidates": len(rows), "both_ok": len(ok),
        "status_changed": [r for r in rows if r["line_status"] != r["llc_status"]],
        **{f"{k}_wall_s_per_job": statistics.fmean(r[f"{k}_wall_s"] for r in ok)
           for k in ("line", "llc") if ok},
        **{f"{k}_busy_over_timed": {"median": statistics.median(ratio(k)), "max": max(ratio(k))}
           for k in ("line", "llc") if ok},
        "median_ratio_line_over_llc": statistics.median(
            r["line_median_ms"] / r["llc_median_ms"] for r in ok) if ok else None,
        "labels_line_vs_llc": {k: labels.count(k) for k in ("TIED", "FASTER", "SLOWER")},
        "rows": rows}
    write_report(a.out, "cpu_flush", report)


if __name__ == "__main__":
    main()
