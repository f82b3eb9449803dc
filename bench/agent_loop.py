"""The agent's loop on a warm CPU service: ``--tries`` consecutive submitted versions
(`kopt submit --queue`), each a new source built, measured against the run's best and
judged; per try the wall time of the `kopt submit` process (the command's start to its
exit, as an agent waits for it) and its breakdown from the run's ``phases`` rows.

    python bench/agent_loop.py --tries 50
    python bench/agent_loop.py --tries 50 --backend cuda   # a GPU host


A kopt service (`kopt serve start --backend cpu`, its own Ray head here, in a fresh
``$KOPT_CACHE``) takes a copy of tests/fixtures/submit (a CPU sweep of two candidates whose
work is a dependent integer chain); its baseline sweep runs on the service
(`kopt sweep --queue`), then every try is a version doing a different amount of that work
(a new source: nothing is a build-cache hit), submitted as a try of iteration 2 (the first
one, then `--retry`: the catalog's rules refuse a method once it was selected, so 50
iterations would need 50 methods; every try runs the same path an iteration does: record,
claim check, builds, device time, the closing contest). The sweep's ``submit.max_tries`` is
raised to ``--tries``. With ``--backend cuda`` the fixture's CUDA form (base.cu: the chain per
thread, 2^20 threads) is submitted: one version x 5 launch configs (BLOCK 64-1024) per try, the
service's device actor on the GPU, NCU on as the sweep's defaults have it.

Columns: ``wall s`` (the submit process), ``run s`` (the driver's ``run`` phase: from the
Driver's start to its end), ``builds s`` (the ``build`` phases: compiles, summed),
``busy s`` (``busy``: the device actors measuring the try's jobs, summed), ``contest s``,
``ncu s``, ``clock s`` (the device phases of the iteration's close: the closing contest's
re-timing, the Nsight Compute profile, the outside clock; summed over devices), ``device
s`` (those four: the try's device time), ``store s`` (``store``: the run's rows written),
``rest s`` (``wall s`` less ``run s``: the front's hand-over, the claim check and the try's
record before the Driver starts, the verdict printed after) and ``over s`` (``wall s`` less
``device s``: what the try cost beyond its device time, the loop target's measure). The
phases of the last try, and of every try whose wall is over 1.5x the median, are printed
too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kopt.store.database import Database

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "submit"
CLAIM = "compute.thread_coarsening,memory.none,latency.none"
NOTE = ("the chain dominates: compute.thread_coarsening (priority 4, tried although its NCU "
        "trigger may not hold: the chain is the work). Passed over: compute.tensor_core and "
        "compute.mixed_precision (no matrix product and no floating-point work to lower: the "
        "chain is 32-bit integer), compute.launch_config (the launch configs are swept "
        "already); no kernel_fusion, coalesced_access or tiling_smem to do: one pass, "
        "contiguous, no reuse")
KERNEL_MODE = ("  kernel: base.cu\n  launch: {kernel: chain_add, block: [BLOCK], "
               "grid: [\"(N + BLOCK - 1) // BLOCK\"]}\n")
PHASES = ("run", "build", "busy", "contest", "ncu", "clock", "store")
DEVICE = ("busy", "contest", "ncu", "clock")  # the device phases of a try


def kopt(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    """``kopt ARGS`` as the console script runs it (``python -m kopt``: the front, which
    hands a queued command to the service's ready driver); (wall s, the process). Exits on
    a failure."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kopt", *args], capture_output=True, text=True,
                       env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"kopt {' '.join(args)} failed ({p.returncode}): {p.stderr[-3000:]}")
    return wall, p


def spans(rows: list[dict]) -> dict[str, float]:
    """Seconds of each of :data:`PHASES` in a try's ``phases`` rows, summed over its rows
    (:data:`DEVICE`'s over the device actors' rows; 0 when absent), and ``device``: the
    sum of :data:`DEVICE`."""
    out = dict.fromkeys(PHASES, 0.0)
    for r in rows:
        if r["phase"] in out and r.get("end_s") is not None and (
                not r.get("device") or r["phase"] in DEVICE):
            out[r["phase"]] += r["end_s"] - r["start_s"]
    return {**out, "device": sum(out[k] for k in DEVICE)}


