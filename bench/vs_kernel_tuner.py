"""kopt vs Kernel Tuner 1.5 on one GPU: the same sgemm kernel and parameter space, side by side.

Runs, in one process and one session on the same GPU:

1. Kernel Tuner: ``tune_kernel`` on ``sweeps/sgemm_kt/sgemm_kt.cu`` (brute force, every
   configuration verified against the float64 reference with the sweep's tolerance, no
   cache file), with Kernel Tuner's own conventions (parameters as ``#define``, grid
   divisors, dynamic shared memory through ``smem_args``).
2. kopt: ``kopt sweep`` on a copy of ``sweeps/sgemm_kt`` restricted to Kernel Tuner's space
   (kernel mode: NVRTC builds in parallel Ray tasks, one device actor) into a fresh store
   with a cold build cache; NCU profiles off unless ``--ncu`` (Kernel Tuner takes none).
   The process wall time counts everything: imports, Ray's start, builds, runs, the store.

Prints the wall time of each, the ratio kopt / Kernel Tuner (target <= 0.25, issue #5),
both winners, and whether they are the same or tied: kopt's own measurement of Kernel
Tuner's winner compared with kopt's winner by kopt.compare.label (FASTER/SLOWER/TIED).

Needs a CUDA GPU, cupy (Kernel Tuner's CUPY backend: NVRTC, like kopt's kernel mode)
and ``kernel_tuner`` (PyPI; bring it to an offline host with KOPT_DEVICE_PKGS).

usage: python bench/vs_kernel_tuner.py [--out DIR] [--lang CUPY|NVCUDA]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from kopt.spec import Space

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "sweeps" / "sgemm_kt"




def _kt_space() -> Space:
    """The sweep's space as kopt loads it: expressions with its derived names inlined, over
    Kernel Tuner's params and the dims only (Kernel Tuner knows no derived names)."""
    from kopt.spec import load_sweep

    return load_sweep(SWEEP).space("cuda")


# dynamic shared memory of one block, bytes: the sweep's own launch.smem_bytes expression
SMEM_EXPR = _kt_space().launch.smem_bytes
KT_SMEM_LIMIT = 49152  # bytes: CUDA's default per-block dynamic shared memory limit


def smem_bytes(p: dict) -> int:
    """Dynamic shared memory of config ``p`` in bytes (SMEM_EXPR, via workers.expr)."""
    from workers.expr import parse

    return int(parse(SMEM_EXPR)(p))


def kernel_tuner_run(lang: str) -> tuple[float, dict, int]:
    """Tune with Kernel Tuner; returns (wall seconds, best config with its time in ms,
    number of configurations measured)."""
    import numpy as np
    from kernel_tuner import tune_kernel

    spec = yaml.safe_load((SWEEP / "sweep.yaml").read_text())
    d = spec["dims"][0]
    M, N, K = d["M"], d["N"], d["K"]
    rng = np.random.default_rng(0)
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    C = np.zeros((M, N), dtype=np.float32)
    answer = [None, None, (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32),
              None, None, None]
    params = spec["params"]
    # the sweep's restrictions minus the ones on dims (4096 is divisible by every tile), and
    # the 48 KB of dynamic shared memory a launch gets without opting in (Kernel Tuner's
    # CUPY/NVCUDA backends never raise cudaFuncAttributeMaxDynamicSharedMemorySize)
    space = _kt_space()
    restrictions = [r for r in map(space.resolve, space.restrictions) if "M" not in r
                    and "N %" not in r and "K %" not in r and "232448" not in r]
    restrictions.append(f"{SMEM_EXPR} <= {KT_SMEM_LIMIT}")
    tol = spec["tolerance"]

    def verify(ref: list, out: list, atol: float | None = None) -> bool:
        exp, got = ref[2], out[2]
        return bool(np.all(np.abs(got - exp) <= tol["atol"] + tol["rtol"] * np.abs(exp)))

    smem = {"size": smem_bytes}
    t0 = time.perf_counter()
    results, _env = tune_kernel(
        "sgemm_kernel", str(SWEEP / "sgemm_kt.cu"), (N, M),
        [A, B, C, np.int32(M), np.int32(N), np.int32(K)], params,
        grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"],
        restrictions=restrictions, answer=answer, verify=verify, smem_args=smem, lang=lang,
        strategy="brute_force", quiet=True)
    wall = time.perf_counter() - t0
    ok = [r for r in results if isinstance(r.get("time"), float)]
    best = min(ok, key=lambda r: r["time"])
    return wall, {k: best[k] for k in params} | {"time_ms": best["time"]}, len(results)


