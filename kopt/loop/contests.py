"""Side-by-side contests of the NCU-guided loop: the leader and the candidates within noise
of it re-measured together on one device (kopt.core.winner decides), at the end of each
iteration and, for the loop's closing, the first baseline against every winner."""

from __future__ import annotations

import json
import textwrap
from functools import partial
from typing import Any

from kopt.core.clock import (
    CLOCK_FACTOR,
    CLOCK_SLACK_MS,
    OWN_CPU_SLACK_MS,
    Block,
    ClockError,
    clock_suspect,
    outside_blocks,
)
from kopt.core.winner import CONTEST_ROUNDS, Verdict, contenders, decide
from kopt.run.context import RunContext
from kopt.run.runner import DeviceError
from kopt.store.database import Database
from kopt.store.files import now
from kopt.util.words import counted
from workers.records import RunJob
from workers.status import Status

SOLO_ROUNDS = 3  # samples of a contender run alone to find which one failed a contest
# a contender named so in company is run alone in a fresh harness before it is dropped:
# load (or, when contenders shared a harness, a rival's code) can make an honest one so;
# a rival's processes starved a red-team's honest contender to a timeout during the
# contest's checks, which run in every contender's sandbox at once (red-team round 15);
# and an `error` (a red-team helper's processes used up the host's open files, and its
# rival's load failed in company: an honest one passes alone)
JUDGED_ALONE = (Status.REPLAYED, Status.CRASHED, Status.TIMEOUT, Status.ERROR)

# candidate id -> dims (JSON) -> (job_key, build_id, median_ms, iqr_ms)
ByCand = dict[str, dict[str, tuple[str, str, float, float]]]
# candidate id -> dims (JSON) -> the harness's contest result plus ``job_key``
Results = dict[str, dict[str, dict[str, Any]]]


def ok_rows(ctx: RunContext, dc: str, iteration: int | None = None) -> ByCand:
    """Candidate id -> dims (JSON) -> ``(job_key, build_id, median_ms, iqr_ms)`` of the
    correct, final-rung rows of class ``dc`` (of ``iteration``; None: the earliest
    iteration that measured each candidate)."""
    rows = Database(ctx.store).final_ok(ctx.run_id, dc, iteration)  # halving: the last rung's
    out: ByCand = {}
    for c, dims, key, b, med, iqr in rows:
        out.setdefault(c, {})[dims] = (key, b, med, iqr)
    return out


