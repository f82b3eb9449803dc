"""Probe for the next step of a GPU's witness turns (docs/judge-outside.md, "Tried: a GPU's
witness turns through host memory"): can a process write and read another's device buffers
through CUDA IPC handles when the two are in different PID namespaces, and how long does a
set of the README's GPU sweep (3 x 256 MB) take that way, against the host-memory round trip
the gpu-witness branch makes?

Run on the GPU host, repo root: ``python3 docs/verified/ipc_probe.py [MB]`` (default 256).
Prints one line per step; a failed step prints its error and the probe goes on.
The child is started three ways: plainly, under ``unshare --pid --fork --mount-proc`` (a PID
namespace of its own, as the harness's sandbox has), and under
``unshare --pid --fork --mount-proc`` with a private /dev/shm (torch's CUDA IPC keeps a
reference counter in a shared-memory file).
"""

from __future__ import annotations

import base64
import pickle
import subprocess
import sys
import time

CHILD = r"""
import base64, pickle, sys, time, torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor
args = pickle.loads(base64.b64decode(sys.stdin.read()))
try:
    t0 = time.perf_counter()
    x = rebuild_cuda_tensor(*args)
    torch.cuda.synchronize()
    opened = (time.perf_counter() - t0) * 1e3
    src = torch.full_like(x, 3.0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    x.copy_(src)  # the judge writing an input set into the contender's buffer
    torch.cuda.synchronize()
    wrote = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    back = x.clone()  # the judge reading the contender's outputs
    torch.cuda.synchronize()
    read = (time.perf_counter() - t0) * 1e3
    print(f"child ok: opened {opened:.2f} ms, wrote {wrote:.3f} ms, read {read:.3f} ms, "
          f"sum {float(back.sum()):.6g}")
except Exception as e:
    print(f"child failed: {e!r}")
"""


def main() -> None:
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    n = mb * (1 << 20) // 4
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    _, args = reduce_tensor(x)
    blob = base64.b64encode(pickle.dumps(args)).decode()
    ways = {"plain": [], "pid-ns": ["unshare", "--pid", "--fork", "--mount-proc"],
            "pid-ns+private-shm": ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
                                   "mount -t tmpfs tmpfs /dev/shm && exec \"$0\" \"$@\""]}
    for name, pre in ways.items():
        x.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        p = subprocess.run([*pre, sys.executable, "-c", CHILD], input=blob, text=True,
                           capture_output=True, timeout=120)
        got = float(x.sum()) if p.returncode == 0 else float("nan")
        print(f"{name}: rc {p.returncode}, {time.perf_counter() - t0:.1f} s, "
              f"{(p.stdout or '').strip()} {(p.stderr or '').strip()[-300:]} "
              f"| parent sees sum {got:.6g} (want {3.0 * n:.6g})")
    # the host-memory round trip the gpu-witness branch made, per buffer of this size
    h = torch.empty(n, dtype=torch.float32)
    for what, fn in (("device->host", lambda: h.copy_(x)), ("host->device", lambda: x.copy_(h))):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        print(f"pageable {what}: {(time.perf_counter() - t0) * 1e3:.1f} ms for {mb} MB")


if __name__ == "__main__":
    main()
