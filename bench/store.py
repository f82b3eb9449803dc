"""Benchmark: DuckDB selection over a synthetic store of 1M candidate and 50M metric rows.

Writes the store with the same layout and schema kopt uses (kopt.store.files.SCHEMAS), reports
the Parquet write rate, then times the queries kopt runs: ``kopt best`` (kopt.store.select.best),
the top-k of a run, an iteration's ranking (kopt.store.database.Database.rank) and a metrics
lookup for
the top candidates. Each query's time is the median of 3 runs on a fresh connection.

    python bench/store.py [--candidates 1000000] [--metrics 50000000] [--dir DIR]

Target (issue "Measurement you can trust..."): selection < 1 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kopt.store.database import Database
from kopt.store.files import SCHEMAS

RUNS, CLASSES, METRICS_PER_CAND = 10, ["h200-sm90", "orin-sm87", "cpu-x86_64"], 50


def candidates_table(n: int, run: int, rng: np.random.Generator) -> pa.Table:
    ids = np.array([f"{run:02d}{i:014x}" for i in range(n)])
    cols = {f.name: pa.nulls(n, f.type) for f in SCHEMAS["candidates"]}
    median = rng.lognormal(0.0, 0.5, n)
    cols.update({
        "run_id": pa.array(np.full(n, f"run{run:02d}")), "sweep": pa.array(np.full(n, "sgemm")),
        "iteration": pa.array(rng.integers(1, 4, n).astype(np.int32)),
        "job_key": pa.array(ids), "candidate_id": pa.array(ids), "build_id": pa.array(ids),
        "is_baseline": pa.array(np.arange(n) < len(CLASSES)),
        "params": pa.array([f'{{"BM": {64 << (i % 3)}, "BK": {8 << (i % 4)}}}' for i in range(n)]),
        "dims": pa.array(np.full(n, '{"K": 4096, "M": 4096, "N": 4096}')),
        "device_class": pa.array(np.array(CLASSES)[np.arange(n) % len(CLASSES)]),
        "status": pa.array(np.where(rng.random(n) < 0.9, "ok", "wrong_result")),
        "median_ms": pa.array(median), "iqr_ms": pa.array(median * 0.01),
        "created_at": pa.array(np.full(n, np.datetime64("2026-11-30T00:00:00", "us")),
                               pa.timestamp("us", tz="UTC"))})
    return pa.table(cols, schema=SCHEMAS["candidates"])


def metrics_table(cands: np.ndarray, run: int, rng: np.random.Generator) -> pa.Table:
    n = len(cands) * METRICS_PER_CAND
    cols = {f.name: pa.nulls(n, f.type) for f in SCHEMAS["metrics"]}
    cols.update({
        "run_id": pa.array(np.full(n, f"run{run:02d}")), "sweep": pa.array(np.full(n, "sgemm")),
        "iteration": pa.array(np.ones(n, np.int32)),
        "candidate_id": pa.array(np.repeat(cands, METRICS_PER_CAND)),
        "device_class": pa.array(np.full(n, CLASSES[0])), "dims": pa.array(np.full(n, "{}")),
        "kernel": pa.array(np.full(n, "sgemm_kernel")), "launch": pa.array(np.zeros(n, np.int32)),
        "metric": pa.array(np.tile(np.array([f"metric_{i:02d}.avg.pct" for i in
                                             range(METRICS_PER_CAND)]), len(cands))),
        "value": pa.array(rng.random(n) * 100), "unit": pa.array(np.full(n, "%")),
        "created_at": pa.array(np.full(n, np.datetime64("2026-11-30T00:00:00", "us")),
                               pa.timestamp("us", tz="UTC"))})
    return pa.table(cols, schema=SCHEMAS["metrics"])


def write(root: Path, table: str, run: int, t: pa.Table, part: int) -> int:
    folder = root / table / "sweep=sgemm" / f"run=run{run:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{part:020d}-bench.parquet"
    pq.write_table(t, path, compression="zstd")
    return path.stat().st_size


def timed(fn, repeat: int = 3) -> float:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=1_000_000)
    ap.add_argument("--metrics", type=int, default=50_000_000)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    root = a.dir or Path(tempfile.mkdtemp(prefix="kopt-bench-store-"))
    rng = np.random.default_rng(0)
    per_run = a.candidates // RUNS
    metric_cands_per_run = a.metrics // METRICS_PER_CAND // RUNS
    t0, nbytes = time.perf_counter(), 0
    for run in range(RUNS):
        ct = candidates_table(per_run, run, rng)
        nbytes += write(root, "candidates", run, ct, 0)
        cids = ct.column("candidate_id").to_numpy(zero_copy_only=False)[:metric_cands_per_run]
        chunk = 100_000
        for part, s in enumerate(range(0, len(cids), chunk)):
            nbytes += write(root, "metrics", run, metrics_table(cids[s:s + chunk], run, rng), part)
    for run in range(RUNS):
        folder = root / "runs" / "sweep=sgemm" / f"run=run{run:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        cols = {f.name: pa.nulls(1, f.type) for f in SCHEMAS["runs"]}
        cols.update(run_id=pa.array([f"run{run:02d}"]), sweep=pa.array(["sgemm"]),
                    event=pa.array(["finished"]))
        pq.write_table(pa.table(cols, schema=SCHEMAS["runs"]), folder / "part-0-bench.parquet")
    wt = time.perf_counter() - t0
    rows = a.candidates + a.metrics
    print(f"wrote {a.candidates:,} candidate + {a.metrics:,} metric rows: {wt:.1f} s, "
          f"{rows / wt / 1e6:.2f} M rows/s, {nbytes / 2**20:.0f} MiB on disk")

    db = Database(root)  # each call: a fresh connection
    top = "select candidate_id from candidates where run_id = 'run09' and status = 'ok' " \
          "order by median_ms limit 10"
    results = {
        "best per device class (kopt best)": timed(lambda: db.best("sgemm")),
        "top-5 of a run per class": timed(lambda: db.top_k("run09", 5)),
        "rank one iteration (loop)": timed(lambda: db.rank("run09", 1, CLASSES[0])),
        "metrics of the top 10": timed(lambda: db.query(
            f"select candidate_id, metric, value from metrics where run_id = 'run09' and "
            f"candidate_id in ({top})")),
    }
    for name, s in results.items():
        print(f"{name:38s} {s:7.3f} s  {'ok' if s < 1 else 'MISS (target < 1 s)'}")
    if a.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
