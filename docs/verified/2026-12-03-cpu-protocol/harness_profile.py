"""Profile the CPU harness's jobs of the main job's vector_add, without Ray.

    cd REPO && python docs/verified/2026-12-03-cpu-protocol/harness_profile.py [NT] [CACHE]

Builds eight launch configs of sweeps/vector_add/vector_add.cpp (NT threads, CHUNK 16384 /
262144, UNROLL 1-8), runs one job each in one Harness("cpu") at the main job's CPU size
(N = 2^21), and prints per job its wall time, median, samples and wall / (median x
samples), then cProfile's cumulative table over the last seven jobs.
"""

import cProfile
import dataclasses
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, ".")

from kopt.core.contract import parse_signature_file  # noqa: E402
from workers import build as wb  # noqa: E402
from workers.harness import Harness  # noqa: E402

NT = int(sys.argv[1]) if len(sys.argv) > 1 else 1
CACHE = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/kopt-profile-cache")
SRC = Path("sweeps/vector_add/vector_add.cpp")
TIMING = {"warmup_ms": 10, "min_samples": 5, "max_samples": 30, "target_rel_error": 0.01,
          "max_time_ms": 2000, "timeout_s": 60}


def artifacts() -> list[str]:
    out = []
    for i, (chunk, unroll) in enumerate((c, u) for u in (1, 2, 4, 8) for c in (16384, 262144)):
        bj = wb.BuildJob(f"va-prof{NT}-{i}", "cpu", SRC.read_text(), SRC.name, str(SRC.parent),
                         {"NT": NT, "CHUNK": chunk, "UNROLL": unroll})
        res, data = wb.build(bj, cache=CACHE)
        assert res.ok, res.error
        out.append(str(wb.ensure_artifact(bj.build_id, data, cache=CACHE)))
    return out


def job(art: str) -> dict:
    sig = [dataclasses.asdict(a) for a in parse_signature_file(SRC).args]
    return {"artifact": art, "signature": sig, "reference": str(SRC.parent / "ref.py"),
            "dims": {"N": 2097152}, "seed": 3, "args": {"x": ["N"], "y": ["N"], "out": ["N"]},
            "scalars": {}, "tolerance": {"atol": 1e-6, "rtol": 1e-6}, "timing": TIMING}


def main() -> None:
    arts = artifacts()
    h = Harness("cpu")
    h.run(job(arts[0]))  # the first job draws the inputs and the held-back sets
    prof = cProfile.Profile()
    for a in arts[1:]:
        prof.enable()
        t = time.perf_counter()
        r = h.run(job(a))
        wall = time.perf_counter() - t
        prof.disable()
        print(f"job {wall * 1e3:.0f} ms {r['status']} median {r['median_ms']:.3f} ms "
              f"n {r['n_samples']} wall/(median x n) "
              f"{wall * 1e3 / (r['median_ms'] * r['n_samples']):.2f}")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
