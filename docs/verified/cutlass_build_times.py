"""Build the sweeps/gemm_cutlass candidates whose params match the given JSON dicts through
kopt's builder (workers.build.build, for sm_90a, the build cache in /tmp/h8b/cache) and
print one JSON line per build: wall and CPU seconds of the compiler (its process tree),
registers, spills, and whether ptxas warned that wgmma was serialized (C7510). Usage (repo
root): PYTHONPATH=$PWD python docs/verified/cutlass_build_times.py '{"KSCHED": 2, ...}' ..."""
import json
import platform
import resource
import sys
import time
from pathlib import Path

from kopt.builder import build_id, build_job
from kopt.catalog import load_catalog
from kopt.expand import iter_candidates, space_digest
from kopt.spec import load_sweep
from workers import build as wb

sp = load_sweep("sweeps/gemm_cutlass").space("cuda")
cands = list(iter_candidates(sp, load_catalog(), 90))
dig = space_digest(sp)
ident = wb.compiler_identity(sp.toolchain)
for want in map(json.loads, sys.argv[1:]):
    c = next(c for c in cands if all(c.params[k] == v for k, v in want.items()))
    bid = build_id(sp, c, dig, ident, platform.machine())
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res, data = wb.build(build_job(sp, c, bid, sp.source_text()), cache=Path("/tmp/h8b/cache"))
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    warn = "C7510" in (res.log or "")
    print(json.dumps({"params": c.params, "ok": res.ok, "target": c.target,
                      "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(cpu, 1),
                      "registers": res.registers, "spill": res.spill_bytes, "C7510": warn,
                      "cached": res.cached, "error": (res.error or "")[-600:]}), flush=True)
