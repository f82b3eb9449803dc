"""Is it the candidate or the harness? The 24 sgemm candidates of bench/check_cost.py (same
draw), built in parallel, then run one after another in ONE in-process harness (guarded, as
`kopt sweep` runs them). After each: every pristine input set the harness holds (seen and
unseen) compared element by element with a fresh copy drawn from ref.py on the CPU, and
every buffer set's inputs with its pristine set. A candidate that changes memory it was never
given shows up as the first one after which a copy differs.
Usage: python3 docs/verified/sgemm_set2_integrity.py [N]"""
import concurrent.futures as cf
import os
import platform
import sys
import tempfile
from pathlib import Path

import torch

from kopt.catalog import load_catalog
from kopt.expand import cap, iter_candidates, stable_hash
from kopt.pipeline import build_id, job_base
from kopt.spec import load_sweep
from workers import build as wbuild
from workers.harness import Harness

n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
sweep = load_sweep("sweeps/sgemm")
space = sweep.space("cuda")
digest = stable_hash(space.source_text())
cands = cap(iter_candidates(space, load_catalog(), 90, source_digest=digest), n, seed=0)
ident = wbuild.compiler_identity(space.toolchain)
cache = Path(tempfile.mkdtemp(prefix="kopt-integrity-"))
jobs = [wbuild.BuildJob(build_id(space, c, digest, ident, platform.machine()), "cuda",
                        space.source_text(), space.source.name, str(space.source.parent),
                        c.defines, space.flags, c.target, space.include_dirs,
                        mode=space.mode, launch=space.launch_spec()) for c in cands]
with cf.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
    built = list(ex.map(lambda j: wbuild.build(j, cache=cache), jobs))
print(f"built {sum(r.ok for r, _ in built)} of {len(built)}", flush=True)
sys.path.insert(0, "sweeps/sgemm")
from ref import inputs  # noqa: E402

dims = space.dims[0]
fresh = {s: inputs(s, **dims) for s in range(sweep.seed, sweep.seed + 4)}
h = Harness("cuda")
base = job_base(sweep, space)


def integrity(tag: str) -> None:
    for d in h.data.values():
        for s in d.sets + d.unseen:
            for name, t in s.inputs.items():
                bad = (t.cpu() != fresh[s.seed][name]).nonzero()
                if len(bad):
                    pos = [tuple(int(i) for i in p) for p in bad[:5]]
                    vals = [(float(t[p].cpu()), float(fresh[s.seed][name][p])) for p in pos]
                    print(f"  !! {tag}: pristine seed {s.seed} {name}: {len(bad)} elements "
                          f"differ, first {pos} (now, drawn) {vals}; ptr {t.data_ptr():#x}",
                          flush=True)
        for b, buf in enumerate(d.bufs):
            for name, t in buf.inputs.items():
                print(f"  {tag}: buffer {b} {name} ptr {t.data_ptr():#x} .. "
                      f"{t.data_ptr() + t.numel() * t.element_size():#x}", flush=True) \
                    if tag == "first" else None
            for name, t in buf.outputs.items():
                if tag == "first":
                    print(f"  {tag}: buffer {b} out {name} ptr {t.data_ptr():#x} .. "
                          f"{t.data_ptr() + t.numel() * t.element_size():#x}", flush=True)
        if tag == "first":
            for s in d.sets + d.unseen:
                for name, t in s.inputs.items():
                    print(f"  first: pristine seed {s.seed} {name} ptr {t.data_ptr():#x}",
                          flush=True)


first = True
for c, j, (res, data) in zip(cands, jobs, built):
    if not res.ok:
        print(f"{c.candidate_id} {c.params}: build failed", flush=True)
        continue
    art = str(wbuild.ensure_artifact(j.build_id, data, cache=cache))
    r = h.run({**base, "artifact": art, "build_id": j.build_id, "job_key": c.candidate_id,
               "dims": dims})
    print(f"{c.candidate_id} {c.defines}: {r['status']} med {r.get('median_ms')} "
          f"{(r.get('error') or '')[:160]}", flush=True)
    integrity("first" if first else c.candidate_id)
    first = False
print("done", flush=True)

# every candidate that failed its check: the same library on fresh tensors of the failing set
import ctypes  # noqa: E402

for c, j, (res, data) in zip(cands, jobs, built):
    if not res.ok:
        continue
    lib = h.libs.get(str(wbuild.ensure_artifact(j.build_id, data, cache=cache)))
    if lib is None:
        continue
    for seed in (sweep.seed, sweep.seed + 1):
        A, B = fresh[seed]["A"].cuda(), fresh[seed]["B"].cuda()
        C = torch.full((dims["M"], dims["N"]), float("nan"), device="cuda")
        lib.solve(ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()),
                  ctypes.c_void_p(C.data_ptr()), dims["M"], dims["N"], dims["K"])
        torch.cuda.synchronize()
        exp = (A.double() @ B.double())
        ok = torch.isclose(C.double(), exp, rtol=1e-3, atol=1e-2)
        if not bool(ok.all()):
            p = tuple(int(i) for i in (~ok).nonzero()[0])
            print(f"by hand {c.candidate_id} seed {seed}: {int((~ok).sum())} bad, first {p} "
                  f"got {float(C[p]):.7f} fp64 {float(exp[p]):.7f}", flush=True)
print("by hand done", flush=True)
