"""The process ncu profiles: prepare inputs like the harness, call ``solve`` once, exit.

``python -m workers.ncu_target JOB.json``: one job; exit code 0 when ``solve`` ran and the
CUDA runtime reported no error.

``python -m workers.ncu_target --many JOBS.json``: a list of jobs, one ``solve`` call each,
in order, in one process (one ncu start, one CUDA context for the whole top-k). Each call
is bracketed on stdout by ``KOPT_NCU_BEGIN i`` / ``KOPT_NCU_END i`` lines (flushed), so
that ncu's ``==PROF== Profiling`` lines between them, printed while this process waits in
the profiled launch, say which launches belong to job ``i`` (workers.ncu.split_launches).
A job that fails prints ``KOPT_NCU_FAIL i STATUS: message``; a fatal CUDA error ends the
process (the jobs after it have no markers).
"""

from __future__ import annotations

import json
import sys

from workers.harness import Harness, JobError


def _one(h: Harness, job: dict) -> None:
    d = h.prepare(job, reference=False)  # no check here: inputs only (as the harness makes)
    lib = h.lib(job["artifact"], job["signature"])
    h.load(d, 0, 0)
    h.call(lib, job, d)
    h.check_cuda(lib, "solve")


def main(path: str) -> int:
    job = json.loads(open(path).read())
    h = Harness(job.get("device", "cuda"))
    try:
        _one(h, job)
    except JobError as e:
        print(f"kopt ncu target: {e.status}: {e}", file=sys.stderr)
        return 3
    return 0


def main_many(path: str) -> int:
    jobs = json.loads(open(path).read())
    h = Harness(jobs[0].get("device", "cuda") if jobs else "cuda")
    failed = 0
    for i, job in enumerate(jobs):
        print(f"KOPT_NCU_BEGIN {i}", flush=True)
        try:
            _one(h, job)
        except JobError as e:
            failed += 1
            print(f"KOPT_NCU_FAIL {i} {e.status}: {e}".replace("\n", " "), flush=True)
            if e.fatal:
                return 3
        print(f"KOPT_NCU_END {i}", flush=True)
    return 3 if failed == len(jobs) else 0


if __name__ == "__main__":
    if sys.argv[1] == "--many":
        sys.exit(main_many(sys.argv[2]))
    sys.exit(main(sys.argv[1]))
