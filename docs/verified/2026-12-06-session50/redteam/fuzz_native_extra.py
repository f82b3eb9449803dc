# ruff: noqa
# red-team review of 956b164 (session 50), as run then; its paths are /tmp/rt50 (a clone)
import torch, math
from workers import native
def iso(g, e, a, r): return torch.isclose(g.double(), e.double(), rtol=r, atol=a, equal_nan=False)
# misaligned views (storage offset 1) for every dtype
for dt in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
    base = torch.randn(10001).to(dt); g = base[1:]; e = (base.double() * (1 + 1e-3)).to(dt)[1:]
    for a, r in ((0, 1e-3), (1e-5, 1e-5), (0, 2e-3)):
        ok = iso(g, e, a, r); c = native.compare(g, e, a, r)
        print(dt, "offset-1 view", g.data_ptr() % 8, "native bad", c.bad, "torch bad", int((~ok).sum()), "all_close", native.all_close(g, e, a, r), bool(ok.all()))
# numel differs
try:
    native.all_close(torch.ones(5, dtype=torch.bfloat16), torch.ones(6, dtype=torch.bfloat16), 0, 0)
except ValueError as ex: print("numel differs -> ValueError:", str(ex)[:60])
# f64 overflow of |a-b| (pre-existing f64 path; only with rtol >= 1)
g = torch.tensor([1.7e308], dtype=torch.float64); e = torch.tensor([-1.7e308], dtype=torch.float64)
for r in (1e-5, 1.0, 2.0):
    print("f64 overflow rtol", r, "native close:", native.compare(g, e, 0.0, r).bad == 0, "torch close:", bool(iso(g, e, 0.0, r).all()))
