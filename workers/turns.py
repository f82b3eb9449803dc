"""A contest's contenders timed in harnesses of their own, taking turns.

A contest (workers.harness ``contest``) once loaded every contender into one harness
process. Code one contender left there could reach its rivals: a red-team framer's thread
wrote a jump over each rival's ``solve`` to a wrapper slow on new input values (the rival
named ``replayed``, in company and again in company after it was cleared alone: dropped then),
or padded every rival call (the rival 2.5x slower side by side, nothing named).

Here each contender runs in a sandbox of its own (workers.sandbox: its own process, PID
namespace and cgroup where the host has them), where its inputs are made, all at once;
then its load, checks and warm-up take a turn, and each round of samples another. A
contender's harness says "turn" before each and waits for "go" (workers.harness
``contest``); :func:`run_in_turns` gives one harness its go at a time, once every
harness still running waits for one, rotating who goes first, and holds every other
contender's sandbox still (workers.hold: frozen, or stopped) until that harness says "turn"
again or answers. So no rival's code shares the timed process, and none runs while it is
timed; a held sandbox that used CPU anyway (what it left running escaped the hold) is
``suspect``, and one that holds a process besides its harness when its turn ended is
``escaped`` and the contest stopped before any other contender's turn: held still, such
processes still hold what they took (a red-team helper's children each kept 64 000
mappings of one file open, about 40 of them used up the host's open files, and the next
contender's load failed: that honest rival was dropped; where no cgroup counts a sandbox,
as on a GPU host without one, this is not looked at). Work a rival queued on a GPU before
its hold still runs on the device (see workers.harness "What is not caught").

Stdlib and workers only.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from workers import hold
from workers.sandbox import Sandbox
from workers.status import Status
from workers.timing import summarize
from workers.witness import Plan

# a held sandbox's CPU time beyond this (ms) escaped its hold: kopt.core.clock's rule for
# the outside clock's holds, whose source it is (workers.hold ``used_ms``)
ESCAPED_CPU_MS = hold.HELD_CPU_MS
# how far a sample may exceed the turn it was taken in (the sandbox's clock, the same
# monotonic clock as the harness's CPU samples; a GPU's events tick in 0.5 us): ms, and a
# fraction of the turn
TURN_SLACK_MS = 0.002
TURN_SLACK = 1e-3


class Aborted(Exception):
    """The contest stopped (a contender failed, or its harness did not start): a waiting
    harness's turn never comes."""


class Turns:
    """Whose turn it is among ``n`` contenders' sandboxes (indices ``0..n-1``).

    A contender's thread calls :meth:`wait` at each "turn" of its harness (it returns when
    :meth:`give` picks it) and :meth:`finished` once its job answered; :meth:`give` runs
    in the caller's thread."""

    def __init__(self, n: int):
        self.n = n
        self.cv = threading.Condition()
        self.waiting: set[int] = set()
        self.done: set[int] = set()
        self.current: int | None = None
        self.stopped = False

    def wait(self, i: int) -> None:
        """Contender ``i``'s harness asks for its next turn (its last one, if any, ended).
        Raises Aborted when the contest stopped meanwhile."""
        with self.cv:
            if self.current == i:
                self.current = None
            self.waiting.add(i)
            self.cv.notify_all()
            while self.current != i and not self.stopped:
                self.cv.wait()
            if self.current != i:
                raise Aborted()

    def finished(self, i: int, failed: bool) -> None:
        """Contender ``i``'s job answered; ``failed``: not ``ok``, which stops the contest
        for every other contender at its next turn (told by :class:`Aborted`)."""
        with self.cv:
            if self.current == i:
                self.current = None
            self.waiting.discard(i)
            self.done.add(i)
            self.stopped = self.stopped or failed
            self.cv.notify_all()

    def next_round(self, r: int) -> list[int] | None:
        """Once every contender still running waits for its turn: those contenders, rotated
        by ``r`` (who goes first changes every round); None when none runs or the contest
        stopped."""
        with self.cv:
            self.cv.wait_for(lambda: self.stopped
                             or len(self.waiting | self.done) == self.n)
            live = [i for i in range(self.n) if i not in self.done]
            if self.stopped or not live:
                return None
            k = r % len(live)
            return live[k:] + live[:k]

    def give(self, i: int) -> None:
        """Contender ``i``'s turn (it waits for one: :meth:`next_round`); returns when that
        turn ended (its harness asked for the next one, or answered)."""
        with self.cv:
            self.waiting.discard(i)
            self.current = i
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.current != i)

    def stop(self) -> None:
        """Stop the contest: every waiting contender's :meth:`wait` raises Aborted."""
        with self.cv:
            self.stopped = True
            self.cv.notify_all()