class SideBySide:
    """Re-measure the candidates of ``by_cand`` side by side on device ``device`` of class
    ``dc``, one contest per problem size (workers.harness ``contest``: each checked, then
    ``CONTEST_ROUNDS`` interleaved samples each).

    A contender that fails a check (or crashes, or times out) is dropped, and the contest
    is run again without it: when the contest's error does not name the contender, each is
    run alone to find it. A dropped contender's measurements of other sizes are dropped
    too (it must be correct on all of them). With ``clock`` (the loop's closing), each
    contender of a contest that passed is then re-checked and re-timed by a clock outside
    its process (:meth:`_clock`); one that fails that is dropped the same way. A contender
    named ``replayed``, ``crashed``, ``timeout`` or ``error`` in company is judged alone
    (:meth:`_judged_alone`); named so in company again, it is judged by its figures alone
    and leaves the company of that size (:attr:`settled`).
    """

    def __init__(self, ctx: RunContext, device: int, dc: str, by_cand: ByCand,
                 clock: bool = False):
        self.ctx, self.device, self.dc, self.by_cand = ctx, device, dc, by_cand
        self.clock = clock  # each contender re-timed by a clock outside its process
        self.clocked: set[tuple[str, str]] = set()  # (candidate, dims) the clock cleared
        self.clock_parts: dict[str, float] = {}  # ms: the current clock's (add_clock_parts)
        # (candidate, dims) -> its solo contest's result, for one flagged in company and
        # cleared alone (:meth:`_clock`)
        self.alone: dict[tuple[str, str], dict[str, Any]] = {}
        self.alive = list(by_cand)
        # (candidate, dims) named `replayed`, `crashed`, `timeout` or `error` in a contest and
        # cleared in a contest of its own: named so again, it is judged alone again
        # (:meth:`_judged_alone`)
        self.replay_cleared: set[tuple[str, str]] = set()
        # (candidate, dims) named so in company again and cleared alone again: its figures
        # are its solo contest's, and the contests of that size go on without it
        self.settled: set[tuple[str, str]] = set()
        self.results: Results = {}
        self.dropped: dict[str, str] = {}

    def run(self) -> tuple[Results, dict[str, str], str]:
        """``(results, dropped, error)``: per candidate and dims the harness's result
        (``median_ms``, ``iqr_ms``, ``n_samples``, ``samples_ms``) plus ``job_key``, for the
        contenders that passed every check; candidate id -> ``"status: error"`` for the
        dropped ones; and a reason when the contest could not run at all (the device
        failed, or it fails while every contender passes alone), else ""."""
        for rows in self.by_cand.values():  # measured before a --resume: rebuild (cache hit)
            for _key, b, *_ in rows.values():
                self.ctx.builder.ensure(b)
        self._drop({c: f"{Status.ERROR}: its build {b} is not at hand in this run (a version "
                       "submitted by an earlier command, or a build that failed): it cannot be "
                       "re-measured side by side"
                    for c, rows in self.by_cand.items() for _k, b, *_ in rows.values()
                    if b not in self.ctx.builder.artifacts})
        one = len(self.alive) == 1
        whose = "its process" if one else "their processes"
        self._stage(f"{'closing ' if self.clock else ''}contest: "
                    f"{counted(len(self.alive), 'contender')} re-measured "
                    + ("alone" if one else "side by side")
                    + (f", then timed by a clock outside {whose}" if self.clock else ""))
        try:
            for dims in sorted({d for rows in self.by_cand.values() for d in rows}):
                error = self._size(dims)
                if error:
                    return self.results, self.dropped, error
        finally:
            self._stage("")
            if self.clock:  # the harness of the clock's preparations (workers.device_actor)
                self.ctx.runner.cast(self.device, "clock_end")
        return self.results, self.dropped, ""

    def _stage(self, stage: str) -> None:
        """Tell the observers what this device class does now ("": done); one without
        ``on_stage`` (an observer written before it) is skipped."""
        for o in self.ctx.observers:
            if (tell := getattr(o, "on_stage", None)) is not None:
                tell(self.dc, stage)

    def own_figures(self, c: str) -> str:
        """Why contender ``c``'s own job's median (its ``candidates`` row, which ``kopt
        best`` and ``export`` show) cannot be believed: more than ``CLOCK_FACTOR`` x below
        its median side by side here, plus ``CLOCK_SLACK_MS`` (kopt.core.clock: the outside
        clock's own rule; ``OWN_CPU_SLACK_MS`` on a CPU device, whose contest samples are
        each a call made cold after its turn's wait), as ``"suspect: why"``; "" when it
        agrees. A candidate that patched its harness's clock in its own job only, and was
        honest in every contest, was named at 325x its real speed (red-team round 11)."""
        cpu = self.ctx.runner.infos[self.device].get("backend") == "cpu"
        slack = OWN_CPU_SLACK_MS if cpu else CLOCK_SLACK_MS
        for dims, st in self.results.get(c, {}).items():
            own, side = self.by_cand[c][dims][2], st.get("median_ms")
            if own and side and side > CLOCK_FACTOR * own + slack:
                return (f"{Status.SUSPECT}: its own job's median, {own:.4g} ms, is more than "
                        f"{CLOCK_FACTOR:g}x below its median side by side at the closing, "
                        f"{side:.4g} ms: its own job was not timed by the harness's clock")
        return ""

    def drop(self, c: str, why: str) -> None:
        """Drop contender ``c`` after the contests (its figures gone, the fault said)."""
        self._drop({c: why})

    def _contest(self, cids: list[str], dims: str, rounds: int, rivals: bool = False
                 ) -> dict[str, Any]:
        """The device's contest of ``cids`` at size ``dims`` (workers.device_actor
        ``contest``). ``rivals``: a contest of one whose figures may stand against its
        rivals' (:meth:`_judged_alone`, :meth:`_clock`): its harness's clocks are looked at
        before each round as in company (workers.harness ``Harness._clock_intact``), not
        left to the outside clock."""
        entries = [self.by_cand[c][dims] for c in cids]
        jobs = [{**RunJob(e[0], e[1], json.loads(dims), self.ctx.common).payload(),
                 **({"rivals": True} if rivals else {})} for e in entries]
        arts = [self.ctx.builder.artifacts[e[1]] for e in entries]
        info = self.ctx.runner.infos[self.device]
        self.ctx.phases.begin("contest", info)
        res: dict[str, Any] = {}
        try:
            res = self.ctx.runner.call(self.device, "contest", jobs, rounds, *arts)
            return res
        except DeviceError as e:
            return {"status": Status.LOST, "error": str(e), "actor": True}
        finally:
            self.ctx.phases.end("contest", info, detail=f"{counted(len(cids), 'contender')}, "
                                f"{counted(rounds, 'round')}{parts_text(res)}")

    def _figures(self, c: str, dims: str, st: dict[str, Any], res: dict[str, Any]
                 ) -> dict[str, Any]:
        """Contender ``c``'s figures at ``dims`` as :attr:`results` keeps them: its entry
        ``st`` of a passed contest's ``res``, with its job key and how the contest was
        witnessed."""
        return {**st, "job_key": self.by_cand[c][dims][0], "witness": res.get("witness") or ""}

    def _size(self, dims: str) -> str:
        """Contest one problem size until it passes; returns an error that stops it all."""
        while self.alive:
            cids = [c for c in self.alive
                    if dims in self.by_cand[c] and (c, dims) not in self.settled]
            if not cids:
                return ""
            # one left beside settled rivals: its figures stand against theirs
            rivals = len(cids) == 1 and any((c, dims) in self.settled for c in self.alive)
            res = self._contest(cids, dims, CONTEST_ROUNDS, rivals=rivals)
            if res.get("status") == Status.OK:
                for c, st in zip(cids, res["results"]):
                    self.results.setdefault(c, {})[dims] = self._figures(c, dims, st, res)
                bad, error, again = self._clock(cids, dims) if self.clock else ({}, "", False)
                if error or not (bad or again):
                    return error
                self._drop(bad)  # and measured again, in the fresh harness
                continue
            why = f"{res.get('status')}: {res.get('error') or ''}".strip()
            if res.get("actor"):
                return why
            bad, error = self._culprits(cids, dims, why, res)
            if error:
                return error
            self._drop(bad)
        return ""

    def _clock(self, cids: list[str], dims: str) -> tuple[dict[str, str], str, bool]:
        """Each contender of a passed contest of size ``dims`` not yet cleared, re-timed by
        a clock outside its process (:meth:`_clocked`). A contender's clock may behave
        otherwise in company than alone (when contenders shared one harness process, one's
        patched clock timed the others too; now each has its own: workers.turns): each
        one flagged there is judged again alone, in a fresh harness (a solo contest, then
        the clock), and only what it does alone counts; the harness is then replaced again,
        the contest's figures, from a harness whose clock disagreed, are not kept, and the
        contest is run again, every contender clocked again (a red-team helper's candidate
        patched its clock only when other candidates' code shared its harness: flagged,
        cleared alone, its figure from the contest run again was kept unclocked and won).
        One flagged in company again, once cleared alone, is judged by its solo figures.
        Returns the contenders at fault (candidate id -> ``"status: why"``), an error when
        the device failed, and whether the contest must be run again."""
        flagged, error = self._clocked(cids, dims, self.results)
        if error or not flagged:
            return flagged, error, False
        bad: dict[str, str] = {}
        again = False
        try:
            for c in flagged:
                if (c, dims) in self.alone:  # flagged in company again: its solo figures
                    self.results[c][dims] = self.alone[(c, dims)]
                    self.clocked.add((c, dims))
                    continue
                self.ctx.runner.call(self.device, "fresh")
                solo = self._contest([c], dims, SOLO_ROUNDS, rivals=True)
                why = f"{solo.get('status')}: {solo.get('error') or ''}".strip()
                if solo.get("actor"):  # the device failed, not the contender
                    return bad, why, False
                if solo.get("status") != Status.OK:
                    bad[c] = why
                    continue
                alone = {c: {dims: self._figures(c, dims, solo["results"][0], solo)}}
                at_fault, error = self._clocked([c], dims, alone)
                if error:
                    return bad, error, False
                bad.update(at_fault)
                if not at_fault:  # cleared alone
                    self.alone[(c, dims)], again = alone[c][dims], True
            self.ctx.runner.call(self.device, "fresh")
        except DeviceError as e:
            return bad, f"{Status.LOST}: {e}", False
        if again:  # the next contest's figures are new: every contender clocked again
            self.clocked -= {(c, d) for c, d in self.clocked if d == dims}
        return bad, "", again or bool(bad)

    def _clocked(self, cids: list[str], dims: str, results: Results
                 ) -> tuple[dict[str, str], str]:
        """Up to ``CLOCK_TRIES`` blocks of each contender's calls, prepared as samples, timed
        outside its process, its outputs checked after each block, and of their
        preparations alone, timed in a harness that holds no candidate's code
        (kopt.core.clock ``outside_blocks``); ``suspect`` when every block disagrees with
        its median in ``results``. Contenders cleared before are skipped; those cleared now
        are kept in ``clocked``."""
        bad: dict[str, str] = {}
        for c in cids:
            if (c, dims) in self.clocked:
                continue
            key, build = self.by_cand[c][dims][:2]
            job = RunJob(key, build, json.loads(dims), self.ctx.common).payload()
            clock = partial(self._clock_job, job, self.ctx.builder.artifacts[build])
            med = results[c][dims]["median_ms"]
            blocks: list[Block] = []
            info = self.ctx.runner.infos[self.device]
            self.clock_parts = {}
            self.ctx.phases.begin("clock", info)
            try:
                blocks, fault = outside_blocks(clock, med,
                                               paced=info.get("backend") == "cpu")
            except DeviceError as e:
                return bad, f"{Status.LOST}: {e}"
            except ClockError as e:
                return bad, f"{Status.ERROR}: {e}"
            finally:
                self.ctx.phases.end("clock", info, detail=counted(len(blocks), "block")
                                    + clock_parts_text(self.clock_parts))
            why = clock_suspect(med, blocks)
            if fault or why:
                bad[c] = fault or f"{Status.SUSPECT}: {why}"
            else:
                self.clocked.add((c, dims))
        return bad, ""

    def _clock_job(self, job: dict[str, Any], art: bytes, n: int, loads_only: bool,
                   paced: bool = False) -> dict[str, Any]:
        """One outside-clock block of ``job`` on this device (workers.device_actor
        ``clock``), each call timed on its own with ``paced``; where its wall went added to
        :attr:`clock_parts` (:func:`add_clock_parts`). Raises DeviceError."""
        res = self.ctx.runner.call(self.device, "clock", job, n, art, loads_only, paced)
        add_clock_parts(self.clock_parts, res, "alone" if loads_only else "calls")
        return res

    def _culprits(self, cids: list[str], dims: str, why: str, res: dict[str, Any]
                  ) -> tuple[dict[str, str], str]:
        """The contenders a failed contest ``res`` names in ``failed`` (the job keys at
        fault: workers.device_actor ``contest``); when it names none (a device's own
        failure), each one run alone that fails; those named ``replayed``, ``crashed``,
        ``timeout`` or ``error`` (``failed_status``), only where they fail alone too
        (:meth:`_judged_alone`).
        Returns them and an error when none can be found. Never the error's text: a
        crash's holds what the dying process printed, and a contender that printed a
        rival's job key and aborted got that rival dropped and won (red-team round 10)."""
        failed, statuses = res.get("failed"), res.get("failed_status")
        keys = set(failed) if isinstance(failed, list) and all(
            isinstance(k, str) for k in failed) else set()
        statuses = statuses if isinstance(statuses, dict) else {}
        named = [c for c in cids if self.by_cand[c][dims][0] in keys]
        again = [c for c in named if statuses.get(self.by_cand[c][dims][0], res.get(
            "status")) in JUDGED_ALONE]
        bad = {c: why for c in named if c not in again} if len(cids) > 1 else {cids[0]: why}
        if again and len(cids) > 1:
            alone, error = self._judged_alone(again, dims, why)
            return {**bad, **alone}, error
        if bad:
            return bad, ""
        for c in cids:  # the error names nobody: run each contender alone
            solo = self._contest([c], dims, SOLO_ROUNDS)
            if solo.get("actor"):
                return {}, why
            if solo.get("status") != Status.OK:
                bad[c] = f"{solo.get('status')}: {solo.get('error') or ''}".strip()
        if not bad:
            return {}, f"{why} (yet every contender passes alone; nothing was dropped)"
        return bad, ""

    def _judged_alone(self, named: list[str], dims: str, why: str
                      ) -> tuple[dict[str, str], str]:
        """The contenders of ``named`` that a contest of size ``dims`` found ``replayed``,
        ``crashed``, ``timeout`` or ``error`` (``why``) and that fail again in a contest of
        their own (:data:`SOLO_ROUNDS` rounds, their calls on new sets as many as the
        verdict needs); returns them and an error when the device failed.

        One cleared alone stays and the contest is run again, as a job named so is run
        again (workers.sandbox ``run_retrying``): load that lands on a contender's calls on
        new sets more than on its samples (seen beside two test suites at once) can make an
        honest one look ``replayed`` once. Named so in company again, it is judged alone
        again and, cleared there (at the closing, by the outside clock too, even where its
        company figures were cleared), keeps that solo contest's figures while the contests
        of this size go on without it (:attr:`settled`): dropped on the second time, an
        honest contender could be framed by a rival that failed its load in company every
        time (a red-team helper's processes used up the host's open files). Its solo
        contests run with ``rivals`` (its clocks looked at as in company): a red-team
        cheater crashed in company on purpose, scaled its clock alone, where clocks were
        left to the outside clock's 4x, and won at 1.7x. Every contender of a contest runs
        in a harness of its own (workers.turns): a rival's code cannot rewrite it or run
        while it is timed, as a red-team framer's thread did when contenders shared one
        harness."""
        bad: dict[str, str] = {}
        for c in named:
            try:  # the device's own harness afresh too (what earlier jobs left there)
                self.ctx.runner.call(self.device, "fresh")
            except DeviceError as e:
                return {}, f"{Status.LOST}: {e}"
            solo = self._contest([c], dims, SOLO_ROUNDS, rivals=True)
            if solo.get("actor"):
                return {}, f"{solo.get('status')}: {solo.get('error') or ''}".strip()
            if solo.get("status") != Status.OK:
                bad[c] = f"{solo.get('status')}: {solo.get('error') or ''}".strip()
            elif (c, dims) not in self.replay_cleared:
                self.replay_cleared.add((c, dims))
            else:  # named so in company again: judged by what it does alone
                alone = {c: {dims: self._figures(c, dims, solo["results"][0], solo)}}
                self.clocked.discard((c, dims))  # cleared before: not these figures
                at_fault, error = self._clocked([c], dims, alone) if self.clock else ({}, "")
                if error:
                    return bad, error
                if at_fault:
                    bad.update(at_fault)
                    continue
                self.results.setdefault(c, {})[dims] = alone[c][dims]
                self.settled.add((c, dims))
                rounds = counted(SOLO_ROUNDS, "round")
                self.ctx.fault(f"contest on {self.dc}: candidate {c} was named "
                               f"{why.split(':', 1)[0]} in company again and passed alone "
                               f"again; judged by its figures alone ({rounds}), the contest "
                               f"of size {dims} goes on without it")
        return bad, ""

    def _drop(self, bad: dict[str, str]) -> None:
        for c, w in bad.items():
            if c not in self.alive:
                continue
            self.dropped[c] = w
            self.alive.remove(c)
            self.results.pop(c, None)
            # whole: a check's line ends with its fix (the replayed line runs to ~450 chars)
            why = textwrap.shorten(w.splitlines()[0], 800, placeholder=" ...")
            self.ctx.fault(f"contest on {self.dc}: candidate {c} failed its check ({why}); "
                           "dropped: it cannot win")


