# ruff: noqa
# red-team review of 956b164 (session 50), as run then; its paths are /tmp/rt50 (a clone)
"""Differential fuzz: workers.native compare/all_close vs torch.isclose(got.double(), exp.double())."""
import sys, time, math, random
import torch
from workers import native
assert native.library() is not None, native.WHY_NOT
torch.manual_seed(0); random.seed(0)
TOLS = [(0.0, 0.0), (1e-8, 1e-5), (1e-3, 1e-2), (2.0**-10, 2.0**-7), (0.0, 2.0**-7), (1e-5, 0.0),
        (5e-3, 5e-3), (1.0, 0.0), (0.0, 1.0), (1e-300, 1e-16), (float(2.0**-24), 2.0**-8)]
mism = []
def ref(g, e, atol, rtol):
    return torch.isclose(g.double(), e.double(), rtol=rtol, atol=atol, equal_nan=False)
def chk(g, e, atol, rtol, tag):
    ok = ref(g, e, atol, rtol)
    c = native.compare(g, e, atol, rtol)
    bad = int((~ok).sum())
    first = int((~ok).nonzero()[0]) if bad else -1
    ac = native.all_close(g, e, atol, rtol)
    if (c.bad, c.first) != (bad, first) or ac != (bad == 0):
        idx = (~ok).nonzero().flatten()[:3].tolist()
        mism.append((tag, atol, rtol, c.bad, bad, c.first, first, ac))
        print("MISMATCH", tag, atol, rtol, "native", c.bad, c.first, ac, "torch", bad, first, flush=True)
        return False
    return True
def u16(n):
    return torch.randint(0, 65536, (n,), dtype=torch.int32).to(torch.int16)
total = 0
t0 = time.time()
# 1. 16-bit vs 16-bit: random pairs and near pairs
for dt in (torch.bfloat16, torch.float16):
    for rep in range(6):
        n = 2_000_003
        a = u16(n)
        b_rand = u16(n)
        b_near = (a.to(torch.int32) + torch.randint(-3, 4, (n,), dtype=torch.int32)).to(torch.int16)
        b_sign = (a.to(torch.int32) ^ 0x8000).to(torch.int16)
        for b, kind in ((b_rand, "rand"), (b_near, "near"), (b_sign, "sign")):
            g, e = a.view(dt), b.view(dt)
            for atol, rtol in TOLS:
                chk(g, e, atol, rtol, f"{dt}-{kind}"); total += n
# 2. f32/bf16/f16 vs f64 with values at the band's edge
def f64_bits(n):
    x = torch.randint(-2**62, 2**62, (n,), dtype=torch.int64) * 2 + torch.randint(0, 2, (n,))
    return x.view(torch.float64)
for dt in (torch.float32, torch.bfloat16, torch.float16):
    for rep in range(4):
        n = 1_000_001
        scale = torch.tensor([1e-45, 1e-40, 6e-8, 1e-5, 1.0, 3.0, 1e4, 65504.0, 1e38, 3.4e38, 1e300])
        e = torch.randn(n, dtype=torch.float64) * scale[torch.randint(0, len(scale), (n,))].double()
        e[:1000] = f64_bits(1000)  # raw doubles incl. NaN/inf/subnormals
        e[1000:1010] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324, 1.7e308, -1.7e308, 2.0**-149], dtype=torch.float64)
        for atol, rtol in TOLS:
            allowed = atol + (rtol * e).abs()
            cands = [e, e + allowed, e - allowed, e + allowed * (1 + 2**-50), e - allowed * (1 + 2**-50),
                     e + allowed * (1 - 2**-50), e * (1 + rtol), -e, e + 1e-300]
            for gd in cands:
                g = gd.to(dt)
                # also nudge by one ulp of the output type up/down
                for step in (0, 1, -1):
                    if step:
                        gi = g.view(torch.int16 if dt != torch.float32 else torch.int32).clone()
                        gi += step
                        g2 = gi.view(dt)
                    else:
                        g2 = g
                    chk(g2, e, atol, rtol, f"{dt}-vs-f64"); total += n
    # same dtype edge
    n = 1_000_001
    e = (torch.randn(n) * 10).to(dt)
    for atol, rtol in TOLS:
        allowed = atol + (rtol * e.double()).abs()
        for gd in (e.double() + allowed, e.double() - allowed):
            g = gd.to(dt)
            for step in (0, 1, -1):
                gi = g.view(torch.int16 if dt != torch.float32 else torch.int32).clone(); gi += step
                chk(gi.view(dt), e, atol, rtol, f"{dt}-same-edge"); total += n
# 3. all_close block logic: one bad element at every position mod 4096, lengths not multiple of 4096
for dt in (torch.bfloat16, torch.float16, torch.float32):
    for n in (1, 4095, 4096, 4097, 8191, 12289, 100_003):
        base = torch.randn(n).to(dt)
        for pos in sorted({0, n - 1, n // 2, min(4095, n - 1), min(4096, n - 1)}):
            g = base.clone(); g[pos] = g[pos] * 2 + 1
            for e in (base, base.double()):
                if e.dtype == torch.float64 and dt == torch.float64: continue
                chk(g, e, 1e-5, 1e-5, f"{dt}-block-{n}-{pos}"); total += n
            g = base.clone(); g[pos] = math.nan
            chk(g, base, 1e-5, 1e-5, f"{dt}-nan-{n}-{pos}")
            chk(g, base.double(), 1e-5, 1e-5, f"{dt}-nan64-{n}-{pos}")
print("elements compared", total, "mismatching cases", len(mism), "in", round(time.time() - t0, 1), "s")