def run_in_turns(boxes: list[Sandbox], jobs: list[dict[str, Any]], timeout_s: float,
                 plans: list[Plan] | None = None) -> list[dict[str, Any]]:
    """Run ``jobs[i]`` (a contest job of one contender, ``turns`` set: workers.harness
    ``contest``) in ``boxes[i]``, each sandbox started if it is not, its rounds in turns
    (module docstring); ``plans[i]``: contender ``i``'s witness turns (workers.witness), the
    job asking for them (``witness``).

    Returns each contender's answer, in order: the harness's (``results`` with one
    contender's figures), ``{"status": "aborted"}`` for one stopped because a rival failed,
    ``suspect`` for one whose sandbox used more than :data:`ESCAPED_CPU_MS` of CPU while
    held for a rival's turn, or ``escaped`` for one whose sandbox held processes besides
    its harness before a rival's turn (the contest stopped there). Never raises."""
    turns = Turns(len(boxes))
    escaped = [0.0] * len(boxes)
    left: dict[int, list[int]] = {}
    launched = [_launched(box) for box in boxes]
    with ThreadPoolExecutor(len(boxes)) as pool:
        futures = [pool.submit(_one, turns, i, box, job, timeout_s,
                               plans[i] if plans else None, launched[i])
                   for i, (box, job) in enumerate(zip(boxes, jobs))]
        try:
            _schedule(turns, boxes, escaped, left)
        finally:
            turns.stop()
        answers = [f.result() for f in futures]
    for i in left:  # one that had answered keeps its harness until now
        boxes[i].kill()
    return [_left(a, left[i]) if i in left else _escaped(a, ms)
            for i, (a, ms) in enumerate(zip(answers, escaped))]


def _left(res: dict[str, Any], pids: list[int]) -> dict[str, Any]:
    """A contender's answer once its sandbox was found holding processes ``pids`` besides
    its harness at a rival's turn (:func:`_schedule`): ``escaped``, whatever it said."""
    return {"status": Status.ESCAPED, "error": (
        f"its sandbox held {len(pids)} process(es) besides its harness when a rival's turn "
        "came (code it loaded or called left them running): the contest stopped there; a "
        "kernel's work must end within its calls")}


def _launched(box: Sandbox) -> bool:
    """Start ``box``'s harness process in this thread where it runs none (workers.sandbox
    ``launch``; the device actor's: started from a pool thread, it would not die with the
    actor, workers.reap ``tie_to_parent``); whether it was started so. Never raises."""
    if box.running:
        return False
    box.kill()  # a harness that ended: its connection and cgroup let go first
    try:
        box.launch()
    except Exception:  # noqa: BLE001 -- its thread starts it the whole way and says why
        box.kill()
        return False
    return True


def _one(turns: Turns, i: int, box: Sandbox, job: dict[str, Any], timeout_s: float,
         plan: Plan | None = None, launched: bool = False) -> dict[str, Any]:
    """Contender ``i``'s job in ``box`` (its thread of :func:`run_in_turns`); ``launched``:
    its harness's process was started by :func:`_launched`, and is waited for here."""
    res: dict[str, Any] = {"status": Status.ERROR, "error": "its harness did not answer"}
    try:
        if why := _unstarted(box, launched):
            res = {"status": Status.ERROR, "unstarted": True,
                   "error": f"a contender's harness did not start: {why}"}
            return res
        res = box.run(job, timeout_s, turn=lambda: turns.wait(i), plan=plan)
        res = in_its_turns(res, box.turn_ms, int(job.get("rounds") or 0))
    except Aborted:
        box.kill()  # it waits for a "go" that never comes
        res = {"status": "aborted", "error": "stopped: a rival failed"}
    except Exception as e:  # noqa: BLE001 -- a start or run that failed is this one's answer
        box.kill()
        res = {"status": Status.ERROR, "error": f"its sandbox: {e!r}"}
    finally:
        turns.finished(i, res.get("status") not in (Status.OK, "aborted"))
    return res