def parts_text(res: dict[str, Any]) -> str:
    """Where a contest's wall time went, from its ``parts_ms`` and ``takes``
    (workers.device_actor ``DeviceActor._take``), for its phase's detail: ``"; 1 take:
    judge 4.1 s, turns 20.3 s (the slowest contender's prepare 6.2 s, ...), check 0.8 s"``
    (seconds, one decimal; parts under 0.05 s left out); "" where it has none."""
    parts, takes = res.get("parts_ms"), res.get("takes")
    if not isinstance(parts, dict) or not isinstance(takes, int) or not takes:
        return ""
    secs = {k: v / 1e3 for k, v in parts.items() if isinstance(v, (int, float)) and v >= 50}
    own = [f"{k} {v:.1f} s" for k, v in secs.items() if not k.startswith("contender_")]
    theirs = [f"{k.removeprefix('contender_')} {v:.1f} s" for k, v in secs.items()
              if k.startswith("contender_")]
    if theirs:
        own.append(f"the slowest contender's {', '.join(theirs)}")
    return f"; {counted(takes, 'take')}: {', '.join(own)}"


# the parts of an outside-clock block: the device actor's (workers.device_actor ``clock``'s
# ``actor_parts_ms``) and its harness's (workers.harness ``Harness.lap``, ``parts_ms``)
CLOCK_ACTOR_PARTS = ("harness", "run")
CLOCK_HARNESS_PARTS = ("prepare", "draws", "block", "check")


