"""The process ncu profiles: prepare inputs like the harness, call ``solve`` once, exit.

``python -m workers.ncu_target JOB.json``; exit code 0 when ``solve`` ran and the
CUDA runtime reported no error.
"""

from __future__ import annotations

import json
import sys

from workers.harness import Harness, JobError


def main(path: str) -> int:
    job = json.loads(open(path).read())
    h = Harness(job.get("device", "cuda"))
    try:
        d = h.prepare(job)
        lib = h.lib(job["artifact"], job["signature"])
        h.poison(d)
        h.call(lib, job, d)
        h.check_cuda(lib, "solve")
    except JobError as e:
        print(f"kopt ncu target: {e.status}: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