def _unstarted(box: Sandbox, launched: bool) -> str:
    """Start ``box``'s harness where it does not run, as workers.sandbox ``start`` does
    (in its sandbox, else once without it), the process already started when ``launched``
    (:func:`_launched`): "" once it runs, else why not (the device's fault, not the
    contender's). Never raises."""
    try:
        if launched:
            try:
                box.ready()
            except RuntimeError as e:  # killed: start()'s second try
                box.fall_back(e)
        elif not box.running:
            box.start()
    except Exception as e:  # noqa: BLE001 -- the device's fault, not the contender's
        box.kill()
        return repr(e)
    return ""


def _schedule(turns: Turns, boxes: list[Sandbox], escaped: list[float],
              left: dict[int, list[int]]) -> None:
    """Give the turns, round after round, each with its rivals held still; the CPU a held
    rival used meanwhile added to ``escaped`` (ms). Before a turn, every other contender's
    sandbox (answered ones too) is looked at for processes besides its harness
    (workers.sandbox ``left_running``): any found go into ``left`` (index -> pids) and no
    turn is given after that (the caller stops the contest, and each contender's sandbox
    ends with its harness)."""
    r = 0
    while (order := turns.next_round(r)) is not None:
        for i in order:
            with turns.cv:
                if i in turns.done or turns.stopped:
                    continue
            rivals = [j for j in range(len(boxes)) if j != i and j not in turns.done]
            held = [(j, boxes[j].pause()) for j in rivals]
            try:
                left.update({j: pids for j in range(len(boxes))
                             if j != i and (pids := boxes[j].left_running())})
                if left:
                    return
                turns.give(i)
            finally:
                for j, h in held:
                    used = hold.used_ms(h)
                    escaped[j] += used or 0.0
                    hold.release(h)
        r += 1


def in_its_turns(res: dict[str, Any], turn_ms: list[float], rounds: int) -> dict[str, Any]:
    """A contender's contest answer ``res`` held against its turns as its sandbox timed them
    (``turn_ms``, ms: its load turn, then one per round; workers.sandbox ``turn_ms``):
    ``suspect`` when it says ``ok`` but its figures are not what its harness could have
    measured in them, else with ``median_ms``, ``iqr_ms`` and ``n_samples`` computed here
    from its ``samples_ms``. Each round is one turn and takes one sample, kept in
    ``seen_ms`` (its first ``rounds`` are ``samples_ms``) or, on a held-back input set, in
    ``unseen_ms``, and is timed inside its turn: so there are exactly as many samples as
    turns of rounds, and, both sorted, none longer than its turn (each sample within its
    own turn makes the k-th longest sample no longer than the k-th longest turn), and
    each a positive finite time (red-team round 17: -inf samples, a NaN median). Code in
    the harness's process can write its answer pipe (red-team round 16: a complete `ok`
    answer of 60 us samples, written in the contender's first round, and its ping's pong:
    an all-zeros kernel won its contest); it must now take as many turns as samples and
    spend the time it claims in each. (What a forger does in its turns is not seen: the
    outputs' check and the clock stay in its process, see workers.harness.) Other answers,
    and those of a job not in turns (no ``turn_ms``), are returned as they are."""
    if res.get("status") != Status.OK or not turn_ms:
        return res
    why, one = _figures(res, turn_ms[1:], rounds)
    if why:
        return {"status": Status.SUSPECT, "error": f"{why}: its answer is not what its "
                "harness measured (code in its process can write the answer)"}
    st = summarize(one["samples_ms"])
    return {**res, "results": [{**one, "median_ms": st.median_ms, "iqr_ms": st.iqr_ms,
                                "n_samples": st.n_samples}]}


