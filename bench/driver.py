"""Benchmark: no-op candidates per second through the whole pipeline (CPU backend, local Ray).

Generates a sweep whose ``solve`` does nothing (``y`` is in/out: ``inputs()`` gives it and
``reference()`` returns it unchanged, so the empty body is correct) over N candidates that
differ only in an unused ``-DP=i`` define, with the cheapest timing the spec allows
(no warm-up time, 3 samples, a 1 us time budget, and ``flush: false`` when kopt's timing
settings have that field; without it every sample pays the harness's 2x-LLC cache flush,
which dominates a no-op job on the CPU backend). Pass 1 compiles every build into
a fresh build cache (``KOPT_CACHE`` in a temp dir); pass 2, the measured one, runs the same
sweep into a fresh store, so every build is a cache hit and what is left is scheduling,
the device actor and its sandbox, and the store: the driver's overhead.

    python bench/driver.py [--candidates 1000] [--cpu-devices 1] [--cache DIR] [--dir DIR]
                           [--profile] [--timeline FILE]

Reported: candidates/s over the run's wall time (``runs.wall_s``: actor start, reference
check, builds, runs, end-of-run compaction) and over the steady state (first to last
result), then the run's phases from a small progress callback and the store: build-task
round trips, device round trips (actor busy seconds, sandbox seconds, timed samples), store
writes. ``--profile`` runs pass 2 under cProfile (the driver process only) and prints the top
functions; ``--timeline`` writes Ray's chrome-tracing timeline (both passes). Ends with
bench/overhead.py's ratio for the measured run. Target (issue #5): >= 200 no-op
candidates/s on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from kopt.run.callbacks import ProgressCallback

TARGET_PER_S = 200.0

KERNEL = """\
// no-op candidate for bench/driver.py: P only makes each build distinct
#ifndef P
#define P 0
#endif
extern "C" void solve(const float* x, float* y, int N) {
    (void)x;
    (void)y;
    (void)N;
}
"""

REF = """\
\"\"\"Reference of the no-op kernel: y is in/out and comes back unchanged.\"\"\"
import torch


def inputs(seed: int, N: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g), "y": torch.randn(N, generator=g)}


def reference(x: torch.Tensor, y: torch.Tensor, N: int) -> dict[str, torch.Tensor]:
    return {"y": y.clone()}
"""


def flush_knob() -> bool:
    """Whether this kopt's timing settings have ``flush`` (the per-sample cache flush can be
    turned off); without it every sample of the no-op kernel pays a 2x-LLC flush."""
    from kopt.core.spec import Timing

    return "flush" in Timing.model_fields


def write_sweep(root: Path, n: int) -> Path:
    """Write the no-op sweep (``n`` candidates: ``P`` in 0..n-1, baseline P=0) under ``root``;
    ``flush: false`` in its timing when kopt has that knob (see :func:`flush_knob`)."""
    root.mkdir(parents=True, exist_ok=True)
    flush = ", flush: false" if flush_knob() else ""
    (root / "noop.cpp").write_text(KERNEL)
    (root / "ref.py").write_text(REF)
    (root / "sweep.yaml").write_text(textwrap.dedent(f"""\
        name: noop
        kernel: noop.cpp
        reference: ref.py
        dims: [{{N: 16}}]
        args: {{x: [N], y: [N]}}
        params: {{P: {json.dumps(list(range(n)))}}}
        baseline: {{P: 0}}
        # the least the spec allows: no warm-up time, 3 samples, a 1 us budget
        timing: {{warmup_ms: 0, min_samples: 3, max_samples: 3, max_time_ms: 0.001,
                  target_rel_error: 1000, timeout_s: 60{flush}}}
        """))
    return root


class Clock(ProgressCallback):
    """Progress callback recording when each phase's events reach the driver (perf_counter
    seconds)."""

    def __init__(self) -> None:
        super().__init__()
        self.t_start: float | None = None
        self.builds: list[tuple[float, bool]] = []
        self.results: list[float] = []
        self.t_finish: float | None = None

    def on_start(self, n_builds: int, n_jobs: int, devices: list[dict]) -> None:
        """Builds are submitted right after this call."""
        self.t_start = time.perf_counter()

    def on_build(self, result: Any, n_jobs: int) -> None:
        """A build task's result reached the driver."""
        self.builds.append((time.perf_counter(), bool(result.cached)))

    def on_result(self, row: dict[str, Any]) -> None:
        """A job's outcome reached the driver (before the writer buffers it)."""
        self.results.append(time.perf_counter())

    def on_finish(self, summary: Any) -> None:
        """The run is compacted and flushed."""
        self.t_finish = time.perf_counter()