def add_clock_parts(into: dict[str, float], res: Any, kind: str) -> None:
    """Add the parts of one outside-clock block's answer ``res`` (workers.device_actor
    ``clock``) to ``into`` (ms, keyed ``KIND PART``; ``kind``: ``calls`` for a contender's
    block, ``alone`` for the preparations alone): the actor's ``harness`` (taken or started)
    and ``run`` (the block awaited), and the harness's own parts within ``run`` (only known
    names, each a finite figure from 0 to an hour: the
    calls' harness is a process candidate code shares, so its figures are display only,
    never a verdict)."""
    if not isinstance(res, dict):
        return
    for field, names in (("actor_parts_ms", CLOCK_ACTOR_PARTS),
                         ("parts_ms", CLOCK_HARNESS_PARTS)):
        said = res.get(field)
        if not isinstance(said, dict):
            continue
        for k in names:
            v = said.get(k)
            if type(v) in (int, float) and 0 <= v <= 3.6e6:
                into[f"{kind} {k}"] = into.get(f"{kind} {k}", 0.0) + float(v)


def clock_parts_text(parts: dict[str, float]) -> str:
    """Where an outside clock's wall time went, from :func:`add_clock_parts`' sums, for its
    phase's detail: ``"; calls: harness 1.8 s, prepare 0.4 s; alone: draws 0.1 s"``
    (seconds, one decimal; parts under 0.05 s left out); "" where none is."""
    out = []
    for kind in ("calls", "alone"):
        said = [f"{k.split(' ', 1)[1]} {v / 1e3:.1f} s" for k, v in parts.items()
                if k.startswith(f"{kind} ") and v >= 50]
        if said:
            out.append(f"{kind}: {', '.join(said)}")
    return f"; {'; '.join(out)}" if out else ""


