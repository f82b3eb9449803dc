"""The GPU harness's watch on a GPU host (session 55): how many names it holds, whether CUDA's
start, torch's events, a matmul and torch.compile leave it unchanged (nothing named), how long
one comparison takes (ms, median of 200), and that a rebound torch.isclose is named.
Run from the repo root with the packed site on PYTHONPATH (device_env.sh)."""
import statistics
import time

import torch
import torch.fft
import torch.linalg
import torch.nn.functional
import torch.special

from workers import harness as H

watch = tuple(H.watched("cuda"))
taken = H.c_taken(watch)
# and a wider watch, by object only: every member of torch's public namespaces (which of
# them torch's own lazy work rebinds, as torch.compile rebinds torch.manual_seed on the CPU)
wide = [(m, n, v) for m in (torch, torch.nn.functional, torch.linalg, torch.fft, torch.special,
                            torch.cuda) for n, v in vars(m).items()
        if isinstance(v, H._WATCHED_TYPES)]
print(f"wide: {len(wide)} names")
print(f"watch: {len(watch)} names, {len(taken)} with their code or C pointers")
torch.cuda.init()
a = torch.randn(1024, 1024, device="cuda")
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
b = a @ a
e.record()
torch.cuda.synchronize()
print("after CUDA's start, events, a matmul:", H.replaced(watch, taken), H.rewritten(wide))
f = torch.compile(lambda x: (x @ x).relu())
f(a)
torch.cuda.synchronize()
print("after torch.compile on the GPU:", H.replaced(watch, taken), H.rewritten(wide))
xs = []
for _ in range(200):
    t = time.perf_counter()
    H.replaced(watch, taken)
    xs.append((time.perf_counter() - t) * 1e3)
print(f"one comparison: median {statistics.median(xs):.2f} ms, max {max(xs):.2f} ms")
real = torch.isclose
torch.isclose = lambda x, y, **k: real(x, x, **k)
print("torch.isclose rebound:", H.replaced(watch, taken))
torch.isclose = real
print("restored:", H.replaced(watch, taken))
