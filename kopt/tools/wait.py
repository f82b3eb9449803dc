"""``kopt wait``: block until an iteration of a run is closed, then return its
verdict -- what a loop driver (a person's script, a code-generating agent) needs to write
the next version, as one JSON object.

An iteration is closed when every device class has an ``iterations`` row for it stored
after its latest submission (``versions``: a ``--retry`` re-closes it) and no process
holds the run's lock (kopt.store.files.RunLock: the loop's closing contest still writes the
last state). The store is polled every :data:`POLL_S` seconds (two small DuckDB reads;
``--poll`` changes it). A try that cannot close any more ends the wait at once with one
line: its detached process (``kopt submit --detach``) exited or was killed without closing
the iteration (exit 1), or the run's last record (after the submission) says
``interrupted`` (exit 4, with the command that goes on: ``kopt sweep ... --resume RUN_ID``
for a run interrupted in its own iteration -- also iteration 1, before any was stored --
or ``kopt submit --retry`` for a submitted one).
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

from kopt.loop.state import IterState
from kopt.store.database import Database
from kopt.store.files import lock_holder, recorded_resume_command, stored_json
from kopt.tools.submit import read_try
from kopt.util.jsonrecord import RecordError
from workers.reap import pid_alive

POLL_S = 2.0  # seconds between two looks at the store
INTERRUPTED = 4  # WaitError.code: the run was interrupted before the iteration closed


class WaitError(Exception):
    """The wait ended without a verdict: ``code`` 1 (no such run or iteration, or its
    detached process ended without closing it), 4 (:data:`INTERRUPTED`: the run was
    interrupted before it closed) or 3 (``--timeout``); the message is one line."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def verdict(root: Path, run_id: str, iteration: int) -> dict[str, Any]:
    """The verdict of a closed ``iteration`` of ``run_id``: ``run_id``, ``iteration`` and
    per device class (``classes``): ``winner`` (the candidate the review gate judged, the
    iteration's fastest correct one), ``median_ms`` (geometric mean of its medians across
    the problem sizes), ``speedup`` (over the iteration's baseline), ``accepted`` and
    ``reasons`` (kopt.loop.review; None / [] for an iteration closed before the gate existed),
    ``review`` (the validation command, ``exit_status``, ``timed_out``, ``output_tail``,
    ``output_log``: the file with its whole output),
    ``best`` (the run's best after the iteration: the next iteration's parent),
    ``selected``, ``ineffective`` (method -> the bottleneck it failed under), ``credit``
    (method -> the gain this iteration judged it by, kopt.loop.state.IterState.credit),
    ``bottleneck_before`` / ``bottleneck_after``, ``stop`` ('' when the loop goes on),
    ``baseline``, ``candidates`` (the ids the iteration measured, the baseline left
    out) and ``results``, the same candidates' outcomes: ``version`` and ``try`` (the
    submitted file's name and the try of the iteration that sent it; None for the sweep's own
    source), ``source_hash`` (the digest of the source it was built from), ``params`` (the
    launch config), ``status``
    (``ok``, or the first failing problem size's: compile_error, wrong_result, ...), its
    ``error`` text (the compiler's message, the wrong-result line; None when ok),
    ``sizes_ok`` of ``sizes``, and for a candidate correct on every size ``median_ms`` and
    ``speedup`` over the baseline (geometric means over the sizes; None otherwise), so a
    loop driver learns why a try failed, or how far a correct loser was from the winner,
    without a query."""
    db = Database(root)
    states = {dc: IterState.from_json(js) for it, dc, js in db.iteration_states(run_id)
              if it == iteration}
    reviews = {r["device_class"]: r for r in db.reviews(run_id, iteration)}
    cands: dict[str, list[dict[str, Any]]] = {}
    for r in db.iteration_candidates(run_id, iteration):
        cands.setdefault(r["device_class"], []).append(r)
    return {"run_id": run_id, "iteration": iteration,
            "classes": [_class(dc, st, reviews.get(dc), cands.get(dc, []))
                        for dc, st in sorted(states.items())]}


def _class(dc: str, st: IterState, rv: dict[str, Any] | None,
           cands: list[dict[str, Any]]) -> dict[str, Any]:
    """One device class's part of :func:`verdict`."""
    if rv is None:  # closed before the review gate: the loop's own winner, not reviewed
        won = st.best if st.best and st.best.get("iteration") == st.iteration else None
        rv = {"candidate_id": (won or {}).get("candidate_id"), "accepted": None,
              "reasons": "[]", "speedup": (won or {}).get("speedup"),
              "median_ms": (won or {}).get("median_ms")}
    return {"device_class": dc, "iteration": st.iteration, "winner": rv["candidate_id"],
            "median_ms": rv["median_ms"], "speedup": rv["speedup"],
            "accepted": rv["accepted"],
            "reasons": [str(x) for x in stored_json(rv["reasons"], "reasons", list)],
            "review": {k: rv.get(k) for k in ("command", "exit_status", "timed_out",
                                              "output_tail", "output_log")},
            # the next parent, as `kopt submit` and `kopt propose` take it: the closing
            # contest's pick when it named another best than the iteration's winner
            "best": (st.named().best or {}).get("candidate_id"),
            "closing": _closing(st),
            "selected": st.named().selected,
            "credit": {m: c for m, c in st.credit.items() if c.get("iteration") == st.iteration},
            "ineffective": st.ineffective, "bottleneck_before": st.bottleneck_before,
            "bottleneck_after": st.bottleneck_after, "stop": st.stop,
            "baseline": (st.baseline or {}).get("candidate_id"),
            "candidates": [c["candidate_id"] for c in cands if not c["is_baseline"]],
            "results": [{**{k: c[k] for k in ("candidate_id", "version")}, "try": c["try_no"],
                         **{k: c[k] for k in ("source_hash", "status", "error", "sizes_ok",
                                              "sizes", "median_ms", "speedup")},
                         "params": stored_json(c["params"], "params", dict)}
                        for c in cands if not c["is_baseline"]]}