def kopt_run(out: Path, ncu: bool = False) -> tuple[float, dict, Path]:
    """Run ``kopt sweep`` on a copy of the sweep restricted like Kernel Tuner's run (at most
    48 KB of dynamic shared memory; kopt itself opts in to the device's limit), with a cold
    build cache; ``ncu``: keep the sweep's Nsight Compute profiles of the top candidates
    (Kernel Tuner takes none, so the default turns them off); returns (wall seconds,
    summary, store)."""
    import shutil

    sweep = out / "sgemm_kt"
    shutil.copytree(SWEEP, sweep, dirs_exist_ok=True)
    spec = yaml.safe_load((sweep / "sweep.yaml").read_text())
    spec["restrictions"].append(f"{SMEM_EXPR} <= {KT_SMEM_LIMIT}")
    if not ncu:  # the same work as Kernel Tuner's: build, verify, time (no NCU profiles)
        spec["ncu"] = {"top_k": 0}
    (sweep / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    store = out / "kopt-store"
    env = {**os.environ, "KOPT_CACHE": tempfile.mkdtemp(prefix="kopt-cache-")}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kopt.cli", "sweep", str(sweep), "--store",
                        str(store), "--backend", "cuda"], capture_output=True, text=True,
                       env=env)
    wall = time.perf_counter() - t0
    (out / "kopt_sweep.log").write_text(p.stdout + p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"kopt sweep failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr}")
    return wall, {}, store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="vs-kt-")))
    ap.add_argument("--lang", default="CUPY", help="Kernel Tuner backend (CUPY or NVCUDA)")
    ap.add_argument("--ncu", action="store_true",
                    help="keep kopt's NCU profiles of the top candidates (extra work)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    from kopt.compare import label
    from kopt.select import best
    from kopt.store import query

    kt_wall, kt_best, kt_n = kernel_tuner_run(a.lang)
    kopt_wall, _, store = kopt_run(a.out, a.ncu)
    _, rows = query("select params, median_ms, iqr_ms, status from candidates", store)
    ok = {json.dumps(json.loads(p), sort_keys=True): (m, i) for p, m, i, s in rows if s == "ok"}
    # kopt's winner: the loop's named winner (the simplest of a tie re-measured side by side)
    named = best("sgemm_kt", store)[0]
    kopt_best_key = json.dumps(json.loads(named["params"]), sort_keys=True)
    kt_key = json.dumps({k: v for k, v in kt_best.items() if k != "time_ms"}, sort_keys=True)
    if kt_key == kopt_best_key:
        verdict = "same config"
    elif kt_key in ok:
        verdict = (f"different configs; Kernel Tuner's winner, measured by kopt, is "
                   f"{label(ok[kopt_best_key], ok[kt_key])} against kopt's winner")
    else:
        verdict = "Kernel Tuner's winner is not correct in kopt"
    _, runs = query("select wall_s, n_candidates from runs", store)
    report = {
        "kernel_tuner": {"wall_s": kt_wall, "configs": kt_n, "best": kt_best},
        "kopt": {"wall_s": kopt_wall, "ncu_profiles": a.ncu, "run_wall_s": runs[0][0],
                 "candidates": runs[0][1],
                 "best": json.loads(kopt_best_key) | {"median_ms": ok[kopt_best_key][0]},
                 "correct": len(ok)},
        "ratio_kopt_over_kt": kopt_wall / kt_wall, "target": 0.25,
        "winners": verdict,
    }
    (a.out / "vs_kernel_tuner.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    print(f"kopt / Kernel Tuner wall time: {kopt_wall:.1f} s / {kt_wall:.1f} s = "
          f"{kopt_wall / kt_wall:.2f} ({'PASS' if kopt_wall / kt_wall <= 0.25 else 'MISS'} "
          f"against <= 0.25); winners: {verdict}")


if __name__ == "__main__":
    main()