class StoreTimer:
    """Times every Parquet file the driver writes (wraps kopt.store.files.write_table)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, float]] = []

    def __enter__(self) -> StoreTimer:
        import kopt.store.files as ks

        self._orig = ks.write_table

        def timed(root: Path, table: str, sweep: str, run_id: str, rows: list) -> Path:
            t0 = time.perf_counter()
            try:
                return self._orig(root, table, sweep, run_id, rows)
            finally:
                self.calls.append((table, len(rows), time.perf_counter() - t0))

        ks.write_table = timed
        return self

    def __exit__(self, *exc: object) -> None:
        import kopt.store.files as ks

        ks.write_table = self._orig


def flush_cost_ms(repeat: int = 20) -> float:
    """Median milliseconds of one CPU-backend cache flush as the harness does it (zeroing an
    int8 tensor of 2x the last-level cache, workers.harness) on one thread, as a CPU device
    actor's harness runs (OMP_NUM_THREADS=1)."""
    import torch

    from workers.harness import _llc_bytes

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        buf = torch.empty(max(2 * _llc_bytes(), 1 << 20), dtype=torch.int8)
        buf.zero_()
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            buf.zero_()
            ts.append((time.perf_counter() - t0) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(ts)


def report(store: Path, run_id: str, clock: Clock, writes: StoreTimer, t_call: float,
           t_ret: float) -> tuple[float, float]:
    """Print the run's figures; returns candidates/s over the run's wall time and over its
    steady state (first to last result)."""
    from kopt.store.database import query

    _, runs = query("select n_candidates, n_jobs, wall_s, compile_cpu_s, device_busy, devices "
                    f"from runs where run_id = '{run_id}'", store)
    n_cand, n_jobs, wall, compile_cpu, busy_js, devices = runs[0]
    busy = json.loads(busy_js or "{}")
    _, rows = query(f"select status, count(*), sum(wall_s), sum(list_sum(samples_ms)), "
                    f"avg(n_samples), sum(build_cached::int) from candidates "
                    f"where run_id = '{run_id}' group by 1 order by 1", store)
    statuses = ", ".join(f"{r[0]} {r[1]}" for r in rows)
    sandbox_s = sum(r[2] or 0 for r in rows)
    samples_ms = sum(r[3] or 0 for r in rows)
    n_samples = statistics.fmean(r[4] or 0 for r in rows) if rows else 0
    cached = sum(r[5] or 0 for r in rows)
    busy_s = sum(busy.values())
    rate = n_cand / wall
    t0 = clock.t_start or t_call
    first, last = clock.results[0], clock.results[-1]
    steady = (len(clock.results) - 1) / (last - first) if last > first else float("nan")
    b_last = max(t for t, _ in clock.builds)
    n_dev = len(json.loads(devices or "[]"))
    w_s = sum(c[2] for c in writes.calls)
    w_rows = sum(c[1] for c in writes.calls if c[0] == "candidates")
    per = 1e3 / n_jobs
    print(f"run {run_id}: {n_cand} candidates, {n_jobs} jobs ({statuses}); "
          f"{cached} of {n_jobs} builds were cache hits; compile CPU-s {compile_cpu:.2f}")
    print(f"wall (runs.wall_s)                 {wall:8.2f} s   {rate:8.1f} candidates/s")
    print(f"steady state (first->last result)  {last - first:8.2f} s   {steady:8.1f} "
          f"candidates/s")
    print("phases (seconds from Driver.run's call):")
    print(f"  setup: identity, {n_dev} device actor(s), reference check   {t0 - t_call:7.2f}")
    print(f"  builds: {len(clock.builds)} results (tasks or hits) by     {b_last - t_call:7.2f}"
          f"   ({len(clock.builds) / max(b_last - t0, 1e-9):.0f} builds/s after submission)")
    print(f"  first result                                     {first - t_call:7.2f}")
    during = [t for t in clock.results if t <= b_last]
    if len(during) > 1 and len(clock.results) - len(during) > 1:
        after = clock.results[len(during):]
        print(f"    results while build tasks ran: {len(during):5d}, "
              f"{(len(during) - 1) / max(during[-1] - during[0], 1e-9):7.1f}/s; after: "
              f"{len(after):5d}, {(len(after) - 1) / max(after[-1] - after[0], 1e-9):7.1f}/s")
    print(f"  last result                                      {last - t_call:7.2f}")
    print(f"  compaction, actor stop, return                   {t_ret - last:7.2f}")
    print("device round trips (per job, ms):")
    print(f"  driver wall per job (run wall / jobs)            {wall * per:7.2f}")
    print(f"  actor busy (DeviceActor.run, sum {busy_s:.2f} s)        {busy_s * per:7.2f}"
          f"   (device busy {busy_s / wall:.0%} of the wall)")
    print(f"  sandbox round trip (rows.wall_s, sum {sandbox_s:.2f} s)    {sandbox_s * per:7.2f}")
    print(f"  timed samples ({n_samples:.1f} per job, sum {samples_ms / 1e3:.3f} s)"
          f"        {samples_ms / n_jobs:7.3f}")
    print(f"  one cache flush (zero 2x LLC, measured here)     {flush_cost_ms():7.2f}"
          f"   (before every sample: {'off, timing.flush false' if flush_knob() else 'on'})")
    print(f"store writes: {len(writes.calls)} Parquet files ({w_rows} candidate rows), "
          f"{w_s:.2f} s in the driver ({w_s * per:.2f} ms per job)")
    return rate, steady


def main() -> None:
    """Run both passes and print candidates/s with PASS/MISS against the issue's target."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=1000)
    ap.add_argument("--cpu-devices", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=None,
                    help="build cache to use (kept; pass 1 is skipped for builds it holds)")
    ap.add_argument("--dir", type=Path, default=None, help="keep the sweep and stores here")
    ap.add_argument("--profile", action="store_true", help="cProfile the driver in pass 2")
    ap.add_argument("--timeline", type=Path, default=None,
                    help="write Ray's chrome-tracing timeline of pass 2 here")
    a = ap.parse_args()
    work = a.dir or Path(tempfile.mkdtemp(prefix="kopt-bench-driver-"))
    cache = a.cache or work / "cache"
    os.environ["KOPT_CACHE"] = str(cache)  # before Ray starts: its workers inherit it

    import ray

    from kopt.core.spec import load_sweep
    from kopt.driver.sweep import run_sweep

    sweep = load_sweep(write_sweep(work / "sweep", a.candidates))
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"ray {ray.__version__}; cluster CPUs {ray.cluster_resources().get('CPU')}")
    t0 = time.perf_counter()
    s1 = run_sweep(sweep, work / "store-warm", backend="cpu", cpu_devices=a.cpu_devices)
    print(f"pass 1 (fill the build cache {cache}): {s1.n_candidates} candidates, "
          f"{s1.status_counts}, {time.perf_counter() - t0:.1f} s, compile CPU-s "
          f"{s1.compile_cpu_s:.1f}")

    clock = Clock()
    prof = cProfile.Profile() if a.profile else None
    store = work / "store"
    with StoreTimer() as writes:
        t_call = time.perf_counter()
        if prof:
            prof.enable()
        s2 = run_sweep(sweep, store, backend="cpu", cpu_devices=a.cpu_devices,
                       observers=[clock])
        if prof:
            prof.disable()
        t_ret = time.perf_counter()
    if a.timeline:
        ray.timeline(filename=str(a.timeline))
    print(f"pass 2 (measured; store {store}):")
    rate, steady = report(store, s2.run_id, clock, writes, t_call, t_ret)
    for label, r in (("whole run (runs.wall_s)", rate), ("steady state", steady)):
        verdict = "PASS" if r >= TARGET_PER_S else "MISS"
        print(f"driver, {label}: {r:.1f} no-op candidates/s (target >= {TARGET_PER_S:.0f}): "
              f"{verdict}")
    if prof:
        for key in ("cumulative", "tottime"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(25)
            print(f"--- cProfile of pass 2 (driver process), by {key} ---")
            print("\n".join(buf.getvalue().splitlines()[:60]))
    from overhead import overhead, print_overhead  # bench/overhead.py, next to this file

    print(f"--- python bench/overhead.py {s2.run_id} --store {store} ---")
    print_overhead(overhead(s2.run_id, store))
    ray.shutdown()
    if a.dir is None and a.cache is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
