"""Benchmark: what one candidate's build costs, per build path, measured side by side.

One tiled sgemm candidate of sweeps/sgemm (``TILED=1 BK=16 TM=8 TN=8``, 16 x 16
threads: memory.tiling_smem + compute.thread_coarsening) is built, in
interleaved rounds, by:

- ``before``: nvcc with the flags workers/build.py used before the fast-build
  change (a ``solve`` shared object: host compile, device compile, link);
- one variant per candidate cut (host ``-O1`` / ``-O0``, no PTX in the fatbin,
  ``-nodlink``, ``--threads 0``, a shim without its include, a shared cudart);
- ``now``: workers.build.command() as it is now;
- device-only references: ``nvcc -cubin`` and NVRTC, on the same kernel (the
  source up to its host ``solve``), in this process and through kopt's kernel-mode
  build (workers.build.build: the worker's NVRTC compiler process).

Each figure is the median over the rounds: wall seconds, and CPU seconds (user +
system of the compiler processes; NVRTC in this process: its process time), which
is what bounds a node running one build per core. Then ``nvcc --time``'s phase
breakdown of ``before`` and ``now``, a check that every host-side cut leaves the
device code byte-identical (the kernel's cubin from ``--keep``), the ptxas figures
of nvcc and NVRTC side by side, kernel mode on sweeps/sgemm_kt, and the throughput
of ``--jobs`` builds at once.

    python bench/build_time.py [--repeats 5] [--jobs N] [--arch 90]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kopt.core.catalog import load_catalog  # noqa: E402
from kopt.core.expand import expand  # noqa: E402
from kopt.core.spec import load_sweep  # noqa: E402
from workers import build as wb  # noqa: E402
from workers import nvrtc  # noqa: E402
from workers.ptxas import parse_ptxas  # noqa: E402

SGEMM = ROOT / "sweeps" / "sgemm" / "sgemm.cu"
DEFINES = {"BX": 16, "BY": 16, "TILED": 1, "BK": 16, "TM": 8, "TN": 8}
# workers/build.py's nvcc flags before the fast-build change (commit 5a23613)
BEFORE = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo"]


def device_only(source: str) -> str:
    """The source up to its host ``solve`` (NVRTC compiles device code only)."""
    return source[:source.index('extern "C" void solve')]


def nvcc_cmd(flags: list[str], arch: str, src: Path, out: Path, shim: Path = wb.SHIM,
             defines: dict | None = None) -> list[str]:
    defs = [f"-D{k}={v}" for k, v in sorted((defines or DEFINES).items())]
    return [wb.compiler("cuda"), *flags, *arch, "--pre-include", str(shim), f"-I{src.parent}",
            *defs, "-o", str(out), str(src)]


def run_timed(cmd: list[str], cwd: str) -> tuple[float, float, str]:
    """(wall s, CPU s of the child processes, stderr). Raises on a failed compile."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{p.stderr[-2000:]}")
    return wall, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime), p.stderr


def variants(sm: int, tmp: Path) -> dict[str, list[str]]:
    """name -> the full nvcc command of each solve-mode variant."""
    arch = [f"-arch=sm_{sm}"]
    sass_only = [f"-gencode=arch=compute_{sm},code=sm_{sm}"]
    bare_shim = tmp / "shim_no_include.h"
    bare_shim.write_text(wb.SHIM.read_text().replace("#include <cuda_runtime.h>\n", ""))
    out = tmp / "v.so"
    now_job = wb.BuildJob("now", "cuda", "", SGEMM.name, str(SGEMM.parent), DEFINES,
                          target=f"sm_{sm}")
    return {
        "before": nvcc_cmd(BEFORE, arch, SGEMM, out),
        "host -O1": nvcc_cmd([*BEFORE, "-O1"], arch, SGEMM, out),
        "host -O0": nvcc_cmd([*BEFORE, "-O0"], arch, SGEMM, out),
        "no PTX in fatbin": nvcc_cmd(BEFORE, sass_only, SGEMM, out),
        "-nodlink": nvcc_cmd([*BEFORE, "-nodlink"], arch, SGEMM, out),
        "--threads 0": nvcc_cmd([*BEFORE, "--threads", "0"], arch, SGEMM, out),
        "shim w/o include": nvcc_cmd(BEFORE, arch, SGEMM, out, shim=bare_shim),
        "-cudart shared *": nvcc_cmd([*BEFORE, "-cudart", "shared"], arch, SGEMM, out),
        "now (build.py)": wb.command(now_job, SGEMM, out),
        "nvcc -cubin": [wb.compiler("cuda"), "-cubin", "-std=c++17", "-Xptxas", "-v",
                        "-lineinfo", *arch, *(f"-D{k}={v}" for k, v in sorted(DEFINES.items())),
                        "-o", str(tmp / "v.cubin"), str(SGEMM)],
    }


