"""The per-device Ray actor: owns one device and its long-lived sandbox (harness) process.

One actor per GPU (``num_gpus=1``; Ray sets CUDA_VISIBLE_DEVICES) or per CPU
device. Jobs reach it with the build artifact's bytes (a Ray object, so the
artifact travels to whichever node the actor lives on); it caches the
artifact on local disk and hands the path to the harness.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import ray

from workers import hold, isolation, judge, ncu, turns, witness, witness_gpu, zygote
from workers.build import ensure_artifact, spares_wanted
from workers.observers import ProfileTarget, profiling_observers
from workers.prestart import Prestarted, cpu_env, judge_key
from workers.records import RunJob, RunOutcome
from workers.sandbox import Sandbox, StartError
from workers.spares import Spares
from workers.status import Status
from workers.timing import lap

# the parts of a contender's harness in a contest (workers.harness ``Harness.lap``)
# waits (s) before a job short of a host resource is run again (:meth:`DeviceActor.run`):
# workers.isolation's probe's, whose shortage a red-team helper's candidate made
SHORTAGE_RETRY_S = isolation.PROBE_RETRY_S
CONTEST_PARTS = ("prepare", "wait", "check", "warm_up", "rounds", "witness", "own", "draws")


class DeviceActor:
    """Runs candidates on one device, one at a time.

    Args:
        backend: ``"cuda"`` or ``"cpu"``.
        threads: CPU threads for the CPU backend (OMP_NUM_THREADS); ignored for CUDA.
        device_class: the class the node declares (``kopt_class_<NAME>`` resource); None:
            derived from the hardware (workers.harness.device_info).
        prestarted: harnesses the driver started before Ray (workers.prestart), by GPU id
            (``"0"``) or, for a CPU device, ``"cpu"``: the actor takes over the one of its
            device instead of starting one (when it cannot, it starts its own).

    Raises:
        RuntimeError: the harness could not start (no device, broken torch...).
    """

    def __init__(self, backend: str, threads: int = 1, device_class: str | None = None,
                 prestarted: dict[str, Prestarted] | None = None, spares: int | None = None):
        env = cpu_env(threads) if backend == "cpu" else {}
        self.backend, self.env = backend, env
        # the outside clock's harness of the preparations alone (:meth:`clock`), and its
        # start in the background (:meth:`clock_ready`)
        self.bare: Sandbox | None = None
        self._bare_start: Future[None] | None = None
        self.device_class = device_class
        # where the last contest's wall time went (ms, :meth:`_take`)
        self.parts: dict[str, float] = {"takes": 0}
        # why this host cannot take witness turns ("": it can; None: not yet known,
        # workers.witness_gpu ``host_why``)
        self.host_why: str | None = None
        self._warm_ncu: Any = None  # workers.ncu_warm.WarmNcu, started by ncu_warm
        self.sandbox = Sandbox(backend, env)
        pre = _mine(backend, prestarted or {})
        adopted = pre is not None and self.sandbox.adopt(pre)
        # ncu's metric list, read while the sandbox starts (1.2-1.7 s of an H200
        # device's time before its first job when it was read on request); not where the
        # harness was the driver's, on this node: the driver reads it (workers.ncu.start_query)
        self._metrics: Future[list[str] | None] | None = (
            ThreadPoolExecutor(1).submit(ncu.query_metrics)
            if backend == "cuda" and not adopted else None)
        if not adopted:
            self.sandbox.start()
        if (judge_pre := _mine(backend, prestarted or {}, judge=True)) is not None:
            # taken over in the background, as :meth:`clock_ready` starts one
            self._bare_start = ThreadPoolExecutor(1).submit(self._adopt_judge, judge_pre)
        if spares is None:
            spares = spares_wanted()[0] if backend == "cuda" else 0
        self.spares = Spares(backend, env, spares)
        self.spares.fill()  # while the first jobs run: the device's first contest takes them
        self.busy_s = 0.0
        self.jobs = 0

    def info(self) -> dict[str, Any]:
        """The device's figures (workers.harness.device_info) plus node IP, node id and pid;
        ``device_class`` is the node's declared class when it has one (``hw_class``: the
        hardware-derived one)."""
        info = {**self.sandbox.info, "node_ip": ray.util.get_node_ip_address(),
                "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
        gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU") or []
        info["device_id"] = (f"{info['node_ip']}/GPU{gpus[0]}" if gpus
                             else f"{info['node_ip']}/cpu-{os.getpid()}")
        info["hw_class"] = info["device_class"]
        info["prestarted"] = self.sandbox.adopted
        if self.device_class:
            info["device_class"] = self.device_class
        return info

    def ping(self) -> int:
        """The actor's pid: a cheap liveness check."""
        return os.getpid()

    def readable(self, path: str) -> bool:
        """Whether this actor's node can read ``path`` (a warm service reads each sweep's
        ref.py where the sweep's driver sees it)."""
        return os.access(path, os.R_OK)

    def run(self, job: RunJob, artifact: bytes) -> RunOutcome:
        """Run one job (see workers.harness) and return its outcome; never raises."""
        t0, started = time.perf_counter(), time.time()
        try:
            res = self._through_shortage(job, artifact)
        except StartError as e:  # the device's failure: no verdict on this candidate
            res = RunOutcome.fault(Status.LOST, f"device actor: {e}; the job was not run "
                                   "(no verdict on this candidate)")
        except Exception as e:  # the harness could not even be restarted
            res = RunOutcome.fault(Status.ERROR, f"device actor: {e!r}")
        self.busy_s += time.perf_counter() - t0
        self.jobs += 1
        res.job_key, res.started_at, res.ended_at = job.job_key, started, time.time()
        return res

    def _through_shortage(self, job: RunJob, artifact: bytes) -> RunOutcome:
        """:meth:`run`'s job in this device's harness (workers.sandbox ``run_retrying``),
        run again after each wait of :data:`SHORTAGE_RETRY_S` while its harness does not
        start for want of a host resource (workers.isolation ``PASSING``, or the host's
        open files found nearly used up, ``host_files_short``: a start's error can be cut
        before its cause), or the job ends in ``error`` because the host's open files ran
        out (``ENFILE``, workers.isolation ``HOST_WIDE``) while the host's count says so:
        a candidate on another device that holds them (a red-team helper's children held
        the host's 2.47 M open files for 10-20 s through file mappings) must not cost an
        honest job here its verdict. The error's text alone is not trusted (a red-team
        candidate raised it through Python's C API, its wrong outputs then `lost`): with
        the host's files free, a job that says so is run once more, and that run's outcome
        is its own. Still short after the waits: ``lost`` (no verdict on this candidate),
        never ``error``. Raises StartError when a harness does not start for another
        reason."""
        path = str(ensure_artifact(job.build_id, artifact))
        box, why, said = self._own(), "", 0
        for wait in (*SHORTAGE_RETRY_S, None):
            try:
                res = _attributed(box, replace(job, artifact=path))
                if res.status != Status.ERROR or isolation.HOST_WIDE not in res.error:
                    return res
                if not isolation.host_files_short():
                    said += 1  # the host has its files: once more, then the job's own
                    if said > 1:
                        return res
                why = res.error
            except StartError as e:
                if not (isolation.short_of_host(str(e)) or isolation.host_files_short()):
                    raise
                why = str(e)
            if wait is not None:
                time.sleep(wait)
        return RunOutcome.fault(Status.LOST, f"device actor: the host was short of a "
                                f"resource through {sum(SHORTAGE_RETRY_S):g} s of retries "
                                f"({why[:300]}); no verdict on this candidate")

    def contest(self, jobs: list[dict[str, Any]], rounds: int, *artifacts: bytes
                ) -> dict[str, Any]:
        """Time ``jobs`` (same problem size, different builds; ``artifacts`` in the same order,
        top-level arguments so that Ray resolves them) side by side: ``rounds`` interleaved
        samples each (workers.harness ``contest``), each contender in a fresh harness of its
        own, the rounds in turns with every rival held still (workers.turns) and, with
        rivals, this device's own harness held still throughout (:meth:`_in_turns`). Never
        raises.

        Returns ``status``, ``error`` and ``results``: per job in order, ``median_ms``,
        ``iqr_ms``, ``n_samples``, ``samples_ms``; a failed contest names the job keys at
        fault (``failed``) and each one's status (``failed_status``); ``parts_ms``, where
        its wall time went (:meth:`_take`, summed over its takes), and ``takes``.
        """
        t0, self.parts = time.perf_counter(), {"takes": 0}
        try:
            paths = [str(ensure_artifact(j["build_id"], a)) for j, a in zip(jobs, artifacts)]
            # in turns alone too (each sample within a turn its sandbox times: workers.turns
            # ``in_its_turns``), its clocks left to the outside clock then (``alone``), but
            # not where its figures may stand against rivals' (``rivals``: a contender judged
            # alone by kopt.loop.contests after it was named so in company; a red-team
            # cheater crashed in company on purpose to be judged by a solo figure from a
            # clock it had scaled by 10/18, and won at 1.7x)
            each = [{**j, "contest": [{**j, "artifact": p}], "rounds": rounds, "turns": True,
                     "alone": len(jobs) == 1 and not j.get("rivals")}
                    for j, p in zip(jobs, paths)]
            res = self._in_turns(jobs, each, sum(j["timing"]["timeout_s"] for j in jobs) * 2)
        except Exception as e:
            res = {"status": Status.ERROR, "error": f"device actor: {e!r}"}
        takes = int(self.parts.pop("takes"))
        res.update(parts_ms={k: round(v, 3) for k, v in self.parts.items()}, takes=takes)
        self.busy_s += time.perf_counter() - t0
        return res

    def _in_turns(self, jobs: list[dict[str, Any]], each: list[dict[str, Any]],
                  timeout_s: float) -> dict[str, Any]:
        """The contest of ``each`` (one job per contender) in fresh sandboxes, in turns
        (workers.turns); with rivals, this device's own harness, where an earlier job's code
        may have left threads, held still meanwhile, and what it used read: one that ran
        anyway (a red-team leftover's long system calls escaped holds taken per turn) is
        ended and the contest run again. A contest where a contender was `suspect` by its
        witness turns' CPU bound alone (workers.witness ``BOUND``: a loaded machine
        lengthens an honest microsecond kernel's turns) is taken once more, in fresh
        sandboxes on fresh input sets, and that take's answers stand; its ``witness`` then
        names who was retaken (where that take had no witness turns, the first take's
        answers stand: a judge kept from its sets must not clear a suspect). One whose
        turns could not be judged (the judge's check failed; a GPU busy before a turn with
        no one to blame; a GPU judge kept from its sets by other processes' memory) is
        taken once more with a new judge, and a second such take is the device's failure.
        Raises what the sandboxes raise."""
        escaped, retaken, rejudged, first = False, "", False, None
        while True:
            res, answers, used = self._take(jobs, each, timeout_s, bool(retaken))
            if used is not None and used > hold.HELD_CPU_MS and not escaped:
                escaped = True
                self.fresh()  # what ran there ends with it
            elif any(a.get(witness.UNCHECKED) for a in answers) and not rejudged:
                rejudged = True
                self.clock_end()  # a new judge, on input sets of its own
            elif witness.bound_failed(answers) and not retaken:
                retaken, first = ", ".join(j["job_key"] for j, a in zip(jobs, answers)
                                           if a.get(witness.BOUND)), res
            else:
                break
        if first is not None and str(res.get("witness") or "").startswith("none:") and not any(
                a.get(witness.UNCHECKED) for a in answers):  # unjudged twice: the device's
            return {**first, "witness": f"{first['witness']}; its retake had no witness turns "
                    f"({res['witness']}): the first take stands"}
        if unchecked := [a for a in answers if a.get(witness.UNCHECKED)]:  # twice: the
            return {"status": Status.ERROR, "actor": True,  # device's failure, no one's
                    "witness": res.get("witness"), "error": "the witness turns could not be "
                    f"judged twice: {unchecked[0].get('error')}"}
        if retaken:
            bound = "CPU" if self.backend == "cpu" else "GPU"
            res["witness"] += (f"; taken again, {retaken} having been suspect by the {bound} "
                               "bound in the first take")
        return res

    def _take(self, jobs: list[dict[str, Any]], each: list[dict[str, Any]],
              timeout_s: float, fresh: bool = False
              ) -> tuple[dict[str, Any], list[dict[str, Any]], float | None]:
        """One take of :meth:`_in_turns`' contest: its answer, each contender's answer
        (workers.judge ``judged``) and the CPU time (ms) this device's own held harness used
        meanwhile (workers.hold ``used_ms``); ``fresh``: its witness turns on input sets
        drawn anew. Adds to :attr:`parts` (ms) the device's harness ended (``fresh``), the
        judge's sets and null turns (``judge``), the contenders' sandboxes in turns
        (``turns``; within it, the slowest contender's harness parts, workers.harness
        ``Harness.lap``, as ``contender_PART``) and the judge's check (``check``). Raises
        what the sandboxes raise."""
        boxes = [self.spares.take() for _ in jobs]  # each started ahead where one was
        self.spares.settle()  # no harness starts while the contest times
        t, self.parts["takes"] = time.perf_counter(), self.parts.get("takes", 0) + 1
        if self.backend != "cpu":  # its device memory to the contest (what ran there ends):
            self.fresh()  # beside it and the judge, an honest contender ran out (an H100)
        t = lap(self.parts, "fresh", t)
        # held from before the judge's null turns, alone too: code an earlier job left there
        # slowed the null turns (a lower baseline for every contender) or, unheld, could
        # carry the judge's kept input sets from one contest's contender to the next's
        # (a red-team review)
        held, judging = self.sandbox.pause(), judge.Judging(None, why="not prepared")
        try:
            judging = self._judging(jobs, timeout_s, fresh)
            t = lap(self.parts, "judge", t)
            answers = turns.run_in_turns(
                boxes, [{**e, "witness": witness.TURNS if judging.plans else 0}
                        for e in each], timeout_s, judging.plans)
            t = lap(self.parts, "turns", t)
            self._slowest([a.get("parts_ms") for a in answers])
            # the contenders ended, and what the actor mapped of them let go, before the
            # judge's check (their outputs are in the judge's memory): one that took the
            # device's memory made the check fail (a red-team review)
            for box in boxes:
                box.kill()
            judge.close(judging)
            answers = judge.judged(self.judge(), judging, boxes, answers, timeout_s)
            lap(self.parts, "check", t)
            if judging.unjudged:  # memory taken on purpose must not turn witness turns off
                answers = [witness.unchecked(a, judging.why) for a in answers]
            if stuck := sum(p.stuck for p in judging.plans or []):
                answers = [witness.unchecked(a, f"the GPU stayed busy for over "
                                             f"{witness_gpu.IDLE_LIMIT_MS:.0f} ms before "
                                             f"{stuck} witness turns while every contender "
                                             "was held: whose work it was is not known")
                           for a in answers]
            res = {**turns.combined(jobs, answers), "witness": judging.said}
        finally:
            judge.close(judging)
            used = hold.used_ms(held)
            hold.release(held)
            for box in boxes:
                box.close()
        return res, answers, used

    def _slowest(self, parts: list[Any]) -> None:
        """The harness parts (workers.harness ``Harness.lap``) of the contender whose
        parts sum the most, of ``parts`` (one per contender, as its harness said: a
        process candidate code shares), added to :attr:`parts` as ``contender_PART`` (ms):
        only the parts a harness has (:data:`CONTEST_PARTS`), each a finite figure from 0
        to an hour; what else a harness said is left out (its names reach the phases
        table's text)."""
        said = [{k: float(v) for k, v in p.items() if k in CONTEST_PARTS
                 and type(v) in (int, float) and 0 <= v <= 3.6e6}
                for p in parts if isinstance(p, dict)]
        for k, v in max(said, key=lambda p: sum(p.values()), default={}).items():
            self.parts[f"contender_{k}"] = self.parts.get(f"contender_{k}", 0.0) + v

    def _judging(self, jobs: list[dict[str, Any]], timeout_s: float, fresh: bool = False
                 ) -> judge.Judging:
        """A contest's witness turns (workers.witness), judged by the outside clock's
        second harness (:meth:`judge`), which never loads candidate code, only where the
        device actor can reach a harness's memory (else none, and why: the contest's
        ``witness``): on a GPU its device memory (workers.witness_gpu). A judge that fails
        on a host not known to be unable to take witness turns (workers.witness_gpu
        ``host_why``) leaves the contest unjudged (workers.judge ``prepare``)."""
        if witness.TURNS <= 0:
            return judge.Judging(None, why="witness turns are off (workers.witness.TURNS)")
        gpu = self.backend != "cpu"
        if self.host_why is None:  # once: what no candidate's process can change
            self.host_why = witness_gpu.host_why(gpu)  # (None: not known now; asked again)
        if self.host_why:
            return judge.Judging(None, why=f"this host cannot take them: {self.host_why}")
        return judge.prepare(self.judge(), jobs, timeout_s, gpu=gpu, fresh=fresh,
                             bounded=gpu or self.env.get("OMP_NUM_THREADS") == "1")

    def judge(self) -> Sandbox:
        """This device's second harness, which never loads candidate code (the outside
        clock's preparations, witness turns' judge): started in the background by
        :meth:`clock_ready`, else on its first job."""
        self._bare_started()
        if self.bare is None:
            self.bare = Sandbox(self.backend, self.env, loads_code=False)
        return self.bare

    def clock(self, job: dict[str, Any], calls: int, artifact: bytes,
              loads_only: bool = False, paced: bool = False) -> dict[str, Any]:
        """Time ``calls`` calls of ``job``'s artifact, each prepared as a sample, by this
        process's clock (workers.harness ``clock``; workers.sandbox measures ``outside_ms``;
        ``paced``: each call's clock of its own too, ``outside_calls_ms``); ``loads_only``:
        the preparations alone, in a second harness of this device that never loads a
        candidate's code (started on the first such call, kept until :meth:`clock_end`): in
        the candidate's own harness a thread it left there could slow them on purpose (by
        holding Python's GIL while no call comes, attack MODE 13 of
        tests/fixtures/faultpack/attacks.cpp), and the calls' figure, less their block,
        would clear a patched clock. The candidate's sandbox is held still meanwhile
        (workers.hold: what spins there while no call of its own runs would take the CPUs
        from them just as well). The candidate's block is run once more in a fresh harness
        when it failed (workers.sandbox ``run_retrying``). Never raises.

        Returns ``status``, ``error``, ``calls``, ``inside_ms`` (the harness's own clock)
        and ``outside_ms`` (this process's), in ms; with ``loads_only``, ``held_cpu_ms``
        too where it can be read: the CPU time the held sandbox used meanwhile (ms,
        workers.hold ``used_ms``; 0 when the hold held); ``actor_parts_ms``, where this
        process's wall went (ms): ``harness`` (the harness taken or started, the sandbox
        held) and ``run`` (the block in it, whose own parts the harness says in
        ``parts_ms``: workers.harness ``Harness.lap``)."""
        t0 = t = time.perf_counter()
        parts: dict[str, float] = {}
        try:
            path = str(ensure_artifact(job["build_id"], artifact))
            sandbox, held = self._own(), None
            self.spares.settle()  # no harness starts while the clock times
            if loads_only:
                sandbox, held = self.judge(), self.sandbox.pause()
            t = lap(parts, "harness", t)
            # the candidate's block: run again in a fresh harness when it crashed or failed
            # after other candidates' jobs (what their code left there, a thread that ends
            # the harness while this job's ref.py runs, cannot frame it: red-team round 16
            # had an honest rival's block `crashed` so)
            run = sandbox.run if loads_only else sandbox.run_retrying
            try:
                res = run({**job, "artifact": path, "clock_calls": int(calls),
                           "clock_loads_only": bool(loads_only), "clock_paced": bool(paced)},
                          job["timing"]["timeout_s"])
                lap(parts, "run", t)
                res.pop("held_cpu_ms", None)  # this process's figure alone
                res["actor_parts_ms"] = {k: round(v, 3) for k, v in parts.items()}
                if held is not None and (used := hold.used_ms(held)) is not None:
                    res["held_cpu_ms"] = used
            finally:
                hold.release(held)
        except Exception as e:
            res = {"status": Status.ERROR, "error": f"device actor: {e!r}"}
        self.busy_s += time.perf_counter() - t0
        return res

    def clock_ready(self) -> None:
        """Start the outside clock's second harness (:meth:`clock`) in the background and
        return at once, so that the loop's closing does not wait for it (torch's import
        and a CUDA context: 2.1 s of a cold 140-candidate sweep's 18.8 s on an H200,
        docs/verified/2026-12-04-outside-clock-hold.md). The loop casts it while the device
        profiles, before its closing; :meth:`clock` waits for the start. A start that fails
        here is tried again there. The closing's contenders' harnesses, and the one its
        clock times candidates in, start meanwhile too (workers.spares). Never raises."""
        self.spares.fill()
        if self.bare is None and self._bare_start is None:
            self.bare = Sandbox(self.backend, self.env, loads_code=False)
            self._bare_start = ThreadPoolExecutor(1).submit(self.bare.start)

    def _adopt_judge(self, pre: Prestarted) -> None:
        """Take over ``pre``, the judge the driver started before Ray (workers.prestart
        ``judge_key``), as this device's second harness (:meth:`judge`), where this process
        can reach its memory as witness turns do (workers.witness ``reach``: not this
        process's descendant, a prestarted harness is out of its reach under Yama's
        ``ptrace_scope`` 1, and every contest's first take would be unjudged); else it is
        closed, and the judge starts on its first job, as before."""
        bare = Sandbox(self.backend, self.env, loads_code=False)
        if not bare.adopt(pre):
            return
        if bare.host_pid and not witness.reach(bare.host_pid, fd=self.backend != "cpu"):
            self.bare = bare
        else:
            bare.close()

    def _bare_started(self) -> None:
        """Wait for :meth:`clock_ready`'s start, if one runs; a failed one leaves the
        second harness to start on its first job (workers.sandbox)."""
        if self._bare_start is not None:
            try:
                self._bare_start.result()
            except Exception:  # noqa: BLE001 -- its own start, on the first job, says why
                pass
            self._bare_start = None

    def clock_end(self) -> None:
        """Stop the harness of the outside clock's preparations (:meth:`clock`), if any."""
        self._bare_started()
        if self.bare is not None:
            self.bare.close()
            self.bare = None

    def _own(self) -> Sandbox:
        """This device's own harness; one a contest ended (:meth:`fresh`) replaced by a spare
        (workers.spares) where one is started or starting, so that the next job, or the
        outside clock's first block, does not wait for a harness to start (3.5 s of a cold
        sweep's clock on an H100, docs/verified/2026-12-06-session47.md)."""
        box = self.sandbox
        if box.proc is None and self.spares.ready():
            spare = self.spares.take()
            spare.restarts = box.restarts
            box.close()
            self.sandbox = spare
        return self.sandbox

    def fresh(self) -> None:
        """End the harness process; the next job starts a new one (state a candidate left
        in it, a patched clock say, dies with it)."""
        self.sandbox.end()

    def profile_many(self, jobs: list[dict[str, Any]], kernels: list[list[str]],
                     metrics: list[str], sections: list[str] | None, *artifacts: bytes
                     ) -> list[dict[str, Any]]:
        """A profiled pass over several candidates: each profiling observer registered for
        this device (workers.observers ``profiling_observers``, given ``metrics`` and
        ``sections``; CUDA: :class:`~workers.observers.NcuObserver`, one ncu process for
        the batch) wraps one launch of each. ``kernels``: each job's mangled kernel names;
        ``artifacts`` in the order of ``jobs``, top-level arguments so that Ray resolves
        them. Never raises; per job in order, the observers' results merged (NCU:
        ``profile_status``, ``profile_error``, ``ncu_rows``, ``ncu_command``,
        ``ncu_seconds``)."""
        t0 = time.perf_counter()
        out: list[dict[str, Any]] = [{} for _ in jobs]
        warm, self._warm_ncu = self._warm_ncu, None
        try:
            batch = [ProfileTarget({**j, "device": self.backend, "artifact": str(
                ensure_artifact(j["build_id"], a))}, ks)
                for j, a, ks in zip(jobs, artifacts, kernels)]
            for o in profiling_observers(self.backend, metrics=metrics, sections=sections,
                                         warm=warm):
                for mine, res in zip(out, o.profile(batch)):
                    mine.update(res)
        except Exception as e:
            out = [{"profile_status": Status.CRASHED, "profile_error": f"profile: {e!r}"}
                   for _ in jobs]
        finally:
            if warm is not None:
                warm.close()  # used up by the NCU observer, or left unused
        self.busy_s += time.perf_counter() - t0
        self.ncu_warm(metrics, sections)  # the next iteration's, started now
        return out

    def ncu_warm(self, metrics: list[str], sections: list[str] | None) -> bool:
        """Start an ncu process for the next :meth:`profile_many` with these ``metrics`` and
        ``sections`` (workers.ncu_warm: ncu and its target's imports ready while the device
        times candidates); one at a time, kept when it already collects the same. Returns
        whether one waits now (False: CUDA backend only, or no ncu)."""
        if self.backend != "cuda":
            return False
        # lazy: the CUDA backend only: a CPU device actor never loads it
        from workers import ncu_warm

        w = self._warm_ncu
        if w is not None and w.key == ncu_warm.key_of(metrics, sections) and w.alive():
            return True
        if w is not None:
            w.close()
        self._warm_ncu = ncu_warm.start(metrics, sections)
        return self._warm_ncu is not None

    def query_metrics(self) -> list[str] | None:
        """Base metric names ``ncu --query-metrics`` lists for this device (None without ncu;
        read once, in the background from the actor's start; on request where the actor
        adopted the driver's harness, whose driver reads its own)."""
        if self._metrics is None and self.backend == "cuda":
            self._metrics = ThreadPoolExecutor(1).submit(ncu.query_metrics)
        if self._metrics is None:
            return None
        try:
            return self._metrics.result()
        except Exception:  # noqa: BLE001 -- no metric list: profiles use the catalog's names
            return None

    def prepare(self, job: dict[str, Any]) -> dict[str, Any]:
        """Make the inputs and reference outputs of ``job``'s dims on this device (no kernel):
        checks ref.py once before anything is built. Returns an outcome dict."""
        return self._own().run({**job, "prepare_only": True}, job["timing"]["timeout_s"])

    def time_reference(self, job: dict[str, Any]) -> dict[str, Any]:
        """Time ref.py's ``contender`` (else ``reference``) at ``job``'s dims on this device,
        as candidates are timed (workers.harness ``Harness.time_reference``), in the device's
        own harness, where candidates ran before: a run that crashed, or failed after their
        code ran there, is run again in a fresh harness (workers.sandbox ``run_retrying``),
        as a candidate's is (a red-team thread a candidate left there forged a message
        during the reference's timing, which was then ``crashed``). Never raises: an outcome
        dict (``status``, ``error``, the timing figures, ``impl``, ``max_abs_err``,
        ``max_rel_err``)."""
        t0 = time.perf_counter()
        try:
            box = self._own()
            self.spares.settle()  # no harness starts while the reference is timed
            res = box.run_retrying({**job, "time_reference": True},
                                   job["timing"]["timeout_s"])
        except Exception as e:  # the harness could not even be restarted
            res = {"status": Status.ERROR, "error": f"device actor: {e!r}"}
        self.busy_s += time.perf_counter() - t0
        return res

    def stats(self) -> dict[str, Any]:
        """Seconds spent running jobs, job count, harness restarts and the harness's pid."""
        return {"busy_s": self.busy_s, "jobs": self.jobs, "restarts": self.sandbox.restarts,
                "harness_pid": self.sandbox.pid}

    def shutdown(self) -> None:
        """Close the sandboxes, any warm ncu process and this process's idle harness
        zygotes (workers.zygote ``close_idle``)."""
        if self._warm_ncu is not None:
            self._warm_ncu.close()
            self._warm_ncu = None
        self.clock_end()
        self.spares.close()
        self.sandbox.close()
        zygote.close_idle()



