# ruff: noqa
"""False-positive scan: take the harness's watch in a fresh process, then do what an honest
ref.py may do, and print what replaced() reports after each step."""
import sys, time
import torch
from workers.harness import watched, c_taken, replaced
w = tuple(watched("cpu")); c = c_taken(w)
print("watch size", len(w), "c_watch", len(c))
steps = [
 ("manual_seed", lambda: torch.manual_seed(0)),
 ("set_num_threads", lambda: torch.set_num_threads(1)),
 ("set_flush_denormal", lambda: torch.set_flush_denormal(True)),
 ("deterministic", lambda: torch.use_deterministic_algorithms(True)),
 ("set_default_dtype", lambda: torch.set_default_dtype(torch.float64)),
 ("import nn.functional", lambda: __import__("torch.nn.functional")),
 ("import torch.fft/linalg/distributions", lambda: [__import__(m) for m in ("torch.fft","torch.linalg","torch.distributions","torch.sparse","torch.special")]),
 ("import torch._dynamo", lambda: __import__("torch._dynamo")),
 ("import torch.testing", lambda: __import__("torch.testing")),
 ("import torch.utils.data", lambda: __import__("torch.utils.data")),
 ("import torch.func", lambda: __import__("torch.func")),
 ("torch.compile eager", lambda: torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.randn(8))),
 ("torch.compile inductor", lambda: torch.compile(lambda x: x * 2 + 1)(torch.randn(8))),
 ("manual_seed after compile", lambda: torch.manual_seed(1)),
 ("torch.jit.script", lambda: torch.jit.script(lambda_fn)),
]
def lambda_fn(x: torch.Tensor) -> torch.Tensor:
    return x + 1
for name, f in steps:
    t = time.time()
    try:
        f()
        err = ""
    except Exception as e:
        err = repr(e)[:120]
    print(f"{name:40s} {time.time()-t:6.1f}s replaced={replaced(w, c)[:6]} {err}", flush=True)
