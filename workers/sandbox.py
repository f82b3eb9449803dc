"""Client side of the sandbox: a long-lived harness subprocess that survives nothing bad.

:class:`Sandbox` starts ``python -m workers.harness`` with a private pipe
pair, sends it run jobs and waits for each answer with a timeout. A job that
hangs (timeout: no answer in ``timeout_s``, which starts again once the harness has made
the inputs and which the harness's progress messages extend, see ``Sandbox._extend``),
kills the process (segfault, abort) or leaves the CUDA
context broken (illegal address) becomes an outcome with that status and
error text; the process is restarted before the next job.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from workers import cgroup, hold, isolation, prestart, priority, teams, witness, zygote
from workers.jail import SetupError, file_bytes
from workers.prestart import Prestarted
from workers.reap import NO_GPU, package_env, tie_to_parent
from workers.records import RunJob
from workers.status import Status

START_TIMEOUT_S = 180.0
_STATUSES = {st.value for st in Status}
ANSWER_BYTES = 64 << 20  # the largest message a harness may send (samples, error text)
EXIT_WAIT_S = 30.0  # for a harness whose connection closed to exit by itself
# for the processes of a killed harness's PID namespace to be gone (Sandbox._namespace_ended)
NS_EXIT_WAIT_S = 5.0
PING_S = 10.0  # a harness answers the ping after its answer within this (s)
GRACE_S = 10.0  # past the budget, before a job with a known call time is a hang
OWN_LIMIT = 10  # a job's wall past preparation: at most this many x its budget, + GRACE_S
PREPARE_TIMEOUT_S = 600.0  # for inputs() and reference() of one problem size, all input sets
STOP_CHECK_S = 0.5  # while a job runs, how often the harness is looked at for being stopped
# a paced clock job's figures (:meth:`Sandbox._paced_mark`): each call's ms by this process's
# clock, and the CPU ms of the harness's thread group where it can be read
PACED_KEYS = ("outside_calls_ms", "outside_calls_cpu_ms")
# set once a harness of this process has started (or been adopted) in its sandbox: from then
# on a start that fails in the sandbox is that start's failure, never a reason to start one
# outside it (:meth:`Sandbox.fall_back`)
_SANDBOX_WORKED: list[bool] = []


class StartError(RuntimeError):
    """A job's harness did not start (:meth:`Sandbox.run`): the device's failure, not a
    verdict on the job's candidate (a red-team helper's processes, run on another device,
    used up the host's open files, and a rival's restart there failed: its row said
    ``error``)."""


# what a job's row says when a thread started while it ran (by its code, or by ref.py's:
# they share the process) still ran in the harness's process after it
# (:meth:`Sandbox._threads_left`)
THREADS_LEFT = "threads started during the job still ran in the harness's process"
# what it says when a worker of the harness's own OpenMP team was not back in its idle wait
# after the job (workers.teams): a region's function left running on it
TEAM_LEFT = "a thread of the harness's OpenMP team still ran code after the job"
# what it says when the job's candidate code entered the harness's Python interpreter during
# its calls (workers.audit: the harness's messages, the answer): :meth:`Sandbox._entered`
ENTERED = "its code entered the harness's Python interpreter"


def _entered_said(msg: dict[str, Any]) -> list[str]:
    """The events a harness's message ``msg`` says a job's code raised in its interpreter
    (workers.audit: ``entered``, at most 8, each cut to 120 characters); [] when none."""
    said = msg.get("entered")
    return [str(x)[:120] for x in said[:8]] if isinstance(said, list) else []


class Sandbox:
    """One harness subprocess for one device.

    Args:
        device: ``"cuda"`` or ``"cpu"``.
        env: extra environment for the subprocess (e.g. CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS).
        loads_code: False for a harness that never loads a candidate's code (the device
            actor's judge: workers.device_actor ``judge``): every process its sandbox holds
            is its own (ref.py's work started it, e.g. torch.compile's worker pool, with no
            "prepared" of a candidate's job to count them at), never a reason to end it.
    """

    def __init__(self, device: str, env: dict[str, str] | None = None,
                 loads_code: bool = True):
        self.device = device
        self.loads_code = loads_code
        self.env = {**package_env(), **(env or {})}  # found from any cwd
        if device == "cpu":  # a CPU candidate's clock must not be beaten on a GPU
            self.env.update(NO_GPU)
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.info: dict[str, Any] = {}
        self.pid: int | None = None  # the harness process's
        self.host_pid: int | None = None  # the harness process's pid on the host
        self.rt_pid: int | None = None  # its host pid, for timing.realtime (CPU; workers.priority)
        self.timing_ref = ""  # ref.py's function the running job times, from its progress
        self.log = Path(tempfile.mkstemp(prefix="kopt-harness-", suffix=".log")[1])
        self.adopted = False  # the harness was started before Ray (adopt)
        self.isolation = isolation.available()
        self.scratch = ""  # the sandbox's one writable folder (workers.jail), per start
        self.cgroup: cgroup.Cgroup | None = None  # the running harness's (workers.cgroup)
        # the cgroup the running harness is known to be in (joined: Cgroup.holds), read for
        # its CPU time (_cpu_ns); an adopted harness's is its prestarter's, not removed here
        self.counted: cgroup.Cgroup | None = None
        self.limits = ""  # its task and memory limits in words, or "none: why"
        self.served = 0  # jobs the running harness answered (their code may still run there)
        self.loaded: set[str] = set()  # the artifacts the running harness was sent
        # the last job's turns (a contest in turns: workers.turns), each by this process's
        # clock from its "go" to the harness's next "turn" or its answer (ms)
        self.turn_ms: list[float] = []
        self.taking: witness.Taking | None = None  # the last job's witness turns, if a plan
        self.infra: set[int] = set()  # the sandbox's own processes but the harness
        # the processes :meth:`end_leftovers` does not hold against the last job's code:
        # :attr:`first_before` once that job's harness said "prepared" (None: it did not)
        self.before_code: set[int] | None = None
        # its processes at the running harness's first "prepared" (:meth:`_prepared`)
        self.first_before: set[int] | None = None
        # those of them ref.py's work started (in :attr:`infra` too): :meth:`end_shared`
        self.ref_procs: set[int] = set()
        # the running harness's threads (host ids) at its first "prepared", before any
        # candidate's code loaded: :meth:`_threads_left`
        self.threads_known: set[int] | None = None
        # its idle OpenMP workers' waits, taken then (workers.teams): :meth:`_threads_left`
        self.team_known: dict[int, teams.Wait] = {}
        self.entered_now: list[str] = []  # the job's: :meth:`_entered`
        # the harness's PID namespace where it has one of its own (found at its start): its
        # processes where no cgroup counts them (:meth:`members`)
        self.pid_ns: str | None = None
        # how the running harness was started: "forked" from a zygote (workers.zygote), or
        # "plain: why" (python -m workers.harness), "adopted" (workers.prestart)
        self.started = ""

    @property
    def running(self) -> bool:
        """Whether the harness's process was started and has not ended."""
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the harness and wait until it has set up the device, in the sandbox
        (workers.isolation) when this host has one. A harness that does not start in the
        sandbox (a device or driver that needs what the sandbox withholds) is started once
        more without it, and :attr:`isolation` says so with the reason: its rows then
        record ``none``; only while no harness of this process has started in the sandbox
        (:meth:`fall_back`). Raises RuntimeError when it does not start either way."""
        try:
            self._start()
        except RuntimeError as e:
            self.fall_back(e)

    def fall_back(self, e: RuntimeError) -> None:
        """:meth:`start`'s second try, once a start in the sandbox failed with ``e``: the
        harness started without the sandbox, :attr:`isolation` saying why. Raises ``e``
        where this host has no sandbox to leave, and RuntimeError when this start fails
        too, or when a harness of this process has already started in the sandbox: the
        sandbox works on this host, and a start that fails there after candidate code has
        run may be that code's doing (a device's restart, a contender's harness), which
        must not buy the next candidate a harness outside it; and when ``e`` says the host
        was short of a resource (workers.isolation ``PASSING``: another device's candidate
        may hold the host's open files for now)."""
        if not self.isolation.isolated:
            raise e
        why = (str(e).splitlines() or [type(e).__name__])[0][:300]
        if _SANDBOX_WORKED:
            raise RuntimeError(f"{why}; not started outside the sandbox, in which a harness "
                               "of this device has run") from None
        if any(x in str(e) for x in isolation.PASSING):  # the host short of it for now
            raise RuntimeError(f"{why}; not started outside the sandbox: the host was short "
                               "of a resource, not of a sandbox") from None
        self.isolation = isolation.Isolation(
            isolation.NONE, why=f"the harness did not start in the sandbox ({why})")
        self._start()

    def _start(self) -> None:
        self.launch()
        self._hello()
        self._worked()

    def _worked(self) -> None:
        """Note that a harness of this process runs in its sandbox (:meth:`fall_back`)."""
        if self.isolation.isolated and not _SANDBOX_WORKED:
            _SANDBOX_WORKED.append(True)

    def launch(self) -> None:
        """Start the harness's process in the sandbox without waiting for it (:meth:`ready`
        waits): started from the process's main thread, it dies with the process that
        started it (workers.reap ``tie_to_parent``) or with its zygote (workers.zygote).
        No fallback outside the sandbox here (:meth:`start` has one). Raises what starting
        the process raises (OSError, subprocess.SubprocessError), once what it made (pipes,
        scratch folder, cgroup) is let go."""
        r_child, w_parent = os.pipe()
        r_parent, w_child = os.pipe()
        try:
            self._spawn(r_child, w_child)
        except BaseException:
            for fd in (r_child, w_parent, r_parent, w_child):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._drop_scratch()
            if self.cgroup is not None:
                self.cgroup.remove()
                self.cgroup = None
            raise
        os.close(r_child)
        os.close(w_child)
        held = self.cgroup is not None and self.cgroup.holds(self.proc.pid)
        if self.cgroup is not None and not held:
            self.limits = "none: the harness could not join its cgroup"
        self.counted = self.cgroup if held else None
        self.w = Connection(w_parent, readable=False)
        self.r = Connection(r_parent, writable=False)

    def _spawn(self, r_child: int, w_child: int) -> None:
        """:meth:`launch`'s process: a new scratch folder and cgroup, then the harness forked
        from the zygote or started the plain way, given the pipe ends ``r_child`` (jobs in)
        and ``w_child`` (answers out)."""
        self._new_scratch()
        self._new_cgroup()
        self._trim_log()
        self.served, self.loaded = 0, set()
        cmd = [sys.executable, "-m", "workers.harness", str(r_child), str(w_child), self.device]
        env = {**self.env, "TMPDIR": self.scratch, **self.isolation.env()}
        with open(self.log, "ab") as logf:
            self.proc = self._forked(env, (r_child, w_child, logf.fileno()))
            if self.proc is None:
                self.proc = subprocess.Popen(
                    self.isolation.wrap(cmd, self.scratch, gpu=self.device != "cpu"),
                    pass_fds=(r_child, w_child),
                    stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
                    start_new_session=True,
                    preexec_fn=cgroup.preexec(self.cgroup, tie_to_parent()))

    def ready(self) -> None:
        """Wait until the harness :meth:`launch` started has set up the device (any
        thread may wait). Raises RuntimeError when it died, said it failed or did not answer
        in ``START_TIMEOUT_S``; it is then killed."""
        self._hello()
        self._worked()

    def _forked(self, env: dict[str, str], fds: tuple[int, int, int]
                ) -> zygote.ForkedProcess | None:
        """The harness forked from this process's zygote (workers.zygote) in the same
        sandbox, with ``env`` and ``fds`` (its pipe ends and log); None where this device or
        isolation starts it the plain way, or the zygote cannot fork it (then so does
        this one: :attr:`started` says which, and why)."""
        why = zygote.why_not(self.device, self.isolation)
        proc = None if why else zygote.spawn(zygote.Request(
            env, self.scratch, self.isolation.isolated, self.isolation.writable,
            self.cgroup.dirs if self.cgroup is not None else ()), fds)
        self.started = "forked" if proc is not None else f"plain: {why or zygote.WHY_NOT}"
        return proc

    def adopt(self, pre: Prestarted) -> bool:
        """Take over the harness ``pre`` that a driver started before Ray
        (workers.prestart) instead of starting one: its connection, its log, its process
        (killed, and its exit read, as this sandbox's own). Returns False, with nothing
        taken over, when it cannot be reached or did not start; the next :meth:`run` then
        starts a harness of this sandbox's own."""
        conns = prestart.connect(pre)
        if conns is None:
            return False
        self.r, self.w = conns
        self.served, self.loaded = 0, set()
        self.proc = prestart.AdoptedProcess(pre)  # type: ignore[assignment]
        self.isolation = pre.isolation
        self.limits = pre.limits
        old_log, self.log = self.log, pre.log
        try:
            self._hello()
        except RuntimeError:
            self.log = old_log
            return False
        if pre.token and not hmac.compare_digest(str(self.hello.get("proof", "")),
                                                 prestart.proof(pre.token)):
            # not the harness the driver started (its token unknown there): let it be
            self.r.close()
            self.w.close()
            self.proc, self.log = None, old_log
            return False
        old_log.unlink(missing_ok=True)
        self.adopted = True
        self.started = "adopted"
        self._worked()
        self.counted = cgroup.Cgroup(pre.cgroup_dirs, pre.limits) if pre.cgroup_dirs else None
        # the sandbox's own processes, known now that its cgroup is (no candidate code has
        # run in it): not what a job left running (:meth:`left_running`)
        self.infra = self.members() - {self.host_pid}
        self.first_before, self.ref_procs, self.threads_known = None, set(), None
        self.team_known = {}
        return True

    def _hello(self) -> None:
        """Wait for the harness's first message (its device set up). Raises RuntimeError."""
        if not self.r.poll(START_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"harness did not start in {START_TIMEOUT_S:.0f} s: {self.tail()}")
        try:
            hello = read_answer(self.r)
        except (EOFError, OSError) as e:  # OSError: a prestarted harness's socket reset
            code = self.kill(ended=not isinstance(e, BadAnswer))
            raise RuntimeError(f"harness died at start ({describe_exit(code)}): {self.tail()}"
                               ) from None
        if not hello.get("ready"):
            self.kill()
            raise RuntimeError(hello.get("error", "harness failed to start"))
        self.hello = hello
        # the harness's own pid is its PID namespace's when isolated: the process to
        # signal from here is the sandbox's first (unshare: the namespace dies with it)
        self.info = {**hello["info"], "isolation": self.isolation.kind,
                     "isolation_why": self.isolation.why, "limits": self.limits}
        self.pid = self.proc.pid if self.isolation.isolated and self.proc else hello.get("pid")
        # the harness's host pid, found before any job (a process a candidate starts could
        # carry the same command line): for its state (_wait) and timing.realtime
        self.host_pid = (self.proc.harness_pid() if isinstance(self.proc, zygote.ForkedProcess)
                         else priority.harness_pid(self.proc.pid) if self.proc else None)
        ns = hold.pid_namespace(self.host_pid) if self.host_pid else None
        self.pid_ns = ns if ns is not None and ns != hold.pid_namespace(os.getpid()) else None
        # the sandbox's own processes (its PID namespace's first, the zygote's child), known
        # before any candidate code runs: not the candidate's in a witness turn's CPU
        self.infra = self.members() - {self.host_pid}
        self.first_before, self.ref_procs, self.threads_known = None, set(), None
        self.team_known = {}
        if self.device == "cpu":  # timing.realtime (workers.priority)
            self.rt_pid = self.host_pid
            self.info["realtime"] = ((priority.why_not(self.rt_pid) or "available")
                                     if self.rt_pid else "the harness's process was not "
                                     "found under /proc")

    def run(self, job: RunJob | dict[str, Any], timeout_s: float,
            prepare_timeout_s: float = PREPARE_TIMEOUT_S,
            turn: Callable[[], None] | None = None,
            plan: witness.Plan | None = None) -> dict[str, Any]:
        """Send ``job`` (a RunJob with its artifact's path, or the harness's job dict);
        return its outcome dict (``status``, ``error`` and figures). ``timeout_s``: the
        job's budget once its inputs and reference outputs are made; making them may take
        ``prepare_timeout_s`` (at least ``timeout_s``), in seconds.

        A timeout or a dead process gives ``status`` ``timeout`` / ``crashed``
        and restarts the harness on the next call. Never raises for a job; raises
        :class:`StartError` when its harness, not running, does not start (the device's
        failure).

        A clock job (workers.harness ``clock``) also gets ``outside_ms``: on the harness's
        first ``{"stage": "clock"}`` message this process sends ``("go", None)``, which
        starts the harness's calls, and times from that send to the arrival of the
        harness's ``{"stage": "clocked"}``, sent once the calls are done and before their
        outputs are checked (the check runs the reference, which is not the calls' time;
        without that message, to the answer's arrival), on its own clock, which candidate
        code in the harness cannot reach (another process, outside its namespaces); a delay
        on either side only lengthens the figure. Each "clocked" is answered with ``("go",
        None)``, which the harness waits for before its checks (a late read then counts no
        check's CPU time); a job whose harness said "clocked" more than once is
        ``suspect`` (:meth:`_clock_answer`). A paced clock job (``clock_paced``) also
        gets ``outside_calls_ms``: each call's from the "go" answering its "call" to its
        "called", and ``outside_calls_cpu_ms``, the CPU time the harness's threads used
        meanwhile, where it can be read (:meth:`_paced_mark`). A figure the answer carries
        under these names is dropped.

        A contest job of a contender in a harness of its own (``turns``: workers.turns)
        says ``{"stage": "turn"}`` before each round: ``turn`` is called (it returns once
        this harness's turn comes, the rivals held still; it raises to abort the contest)
        and the harness then gets "go"; the time spent waiting there is added to the job's
        budgets. Without ``turn`` the "go" is sent at once. Each turn's length, from its
        "go" to the harness's next "turn" or its answer, by this process's clock, is kept
        in :attr:`turn_ms` (workers.turns checks the samples against them).

        Its witness turns (``{"stage": "witness"}``, workers.witness) are turns too, each
        prepared by ``plan`` while the sandbox is held (:meth:`_witness`) and ended by the
        harness's "witnessed" (:meth:`_witnessed`); what was seen is in :attr:`taking`.
        """
        self.end_shared(job)
        self.end_strays()
        if not self.running:
            try:
                self.start()
            except Exception as e:  # noqa: BLE001 -- launch: OSError, SubprocessError too
                raise StartError(f"its harness did not start: {e}") from e
        self.taking = witness.Taking(plan) if plan is not None else None
        self.before_code = None  # until this job's harness says "prepared"
        self.loaded |= _artifacts(job)
        timing = (job.payload() if isinstance(job, RunJob) else job).get("timing") or {}
        # sweep.yaml timing.realtime: the harness's thread under SCHED_FIFO for this job
        with priority.realtime(self.rt_pid if timing.get("realtime") else None):
            return self._exchange(job, timeout_s, prepare_timeout_s, turn)

    def _exchange(self, job: RunJob | dict[str, Any], timeout_s: float,
                  prepare_timeout_s: float, turn: Callable[[], None] | None = None
                  ) -> dict[str, Any]:
        """The body of :meth:`run`: send ``job``, read the harness's messages until its
        answer, within the budgets."""
        pos = self.log.stat().st_size
        t0 = base = time.perf_counter()
        # the job's own budget starts at "prepared" (making inputs and outputs is kopt's work)
        deadline = t0 + max(timeout_s, prepare_timeout_s)
        limit = deadline + OWN_LIMIT * timeout_s + GRACE_S  # whatever the messages say
        prepared = False  # the harness said it made the inputs and reference outputs
        body = job.payload() if isinstance(job, RunJob) else job
        clock = _ClockMarks() if body.get("clock_calls") else None  # a clock job's
        timing_ref_job = bool(body.get("time_reference"))
        self.timing_ref = ""  # ref.py's function being timed (time_reference jobs)
        self.turn_ms, turn_at, self.entered_now = [], None, []
        self._send(("run", job))
        while True:
            try:
                ready = self._wait(deadline)
            except (BrokenPipeError, OSError):
                ready = True
            if ready is None:
                return {**self._stopped(), "wall_s": time.perf_counter() - t0}
            if not ready:
                return {**self._timed_out(job, prepared, deadline - t0),
                        "wall_s": time.perf_counter() - t0}
            try:
                res = read_answer(self.r)
            except (EOFError, OSError) as e:  # BadAnswer: alive, but not to be believed
                return {**self._died(job, pos, prepared, not isinstance(e, BadAnswer)),
                        "wall_s": time.perf_counter() - t0}
            if not res.get("progress"):
                self._turn_ended(turn_at)  # the last turn ends with the answer
                break
            self.entered_now += _entered_said(res)  # the job's code entered Python
            # never past ``limit``: candidate code can write progress messages too
            deadline = min(self._extend(res, deadline, timeout_s, base), limit)
            if res.get("stage") == "prepared":
                if res.get("first") and self.first_before is not None:
                    return {**self._first_again(), "wall_s": time.perf_counter() - t0}
                base, prepared = time.perf_counter(), self._prepared(prepared, res)
            if res.get("stage") in ("turn", "witness"):  # a rival's sample is not its time
                waited, turn_at = self._turn(turn, turn_at, res)
                deadline, limit, base = deadline + waited, limit + waited, base + waited
            elif res.get("stage") == "witnessed":
                self._witnessed(res)
            if clock is not None:
                self._clock_mark(clock, res.get("stage"))
            if timing_ref_job:
                # only a reference-timing job times ref.py's function (a candidate could
                # send this to have its own crash blamed on ref.py)
                self.timing_ref = str(res.get("impl") or self.timing_ref)
        if clock is not None:
            res = self._clock_answer(res, clock, bool(body.get("clock_paced")))
        elif (res.get("status") == Status.OK or not res.get("fatal")) and not self._pinged():
            # (an `ok` answer that ends the harness is pinged too: candidate code could write
            # one with "fatal" to pass unpinged)
            res = self._unpinged()
        return self._answered(_clock_broken(res, job), t0, pos, clock)

    def _first_again(self) -> dict[str, Any]:
        """The outcome of a job whose harness said its first "prepared" again (workers.harness
        ``Harness.prepared``: it says so once, before it ever loads candidate code, and
        then waits for a "go" no later job gets): code in its process reset the harness's
        state (a red-team candidate set ``told_prepared`` back through Python's C API, and
        the next candidate's job waited out its whole budget). ``crashed``, the harness
        killed: :meth:`run_retrying` runs the job again in a fresh harness."""
        return self._killed(
            "the harness said it was first prepared a second time: code in its process "
            "changed its state (a harness says so once, before any candidate's code loads); "
            "killed")

    def _killed(self, why: str) -> dict[str, Any]:
        """The harness killed (the next job restarts it, counted in :attr:`restarts`) and
        the job's outcome: ``crashed``, for ``why``."""
        self.end()
        return {"status": Status.CRASHED, "error": why}

    def _unpinged(self) -> dict[str, Any]:
        """The outcome of a job whose answer was not followed by the harness's pong
        (:meth:`_pinged`): ``crashed``, the harness killed (the next job restarts it)."""
        return self._killed(
            "the harness did not answer a ping after its answer: the answer was not its "
            "own (code in its process wrote it) or the harness ended right after it")

    def _turn(self, turn: Callable[[], None] | None, turn_at: float | None,
              msg: dict[str, Any]) -> tuple[float, float | None]:
        """A contest's "turn" (or "witness") message ``msg``: the last turn's length kept
        (:meth:`_turn_ended`), the wait for this harness's next turn (``turn``; none: at
        once), a witness turn's preparation (:meth:`_witness`), and its "go". Returns the
        wait (s) and when the turn started (``time.perf_counter``, taken before the "go": a
        sample starts after it; None for a witness turn, which is not a round's)."""
        self._turn_ended(turn_at)
        waited = _waited(turn)
        at = time.perf_counter()
        self._send((self._witness(msg) if msg.get("stage") == "witness" else "go", None))
        return waited, None if msg.get("stage") == "witness" else at

    def _witness(self, msg: dict[str, Any]) -> str:
        """A witness turn asked for (workers.witness): "enough" when no more are to be
        taken (``Taking.more``), else, with the sandbox held, the plan's input set copied
        into the buffers ``msg`` names and the CPU times read, and "go". One asked for
        while another is open counts as stray; without a plan: "go", nothing copied."""
        t = self.taking
        if t is None:
            return "go"
        if t.said is not None:
            t.stray += 1
            t.said = None
        if not t.more(msg):
            return "enough"
        held = self.pause()
        try:
            # the CPU times first: a GPU turn's clock starts with the copies (its kernels
            # are not held), and a snapshot's cost grows with the sandbox's threads
            k, t.cpu0 = len(t.records), self._cpu_snapshot()
            p0 = time.perf_counter()
            t.why = t.plan.put(self.host_pid or 0, msg, k) if self.host_pid else \
                "the harness's host pid is not known"
            t.put_ms = (time.perf_counter() - p0) * 1e3
            t.said = msg
        finally:
            hold.release(held)
        t.go_at = t.plan.started or time.perf_counter()
        return "go"

    def _witnessed(self, msg: dict[str, Any]) -> None:
        """A witness turn ends (the harness's "witnessed" ``msg``): its outputs read at
        once; then, with the sandbox held, its CPU times read and its outputs, found
        unchanged, copied into the judge's memory."""
        t = self.taking
        if t is None:
            return
        wall_ms = (time.perf_counter() - t.go_at) * 1e3
        # the outputs as the call left them, read before the hold: outputs still written
        # after that change before it. The CPU times are read once held: a running
        # thread's are brought up to date only at a tick or when it stops (red-team round
        # 19: a helper kept spinning after its work hid 0.17 ms of it in most turns)
        # and how long the read waited (workers.witness ``Plan.early``)
        early, read_ms = (b"", 0.0) if t.said is None or t.why else t.plan.early(
            self.host_pid or 0, t.said, len(t.records))
        held = self.pause()
        try:
            cpu1 = self._cpu_snapshot()
            why = "" if t.said is None or t.why else t.plan.take(
                self.host_pid or 0, t.said, len(t.records), early)
            witness.ended(t, msg, cpu1, why, wall_ms, read_ms, t.plan.after())
        finally:
            hold.release(held)

    def _turn_ended(self, turn_at: float | None) -> None:
        """The turn started at ``turn_at`` (none running: None) ends now: its ms kept in
        :attr:`turn_ms`."""
        if turn_at is not None:
            self.turn_ms.append((time.perf_counter() - turn_at) * 1e3)

    def _pinged(self) -> bool:
        """Whether the harness answers a ping with a random value as its next message,
        within :data:`PING_S`: then the answer just read was its own, sent once its job was
        done. Candidate code can write the answer pipe: an answer it wrote mid-job was
        taken as the job's, and the harness's real one, read as the next job's, framed it
        (red-team round 10: an honest contender dropped as `crashed`)."""
        nonce = os.urandom(8).hex()
        try:
            self.w.send(("ping", nonce))
            return bool(self.r.poll(PING_S)) and read_answer(self.r).get("pong") == nonce
        except (EOFError, OSError):
            return False

    def _clock_answer(self, res: dict[str, Any], clock: _ClockMarks, paced: bool = False
                      ) -> dict[str, Any]:
        """A clock job's answer ``res``, ``suspect`` when it says ``ok`` but its harness did
        not say "clocked" exactly once, or does not answer a ping with the same random
        value as its next message within :data:`PING_S` (its harness killed then, to start
        afresh): candidate code can write this pipe (its file descriptor is on the
        harness's command line), and an answer it wrote there in the middle of the block,
        with or without a "clocked", stopped the outside clock early; a red-team candidate
        cleared a 1/100 clock so, 5 of 5, and one that exited right after 2 of 2. The real
        harness, still in its block or gone, does not answer the ping. A candidate that
        also reads this pipe's messages and answers in its harness's stead is not caught
        (workers.harness: "What is not caught")."""
        if res.get("status") != Status.OK:
            return res
        if clock.clocked != 1:
            return {**res, "status": Status.SUSPECT,
                    "error": f"its harness said its calls were done {clock.clocked} times in "
                             "one block (once is the harness's own): code in its process "
                             "spoke for it"}
        if paced and (clock.stray or len(clock.calls) != res.get("calls")):
            return {**res, "status": Status.SUSPECT,
                    "error": f"its harness said a call began or ended out of turn "
                             f"{clock.stray} times, and {len(clock.calls)} calls were timed "
                             f"of the {res.get('calls')} it made: code in its process "
                             "spoke for it"}
        if self._pinged():
            return res
        self.kill()
        return {**res, "status": Status.SUSPECT,
                "error": "its harness did not answer a ping after the block's answer: the "
                         "answer was not the harness's own"}

    def _clock_mark(self, clock: _ClockMarks, stage: Any) -> None:
        """A clock job's progress message ``stage``: the first "clock" starts the outside
        clock (time and CPU time) and is answered "go", which starts the calls; the first
        "clocked" after it stops it; every "clocked" is counted and answered "go", which the
        harness waits for before its checks."""
        if stage in ("call", "called"):
            self._paced_mark(clock, stage)  # answers "go" itself
            return
        if stage == "clock" and clock.t0 is None:
            clock.cpu0, clock.t0 = self._cpu_ns(), time.perf_counter()
        elif stage == "clocked" and clock.t0 is not None:
            if clock.end is None:
                clock.end = (time.perf_counter(), self._cpu_ns())
            clock.clocked += 1
        else:
            return
        self._go()

    def _prepared(self, before: bool, msg: dict[str, Any]) -> bool:
        """A job's "prepared" message ``msg`` (its candidate code loads after it). The
        running harness's first (workers.harness ``Harness.prepared``: ``first``, sent
        before it ever loaded a candidate's code, and waiting for "go"): the processes this
        sandbox holds then besides its harness (:attr:`first_before`: ref.py's work started
        them, e.g. torch.compile's worker pool) join :attr:`infra`, then "go"; once per
        harness (candidate code can write messages too: a later ``first`` ends the job,
        :meth:`_first_again`).
        Candidate code cannot write such processes' memory: the filter stops ``ptrace``
        and ``process_vm_writev`` (workers.seccomp) and the jail's ``/proc`` is read-only
        but for the harness's own ``/proc/PID`` (workers.jail ``own_proc``), so their
        ``/proc/PID/mem`` opens for reading only. It can drive them through what the
        harness's process holds of them (a pool's pipes), so they live only until another
        candidate's code comes (:meth:`end_shared`). The first of the job
        (``before`` False) sets :attr:`before_code` to :attr:`first_before`, not to the
        processes at this message: one a candidate's thread started between jobs, or while
        this job's inputs were made, is no process of ref.py's (a red-team review had one
        pass so). Returns True (the job is prepared)."""
        if msg.get("first") and self.first_before is None:
            self.first_before = self.members()
            self.threads_known = self.threads()
            # its OpenMP teams' workers, each where it waits when idle (workers.teams)
            self.team_known = teams.team_waits(self.host_pid) if self.host_pid else {}
            if self.isolation.isolated:  # its /proc read-only but the harness's own
                self.ref_procs = self.first_before - self.infra - {self.host_pid or 0}
                self.infra |= self.ref_procs
            self._go()
        if not before:
            if self.first_before is None:
                self.first_before = self.members()
            self.before_code = self.first_before
        return True

    def end_shared(self, job: RunJob | dict[str, Any]) -> bool:
        """Before ``job``: end the running harness (the job starts a fresh one) where
        processes ref.py's work started live in its sandbox (:attr:`ref_procs`) and a
        candidate's code other than ``job``'s has loaded there (:attr:`loaded`): that code
        could drive them (a red-team candidate ran its own code in ref.py's multiprocessing
        pool worker through the pool's pipe, which the harness holds; the worker, the
        sandbox's own, then spun beside every later candidate's job in that harness: an
        honest one `ok` 10x slower, and the closing's outside clock named it ``suspect``).
        Whether it did. Never raises."""
        if not self.running or not self.ref_procs or not self.loaded - _artifacts(job):
            return False
        if not self.ref_procs & self.members():  # (a scan of /proc where no cgroup counts)
            return False
        self.end()
        return True

    def end_strays(self) -> bool:
        """Before a job: end the running harness (the job starts a fresh one) where its
        sandbox holds processes that were not there at its first "prepared"
        (:attr:`first_before`) and are not its own (:meth:`left_running`): started between
        jobs by a thread a candidate's code left there (a red-team candidate's child, forked
        once its job was over, ran beside the next candidate's job); or where a process of
        its own was stopped (:meth:`_own_stopped`). A harness that loads no candidate's code
        (:attr:`loads_code` False) takes those it holds as its own instead: ended, it lost
        the input sets a contest's witness turns had made there. Whether it did. Never
        raises."""
        if not self.running:
            return False
        left = self.left_running()
        if not self.loads_code:
            self.infra |= set(left)
            left = []
        if not [p for p in left if p not in (self.first_before or set())] \
                and not self._own_stopped():
            return False
        self.end()
        return True

    def _own_stopped(self) -> bool:
        """Whether a process of this sandbox's own besides its harness (:attr:`infra`:
        those ref.py's work started among them) is stopped (state "T" or "t"): only a
        candidate's code stops one outside a hold (a red-team candidate stopped ref.py's
        multiprocessing pool worker with SIGSTOP, and the next honest job's reference()
        waited on it until the preparation's time limit). Never raises."""
        return any(hold.state(p) in ("T", "t") for p in self.infra)

    def _go(self) -> None:
        """Send the harness a clock job's (or a contest's turn's) "go"."""
        self._send(("go", None))

    def _send(self, msg: tuple[str, Any]) -> None:
        """Send the harness ``msg``; a harness that died is left to its answer's read to say
        so."""
        try:
            self.w.send(msg)
        except (BrokenPipeError, OSError):
            pass

    def _paced_mark(self, clock: _ClockMarks, stage: str) -> None:
        """A paced clock job's "call" (its clock starts, then "go") or "called" (its clock
        stops); one out of turn (a "call" while one runs, a "called"
        with none, either outside the block) is counted in ``stray`` and answered "go"
        all the same (the job's answer is then ``suspect``: :meth:`_clock_answer`)."""
        if stage == "call" and clock.pending is None and clock.t0 is not None \
                and clock.end is None:
            clock.pending = (time.perf_counter(), self._thread_group_ns())
        elif stage == "called" and clock.pending is not None:
            t1, cpu1 = time.perf_counter(), self._thread_group_ns()
            (t0, cpu0), clock.pending = clock.pending, None
            clock.calls.append(((t1 - t0) * 1e3, None if cpu0 is None or cpu1 is None
                                else (cpu1 - cpu0) / 1e6))
        else:
            clock.stray += 1
        self._go()

    def _answered(self, res: dict[str, Any], t0: float, pos: int,
                  clock: _ClockMarks | None = None) -> dict[str, Any]:
        """The harness's answer ``res`` with this process's figures (``wall_s`` since
        ``t0``; a clock job's ``outside_ms`` from ``clock``'s start and, where the
        sandbox's CPU time is counted, ``outside_cpu_ms``, each to its end where the harness
        said "clocked", else to now),
        what the kernel printed (the log from ``pos``) in a failure's ``error``, and the harness
        killed when it said ``fatal``."""
        res["wall_s"] = time.perf_counter() - t0
        self.served += 1
        # this process's figures and words alone, never the harness's (red-team round 17: a
        # contender wrote {"unstarted": true} to its answer pipe, and its contest stopped as
        # the device's failure, its honest rival never measured)
        for k in PACED_KEYS + ("outside_ms", "outside_cpu_ms", "unstarted", "actor"):
            res.pop(k, None)
        if clock is not None and clock.calls:
            res["outside_calls_ms"] = [ms for ms, _ in clock.calls]
            if all(cpu is not None for _, cpu in clock.calls):
                res["outside_calls_cpu_ms"] = [cpu for _, cpu in clock.calls]
        if clock is not None and clock.t0 is not None:
            t1, cpu1 = clock.end or (time.perf_counter(), self._cpu_ns())
            res["outside_ms"] = (t1 - clock.t0) * 1e3
            if clock.cpu0 is not None and cpu1 is not None:
                res["outside_cpu_ms"] = (cpu1 - clock.cpu0) / 1e6
        if res.get("status") not in (None, Status.OK):  # what the kernel's code said, e.g. why
            said = self.tail(pos, 500)             # solve() refused the sizes
            if said:
                res["error"] = "; ".join(x for x in (res.get("error"),
                                                     f"the kernel printed: {said}") if x)
        self._threads_left(res)
        self._entered(res)
        if res.pop("fatal", False):
            self.end()
        return res

    def _entered(self, res: dict[str, Any]) -> None:
        """The harness ends after a job whose candidate code entered its interpreter
        during its calls (workers.audit's events: those the harness sent as they were
        raised, :attr:`entered_now`, and those its answer lists): ``res`` made ``fatal``,
        so that nothing that code did in the process reaches a later job (a collector
        callback, a thread's state, an object rebound: workers.harness ``STATES`` and
        ``watched`` list only what is known), its ``error`` saying so (:data:`ENTERED`, the
        events), ``entered`` set (:meth:`run_retrying` runs a job that met one after another
        candidate's code again in a fresh harness). Its status and figures stay: they are
        left to the closing's outside clock. Never raises."""
        seen = list(dict.fromkeys(self.entered_now + _entered_said(res)))[:8]
        if not seen:
            res.pop("entered", None)
            return
        res["entered"], res["fatal"] = seen, True
        res["error"] = "; ".join(x for x in (res.get("error"), (
            f"{ENTERED} during its calls ({', '.join(seen[:4])}): the harness ended after "
            "the job, its figures left to the closing's outside clock")) if x)

    def threads(self) -> set[int]:
        """The running harness process's threads (host thread ids, from
        ``/proc/PID/task``, read by this process: outside the candidate's reach); empty when
        none runs or they cannot be read. Never raises."""
        if not self.running or not self.host_pid:
            return set()
        try:
            return {int(t) for t in os.listdir(f"/proc/{self.host_pid}/task")}
        except (OSError, ValueError):
            return set()

    def _threads_left(self, res: dict[str, Any]) -> None:
        """The harness ends after a job (``res`` made ``fatal``, the next job starts a fresh
        one) when its process runs a thread it did not run at its first "prepared"
        (:attr:`threads_known`), before any candidate code loaded: one the job's code left
        there. A native thread left running in a shared harness reached past every check
        inside it (a red-team review, CPU, 2026-12-07: one spinning in C took a core from
        a later OpenMP job, 2x; one holding the interpreter's lock with no Python frame made
        a later 0.18 ms call 4.1 ms; one that started a Python thread while ref.py's code
        ran, 5.3 ms; each `ok`, unnamed); this process reads the list, which code in the
        harness cannot change. ``res``'s ``error`` says so (:data:`THREADS_LEFT`, how many);
        its status and figures stay. With ``KOPT_DEBUG_THREADS`` set, each such thread's
        name (``/proc/PID/task/TID/comm``) is printed to stderr. Never raises."""
        if self.threads_known is None or not self.loads_code:
            return
        new = self.threads() - self.threads_known
        busy = teams.strays(self.host_pid, self.team_known) if self.team_known and \
            self.host_pid else []
        if busy:
            res["fatal"] = True
            res["error"] = "; ".join(x for x in (res.get("error"), (
                f"{TEAM_LEFT} ({len(busy)} not back in its idle wait within "
                f"{teams.SETTLE_S:g} s): the harness ended after the job, the next job runs "
                "in a fresh one")) if x)
        if not new:
            return
        res["fatal"] = True
        res["error"] = "; ".join(x for x in (res.get("error"), (
            f"{THREADS_LEFT} ({len(new)}): the harness ended after the job, the next "
            "job runs in a fresh one")) if x)
        if os.environ.get("KOPT_DEBUG_THREADS"):
            names = []
            for t in sorted(new):
                try:
                    names.append(Path(f"/proc/{self.host_pid}/task/{t}/comm").read_text().strip())
                except OSError:
                    names.append("?")
            print(f"kopt sandbox: {len(new)} threads left: {names} after "
                  f"{res.get('status')} {sorted(self.loaded)[:3]}", file=sys.stderr, flush=True)

    def pause(self) -> hold.Held:
        """Hold every process of this sandbox still (workers.hold ``hold``: its harness,
        threads and what a candidate left in its namespace or cgroup; its cgroup frozen
        where the host has a freezer) while another harness is timed; give the result to
        workers.hold ``release``. Nothing held when no harness runs. Never raises."""
        if not self.running:
            return hold.Held()
        return hold.hold(self.proc.pid, self.counted.dirs if self.counted else ())

    def members(self) -> set[int]:
        """This sandbox's processes (host pids): its cgroup's (:attr:`counted`), else, where
        no cgroup counts them (the H100 hosts lent kopt none), those in its harness's PID
        namespace (:attr:`pid_ns`, workers.hold ``in_namespace``: a scan of ``/proc``);
        empty where neither is known (no namespaces). Never raises."""
        if self.counted is not None:
            return set(hold.in_cgroup(self.counted.dirs))
        if self.pid_ns is not None:
            return set(hold.in_namespace(self.pid_ns, self.infra | {self.host_pid or 0}))
        return set()

    def left_running(self) -> list[int]:
        """The processes of this sandbox (:meth:`members`) besides its harness and the
        sandbox's own (:attr:`infra`): what candidate code started and left running
        (threads are not processes: an honest kernel's OpenMP team is none of these). []
        when no harness runs or neither a cgroup nor a PID namespace tells its processes.
        Never raises."""
        if not self.running:
            return []
        return sorted(self.members() - self.infra - {self.host_pid or 0})

    def end_leftovers(self) -> list[int]:
        """End the harness (the next job starts a fresh one) where the last job's code left
        processes running in its sandbox (:meth:`left_running`), so that they cannot slow
        the next candidate's job (a red-team helper's spinning children made the next
        honest job 2.6x slower, both `ok`). Returns those of them that are not ref.py's
        (:attr:`before_code`: not there at the harness's first "prepared"), which the device
        actor holds against the last job's candidate (workers.device_actor ``_attributed``),
        [] where none was left or that is not known. Never raises."""
        left = self.left_running()
        if not left:
            return []
        before = self.before_code
        self.end()
        return [] if before is None else [p for p in left if p not in before]

    def _thread_group_ns(self) -> int | None:
        """CPU time (ns) every thread of the harness's process has used, exited ones too,
        to this moment (the kernel's ``CLOCK_PROCESS_CPUTIME_ID`` of another process:
        ``clock_getcpuclockid(3)``, its clock id built as the kernel's
        ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``), precise where a cgroup's count
        moved in 4 ms scheduler ticks here; None where it cannot be read (no host pid,
        the process gone). A process sharing its memory outside the thread group is
        refused by the filter (workers.seccomp ``CLONE_SHARED``); a child of its own
        memory is not counted, and cannot write the harness's outputs."""
        if not self.host_pid:
            return None
        try:
            return time.clock_gettime_ns(((~self.host_pid) << 3) | 2)
        except (OSError, OverflowError):
            return None

    def _cpu_ns(self) -> int | None:
        """CPU time every process of this sandbox used so far (ns), from its cgroup
        (workers.cgroup ``cpu_ns``: the kernel's count, which code in the sandbox cannot
        change), on a CPU device of one thread (``OMP_NUM_THREADS=1``, the default: its
        calls' CPU time is their time); None on a GPU backend (a call's time there is the
        device's: a host thread that sleeps while the GPU works uses no CPU), on a CPU
        device of several threads, or where it is not counted."""
        if self.device != "cpu" or self.counted is None or self.env.get(
                "OMP_NUM_THREADS") != "1":
            return None
        return self.counted.cpu_ns()

    def _cpu_snapshot(self) -> witness.Snapshot:
        """The CPU times of this sandbox (workers.witness ``Snapshot``): every thread of the
        harness and of the processes its candidates started (its cgroup's, less
        :attr:`infra`), and its cgroup's total however many threads it runs; where no
        cgroup counts it, the harness process's own total, threads that ended included
        (:meth:`_thread_group_ns`): on a host without one (an H100 host, 2026-12-06) a
        helper thread that did a witness call's work and ended before the call returned
        was gone from ``/proc`` when its CPU was read, and the forger was `ok` (red-team
        round 19's exiting helper). A process the candidate forks is counted only by a
        cgroup (None where neither can be read)."""
        pids = set(hold.in_cgroup(self.counted.dirs) if self.counted is not None else ())
        main = self.host_pid or 0
        pids -= self.infra
        return witness.Snapshot(witness.threads_cpu_ns(sorted({main, *pids})), main,
                                self.counted.cpu_ns() if self.counted is not None
                                else self._thread_group_ns())

    def run_retrying(self, job: RunJob | dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """:meth:`run`, with a job run once more in a fresh harness before its verdict is
        final when it ``crashed``, was named ``replayed``, or failed in any way in a harness
        that had been sent another artifact's job (:attr:`loaded`): code a candidate left
        there cannot frame the next one, whether it crashes the harness (``abort()`` from a
        thread, a fault) or rewrites the next candidate's code (a red-team framer's thread
        wrote a jump over each later ``solve`` to a wrapper slow on new values: `replayed`;
        one that writes a wrong output would make it ``wrong_result``). A replayer keeps
        nothing across the restart and is named so again. The replay verdict's permutation
        test (workers.replay) also assumes load lands on every call alike: beside two test
        suites at once an honest one-thread vector add had all 8 of its calls on new values
        slow, 10 of its 46 samples (about 4e-5 where load lands alike; cause not found:
        beside CPU and memory hogs the calls on new values were as fast as the seen calls
        next to them, bench/honest_under_load.py). A failing candidate after another's then
        costs a second run (and a harness start, with its inputs made again). The retried
        job's outcome is the job's; when it differs, its ``error`` says how the first run
        ended. A job during which the harness found its watch or process state changed
        (workers.harness ``_rewritten``: ``changed``), or its interpreter entered during
        the job's calls (``_entered``: ``entered``), after another artifact's job is run
        again too, whatever its status: a native thread code left there that acts later
        (one that lowers the harness thread's priority once the next library is mapped)
        would otherwise have that job blamed, with the figures it slowed. Never raises for
        a job; raises :class:`StartError` (from :meth:`run`) when a harness does not start,
        the device's failure."""
        others = self.running and bool(self.loaded - _artifacts(job))
        res = self.run(job, timeout_s)
        status = res.get("status")
        framed = others and bool(res.get("changed") or res.get("entered"))
        if not framed and (status == Status.OK or (
                status not in (Status.CRASHED, Status.REPLAYED) and not others)):
            return res
        first = str(res.get("error") or "")[:300]
        if self.running:  # a crash's harness is gone
            self.end()
        again = self.run(job, timeout_s)
        if again.get("status") == Status.REPLAYED and status != Status.REPLAYED:
            again = self._confirmed(job, timeout_s, again)
        if framed or again.get("status") != status:
            how = ((f"the first run, after another candidate's job, found the harness's "
                    f"{', '.join(res['changed'][:4])} changed") if res.get("changed") else
                   ("the first run, after another candidate's job, saw the harness's "
                    f"interpreter entered ({', '.join(res['entered'][:4])})")
                   ) if framed else {
                Status.CRASHED: "the first run crashed",
                Status.REPLAYED: "the first run was named replayed"}.get(
                    status, f"the first run was {status}, after another candidate's job")
            again["error"] = "; ".join(x for x in (again.get("error"), (
                f"retried in a fresh harness: {how} ({first})")) if x)
        return again

    def _confirmed(self, job: RunJob | dict[str, Any], timeout_s: float,
                   replayed: dict[str, Any]) -> dict[str, Any]:
        """:meth:`run_retrying`'s second run of ``job`` named it ``replayed`` where its
        first was not (a crash, a change, a failure after another candidate's job): a
        replay verdict is final only when a run in a fresh harness agrees, as a first
        run's is (on this project's 2-core machine under CI's load, an honest 0.03 ms
        vector add's retry after a crash had its 4 calls on new values at 0.1 ms and more).
        Returns the third run's outcome, its ``error`` saying what the second said when
        they differ. Raises :class:`StartError` as :meth:`run` does."""
        said = str(replayed.get("error") or "")[:300]
        if self.running:
            self.end()
        third = self.run(job, timeout_s)
        if third.get("status") != Status.REPLAYED:
            third["error"] = "; ".join(x for x in (third.get("error"), (
                f"run a third time: the second run was named replayed ({said})")) if x)
        return third

    def _wait(self, deadline: float) -> bool | None:
        """Wait for the harness's next message until ``deadline`` (``time.perf_counter``):
        True when one came, False at the deadline, None as soon as the harness, or a
        process of the sandbox's own (:meth:`_own_stopped`: one ref.py's work waits on), is
        found stopped (looked at every :data:`STOP_CHECK_S`): a stopped process never
        answers, and code a candidate left in it can stop it (``kill(getpid(), SIGSTOP)``
        from a thread, or a timer's SIGSTOP) while the next job runs; red-team round 9 had
        that job, or its ref.py, called a hang. Raises OSError where the pipe fails."""
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            if self.r.poll(min(left, STOP_CHECK_S)):
                return True
            if hold.state(self.host_pid) == "T" or self._own_stopped():
                return None

    def _stopped(self) -> dict[str, Any]:
        """The outcome of a job whose harness was found stopped (killed; the next job
        restarts it): ``crashed``, which :meth:`run_retrying` runs again in a fresh harness."""
        return self._killed(
            "the harness, or a process of its sandbox that ref.py started, was stopped "
            "(SIGSTOP: code a candidate left there can send it) and would not answer; killed")

    def _timed_out(self, job: RunJob | dict[str, Any], prepared: bool, waited_s: float
                   ) -> dict[str, Any]:
        """The outcome of a job with no answer in time (the harness is killed; the next
        job restarts it): ``timeout``, naming ref.py when its inputs()/reference() were
        still running (no candidate code had been called)."""
        self.end()
        ref = (job.payload() if isinstance(job, RunJob) else job).get("reference")
        if not prepared and ref:
            return {"status": Status.TIMEOUT, "error": (
                f"{ref}: inputs()/reference() did not return within {waited_s:.0f} s, "
                "before any candidate code was called (`kopt preflight` allows them "
                f"timing.timeout_s, a sweep {PREPARE_TIMEOUT_S:.0f} s): an endless loop or a "
                "wait? fix them, or raise timing.timeout_s in sweep.yaml if they are only "
                "slow")}
        return {"status": Status.TIMEOUT, "error": f"no answer within {waited_s:.0f} s "
                "(hang, endless loop, or one call longer than timing.timeout_s); "
                "harness killed and restarted"}

    def _died(self, job: RunJob | dict[str, Any], pos: int, prepared: bool,
              ended: bool = True) -> dict[str, Any]:
        """The outcome of a job whose harness process died (it is reaped; the next job
        restarts it): ``crashed``; or ``error`` naming ref.py when it died before the
        inputs and reference outputs were made in a harness that had answered no job before
        (ref.py's code ended the process, e.g. ``os._exit``: no candidate code had been
        called), but ``crashed`` when earlier jobs ran there (a thread or timer a candidate
        left behind ended it while ref.py ran: red-team round 8 framed an honest job's
        ref.py so; :meth:`run_retrying` runs it again in a fresh harness, where ref.py is
        blamed if it dies again); ``crashed`` naming ref.py's ``contender()`` (or
        ``reference()``) when it died while that was timed."""
        served = self.served
        code = self.end(ended=ended)
        said = self.tail(pos)
        ref = (job.payload() if isinstance(job, RunJob) else job).get("reference")
        if not prepared and ref and served:
            return {"status": Status.CRASHED, "error": (
                f"harness died: {describe_exit(code)} while {ref}'s inputs()/reference() ran, "
                f"in a harness that had run {served} job(s) before (what their code left "
                "there can end it)" + (f"; it printed: {said}" if said else ""))}
        if not prepared and ref:
            return {"status": Status.ERROR, "error": (
                f"{ref}: the harness process ended ({describe_exit(code)}) while its "
                "inputs()/reference() ran, before any candidate code was called; they must "
                "return (no os._exit, sys.exit or abort): fix them"
                + (f"; it printed: {said}" if said else ""))}
        if self.timing_ref and ref:  # no candidate code: ref.py's timed function did it
            return {"status": Status.CRASHED, "error": (
                f"{ref}: {self.timing_ref}() ended the process timing it ({describe_exit(code)}"
                "); it must return its result (no os._exit, sys.exit or abort): fix it"
                + (f"; it printed: {said}" if said else ""))}
        return {"status": Status.CRASHED,
                "error": f"harness died: {describe_exit(code)}. {said}".strip()}

    @staticmethod
    def _extend(msg: dict[str, Any], deadline: float, timeout_s: float, base: float) -> float:
        """The job's new deadline after a progress message from the harness: the budget
        ``timeout_s`` starts again once the inputs are made (``prepared``: making them is
        kopt's work, not the candidate's); once a call's time is known (``called``), the
        harness fits its work into that budget itself, and the sandbox waits a grace of
        ``GRACE_S`` plus two calls beyond it before calling the job a hang; the harness's
        own work in the job (``own``: the checks' comparisons, draws of held-back sets) is added
        to it, as the harness adds it to its budget (workers.harness ``Harness.own``)."""
        now = time.perf_counter()
        if msg.get("stage") == "prepared":
            return now + timeout_s
        if msg.get("stage") == "own":
            return deadline + _seconds(msg.get("s"), OWN_LIMIT * timeout_s)
        if msg.get("stage") == "called":
            call_s = _seconds(msg.get("call_ms"), 1000.0 * timeout_s) / 1000.0
            return max(deadline, base + timeout_s + GRACE_S + 2.0 * call_s)
        return deadline

    def tail(self, pos: int = 0, n: int = 1500) -> str:
        """The last ``n`` characters the harness printed since byte ``pos`` of its log."""
        try:
            with open(self.log, "rb") as f:
                f.seek(pos)
                text = f.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return text[-n:]

    def end(self, ended: bool = False) -> int | None:
        """:meth:`kill` the harness for what ran in it, counted in :attr:`restarts` (the
        next job starts a fresh one); returns its exit code as :meth:`kill` does."""
        code = self.kill(ended=ended)
        self.restarts += 1
        return code

    def kill(self, ended: bool = False) -> int | None:
        """Kill the harness (its whole process group); returns its exit code. ``ended``:
        its connection closed (it died), so it is given up to ``EXIT_WAIT_S`` to exit
        first: a sandboxed harness's exit reaches here through its sandbox's first
        process, a moment later, and a SIGKILL sent in that moment would hide the signal
        that killed the harness."""
        if self.proc is None:
            return None
        # where no cgroup counts the sandbox, its processes now, to wait for once killed
        ns_pids = self.members() if self.counted is None and self.pid_ns is not None else set()
        p, self.proc, self.pid = self.proc, None, None
        if ended:
            try:
                p.wait(timeout=EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
            for c in (self.counted, self.cgroup):
                if c is not None:  # held frozen (workers.hold): a v1 frozen process dies
                    c.thaw()  # only once thawed
        try:
            code = isolation.decode_exit(p.wait(timeout=30), self.isolation)
        except subprocess.TimeoutExpired:
            code = None
        self._namespace_ended(ns_pids | (set(hold.in_namespace(self.pid_ns, set()))
                                         if ns_pids else set()))
        self._drop_scratch()
        self.counted, self.pid_ns = None, None
        if self.cgroup is not None:  # its processes are gone with its sandbox's first
            self.cgroup.remove()
            self.cgroup = None
        for c in ("w", "r"):
            conn = getattr(self, c, None)
            if conn is not None:
                conn.close()
                setattr(self, c, None)
        return code

    def _namespace_ended(self, pids: set[int]) -> None:
        """Wait (up to :data:`NS_EXIT_WAIT_S`) until none of ``pids``, the killed harness's
        sandbox's processes where no cgroup counts them (found before the kill, and after
        it by its PID namespace), holds anything (workers.hold ``alive``): the kernel kills
        every process of a namespace whose first one died, but a killed process keeps what
        it held until its exit is done, and its namespace cannot be read meanwhile; one left
        over must not be beside the next job or turn."""
        end = time.perf_counter() + NS_EXIT_WAIT_S
        while any(hold.alive(q) for q in pids) and time.perf_counter() < end:
            time.sleep(0.01)

    def _new_scratch(self) -> None:
        """A fresh scratch folder for the next harness (the last one's removed)."""
        self._drop_scratch()
        self.scratch = tempfile.mkdtemp(prefix="kopt-scratch-")

    def _trim_log(self) -> None:
        """Empty the log when the harnesses before wrote half of the largest file a harness
        may write (workers.jail.file_bytes): the next one's lines must still fit."""
        try:
            if self.log.stat().st_size > file_bytes() // 2:
                os.truncate(self.log, 0)
        except (OSError, SetupError):
            pass

    def _new_cgroup(self) -> None:
        """A cgroup with task and memory limits for the next harness, when it is sandboxed
        and the host lets kopt make one (workers.cgroup); :attr:`limits` says which."""
        self.cgroup, why = cgroup.make() if self.isolation.isolated else (
            None, "the harness is not sandboxed")
        self.limits = self.cgroup.limits if self.cgroup is not None else f"none: {why}"

    def _drop_scratch(self) -> None:
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = ""

    def close(self) -> None:
        """Stop the harness and remove its log."""
        self.kill()
        self.log.unlink(missing_ok=True)


def _waited(turn: Callable[[], None] | None) -> float:
    """Seconds ``turn`` (a contest's, workers.turns) took to return: 0 without one."""
    if turn is None:
        return 0.0
    t0 = time.perf_counter()
    turn()
    return time.perf_counter() - t0


def _seconds(x: Any, cap: float) -> float:
    """A duration from a harness message: a finite number in ``[0, cap]``; anything else
    (text, NaN, infinity, negative) is 0."""
    if not isinstance(x, int | float) or isinstance(x, bool) or not math.isfinite(x):
        return 0.0
    return min(max(float(x), 0.0), cap)


def read_answer(conn: Connection) -> dict[str, Any]:
    """One message of the harness (workers.harness ``answer``): a JSON object of at most
    ``ANSWER_BYTES``, never unpickled (candidate code in the harness can write to this
    pipe; a pickle there once ran its code in the device actor, outside the sandbox).
    Raises EOFError/OSError as ``Connection.recv_bytes``, and :class:`BadAnswer` (an
    EOFError) for a message that is not a JSON object: the job is then a crash."""
    data = conn.recv_bytes(ANSWER_BYTES)
    try:
        msg = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: nested beyond Python's stack
        raise BadAnswer("the harness sent a message that is not JSON") from None
    if not isinstance(msg, dict):
        raise BadAnswer("the harness sent a message that is not a JSON object")
    if "status" in msg and msg["status"] not in _STATUSES:
        raise BadAnswer(f"the harness sent a status that is none: {str(msg['status'])[:40]}")
    return msg


class BadAnswer(EOFError):
    """A harness message that is not a JSON object: the harness is killed at once and the
    job is a crash (its candidate wrote to the answer pipe)."""


def describe_exit(code: int | None) -> str:
    """A process's exit in words: ``exit code N`` or ``killed by SIGNAME``."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class _ClockMarks:
    """A clock job's outside clock (:meth:`Sandbox.run`): its start (``t0``, s, and the
    sandbox's CPU time ``cpu0``, ns, where counted), its end at the first "clocked" (time,
    CPU time), and how many "clocked" messages were read."""

    t0: float | None = None
    cpu0: int | None = None
    end: tuple[float, int | None] | None = None
    clocked: int = 0
    # a paced clock job's (workers.harness ``_clock_paced``): when the running call's "go"
    # was sent (s, and the harness's CPU time, ns, where read), each call's (ms, CPU ms or
    # None), and messages out of turn
    pending: tuple[float, int | None] | None = None
    calls: list[tuple[float, float | None]] = field(default_factory=list)
    stray: int = 0


def _clock_broken(res: dict[str, Any], job: RunJob | dict[str, Any]) -> dict[str, Any]:
    """``res`` made ``suspect`` where a figure the harness reports cannot be a time: an
    ``ok`` job's ``median_ms``, or a contender's in a contest's ``results``, not above 0 ms
    or not finite
    (a clock patched in the harness's process that runs backwards gave -61 ms, and a
    geometric mean of it stopped the sweep). A contest names the contenders at fault in
    ``failed``, as for a failed check."""
    if res.get("status") != Status.OK:
        return res
    why = ("a median of {} ms, by the clock of the process that loaded its code: no "
           "call takes no time, that process's clock was changed")
    if "results" in res or "contest" in (job.payload() if isinstance(job, RunJob) else job):
        entries = (job.payload() if isinstance(job, RunJob) else job).get("contest") or []
        shape = _contest_shape(res.get("results"), len(entries))
        if shape:  # names nobody: the driver runs each contender alone to find it
            return {"status": Status.CRASHED, "error": f"the harness answered {shape}"}
        bad = [(e.get("job_key", "?"), r.get("median_ms")) for e, r in
               zip(entries, res["results"]) if not _positive(r.get("median_ms"))]
        if bad:
            return {"status": Status.SUSPECT, "failed": [k for k, _ in bad],
                    "error": "; ".join(f"{k}: {why.format(m)}" for k, m in bad)}
        return res
    if "median_ms" in res and res["median_ms"] is not None and not _positive(res["median_ms"]):
        return {**res, "status": Status.SUSPECT, "error": why.format(res["median_ms"])}
    return res


def _contest_shape(results: Any, n: int) -> str:
    """What is wrong with a passed contest's ``results`` for ``n`` contenders (a list of
    one object per contender, each with a number ``median_ms`` and ``iqr_ms``, a whole
    ``n_samples`` of 1 to 2**31 - 1 and a list of numbers ``samples_ms``), or "". Candidate
    code can write the harness's answer pipe: a forged ``results: [1, 2]`` stopped the
    driver at the closing (red-team round 10)."""
    if not isinstance(results, list) or len(results) != n:
        return f"a contest result that is not a list of {n} contenders' figures"
    for r in results:
        if not isinstance(r, dict):
            return "a contender's figures that are not an object"
        if not all(_number(r.get(k)) for k in ("median_ms", "iqr_ms")):
            return "a contender's median_ms or iqr_ms that is not a number"
        n_s, xs = r.get("n_samples"), r.get("samples_ms")
        if not (isinstance(n_s, int) and not isinstance(n_s, bool) and 0 < n_s < 2**31):
            return "a contender's n_samples that is not a whole number of 1 to 2**31 - 1"
        if not isinstance(xs, list) or not all(_number(x) for x in xs):
            return "a contender's samples_ms that is not a list of numbers"
    return ""


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _positive(x: Any) -> bool:
    """Whether ``x`` is a positive finite number (a time a call can take; an infinite median
    made a geometric mean infinite)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _artifacts(job: RunJob | dict[str, Any]) -> set[str]:
    """The artifact paths ``job`` loads: its own, or a contest's contenders'."""
    if isinstance(job, RunJob):
        return {job.artifact} if job.artifact else set()
    out = {str(job["artifact"])} if job.get("artifact") else set()
    return out | {str(e["artifact"]) for e in job.get("contest") or () if e.get("artifact")}