def _attributed(box: Sandbox, job: RunJob) -> RunOutcome:
    """``job`` (its ``artifact`` a path on this node) run in ``box`` (workers.sandbox
    ``run_retrying``), then what its code left running in the sandbox ended with the harness
    and held against it (:func:`_left`): where another candidate's code had run in that
    harness before, the job is run once more in a fresh one first, and that run's outcome is
    its own (a thread an earlier candidate left in the harness could start a process during
    an honest job and have it `escaped`, as a crash is retried so that one candidate cannot
    frame the next). Raises what the sandbox raises."""
    res = RunOutcome.from_dict(box.run_retrying(job, job.timeout_s))
    alone = box.loaded <= {job.artifact}
    left = box.end_leftovers()
    if left and res.status == Status.OK and not alone:
        first = left
        res = RunOutcome.from_dict(box.run_retrying(job, job.timeout_s))
        left = box.end_leftovers()
        if not left:  # the row says why it ran twice, as a crash's retry does
            res = replace(res, error="; ".join(x for x in (res.error, (
                f"run again in a fresh harness: {len(first)} process(es) were left running "
                "in its sandbox after its first run, in a harness that had run other "
                "candidates' code")) if x))
    return _left(res, left)


def _left(res: RunOutcome, pids: list[int]) -> RunOutcome:
    """``res`` of a job whose candidate's code left ``pids`` running in its sandbox
    (workers.sandbox ``Sandbox.end_leftovers``: started once its code could run, still
    there at its end): an `ok` one is ``escaped`` (a red-team candidate's children held
    the host's open files while its job ran, other devices' jobs then `lost`, and it stayed
    `ok`; in a contest such a process makes a contender ``escaped`` too, workers.turns);
    any other status stays."""
    if not pids or res.status != Status.OK:
        return res
    return replace(res, status=Status.ESCAPED, error=(
        f"its code left {len(pids)} process(es) running in its sandbox after its job (pids "
        f"{', '.join(map(str, pids[:8]))}); they ended with its harness"))


