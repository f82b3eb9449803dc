# ruff: noqa
"""Red-team 53, attack B on the real CPU harness: SideBySide (clock=False: an iteration's
contest; clock=True: the closing) of the fault pack's honest MODE 0 ('h') and
redteam53/settler.cpp ('s', the same work: crashes in company, patches its clock alone).
Usage: python redteam53/real_settle.py [clock|noclock] [SCALE10 (10/SCALE10: the clock's rate alone)]"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, "/tmp/rt53/tests")
from test_faults import PACK, TIMING, artifact, job  # noqa: E402

from kopt.core.catalog import load_catalog  # noqa: E402
from kopt.loop.contests import SideBySide  # noqa: E402
from kopt.run.builder import LocalBuilder  # noqa: E402
from kopt.run.context import RunContext  # noqa: E402
from kopt.run.runner import Runner  # noqa: E402
from workers.device_actor import DeviceActor  # noqa: E402

HERE = Path(__file__).resolve().parent
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}


class ActorRunner(Runner):
    def __init__(self, actor: DeviceActor) -> None:
        super().__init__()
        self.actor, self.infos, self.log = actor, [{"device_class": "cpu-a", "backend": "cpu"}], []

    def run(self, inputs):  # pragma: no cover
        raise NotImplementedError

    def collect(self, fut):  # pragma: no cover
        raise NotImplementedError

    def call(self, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        res = getattr(self.actor, method)(*args)
        if method == "contest":
            self.log.append((method, [j["job_key"] for j in args[0]], res.get("status"),
                             str(res.get("error"))[:160],
                             [r.get("median_ms") for r in res.get("results", [])]))
        elif method == "clock":
            self.log.append((method, args[0]["job_key"], bool(args[3]), res.get("status")))
        else:
            self.log.append((method,))
        return res


class Faults:
    def __init__(self):
        self.seen = []

    def on_fault(self, m):
        self.seen.append(m)


def main(clock: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rt53-"))
    arts = {"bh": artifact(tmp, PACK / "faults.cpp", {"MODE": 0}),
            "bs": artifact(tmp, HERE / "settler.cpp", {"SCALE10": int(sys.argv[2]) if len(sys.argv) > 2 else 1000})}
    j = job(arts["bh"], PACK / "faults.cpp", PACK / "ref.py", {"N": 4096}, ARGS)
    common = {k: v for k, v in j.items() if k not in ("artifact", "job_key", "dims")}
    builder = LocalBuilder()
    builder.artifacts.update({b: Path(a).read_bytes() for b, a in arts.items()})
    actor = DeviceActor("cpu")
    runner, faults = ActorRunner(actor), Faults()
    try:
        ctx = RunContext(None, tmp, "r1", None, builder, runner, load_catalog(),
                         observers=[faults], common=common)
        by_cand = {"h": {json.dumps({"N": 4096}): ("key-h", "bh", 1.0, 0.01)},
                   "s": {json.dumps({"N": 4096}): ("key-s", "bs", 1.0, 0.01)}}
        side = SideBySide(ctx, 0, "cpu-a", by_cand, clock=clock)
        results, dropped, error = side.run()
    finally:
        actor.shutdown()
    for x in runner.log:
        print("CALL", x)
    print("FAULTS", json.dumps(faults.seen, indent=1))
    print("DROPPED", dropped, "ERROR", error)
    print("RESULTS", {c: {d: (r["median_ms"], r["n_samples"]) for d, r in per.items()}
                      for c, per in results.items()})


if __name__ == "__main__":
    main(len(sys.argv) > 1 and sys.argv[1] == "clock")