def nvrtc_in_process(source: str, sm: int, defines: dict) -> tuple[float, float, str]:
    opts = nvrtc.options(f"sm_{sm}", defines, [str(SGEMM.parent)], [])
    c0, t0 = time.process_time(), time.perf_counter()
    out = nvrtc.compile_in_process(source, SGEMM.name, "sgemm_kernel", opts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if not out["ok"]:
        raise RuntimeError(out["log"])
    return wall, cpu, out["log"]


def kernel_mode_build(source: str, sm: int, defines: dict, name: str, cache: Path,
                      tag: str) -> wb.BuildResult:
    launch = {"kernel": "sgemm_kernel", "block": [1], "grid": [1], "smem_bytes": 0}
    job = wb.BuildJob(f"{tag}-{time.perf_counter_ns()}", "cuda", source, name,
                      str(SGEMM.parent), defines, target=f"sm_{sm}", mode="kernel",
                      launch=launch)
    res, _ = wb.build(job, cache=cache)
    if not res.ok:
        raise RuntimeError(res.error)
    return res


def per_candidate(sm: int, repeats: int, tmp: Path) -> dict[str, dict[str, float]]:
    cmds = variants(sm, tmp)
    src = device_only(SGEMM.read_text())
    kernel_mode_build(src, sm, DEFINES, SGEMM.name, tmp / "cache", "warm")  # start the process
    wall: dict[str, list[float]] = {k: [] for k in [*cmds, "NVRTC in-process",
                                                     "kernel mode (build.py)"]}
    cpu: dict[str, list[float]] = {k: [] for k in wall}
    for r in range(repeats):
        for name, cmd in cmds.items():
            w, c, _ = run_timed(cmd, str(tmp))
            wall[name].append(w)
            cpu[name].append(c)
        w, c, _ = nvrtc_in_process(src, sm, DEFINES)
        wall["NVRTC in-process"].append(w)
        cpu["NVRTC in-process"].append(c)
        res = kernel_mode_build(src, sm, DEFINES, SGEMM.name, tmp / "cache", f"r{r}")
        wall["kernel mode (build.py)"].append(res.compile_s)
        cpu["kernel mode (build.py)"].append(float("nan"))  # in the compiler process
        print(f"  round {r + 1}/{repeats} done", file=sys.stderr, flush=True)
    return {k: {"wall": statistics.median(wall[k]), "cpu": statistics.median(cpu[k]),
                "iqr": _iqr(wall[k])} for k in wall}


def _iqr(xs: list[float]) -> float:
    if len(xs) < 4:
        return float("nan")
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]


def phases(cmds: dict[str, list[str]], repeats: int, tmp: Path) -> dict[str, dict[str, float]]:
    """Per command (interleaved rounds): median ms per nvcc phase (``nvcc --time``), the
    host compile of crt/link.stub (device-link registration) kept apart from the main one."""
    per: dict[str, dict[str, list[float]]] = {k: {} for k in cmds}
    for r in range(repeats):
        for name, cmd in cmds.items():
            csv_path = tmp / f"time-{r}.csv"
            csv_path.unlink(missing_ok=True)
            run_timed([*cmd, "--time", str(csv_path)], str(tmp))
            got: dict[str, float] = {}
            with open(csv_path) as f:
                for row in csv.reader(f):
                    if len(row) < 8 or row[1].strip() == "phase name":
                        continue
                    key = row[1].strip() + (" link.stub" if "link.stub" in row[2] else "")
                    got[key] = got.get(key, 0.0) + float(row[6])
            for k, v in got.items():
                per[name].setdefault(k, []).append(v)
    return {n: {k: statistics.median(v) for k, v in d.items()} for n, d in per.items()}