def _closing(st: IterState) -> dict[str, Any] | None:
    """The loop's closing contest on this state, when the run's work ended with it (the
    sweep's last iteration, or a submitted one: each ends the run until the next submit):
    the best it named (``best``: the next parent, which may not be ``winner``), each
    contender it dropped with why (``dropped``: id -> "status: error", e.g. a winner found
    ``replayed`` side by side) and its ``note``; None for an iteration the loop went on
    from."""
    if not st.closing:
        return None
    return {"best": (st.closing.get("best") or {}).get("candidate_id"),
            "dropped": dict(st.closing.get("dropped") or {}),
            "note": str(st.closing.get("note") or "")}


def pending(root: Path, run_id: str, iteration: int | None) -> tuple[int, str]:
    """Where the wait stands: ``(the iteration waited for, why it is not ready)``; the
    reason is '' when its verdict can be read.

    Raises:
        WaitError: no such run or iteration; the iteration can no longer close.
    """
    db = Database(root)
    if db.run_info(run_id) is None:
        raise WaitError(f"run {run_id}: no such run in {root} (`kopt query \"select run_id, "
                        "sweep from runs\"` lists runs)")
    holder = lock_holder(root, run_id)
    last = db.progress(run_id, iteration or 0)["last_iteration"]
    it = iteration or last or 1  # nothing stored or submitted yet: the run's iteration 1
    p = db.progress(run_id, it)
    if holder is not None:
        return it, f"the run is being written by {holder}"
    if p["closed_at"] is not None and (p["submitted_at"] is None
                                       or p["closed_at"] >= p["submitted_at"]):
        return it, ""
    if it > last:
        if it == last + 1:
            _interrupted(db, root, run_id, it, None)
        raise WaitError(f"run {run_id} has no iteration {it} (its last is {last}) and no "
                        "process is writing it; pass --iteration N of a stored iteration")
    return it, _stalled(db, root, run_id, it, p["submitted_at"])


def _stalled(db: Database, root: Path, run_id: str, it: int, submitted_at: Any) -> str:
    """Why iteration ``it`` is not closed while nobody holds the run: '' never; a reason
    to go on waiting (a detached try still starting).

    Raises:
        WaitError: its detached process ended, or the run was interrupted, without
            closing it.
    """

    try_no = db.submit_tries(run_id, it)
    try:
        job = read_try(root, run_id, it, try_no)
    except RecordError as e:  # truncated, edited, a wrong type
        raise WaitError(f"run {run_id}: {e}") from None
    log = f"; its log: {job.log}" if job is not None and job.log else ""
    if job is not None and job.rc is not None:
        raise WaitError(f"run {run_id}: the detached try {try_no} of iteration {it} exited "
                        f"with status {job.rc} without closing it{log}")
    pid = job.pid if job is not None else None
    if pid is not None and job.host == platform.node() and not pid_alive(pid):
        raise WaitError(f"run {run_id}: the detached try {try_no} of iteration {it} (pid "
                        f"{pid}) was killed before closing it{log}")
    _interrupted(db, root, run_id, it, submitted_at)
    return f"iteration {it} is not closed yet" + (f" (pid {pid} runs it)" if pid else "")


def _interrupted(db: Database, root: Path, run_id: str, it: int, submitted_at: Any) -> None:
    """Nothing when the run is not interrupted (or was interrupted before the latest
    submission into iteration ``it``, ``submitted_at``).

    Raises:
        WaitError: code :data:`INTERRUPTED`, naming the iteration and how to go on.
    """
    rec = db.run(run_id) or {}
    if rec.get("status") != "interrupted" or (submitted_at is not None
                                              and rec["created_at"] <= submitted_at):
        return
    how = ("submit it again with `kopt submit --retry`" if submitted_at else
           f"resume it with `{recorded_resume_command(root, rec)}`")
    raise WaitError(f"run {run_id} was interrupted in iteration {it}, before it closed; "
                    f"{how}", INTERRUPTED)


def wait(root: Path, run_id: str, iteration: int | None = None,
         timeout_s: float | None = None, poll_s: float = POLL_S) -> dict[str, Any]:
    """Block until ``iteration`` (default: the run's latest, stored or submitted) of
    ``run_id`` is closed and the run free (module docstring); returns its
    :func:`verdict`.

    Raises:
        WaitError: see :func:`pending`; code 3 once ``timeout_s`` seconds have passed.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        it, why = pending(root, run_id, iteration)
        if not why:
            return verdict(root, run_id, it)
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitError(f"timed out after {timeout_s:g} s waiting for iteration {it} of "
                            f"run {run_id}: {why}", 3)
        time.sleep(poll_s if deadline is None
                   else max(0.0, min(poll_s, deadline - time.monotonic())))
