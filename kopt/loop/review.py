"""The review gate: an iteration's winner is accepted only when it is

1. correct on every problem size of the sweep (a final-rung ``ok`` row on each of the
   space's ``dims``),
2. faster than its parent -- the iteration's baseline -- beyond noise, by kopt's one noise
   model (kopt.core.compare, as the loop's own gain test kopt.loop.state.gains reads it), and
3. when sweep.yaml names one (``review: {command, timeout_s}``), its validation command
   exits 0. The command runs for a winner that is new (not the baseline) and passed 1 --
   also when it failed 2, so that every reason is stored -- through the shell in the
   sweep's folder, with the winner in environment variables (:data:`ENV`); a failing,
   timed-out or unstartable command rejects the winner with its exit status and output
   tail, never stops the run.

Each closing of an iteration and device class stores one ``reviews`` row (accepted, the
reasons, the command's exit status, output tail and the file holding its whole output:
:func:`output_log`), and a rejected winner is one line on the console
(:func:`rejection_line`, through the observers' ``on_review``). A rejected winner is not
the run's best: the class's state keeps the previous best (the next iteration's parent) and
the previous selected methods, and the loop stops there unless a version is submitted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

from kopt.core.compare import geo_mean, noise_line
from kopt.loop.state import IterState, gains
from kopt.loop.submitted import stored_source
from kopt.run.context import RunContext
from kopt.store.database import Database
from kopt.store.files import now
from kopt.util.command import run_command
from workers.status import Status

# what the validation command finds in its environment (docs/spec.md)
ENV = {"KOPT_SOURCE": "the winner's kernel source (absolute path; the sweep's own source, "
                      "or the stored copy of a submitted version)",
       "KOPT_CANDIDATE_ID": "the winner's candidate id",
       "KOPT_PARAMS": "its launch params (JSON object)",
       "KOPT_DEFINES": "every -D define its build passes (JSON object)",
       "KOPT_RUN_ID": "the run", "KOPT_ITERATION": "the iteration",
       "KOPT_DEVICE_CLASS": "the device class", "KOPT_BACKEND": "cuda or cpu",
       "KOPT_STORE": "the store root (absolute path)"}


@dataclasses.dataclass
class ReviewVerdict:
    """The gate's verdict on one iteration's winner of one class (a ``reviews`` row)."""

    candidate_id: str | None
    accepted: bool
    reasons: list[str]
    speedup: float | None = None  # geometric mean over the iteration's baseline
    median_ms: float | None = None  # geometric mean of its medians across problem sizes
    command: str | None = None
    exit_status: int | None = None
    timed_out: bool = False
    output_tail: str | None = None
    output_log: str | None = None  # the file holding the command's whole output


def output_log(store: Path, run_id: str, it: int, dc: str, candidate_id: str) -> Path:
    """Where the review command's whole output on a winner is kept (an absolute path):
    ``STORE/review-logs/RUN_ID-itN-CLASS-CANDIDATE.log`` (a class name's characters other
    than letters, digits, ``.``, ``_`` and ``-`` written as ``_``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", dc)
    name = f"{run_id}-it{it}-{safe}-{candidate_id}.log"
    return Path(os.path.abspath(store)) / "review-logs" / name


def rejection_line(it: int, dc: str, v: ReviewVerdict) -> str:
    """One line saying that the review gate rejected winner ``v.candidate_id`` of iteration
    ``it`` on class ``dc``: every reason and, when the command ran, its exit status, the
    last line of its output and where its whole output is."""
    reasons = list(v.reasons)
    if v.output_log is not None:
        last = next((ln.strip() for ln in reversed((v.output_tail or "").splitlines())
                     if ln.strip()), "(no output)")
        last = last if len(last) <= 200 else last[:197] + "..."
        tail = f", its last line: {last} (full output: {v.output_log})"
        if reasons and reasons[-1].startswith("the review command"):
            reasons[-1] += tail
        else:
            reasons.append(f"the review command exited with status {v.exit_status}{tail}")
    return (f"iteration {it} ({dc}): winner {v.candidate_id} rejected by the review gate: "
            + "; ".join(reasons))


def judge(win: dict[str, Any] | None, base: dict[str, Any] | None,
          sizes: list[dict[str, Any]], dims: list[dict[str, int]]) -> list[str]:
    """Why the ranked winner ``win`` fails checks 1 and 2 (module docstring); [] when it
    passes both.

    Args:
        win / base: kopt.loop.state.rank rows of the winner and the iteration's baseline.
        sizes: the winner's final-rung rows (``dims`` JSON, ``status``).
        dims: the sweep's problem sizes.
    """
    if win is None:
        return ["no correct candidate: nothing to accept"]
    out = []
    status = {json.dumps(json.loads(r["dims"]), sort_keys=True): r["status"] for r in sizes}
    for d in dims:
        got = status.get(json.dumps(d, sort_keys=True))
        if got != Status.OK:
            out.append(f"not correct on problem size {d}: {got or 'not measured'}")
    if base is None:
        out.append("its parent (the iteration's baseline) was not measured on every size")
    elif win["is_baseline"]:
        out.append("no candidate beat its parent (the iteration's baseline): the winner is "
                   "the baseline")
    elif not gains(win, base):
        out.append(f"not faster than its parent (the iteration's baseline) beyond noise: "
                   f"{win['speedup']:.4g}x, the "
                   f"noise threshold {noise_line(base['rel_iqr'], win['rel_iqr'])}")
    return out


def review(ctx: RunContext, it: int, dc: str, ranked: list[dict[str, Any]]) -> ReviewVerdict:
    """The gate's verdict on iteration ``it``'s winner on class ``dc`` (``ranked``: its
    ranking in the loop's order, the winner first); runs the validation command when the
    sweep names one, on a winner that is not the baseline and is correct on every size."""
    win = ranked[0] if ranked else None
    base = next((r for r in ranked if r["is_baseline"]), None)
    db = Database(ctx.store)
    sizes = db.winner_sizes(ctx.run_id, it, dc, win["candidate_id"]) if win else []
    meds = [r["median_ms"] for r in sizes if r["status"] == Status.OK and r["median_ms"]]
    v = ReviewVerdict(win["candidate_id"] if win else None, False,
                judge(win, base, sizes, ctx.sweep.space(ctx.backend).dims),
                win["speedup"] if win else None, geo_mean(meds) if meds else None)
    cmd = ctx.sweep.review
    if win is None or cmd is None or win["is_baseline"] or any(
            r.startswith("not correct") for r in v.reasons):
        v.accepted = not v.reasons
        return v

    v.command = cmd.command
    log = output_log(ctx.store, ctx.run_id, it, dc, win["candidate_id"])
    try:
        step = run_command("review", cmd.command, ctx.sweep.root, cmd.timeout_s,
                           {**os.environ, **_env(ctx, db, it, dc, win)}, log)
    except OSError as e:  # the sweep folder is gone, no shell: the winner is not accepted
        v.reasons.append(f"the review command could not start: {e}")
        return v
    v.exit_status, v.timed_out, v.output_tail = step.exit_status, step.timed_out, \
        step.output_tail
    v.output_log = str(log)
    if step.timed_out:
        v.reasons.append(f"the review command ran past its {cmd.timeout_s:g} s "
                         "(review.timeout_s) and was killed")
    elif step.exit_status != 0:
        v.reasons.append(f"the review command exited with status {step.exit_status}")
    v.accepted = not v.reasons
    return v


def _env(ctx: RunContext, db: Database, it: int, dc: str, win: dict[str, Any]
         ) -> dict[str, str]:
    """The :data:`ENV` variables of winner ``win``."""

    space = ctx.sweep.space(ctx.backend)
    row = db.candidate_lineage(ctx.run_id, win["candidate_id"]) or {}
    source = space.source
    if row.get("submitter") not in (None, "sweep") and row.get("source_hash"):
        source = stored_source(db, space, row["source_hash"]).source
    return {"KOPT_SOURCE": str(os.path.abspath(source)),
            "KOPT_CANDIDATE_ID": win["candidate_id"],
            "KOPT_PARAMS": json.dumps(win["params"], sort_keys=True),
            "KOPT_DEFINES": json.dumps(win["defines"], sort_keys=True),
            "KOPT_RUN_ID": ctx.run_id, "KOPT_ITERATION": str(it), "KOPT_DEVICE_CLASS": dc,
            "KOPT_BACKEND": ctx.backend, "KOPT_STORE": str(os.path.abspath(ctx.store))}


def gate(ctx: RunContext, it: int, dc: str, prev: IterState, st: IterState,
         ranked: list[dict[str, Any]]) -> IterState:
    """Review iteration ``it``'s winner on ``dc``, store the verdict (a ``reviews`` row)
    and return the class's state: ``st`` (the loop's closing, from the state ``prev``) as
    it is when the winner is accepted or was not named the best; else with the previous
    best and selected methods back, and a stop reason when the loop had none."""
    v = review(ctx, it, dc, ranked)
    ctx.writer.add("reviews", [{"run_id": ctx.run_id, "sweep": ctx.sweep.name,
                                "iteration": it, "device_class": dc,
                                **dataclasses.asdict(v), "reasons": json.dumps(v.reasons),
                                "created_at": now()}])
    if not v.accepted and ranked and not ranked[0]["is_baseline"]:
        for o in ctx.observers:
            o.on_review(dc, it, v)
    named = bool(st.best and v.candidate_id and st.best.get("iteration") == it
                 and st.best["candidate_id"] == v.candidate_id and not ranked[0]["is_baseline"])
    if v.accepted or not named:
        return st
    best = prev.best or ({**st.baseline, "iteration": it} if st.baseline else None)
    why = "; ".join(v.reasons)
    return dataclasses.replace(st, best=best, selected=list(prev.selected),
                               stop=st.stop or f"the review gate rejected the winner "
                                               f"{v.candidate_id}: {why}")