def timeline(rows: list[dict]) -> str:
    """A try's phases in order: ``name start+duration`` (s since its process started),
    device phases with their device."""
    return ", ".join(
        f"{r['phase']}{'@' + str(r['device']) if r.get('device') else ''} "
        f"{r['start_s']:.3f}+{r['end_s'] - r['start_s']:.3f}"
        for r in sorted(rows, key=lambda r: r["start_s"]) if r.get("end_s") is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tries", type=int, default=50)
    ap.add_argument("--cpu-devices", type=int, default=1)
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--kernel-mode", action="store_true",
                    help="cuda: submit base_kernel.cu, the kernel built by NVRTC, not nvcc")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kopt-agent-loop-"))
    env = {**os.environ, "KOPT_CACHE": str(tmp / "cache"), "RAY_USAGE_STATS_ENABLED": "0"}
    folder, store = tmp / "submit", tmp / "store"
    shutil.copytree(FIXTURE, folder)
    spec = folder / "sweep.yaml"
    spec.write_text(spec.read_text() + f"submit: {{max_tries: {a.tries}}}\n")
    (folder / "why.md").write_text(NOTE)
    ext = "cu" if a.backend == "cuda" else "cpp"
    base = (folder / f"base.{ext}").read_text()
    if a.kernel_mode:
        base = (folder / "base_kernel.cu").read_text()
        spec.write_text(spec.read_text().replace("  kernel: base.cu\n", KERNEL_MODE))
        (folder / "base.cu").write_text(base)
    start_s, _ = kopt(["serve", "start", "--backend", a.backend]
                      + (["--cpu-devices", str(a.cpu_devices)] if a.backend == "cpu" else []),
                      env)
    rows = []
    try:
        sweep_s, p = kopt(["sweep", str(folder), "--queue", "--store", str(store)], env)
        run_id = p.stderr.split()[1]
        for k in range(a.tries):
            v = folder / f"v{k + 1}.{ext}"  # a new source each time: 2..61 units of work
            v.write_text(base.replace("#define WORK 64", f"#define WORK {2 + k % 60}")
                         + f"\n// try {k + 1}\n")  # a source an earlier try sent is refused
            args = ["submit", run_id, "--source", str(v), "--methods", CLAIM, "--note",
                    str(folder / "why.md"), "--store", str(store), "--queue", "--format",
                    "json", *(["--retry"] if k else [])]
            wall, p = kopt(args, env)
            out = json.loads(p.stdout)
            phases = Database(store).phases(run_id)  # the latest process's: this try's
            rows.append({"try": out["try"], "wall_s": wall, **spans(phases),
                         "timeline": timeline(phases)})
    finally:
        kopt(["serve", "stop"], env)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"kopt serve start: {start_s:.1f} s (once); baseline sweep on it: {sweep_s:.1f} s")
    print(f"{'try':>4} {'wall s':>7} {'run s':>6} {'builds s':>8} {'busy s':>6} "
          f"{'contest s':>9} {'ncu s':>6} {'clock s':>7} {'device s':>8} {'store s':>7} "
          f"{'rest s':>6} {'over s':>6}")
    for r in rows:
        print(f"{r['try']:>4} {r['wall_s']:7.2f} {r['run']:6.2f} {r['build']:8.2f} "
              f"{r['busy']:6.2f} {r['contest']:9.2f} {r['ncu']:6.2f} {r['clock']:7.2f} "
              f"{r['device']:8.2f} {r['store']:7.2f} {r['wall_s'] - r['run']:6.2f} "
              f"{r['wall_s'] - r['device']:6.2f}")
    walls = [r["wall_s"] for r in rows]
    med = statistics.median(walls)
    for r in rows:
        if r is rows[-1] or r["wall_s"] > 1.5 * med:
            print(f"try {r['try']}'s phases (s since its process started +duration): "
                  f"{r['timeline']}")
    over = [r["wall_s"] - r["device"] for r in rows]
    print(f"wall per try: median {med:.2f} s, max {max(walls):.2f} s over {len(walls)} tries; "
          f"beyond its device time: median {statistics.median(over):.2f} s, "
          f"max {max(over):.2f} s")


if __name__ == "__main__":
    main()
