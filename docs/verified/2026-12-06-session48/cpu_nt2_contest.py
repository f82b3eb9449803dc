"""CPU, this project's 2-core machine: an honest ``num_threads(2)`` kernel
(tests/fixtures/honest MODE 16) and a one-thread one (MODE 0) at N = 2^21, timed in its own
job, in a contest alone and in a contest of two (each contender in a harness of its own, in
turns), on a device of one thread. Run from the repository root:
``python docs/verified/2026-12-06-session48/cpu_nt2_contest.py``."""

import os
import sys
from pathlib import Path

sys.path.insert(0, "tests")
from test_faults import artifact, job  # noqa: E402

from workers.device_actor import DeviceActor  # noqa: E402

HONEST = Path("tests/fixtures/honest")
N = 1 << 21


def main() -> None:
    tmp = Path("/tmp/nt2")
    tmp.mkdir(exist_ok=True)
    src = HONEST / "honest.cpp"
    art = artifact(tmp, src, {})
    data = Path(art).read_bytes()
    for m in (16, 0):
        j = job(art, src, HONEST / "ref.py", {"N": N, "MODE": m}, {"x": ["N"], "y": ["N"]},
                tolerance={"atol": 1e-5, "rtol": 1e-4}, job_key=f"m{m}")
        j = {**j, "build_id": os.path.basename(os.path.dirname(art))}
        a = DeviceActor("cpu", threads=1)
        try:
            own = a.sandbox.run(j, 60)
            one = a.contest([j], 20, data)
            two = a.contest([j, {**j, "job_key": f"m{m}b"}], 20, data, data)
        finally:
            a.shutdown()
        print(m, "own", own.get("status"), round(own.get("median_ms") or -1, 4),
              "| alone", one.get("status"), [round(r["median_ms"], 4) for r in one["results"]],
              "| two", two.get("status"), [round(r["median_ms"], 4) for r in two["results"]])


if __name__ == "__main__":
    main()