def _figures(res: dict[str, Any], turns_ms: list[float], rounds: int
             ) -> tuple[str, dict[str, Any]]:
    """:func:`in_its_turns`' test of ``res``'s one contender's figures against its rounds'
    turns ``turns_ms``: (why they cannot be, or "", the contender's figures)."""
    got = res.get("results")
    one = got[0] if isinstance(got, list) and len(got) == 1 else None
    lists = [one.get(k) if isinstance(one, dict) else None
             for k in ("samples_ms", "seen_ms", "unseen_ms")]
    if one is None or not all(isinstance(xs, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
            for xs in lists):
        return "its answer's figures are not one contender's lists of samples", {}
    if not all(math.isfinite(x) and x > 0 for xs in lists for x in xs):
        # (red-team round 17: -inf samples made its median NaN, which won a comparison)
        return "a sample that is not a positive finite time", one
    samples, seen, unseen = lists
    if not samples or len(samples) != rounds or samples != seen[:rounds]:
        return (f"its samples are not the first {rounds} of its rounds' samples", one)
    taken = seen + unseen
    if len(taken) != len(turns_ms):
        n = len(turns_ms)
        return (f"its harness answered {len(taken)} samples after {n} turn{'s' * (n != 1)} "
                "of rounds (one sample a round)", one)
    for x, t in zip(sorted(taken, reverse=True), sorted(turns_ms, reverse=True)):
        if x > t * (1 + TURN_SLACK) + TURN_SLACK_MS:
            return (f"a sample of {x:.4g} ms, longer than the turn it was taken in "
                    f"({t:.4g} ms by its sandbox's clock)", one)
    return "", one


def _escaped(res: dict[str, Any], ms: float) -> dict[str, Any]:
    """``res``, ``suspect`` when its sandbox used ``ms`` > :data:`ESCAPED_CPU_MS` of CPU
    while held for rivals' turns."""
    if ms <= ESCAPED_CPU_MS or res.get("status") not in (Status.OK, None):
        return res
    return {**res, "status": Status.SUSPECT, "error": (
        f"its sandbox used {ms:.4g} ms of CPU while held still for rivals' samples (more "
        f"than {ESCAPED_CPU_MS:g} ms): code it left running escaped the hold")}


def combined(jobs: list[dict[str, Any]], answers: list[dict[str, Any]]) -> dict[str, Any]:
    """One contest answer from each contender's (:func:`run_in_turns`), as a contest in one
    harness answers: ``ok`` with ``results`` in order; else the first failure's status,
    ``failed`` (the job keys at fault; an ``aborted`` one is not), ``failed_status`` (job
    key -> its status) and each one's error; ``error`` with ``actor`` (the device failed,
    kopt.loop.contests stops the contest and names nobody) when a harness did not start."""
    if down := [a for a in answers if a.get("unstarted")]:  # no contender's doing
        return {"status": Status.ERROR, "error": down[0]["error"], "actor": True}
    bad = [(j["job_key"], a) for j, a in zip(jobs, answers)
           if a.get("status") not in (Status.OK, "aborted")]
    if not bad:
        if any(a.get("status") == "aborted" for a in answers):  # none failed: cannot be
            return {"status": Status.ERROR, "error": "a contest stopped with no contender "
                    "at fault"}
        return {"status": Status.OK, "error": "",
                "results": [a["results"][0] for a in answers]}
    return {"status": bad[0][1].get("status"), "failed": [k for k, _ in bad],
            "failed_status": {k: a.get("status") for k, a in bad},
            "error": "; ".join(_said(k, a, bad[0][1].get("status")) for k, a in bad)}


def _said(key: str, res: dict[str, Any], status: Any) -> str:
    """Contender ``key``'s failed answer ``res`` in a contest's error whose status is
    ``status``: the harness's own line where it names the contender, else the key, and
    ``res``'s status where it is another."""
    if res.get("failed"):
        return str(res.get("error") or "")
    said = "" if res.get("status") == status else f"{res.get('status')}: "
    return f"{key}: {said}{res.get('error') or ''}"
