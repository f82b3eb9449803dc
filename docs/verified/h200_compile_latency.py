"""Issue 14 on one H200 host: how long one NVRTC compile of sgemm_kt's baseline takes when
N warm compiler processes (workers.nvrtc.Compiler, each started and warmed by one compile
first, as the service's builders are: workers.build.warm_nvrtc) compile at the same time,
N = 1, 2, 4, 8, 16; the median and the fastest of the N, twice each. Also the CPU topology.
Run from the repo root on the GPU host (docs/verified/h200_compile_latency.sh).
"""
import json
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from workers import nvrtc
from workers.build import COMPILE_MEM_GB, WARM_KERNEL

SRC = open("sweeps/sgemm_kt/sgemm_kt.cu").read()
BASE = {"block_size_x": 16, "block_size_y": 16, "tile_size_x": 1, "tile_size_y": 1,
        "use_padding": 0, "read_only": 0}
REQ = {"source": SRC, "name": "sgemm_kt.cu", "kernel": "sgemm_kernel",
       "options": nvrtc.options("sm_90", BASE, [], [])}
WARM = {"source": WARM_KERNEL, "name": "w.cu", "kernel": "kopt_warm",
        "options": nvrtc.options("sm_90", {}, [], [])}


def timed(c: nvrtc.Compiler) -> float:
    t = time.perf_counter()
    out = c.compile(REQ, 120)
    assert out["ok"], out["log"][-500:]
    return time.perf_counter() - t


def main() -> None:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    print("\n".join(ln for ln in lscpu.splitlines() if ln.startswith(
        ("CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)", "Model name"))))
    comps = [nvrtc.Compiler(COMPILE_MEM_GB) for _ in range(16)]
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda c: c.compile(WARM, 120), comps))
        for rep in range(2):
            for n in (1, 2, 4, 8, 16):
                xs = list(ex.map(timed, comps[:n]))
                print(json.dumps({"rep": rep, "n": n, "median_s": round(statistics.median(xs), 3),
                                  "fastest_s": round(min(xs), 3),
                                  "slowest_s": round(max(xs), 3)}), flush=True)
    for c in comps:
        c.kill()


if __name__ == "__main__":
    main()
