"""Issue 14.2 on one H200: what the warm ncu target's hand-over costs, phase by phase, and
whether a second process's idle CUDA context (plain, or under ncu) moves a timed kernel or
device-wide free memory. Run on the GPU host from the repo root (docs/verified/h200_ncu_ahead.sh).

Part 1, per variant (ncu as kopt's warm ncu runs it: the catalog's `always` metrics,
application-only, NVTX range ``kopt``; and the same target without ncu): the target imports
torch and says so, waits for ``go1``, makes its CUDA context, then the inputs (two 2048^2
float32 randn), says so, waits for ``go2``, runs 4 matmuls each in the NVTX range, exits.
The orchestrator gives go1 at once and go2 0.5 s after the inputs, so each phase is seen
alone; times are wall seconds from the orchestrator's clock.

Part 2: a timing process (CUDA events, 300 matmuls of 2048^3 after 20 warm-up calls, median
and p90 ms; free memory before and after) alone, beside a plain process holding an idle CUDA
context with inputs, and beside an ncu target holding one (context and inputs made before
the timing starts).
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

TARGET = r'''
import os, sys, time
from pathlib import Path
d = Path(sys.argv[1])
def say(w): (d / w).write_text(str(time.time()))
import torch
say("imported")
while not (d / "go1").exists(): time.sleep(0.002)
torch.cuda.init(); x = torch.ones(8, device="cuda"); torch.cuda.synchronize()
say("context")
a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
say("inputs")
while not (d / "go2").exists(): time.sleep(0.002)
t = time.time()
for i in range(4):
    torch.cuda.nvtx.range_push("kopt"); c = a @ b; torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
say("launched")
if len(sys.argv) > 2:  # hold: stay alive, idle, until told
    while not (d / "stop").exists(): time.sleep(0.01)
'''

TIMER = r'''
import json, statistics, sys, torch
torch.cuda.init()
a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(2048, 2048, device="cuda")
f0 = torch.cuda.mem_get_info()[0]
for _ in range(20): a @ b
torch.cuda.synchronize()
xs = []
for _ in range(300):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); a @ b; e.record(); e.synchronize(); xs.append(s.elapsed_time(e))
f1 = torch.cuda.mem_get_info()[0]
q = statistics.quantiles(xs, n=10)
print(json.dumps({"median_ms": round(statistics.median(xs), 4), "p90_ms": round(q[-1], 4),
                  "free_change_bytes": f1 - f0}))
'''


def ncu_cmd(tmp: Path) -> list[str]:
    always = yaml.safe_load(open("catalog/metrics.yaml"))["always"]
    exe = os.environ.get("NCU", "ncu")
    return [exe, "--clock-control", "none", "--target-processes", "application-only",
            "--kernel-name-base", "mangled", "--nvtx", "--nvtx-include", "kopt/",
            "--metrics", ",".join(always), "-o", str(tmp / "report"), "-f"]


def wait_for(p: Path, proc: subprocess.Popen, limit: float = 120) -> float:
    t0 = time.time()
    while not p.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"target exited {proc.returncode} before {p.name}: "
                               + (proc.stdout.read() if proc.stdout else ""))
        if time.time() - t0 > limit:
            raise RuntimeError(f"no {p.name} in {limit} s")
        time.sleep(0.002)
    return float(p.read_text() or time.time())


def phases(under_ncu: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="ahead-"))
    (tmp / "t.py").write_text(TARGET)
    cmd = [sys.executable, str(tmp / "t.py"), str(tmp)]
    if under_ncu:
        cmd = ncu_cmd(tmp) + cmd
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(tmp)})
    imp = wait_for(tmp / "imported", proc)
    g1 = time.time()
    (tmp / "go1").write_text("")
    ctx = wait_for(tmp / "context", proc)
    inp = wait_for(tmp / "inputs", proc)
    time.sleep(0.5)
    g2 = time.time()
    (tmp / "go2").write_text("")
    lau = wait_for(tmp / "launched", proc)
    out, _ = proc.communicate(timeout=300)
    end = time.time()
    return {"ncu": under_ncu, "rc": proc.returncode, "import_s": round(imp - t0, 2),
            "context_s": round(ctx - g1, 2), "inputs_s": round(inp - ctx, 2),
            "launches_s": round(lau - g2, 2), "exit_s": round(end - lau, 2),
            "passes": [ln.rsplit("-", 1)[-1].strip() for ln in out.splitlines()
                       if "passes" in ln]}


def timer() -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="timer-"))
    (tmp / "timer.py").write_text(TIMER)
    p = subprocess.run([sys.executable, str(tmp / "timer.py")], capture_output=True, text=True)
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {
        "rc": p.returncode, "err": p.stderr[-500:]}


def nvml_processes() -> list:
    """(pid, used MiB) per compute process NVML lists on GPU 0, and our pid namespace's view."""
    try:
        try:
            import pynvml
        except ImportError:
            from ray._private.thirdparty import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        ps = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        return [(p.pid, (p.usedGpuMemory or 0) >> 20) for p in ps] + [("self", os.getpid())]
    except Exception as e:  # noqa: BLE001
        return [repr(e)]


def beside(under_ncu: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="hold-"))
    (tmp / "t.py").write_text(TARGET)
    cmd = [sys.executable, str(tmp / "t.py"), str(tmp), "hold"]
    if under_ncu:
        cmd = ncu_cmd(tmp) + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(tmp)})
    wait_for(tmp / "imported", proc)
    (tmp / "go1").write_text("")
    wait_for(tmp / "inputs", proc)
    res = timer()
    res["nvml_processes"] = nvml_processes()
    (tmp / "go2").write_text("")
    wait_for(tmp / "launched", proc)
    (tmp / "stop").write_text("")
    proc.communicate(timeout=300)
    return {**res, "beside": "ncu target" if under_ncu else "plain context", "rc": proc.returncode}


def main() -> None:
    out = []
    for under in (False, True, True):
        r = phases(under)
        out.append(r)
        print(json.dumps(r), flush=True)
    t = time.time()
    p = subprocess.run([os.environ.get("NCU", "ncu"), "--query-metrics"], capture_output=True,
                       text=True)
    print(json.dumps({"query_metrics_s": round(time.time() - t, 2), "rc": p.returncode,
                      "lines": len(p.stdout.splitlines())}), flush=True)
    for what in ("alone", "plain", "ncu", "alone", "ncu", "plain", "alone"):
        r = timer() if what == "alone" else beside(what == "ncu")
        r.setdefault("beside", "nothing")
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