def host_compile(cmd: list[str], repeats: int, tmp: Path) -> dict[str, float]:
    """Median CPU seconds of the host compile phase alone (gcc on nvcc's cudafe1.cpp, kept
    with --keep) at -O3 / -O1 / -O0, interleaved: what the host -O level changes."""
    keep = tmp / "keep-host"
    keep.mkdir(exist_ok=True)
    run_timed([*cmd, "--keep", "--keep-dir", str(keep)], str(tmp))
    p = subprocess.run([*cmd, "--dryrun"], capture_output=True, text=True, cwd=str(tmp))
    line = next(x for x in p.stderr.splitlines() if " -c -x c++ " in x and "cudafe1.cpp" in x)
    import shlex

    argv = [(str(next(keep.glob("*.cudafe1.cpp"))) if a.endswith("cudafe1.cpp")
             else str(tmp / "host.o") if a.endswith(".o") else a)
            for a in shlex.split(line.removeprefix("#$ "))]
    out: dict[str, list[float]] = {}
    for _ in range(repeats):
        for lvl in ("-O3", "-O1", "-O0"):
            out.setdefault(lvl, []).append(
                run_timed([lvl if a == "-O3" else a for a in argv], str(keep))[1])
    return {k: statistics.median(v) for k, v in out.items()}


def device_code(cmd: list[str], tmp: Path, tag: str) -> tuple[str, str]:
    """(sha256 of the kernel's cubin from --keep, ptxas summary) of one nvcc command."""
    keep = tmp / f"keep-{tag}"
    keep.mkdir()
    _, _, log = run_timed([*cmd, "--keep", "--keep-dir", str(keep)], str(tmp))
    if "-cubin" in cmd:  # the output is the cubin
        keep = Path(cmd[cmd.index("-o") + 1]).parent
    cubins = [p for p in keep.glob("*.cubin") if "dlink" not in p.name]
    if len(cubins) != 1:
        raise RuntimeError(f"{tag}: expected one kernel cubin, found {cubins}")
    return hashlib.sha256(cubins[0].read_bytes()).hexdigest()[:16], _ptxas(log)


def _ptxas(log: str) -> str:
    ks = parse_ptxas(log)
    return ", ".join(f"{k.registers} regs {k.smem_bytes} B smem {k.spill_bytes} B spill"
                     for k in ks) or "-"