def row_labels(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` (candidate id -> FASTER / SLOWER / TIED against a contest's reference,
    kopt.core.winner; across its problem sizes) as the ``contests`` table shows them: the
    reference's own TIED reads FASTEST when every other contender is SLOWER beyond noise
    (a clear winner, not a tie), at least one; otherwise every label stays (a lone
    contender, a tie's members, one beside a FASTER rival)."""
    tied = [c for c, v in labels.items() if v == "TIED"]
    clear = (len(tied) == 1 and len(labels) > 1
             and all(v == "SLOWER" for c, v in labels.items() if c != tied[0]))
    return {**labels, tied[0]: "FASTEST"} if clear else dict(labels)


def contest_rows(ctx: RunContext, it: int, dc: str, results: Results,
                 dropped: dict[str, str], by_cand: ByCand, labels: dict[str, str],
                 winner: str | None) -> list[dict[str, Any]]:
    """``contests`` rows: every re-measured sample set, with how its contest's contenders
    were witnessed outside their processes (``witness``) and its witnessed figure
    (``actor_ms``, ms), and one row per dropped contender and size with its status
    (``label``: e.g. ``wrong_result``) and no figure. ``labels`` are against the contest's
    reference (its fastest, or the closing's best), whose own label is TIED: the rows say
    FASTEST for it instead when no other contender is TIED (:func:`row_labels`)."""
    labels = row_labels(labels)
    base = {"run_id": ctx.run_id, "sweep": ctx.sweep.name, "iteration": it,
            "device_class": dc}
    out = [{**base, "dims": dims, "candidate_id": c, "job_key": st["job_key"],
            "median_ms": st["median_ms"], "iqr_ms": st["iqr_ms"],
            "n_samples": st["n_samples"], "samples_ms": st["samples_ms"],
            "label": labels.get(c), "winner": c == winner, "created_at": now(),
            "witness": st.get("witness"), "actor_ms": st.get("actor_ms")}
           for c, per in results.items() for dims, st in per.items()]
    out += [{**base, "dims": dims, "candidate_id": c, "job_key": e[0],
             "label": why.split(":", 1)[0], "winner": False, "created_at": now()}
            for c, why in dropped.items() for dims, e in by_cand[c].items()]
    return out


def contest(ctx: RunContext, it: int, dc: str, ranked: list[dict[str, Any]]
            ) -> tuple[Verdict | None, dict[str, str]]:
    """Re-measure the leader and the candidates within noise of it side by side on one
    device of ``dc``. Returns the verdict (None when the leader is clear, no device is left
    or the contest could not run) and the contenders dropped for failing a check, which the
    caller must not name. Writes every re-measured sample set and every dropped contender
    to the ``contests`` table."""
    by_cand = ok_rows(ctx, dc, it)
    per_dims = {c: [(r[2], r[3]) for r in rows.values()] for c, rows in by_cand.items()}
    cands = contenders(ranked, per_dims)
    live = ctx.runner.live(dc)
    if len(cands) < 2 or not live:
        return None, {}
    ids = [c["candidate_id"] for c in cands]
    results, dropped, error = SideBySide(ctx, live[0], dc,
                                         {c: by_cand[c] for c in ids}).run()
    left = [c for c in cands if c["candidate_id"] in results]
    verdict = None
    if error or not left:
        why = error or "every contender failed its check"
        ctx.fault(f"contest on {dc} could not finish ({why}); the best-ranked contender "
                  "that did not fail a check wins")
    else:
        verdict = decide(left, {c: [(st["median_ms"], st["iqr_ms"]) for st in per.values()]
                                for c, per in results.items()})
    ctx.writer.add("contests", contest_rows(
        ctx, it, dc, results if verdict else {}, dropped, by_cand,
        verdict.labels if verdict else {}, verdict.winner if verdict else None))
    if verdict is not None:
        for o in ctx.observers:
            o.on_contest(dc, verdict)
    return verdict, dropped