def _mine(backend: str, prestarted: dict[str, Prestarted], judge: bool = False
          ) -> Prestarted | None:
    """The prestarted harness of this actor's device (``judge``: its judge,
    workers.prestart ``judge_key``): by the GPU id Ray gave the actor, or the ``cpu`` one;
    None when there is none (or the actor holds several GPUs)."""
    name = judge_key if judge else str
    if backend != "cuda" or not prestarted:  # (no Ray call: a LocalRunner's has no Ray)
        return prestarted.get(name("cpu"))
    gpus = ray.get_runtime_context().get_accelerator_ids().get("GPU") or []
    return prestarted.get(name(str(gpus[0]))) if len(gpus) == 1 else None


def remote_actor(backend: str, threads: int = 1, resources: dict[str, float] | None = None):
    """A Ray actor handle class for ``backend`` with the right resource request."""
    # the driver replaces a dead actor itself (on the same node, or not at all when the
    # node is gone), so Ray does not restart it somewhere of another class
    opts: dict[str, Any] = {"max_restarts": 0}
    if backend == "cuda":
        opts.update(num_gpus=1, num_cpus=1)
    else:
        opts.update(num_cpus=threads)
    if resources:
        opts["resources"] = resources
    return ray.remote(**opts)(DeviceActor)
