"""A contest's witness turns (workers.witness) set up and judged by a harness of the device
that loads no candidate code.

Stdlib and workers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers import witness, witness_gpu
from workers.sandbox import Sandbox
from workers.status import Status


@dataclass
class Judging:
    """One contest's witness turns: ``plans`` (one per contender, in order; None when the
    contest has none, ``why`` then says why), ``null`` (workers.witness ``null_cost``) and
    ``bounded`` (workers.witness ``Plan``)."""

    plans: list[witness.Plan] | None
    null: witness.Null = witness.Null()
    why: str = ""
    bounded: bool = True
    failed: str = ""  # why the judge's check of the turns failed ("": it did not)
    # the judge could not hold its sets for want of memory other processes hold, or failed
    # otherwise but for the problem's own reasons: the contest's answers are set aside
    # (workers.device_actor), never taken unwitnessed
    unjudged: bool = False

    @property
    def said(self) -> str:
        """How this contest's contenders were judged, in words: ``8 witness turns each``,
        ``4 witness turns each, their outputs checked (...)`` or ``none: why``."""
        if self.plans is None:
            return f"none: {self.why}"
        if self.failed:
            return f"{self.plans[0].turns} witness turns each, not checked: {self.failed}"
        if not self.bounded:
            return (f"{witness.TURNS} witness turns each, their outputs checked (a device of "
                    "several threads: CPU time is no bound on its samples)")
        return f"{self.plans[0].turns} witness turns each"


def prepare(judge: Sandbox, jobs: list[dict[str, Any]], timeout_s: float,
            bounded: bool = True, gpu: bool = False, fresh: bool = False) -> Judging:
    """The input sets of ``jobs``' witness turns (one contender each, all of one problem
    size) drawn in ``judge`` (a sandbox that never runs candidate code; started when it is
    not), and its null turns taken. ``timeout_s``: each of its jobs' budget (s). A judge
    that cannot draw the sets, or whose memory the device actor cannot reach (workers.witness
    ``null_cost``), gives a Judging with no plans and why. ``bounded``: the contenders'
    samples are held to their witness calls' CPU (workers.witness ``Plan``); as many input
    sets are drawn as its contenders take turns (``Plan.turns``). ``gpu``: in device memory
    (workers.witness_gpu ``DevicePlan``). Every failure but one that is the problem's own
    (the judge's answer ``witnessless``: sets too large for the device; on a CPU ref.py's
    errors too) is ``unjudged``, the contest's answers set aside: on a host whose device
    actor can reach a harness (workers.witness_gpu ``host_why``, asked first by the device
    actor), a judge that crashed, ran out of memory, or found its context, mapping or GPU
    refused or busy met another process's doing (every GPU of a host is reachable from
    every sandbox; host memory is shared), which must not let a contest go without witness
    turns.
    ``fresh``: sets drawn anew, where the judge would keep the last contest's
    (workers.harness ``Harness._witness_sets``). Never raises."""
    plan = witness_gpu.DevicePlan if gpu else witness.Plan
    n = plan(0, [], bounded=bounded).turns
    try:
        got = judge.run({"witness_of": "sets", "entry": jobs[0], "n": n, "least": witness.TURNS,
                         "copies": len(jobs), "fresh": fresh}, timeout_s)
        if got.get("status") != Status.OK:
            return Judging(None, why=f"the judge did not draw input sets: {got.get('error')}",
                           unjudged=not got.get("witnessless"))
        pid = judge.host_pid
        if pid is None:
            return Judging(None, why="the judge's host pid is not known", unjudged=True)
        # a GPU's null turns copy the stage's outputs into a contender's output buffers, as
        # its turns do (rewritten by its own before any check)
        null_plan = plan(pid, got["src"], got["dst"][0] if gpu else None)
        try:
            null = judge.run({"witness_of": "null", "n": witness.TURNS}, timeout_s,
                             plan=null_plan)
        finally:
            null_plan.close()
        if null_plan.stuck:
            return Judging(None, why="the GPU stayed busy before the judge's null turns "
                           "(work of a held process): no baseline for witness turns",
                           unjudged=True)
        taking = judge.taking
        cost = witness.null_cost(taking.records if taking else []) \
            if null.get("status") == Status.OK else f"its null turns: {null.get('error')}"
    except Exception as e:  # noqa: BLE001 -- the judge's failure: no witness turns, said so
        return Judging(None, why=f"the judge failed: {e!r}", unjudged=True)
    if isinstance(cost, str):
        return Judging(None, why=cost, unjudged=True)
    return Judging([plan(pid, got["src"], got["dst"][c], cost, bounded=bounded)
                    for c in range(len(jobs))], cost, bounded=bounded)


def close(judging: Judging) -> None:
    """What ``judging``'s plans hold let go (a GPU's mapped buffers). Never raises."""
    for p in (judging.plans or [])[:1]:  # one importer holds every plan's mappings
        p.close()


def judged(judge: Sandbox, judging: Judging, boxes: list[Sandbox],
           answers: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """Each contender's answer (``answers``, from ``boxes``, in order) held to its witness
    turns (workers.witness ``judged``), once ``judge`` has checked the outputs they left in
    its memory. Without plans, the answers as they are; when the judge's check fails, each
    ``ok`` set aside (workers.witness ``unchecked``). Never raises."""
    if judging.plans is None:
        return answers
    try:
        check = judge.run({"witness_of": "check"}, timeout_s)
    except Exception as e:  # noqa: BLE001 -- as a failed check
        check = {"status": Status.ERROR, "error": repr(e)}
    verdicts = check.get("verdicts")
    if check.get("status") != Status.OK or not isinstance(verdicts, list) \
            or len(verdicts) != len(boxes):
        judging.failed = f"the judge's check failed: {check.get('error')}"
        return [witness.unchecked(a, judging.failed) for a in answers]
    return [witness.judged(a, box.taking, v) for box, a, v in zip(boxes, answers, verdicts)]