def throughput(sm: int, jobs: int, tmp: Path) -> dict[str, float]:
    """Builds per second with ``jobs`` at once over 2 x jobs distinct sgemm candidates."""
    sp = load_sweep(ROOT / "sweeps" / "sgemm").space("cuda")
    cands = [c for c in expand(sp, load_catalog(), sm) if c.defines.get("TILED") == 1]
    cands = cands[:: max(1, len(cands) // (2 * jobs))][: 2 * jobs]
    src = device_only(SGEMM.read_text())
    out: dict[str, float] = {}

    def nvcc_one(flags_kind: str, i: int, c) -> None:
        o = tmp / f"tp-{flags_kind}-{i}.so"
        if flags_kind == "before":
            cmd = nvcc_cmd(BEFORE, [f"-arch=sm_{sm}"], SGEMM, o, defines=c.defines)
        else:
            job = wb.BuildJob("tp", "cuda", "", SGEMM.name, str(SGEMM.parent), c.defines,
                              target=f"sm_{sm}")
            cmd = wb.command(job, SGEMM, o)
        run_timed(cmd, str(tmp))

    for kind in ("before", "now (build.py)"):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(jobs) as ex:
            list(ex.map(nvcc_one, [kind.split()[0]] * len(cands), range(len(cands)), cands))
        out[kind] = len(cands) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(lambda ic: kernel_mode_build(src, sm, ic[1].defines, SGEMM.name,
                                                 tmp / "tpcache", f"tp{ic[0]}"),
                    enumerate(cands)))
    out["kernel mode (build.py)"] = len(cands) / (time.perf_counter() - t0)
    out["n"] = len(cands)
    return out


def sgemm_kt(sm: int, tmp: Path) -> list[tuple[str, float, str]]:
    """Kernel-mode builds of sweeps/sgemm_kt's baseline and two tiled candidates."""
    sp = load_sweep(ROOT / "sweeps" / "sgemm_kt").space("cuda")
    cands = expand(sp, load_catalog(), sm)
    picks = [cands[0]] + [c for c in cands if c.params["tile_size_x"] * c.params["tile_size_y"]
                          in (16, 64) and c.params["use_padding"] == 0
                          and c.params["read_only"] == 0][:2]
    rows = []
    for c in picks:
        job = wb.BuildJob(f"kt-{c.candidate_id}-{time.perf_counter_ns()}", "cuda",
                          sp.source_text(), sp.source.name, str(sp.source.parent), c.defines,
                          sp.flags, c.target, sp.include_dirs, sp.mode, sp.launch_spec())
        res, _ = wb.build(job, cache=tmp / "ktcache")
        if not res.ok:
            raise RuntimeError(res.error)
        p = c.params
        label = (f"bx={p['block_size_x']} by={p['block_size_y']} tx={p['tile_size_x']} "
                 f"ty={p['tile_size_y']}")
        rows.append((label, res.compile_s, f"{res.registers} regs {res.spill_bytes} B spill"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--arch", type=int, default=90)
    a = ap.parse_args()
    ver = subprocess.run([wb.compiler("cuda"), "--version"], capture_output=True,
                         text=True).stdout.strip().splitlines()[-1]
    print(f"nvcc: {ver}; NVRTC {'.'.join(map(str, nvrtc.version()))} "
          f"({nvrtc._loaded_library()}); {os.cpu_count()} CPUs; sm_{a.arch}")
    print(f"candidate: sweeps/sgemm/sgemm.cu {' '.join(f'{k}={v}' for k, v in DEFINES.items())}")
    with tempfile.TemporaryDirectory(prefix="kopt-bench-build-") as t:
        tmp = Path(t)
        res = per_candidate(a.arch, a.repeats, tmp)
        b = res["before"]
        print(f"\nper candidate, median of {a.repeats} interleaved rounds (s; ratio to before)")
        print(f"{'build':26s} {'wall':>7s} {'IQR':>6s} {'ratio':>7s} {'CPU':>7s} {'ratio':>7s}")
        for k, v in res.items():
            cpu = "" if v["cpu"] != v["cpu"] else f"{v['cpu']:7.2f} {v['cpu'] / b['cpu']:7.2f}"
            print(f"{k:26s} {v['wall']:7.2f} {v['iqr']:6.2f} {v['wall'] / b['wall']:7.2f} {cpu}")
        print("  * not applied: the .so would need libcudart.so at run time")
        cmds = variants(a.arch, tmp)
        ph = phases({k: cmds[k] for k in ("before", "now (build.py)")}, a.repeats, tmp)
        pb, pn = ph["before"], ph["now (build.py)"]
        print(f"\nnvcc --time phases, median ms of {a.repeats} interleaved (before -> now)")
        for k in sorted(set(pb) | set(pn), key=lambda k: -pb.get(k, 0)):
            print(f"  {k:32s} {pb.get(k, 0):8.1f} -> {pn.get(k, 0):8.1f}")
        print(f"  {'total':32s} {sum(pb.values()):8.1f} -> {sum(pn.values()):8.1f}")
        hc = host_compile(cmds["before"], a.repeats, tmp)
        print("\nhost compile phase alone (gcc on the cudafe1.cpp), median CPU s: "
              + ", ".join(f"{k} {v:.3f}" for k, v in hc.items()))
        print("\ndevice code (sha256 of the kernel's cubin) and ptxas figures")
        ref_hash, _ = device_code(cmds["before"], tmp, "before")
        for k in ("host -O1", "host -O0", "no PTX in fatbin", "-nodlink", "now (build.py)",
                  "nvcc -cubin"):
            h, fig = device_code(cmds[k], tmp, k.replace(" ", "_"))
            print(f"  {k:24s} {h} {'identical' if h == ref_hash else 'DIFFERENT'}  {fig}")
        _, _, log = nvrtc_in_process(device_only(SGEMM.read_text()), a.arch, DEFINES)
        print(f"  {'NVRTC':24s} {'-':16s} {'(own cubin)':9s}  {_ptxas(log)}")
        print("\nkernel mode on sweeps/sgemm_kt (NVRTC through workers.build)")
        for label, s, fig in sgemm_kt(a.arch, tmp):
            print(f"  {label:32s} {s:6.2f} s  {fig}")
        tp = throughput(a.arch, a.jobs, tmp)
        print(f"\nthroughput: {tp['n']} distinct tiled sgemm candidates, {a.jobs} builds at once")
        for k in ("before", "now (build.py)", "kernel mode (build.py)"):
            print(f"  {k:24s} {tp[k]:6.2f} builds/s  x{tp[k] / tp['before']:.2f}")


if __name__ == "__main__":
    main()
