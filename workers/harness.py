"""The sandboxed harness process: load artifacts, check them against the reference, time them.

Runs as ``python -m workers.harness RFD WFD`` under a device actor (or
``kopt preflight``), or, on a CPU device, as a fork of a process that imported it
(workers.zygote: the same sandbox, its ``main`` called directly), receiving run jobs
(dicts) over a pipe and answering with outcome dicts. Long-lived: artifacts are dlopened
once, inputs and reference outputs are made once per (reference, dims, seed) on this
device, and the CUDA context lives as long as the process. A crash, illegal address or hang
kills only this process; the actor records it and starts a new one.

Per job (a candidate is assumed to try to fool the check and the clock):

- check: two input sets with different values (seeds ``seed`` and ``seed + 1``), each in
  buffers of its own (other device addresses); before each call every input, in/out ones
  too, is copied from its pristine values and outputs are poisoned (NaN, or 0x5A / 0xA5 bytes
  for integers); ``solve`` (kernel mode: the ``__global__`` kernel launched through the
  driver API, workers.launcher) -> launch error check -> synchronize -> every element
  compared with the reference (``|out - ref| <= atol + rtol*|ref|``, NaN never passes),
  const inputs and the canaries after each output checked. The reference gets copies of
  the inputs, so one that works in place changes nothing. A tolerance that an output of
  zeros passes everywhere (expected values smaller than ``atol``) is refused.
- timing: warm-up by time (``timing.warmup_ms``) when the device was idle before the job
  (its first job, or more than ``IDLE_WARM_S`` since the last one ended; back to back, two
  calls: the check's calls already loaded the code and the clocks are up), then samples
  until the median is stable (workers.timing).
  Before every timed call a randomly chosen input set is copied into the buffers and the outputs
  poisoned (an in/out argument never drifts, state kept between calls never matches), the
  cache is flushed (GPU: a buffer of 2x the L2 zeroed; CPU: every cache line
  of the candidate's buffers evicted, ``Harness.flush``); CUDA events on torch's
  stream around ``solve`` (CPU: a monotonic clock); after it, on the device and outside
  the timed interval, every output element is verified against that set's tolerance band.
- a contest (contenders timed side by side: a tie, the loop's closing): each contender
  checked on the check's sets and, where ref.py defines ``stress_inputs``, on two sets of
  that second distribution (heavy-tailed, real magnitudes) with seeds drawn then
  (``Harness._stress_check``): a kernel right only for the values ``inputs()`` draws fails;
  and at each problem size of sweep.yaml's ``check_dims`` (``Harness._check_dims``), never
  tuned or timed on: a kernel that hard-codes the tuned sizes fails.
- unseen values (workers.replay): each timed call, with chance ``Q_UNSEEN`` (never two in a
  row), is on an input set held back (seeds drawn at random: ``Harness.held_seeds``) and
  never called on by this artifact before (``Harness.fresh_sets``), at a place drawn at
  random among the samples and verified like them; a candidate that keeps results by
  content (a hash of a few input elements) and replays them cannot know which calls these
  are before it meets their values, and load lands on them as on the samples. Calls on
  new values all over ``REPLAY_FACTOR`` x the samples' median, where load (the share of
  samples over that line) is unlikely to explain them all, make it ``replayed``; one call
  on new values under the line clears it (and no more are made); while neither holds, more
  such calls, up to ``UNSEEN_MAX``, then ``too_slow`` (never ``ok``: so is a candidate that
  leaves no budget for one). Samples after its first call on new values whose median is
  over that line of the samples before it become the figure (workers.replay
  ``split_after``). A contest makes the same calls in its rounds, per contender, and more
  rounds while a contender's verdict is open.
- a probe: a few calls from an idle device to a device-wide synchronize: work that
  ``solve`` left running (its own stream) makes the candidate ``escaped`` (GPU only); CPU:
  after every checked call, an output page that cannot be read (protected, to be
  computed on its first read by a fault handler, attack MODE 2) makes it ``escaped``;
  after every timed call the outputs' pages are made readable again (``Harness.reopen``),
  so such a page holds the poison and the sample fails verification.
- device memory outside torch before and after: growth makes it ``leaked`` and the
  process is restarted.
- ``timing.timeout_s`` is the job's budget after its inputs are made, not counting the
  harness's own work in it (the checks' comparisons, drawing held-back sets: ``Harness.own``);
  the sandbox kills a first call that does not return in it (a hang). Later phases are
  sized from the first call's time: what does not fit is cut, and the candidate is
  ``too_slow`` with the samples it got.

What is not caught (a candidate is native code inside this process), and what is named
wrongly:

- an honest OpenMP kernel on two threads beside CPU hogs was `replayed` by the earlier
  protocol (calls on new sets after the samples, a recheck after pauses, a load gauge) in
  4 of 256 jobs (bench/honest_under_load.py, 2026-12-03, the 2-core machine: libgomp's
  workers spin ~10 ms after a region, and the first call after a pause and a draw was slow
  far more often than a sample); with the calls mixed among the samples, 0 of 256 in the
  same bench, back to back (docs/verified/2026-12-03-h200-replay-mixed.md). That bounds the
  rate under about 1.2 %, not at 0, so the OpenMP kernels stay out of the CI test. A
  ``replayed`` job is run once more before the verdict is final (workers.sandbox
  ``run_retrying``): beside two test suites at once an honest one-thread vector add was
  named so once (cause not found);

- an honest kernel whose cost depends on the values so much that every held-back set
  costs more than ``REPLAY_FACTOR`` x its samples on the check's two sets is ``replayed``
  (e.g. a scan to the first match, a geometric cost): a kernel fast on exactly the sets it
  was sampled on is what a replayer looks like. A rule that clears it (calls repeated on
  the same new sets stay slow, and its first call on a check set was as fast as its
  samples there) would also clear a candidate that ships the answers for the check's
  seeds (sweep.yaml's, known before the run) and computes the rest; it needs random
  check seeds first. At the loop's closing the same kernel can be ``suspect``: the outside
  clock's blocks call on fresh sets from ref.py's ``inputs()``, and their mean over the
  slow sets is held against the contest's median (a red-team kernel always correct, 200x
  slower on about 1 set in 10 and fast on the check's seeds: `suspect` 5 of 5). Judging
  the block by its own calls' figures from this process's clock instead would clear it,
  and also a patch that tells the block's calls from the contest's (by the gaps between
  calls) and scales only the contest's; the median is what names a winner;

- a replay that costs at least ``1 / REPLAY_FACTOR`` of the work (padded to look honest);
  a replayer that pads just under half of its calls on seen sets to the work's cost keeps a
  fast median and makes load look common: its calls on new values decide only after about
  ``UNSEEN_MAX`` (workers.replay ``load_chance``), or never, and it is then
  ``too_slow``, not named;
- CPU backend: work left to a thread of its own that finishes between ``solve``'s return
  and the read of its outputs, and outputs computed lazily when first read other than
  from pages it protected (those are ``escaped``: ``Harness.unreadable``; e.g. pages it
  unmapped and a userfaultfd handler that also serves the kernel's reads, where that is
  allowed): there is no device-wide "synchronize" to probe with. A handler of its own for
  SIGSEGV, SIGBUS, SIGTRAP, SIGILL or SIGFPE that its load or a call left installed makes
  it ``escaped`` (:meth:`Harness._signals`: a truncated file mapping laid over its outputs,
  SIGBUS, tests/fixtures/faultpack/lazy_bus.cpp; a hardware breakpoint, SIGTRAP,
  lazy_trap.cpp, whose ``perf_event_open`` the sandbox's filter refuses too; a filter of
  its own that made the look fail, lazy_sys.cpp: ``seccomp`` refused, and a look that
  fails counts). In a sandbox, the system-call filter refuses a new handler for any signal
  (workers.seccomp): such a candidate's first read of its outputs then kills this process
  (`crashed`), and so does a timer's signal whose handler was to do a call's work after
  the clock stopped (tests/fixtures/faultpack/lazy_timer.cpp). Where the filter is off (no
  isolation) the looks alone remain, and they miss a thread of its own that installs one
  after the harness looked and takes it away before the next look, and blame a thread's
  change during another candidate's job (a contest's contender) on that one (a change
  between jobs is nobody's: the harness looks again as each starts). The closing's outside
  clock also reads every output of every call inside its blocks (:func:`_read_all`), so that such
  work is timed there.
  (Timing the verification reads against reads after no call flagged honest OpenMP
  kernels on a loaded 2-core machine, so kopt does not do it.) Likewise, work done before
  the call by a thread of its own that watches the buffers and computes a call's outputs
  once the harness has loaded its inputs, during the cache flush that follows (attack
  MODE 8 in tests/fixtures/faultpack/attacks.cpp: ``ok`` at 0.065 ms against the honest
  0.31 on the CPU while the flush zeroed twice the LLC; with the flush by cache line, a few
  microseconds for its 48 KB, it was ``ok`` at 0.31 ms against the honest 0.22: no gain at
  that size, though a candidate with large buffers still has their eviction's time).
  Flushing first and loading right before the call left it only the
  copy's time, but under load its thread still kept up in most jobs, and it would leave
  the calls on new sets with warm inputs, which weakens the replay check for memory-bound
  kernels: not done;
- code of a candidate's that rewrites another candidate's code loaded in the same process
  (a red-team framer's thread wrote a jump over each later ``solve`` to a wrapper slow on new
  values, or wrong, round 14): a job that fails in a harness that ran another artifact is
  run again in a fresh harness (workers.sandbox ``run_retrying``); a contest's contenders
  each run in a fresh harness of their own, their samples in turns with every rival's
  sandbox held still (workers.turns), so none of a rival's code shares, or runs beside,
  the timed process. A GPU rival's kernels queued before its hold still run on the device.
  What that design opens, and what is left (red-team round 15): each contender is timed by
  its own harness's clock, so a patched clock no longer scales its rivals' figures too; a
  clock of :func:`watched` found replaced before a round or after the contest makes the
  contender ``suspect`` (:meth:`Harness._clock_intact`), and so does a builtin clock that
  runs another C function (:func:`c_swapped`: red-team round 16 pointed its method
  definition elsewhere), but a patch of the code itself (libpython's, libc's
  ``clock_gettime``, the vDSO) or a replacement that undoes itself when first called
  (round 16: only the sample's end read it) is judged only by the closing's outside clock,
  which flags 4x, not 2x, and a candidate that forges its answers on the pipes (below)
  passes that too; the fix is the check and the clock outside this process; the
  inputs of every contender are made at once, unheld (kopt's work, before any candidate
  code loads; its load, checks and warm-up are a turn); a contender's forged "own" progress
  messages stretch its own turn,
  with every rival held, up to the sandbox's job limit (the contest stalls; no verdict
  changes);
- anything that reads or writes this process's memory or code: the expected outputs and
  tolerance bands (``InputSet``), the pristine inputs, the flush buffer; Python's C API
  (``PyGILState_Ensure`` + ``PyRun_SimpleString`` reach ``Harness.verify`` and
  ``time.perf_counter_ns``, e.g. to make every check pass); the result pipe to the
  sandbox (a forged outcome: JSON, never unpickled, so it carries figures, not code; the
  sandbox pings after every answer and wants the pong next, so an answer written while
  this process still works on the job is a crash, workers.sandbox ``_pinged``, but code that
  also reads the input pipe can answer the ping itself; a clock job's answer written
  there, natively, mid-block, is ``suspect`` unless it comes with exactly one "clocked"
  and this process then answers the sandbox's ping, workers.sandbox ``_clock_answer``:
  code that reads this process's input pipe and answers in its stead is not caught; a
  contest answer in turns must match the turns its sandbox timed, one sample a round and
  none longer than its turn, workers.turns ``in_its_turns``: a forger must then take every
  turn and spend in each what it claims, though it need not do the work there; it must
  also pass witness turns, workers.witness (a GPU's: workers.witness_gpu, through exported
  device memory, each turn's wall time within 2x + 0.5 ms of its samples' median, and no
  kernel of its own left running while it is held): calls on input sets written
  into its buffers by the device actor while it is frozen, their outputs read back and
  checked by a harness that loads no candidate code, and, on a device of one thread, its
  samples held to what those calls used (the calling thread's CPU, and the busiest other
  thread's and the whole cgroup's CPU or else the call's wall time, within 2x + 0.05 ms
  in one of 8 turns); a lie within that bound (red-team round 20: 2.2x claimed inside it,
  177x for work under 0.05 ms), any lie about time on a device of several threads, and a
  GPU's within its bound are not caught there).
  Only a candidate run in a
  process of its own, with the clock and the check outside it, closes these; kopt does not
  do that. What it does instead, at the loop's closing only: each contender of the closing
  contest is re-timed by a clock outside this process (``clock`` jobs: calls each prepared
  as a sample is, less the same preparations alone, timed by the sandbox from this
  sandbox's "go", sent once this process says "clock", to its answer; outputs checked
  after them; the preparations alone in a second harness of the device, which never loads
  a candidate's code, so that a thread left here cannot slow them, attack MODE 13, while
  every process of this sandbox is held still, workers.hold (its cgroup frozen, or each
  stopped by SIGSTOP until all are at once; one whose held processes used more than 2 ms
  of CPU meanwhile escaped the hold and is ``suspect``, kopt.core.clock ``HELD_CPU_MS``);
  on a CPU device of one thread
  whose sandboxes' CPU time a cgroup counts, by that CPU time, which load beside them
  lengthens far less than the wall's, though a shared cache or memory bus still can) and is
  ``suspect``,
  and dropped, when every block is more than 4x its contest median + 0.01 ms a call, plus
  half a call's preparation time (kopt.core.clock); judged again alone in a fresh harness
  when the shared one flagged it (a patched clock times every contender timed after it),
  the shared harness's figures then measured again in a fresh one. That catches a clock
  slowed 4x or more (``time.perf_counter_ns`` scaled, attack MODE 10, and MODE 11, which
  also skipped calls it could tell from samples; on the GPU, fault pack MODE 6:
  ``torch.cuda.Event.elapsed_time`` scaled by 1/10, tests/test_gpu_faults.py, run on an H200),
  not one slowed less, not one whose candidate skips a few of the block's calls and is lucky
  (3 random calls and the last are verified: ``Harness.clock``), nor one that finds the
  checked calls in this process's memory (``sys._getframe`` through the C API: a red-team
  candidate cleared a 1/100 clock so, 7 of 8) or fills their copies while the reference
  runs (4 of 5), nor, on the GPU, one whose call
  costs less than half its preparation's noise (a few rows of a large in/out table: a CPU
  device times each such call on its own, ``Harness._clock_paced``), not a
  patch that spares the clock job (code that rewrites this harness can send its "clock"
  message late, its "clocked" early in place of this harness's own (a second "clocked" is
  ``suspect``: workers.sandbox), or start its calls before the sandbox's "go", or forge its
  outputs' check),
  nor work a candidate left running outside this sandbox's processes while the second
  harness times the preparations (they are held then, workers.hold, but GPU kernels
  already queued run on, and an unsandboxed candidate's process in a session of its own is
  not stopped), nor other load on the host, which lengthens either block by what it takes,
  and not within an iteration's
  own jobs and contests (a patched winner there is caught at the closing, before it is named the
  loop's best). A median not above 0 ms (a clock run backwards) is ``suspect`` in any job
  (workers.sandbox).
- results one candidate keeps outside its own library's memory (a file in the scratch
  folder, shared memory in the sandbox's ``/dev/shm``) for another artifact timed by the
  same harness: the held-back sets are new to each artifact, not to every artifact, as
  drawing them per job would run the reference twice more per job. (The sandbox,
  workers.jail, keeps such files from outliving the harness and from reaching anything
  outside it: every file system but the scratch folder is read-only to this process, it
  has no network, sees only its own processes, and whatever it starts dies with it.)
- state a candidate leaves in the process for the next ones through this process's
  memory, natively, without the interpreter: a thread of the harness's own (or ref.py's)
  made to run its code (a worker of the OpenMP team :func:`_warm_teams` starts is no
  longer such a one: a red-team review ran its function there after resetting libgomp's
  thread-local state, which :func:`_omp_open` reads, a later 0.21 ms job at 4.07 ms; the
  sandbox now reads where each of the team's workers waits, from outside, after every
  job, and ends a harness whose worker is not back in its idle wait, workers.teams, unless
  its stack was rewritten to wait there), objects changed through the C API calls that
  raise no audit event (Python code a job runs through the interpreter, ``PyRun_*``,
  ``gc.get_objects``, ``sys._getframe``, raises one first, and the harness sends it out
  before that code runs: the sandbox ends the harness after that job, workers.audit; no
  audit hook but the harness's is taken); a
  thread it started is no such state: the sandbox lists this process's threads after
  every job, from outside it, and ends a harness that runs one it did not run before any
  candidate code loaded, workers.sandbox ``Sandbox._threads_left``; a red-team review
  had found native threads left running past every check in here: one spinning in C
  took a core from the next candidate's calls, 2x; one holding the interpreter's lock
  with no Python frame, or starting a Python thread while ref.py's code ran, made each
  later 0.18 ms call 4-5 ms), the scheduling policy, the x87
  control word; they can slow or speed up candidates timed after it in the same harness
  (``contest`` runs all contenders in one). The OpenMP thread count, CPU affinity, nice
  value, switch interval, an OpenMP region left open, the garbage collector's callbacks,
  flush-to-zero and rounding and torch's function modes are read
  after every job (:data:`STATES`), and the Python threads running (:class:`RefThreads`:
  a red-team candidate's, spinning, made the next job 29x slower): the harness ends
  after a job that changed one, and a job that met such a change in a harness where
  another candidate's code ran is run again in a fresh one (workers.sandbox
  ``run_retrying``).
  (The calls on new values need no gauge of the machine's load, which
  an earlier protocol timed in this process between calls: a replayer's own threads, pinned
  with the gauge's to one core once it met new values, made the machine look slowed and
  was ``ok`` in 5 of 5 jobs at 0.064-0.070 ms against the honest 0.187-0.192.)
  The watch (:func:`watched`: the functions, their code and the trace and profile
  functions the harness's figures go through, compared after every job) ends the harness
  after a job that changed what it holds, but code in this process can reach anything this
  process holds, the watch included (a red-team review emptied the harness's copy through
  ``gc``; the copy :func:`_serve` keeps is reachable too, as are the torch functions the
  harness does not call (``TORCH_CALLED``; ``torch._C``'s builtins by object only), C
  memory, and objects' state, lists and dicts, none of which it watches): only a harness
  per candidate closes this, and started plainly one made the CPU README sweep's 112 jobs
  2-3.5x slower (2026-12-07). The verdicts that name a best do not rest on shared harnesses: every
  contender of a contest runs in a harness of its own, witnessed and clocked from outside.

Processes ref.py's own work starts before any candidate code loads (a torch.compile or
multiprocessing pool) are the sandbox's own (workers.sandbox ``Sandbox._prepared``), on a
CPU or a GPU device: no candidate code can write their memory (the jail's ``/proc`` is
read-only but for the harness's own ``/proc/PID``, which CUDA's start writes: workers.jail
``own_proc``), but it can drive them through what this process holds of them (a pool's
pipes), so they live only until another candidate's code comes (``Sandbox.end_shared``:
one harness start per candidate with such a ref.py). Where the host lends no namespaces
they are taken for what a job left running: the harness ends after each job (the job is
not blamed) and a contest's contenders are ``escaped``.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import functools
import gc
import importlib.util
import inspect
import json
import math
import os
import random
import socket
import statistics
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from sys import _current_frames
from typing import Any

import torch

from workers import audit, cgroup, devmem, native, nvrtc, objmem, prestart, seccomp
from workers.ctypes_map import scalar_ctype
from workers.expr import parse
from workers.observers import Nvml, Observer, timing_observers
from workers.records import (
    INPUTS_FN,
    PROBE,
    REF_CHANGED,
    STRESS_INPUTS,
    RunJob,
    band_of,
    file_sha256,
)
from workers.replay import (
    Q_UNSEEN,
    UNSEEN_MAX,
    open_text,
    replay_state,
    replay_text,
    split_after,
)
from workers.status import Status
from workers.timing import lap, should_stop, summarize
from workers.witness import IoVec

MAX_DATA_ENTRIES = 2
# of a GPU's free device memory, the most a judge's witness sets take (Harness._witness_fit):
# the contenders' harnesses need the rest. On an H100 (docs/verified/2026-12-06-session45.md)
# the README's sweep's judge held about 28 GB (by its sets' sizes: 8 sets drawn, their copies,
# 2 contenders' outputs, its own prepared problem) beside the device's own harness and two
# contenders' (one said 17 GB in use), and that honest contender ran out of memory
WITNESS_SHARE = 0.25
# of a CPU judge's memory limit (a harness's: workers.cgroup), the most its witness sets take
# (the rest: torch, ref.py's temporaries, the check's float64 copies; _host_fit)
HOST_SHARE = 0.5
# how long a GPU judge short of memory others hold looks again (every SHORT_POLL_S) before
# it gives up: a harness just killed gives its device memory back after its sandbox's first
# process is gone
SHORT_WAIT_S, SHORT_POLL_S = 2.0, 0.1
# Harness.check on a GPU, per element of an output: float64 copies of it and its expected
# values (8 + 8), their difference (8) and relative error (8), a bool mask (1)
CHECK_BYTES = 33
CONTEXT_BYTES = 512 << 20  # allowed for a process's CUDA context and modules (not measured)
GUARD = 4096  # canary elements after each output buffer
N_SETS = 2  # input sets (seeds seed, seed + 1) every candidate is checked on
# CPU: the seen input sets a job's timed calls cycle through (seeds seed, seed + 1, ...)
# hold at least TIMED_SET_ELEMS elements all told, up to MAX_TIMED_SETS sets
# (:func:`timed_sets`): a CPU's branch predictor learns a kernel's value-dependent branches
# over a few small sets, which makes the figure optimistic and an honest kernel's calls on
# new values look like a replayer's (the fault pack's honest kernel, which sorts 1024
# floats, on this project's 2-core machine, 2026-12-07: 14-22 us a call cycling 2 sets, 49-50
# us on values never seen, so `replayed` in most jobs; 25-49 us cycling 8 sets; 48-50 us
# cycling 32, every call on new values among them)
TIMED_SET_ELEMS = 1 << 16
MAX_TIMED_SETS = 32
# input sets (random seeds) held back and made with the check's: the first never-seen sets a
# job's timed calls draw from (workers.replay); more are drawn as they are spent
N_UNSEEN = 2
UNSEEN_READY = 2  # never-seen sets kept ready while a job's calls may draw on them
PROBE_CALLS = 3  # calls timed from an idle device to a device-wide synchronize
# work the events missed (ms) that makes a candidate `escaped`: over this and over
# ESCAPE_SHARE of its median; an honest solve's host overhead is tens of microseconds
ESCAPE_MS, ESCAPE_SHARE = 0.1, 0.5
# seconds of idle device before a job above which the job warms up for timing.warmup_ms
# (an idle GPU or CPU may lower its clocks; a job sent back to back follows the previous
# one within milliseconds)
IDLE_WARM_S = 0.5
# open files a harness may hold between jobs, half the sandbox's RLIMIT_NOFILE (workers.jail
# NOFILE_MAX); with more, it restarts (``_serve``): a candidate that used them all up made
# every later job's library load fail (``error``, 5 of 5: red-team round 9). A CPU harness
# holds 6 once set up (this machine, 2026-12-04); a GPU one's driver opens a few dozen more
FILES_KEPT = 512
LEAK_BYTES = 16 << 20  # device memory a job may gain outside torch before it is `leaked`
# a job key only bench/check_cost.py sets (the driver never does): one input set, no
# restore or verification of timed calls, no probe -- kopt's timing before the guards
UNGUARDED = "bench_unguarded"
# the outside clock's block (Harness.clock): calls verified at random besides its last; the
# bytes of fresh input sets one block may hold and the seconds drawing them may take
# (CLOCK_MIN_SETS at least; more calls than fit reuse them)
CLOCK_CHECKED = 3
CLOCK_SET_BYTES = 1 << 30
CLOCK_DRAW_S = 0.25
CLOCK_MIN_SETS = 3


# cuda.h CUlimit: the L2 set aside for persisting accesses (sm_80 and later)
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


class JobError(Exception):
    """A problem that makes one job fail with ``status``, e.g. a bad reference."""

    def __init__(self, status: str, message: str, fatal: bool = False):
        super().__init__(message)
        self.status, self.fatal = status, fatal


@dataclass
class InputSet:
    """One set of input values and what a correct ``solve`` makes of them.

    ``inputs``: every pointer argument ``solve`` reads (in/out ones included), pristine, on
    the device. ``expected``: the reference's outputs. ``lo``/``hi``: per element, the
    tolerance band ``expected -/+ (atol + rtol * |expected|)`` rounded outwards by one ulp
    (float32 for 16-bit outputs): the cheap test that every timed call's output passes
    (workers.harness ``Harness.verify``). ``seed``: the seed ``inputs()`` was given.
    """

    seed: int
    inputs: dict[str, torch.Tensor]
    expected: dict[str, torch.Tensor]
    lo: dict[str, torch.Tensor] = field(default_factory=dict)
    hi: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Buffers:
    """The device memory one call of ``solve`` sees: input copies, outputs and the canary
    (``GUARD`` elements after each output). Two are made per problem size, at different
    addresses: the check calls ``solve`` once on each."""

    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]
    guards: dict[str, torch.Tensor]


@dataclass
class Data:
    """Everything prepared for one problem size: scalar values, the seen input sets (the
    check's ``N_SETS`` first, then on a CPU the rest its timed calls cycle through:
    :func:`timed_sets`), a buffer set per checked set (``bufs[i]`` first holds
    ``sets[i]``; timed calls load their set into ``bufs[0]``), ``N_UNSEEN`` more input sets
    no candidate sees before its samples are taken (``Harness.unseen``), and notes on the
    reference (e.g. computed in lower precision than the output) for the driver to show."""

    scalars: dict[str, Any]
    sets: list[InputSet]
    bufs: list[Buffers]
    notes: list[str] = field(default_factory=list)
    unseen: list[InputSet] = field(default_factory=list)
    # more held-back sets, drawn when needed (Harness.fresh_sets): as a job spends them, or for an
    # artifact that was already called on every held-back set drawn so far
    reserve: list[InputSet] = field(default_factory=list)
    key: tuple = ()  # the Harness.data key (Harness.spent)
    shapes: dict[str, list[int]] = field(default_factory=dict)  # input name -> shape
    shape_of: dict[str, list[int]] = field(default_factory=dict)  # output name -> shape
    # the outside clock's preparations alone load these (Harness.clock: a harness that never
    # loads a candidate's code keeps them), and the seconds one set took to draw
    pool: list[InputSet] = field(default_factory=list)
    draw_s: float = 0.0

    def input_set(self, k: int) -> InputSet:
        """Input set ``k``: ``sets[k]``, then (``k >= len(sets)``) the held-back ``unseen``
        ones, then the ``reserve``; only buffer set 0 is loaded with those."""
        if k < len(self.sets):
            return self.sets[k]
        k -= len(self.sets)
        return self.unseen[k] if k < len(self.unseen) else self.reserve[k - len(self.unseen)]


@dataclass
class Witnessing:
    """The judge's witness sets and buffers (:meth:`Harness.witness`), kept for the next
    contest of the same ``key`` (problem, signature, tolerance). ``entry``: the contender's
    job they are of; ``sets``: each set's expected outputs (its inputs were copied into
    ``src`` and dropped: a GPU judge held every value twice); ``src``: per set, its inputs
    and poisoned outputs; ``dst``: per copy (contender), per set, a contender's outputs;
    ``stage``: a GPU's null turns' buffers (inputs and outputs), else None."""

    entry: dict
    key: tuple  # also the sets and copies asked for
    sets: list[InputSet]
    src: list[Buffers]
    dst: list[list[Buffers]]
    stage: Buffers | None = None

    def buffers(self) -> list[Buffers]:
        """Every buffer set held, ``src``, ``dst`` and ``stage``."""
        return [*self.src, *(b for bufs in self.dst for b in bufs),
                *([self.stage] if self.stage else [])]


def _python_threads() -> set[tuple[int, Any]]:
    """The Python threads running now (``sys._current_frames``, as taken when this module
    was imported: a candidate may rebind ``sys``'s), each as its ident and its
    ``threading.Thread`` (None for one ``threading`` does not know): an ident is reused
    once its thread ended, and a red-team candidate's spinner took the ident of a thread
    ref.py had started and ended."""
    active = threading._active  # type: ignore[attr-defined]
    return {(i, active.get(i)) for i in _current_frames()}


class RefThreads:
    """The Python threads (:func:`_python_threads`) a job may leave running in the harness:
    those :meth:`update` took (all there were when it began to serve jobs: its own, and
    those ref.py started while inputs were made ahead) and those that started while
    ref.py's code ran inside this object as a context (its import, ``inputs``,
    ``reference``, a job that times it: nested or not, one thread at a time). Any other
    was started by a candidate's code, or by a native thread it left (a red-team candidate
    left one spinning in Python: each return of a later candidate's calls waited a switch
    interval for the interpreter's lock, 29x slower): :meth:`left`.

    Not seen here: a native thread that holds the interpreter's lock without a Python
    frame, or runs Python only while no check looks, or starts a thread while ref.py's
    code runs; this object's state, reachable through ``gc`` (a red-team review of this
    check, CPU, 2026-12-07). The sandbox's list of this process's threads, read from
    outside it after every job (workers.sandbox ``Sandbox._threads_left``), sees each.
    Named wrongly: a ref.py whose own threads start threads outside its calls (a
    ``threading.Timer`` that re-arms itself) ends the harness after its jobs."""

    def __init__(self):
        self.known: set[tuple[int, Any]] = set()
        self._before: list[set[tuple[int, Any]]] = []

    def __enter__(self) -> RefThreads:
        self._before.append(_python_threads())
        return self

    def __exit__(self, *exc: object) -> None:
        self.known |= _python_threads().difference(self._before.pop())

    def update(self) -> None:
        """Take every Python thread running now as one a job may leave."""
        self.known |= _python_threads()

    def python_idents(self) -> set[int]:
        """The idents of the known threads that ``threading`` started (the harness's own,
        ref.py's), the main thread's aside: they may run Python at any time."""
        main = threading.main_thread().ident
        return {i for i, t in self.known if isinstance(t, threading.Thread)
                and not isinstance(t, threading._DummyThread) and i != main}  # type: ignore[attr-defined]

    def left(self) -> set[tuple[int, Any]]:
        """The Python threads running now that are not known; those known that ended are
        forgotten (their ``threading.Thread`` objects not kept)."""
        now = _python_threads()
        self.known &= now
        return now.difference(self.known)


class Harness:
    """State of one sandbox process on one device (``cuda`` or ``cpu``).

    ``progress``: called with a dict when the job passes a point that tells the sandbox how
    much longer it may take (workers.sandbox): after the inputs and reference outputs are
    made (``{"stage": "prepared"}``) and after the first checked call (``{"stage":
    "called", "call_ms": ...}``).

    ``observers``: measurement observers (workers.observers) called around every batch of
    timed samples; their results are columns of the outcome: the registered ones for the
    device (workers.observers ``timing_observers``). CUDA: an
    :class:`~workers.observers.NvmlObserver` (clock, temperature, throttle, power; each
    None where NVML cannot say); CPU: none, unless a plug-in measures CPUs.
    """

    def __init__(self, device: str, progress: Callable[[dict], None] | None = None):
        self.device = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        self.is_cuda = device == "cuda"
        self.libs: dict[str, Any] = {}
        self.refs: dict[tuple, Any] = {}  # ref_stamp(path) -> ref.py's module
        self.ref_threads = RefThreads()  # the Python threads it may keep: ref.py's too
        self.data: dict[tuple, Data] = {}
        self.progress = progress or (lambda _msg: None)
        self.told_prepared = False  # :meth:`prepared`'s first message sent
        self.parts: dict[str, float] = {}  # :meth:`lap`'s (never a verdict: see there)
        # a clock job's start: returns on the sandbox's "go" (in-process use: at once)
        self.await_go: Callable[[], None] = lambda: None
        # a witness turn's start: True on "go", False on "enough" (workers.witness)
        self.await_turn: Callable[[], bool] = lambda: True
        self.post: Callable[[bytes], None] | None = None  # sends answer()'s bytes (_serve)
        # what candidate code must not replace (:func:`watched`), taken by :func:`_serve`,
        # and the C functions its builtins run (:func:`c_taken`)
        self.watch: Sequence[tuple[Any, str, Any]] = ()
        self.c_watch: Mapping[str, Any] = {}
        # CPU: the candidate's own buffers evicted line by line before each sample, outputs
        # checked in one pass (workers.native); where its helpers cannot be built, and on
        # the GPU, a buffer of twice the last-level cache (L2) zeroed instead
        self.native = None if self.is_cuda else native.library()
        # CPU: library id -> why its code left a signal handler of its own (:meth:`_signals`);
        # the handlers as they are now, before any candidate's code, are the harness's own
        self.signal_escapes: dict[int, str] = {}
        if self.native is not None:
            native.handlers_changed()
        self.flush_buf: torch.Tensor | None = None
        if self.is_cuda:
            torch.cuda.init()
            l2 = torch.cuda.get_device_properties(0).L2_cache_size
        else:
            l2 = _llc_bytes()
        if self.native is None:
            self.flush_buf = torch.empty(max(2 * l2, 1 << 20), dtype=torch.int8,
                                         device=self.device)
        self.observers: list[Observer] = timing_observers("cuda" if self.is_cuda else "cpu")
        self.rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        self._libcuda: ctypes.CDLL | None = None  # reset_persisting_l2's driver library
        self._deadline = math.inf  # perf_counter time by which the job must answer
        self._cut = (0.0, 0.0)  # when the budget was last found too short, and what was asked
        # CPU: the samples of the last ``time`` and how long each one's verification took (ms)
        self.sample_ms: list[float] = []
        self.last_set = 0  # the input set of the last timed call
        # device memory outside torch (bytes) that drawing more held-back sets took during
        # the current job (ref.py's libraries): not the candidate's, so not a leak
        self._drawn = 0
        self._nvml: Nvml | None = None  # for this process's device memory (_device_used)
        # (Data.key, artifact path) -> held-back sets (unseen, then reserve) spent on it: a
        # loaded artifact keeps its state between jobs, so each job's sets are new to it;
        # kept here, not with the Data, which may be made again (MAX_DATA_ENTRIES)
        self.spent: dict[tuple, int] = {}
        self._witnessing: Witnessing | None = None  # the judge's (:meth:`witness`)
        self._exported: dict[int, devmem.Allocation] = {}  # a GPU's (:meth:`_export`)
        self.rel_err = self.worst_rel = 0.0  # of the last check / checked calls (see there)
        self.idle_s = math.inf  # seconds the device was idle before this job (main sets it)
        self.done_at = -math.inf  # perf_counter time the last job ended
        self.lazy = ""  # CPU: why an output was unreadable after a call (``unreadable``)
        self.poison = 0x5A  # the byte integer outputs are filled with by the next ``load``

    # -- loading -------------------------------------------------------------------------
    def lib(self, path: str, sig: list[dict]) -> Any:
        """The loaded artifact at ``path``: a ctypes library exporting ``solve``, or (kernel
        mode) a workers.launcher.KernelLauncher. Raises JobError when a kernel-mode artifact
        cannot be loaded (``error`` without cuda-python, else ``launch_error``)."""
        if path not in self.libs and nvrtc.is_kernel_file(path):
            if not self.is_cuda:
                raise JobError("error", "a kernel-mode (cubin) artifact runs on the cuda "
                               "backend only")
            # lazy: the driver API (cuda-python) for kernel-mode artifacts only
            from workers.launcher import KernelLauncher, LauncherError

            try:
                self.libs[path] = KernelLauncher(path, sig, self.device.index or 0)
            except LauncherError as e:
                raise JobError("error" if e.missing else "launch_error",
                               f"loading the cubin: {e}") from None
        if path not in self.libs:
            # its constructors run in the load: a window of workers.audit's
            lib = audit.load(path, os.RTLD_LOCAL | os.RTLD_NOW)
            self._signals(lib)  # a constructor of the library's own ran just now
            fn = lib.solve
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p if a["kind"] != "scalar"
                           else scalar_ctype(a["ctype"], self.device.type) for a in sig]
            if self.is_cuda:
                lib.kopt_last_error.restype = ctypes.c_int
                lib.kopt_synchronize.restype = ctypes.c_int
                lib.kopt_error_string.restype = ctypes.c_char_p
                lib.kopt_error_string.argtypes = [ctypes.c_int]
            self.libs[path] = lib
        return self.libs[path]

    def ref_module(self, path: str) -> Any:
        """ref.py at ``path``, imported once per version of the file (a warm device serves
        many sweeps: an edited ref.py is imported again)."""
        key = ref_stamp(path)
        if key not in self.refs:
            spec = importlib.util.spec_from_file_location(f"kopt_ref_{len(self.refs)}", path)
            mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.path.insert(0, str(Path(path).parent))
            try:
                with self.ref_threads:
                    spec.loader.exec_module(mod)  # type: ignore[union-attr]
            except BaseException as e:  # noqa: B036 -- ref.py's fault, whatever it raised
                raise JobError("error", f"{path}: import failed: {e!r}") from None
            finally:
                sys.path.pop(0)
            for name in ("inputs", "reference", "contender"):  # kopt.core.spec.REF_FUNCTIONS
                f = getattr(mod, name, None)
                if f is not None and not callable(f):  # `contender = 5` was silently ignored
                    raise JobError("error", f"{path}: `{name}` is {f!r:.40}, not a function; "
                                   f"define `def {name}(...)` or remove it")
            self.refs[key] = mod
        return self.refs[key]

    # -- data ----------------------------------------------------------------------------
    def prepare(self, job: dict, reference: bool = True, probe: bool = False) -> Data:
        """Inputs, buffers and reference outputs for ``job``'s dims (cached per reference,
        dims, seed and shapes).

        The seen input sets (:func:`timed_sets`: ``N_SETS``, more on a CPU for small
        sizes) and ``N_UNSEEN`` more are drawn, from ``seed``, ``seed + 1``, ... and random
        seeds (:meth:`held_seeds`); the reference gets copies of each set's inputs (a
        reference that works in place changes nothing the candidates see).
        ``reference=False`` (the NCU target) skips the reference and makes one set.
        ``probe`` (the driver's check of what contests draw from: ``stress_inputs()``,
        ``check_dims``): the check's ``N_SETS`` sets only, neither cached nor evicting what
        is (the sets a prestarted harness made ahead stay).
        Raises JobError (``error``) naming ref.py for a bad inputs() / reference().
        """
        _same_reference(job)
        key = _data_key(job, reference)
        if key in self.data:
            return self.data[key]
        while not probe and len(self.data) >= MAX_DATA_ENTRIES:
            self.data.pop(next(iter(self.data)))
            if self.is_cuda:
                torch.cuda.empty_cache()
        mod = self.ref_module(job["reference"])
        scalars, shapes, reference = _problem(job, reference)
        ref_name = Path(job["reference"]).name
        seen = N_SETS if probe or not reference else timed_sets(shapes, self.is_cuda)
        n_sets = 1 if not reference else seen if probe else seen + N_UNSEEN
        try:
            d = self._prepare(job, key, mod, scalars, shapes, ref_name, reference,
                              (n_sets, seen))
            if not probe:
                self.data[key] = d
            return d
        except (torch.OutOfMemoryError, MemoryError) as e:
            raise JobError("error", f"the inputs and outputs of dims {job['dims']} do not fit in "
                           f"memory ({str(e).splitlines()[0][:200]}); check the sizes in "
                           "sweep.yaml `args:` / `dims:`") from None
        except RuntimeError as e:
            if "alloc" not in str(e).lower():
                raise
            raise JobError("error", f"the inputs and outputs of dims {job['dims']} cannot be "
                           f"allocated ({str(e).splitlines()[0][:200]}); check the sizes in "
                           "sweep.yaml `args:` / `dims:`") from None

    def _prepare(self, job: dict, key: tuple, mod: Any, scalars: dict, shapes: dict,
                 ref_name: str, reference: bool, counts: tuple[int, int]) -> Data:
        """:meth:`prepare`'s work once the shapes are known: ``counts`` (the sets to draw,
        the seeded ones among them)."""
        sig = job["signature"]
        n_sets, seen = counts
        sets, notes = self._draw(mod, job, scalars, shapes, ref_name, reference,
                                 [job["seed"] + i for i in range(min(n_sets, seen))]
                                 + self.held_seeds(job, n_sets - seen))
        if sets[0].inputs and not any(t.numel() for t in sets[0].inputs.values()):
            empty = ", ".join(f"{n}: {list(t.shape)}" for n, t in sets[0].inputs.items())
            raise JobError("error", f"every input of dims {job['dims']} is empty ({empty}): "
                           "nothing to check or time; give sizes above 0 in sweep.yaml "
                           "`dims:` or `args:`")
        if n_sets > 1 and sets[0].inputs and all(
                torch.equal(sets[0].inputs[n], sets[1].inputs[n]) for n in sets[0].inputs):
            raise JobError("error", f"{ref_name}: inputs() returned the same values for seeds "
                           f"{sets[0].seed} and {sets[1].seed}; kopt checks every candidate on "
                           "two input sets with different values (one set cannot tell a "
                           "kernel that replays a stored result from one that computes): "
                           "draw the inputs from the seed")
        outs = [a for a in sig if a["kind"] == "output"]
        shape_of = _shape_of(outs, shapes, sets[0])
        tol = job["tolerance"]
        _bands(sets, outs, shape_of, tol)  # the unseen ones too
        for a in outs if reference else []:
            if sets[0].expected.get(a["name"]) is not None and all(
                    _zeros_pass(s, a["name"]) for s in sets[:N_SETS]):  # the seeded ones
                n = a["name"]
                big = max(float(s.expected[n].double().abs().max()) for s in sets[:N_SETS])
                band = band_of(tol, n)
                raise JobError("error", f"{ref_name}: a kernel that writes zeros to {n!r} passes "
                               f"the check: every expected value (|{n}| <= {big:.3g}) lies within "
                               f"the tolerance (atol={band['atol']:g}, rtol={band['rtol']:g}) "
                               "of 0; "
                               "lower `tolerance:` in sweep.yaml below the outputs' size or draw "
                               "inputs that give larger outputs")
        sets, unseen = sets[:seen], sets[seen:]
        bufs = [self._buffers(sig, sets[0], shape_of) for _ in sets[:N_SETS]]
        return Data(scalars, sets, bufs, notes, unseen, shapes=shapes, shape_of=shape_of,
                    key=key)

    def _draw(self, mod: Any, job: dict, scalars: dict, shapes: dict, ref_name: str,
              reference: bool, seeds: Iterable[int]) -> tuple[list[InputSet], list[str]]:
        """One input set per seed in ``seeds`` (ref.py's ``inputs()``) and, when
        ``reference``, its expected outputs (no tolerance bands yet: :func:`_bands`); with
        the reference's notes."""
        sets: list[InputSet] = []
        notes: list[str] = []
        with torch.no_grad(), self.ref_threads:
            for seed in seeds:
                inputs = self._inputs(mod, job, shapes, seed, ref_name)
                if reference:
                    expected, note = self._reference(mod, job, inputs, scalars, shapes,
                                                     ref_name)
                    notes += [n for n in note if n not in notes]
                else:
                    expected = {}
                sets.append(InputSet(seed, inputs, expected))
        return sets, notes

    def held_seeds(self, job: dict, n: int) -> list[int]:
        """``n`` seeds for held-back input sets: drawn at random here, never the check's
        (``seed``, ``seed + 1``). They were ``seed + 2``, ...: the seed is in sweep.yaml, so a
        candidate could ship ref.py's answers for those seeds, made before the run, and be
        as fast on the held-back sets as on the check's (attack MODE 9)."""
        check = {job["seed"] + i for i in range(max(N_SETS, MAX_TIMED_SETS))}
        out: list[int] = []
        while len(out) < n:
            s = self.rng.randrange(1 << 20, 1 << 31)
            if s not in check and s not in out:
                out.append(s)
        return out

    def fresh_sets(self, job: dict, d: Data, n: int) -> list[int]:
        """The indices (see ``Data.input_set``) of ``n`` held-back input sets that
        ``job["artifact"]`` has never been called on, marked spent for it: the ``unseen``
        ones first, then the ``reserve``, which is extended (seeds after the last drawn,
        expected outputs and tolerance bands) when every set drawn is spent. The held-back
        sets are shared between artifacts, not within one: a loaded artifact keeps its state
        between jobs (a halving rung, a re-run, a contest), so one that computed honestly
        and kept every result in its first job replayed the held-back sets in the next (attack
        MODE 5). Device memory outside torch that drawing took is added to ``_drawn`` (not the
        candidate's leak). Raises JobError as :meth:`prepare` does."""
        first = self.spent.get((d.key, job["artifact"]), 0)
        missing = first + n - len(d.unseen) - len(d.reserve)
        if missing > 0:
            used = self._device_used()
            t0 = time.perf_counter()
            sets, _ = self._draw(self.ref_module(job["reference"]), job, d.scalars, d.shapes,
                                 Path(job["reference"]).name, True,
                                 self.held_seeds(job, missing))
            _bands(sets, [a for a in job["signature"] if a["kind"] == "output"], d.shape_of,
                   job["tolerance"])
            d.reserve += sets
            self.own(time.perf_counter() - t0)
            self.lap("draws", t0)
            if used is not None:
                torch.cuda.synchronize()
                self._drawn += (self._device_used() or 0) - used
        self.spent[(d.key, job["artifact"])] = first + n
        return [len(d.sets) + i for i in range(first, first + n)]

    def _buffers(self, sig: list[dict], s: InputSet, shape_of: dict[str, list[int]],
                 export: bool = False, inputs: bool = True) -> Buffers:
        """Fresh device memory for one call: input copies (none but in/out ones where not
        ``inputs``), outputs with canaries; on a GPU with ``export``, each buffer device
        memory another process may map (:meth:`_export`). Raises DevMemError."""
        outs = [a for a in sig if a["kind"] == "output"]
        out_names = {a["name"] for a in outs}  # in/out ones are their output's buffer
        made = {n: self._export(t.numel(), t.dtype).view(t.shape) if export and self.is_cuda
                else torch.empty_like(t) for n, t in s.inputs.items()
                if inputs and n not in out_names}
        outputs, guards = {}, {}
        arena = None if self.is_cuda else _OutputArena(
            [(_numel(shape_of[a["name"]]) + GUARD, getattr(torch, a["dtype"])) for a in outs])
        for a in outs:
            n, shape = a["name"], shape_of[a["name"]]
            # GUARD elements of canary after each output catch writes past its end
            size, dtype = _numel(shape) + GUARD, getattr(torch, a["dtype"])
            flat = (arena.take() if arena is not None else self._export(size, dtype)
                    if export else torch.empty(size, dtype=dtype, device=self.device))
            outputs[n] = flat[: _numel(shape)].view(shape)
            guards[n] = flat[_numel(shape):]
            if n in s.inputs:  # in/out: the output buffer is where its input values go
                made[n] = outputs[n]
        return Buffers(made, outputs, guards)

    def _export(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """``numel`` elements of ``dtype`` in device memory of their own that the device
        actor may map (workers.devmem ``allocate``), kept in :attr:`_exported` until
        :meth:`_unexport`. Raises DevMemError."""
        torch.cuda.synchronize()  # torch's context current on this thread
        a = devmem.allocate(max(numel, 1) * torch.empty(0, dtype=dtype).element_size(),
                            self.device.index or 0)
        self._exported[a.ptr] = a
        raw = torch.as_tensor(devmem.CudaArray(a.ptr, a.size), device=self.device)
        return raw.view(dtype)[:numel]

    def _unexport(self, bufs: Iterable[Buffers]) -> None:
        """The exported device memory of ``bufs`` freed (their tensors must not be used
        again)."""
        if not self._exported:
            return
        torch.cuda.synchronize()
        for b in bufs:
            for t in (*b.inputs.values(), *b.outputs.values()):
                a = self._exported.pop(t.data_ptr(), None)
                if a is not None:
                    devmem.free(a)

    def _free_exported(self) -> None:
        """Every exported allocation this process holds freed (a judge's, when a draw of its
        witness sets failed with no sets held: what a buffer set cut short had made too)."""
        if self._exported:
            torch.cuda.synchronize()
        for a in self._exported.values():
            devmem.free(a)
        self._exported.clear()

    def _spans(self, ts: dict[str, torch.Tensor]) -> dict[str, list[int]]:
        """Each buffer as witness turns name it (workers.witness): on a CPU its address and
        size in bytes; on a GPU its exported memory's file descriptor, the buffer's size and
        its allocation's (bytes: a mapping takes the whole allocation)."""
        if not self.is_cuda:
            return _spans(ts)
        return {n: [(a := self._exported[t.data_ptr()]).fd, t.numel() * t.element_size(),
                    a.size] for n, t in ts.items()}

    def _reference(self, mod: Any, job: dict, inputs: dict, scalars: dict,
                   shapes: dict, ref_name: str) -> tuple[dict[str, torch.Tensor], list[str]]:
        """The reference outputs for one input set (the reference gets copies), checked
        against solve's outputs: names, element counts, dtypes, NaN. Returns them and notes."""
        sig = job["signature"]
        fn = mod.reference
        kwargs = _ref_kwargs(fn, sig, {**{k: v.clone() for k, v in inputs.items()},
                                       **scalars}, ref_name)
        try:
            with self.ref_threads:
                ref = fn(**kwargs)
        except BaseException as e:  # noqa: B036 -- ref.py's fault, whatever it raised
            raise JobError("error", f"{ref_name}: reference() raised {e!r}"
                           + raised_at(e, getattr(mod, "__file__", None), ref_name)) from None
        outs = [a for a in sig if a["kind"] == "output"]
        ref = _by_output(ref, [a["name"] for a in outs], ref_name)
        expected, notes = {}, _not_taken(job, inputs, kwargs, ref_name)
        for a in outs:
            n = a["name"]
            if n not in ref:
                if n in inputs:  # in/out, not returned: the kernel must leave it as it was
                    expected[n] = inputs[n].clone()
                    continue
                raise JobError("error", f"{ref_name}: reference() did not return output {n!r}")
            r = ref[n]
            if not isinstance(r, torch.Tensor):
                raise JobError("error", f"{ref_name}: reference() returned {type(r).__name__} "
                               f"for output {n!r}; return a torch.Tensor")
            if _not_dense(r):  # checked like inputs() are
                raise JobError("error", f"{ref_name}: reference() returned output {n!r} as a "
                               f"{_not_dense(r)} tensor; return a dense tensor with values")
            want = getattr(torch, a["dtype"])
            note = _dtype_problem(r.dtype, want, n, a["ctype"])
            if note and note.startswith("!"):
                raise JobError("error", f"{ref_name}: {note[1:]}")
            if note:
                notes.append(f"{ref_name}: {note}")
            shape = shapes.get(n) or list(r.shape)
            if r.numel() != _numel(shape):
                raise JobError("error", f"{ref_name}: reference output {n!r} has {r.numel()} "
                               f"elements, the args shape {shape} has {_numel(shape)}")
            if r.is_floating_point() and bool(torch.isnan(r).any()):
                raise JobError("error", f"{ref_name}: reference output {n!r} contains NaN; "
                               "the reference must be finite (NaN never passes)")
            expected[n] = r.detach().to(self.device).reshape(shape).clone()
        return expected, notes

    def _inputs(self, mod: Any, job: dict, shapes: dict, seed: int, ref_name: str) -> dict:
        sig = job["signature"]
        wanted = [a for a in sig if a["kind"] == "input"]
        fn = job.get(INPUTS_FN, "inputs")  # or the second distribution, STRESS_INPUTS
        if hasattr(mod, fn):
            try:
                got = getattr(mod, fn)(seed=seed, **job["dims"])
            except BaseException as e:  # noqa: B036 -- ref.py's fault, whatever it raised
                raise JobError("error", f"{ref_name}: {fn}() raised {e!r}"
                               + raised_at(e, getattr(mod, "__file__", None), ref_name)) from None
            if not isinstance(got, dict):
                raise JobError("error", f"{ref_name}: {fn}() must return a dict name -> tensor")
            _known_keys(got, sig, ref_name)
        else:
            got = {}
            g = torch.Generator().manual_seed(seed)
            for a in wanted:
                if a["name"] not in shapes:
                    raise JobError("error", f"no shape for input {a['name']!r}: give it in "
                                   f"sweep.yaml `args:` or define inputs() in {ref_name}")
                dt = getattr(torch, a["dtype"])
                shp = shapes[a["name"]]
                if dt.is_floating_point:
                    t = torch.randn(shp, generator=g).to(dt)
                elif dt == torch.bool:
                    t = torch.randint(0, 2, shp, generator=g).bool()
                else:
                    t = torch.randint(-8, 8, shp, generator=g).to(dt)
                got[a["name"]] = t
        out = {}
        for a in wanted + [a for a in sig if a["kind"] == "output" and a["name"] in got]:
            n = a["name"]
            if n not in got:
                raise JobError("error", f"{ref_name}: inputs() did not return input {n!r}")
            t = got[n]
            dt = getattr(torch, a["dtype"])
            if not isinstance(t, torch.Tensor):
                raise JobError("error", f"{ref_name}: inputs() returned {type(t).__name__} for "
                               f"{n!r}; return a torch.Tensor")
            if _not_dense(t):
                raise JobError("error", f"{ref_name}: inputs() returned {n!r} as a "
                               f"{_not_dense(t)} tensor; return a dense tensor with values")
            if t.dtype != dt:
                raise JobError("error", f"{ref_name}: input {n!r} is {t.dtype} but solve takes "
                               f"{a['ctype']}* (torch.{a['dtype']})")
            if n in shapes and t.numel() != _numel(shapes[n]):
                raise JobError("error", f"{ref_name}: inputs() returned {n!r} with {t.numel()} "
                               f"elements, not the {_numel(shapes[n])} of its shape {shapes[n]} "
                               "in sweep.yaml args: make them agree")
            if t.numel() > 0 and not bool(t.any()):
                raise JobError("error", f"{ref_name}: input {n!r} is all zeros; kopt never "
                               "checks or times on zeros (they hide unwritten outputs)")
            # a copy of its own: inputs() may hand the same tensor out twice
            out[n] = t.detach().to(self.device).contiguous().clone()
        return out

    def load(self, d: Data, b: int, k: int, stream: bool = False) -> None:
        """Make buffer set ``b`` hold input set ``k``: every input (in/out ones too) copied
        from its pristine values, outputs NaN-filled (0x5A or 0xA5 bytes, alternating from
        call to call, for integers: an unwritten element equal to one fails the other), canaries
        reset. Runs before every checked or timed call, outside the timed interval.
        ``stream`` (a flushed sample on the CPU with the native helpers): with stores that
        bypass the caches (workers.native ``stream_copy``/``stream_fill``), whose lines the
        flush then evicts without writing them back first."""
        if b == 0:
            self.last_set = k
        self._load_set(d.bufs[b], d.input_set(k), stream)

    def _load_set(self, buf: Buffers, s: InputSet, stream: bool) -> None:
        """:meth:`load`'s work: ``buf`` made to hold input set ``s``."""
        put = native if stream and self.native is not None else None
        for n, t in buf.inputs.items():
            put.stream_copy(t, s.inputs[n]) if put else t.copy_(s.inputs[n])
        for g in buf.guards.values():
            put.stream_fill(g, 0xA5, as_bytes=True) if put else g.view(torch.uint8).fill_(0xA5)
        for n, t in buf.outputs.items():
            if n in buf.inputs:
                continue
            if t.dtype.is_floating_point:
                put.stream_fill(t, float("nan")) if put else t.fill_(float("nan"))
            elif put:  # alternating: an unwritten element equal to one poison fails the next
                put.stream_fill(t, self.poison, as_bytes=True)
            else:
                t.view(torch.uint8).fill_(self.poison)
        self.poison ^= 0x5A ^ 0xA5

    # -- running -------------------------------------------------------------------------
    def call(self, lib: Any, job: dict, d: Data, b: int = 0) -> None:
        """One ``solve`` call (kernel mode: one kernel launch; the reference contender: one
        call of ref.py's timed function, :class:`RefCall`) on buffer set ``b`` of ``d``."""
        buf = d.bufs[b]
        if isinstance(lib, RefCall):
            lib.run(buf, d.scalars)
            return
        args = _solve_args(job, d, buf)
        if isinstance(lib, ctypes.CDLL):
            audit.call(lib.solve, *args)
        else:
            lib.launch(args, {**job["scalars"], **job["dims"]},
                       torch.cuda.current_stream(self.device).cuda_stream)

    def caller(self, lib: Any, job: dict, d: Data, b: int = 0) -> Callable[[], None]:
        """:meth:`call` of ``lib`` on buffer set ``b`` of ``d`` as a function of no
        arguments; for a built ``solve`` its arguments (scalars and buffer addresses) are
        bound once, so that calling it costs little beyond the call itself."""
        if not isinstance(lib, ctypes.CDLL):
            return lambda: self.call(lib, job, d, b)
        return audit.bound(lib.solve, *_solve_args(job, d, d.bufs[b]))

    def check_cuda(self, lib: Any, where: str) -> None:
        """Raise JobError ``launch_error`` for a failed launch, ``crashed`` (fatal) for a
        fault found at the synchronize; nothing on the CPU backend."""
        if not self.is_cuda:
            return
        if not isinstance(lib, ctypes.CDLL):
            msg = lib.take_error()
            if msg:
                raise JobError("launch_error", f"{where}: launch failed: {msg}")
            msg = lib.synchronize()
            if msg:
                raise JobError(Status.CRASHED, f"{where}: {msg}", fatal=True)
            return
        e = audit.call(lib.kopt_last_error)
        if e:
            msg = audit.call(lib.kopt_error_string, e).decode()
            raise JobError("launch_error", f"{where}: launch failed: {msg} (cudaError {e})")
        e = audit.call(lib.kopt_synchronize)
        if e:
            msg = audit.call(lib.kopt_error_string, e).decode()
            raise JobError(Status.CRASHED, f"{where}: {msg} (cudaError {e})", fatal=True)

    def check(self, d: Data, b: int, k: int, tol: dict) -> tuple[bool, float, str]:
        """Compare buffer set ``b``'s outputs with input set ``k``'s expected ones, every
        element, in float64: ``|got - expected| <= atol + rtol * |expected|``, NaN never
        passes. Returns (ok, max abs error, what differs); the largest relative error of
        floating-point outputs (:func:`abs_rel_error`) is kept as ``self.rel_err``."""
        worst, msgs = 0.0, []
        self.rel_err = 0.0
        for n, exp in d.input_set(k).expected.items():
            got, band = d.bufs[b].outputs[n], band_of(tol, n)
            if self.native and native.native_dtype(got, exp):  # one pass, float64
                c = native.compare(got, exp, band["atol"], band["rtol"])
                worst = max(worst, c.max_abs)
                self.rel_err = max(self.rel_err, c.max_rel)
                if c.bad:
                    msgs.append(_differ(n, got, exp, c.first, c.bad, c.max_abs, band))
                continue
            if exp.dtype.is_floating_point or got.dtype.is_floating_point:
                g, e = got.double(), exp.double()
                ok = torch.isclose(g, e, rtol=band["rtol"], atol=band["atol"], equal_nan=False)
                diff = _abs_diff(g, e)
                self.rel_err = max(self.rel_err, abs_rel_error(g, e)[1])
            else:
                got, exp = _bytes(got), _bytes(exp.to(got.dtype))
                ok = got == exp
                diff = (got.long() - exp.long()).abs().double()
            err = float(diff.max()) if diff.numel() else 0.0
            worst = max(worst, err)
            bad = int((~ok).sum())
            if bad:
                exact = not (exp.dtype.is_floating_point or got.dtype.is_floating_point)
                msgs.append(_differ(n, got, exp, int((~ok).flatten().nonzero()[0]), bad, err,
                                    None if exact else band))
        return not msgs, worst, "; ".join(msgs)

    def verify(self, d: Data, b: int, k: int, tol: dict) -> torch.Tensor:
        """A 0-dim bool tensor, computed on the device without waiting: True when every output
        of buffer set ``b`` lies in input set ``k``'s tolerance band and no canary was
        touched. Enqueued after each timed call, outside the timed interval. CPU float32,
        float64, bfloat16 and float16 outputs: every element close to the expected one by
        the check's own test (``tol``: atol, rtol; workers.native ``all_close``), in one
        pass."""
        return self.within(d.bufs[b], d.input_set(k), tol)

    def within(self, buf: Buffers, s: InputSet, tol: dict) -> torch.Tensor:
        """:meth:`verify`'s test of the outputs in ``buf`` against input set ``s``'s
        expected outputs and bands (``tol``: atol, rtol), and of ``buf``'s canaries."""
        ok = torch.ones((), dtype=torch.bool, device=self.device)
        for n, got in buf.outputs.items():
            if n not in s.expected:
                continue
            if self.native and native.native_dtype(got, s.expected[n]):
                # one pass over the output and the expected values, in float64 as the check
                band = band_of(tol, n)
                ok &= native.all_close(got, s.expected[n], band["atol"], band["rtol"])
            elif s.lo[n].numel():
                g = got.float() if got.element_size() < 4 else got
                ok &= ((g >= s.lo[n]) & (g <= s.hi[n])).all()
            else:
                ok &= (_bytes(got) == _bytes(s.hi[n])).all()
        for g in buf.guards.values():
            ok &= (g.view(torch.uint8) == 0xA5).all()
        return ok

    def tampered(self, d: Data, b: int, k: int) -> str:
        """Why the last call on buffer set ``b`` (holding input set ``k``) broke the
        contract: wrote a const input or past an output."""
        buf = d.bufs[b]
        for n, t in buf.inputs.items():
            if n not in buf.outputs and not torch.equal(t, d.input_set(k).inputs[n]):
                return f"solve wrote to its const input {n!r}"
        for n, g in buf.guards.items():
            if bool((g.view(torch.uint8) != 0xA5).any()):
                return (f"solve wrote past the end of output {n!r} "
                        f"({buf.outputs[n].numel()} elements; give its shape in `args:`)")
        return ""

    def _sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize()

    def checked_calls(self, lib: Any, job: dict, d: Data) -> tuple[float, float, str]:
        """The correctness check: one call on each input set, each in its own buffers (other
        values at other addresses), every output element compared. The first call's time is
        measured (ms, host clock around the call and a synchronize) and reported through
        ``progress``. Returns (max abs error, first call's ms, what failed or ""); the
        largest relative error over the calls is kept as ``self.worst_rel``."""
        worst, first_ms = 0.0, 0.0
        self.worst_rel = 0.0
        checked = 1 if job.get(UNGUARDED) else min(len(d.sets), N_SETS)
        for k in range(checked):
            self.load(d, k, k)
            self._sync()
            t0 = time.perf_counter()
            self.call(lib, job, d, k)
            self.check_cuda(lib, "solve")
            ms = (time.perf_counter() - t0) * 1e3
            if self.unreadable(d.bufs[k]) or self._signals(lib):
                return worst, ms, self.lazy
            if k == 0:
                first_ms = ms
                self.progress({"stage": "called", "call_ms": ms})
            c0 = time.perf_counter()
            bad = self.tampered(d, k, k)
            if bad:
                return worst, first_ms, bad
            ok, err, msg = self.check(d, k, k, job["tolerance"])
            self.own(time.perf_counter() - c0)
            worst = max(worst, err)
            self.worst_rel = max(self.worst_rel, self.rel_err)
            if not ok:
                seed = d.sets[k].seed
                return worst, first_ms, (msg if k == 0 else
                                         f"input set {k + 1} (seed {seed}): {msg}")
            if k + 1 < checked and not self.fits(ms, 1):
                raise _TooSlow(ms, f"the check's call {k + 2}")
        return worst, first_ms, ""

    def own(self, seconds: float) -> None:
        """``seconds`` of the harness's own work in the job (comparing every output element
        in float64, drawing more held-back input sets: ref.py's ``inputs()`` and
        ``reference()``), which depends on the sizes, not on the candidate: added to the
        job's budget, here and in the sandbox's wait (a ``{"stage": "own"}`` progress
        message). Counted in it, a memory-bound honest kernel of 33 ms with 128 MB arrays
        was `too_slow` on a loaded 2-core machine (two checks took 16-60 s of its 60 s)."""
        if seconds > 0:
            self.parts["own"] = self.parts.get("own", 0.0) + seconds * 1e3
        if seconds > 0 and math.isfinite(self._deadline):
            self._deadline += seconds
            self.progress({"stage": "own", "s": seconds})

    def fits(self, call_ms: float, n: int) -> bool:
        """Whether ``n`` more calls of ``call_ms`` each fit in what is left of the job's
        budget (``timing.timeout_s``, counted from the end of the preparation)."""
        now, need = time.perf_counter(), n * call_ms * 1.25e-3
        if now + need < self._deadline:
            return True
        self._cut = (now, need)  # what the too_slow line states (:meth:`slow_text`)
        return False

    def prepared(self) -> None:
        """Tell the sandbox a job's input sets and reference outputs are made
        (``{"stage": "prepared"}``), before any of its candidate code loads. The first such
        message of this process (``"first": True``), sent before it ever loaded a
        candidate's code, waits for the sandbox's "go" (:attr:`await_go`): the sandbox counts
        the processes its sandbox holds by then as its own (workers.sandbox ``infra``), so
        that those ref.py's work started (torch.compile's worker pool, a multiprocessing
        pool) are not taken for what a candidate left running (which ends the harness after
        each job, and makes a contender ``escaped``)."""
        if self.told_prepared:
            self.progress({"stage": "prepared"})
            return
        self.told_prepared = True
        self.progress({"stage": "prepared", "first": True})
        self.await_go()

    def lap(self, part: str, t0: float) -> float:
        """The wall time since ``t0`` (``time.perf_counter``, s) added to ``part`` of this
        job's :attr:`parts` (ms); returns the time now. A figure of the harness's process,
        which candidate code shares: bench/check_cost.py's breakdown, never a verdict.
        Parts: ``prepare`` (the problem's input sets and expected outputs, the artifact's
        load), ``check`` (the checked calls), ``time`` (warm-up
        and samples, with the calls on never-seen sets), ``probe`` (work left running,
        guarded jobs only), and within them ``warm_up``, ``draws`` (never-seen sets drawn,
        ref.py run on them) and ``own`` (:meth:`own`: the harness's own work, draws and
        checks of outputs). A contest's (:meth:`contest`): ``prepare``, ``wait`` (for its
        first turn), ``check`` (its checked calls, the stress check, the other sizes),
        ``warm_up``, ``rounds`` and ``witness`` (its witness turns). A clock block's
        (:meth:`clock`): ``prepare``, ``draws`` (its input sets and the copies it keeps),
        ``block`` (the timed calls or preparations) and ``check``."""
        return lap(self.parts, part, t0)

    def warm_up(self, lib: Any, job: dict, d: Data, call_ms: float = 0.0) -> int:
        """Call ``solve`` at least twice, input sets alternating as in the samples, and for
        ``job["timing"]["warmup_ms"]`` when the device was idle for more than
        ``IDLE_WARM_S`` before this job (``idle_s``; its first job: always); the call count.
        A device kept busy by the jobs before this one has its clocks up, and the check's
        calls have loaded this candidate's code: the warm-up by time would only repeat them
        (25 ms of a 2048^3 sgemm candidate's 56 ms on an H200, 2026-12-01)."""
        warm_ms = job["timing"]["warmup_ms"] if self.idle_s > IDLE_WARM_S else 0.0
        t_end = time.perf_counter() + warm_ms / 1e3
        n = 0
        while n < 2 or time.perf_counter() < t_end:
            if not self.fits(call_ms, 1):
                break
            if not job.get(UNGUARDED):
                self.load(d, 0, n % len(d.sets))
            self.call(lib, job, d)
            n += 1
            self._sync()
        self._signals(lib)  # kept for its samples: not blamed on a contender timed next
        return n

    def samples(self, calls: list[tuple[Any, dict]], d: Data, flush: bool,
                picks: list[int] | None = None) -> tuple[list[float], list[str]]:
        """One timed call (ms) per ``(lib, job)`` in ``calls``, in order. Before each: a
        randomly chosen input set (``picks``: the input sets, see ``Data.input_set``, when
        given) loaded into buffer set 0 (outputs poisoned), then the L2
        (CPU: last-level cache) flushed when ``flush``; CUDA events around the call on the
        GPU, a monotonic clock on the CPU; after it, its outputs verified (``verify``; not
        the reference contender's, which returns its result rather than writing the outputs).
        Returns the times and, per call that failed verification, what was wrong."""
        guarded = not calls[0][1].get(UNGUARDED)
        picks = picks or [self.rng.randrange(len(d.sets)) if guarded else 0 for _ in calls]
        if not guarded:  # bench/check_cost.py: the timing of kopt before the guards
            return self._unguarded_samples(calls, d, flush), []
        oks: list[Any] = []  # per call: a 0-dim bool tensor (True: the reference contender)
        times: list[float] = []
        if self.is_cuda:
            evs = []
            for (lib, job), k in zip(calls, picks):
                self._prep(d, k, flush)
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                self.call(lib, job, d)
                e.record()
                evs.append((s, e))
                oks.append(True if isinstance(lib, RefCall) else
                           self.verify(d, 0, k, job["tolerance"]))
            torch.cuda.synchronize()
            times = [s.elapsed_time(e) for s, e in evs]
        else:
            for (lib, job), k in zip(calls, picks):
                self._prep(d, k, flush)
                t0 = time.perf_counter_ns()
                self.call(lib, job, d)
                times.append((time.perf_counter_ns() - t0) / 1e6)
                lazy = "" if isinstance(lib, RefCall) else (self.reopen(d.bufs[0])
                                                            or self._signals(lib))
                oks.append(False if lazy else
                           True if isinstance(lib, RefCall) else
                           self.verify(d, 0, k, job["tolerance"]))
        bad = [f"{job.get('job_key', '?')}: " + (self.lazy or (
               f"a timed call on input set {k + 1} gave wrong output (outputs are poisoned "
               "before and verified after every timed call)"))
               for ok, (_, job), k in zip(oks, calls, picks) if not bool(ok)]
        return times, bad

    def unreadable(self, buf: Buffers) -> str:
        """CPU: why an output of ``buf`` cannot be read right after a call (its pages
        protected, to be computed on their first read by a fault handler: attack MODE 2),
        kept as ``self.lazy``; "" when every page can be read (and on the GPU). The kernel
        reads a byte of each page (:func:`_unreadable_at`), which fails on a protected page
        instead of faulting into the candidate's handler."""
        if self.is_cuda:
            return ""
        for n, t in buf.outputs.items():
            if t.numel() and _unreadable_at(t.data_ptr(), t.numel() * t.element_size()):
                self.lazy = (f"solve returned with output {n!r} unreadable (its pages "
                             "protected: computed on their first read, after the call); "
                             "write every output before returning")
                return self.lazy
        return ""

    def reopen(self, buf: Buffers) -> str:
        """CPU, after a timed call: every page of ``buf``'s outputs made readable and
        writable again (workers.native ``restore_rw``: guard markers removed, protection key
        0, this thread's PKRU cleared, mprotect), so that the verification's reads cannot
        fault into a handler of the candidate's (attack MODE 2; the red team's protection-key
        and guard-region forms): a page it protected holds the poison the load wrote (a
        guarded one: zeros), and the sample fails verification. A page
        no longer mapped is kept as ``self.lazy`` and returned; "" otherwise. One system call
        where :meth:`unreadable` asks the kernel to read a byte of every page (0.9 ms for an
        8 MB output, more than the 0.8 ms call of the main job's vector_add); the check's
        calls keep that probe, whose verdict (`escaped`) names the breach. Without the
        native helpers: :meth:`unreadable`."""
        if self.native is None:
            return self.unreadable(buf)
        err = native.restore_rw(native.storage_ranges(buf.outputs.values()))
        if err:
            self.lazy = (f"solve returned with an output page no longer mapped "
                         f"({os.strerror(err)}); write every output before returning")
        return self.lazy if err else ""

    def _signals(self, lib: Any) -> str:
        """CPU, right after code of ``lib`` ran (its load, a call): why it left a handler of
        its own for a signal a fault or trap on its outputs raises (workers.native
        ``handlers_changed``: SIGSEGV, SIGBUS, SIGTRAP, SIGILL, SIGFPE, SIGSYS, or one
        that could not be read), kept for that
        library and as ``self.lazy``; "" when it never did (and on the GPU, and for None).
        Such a handler computed outputs on their first read, after the call's timing
        window: pages left protected, a file mapping laid over the outputs and truncated
        (SIGBUS; red-team round 6: the contest `ok` at 50x the honest speed, the outside
        clock cleared 6 of 9 blocks), a hardware breakpoint (SIGTRAP). The harness restarts
        after such a job (``_serve``): what the code left there is not the next one's."""
        if self.native is None or lib is None or isinstance(lib, RefCall):
            return ""
        changed = native.handlers_changed()
        if changed:
            self.signal_escapes[id(lib)] = (
                f"solve left a handler of its own for {', '.join(changed)} (outputs computed "
                "in a fault or trap handler on their first read, after the call, are not "
                "timed); a kernel must not install signal handlers")
        why = self.signal_escapes.get(id(lib), "")
        if why:
            self.lazy = why
        return why

    def _prep(self, d: Data, k: int, flush: bool) -> None:
        """The harness's work before a timed call: input set ``k`` loaded into buffer set 0,
        then the cache flushed (``flush``, :meth:`flush`)."""
        self.load(d, 0, k, stream=flush)
        if flush:
            self.flush(d.bufs[0])

    def flush(self, buf: Buffers) -> None:
        """Leave no line of what the next call reads or writes in any cache. CPU: every
        cache line of ``buf``'s storages (input copies, outputs with their canaries)
        written back and invalidated (workers.native: CLFLUSHOPT / DC CIVAC), which costs in
        proportion to the candidate's data, not to the cache; without an evictor, and on
        the GPU (whose L2 the host cannot evict by line), ``flush_buf`` (twice the
        last-level cache) zeroed."""
        if self.flush_buf is not None:
            self.flush_buf.zero_()
            return
        native.evict(native.storage_ranges([*buf.inputs.values(), *buf.outputs.values()]))

    def _unguarded_samples(self, calls: list[tuple[Any, dict]], d: Data, flush: bool
                           ) -> list[float]:
        """Samples as kopt took them before the guards (no input restored, no output verified),
        for bench/check_cost.py only: what the guards cost is the difference."""
        if not self.is_cuda:
            out = []
            for lib, job in calls:
                if flush:
                    self.flush(d.bufs[0])
                t0 = time.perf_counter_ns()
                self.call(lib, job, d)
                out.append((time.perf_counter_ns() - t0) / 1e6)
            return out
        evs = []
        for lib, job in calls:
            if flush:
                self.flush(d.bufs[0])
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            self.call(lib, job, d)
            e.record()
            evs.append((s, e))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in evs]

    def time(self, lib: Any, job: dict, d: Data, call_ms: float) -> dict:
        """Warm-up, then samples in batches of up to 5 until the median is stable
        (workers.timing.should_stop) and the replay verdict decided (workers.replay), or the
        budget is spent; each timed call, with chance ``Q_UNSEEN``, on an input set this
        artifact has never been called on (:class:`_Unseen`), at a place drawn at random;
        the observers called around each batch, batches one of them calls disturbed (NVML:
        throttled) set aside. ``call_ms``: the first checked call's time, which sizes the
        batches to the job's budget. Returns the samples' figures (ms), ``unseen_ms`` (the
        calls on never-seen sets), ``replay_state``, and every timed call in order
        (``calls_ms``) with the places of those on never-seen sets (``unseen_at``). Raises
        _Wrong when a timed call's output is wrong, _TooSlow when not even ``min_samples``
        fit in the budget."""
        t = job["timing"]
        guarded = not (job.get(UNGUARDED) or isinstance(lib, RefCall)) and bool(d.unseen)
        mix = _Unseen(self, lib, job, d) if guarded else None
        t0 = time.perf_counter()
        n_warm = self.warm_up(lib, job, d, call_ms)
        self.lap("warm_up", t0)
        self.check_cuda(lib, "warm-up")
        clean: list[float] = []  # samples of batches no observer called disturbed
        held: list[float] = []  # samples of disturbed (throttled) batches, set aside
        unseen: list[float] = []  # the calls on never-seen sets
        order: list[tuple[float, bool]] = []  # every timed call in order: (ms, never-seen)
        for o in self.observers:
            o.begin()
        state, cut = self._batches(lib, job, d, call_ms, mix, (clean, held, unseen, order))
        self.check_cuda(lib, "timing")
        # too few clean samples: report them all, flagged, rather than nothing
        throttled = len(clean) < t["min_samples"] and bool(held)
        after = split_after(clean, mix.pre) if mix and not throttled else None
        # samples past max_samples, made while the verdict was open, judged it but are not
        # the figure: a halving rung's 5 stay 5; after a split, the calls after it (slower
        # since its first call on new values) are the figure
        samples = clean + held if throttled else (after or clean)[:t["max_samples"]]
        if not samples:
            raise _TooSlow(call_ms, "the first sample")
        st = summarize(samples)
        self.sample_ms = samples
        out = {"median_ms": st.median_ms, "min_ms": st.min_ms, "iqr_ms": st.iqr_ms,
               "mean_ms": st.mean_ms, "n_samples": st.n_samples, "samples_ms": samples,
               "warmup_runs": n_warm, "throttled_samples": len(held), "throttled": throttled,
               "timed_calls": len(clean) + len(held) + len(unseen)}
        if mix:
            out.update(unseen_ms=unseen, seen_ms=clean + held, replay_state=state,
                       calls_ms=[x for x, _ in order],
                       unseen_at=[i for i, (_, new) in enumerate(order) if new])
        if after:
            out["split_at"] = mix.pre  # type: ignore[union-attr]
        for o in self.observers:
            out.update(o.results())
        if cut and len(samples) < t["min_samples"]:
            out["too_slow"] = "the next sample"
        elif state == "open" and not unseen:  # part of the check: never skipped
            out["too_slow"] = "the calls on input sets it has never seen"
        return out

    def _batches(self, lib: Any, job: dict, d: Data, call_ms: float, mix: _Unseen | None,
                 into: tuple[list[float], list[float], list[float], list[tuple[float, bool]]]
                 ) -> tuple[str, bool]:
        """:meth:`time`'s batches, their calls added to ``into`` (clean samples, disturbed
        ones, calls on never-seen sets, ms; and every call in order, (ms, on a never-seen
        set)) until the median is stable and the replay verdict
        (:func:`workers.replay.replay_state`) is not ``open``, or it is ``replayed``, or the
        budget, the batch cap or ``mix``'s never-seen sets (``UNSEEN_MAX``) run out. Returns
        the verdict (``clear`` without ``mix``: bench/check_cost.py's unguarded jobs) and
        whether the budget cut the samples."""
        t = job["timing"]
        clean, held, unseen, order = into
        flush = t.get("flush", True)
        # re-measure at most 2x over; and while the verdict is open, room for UNSEEN_MAX calls
        max_batches = 3 * math.ceil(t["max_samples"] / 5)
        open_batches = max_batches + math.ceil(UNSEEN_MAX / Q_UNSEEN / 5)
        state, batches = "open" if mix else "clear", 0
        while state != "replayed":
            after = split_after(clean, mix.pre) if mix else None
            stable = should_stop(after or clean, t["min_samples"], t["max_samples"],
                                 t["max_time_ms"], t["target_rel_error"])
            # open, or split with too few calls after it: more batches
            cap = open_batches if state == "open" or (after and not stable) else max_batches
            if (stable and state == "clear") or batches >= cap or (
                    stable and mix and mix.made >= UNSEEN_MAX) or sum(held) >= t["max_time_ms"]:
                break
            # never past max_samples, unless the verdict is still open
            batch = 5 if stable else max(1, min(5, t["max_samples"] - len(clean)))
            est = max(call_ms, max(clean[-5:] or held[-5:] or [0.0]))
            while batch and not self.fits(est, batch):
                batch -= 1
            if not batch:
                return state, True
            picks = mix.picks(batch, state != "clear") if mix else None
            for o in self.observers:
                o.before_batch()
            xs, bad = self.samples([(lib, job)] * batch, d, flush, picks)
            if bad:
                raise _Wrong(f"{bad[0]} ({len(bad)} of {batch} calls of this batch)")
            batches += 1
            new = [k >= len(d.sets) for k in picks] if picks else [False] * batch
            order += zip(xs, new)
            unseen += [x for x, n in zip(xs, new) if n]
            seen = [x for x, n in zip(xs, new) if not n]  # the batch's samples
            disturbed = [o.after_batch(seen) for o in self.observers]  # every one reads
            if mix and mix.pre is None and any(new):  # the seen calls before the first new
                mix.pre = len(clean) + (0 if any(disturbed) else new.index(True))
            (held if any(disturbed) else clean).extend(seen)
            if mix:
                # on the very samples the figure will be (a replayer that replays just over
                # half of those and computes the calls after them had a line from every
                # call's median, the honest one, and went `ok` at 0.02 ms against 0.24)
                figure = (split_after(clean, mix.pre) or clean)[:t["max_samples"]]
                # counted against every call on a seen set beside them (workers.replay)
                state = replay_state(figure or held, unseen, clean + held)
                mix.top_up(est, state != "clear")
        return state, False

    def full_time(self, lib: Any, job: dict, d: Data, n: int = PROBE_CALLS) -> dict:
        """Whether ``solve`` leaves work running when it returns (work on a stream of its
        own, or not waited for): ``n`` calls, each from an idle device to the end of a
        device-wide synchronize, host clock, against CUDA events on torch's stream; the
        same with no call gives the fixed cost. ``full_ms``: the median host time less that
        cost. ``escaped_ms``: the smallest (host - fixed - events) over the calls, what the
        events missed (about 0 for a kernel whose work is all on torch's stream). Nothing
        on the CPU backend (see "What is not caught")."""
        if not self.is_cuda:
            return {}
        def probe(fn: Callable[[], None]) -> tuple[float, float]:
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1e3, s.elapsed_time(e)

        fixed = min(probe(lambda: None)[0] for _ in range(3))
        host, missed = [], []
        for i in range(n):
            self.load(d, 0, i % len(d.sets))
            self._sync()
            h, ev = probe(lambda: self.call(lib, job, d))
            host.append(h - fixed)
            missed.append(h - fixed - ev)
        self.check_cuda(lib, "probe")
        return {"full_ms": statistics.median(host), "escaped_ms": max(0.0, min(missed))}

    def contest(self, job: dict) -> dict:
        """Time ``job["contest"]`` (jobs of one problem size, different artifacts) side by side:
        each is checked on every input set, warmed up, then ``job["rounds"]`` rounds each take
        one sample of every contender (rotating who goes first), the L2 flushed before every
        sample and every sample's output verified, so that drift in clocks, temperature or
        neighbours hits all alike (kopt.core.winner).

        Returns ``status`` and ``results``: per contender ``median_ms``, ``iqr_ms``,
        ``n_samples``, ``samples_ms``; a contender that fails its check or a timed call fails
        the contest (``wrong_result`` with the reason, ``failed``: the job keys at fault).

        With ``job["turns"]`` (one contender in a harness of its own, workers.turns), its
        artifact is loaded, checked and warmed up in a turn of its own once its inputs are
        made, and every round is a turn: a rival's processes, held meanwhile, cannot starve
        its checks (a red-team contender's spinners tried) or its samples.
        """
        entries, t = job["contest"], time.perf_counter()
        d, wb = self._contest_data(job, entries[0])
        t = self.lap("prepare", t)
        self.prepared()
        if job.get("turns"):  # its code loads, is checked and warms up in a turn of its own
            self.progress({"stage": "turn"})
            self.await_go()
        t = self.lap("wait", t)
        libs = [self.lib(e["artifact"], e["signature"]) for e in entries]
        self._deadline = math.inf
        failed = self._contest_checks(entries, libs, d)
        t = self.lap("check", t)
        if failed:
            return {"status": Status.WRONG_RESULT, "failed": [k for k, _ in failed],
                    "error": "; ".join(f"{k}: {m}" for k, m in failed)}
        for e, lib in zip(entries, libs):
            self.warm_up(lib, e, d)
        samples: list[list[float]] = [[] for _ in entries]
        unseen: list[list[float]] = [[] for _ in entries]
        t = self.lap("warm_up", t)
        bad = self._rounds(libs, entries, d, int(job["rounds"]), (samples, unseen),
                           bool(job.get("turns")), not job.get("alone"))
        t = self.lap("rounds", t)
        if bad:
            keys = sorted({b.split(":", 1)[0] for b in bad})
            return {"status": "wrong_result", "failed": keys, "error": "; ".join(bad)}
        for lib in libs:
            self.check_cuda(lib, "contest timing")
        out = []
        for xs, new in zip(samples, unseen):
            st = summarize(xs[:int(job["rounds"])])  # the rounds' samples are the figure
            out.append({"median_ms": st.median_ms, "iqr_ms": st.iqr_ms,
                        "n_samples": st.n_samples, "samples_ms": xs[:int(job["rounds"])],
                        "unseen_ms": new, "seen_ms": xs})
        status, failed = _contest_replays(libs, entries, out)
        if failed:
            return {"status": status, "failed": [k for k, _ in failed],
                    "error": "; ".join(f"{k}: {m}" for k, m in failed)}
        if job.get("turns") and job.get("witness"):
            out[0]["witness_ms"] = self._witness_calls(libs[0], entries[0], d,
                                                       out[0]["median_ms"], wb)
            self.lap("witness", t)
        return {"status": "ok", "error": "", "results": out}

    def _contest_checks(self, entries: list[dict], libs: list[Any], d: Data
                        ) -> list[tuple[str, str]]:
        """:meth:`contest`'s checks before its rounds: each contender's checked calls, then
        (none failing) the stress check and the other problem sizes; the failures, as
        (job key, why)."""
        failed = []
        for e, lib in zip(entries, libs):
            _, _, msg = self.checked_calls(lib, e, d)
            if msg:
                failed.append((e["job_key"], msg))
        failed += self._stress_check(entries, libs) if not failed else []
        return failed + (self._check_dims(entries, libs) if not failed else [])

    def _contest_data(self, job: dict, entry: dict) -> tuple[Data, Buffers | None]:
        """A contest's prepared problem (:meth:`prepare`) and, on a GPU whose contest takes
        witness turns, their buffers in exported device memory (:meth:`_export`), made now,
        before any candidate code of the contest runs: a rival's code that took the
        device's memory in its turn left the witness buffers of a contender that makes
        them later none (a red-team review). Raises JobError ``error`` where they cannot
        be made (no contender's doing)."""
        d = self.prepare(entry)
        if not (self.is_cuda and job.get("turns") and job.get("witness")):
            return d, None
        try:
            return d, self._buffers(entry["signature"], d.sets[0], d.shape_of, export=True)
        except devmem.DevMemError as e:
            raise JobError(Status.ERROR, f"the device could not make witness buffers: {e}"
                           ) from None

    def _witness_calls(self, lib: Any, entry: dict, d: Data, median_ms: float,
                       wb: Buffers | None = None) -> list[float]:
        """A contender's witness turns (:meth:`_witness_turns`) on buffer set 0 of ``d``; on
        a GPU on ``wb``, exported device memory of their own (made now where None; freed
        after), each call waited for on the device within its turn. Raises DevMemError."""
        if not self.is_cuda:
            return self._witness_turns(d.bufs[0], self.caller(lib, entry, d), median_ms)
        wb = wb or self._buffers(entry["signature"], d.sets[0], d.shape_of, export=True)
        d.bufs.append(wb)
        at = len(d.bufs) - 1
        try:
            call = functools.partial(_synced, self.caller(lib, entry, d, at))
            return self._witness_turns(wb, call, median_ms)
        finally:
            del d.bufs[at]  # by place: Buffers compare their tensors
            self._unexport([wb])

    # -- witness turns (workers.witness) -------------------------------------------------
    def _witness_turns(self, buf: Buffers, call: Callable[[], None], median_ms: float | None,
                       n: int | None = None) -> list[float]:
        """Witness turns (workers.witness), until the sandbox answers "enough" (or ``n``
        are taken): each names ``buf``'s inputs and outputs (address, bytes) and
        ``median_ms`` (its samples' median, which its answer must match), waits for "go"
        (the device actor wrote an input set there meanwhile), runs ``call`` once and says
        "witnessed" with its time (ms, this process's monotonic clock). Returns those
        times.

        Lean on purpose: the messages are encoded once (:attr:`post`), so that a turn costs
        the main thread little beyond ``call`` -- the judge's null turns (``call`` doing
        nothing) are taken off every contender's, and a contender whose turns cost less
        than this loop's (a loop of its own in C) is credited the difference (red-team
        round 20: 0.03-0.07 ms a turn, 4.1x on a 0.18 ms kernel)."""
        said = {"stage": "witness", "inputs": self._spans(buf.inputs),
                "outputs": self._spans(buf.outputs), "median_ms": median_ms}
        post = self.post
        said_b = _encoded({"progress": True, **said})
        times: list[float] = []
        while n is None or len(times) < n:
            if post is None:
                self.progress(said)
            else:
                post(said_b)
            if not self.await_turn():
                break
            t0 = time.perf_counter_ns()
            call()
            ms = (time.perf_counter_ns() - t0) / 1e6
            times.append(ms)
            if post is None:
                self.progress({"stage": "witnessed", "ms": ms})
            else:
                post(b'{"progress": true, "stage": "witnessed", "ms": %r}' % ms)
        return times

    def witness(self, job: dict) -> dict:
        """The judge's side of witness turns (workers.witness), in a harness that loads no
        candidate code. ``job["witness_of"]``: ``"sets"``, ``job["n"]`` input sets of
        ``job["entry"]`` (a contender's job) from seeds of ``os.urandom``, with expected
        outputs and bands, laid out with poisoned outputs, and ``job["copies"]`` x ``n``
        buffers for contenders' outputs, kept until the next ``"sets"``; answers their
        addresses (``src``: per set ``inputs``/``outputs``; ``dst``: per copy, per set,
        ``outputs``). ``"null"``: ``job["n"]`` witness turns with no call, on the sets'
        inputs and a contender's output buffers (rewritten by its outputs before any
        check). ``"check"``: every copy's outputs checked against its set's expected
        ones and canaries (``verdicts``: per copy, per set, "" or what differs). Raises
        JobError as :meth:`prepare` does, or ``error`` for a check with no sets."""
        what = job["witness_of"]
        if what == "sets":
            return self._witness_sets(job["entry"], (int(job["n"]), int(job.get("least") or 1)),
                                      int(job["copies"]), bool(job.get("fresh")))
        w = self._witnessing
        if w is None:
            raise JobError(Status.ERROR, "witness turns asked for before their input sets")
        if what == "null":
            # on a contender's output buffers, rewritten by its outputs before any check (a
            # GPU's: its outputs copied there from the stage's)
            self._witness_turns(w.stage or w.dst[0][0], functools.partial(_synced, _launched)
                                if self.is_cuda else _nothing, None, int(job["n"]))
            return {"status": "ok", "error": ""}
        tol, verdicts = w.entry["tolerance"], []
        for bufs in w.dst:
            d = Data({}, w.sets, bufs)
            verdicts.append([self.check(d, k, k, tol)[2] or (
                "" if _canaries_kept(bufs[k]) else "an output's canary was overwritten")
                for k in range(len(w.sets))])
        if self.is_cuda:
            torch.cuda.empty_cache()  # the check's float64 copies: not kept from contenders
        return {"status": "ok", "error": "", "verdicts": verdicts}

    def _witness_sets(self, entry: dict, n: tuple[int, int], copies: int, fresh: bool) -> dict:
        """:meth:`witness` ``"sets"``; on a GPU in exported device memory (:meth:`_export`),
        the last sets' freed first, and a stage for the null turns (``stage``: inputs and
        outputs; dst's buffers hold outputs only there). The last contest's sets are kept
        for the next of the same problem, signature, tolerance, sets and copies unless
        ``fresh``: their values were only ever written into contenders' sandboxes, each
        gone with its contest (a fresh one per contest), and drawing ``n`` sets of a GPU
        problem (768 MB each, the README's sweep) took seconds per contest. ``n``: the sets
        asked for and the least taken (on a GPU as many as fit, :meth:`_witness_fit`).

        Lean in device memory, which the contenders' harnesses need in the same contest (an
        honest winner's ran out of it on an H100, the judge holding about 28 GB of the
        README's sweep by its sets' sizes): no prepared problem of its own
        (:meth:`prepare`), sets drawn one at a time, each set's inputs dropped once copied
        into its ``src`` buffers, and no tolerance bands (the check compares every
        element); its cached blocks given back. Answers ``unjudged`` with the ``error``
        where only other processes' memory keeps the sets out (:meth:`_witness_fit`), or a
        GPU's memory ran out before the sizing could tell (a co-tenant holding all of it);
        what it made is freed when a draw fails. Only a failure that is the problem's own is
        answered ``witnessless``: sets too large for the device beside the contenders, and
        on a CPU ref.py's errors; any other leaves a GPU's contest unjudged (workers.judge
        ``prepare``)."""
        _same_reference(entry)
        key = (_data_key(entry, True), json.dumps([entry["signature"], entry["tolerance"]],
                                                  sort_keys=True), n, copies)
        w = self._witnessing
        if w is not None and not fresh and w.key == key and len(w.sets) == n[0]:
            return _witness_spans(self, w.src, w.dst)
        if w is not None:
            self._witnessing = None
            self._unexport(w.buffers())
        if self.is_cuda:  # the outside clock's prepared problems too (made again when
            self.data.clear()  # it next asks): memory of its own is no one else's to blame
            torch.cuda.empty_cache()  # its blocks to the contenders (exported memory is not)
        made: list[Buffers] = []
        try:
            self._witnessing = self._witness_draw(entry, key, n, copies, made)
        except _Short as e:
            self._unexport(made)
            return {"status": Status.ERROR, "error": str(e), "unjudged": True}
        except BaseException as e:  # exported memory is no Python object's to free: all of
            self._unexport(made)  # it (none is held while no sets are; a buffer set cut
            self._free_exported()  # short is in no list)
            if _out_of_memory(e) if self.is_cuda else _host_memory(e):  # whose: not known
                where = "device memory" if self.is_cuda else "memory"
                return {"status": Status.ERROR, "unjudged": True, "error": "the judge ran "
                        f"out of {where} drawing its witness sets ({str(e)[:200]})"}
            if isinstance(e, _TooLarge) or isinstance(e, JobError) and not self.is_cuda:
                # the problem's own: the contest goes without witness turns, said so. On a
                # GPU ref.py's errors are not (a cuBLAS handle or a module load refused for
                # want of memory another process holds reads as ref.py's: a red-team review)
                return {"status": e.status, "error": str(e), "witnessless": True}
            raise
        finally:
            if self.is_cuda:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()  # the dropped inputs, the reference's temporaries
        return _witness_spans(self, self._witnessing.src, self._witnessing.dst)

    def _witness_draw(self, entry: dict, key: tuple, n: tuple[int, int], copies: int,
                      made: list[Buffers]) -> Witnessing:
        """:meth:`_witness_sets`' sets and buffers, drawn and made; each buffer set is put in
        ``made`` as it is made (freed by the caller on failure). Raises JobError, _Short."""
        mod, ref = self.ref_module(entry["reference"]), Path(entry["reference"]).name
        scalars, shapes, _ = _problem(entry, True)
        sig, gpu = entry["signature"], self.is_cuda
        outs = [a for a in sig if a["kind"] == "output"]
        sets: list[InputSet] = []
        want = n[0]
        while len(sets) < want:
            seed = int.from_bytes(os.urandom(4), "little") >> 1
            s = self._draw(mod, entry, scalars, shapes, ref, True, [seed])[0][0]
            if not sets:  # the first set's sizes are every set's
                shape_of = _shape_of(outs, shapes, s)
                want = self._witness_fit(n, copies, s, sig, shape_of, entry["dims"])
            s.expected = {k: v.reshape(shape_of[k]) for k, v in s.expected.items()}
            made.append(self._buffers(sig, s, shape_of, gpu))
            self._load_set(made[-1], s, False)
            sets.append(s)
            if len(sets) > 1:
                s.inputs = {}
        src = list(made)
        # a contender's outputs land in dst: its input copies are never touched (no pages)
        dst = [[self._buffers(sig, sets[0], shape_of, gpu, not gpu) for _ in sets]
               for _ in range(copies)]
        made += [b for bufs in dst for b in bufs]
        for b in (b for bufs in dst for b in bufs):
            for g in b.guards.values():
                g.view(torch.uint8).fill_(0xA5)
        stage = self._buffers(sig, sets[0], shape_of, True) if gpu else None
        sets[0].inputs = {}
        return Witnessing(entry, key, sets, src, dst, stage)

    def _witness_fit(self, n: tuple[int, int], copies: int, s: InputSet, sig: list[dict],
                     shape_of: dict[str, list[int]], dims: dict) -> int:
        """How many witness sets like ``s`` (its inputs and expected outputs, drawn) a judge
        holds, of ``n`` (asked for, least): on a CPU :func:`_host_fit`. On a GPU as many as
        fit in
        :data:`WITNESS_SHARE` of the device's free memory (this process's cached blocks
        counted free) and in what ``copies`` contenders' harnesses leave of it (:func:`_rivals`),
        each set with the contenders' outputs and the null turns' stage beside; else the
        least, where they fit in what the contenders leave. Raises :class:`_TooLarge` where
        the least would not fit in the device's whole memory beside the contenders (the
        problem's sizes: no witness turns, said), and :class:`_Short` where only memory
        held by other processes keeps them out for :data:`SHORT_WAIT_S` (a contest then has
        no verdict: memory taken on purpose must not turn witness turns off)."""
        ins, outs, exp, per = _witness_bytes(s, sig, shape_of, copies)
        said = (f"the witness turns' input sets of dims {dims} ({per / 2**30:.2f} GiB each, "
                f"with the outputs of {copies} contender{'s' if copies != 1 else ''}; not "
                f"even {n[1]})")
        if not self.is_cuda:
            return _host_fit(n, per, said)
        stage = ins + outs
        rivals = _rivals(sig, shape_of, ins, exp, copies)
        # the device less what is never the contenders' or the sets' to have: this judge's
        # and the device actor's contexts, this judge's L2 flush buffer
        whole = mem_total = torch.cuda.mem_get_info()[1]
        whole -= 2 * CONTEXT_BYTES + (self.flush_buf.nbytes if self.flush_buf is not None else 0)
        deadline = time.perf_counter() + SHORT_WAIT_S
        while True:  # a harness just ended may still be giving its memory back (a sandbox's
            # kill waits for its first process only)
            free = torch.cuda.mem_get_info()[0] + torch.cuda.memory_reserved() \
                - torch.cuda.memory_allocated() + ins + exp  # this set's, drawn already
            fit = int((min(WITNESS_SHARE * free, free - rivals) - stage) // per)
            if fit >= n[1]:
                return min(n[0], fit)
            if int((free - rivals - stage - CONTEXT_BYTES) // per) >= n[1]:  # a margin
                return n[1]
            if (whole - rivals - stage) // per < n[1]:
                raise _TooLarge(Status.ERROR, f"{said} do not fit in the device's memory "
                               f"({mem_total / 2**30:.1f} GiB) beside the contenders' "
                               f"harnesses (about {rivals / 2**30:.1f} GiB)")
            if time.perf_counter() >= deadline:
                raise _Short(f"{said} do not fit in its free memory ({free / 2**30:.1f} GiB "
                             f"of {mem_total / 2**30:.1f}) beside the contenders' harnesses "
                             f"(about {rivals / 2**30:.1f} GiB): other processes hold the rest")
            time.sleep(SHORT_POLL_S)

    def _stress_check(self, entries: list[dict], libs: list[Any]) -> list[tuple[str, str]]:
        """Before contenders are timed side by side: each checked again (:meth:`checked_calls`)
        on ``N_SETS`` input sets from ref.py's ``stress_inputs(seed, **dims)``, a second
        distribution (heavy-tailed, real magnitudes) with seeds drawn here, where ref.py
        defines it: a kernel tuned on one distribution (a lower precision that holds for
        small values, a shortcut for a value range) is caught before it is named. Returns
        ``(job key, what failed)`` per contender that failed; none without the function.
        Raises JobError for a ref.py whose ``stress_inputs`` or reference fails on them."""
        if not entries or entries[0].get(UNGUARDED) or not hasattr(
                self.ref_module(entries[0]["reference"]), STRESS_INPUTS):
            return []
        seed = self.rng.randrange(1 << 20, 1 << 31)
        return self._checked_on(entries, libs, {INPUTS_FN: STRESS_INPUTS, "seed": seed},
                                f"on inputs from ref.py's {STRESS_INPUTS}() (seeds {seed}, "
                                f"{seed + 1}), correct on inputs()", keep=False)

    def _check_dims(self, entries: list[dict], libs: list[Any]) -> list[tuple[str, str]]:
        """Before contenders are timed side by side: each checked (:meth:`checked_calls`) at
        every problem size of sweep.yaml's ``check_dims`` (``entries[0]["check_dims"]``),
        sizes it was never tuned or timed on: a kernel that hard-codes the tuned sizes fails
        there. Returns ``(job key, what failed)`` per contender that failed; none without
        ``check_dims``. Raises JobError for a ref.py that fails at those sizes."""
        failed: list[tuple[str, str]] = []
        for alt in [] if entries[0].get(UNGUARDED) else entries[0].get("check_dims") or []:
            if alt != entries[0]["dims"]:
                failed += self._checked_on(
                    entries, libs, {"dims": alt}, f"at dims {alt} (sweep.yaml check_dims: a "
                    "problem size it was not tuned on)", skip={k for k, _ in failed})
        return failed

    def _checked_on(self, entries: list[dict], libs: list[Any], change: dict, said: str,
                    skip: set[str] = frozenset(), keep: bool = True) -> list[tuple[str, str]]:
        """Each contender of ``entries`` (``libs``: their loaded artifacts; those whose job
        key is in ``skip`` left out) checked by :meth:`checked_calls` on the input sets of its
        job with ``change`` applied (other dims, another inputs function and seed);
        ``(job key, said: what failed)`` per one that failed. ``keep``: the sets stay cached
        for later contests (False: drawn for this check alone, dropped after it)."""
        d = self.prepare({**entries[0], **change})
        failed = []
        for e, lib in zip(entries, libs):
            if e["job_key"] not in skip:
                _, _, msg = self.checked_calls(lib, {**e, **change}, d)
                if msg:
                    failed.append((e["job_key"], f"{said}: {msg}"))
        if not keep:
            self.data.pop(d.key, None)
        return failed

    def clock(self, job: dict) -> dict:
        """This process's half of the outside clock: ``job["clock_calls"]`` calls of the
        artifact, each prepared as a timed sample is (an input set loaded into buffer set
        0, outputs poisoned, the cache flushed: :meth:`_prep`), outputs verified after the
        last (see below); with ``clock_loads_only``, the
        same preparations and no call (what the outside figure of a block must not count);
        with ``clock_paced``, each call timed on its own (:meth:`_clock_paced`).
        A progress message ``{"stage": "clock"}`` goes to the sandbox right before the
        first, and the calls start once the sandbox answers "go" (:attr:`await_go`); the
        sandbox (outside this process, workers.sandbox) times from its send of "go" to the
        arrival of this process's "clocked", sent once the calls are done (``outside_ms``):
        load that delays either process only lengthens the block. (It timed from the
        arrival of the "clock" message: a read of it delayed by load, or by a candidate's
        threads loading the machine, shortened the block, the direction that clears a
        patched clock.) Calls prepared as samples are not told apart from samples by
        their preparation (a candidate that skipped its work when its outputs were not
        poisoned since its last call passed an earlier form of this block). Every call
        of the block is on an input set drawn for it from ref.py's
        ``inputs()`` with a seed no call has seen (:meth:`_block_sets`; as many as
        :func:`clock_sets` allows, reused in random order beyond that): the distribution
        honest kernels were written for, and nothing a candidate can replay. Calls on the
        check's sets lost to one that sensed the hold before the block and replayed there
        (a red-team trial, 4 of 4); calls on them scaled by a random factor lost to one that
        recognised the scaled sets and skipped them (6 of 6) or replayed a sort's order
        (the factor keeps every comparison, 4 of 4), and failed an honest select by a 0/1
        mask written as ``m * a + (1 - m) * b`` (the factor made the mask 0.5-0.9). Besides
        the last call, :data:`CLOCK_CHECKED` calls picked at random are verified: their
        outputs copied aside right after the call (in both blocks, so that the copies cost
        the same in each) and checked, after the sandbox's clock has stopped, against the
        reference run on their inputs (:meth:`_clock_checked`). A candidate that skips a
        fraction f of the calls passes with chance about (1 - f) ** (CLOCK_CHECKED + 1): at
        the 96 % a 1/100 clock needs to stay within ``CLOCK_FACTOR`` (kopt.core.clock),
        about once in 400,000 blocks. On the CPU every output page is made readable
        again after each call (:meth:`reopen`, in both blocks): outputs left on protected
        pages, computed only when a copy or the check read them, cleared a 1/100 clock
        (14 of 15). Code that reads this process's memory can still find which calls are
        checked (see "What is not caught").

        Returns ``status`` (``ok``; ``wrong_result`` or ``escaped`` with the reason),
        ``calls``, ``inside_ms`` (this process's own clock over the block, ms) and
        ``clock_sets``: the most calls a block of this size can make each on a set of its
        own (:meth:`_block_sets`), which the caller keeps its blocks within
        (kopt.core.clock)."""
        t = time.perf_counter()
        d = self.prepare(job)
        self.prepared()
        n, calls = int(job["clock_calls"]), not job.get("clock_loads_only")
        lib = self.lib(job["artifact"], job["signature"]) if calls else None
        self.lap("prepare", t)  # with the artifact's load
        out = self._clocked(lib, job, d, n)  # (its draws time the sets: _sets_max reads it)
        return {"calls": n, **out, "clock_sets": self._sets_max(d)}

    def _clocked(self, lib: Any, job: dict, d: Data, n: int) -> dict:
        """:meth:`clock`'s block of ``n`` calls of ``lib`` (None: the preparations alone)
        once ``d`` is prepared: its input sets drawn, the copies it keeps made, the block
        timed, its checks; returns ``inside_ms`` and the checks' ``status`` (and ``error``),
        each part's wall added to :attr:`parts` (:meth:`lap`)."""
        t = time.perf_counter()
        sets = self._block_sets(job, d, n, fresh=lib is not None)
        plan = sets[:n] + [sets[self.rng.randrange(len(sets))] for _ in range(n - len(sets))]
        self.rng.shuffle(plan)
        paced = bool(job.get("clock_paced"))
        kept = self._kept(d, n, paced)
        t = self.lap("draws", t)
        block = self._clock_paced if paced else self._clock_block
        inside_ms, lazy = block(lib, job, d, plan, kept)
        t = self.lap("block", t)
        checked = self._clock_checked(job, d, plan, kept if lib is not None else {}, lazy)
        self.lap("check", t)
        return {"inside_ms": inside_ms, **checked}

    def _kept(self, d: Data, n: int, paced: bool) -> dict[int, Buffers]:
        """The copies of buffer set 0's outputs and canaries a clock block of ``n`` calls
        keeps, by the call whose outputs each will hold: :data:`CLOCK_CHECKED` of the first
        ``n - 1`` picked at random (the last one's stay in the buffers), or with ``paced``
        every call's, as many as :func:`_copies` allows. Written once now: a first write
        inside the block would fault its pages in there (tens of ms for a 16 MB output),
        as many or as few as the allocator reuses."""
        picked = (self.rng.sample(range(n), min(n, _copies(d))) if paced
                  else self.rng.sample(range(n - 1), min(CLOCK_CHECKED, n - 1)))
        return {j: Buffers({}, {k: t.clone() for k, t in d.bufs[0].outputs.items()},
                           {k: t.clone() for k, t in d.bufs[0].guards.items()})
                for j in picked}

    def _block_sets(self, job: dict, d: Data, n: int, fresh: bool) -> list[InputSet]:
        """Input sets for a clock block of ``n`` calls: ``n`` drawn from ref.py's
        ``inputs()`` with seeds no call has seen (:meth:`held_seeds`), or as many as
        :func:`clock_sets` allows, without reference outputs (the block's checks make
        theirs). ``fresh``: drawn now, for a block of calls, ``n`` of them within the bytes
        the sets may hold: the drawing time this process measures does not count there (a
        thread of the candidate's holding Python's lock stretched it, and the block got 3
        sets to replay in random order: a red-team trial cleared a 1/100 clock 4 of 6; the
        caller sizes ``n`` by the second harness's ``clock_sets``). Else (the preparations
        alone, which no candidate's code sees) ``d.pool``, drawn once and reused. A seed
        whose ``inputs()`` fails is skipped for another (ref.py's fault, not the
        candidate's: the check's seeds never met it), up to ``n`` of them. The draw's time
        is the harness's own (:meth:`own`). Raises JobError as :meth:`prepare` does."""
        k = min(n, clock_sets(_set_bytes(d), 0.0) if fresh else self._sets_max(d))
        if not fresh and len(d.pool) >= k:
            return d.pool[:k]
        t0 = time.perf_counter()
        mod, sets, failed = self.ref_module(job["reference"]), [], 0
        while len(sets) < k:
            try:
                sets += self._draw(mod, job, d.scalars, d.shapes, Path(job["reference"]).name,
                                   False, self.held_seeds(job, 1))[0]
            except JobError:
                failed += 1
                if failed > k:
                    raise
        took = time.perf_counter() - t0
        self.own(took)
        if not fresh:
            d.pool, d.draw_s = sets, took / k
        return sets

    @staticmethod
    def _sets_max(d: Data) -> int:
        """:func:`clock_sets` for ``d``'s input sets."""
        return clock_sets(_set_bytes(d), d.draw_s)

    def _clock_block(self, lib: Any, job: dict, d: Data, plan: list[InputSet],
                     kept: dict[int, Buffers]) -> tuple[float, str]:
        """:meth:`clock`'s timed block: one call of ``lib`` (None: the preparations alone)
        per input set of ``plan``, each prepared as a sample is, its output pages made
        readable again after it (CPU), the outputs of the j-th copied into ``kept[j]`` where
        there is one; from the sandbox's "go" to the "clocked" this process says once they
        are done. Python's garbage collector is off meanwhile, as ``timeit`` turns it off
        while it times (Python's documentation of ``timeit.Timer.timeit``): a full collection
        in a process that imported torch takes 70-90 ms of CPU, and the loop's own
        allocations start one now and then (in one of 16 blocks of 2000 preparations of a
        small CPU kernel, 89 ms of its 352). One in a block of the preparations alone shrinks
        the calls' figure, or makes the calls' block read shorter than it: likely what
        cleared a 1/25 clock once, and made an honest kernel `suspect` once (preparations
        alone 387 ms, the calls' block of the same preparations 16 ms), in loaded test
        suites. Returns its own clock's ms and why an output page was gone ("": none)."""
        flush = job["timing"].get("flush", True)
        lazy = ""
        self._sync()
        self.progress({"stage": "clock"})
        self.await_go()
        gc.disable()
        try:
            t0 = time.perf_counter()
            for j, s in enumerate(plan):
                self._load_set(d.bufs[0], s, flush)
                if flush:
                    self.flush(d.bufs[0])
                if lib is not None:
                    self.call(lib, job, d)
                if not self.is_cuda:  # in both blocks: the same cost in each
                    lazy = self.reopen(d.bufs[0]) or self._signals(lib) or lazy
                    _read_all(d.bufs[0])
                if j in kept:
                    _keep(d.bufs[0], kept[j])
            if lib is not None:
                self.check_cuda(lib, "clock")
            self._sync()
            inside_ms = (time.perf_counter() - t0) * 1e3
        finally:
            gc.enable()
        # the outside clock stops here, before the checks; this process waits for the
        # sandbox's word that it read the time, so that a late read counts no check's work
        self.progress({"stage": "clocked"})
        self.await_go()
        return inside_ms, lazy if lib is not None else ""

    def _clock_paced(self, lib: Any, job: dict, d: Data, plan: list[InputSet],
                     kept: dict[int, Buffers]) -> tuple[float, str]:
        """:meth:`clock`'s paced form (``job["clock_paced"]``): each call of ``lib`` (None:
        the preparations alone) on an input set of ``plan`` is prepared as a sample is,
        before the clock of its own starts: this process says "call" and waits for the
        sandbox's "go", calls, makes its output pages readable again (CPU) and says
        "called"; the sandbox times each call from its "go" to that message
        (workers.sandbox ``outside_calls_ms``, and the CPU time of this process's threads
        meanwhile). Once the sandbox's "go" answers it, the j-th outputs are copied into
        ``kept[j]``: every call's (:meth:`clock` keeps a copy for each, as many as 1 GiB
        holds), all checked after the block, so that no call left undone lowers the figure
        (kopt.core.clock ``paced_blocks``); a thread left finishing a call's work after
        "called" has only the messages' round trip before the copy.

        Where a call costs far less than its preparation (an in/out table reloaded for a
        few rows, a 1M-element vector add's 13 ms of loads and flush for a 0.35 ms call), a
        block's calls less the preparations alone cannot resolve it (kopt.core.clock): a
        1/100 clock on that vector add was named best (red-team round 11). The outputs are
        not all read inside a call's clock here (a 16 MB table's read is a thousand times
        such a call, and its noise would be judged): outputs computed on their first read
        need a signal handler, which the filter refuses (workers.seccomp ``rt_sigaction``)
        and :meth:`_signals` finds, or a userfaultfd, which the filter refuses too. The
        whole is bracketed by "clock" / "clocked" as :meth:`_clock_block` is; GC off as
        there. Returns its own clock's ms over the calls and why an output page was gone
        ("": none)."""
        flush = job["timing"].get("flush", True)
        lazy, inside = "", 0.0
        self._sync()
        self.progress({"stage": "clock"})
        self.await_go()
        gc.disable()
        try:
            for j, s in enumerate(plan):
                self._load_set(d.bufs[0], s, flush)
                if flush:
                    self.flush(d.bufs[0])
                self._sync()
                self.progress({"stage": "call"})
                self.await_go()
                t0 = time.perf_counter()
                if lib is not None:
                    self.call(lib, job, d)
                    self.check_cuda(lib, "clock")
                if not self.is_cuda:  # in both harnesses: the same cost in each
                    lazy = self.reopen(d.bufs[0]) or self._signals(lib) or lazy
                self._sync()
                inside += (time.perf_counter() - t0) * 1e3
                self.progress({"stage": "called"})
                self.await_go()
                if j in kept:  # outside the call's clock (its CPU time read by then)
                    _keep(d.bufs[0], kept[j])
                    self._sync()
        finally:
            gc.enable()
        self.progress({"stage": "clocked"})
        self.await_go()
        return inside, lazy if lib is not None else ""

    def _clock_checked(self, job: dict, d: Data, plan: list[InputSet],
                       kept: dict[int, Buffers], lazy: str) -> dict:
        """``status`` and ``error`` of a clock block that called on the sets of ``plan``:
        ``escaped`` when an output page was gone (``lazy``), else the last call's outputs
        (still in buffer set 0) and those ``kept`` checked against the reference run on
        their inputs. No ``kept``: nothing to check (the preparations alone). The
        references' time is the harness's own (:meth:`own`)."""
        n = len(plan)
        if lazy:
            return {"status": Status.ESCAPED, "error": f"outside the contest's rounds: {lazy}"}
        checks = {n - 1: d.bufs[0], **kept} if kept else {}
        t0 = time.perf_counter()
        try:
            for j in sorted(checks, reverse=True):
                if self._wrong(job, d, plan[j], checks[j]) is True:
                    which = "the last one's" if j == n - 1 else f"call {j + 1}'s"
                    return {"status": Status.WRONG_RESULT,
                            "error": f"of {n} calls outside the contest's rounds, {which} "
                                     f"outputs (on a fresh input set, seed {plan[j].seed}) "
                                     "were wrong"}
        finally:
            self.own(time.perf_counter() - t0)
        return {"status": Status.OK, "error": ""}

    def _wrong(self, job: dict, d: Data, s: InputSet, buf: Buffers) -> bool | None:
        """Whether the outputs in ``buf`` of a call on input set ``s`` (no reference outputs
        yet) lie outside the tolerance band of the reference's outputs for ``s``, or a
        canary was touched; None where the reference fails on ``s`` (ref.py's fault, not the
        candidate's: that call goes unchecked)."""
        try:
            with torch.no_grad():
                expected, _ = self._reference(self.ref_module(job["reference"]), job,
                                              dict(s.inputs), d.scalars, d.shapes,
                                              Path(job["reference"]).name)
        except JobError:
            return None
        made = InputSet(s.seed, s.inputs, expected)
        _bands([made], [a for a in job["signature"] if a["kind"] == "output"], d.shape_of,
               job["tolerance"])
        return not bool(self.within(buf, made, job["tolerance"]))

    def _rounds(self, libs: list[Any], entries: list[dict], d: Data, rounds: int,
                into: tuple[list[list[float]], list[list[float]]], turns: bool = False,
                watch: bool = True) -> list[str]:
        """A contest's rounds: each takes one sample of every contender (rotating who goes
        first), each of a candidate's calls with chance ``Q_UNSEEN`` on an input set new to it
        (:class:`_Unseen`, as in its own job: a candidate honest there that kept its results
        replayed the check's sets side by side and won, attack MODE 5), the samples and those
        calls added to ``into`` per contender (ms), until each has ``rounds`` samples, and
        more while a contender's replay verdict is open (workers.replay), up to its
        ``UNSEEN_MAX`` calls. Returns what failed verification (empty: none).

        ``turns`` (a contender in a harness of its own, workers.turns): before each round a
        ``{"stage": "turn"}`` progress message, and the round starts once the sandbox
        answers "go" (:attr:`await_go`), given while every rival's sandbox is held still;
        with ``watch`` (rivals: not a contender judged alone, whose patched clock is left
        to the closing's outside clock) its clocks looked at first (:meth:`_clock_intact`)."""
        samples, unseen = into
        flush = entries[0]["timing"].get("flush", True)
        mixes = [None if isinstance(lib, RefCall) or e.get(UNGUARDED) or not d.unseen
                 else _Unseen(self, lib, e, d) for lib, e in zip(libs, entries)]
        k, r = len(entries), 0
        while min(map(len, samples)) < rounds or any(
                m and m.made < UNSEEN_MAX and replay_state(xs[:rounds], new, xs) == "open"
                for m, xs, new in zip(mixes, samples, unseen)):
            order = [(r + i) % k for i in range(k)]
            picks = [mixes[i].picks(1, replay_state(samples[i][:rounds], unseen[i],
                                                    samples[i]) != "clear")[0]
                     if mixes[i] else self.rng.randrange(len(d.sets)) for i in order]
            if turns:
                if watch:
                    self._clock_intact()
                self.progress({"stage": "turn"})
                self.await_go()
            xs, bad = self.samples([(libs[i], entries[i]) for i in order], d, flush, picks)
            if bad:
                return bad
            for i, x, p in zip(order, xs, picks):
                (unseen if p >= len(d.sets) else samples)[i].append(x)
                if turns and k == 1 and p >= len(d.sets):  # its own harness: never used again
                    _release(d.input_set(p))
            for m, xs, new in zip(mixes, samples, unseen):
                if m:
                    m.top_up(max(xs[-5:], default=0.0),
                             replay_state(xs[:rounds], new, xs) != "clear")
            r += 1
        return []

    def _clock_intact(self) -> None:
        """In a contest of contenders each in a harness of its own (workers.turns), before
        each round: raise JobError ``suspect`` (fatal) when a clock of :attr:`watch` (the
        time module's, ``torch.cuda.Event``'s), or any other object it watches (this
        module's globals, :class:`Harness`'s methods), is no longer the one taken at start. Only
        this contender's code ran in this process, and its figures, unlike in a shared
        harness, are compared with rivals timed by unpatched clocks: a red-team contender
        that scaled ``time.perf_counter_ns`` by 1/2 from its first call won so at 2x."""
        changed = replaced(self.watch, self.c_watch)
        if changed:
            raise JobError(Status.SUSPECT, _clock_replaced(changed), fatal=True)

    def _device_used(self) -> int | None:
        """Device memory this process holds outside torch's caching allocator (bytes): the
        candidates' own allocations, module code and the context. This process's figure
        from NVML (:meth:`workers.observers.Nvml.process_bytes`), so that another process
        making a context or allocating on the same GPU (a second harness, ncu's target,
        another user's job) does not count as the candidate's leak; where NVML cannot say
        (no per-process figure, process ids of another namespace), the whole device's
        (``cudaMemGetInfo``). None on the CPU backend."""
        if not self.is_cuda:
            return None
        if self._nvml is None:
            self._nvml = Nvml()
        mine = self._nvml.process_bytes(os.getpid())
        if mine is None:
            free, total = torch.cuda.mem_get_info()
            mine = total - free
        return mine - torch.cuda.memory_reserved()

    def reset_persisting_l2(self) -> None:
        """GPU: no part of the L2 left set aside for persisting accesses by the last job's code
        (``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize)``, an access policy window):
        the limit back to 0 and every persisting line made normal (the driver API's
        ``cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)`` and
        ``cuCtxResetPersistingL2Cache``, on the context torch made current), so a candidate's
        data cannot stay in L2 through the flush into the next candidate's, or its own next,
        job. Where the device has no persisting L2 (before sm_80) both calls fail and change
        nothing."""
        if not self.is_cuda:
            return
        if self._libcuda is None:
            self._libcuda = ctypes.CDLL("libcuda.so.1")
        self._libcuda.cuCtxSetLimit(ctypes.c_int(CU_LIMIT_PERSISTING_L2_CACHE_SIZE),
                                    ctypes.c_size_t(0))
        self._libcuda.cuCtxResetPersistingL2Cache()

    def run(self, job: dict) -> dict:
        """Run one job; returns an outcome dict with ``status`` (never raises for kernel faults).

        Statuses beyond the check's (:meth:`_verdict`): ``too_slow`` (a call is known but
        the check, warm-up and ``min_samples`` do not fit in ``timing.timeout_s``: the
        samples that fit are reported), ``escaped`` (``solve`` returned before its work was
        done: work on a stream of its own; CPU: outputs written after it returned;
        ``full_ms`` says what it really takes), ``replayed`` (calls on input values it had
        never seen were more than ``REPLAY_FACTOR`` slower than on seen ones), ``leaked``
        (device memory outside torch grew by more than ``LEAK_BYTES``: ``leaked_bytes``;
        the harness restarts). Figures measured before a fault stay in the outcome."""
        self.reset_persisting_l2()
        if self.native is not None:  # a change since the last job's looks is not this job's
            native.handlers_changed()
        self.parts, t0 = {}, time.perf_counter()
        if (special := self._special(job)) is not None:
            return special(job)
        d = self.prepare(job, reference=not job.get("no_reference"), probe=bool(job.get(PROBE)))
        self._deadline = time.perf_counter() + job["timing"]["timeout_s"]
        self._drawn = 0
        self.prepared()
        if job.get("prepare_only"):
            return {"status": "ok", "error": "", "notes": d.notes,
                    "outputs": {n: list(t.shape) for n, t in d.bufs[0].outputs.items()}}
        lib = self.lib(job["artifact"], job["signature"])
        self.lazy = ""
        used0 = self._device_used()
        out: dict[str, Any] = {"input_sets": len(d.sets)}
        try:
            t = self.lap("prepare", t0)  # with the artifact's load
            err, call_ms, msg = self.checked_calls(lib, job, d)
            t = self.lap("check", t)
            out["max_abs_err"], out["max_rel_err"] = err, self.worst_rel
            if msg:
                return {**out, "status": "escaped" if self.lazy else "wrong_result",
                        "error": msg}
            if job.get("check_only"):
                return {**out, "status": "ok", "error": ""}
            used1 = self._device_used()
            out.update(self.time(lib, job, d, call_ms))
            t = self.lap("time", t)
            bad = self.tampered(d, 0, self.last_set)
            if bad:  # the next candidate still gets clean inputs: they are copied per call
                return {**out, "status": "wrong_result", "error": bad + " (during timing)"}
            if not job.get(UNGUARDED):
                out.update(self.full_time(lib, job, d))
                self.lap("probe", t)
        except _Wrong as e:
            return {**out, "status": "escaped" if self.lazy else "wrong_result",
                    "error": f"{e} (during timing)"}
        except _TooSlow as e:
            return {**out, **self._slow(e, job, out)}
        except JobError as e:
            leak = self._leak(used0)
            if leak:
                return {**out, "status": "leaked", "leaked_bytes": leak, "fatal": True,
                        "error": f"{e} after leaking {leak / 2**20:.0f} MiB of device memory"}
            raise
        return self._verdict(out, job, call_ms, self._leak(used1))

    def _special(self, job: dict) -> Callable[[dict], dict] | None:
        """The method that runs ``job`` when it is not a timed candidate's: a contest, a
        clock block, ref.py's timing or a witness job (None for a timed candidate)."""
        return self.contest if job.get("contest") else self.clock if job.get(
            "clock_calls") else self.time_reference if job.get("time_reference") else \
            self.witness if job.get("witness_of") else None

    def _verdict(self, out: dict[str, Any], job: dict, call_ms: float, leak: int
                 ) -> dict[str, Any]:
        """A job's status and error from what :meth:`run` measured (``out``, kept in the
        outcome): ``too_slow``, ``escaped``, ``replayed`` or ``leaked`` (``leak`` bytes of
        device memory outside torch grew over the job), else ok."""
        status, error = Status.OK, ""
        where = out.pop("too_slow", "")
        if where:
            status, error = "too_slow", self.slow_text(call_ms, job, out["n_samples"], where)
        if out.get("escaped_ms", 0.0) > max(ESCAPE_MS, ESCAPE_SHARE * out["median_ms"]):
            status, error = "escaped", (
                f"solve returned before its work was done: CUDA events on torch's stream "
                f"measured {out['median_ms']:.4g} ms, the device was busy {out['full_ms']:.4g} "
                "ms per call (work on a stream of its own, or left running); launch on the "
                "current stream (stream 0 / the one torch gives) and finish before returning"
                if self.is_cuda else
                f"solve returned before its outputs were written: its calls took "
                f"{out['median_ms']:.4g} ms, {out['full_ms']:.4g} ms up to the moment its "
                "outputs could be read (outputs written by a thread of its own, or on the "
                "first read of protected memory); write every output before returning")
        state = out.pop("replay_state", "")
        if state == "replayed":
            status, error = "replayed", replay_text(out["samples_ms"], out["unseen_ms"],
                                                    out["seen_ms"])
        elif state == "open" and status == Status.OK:
            status, error = "too_slow", "no replay verdict: " + open_text(
                out["samples_ms"], out["unseen_ms"], out["seen_ms"])
        if leak:
            status = "leaked"
            error = (f"device memory outside torch grew by {leak / 2**20:.0f} MiB over "
                     f"{out['warmup_runs'] + out['n_samples']} calls (never freed); the harness "
                     "is restarted so that no later candidate pays for it")
            out.update(leaked_bytes=leak, fatal=True)
        return {**out, "status": status, "error": error}

    def time_reference(self, job: dict) -> dict:
        """Time ref.py's ``contender(**kwargs)`` (what a user gets from the library, e.g.
        ``A @ B`` through cuBLAS), else its ``reference``, as candidates are timed: the same
        inputs, warm-up, samples, stopping rule, cache flush, clock and observers
        (:meth:`time`). Not its checks: it allocates and returns its result rather than
        writing solve's outputs, so no output is verified and no canary or const input is
        watched. Returns an outcome dict: the timing figures, ``impl`` (``contender`` or
        ``reference``) and ``max_abs_err`` / ``max_rel_err`` of its first call's result
        against the reference outputs of input set 1 (0 when it is the reference); status
        ``ok`` or ``too_slow``. Raises JobError (``error``) naming ref.py for a function that
        raises or returns no tensor per output. The Python threads ref.py's code starts
        meanwhile are its own (:class:`RefThreads`)."""
        with self.ref_threads:
            return self._time_reference(job)

    def _time_reference(self, job: dict) -> dict:
        """:meth:`time_reference`'s work."""
        d = self.prepare(job)
        self._deadline = time.perf_counter() + job["timing"]["timeout_s"]
        self.prepared()
        mod = self.ref_module(job["reference"])
        impl = "contender" if callable(getattr(mod, "contender", None)) else "reference"
        self.progress({"stage": "timing_ref", "impl": impl})  # names it if the process dies
        lib = RefCall(getattr(mod, impl), job["signature"], Path(job["reference"]).name)
        self.load(d, 0, 0)
        self._sync()
        t0 = time.perf_counter()
        got = lib.run(d.bufs[0], d.scalars)
        self._sync()
        call_ms = (time.perf_counter() - t0) * 1e3
        self.progress({"stage": "called", "call_ms": call_ms})
        out: dict[str, Any] = {"impl": impl, "input_sets": len(d.sets),
                               **lib.errors(got, d.sets[0].expected)}
        try:
            out.update(self.time(lib, job, d, call_ms))
        except _TooSlow as e:
            return {**out, **self._slow(e, job, out)}
        if out.pop("too_slow", False):
            return {**out, "status": "too_slow",
                    "error": self.slow_text(call_ms, job, out["n_samples"])}
        return {**out, "status": "ok", "error": ""}

    def _leak(self, before: int | None) -> int:
        """Bytes of device memory (outside torch) gained since ``before``, less what drawing
        more held-back input sets took (``_drawn``), 0 under ``LEAK_BYTES``."""
        if before is None:
            return 0
        try:
            torch.cuda.synchronize()
            grown = (self._device_used() or 0) - before - self._drawn
        except Exception:
            return 0
        return grown if grown > LEAK_BYTES else 0

    def _slow(self, e: _TooSlow, job: dict, out: dict) -> dict:
        """The outcome of a candidate whose calls are too slow for the job's budget: its
        first call's time as the figure (one sample), status ``too_slow``."""
        ms = e.call_ms
        return {"status": "too_slow", "median_ms": ms, "min_ms": ms, "iqr_ms": 0.0,
                "mean_ms": ms, "n_samples": 1, "samples_ms": [ms],
                "error": self.slow_text(ms, job, 0, e.where)}


    def slow_text(self, call_ms: float, job: dict, n: int, where: str = "the next sample"
                  ) -> str:
        """The ``too_slow`` line: the call's time, the budget (``timing.timeout_s``) spent when
        ``where`` did not fit in what was left of it, and the ``n`` samples measured (0: the
        first checked call's time is the figure)."""
        t = job["timing"]
        at, need = self._cut
        spent = at - (self._deadline - t["timeout_s"])
        got = (f"measured with {n} sample{'s' if n != 1 else ''}" if n else
               "its first call's time is the figure")
        return (f"one call takes {call_ms:.4g} ms; {spent:.3g} s of the timing.timeout_s="
                f"{t['timeout_s']:g} s budget were spent (calls, and copying and verifying "
                f"input sets between them) when {where} (about {need:.3g} s) did not "
                f"fit; {got} (min_samples={t['min_samples']}). Not a hang: raise "
                "timing.timeout_s to measure it fully")


class _Unseen:
    """The never-seen input sets one artifact's timed calls draw from (workers.replay): each
    call, with chance ``Q_UNSEEN`` and never two in a row, on the next of ``ready`` (sets of
    :meth:`Harness.fresh_sets`, new to this artifact), at most ``UNSEEN_MAX`` per job. Sets
    are drawn ahead (two ready before the first timed call), and more only after a batch
    that spent one (:meth:`top_up`): a draw before a batch, or in it, would tell a replayer
    that a call on new values is coming. ``made``: the calls on never-seen sets so far."""

    def __init__(self, h: Harness, lib: Any, job: dict, d: Data):
        self.h, self.lib, self.job, self.d = h, lib, job, d
        self.ready = h.fresh_sets(job, d, UNSEEN_READY)
        self.made, self.last = 0, False
        self.pre: int | None = None  # the clean samples before the first call on a new set

    def picks(self, n: int, active: bool = True) -> list[int]:
        """The input sets (``Data.input_set`` indices) of the next ``n`` timed calls; none
        never-seen unless ``active`` (the verdict is not ``clear`` yet: once a call on new
        values was as fast as the samples, more prove nothing and cost a draw each)."""
        out = []
        for _ in range(n):
            new = (active and self.ready and not self.last and self.made < UNSEEN_MAX
                   and self.h.rng.random() < Q_UNSEEN)
            out.append(self.ready.pop(0) if new else self.h.rng.randrange(len(self.d.sets)))
            self.made += bool(new)
            self.last = bool(new)
        return out

    def top_up(self, call_ms: float, active: bool = True) -> None:
        """After a batch (``call_ms``: a call's time): never-seen sets drawn until
        ``UNSEEN_READY`` are ready (none past ``UNSEEN_MAX`` calls), then, where that drew
        any, one untimed call on a seen set: the draw's own work (ref.py, torch's threads
        woken) slows the call after it."""
        want = min(UNSEEN_READY - len(self.ready), UNSEEN_MAX - self.made - len(self.ready))
        if want <= 0 or not active:
            return
        self.ready += self.h.fresh_sets(self.job, self.d, want)
        h = self.h
        if h.fits(call_ms, 1):
            h.load(self.d, 0, h.rng.randrange(len(self.d.sets)))
            h.call(self.lib, self.job, self.d)
            h._sync()


class RefCall:
    """ref.py's timed function (``contender`` or ``reference``) in the harness's place of a
    loaded artifact (:meth:`Harness.call`): called on a buffer set's inputs (in/out ones
    too) and the scalars, by name; its result, a fresh tensor, is what it returns. It has
    the error interface of a kernel-mode launcher (``take_error``, ``synchronize``):
    nothing to report, a failure is an exception, raised as JobError (``error``)."""

    def __init__(self, fn: Callable, sig: list[dict], ref_name: str):
        self.fn, self.sig, self.ref_name = fn, sig, ref_name
        self.names: list[str] | None = None  # the arguments it takes, found at the first call

    def run(self, buf: Buffers, scalars: dict[str, Any]) -> Any:
        """One call on ``buf``'s inputs; returns the function's result. Its signature is read
        once (at the first call, outside the timed ones), not in the timed interval."""
        given = {**buf.inputs, **scalars}
        if self.names is None:
            self.names = list(_ref_kwargs(self.fn, self.sig, given, self.ref_name))
        kwargs = {n: given[n] for n in self.names}
        try:
            with torch.no_grad():
                return self.fn(**kwargs)
        except BaseException as e:  # noqa: B036 -- ref.py's fault, whatever it raised
            code = getattr(self.fn, "__code__", None)
            raise JobError("error", f"{self.ref_name}: {self.fn.__name__}() raised {e!r}"
                           + raised_at(e, code.co_filename if code else None, self.ref_name)
                           + " (timed as the reference)") from None

    def errors(self, got: Any, expected: dict[str, torch.Tensor]) -> dict[str, float]:
        """``max_abs_err`` and ``max_rel_err`` (:func:`abs_rel_error`) of the result ``got``
        (a tensor, or a dict by output name) against ``expected``, worst over the outputs.
        Raises JobError when an output is missing or not a tensor of the expected size."""
        returned = got
        if isinstance(got, torch.Tensor) and len(expected) == 1:
            got = {next(iter(expected)): got}
        worst_abs, worst_rel = 0.0, 0.0
        for n, exp in expected.items():
            g = got.get(n) if isinstance(got, dict) else None
            if not isinstance(g, torch.Tensor) or g.numel() != exp.numel():
                like = ", as reference() does" if self.fn.__name__ != "reference" else ""
                raise JobError("error", f"{self.ref_name}: {self.fn.__name__}() must return "
                               f"output {n!r} as a tensor of {exp.numel()} elements{like}; "
                               f"it returned {_described(returned)}")
            a, r = abs_rel_error(g.reshape(exp.shape).to(exp.device), exp)
            worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
        return {"max_abs_err": worst_abs, "max_rel_err": worst_rel}

    def take_error(self) -> str:
        """No launch error to report (an exception was raised at the call)."""
        return ""

    def synchronize(self) -> str:
        """Wait for the device (CUDA); nothing to report."""
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return ""


def _differ(name: str, got: torch.Tensor, exp: torch.Tensor, idx: int, bad: int,
            err: float, band: dict | None = None) -> str:
    """The check's line for output ``name``: ``bad`` elements differ, the first at flat
    index ``idx``, max abs error ``err``, and the band they were checked with (``band``:
    atol, rtol; None: compared exactly)."""
    pos = tuple(int(i) for i in _unravel(idx, got.shape))
    how = (f"band atol {band['atol']:g} + rtol {band['rtol']:g} x |expected|" if band else
           "compared exactly")
    return (f"{name}: {bad} of {got.numel()} elements differ (first at {pos}: got "
            f"{float(got.flatten()[idx])!r}, expected {float(exp.flatten()[idx])!r}); "
            f"max abs err {err:.3g} ({how})")


def abs_rel_error(got: torch.Tensor, exp: torch.Tensor) -> tuple[float, float]:
    """(max ``|got - exp|``, max ``|got - exp| / |exp|`` over the elements where ``exp`` is not
    0), in float64; NaN counts as infinite. Both 0.0 for empty tensors."""
    if not got.numel():
        return 0.0, 0.0
    g, e = got.double(), exp.double()
    diff = _abs_diff(g, e)
    nz = (e != 0) & torch.isfinite(e)
    rel = float((diff[nz] / e[nz].abs()).max()) if bool(nz.any()) else 0.0
    return float(diff.max()), rel


_PAGE = os.sysconf("SC_PAGE_SIZE")
class _OutputArena:
    """CPU: one call's outputs (with their canaries) side by side in pages of their own
    (page-aligned, no other object in their pages). A candidate that protects its outputs'
    pages to compute them on their first read (attack MODE 2) protects the arena then, and
    nothing the harness or another thread of it touches between the call and the check:
    its fault handler runs only on a read of the outputs themselves, which the check makes
    through the kernel (``process_vm_readv``, :func:`_unreadable_at`), not by faulting.
    With each output in an allocation of its own, the range between two outputs held other
    objects of the heap, and a read of one of them set the handler off first in 3 of 16
    jobs beside a CPU hog (whether it did depended on the heap's layout).

    Args:
        parts: ``(elements, dtype)`` per output, in the order :meth:`take` hands them out.
    """

    def __init__(self, parts: list[tuple[int, torch.dtype]]):
        self.slots: list[tuple[int, int, torch.dtype]] = []  # (offset, bytes, dtype)
        pos = 0
        for numel, dtype in parts:
            size = numel * torch.empty(0, dtype=dtype).element_size()
            self.slots.append((pos, size, dtype))
            pos += -(-size // 64) * 64  # each output 64-byte aligned (a cache line)
        nbytes = max(-(-pos // _PAGE) * _PAGE, _PAGE)
        raw = torch.empty(nbytes + _PAGE, dtype=torch.uint8)
        start = -raw.data_ptr() % _PAGE  # the first page boundary inside the allocation
        self.pages = raw[start:start + nbytes]
        self.taken = 0

    def take(self) -> torch.Tensor:
        """The next output's flat buffer (its elements, then its canary)."""
        off, size, dtype = self.slots[self.taken]
        self.taken += 1
        return self.pages[off:off + size].view(dtype)


_VM_READ: list[Any] = []  # libc's process_vm_readv, once found; [None] where unusable


_SCRATCH = ctypes.create_string_buffer(1024)
_IOVECS: dict[tuple[int, int], list[Any]] = {}  # (ptr, nbytes) -> _page_iovecs


def _page_iovecs(ptr: int, nbytes: int) -> list[Any]:
    """Arrays of at most 1024 (IOV_MAX) one-byte iovecs, one per page of ``[ptr, ptr +
    nbytes)``, made once per buffer (the last 64 buffers kept)."""
    key = (ptr, nbytes)
    if key not in _IOVECS:
        pages = list(range(ptr - ptr % _PAGE, ptr + nbytes, _PAGE))
        pages[0] = ptr
        if len(_IOVECS) >= 64:
            _IOVECS.pop(next(iter(_IOVECS)))
        _IOVECS[key] = [(IoVec * len(c))(*[IoVec(a, 1) for a in c])
                        for c in (pages[i:i + 1024] for i in range(0, len(pages), 1024))]
    return _IOVECS[key]


def _unreadable_at(ptr: int, nbytes: int) -> bool:
    """Whether a page of ``[ptr, ptr + nbytes)`` in this process cannot be read: the kernel
    copies one byte of each page (``process_vm_readv`` on this process, no FOLL_FORCE), which
    stops at a page without read access (PROT_NONE), where a read from Python would fault
    into the candidate's handler. Where that call is not available (no libc symbol, a
    seccomp filter: ENOSYS, EPERM), ``write(2)`` of each page's first byte into a pipe
    asks the same (EFAULT on a page the kernel cannot read): the check never passes
    for want of a way to run."""
    if not _VM_READ:
        fn = getattr(ctypes.CDLL(None, use_errno=True), "process_vm_readv", None)
        if fn is not None:
            fn.restype = ctypes.c_ssize_t
        _VM_READ.append(fn)
    fn = _VM_READ[0]
    if fn is None:
        return _unwritable_from(ptr, nbytes)
    local = IoVec(ctypes.addressof(_SCRATCH), len(_SCRATCH))
    for remote in _page_iovecs(ptr, nbytes):
        got = fn(os.getpid(), ctypes.byref(local), 1, remote, len(remote), 0)
        if got == len(remote):
            continue
        if got < 0 and ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):
            _VM_READ[0] = None  # not allowed here: the pipe's way from now on
            return _unwritable_from(ptr, nbytes)
        return True
    return False


def _unwritable_from(ptr: int, nbytes: int) -> bool:
    """:func:`_unreadable_at` by ``write(2)``: one byte of each page of ``[ptr, ptr +
    nbytes)`` written into a pipe of this process (and read back); True at the first
    page the kernel cannot read (EFAULT)."""
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    try:
        for remote in _page_iovecs(ptr, nbytes):
            for v in remote:
                if libc.write(w, ctypes.c_void_p(v.base), ctypes.c_size_t(1)) != 1:
                    return True
                os.read(r, 1)
        return False
    finally:
        os.close(r)
        os.close(w)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A bool tensor's bytes (uint8), to compare exactly: a bool tensor reads any nonzero
    byte, the poison 0x5A / 0xA5 too, as True (an unwritten element passed where True was
    expected); other tensors as they are."""
    return t.view(torch.uint8) if t.dtype == torch.bool else t


def _abs_diff(g: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``|g - e|`` per element: infinite where either is NaN or they differ by an infinity,
    0 where both are the same infinity (``inf - inf`` is NaN)."""
    diff = torch.where(g == e, torch.zeros_like(g), (g - e).abs())
    return torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)


def raised_at(e: BaseException, path: str | None, name: str) -> str:
    """`` at NAME line L: `CODE` `` for the deepest frame of ``e``'s traceback in the file
    ``path`` (ref.py: where in it the error came from, below it torch's own frames); ``""``
    when no frame is in that file."""
    import linecache

    if not path:
        return ""
    where = None
    for fs in traceback.extract_tb(e.__traceback__):
        if os.path.realpath(fs.filename) == os.path.realpath(path):
            where = fs
    if where is None or where.lineno is None:
        return ""
    code = " ".join(linecache.getline(where.filename, where.lineno).split())
    code = code if len(code) <= 120 else code[:117] + "..."
    return f" at {name} line {where.lineno}" + (f": `{code}`" if code else "")


def _ref_kwargs(fn: Callable, sig: list[dict], given: dict[str, Any], ref_name: str
                ) -> dict[str, Any]:
    """Of ``given`` (inputs, in/out initial values and scalars by name), what ref.py's ``fn``
    (``reference`` or ``contender``) takes (all of it when it takes ``**kwargs``). Raises
    JobError naming what it takes that kopt cannot give."""
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return dict(given)
    missing = [p.name for p in params.values() if p.name not in given
               and p.default is p.empty
               and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if missing:
        outs = {a["name"] for a in sig if a["kind"] == "output"}
        why = []
        for m in missing:
            if m in outs:
                why.append(f"{m!r} is an output of solve; an in/out argument reaches "
                           f"{fn.__name__}() only when inputs() returns it (its initial "
                           "values)")
            else:
                why.append(f"{m!r} is not an argument of solve")
        raise JobError("error", f"{ref_name}: {fn.__name__}() takes {', '.join(missing)} "
                       f"that kopt cannot give: {'; '.join(why)}")
    return {k: v for k, v in given.items() if k in params}

def _not_taken(job: dict, inputs: dict, kwargs: dict, ref_name: str) -> list[str]:
    """A note naming the inputs of ``inputs`` and the scalars of sweep.yaml's ``scalars:``
    (``job["scalars"]``) that ref.py's ``reference()`` does not take (``kwargs``: what it
    was given): its expected outputs cannot depend on them, while solve's do (a new user's
    ``reference(x, y, N)`` for saxpy's ``a * x + y`` was accepted without a word). A note,
    not an error: a reference may hold such a value fixed on purpose. [] when it takes
    them all."""
    left = [k for k in inputs if k not in kwargs]
    left += [k for k in job.get("scalars") or {} if k not in kwargs and k not in left]
    if not left:
        return []
    return [f"{ref_name}: reference() takes no {', '.join(repr(k) for k in left)}, which "
            "solve gets: its expected outputs cannot depend on "
            f"{'it' if len(left) == 1 else 'them'}; add {'it' if len(left) == 1 else 'them'} "
            "to reference()'s arguments unless it holds the value fixed on purpose"]


def _set_bytes(d: Data) -> int:
    """The bytes of one of ``d``'s input sets (its inputs, in/out ones included)."""
    return sum(t.numel() * t.element_size() for t in d.sets[0].inputs.values())


def _copies(d: Data) -> int:
    """How many copies of ``d``'s outputs (and canaries) a paced clock job may keep: as
    many as fit in :data:`CLOCK_SET_BYTES`, one at least."""
    size = sum(t.numel() * t.element_size() for t in d.bufs[0].outputs.values())
    size += sum(t.numel() * t.element_size() for t in d.bufs[0].guards.values())
    return max(1, CLOCK_SET_BYTES // max(1, size))


def clock_sets(size: int, draw_s: float) -> int:
    """How many input sets of ``size`` bytes, each drawn in ``draw_s`` seconds (0: not yet
    known), one clock block may draw (workers.harness ``Harness.clock``): as many as fit in
    :data:`CLOCK_SET_BYTES` and in :data:`CLOCK_DRAW_S` of drawing, and
    :data:`CLOCK_MIN_SETS` at least. (An sgemm's 4096^2 inputs take about 0.2 s to draw
    from a CPU generator: a block of 8 such sets, before and after each of its tries,
    would add seconds to every contender's clock.)"""
    k = CLOCK_SET_BYTES // max(1, size)
    if draw_s > 0:
        k = min(k, int(CLOCK_DRAW_S / draw_s))
    return max(CLOCK_MIN_SETS, k)


def _read_all(buf: Buffers) -> int:
    """CPU: every 8-byte word (or byte) of ``buf``'s outputs read by this thread, in user
    mode; returns their sum (wrapping), which nothing uses. Right after each call of a clock
    block: outputs left to be computed on their first read (a fault or trap handler of the
    candidate's: a hardware breakpoint on their first bytes, pages that fault) are computed
    inside the block, where the outside clock counts them, and not later, when the checks
    read only the calls they check (a red-team trial: a 1/100 clock cleared 3 of 4 times,
    the other calls never computed)."""
    total = 0
    for t in buf.outputs.values():
        b = t.reshape(-1).view(torch.uint8)
        try:
            total += int(b.view(torch.int64).sum())
        except RuntimeError:  # a size or offset not of whole words
            total += int(b.sum())
    return total


def _keep(buf: Buffers, into: Buffers) -> None:
    """Copy ``buf``'s outputs and canaries into ``into``'s (same shapes)."""
    for n, t in buf.outputs.items():
        into.outputs[n].copy_(t)
    for n, t in buf.guards.items():
        into.guards[n].copy_(t)


def _bands(sets: list[InputSet], outs: list[dict], shape_of: dict[str, list[int]],
           tol: dict) -> None:
    """Give each set in ``sets`` its expected outputs' shapes (``shape_of``) and tolerance
    bands (``lo``/``hi``, :func:`_band`) for the output arguments ``outs`` (signature
    entries) it has expected values for; in place."""
    for s in sets:
        for a in outs:
            n = a["name"]
            if n in s.expected:
                s.expected[n] = s.expected[n].reshape(shape_of[n])
                s.lo[n], s.hi[n] = _band(s.expected[n], getattr(torch, a["dtype"]),
                                         band_of(tol, n))


def _contest_replays(libs: list[Any], entries: list[dict], results: list[dict]
                     ) -> tuple[str, list[tuple[str, str]]]:
    """Each contender's replay verdict (workers.replay) on its figure's samples and its calls
    on never-seen sets, counted against all its calls on seen sets (``results``:
    ``samples_ms``, ``unseen_ms``, ``seen_ms``, ms): ``replayed``, or
    ``too_slow`` for one still open when those calls ran out. Returns the status and (job
    key, why) per contender at fault; the reference contender (ref.py's) is not judged."""
    replays, open_ = [], []
    for lib, e, r in zip(libs, entries, results):
        if isinstance(lib, RefCall) or e.get(UNGUARDED):
            continue
        xs, new, pool = r["samples_ms"], r["unseen_ms"], r["seen_ms"]
        state = replay_state(xs, new, pool)
        if state == "replayed":
            replays.append((e["job_key"], replay_text(xs, new, pool)))
        elif state == "open":
            open_.append((e["job_key"], "no replay verdict: " + open_text(xs, new, pool)))
    return (Status.REPLAYED, replays) if replays else (Status.TOO_SLOW, open_)


class _TooSlow(Exception):
    def __init__(self, call_ms: float, where: str):
        super().__init__(where)
        self.call_ms, self.where = call_ms, where


class _Wrong(Exception):
    pass


def _band(exp: torch.Tensor, out: torch.dtype, tol: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``expected -/+ (atol + rtol*|expected|)`` in the precision of the output's dtype
    ``out`` (float32 for 16-bit floats), rounded one ulp outwards so that every value the
    float64 check accepts passes. Integer and bool outputs: an empty band and the expected
    values in the output's dtype (compared exactly)."""
    if not out.is_floating_point:
        return torch.empty(0, device=exp.device), exp.to(out)
    e = exp.double()
    slack = tol["atol"] + tol["rtol"] * e.abs()
    dt = out if torch.finfo(out).bits >= 32 else torch.float32
    lo = torch.nextafter((e - slack).to(dt), torch.tensor(-math.inf, dtype=dt, device=e.device))
    hi = torch.nextafter((e + slack).to(dt), torch.tensor(math.inf, dtype=dt, device=e.device))
    # an infinite expected value: its slack is infinite too, and inf - inf is NaN, a band no
    # value lies in (an honest kernel that matched it was `wrong_result`); the value itself,
    # as the check (torch.isclose) takes it
    inf = torch.isinf(e)
    if bool(inf.any()):
        lo, hi = torch.where(inf, e.to(dt), lo), torch.where(inf, e.to(dt), hi)
    return lo, hi


def _zeros_pass(s: InputSet, name: str) -> bool:
    """Whether an output of all zeros lies in input set ``s``'s tolerance band of output
    ``name`` (integers and bools: whether every expected value is 0)."""
    if s.lo[name].numel():
        return bool(((s.lo[name] <= 0) & (s.hi[name] >= 0)).all())
    return not bool(s.hi[name].any())


def _dtype_problem(got: torch.dtype, want: torch.dtype, name: str, ctype: str) -> str:
    """Why a reference output of dtype ``got`` cannot stand for solve's ``ctype*`` output
    (``want``): "!..." refuses, plain text is a note; "" when fine."""
    def kind(dt: torch.dtype) -> str:
        return "float" if dt.is_floating_point else "bool" if dt == torch.bool else "integer"

    if kind(got) != kind(want):
        return (f"!reference() returned output {name!r} as {got} but solve's {name} is "
                f"{ctype}* (torch.{str(want).removeprefix('torch.')}); return a "
                f"{kind(want)} tensor")
    if kind(got) == "float" and torch.finfo(got).bits < torch.finfo(want).bits:
        return (f"reference output {name!r} is {got}, lower precision than solve's {ctype} "
                f"({want}): the check compares against rounded values; compute the "
                "reference in the output's precision or higher")
    return ""


def _by_output(ref: Any, names: list[str], ref_name: str) -> dict:
    """What ``reference()`` returned (``ref``), as a dict by output name: one tensor is
    solve's one output (of ``names``). Raises JobError for anything else, for a key that is
    no output and for an empty dict: an in/out output left out is expected unchanged, and
    a misnamed key (a new user's ``{"out": ...}`` for output ``y``) made the unchanged
    input the expected output, every correct kernel `wrong_result` and one that did
    nothing `ok`."""
    if isinstance(ref, torch.Tensor):
        if len(names) != 1:
            raise JobError("error", f"{ref_name}: reference() returned one tensor but solve "
                           f"has outputs {names}; return a dict")
        return {names[0]: ref}
    if not isinstance(ref, dict):
        raise JobError("error", f"{ref_name}: reference() must return a tensor or a dict")
    if unknown := sorted(str(k) for k in ref if k not in names):
        raise JobError("error", f"{ref_name}: reference() returned {unknown}, which solve "
                       f"does not write (its outputs: {names}); key each output by its "
                       "argument's name in solve, or return one tensor")
    if not ref:
        raise JobError("error", f"{ref_name}: reference() returned an empty dict; return "
                       f"solve's outputs ({names}) keyed by name, or one tensor")
    return ref


def _described(got: Any) -> str:
    """What a ref.py function returned, in a few words for an error line."""
    if isinstance(got, torch.Tensor):
        return f"a tensor of {got.numel()} elements"
    if isinstance(got, dict):
        return f"a dict with keys {sorted(str(k) for k in got)}"
    return f"a {type(got).__name__}"


def _not_dense(t) -> str:
    """What kind of tensor without values ``t`` is ("meta", "nested", a sparse layout), or ""
    for a dense strided tensor (the only kind kopt can compare and copy to a device)."""
    if t.is_meta:
        return "meta"
    if t.is_nested:
        return "nested"
    return "" if t.layout == torch.strided else str(t.layout)


def _solve_args(job: dict, d: Data, buf: Buffers) -> list[Any]:
    """``solve``'s arguments in ``job``'s signature order: scalars from ``d``, the addresses
    of ``buf``'s inputs and outputs."""
    return [d.scalars[a["name"]] if a["kind"] == "scalar" else
            (buf.inputs if a["kind"] == "input" else buf.outputs)[a["name"]].data_ptr()
            for a in job["signature"]]


def _witness_spans(h: Harness, src: list[Buffers], dst: list[list[Buffers]]) -> dict:
    """The answer to a witness ``"sets"`` job: ``src`` and ``dst`` named as witness turns
    name buffers (``Harness._spans``)."""
    return {"status": "ok", "error": "",
            "src": [{"inputs": h._spans(b.inputs), "outputs": h._spans(b.outputs)} for b in src],
            "dst": [[h._spans(b.outputs) for b in bufs] for bufs in dst]}


def _synced(call: Callable[[], None]) -> None:
    """``call`` once, then a wait for everything it queued on the GPU."""
    call()
    torch.cuda.synchronize()


def _nothing() -> None:
    """A witness turn's call in the judge's null turns."""


def _launched() -> None:
    """A GPU witness turn's call in the judge's null turns: one empty kernel, so that its
    launch and the device's switch to this process's context are in the null turn too."""
    torch.cuda._sleep(1)


def _spans(ts: dict[str, torch.Tensor]) -> dict[str, list[int]]:
    """Each tensor's first byte's address and size in bytes, by name."""
    return {n: [t.data_ptr(), t.numel() * t.element_size()] for n, t in ts.items()}


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _unravel(idx: int, shape: torch.Size) -> list[int]:
    out = []
    for s in reversed(shape):
        out.append(idx % s)
        idx //= s
    return list(reversed(out)) or [idx]


def _scalar(a: dict, v: Any) -> Any:
    return float(v) if a["dtype"].startswith(("float", "bfloat")) else int(v)


def _llc_bytes() -> int:
    """Size of the last-level CPU cache in bytes (sysfs), 32 MiB when unknown."""
    best = 0
    for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            s = (idx / "size").read_text().strip()
            mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1], 1)
            best = max(best, int(s.rstrip("KM")) * mult)
        except (OSError, ValueError):
            continue
    return best or (32 << 20)


def device_info(h: Harness) -> dict:
    """Name, SM arch, memory, L2, multiprocessors, platform and device class of this device."""
    import platform

    machine = platform.machine()
    if h.is_cuda:
        p = torch.cuda.get_device_properties(0)
        sm = p.major * 10 + p.minor
        name = p.name
        return {"backend": "cuda", "name": name, "sm": sm, "arch": f"sm_{sm}",
                "memory_bytes": int(p.total_memory), "l2_bytes": int(p.L2_cache_size),
                "multiprocessors": int(p.multi_processor_count), "platform": machine,
                "device_class": f"{_slug(name)}-sm{sm}", "torch": str(torch.__version__),
                "cuda": torch.version.cuda, "node": platform.node()}
    name = _cpu_name()
    return {"backend": "cpu", "name": name, "sm": None, "arch": "host", "platform": machine,
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "l2_bytes": _llc_bytes(), "multiprocessors": torch.get_num_threads(),
            "cpu_flush": ("the candidate's buffers evicted by cache line" if h.native else
                          f"2x the last-level cache zeroed ({native.WHY_NOT})"),
            "device_class": f"cpu-{machine}", "torch": str(torch.__version__), "cuda": None,
            "node": platform.node()}


def _slug(name: str) -> str:
    import re

    s = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def _known_keys(got: dict, sig: list[dict], ref_name: str) -> None:
    """Raise JobError (``error``) naming ref.py when inputs() returned a key that is no
    pointer argument of solve (a typo would leave the real input unset or silently
    ignored)."""
    names = [a["name"] for a in sig if a["kind"] != "scalar"]
    extra = [k for k in got if k not in names]
    if extra:
        raise JobError("error", f"{ref_name}: inputs() returned {', '.join(map(repr, extra))}, "
                       "which no pointer argument of solve is named; its keys are argument "
                       f"names: {', '.join(names) or '(none)'} (rename or drop the rest)")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _same_reference(job: dict) -> None:
    """Raise JobError (``error``) when the job's ref.py is not the file its run started with
    (``reference_sha256``, kopt.run.builder ``job_base``): outputs made by an edited
    reference would judge this candidate by another standard than the run's others."""
    want = job.get("reference_sha256")
    if not want:
        return
    got = file_sha256(job["reference"])
    if got is not None and got != want:
        raise JobError(Status.ERROR, f"{job['reference']}: {REF_CHANGED} (sha256 "
                       f"{want[:12]} then, {got[:12]} now)")


def ref_stamp(path: str) -> tuple:
    """``path`` with its file's modification time and size: a key that changes when ref.py is
    edited (the same path and no file: a key of its own, the import then fails naming it)."""
    try:
        st = os.stat(path)
    except OSError:
        return (path, None, None)
    return (path, st.st_mtime_ns, st.st_size)


def main(rfd: int, wfd: int, device: str, listen_fd: int | None = None,
         prepare: str | None = None) -> None:
    """Serve jobs over the pipe until EOF. Messages: ("run", job) -> outcome dict; ``job`` a
    workers.records.RunJob or the job dict of :meth:`Harness.run`.

    ``listen_fd``: a listening Unix socket (workers.prestart): the harness sets up the
    device first, then makes the inputs and reference outputs of the job dicts pickled in
    ``prepare`` (the sweep's reference checks, so that the device actor's finds them made)
    in a thread while it takes the first connection, says it is ready and serves it
    (``rfd``/``wfd`` unused) once they are made. A ref.py that hangs there is then the
    first job's hang, timed out naming ref.py as without a prestart (before, the actor
    waited 180 s for a hello that never came, then started a harness of its own); one
    that fails is left to the first job's own preparation, which reports it.
    """
    h: Harness | None = None
    error = ""
    token = prestart.read_token() if listen_fd is not None else ""
    try:
        h = Harness(device, progress=lambda msg: answer(wconn, {"progress": True, **msg}))
        info = device_info(h)
    except Exception as e:
        error = f"harness start failed: {e!r}"
    ahead = None
    if h is not None and prepare:
        ahead = threading.Thread(target=_prepare_ahead, args=(h, prepare), daemon=True,
                                 name="kopt-prepare-ahead")
        ahead.start()
    if listen_fd is not None:
        with socket.socket(fileno=listen_fd) as listener:
            conn = prestart.accept_actor(listener, token)
        rfd = conn.detach()
        wfd = os.dup(rfd)
    _die_with(rfd)
    rconn, wconn = Connection(rfd, writable=False), Connection(wfd, readable=False)
    if h is not None and os.environ.get(seccomp.ENV) == "1":  # set up: now the filter
        why = seccomp.install(keep=() if device == "cpu" else seccomp.UNTRIED_ON_GPU)
        info["seccomp"] = "on" if not why else f"off: {why}"
    if h is None:
        answer(wconn, {"ready": False, "error": error})
        return
    answer(wconn, {"ready": True, "pid": os.getpid(), "info": info,
                   **({"proof": prestart.proof(token)} if token else {})})
    if ahead is not None:
        ahead.join()  # the first job's wait (its budget: the sandbox's prepare timeout)
    _serve(h, rconn, wconn)


# the time module's clocks the harness times with (and others a patch would hit alike)
CLOCK_NAMES = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time",
               "time_ns", "process_time", "process_time_ns", "thread_time", "thread_time_ns")
# the names :func:`rewritten` gives the clocks of :func:`watched` (the time module's, and
# ``torch.cuda.Event``'s methods on a GPU)
CLOCKS = ("time.", "Event.")
# the standard modules whose functions the harness's figures and answers go through
# (medians, quantiles, the sets' draws, the answers' encoding, the calls of candidates'
# libraries and of workers/native.c's), watched as workers' own are
STD_WATCHED = (builtins, math, statistics, random, json, functools, ctypes)
_WATCHED_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)
# the constants of workers' modules that are watched too (UPPER_CASE names of these types;
# a memoryview: workers.objmem ``MEMORY``, through which :func:`c_swapped` reads)
_CONSTANT_TYPES = (int, float, str, bytes, tuple, frozenset, memoryview)
# module globals of workers that their own code sets at run time (``global``): not watched
RUNTIME_GLOBALS = frozenset({"WHY_NOT", "_IMPORTER"})
_GONE = object()  # a watched name no longer in its owner's namespace
# torch's functions, classes and modules that workers' code names (the checks, the draws,
# the device memory's figures and the clock's synchronizations go through them), by their
# path under ``torch``; a test keeps this in step with workers' sources. Each is watched as
# workers' own are (object and code); the rest of torch's public namespaces by object only
# (:func:`_shallow`)
TORCH_CALLED = (
    "Generator", "OutOfMemoryError", "Size", "Tensor", "_C", "as_tensor", "compile", "cuda",
    "device", "dtype", "empty", "empty_like", "equal", "fft", "finfo", "full", "full_like",
    "get_num_threads", "isclose", "isfinite", "isinf", "isnan", "linalg", "nextafter", "nn",
    "no_grad", "ones", "randint", "randn", "seed", "special", "tensor", "version", "where",
    "zeros", "zeros_like",
    "cuda.Event", "cuda._sleep", "cuda.current_stream", "cuda.empty_cache",
    "cuda.get_device_properties", "cuda.init", "cuda.is_available", "cuda.is_initialized",
    "cuda.mem_get_info", "cuda.memory_allocated", "cuda.memory_reserved", "cuda.nvtx",
    "cuda.synchronize")


def watched(device: str) -> list[tuple[Any, str, Any]]:
    """What candidate code must not replace in this process, taken before any runs: the
    time module's clocks, ``torch.cuda.Event``'s methods on a GPU, and every function of
    this module, every module, function and class its globals name, and every method of
    :class:`Harness` and :class:`RefThreads` (owner, name, the object). A clock patched
    through Python's C API stayed for every candidate timed after its own in the same
    harness (each 100x faster: at the closing an honest first baseline's own row then
    disagreed with its figure side by side and it was dropped, and no best was named,
    red-team round 12), and a function rebound mid-job (``_keep``) did a paced call's work
    after its clock stopped. The same of every module of workers this process has loaded
    (:func:`_module_watch`): the harness's figures go through their functions too, and a
    red-team review rebound ``workers.timing.quantile`` so (the module's global, which
    ``summarize`` calls): its own median and the next candidate's in that harness read
    100x faster; and torch's members the harness calls (:func:`_torch_watch`: a
    ``torch.isclose`` rebound to pass every element passed a later candidate's wrong
    outputs). (:func:`_serve` ends the harness after a job in which one was replaced,
    and answers a job that finds one replaced ``crashed``, retried fresh.)"""
    me = sys.modules[__name__]
    out: list[tuple[Any, str, Any]] = [(time, n, getattr(time, n)) for n in CLOCK_NAMES
                                       if hasattr(time, n)]
    if device != "cpu":
        out += members(torch.cuda.Event)
    out += [(c, n, v) for c in (Harness, RefThreads) for n, v in vars(c).items()
            if inspect.isfunction(v)]
    # every module, function and class this module's code calls through a global: a
    # red-team contender rebound its ``time`` to a module whose clocks ran at 1/100
    out += [(me, n, v) for n, v in vars(me).items() if isinstance(v, _WATCHED_TYPES)]
    return out + _module_watch(me) + _torch_watch()


def _torch_watch() -> list[tuple[Any, str, Any]]:
    """torch's members the harness's code goes through, as :func:`watched`: the functions
    and classes of :data:`TORCH_CALLED`; every function of ``torch._C`` (the builtins
    torch's Python functions call: ``_cuda_synchronize``) and of torch's public namespaces
    (:data:`_TORCH_WIDE`: a ref.py's reference runs again in a harness where candidates'
    code ran, for a size it no longer held, and a red-team candidate rebound the
    ``torch.sort`` it calls: a wrong kernel then passed), by object only (:func:`_shallow`;
    but :data:`TORCH_REBINDS`); ``torch.Tensor``'s own methods and its base
    ``torch._C.TensorBase``'s (a type whose members cannot be rebound, but whose dict a
    red-team candidate reached through ``gc``), and every method of the base as absent from
    ``torch.Tensor``'s namespace: a method defined there would shadow the base's for every
    tensor the checks hold (``Tensor.all``)."""
    out = []
    for path in TORCH_CALLED:
        owner_path, _, name = path.rpartition(".")
        owner = functools.reduce(getattr, owner_path.split(".") if owner_path else (), torch)
        if isinstance(v := vars(owner).get(name, _GONE), _WATCHED_TYPES):
            out.append((owner, name, v))
    out += [(torch._C, n, v) for n, v in vars(torch._C).items() if isinstance(v, _WATCHED_TYPES)]
    out += [(m, n, v) for m in _TORCH_WIDE for n, v in vars(m).items()
            if isinstance(v, _WATCHED_TYPES) and _shallow(m, n)
            and f"{m.__name__}.{n}" not in TORCH_REBINDS]
    out += members(torch.Tensor) + members(torch._C.TensorBase)  # the base's dict: by gc
    own = vars(torch.Tensor)
    return out + [(torch.Tensor, n, _GONE) for n in vars(torch._C.TensorBase) if n not in own]


def _module_watch(me: types.ModuleType) -> list[tuple[Any, str, Any]]:
    """The functions, classes and modules every module of workers loaded in this process
    (but ``me``, watched as :func:`watched` says) and :data:`STD_WATCHED` hold in their
    namespaces, the methods of workers' classes and of ``random.Random`` (the unseen sets'
    places are drawn by one), and the constants (UPPER_CASE names of
    :data:`_CONSTANT_TYPES`, but :data:`RUNTIME_GLOBALS`) of workers' modules and ``me``:
    (owner, name, the object), as :func:`watched`."""
    mods = [m for n, m in sorted(sys.modules.items())
            if n.startswith("workers.") and isinstance(m, types.ModuleType) and m is not me]
    out = [(m, n, v) for m in (*mods, *STD_WATCHED) for n, v in vars(m).items()
           if isinstance(v, _WATCHED_TYPES)]
    # and their constants, this module's too: a job key's name or a threshold rebound
    # would turn a check off for every later job in this process
    out += [(m, n, v) for m in (me, *mods) for n, v in vars(m).items()
            if n.isupper() and n not in RUNTIME_GLOBALS and isinstance(v, _CONSTANT_TYPES)]
    classes = {id(c): c for m in mods for c in vars(m).values()
               if isinstance(c, type) and c.__module__ == m.__name__}
    for c in (*classes.values(), random.Random, ctypes.CDLL):
        out += members(c)
    # workers/native.c's functions (the checks' comparisons, the flush): a red-team
    # candidate made every later comparison pass by rebinding them on the library
    lib = native._LIB[0] if native._LIB else None
    return out + [(lib, n, f) for n, f in (vars(lib).items() if lib else ())
                  if isinstance(f, ctypes._CFuncPtr)]


def members(cls: type) -> list[tuple[Any, str, Any]]:
    """``cls``'s own methods as its namespace holds them (owner, name, the object): plain
    functions, ``staticmethod`` and ``classmethod`` objects, and other callables."""
    return [(cls, n, v) for n, v in vars(cls).items()
            if callable(v) or isinstance(v, (staticmethod, classmethod))]


# CPython's PyCFunctionObject (Include/cpython/methodobject.h, 3.11-3.13): after the
# object's head, ``m_ml`` (its PyMethodDef: ``ml_name``, ``ml_meth``, ``ml_flags``),
# ``m_self``, ``m_module``, ``m_weakreflist``, ``vectorcall``; byte offsets on 64-bit
_CFUNC_M_ML, _CFUNC_M_SELF, _CFUNC_VECTORCALL = 16, 24, 48
_METHODDEF_ML_METH, _METHODDEF_ML_FLAGS = 8, 16


def c_parts(fn: Any) -> tuple[int | None, ...] | None:
    """What a call of builtin ``fn`` (``time.perf_counter_ns``, a ``types.
    BuiltinFunctionType``) runs: its ``m_ml``, ``m_self`` and ``vectorcall`` pointers and
    its method definition's ``ml_meth`` and ``ml_flags``, read from the object's memory;
    None for any other object, or where the layout is not the one above (the name at
    ``m_ml`` is not ``fn``'s: another interpreter build). A red-team contender pointed the
    clock's ``m_ml`` at a definition of its own, through Python's C API: the object stayed
    the same (:func:`rewritten` saw nothing) and every reading of the clock was halved."""
    if (not isinstance(fn, types.BuiltinFunctionType) or ctypes.sizeof(ctypes.c_void_p) != 8
            or not (3, 11) <= sys.version_info[:2] <= (3, 13)
            or hasattr(sys, "gettotalrefcount")):  # a debug build's object head is longer
        return None
    at = id(fn)
    ml = ctypes.c_void_p.from_address(at + _CFUNC_M_ML).value
    if not ml or ctypes.c_char_p.from_address(ml).value != fn.__name__.encode():
        return None
    return (ml, ctypes.c_void_p.from_address(at + _CFUNC_M_SELF).value,
            ctypes.c_void_p.from_address(at + _CFUNC_VECTORCALL).value,
            ctypes.c_void_p.from_address(ml + _METHODDEF_ML_METH).value,
            ctypes.c_int.from_address(ml + _METHODDEF_ML_FLAGS).value)


def c_taken(watch: Sequence[tuple[Any, str, Any]]) -> dict[str, Any]:
    """Each function in ``watch`` (:func:`watched`) with its :func:`parts` (but those
    :func:`_shallow`) and its reading from memory (:func:`_memory_reading`), by the name
    :func:`rewritten` gives it, and each state of :data:`STATES` as its reader finds it;
    taken with the watch, before any job runs."""
    out: dict[str, Any] = {n: read() for n, read in STATES.items()}
    for o, n, v in watch:
        if not _shallow(o, n) and (got := parts(v)) is not None:
            out[_watch_name(o, n)] = (v, got, _memory_reading(v, got))
    return out


def _memory_reading(fn: Any, got: tuple[Any, ...]) -> tuple[bool, int, tuple[int, ...]] | None:
    """How :func:`c_swapped` reads ``fn`` (whose :func:`parts` are ``got``) again with no
    audit event (workers.objmem): whether it is a Python function, its address and the
    words read there now; None where they cannot be read so (another object, another
    interpreter's layout): its :func:`parts` are read again instead."""
    at = id(fn)
    if isinstance(fn, types.FunctionType):
        words = objmem.function_words(fn, at)
    elif isinstance(fn, types.BuiltinFunctionType):
        words = objmem.builtin_words(at, got)
    else:
        return None
    return None if words is None else (isinstance(fn, types.FunctionType), at, words)


# owners whose members are watched by object only: the pointers of ``torch._C``'s thousands
# of builtins (:func:`c_parts`) took about 5 ms a job to read
_SHALLOW = (torch._C,)
# torch's public namespaces, whose members the watch holds by object (:func:`_torch_watch`)
_TORCH_WIDE = (torch, torch.cuda, torch.nn.functional, torch.linalg, torch.fft, torch.special)
# the members of those that torch's own lazy work rebinds: ``torch.compile``'s first use
# wraps ``torch.manual_seed`` (on the CPU and on an H100, 2026-12-07)
TORCH_REBINDS = frozenset({"torch.manual_seed"})


def _shallow(owner: Any, name: str) -> bool:
    """Whether ``owner``'s member ``name`` is watched by object only, its code and C
    pointers not read (:func:`parts`): ``torch._C``'s, and those of :data:`_TORCH_WIDE` but
    :data:`TORCH_CALLED`'s (their thousands of builtins' pointers would take ms a job)."""
    if owner in _SHALLOW:
        return True
    if not any(owner is m for m in _TORCH_WIDE):
        return False
    prefix = owner.__name__.removeprefix("torch").lstrip(".")
    return (f"{prefix}.{name}" if prefix else name) not in TORCH_CALLED


# the name :func:`c_swapped` gives the interpreter's trace and profile functions
HOOKS = "sys.settrace/setprofile"


def _hooks() -> tuple[Any, ...]:
    """This thread's trace and profile functions, and those new threads get (``threading``):
    a red-team candidate's profile function slept in every call of the harness's but its own
    library's, its rivals timed after it in that harness 1.7x slower."""
    return (sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile())


def _modes() -> tuple[int, int]:
    """How many torch function and dispatch modes are pushed (0, 0 in the harness): a
    red-team candidate left a ``TorchFunctionMode`` whose ``&=`` did nothing, and a later
    candidate's wrong outputs passed the checks that go through torch."""
    return (torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())


_LIBGOMP: list[Any] = []  # the host's OpenMP runtime (libgomp.so.1), once tried: _host_gomp


def _host_gomp() -> Any:
    """The host's OpenMP runtime (``libgomp.so.1``, which candidates built with ``-fopenmp``
    share), a ``ctypes.CDLL``, or None where it cannot be loaded."""
    if not _LIBGOMP:
        try:
            _LIBGOMP.append(ctypes.CDLL("libgomp.so.1"))
        except OSError:
            _LIBGOMP.append(None)
    return _LIBGOMP[0]


def _warm_teams() -> None:
    """Start the OpenMP teams this process's later work would start, before any candidate
    code loads: torch's where it runs on more than one thread (an elementwise op over
    2**20 elements, past ATen's ``at::internal::GRAIN_SIZE`` of 32768, runs on
    ``torch.get_num_threads()`` threads) and the host libgomp's on every CPU this process
    may use (``GOMP_parallel`` of ``free(NULL)``; a candidate's ``num_threads(2)`` under
    ``OMP_NUM_THREADS=1`` starts a team of two): the sandbox ends a harness whose process
    runs a thread it did not run then (workers.sandbox ``Sandbox._threads_left``), and a
    team's threads, made on its first parallel region of that size, outlive it (an honest
    OpenMP candidate's, or ref.py's on a larger size, ended their harness so). Never
    raises."""
    if torch.get_num_threads() > 1:
        with contextlib.suppress(RuntimeError):
            torch.empty(1 << 20).fill_(1.0)
    gomp = _host_gomp()
    parallel = getattr(gomp, "GOMP_parallel", None) if gomp is not None else None
    if parallel is not None:
        nothing = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p)
        parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        parallel.restype = None
        parallel(nothing, None, len(os.sched_getaffinity(0)), 0)


def _omp_open() -> bool | None:
    """Whether this thread is inside a parallel region of the host libgomp
    (``omp_in_parallel``; None where it cannot be loaded): a region whose team a
    candidate started (``GOMP_parallel_start``) and never ended keeps the team's threads,
    those :func:`_warm_teams` started before any candidate code loaded, which the
    sandbox's thread list accepts, running the candidate's function after its job."""
    f = getattr(_host_gomp(), "omp_in_parallel", None)
    return bool(f()) if f is not None else None


def _gc_state() -> tuple[bool, tuple[int, ...], tuple[int, ...]]:
    """The garbage collector's switch, thresholds and callbacks (by object): a red-team
    candidate's ``gc.callbacks`` entry, with ``gc.set_threshold(1)`` so that a collection
    ran inside every later call, busy-waited in each call of a later candidate's library,
    3.9-8x slower (CPU, 2026-12-07)."""
    return (gc.isenabled(), gc.get_threshold(), tuple(map(id, gc.callbacks)))


def _omp_threads() -> tuple[int, int | None]:
    """The OpenMP thread count of this thread: torch's runtime (``torch.get_num_threads``)
    and the host's ``libgomp.so.1``, which candidates built with ``-fopenmp`` share (None
    where it cannot be loaded): a red-team candidate's ``omp_set_num_threads(1)`` made
    every later OpenMP candidate in its harness 2x slower."""
    gomp = getattr(_host_gomp(), "omp_get_max_threads", None)
    return (torch.get_num_threads(), gomp() if gomp else None)


_SUBNORMAL = [2.2250738585072014e-308, 5e-324]  # the smallest normal and subnormal float64


def _fp_mode() -> tuple[bool, bool, float, float]:
    """This thread's floating-point modes that change results: subnormal results flushed to
    zero (FTZ), subnormal operands read as zero (DAZ), both as Python's float arithmetic
    meets them, and the rounding of ``1 + 1.5 * 2**-53`` and of its negative (to nearest:
    ``1 + 2**-52`` and its negative; upward, downward and toward zero each differ in one
    or both): a red-team candidate's ``torch.set_flush_denormal(True)`` made a later
    honest candidate that needs subnormals ``wrong_result``."""
    normal, sub = _SUBNORMAL
    half_ulp = sub * 0 + 2 ** -53 * 1.5  # made at run time: no constant folding
    return (normal / 2 == 0.0, sub + 0.0 == 0.0, 1.0 + half_ulp, -1.0 - half_ulp)


# the name a job's row gives a Python thread its code left running (:class:`RefThreads`)
PYTHON_THREADS = "Python threads (one left running)"

# the process state a job must leave as it found it, beside the watch's functions: by the
# name :func:`c_swapped` gives each, the reader that takes it. The calling thread's CPU
# affinity and nice value: a red-team candidate pinned the harness's thread to one CPU
# with a thread of its own spinning there, and a later single-threaded candidate's calls
# took 2x as long. The switch interval: how long each return of a call waits for the
# interpreter's lock where another thread runs Python. An OpenMP region left open: its team
# runs a candidate's function on threads the sandbox's thread list accepts (_omp_open).
# The garbage collector's callbacks: code that runs inside later jobs (_gc_state)
STATES: Mapping[str, Callable[[], Any]] = types.MappingProxyType({
    HOOKS: _hooks, "torch function/dispatch modes": _modes, "OpenMP threads": _omp_threads,
    "floating-point modes": _fp_mode, "CPU affinity": lambda: os.sched_getaffinity(0),
    "nice value": lambda: os.getpriority(os.PRIO_PROCESS, 0),
    "switch interval": sys.getswitchinterval, "OpenMP region left open": _omp_open,
    "garbage collector": _gc_state,
    "workers.native._LIB": lambda: tuple(map(id, native._LIB))})


def parts(fn: Any) -> tuple[Any, ...] | None:
    """What a call of ``fn`` runs: a builtin's C pointers (:func:`c_parts`); a Python
    function's code, defaults, keyword defaults and closure cells' contents (a red-team
    candidate replaced ``workers.timing.quantile.__code__``, the function object the same),
    a ``staticmethod``'s or ``classmethod``'s function's; None for any other object."""
    if isinstance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    if isinstance(fn, ctypes._CFuncPtr):  # a C library's function: where it points
        return (ctypes.cast(fn, ctypes.c_void_p).value, fn.restype, tuple(fn.argtypes or ()))
    if not isinstance(fn, types.FunctionType):
        return c_parts(fn)
    cells = []
    for c in fn.__closure__ or ():
        try:
            cells.append(c.cell_contents)
        except ValueError:  # an empty cell
            cells.append(_GONE)
    return (fn.__code__, fn.__defaults__, fn.__kwdefaults__, *cells)


def c_swapped(taken: Mapping[str, Any]) -> list[str]:
    """The names in ``taken`` (:func:`c_taken`) whose function now runs other code than
    when taken (:func:`parts`, or the same fields read from memory: :func:`_memory_reading`;
    read through the attributes and ``ctypes``, the check raised about 4,000 audit events,
    each a walk of the stack by workers.audit's hook: 7 ms, twice a job), and those of
    :data:`STATES` whose state changed."""
    return [n for n, was in taken.items()
            if (STATES[n]() != was if n in STATES else _runs_other(*was))]


def _runs_other(fn: Any, got: tuple[Any, ...],
                reading: tuple[bool, int, tuple[int, ...]] | None) -> bool:
    """Whether ``fn`` (taken with its :func:`parts` ``got`` and ``reading``) runs other code
    now: its words read from memory again where ``reading`` says how, else its parts."""
    if reading is None:
        return parts(fn) != got
    python, at, words = reading
    now = (objmem.function_words(fn, at, words) if python else objmem.builtin_words(at))
    return now != words


def _watch_name(owner: Any, name: str) -> str:
    """How :func:`rewritten` and :func:`c_swapped` name ``owner``'s member ``name``
    (``time.perf_counter_ns``, ``Event.elapsed_time``, ``workers.native.kopt_evict``)."""
    if isinstance(owner, ctypes.CDLL):  # no __name__ (its __getattr__ looks up symbols)
        return f"workers.native.{name}"
    return f"{getattr(owner, '__name__', owner)}.{name}"


def replaced(watch: Sequence[tuple[Any, str, Any]], taken: Mapping[str, Any]
             ) -> list[str]:
    """The names in ``watch`` replaced since they were taken (:func:`rewritten`), then
    those whose builtin runs another C function (:func:`c_swapped` against ``taken``)."""
    return rewritten(watch) + c_swapped(taken)


def _left_here(watch: Sequence[tuple[Any, str, Any]], taken: Mapping[str, Any],
               threads: RefThreads) -> list[str]:
    """What code left in this process since ``watch`` and ``taken`` were taken:
    :func:`replaced`, and :data:`PYTHON_THREADS` where a Python thread ``threads`` does
    not know runs (:meth:`RefThreads.left`)."""
    return replaced(watch, taken) + ([PYTHON_THREADS] if threads.left() else [])


def rewritten(watch: Sequence[tuple[Any, str, Any]]) -> list[str]:
    """The names in ``watch`` (:func:`watched`) whose object is no longer the one taken,
    each read from its owner's own namespace (``vars``), as :func:`watched` took it:
    ``getattr`` unwraps a ``staticmethod`` (``Event.__new__``) and binds a ``classmethod``
    anew at every read, so that every GPU job found ``Event.__new__`` replaced and was
    answered ``crashed`` (the H200, 2026-12-05); a name deleted there is replaced too."""
    return [_watch_name(o, n) for o, n, v in watch if vars(o).get(n, _GONE) is not v]


def _serve(h: Harness, rconn: Connection, wconn: Connection) -> None:
    """Answer each job read from ``rconn`` on ``wconn`` until EOF or a fatal outcome. A
    clock job waits for the sandbox's "go" on ``rconn`` (:func:`_await_go`); a "go" read
    here (none is sent outside a clock job's wait) is skipped."""
    h.await_go = lambda: _await_go(rconn)
    h.await_turn = lambda: _await_turn(rconn)
    h.post = wconn.send_bytes
    # what candidate code does in the interpreter during its call on this thread goes out
    # at its first event, before that code runs (workers.audit; the hook is added before
    # any job: no candidate's library is loaded yet)
    audit.install(wconn.fileno())
    # kept here too (a tuple, a read-only view): a red-team candidate emptied the
    # harness's own lists through ``gc``; one rebound on the harness is replaced too
    watch = h.watch = tuple(watched("cuda" if h.is_cuda else "cpu"))
    c_watch = h.c_watch = types.MappingProxyType(c_taken(watch))
    threads = h.ref_threads
    _warm_teams()
    threads.update()
    while True:
        try:
            kind, job = rconn.recv()
        except EOFError:
            return
        if kind == "go":
            continue
        if kind == "ping":  # after every answer: it was this process's, not another's
            answer(wconn, {"pong": job})
            continue
        h.idle_s = time.perf_counter() - h.done_at
        # left by an earlier job since its end: not this one's
        if unfit := _unfit(watch, c_watch, threads):
            answer(wconn, unfit)
            return
        audit.taken()  # none is raised outside a job's calls: kept clean all the same
        res = _run_one(h, job)
        h.done_at = time.perf_counter()
        entered = audit.taken(skip=threads.python_idents())
        if open_files() > FILES_KEPT:  # the next job would find none left (dlopen: EMFILE)
            res["fatal"] = True
        changed = _left_here(watch, c_watch, threads) + [f"Harness.{n}" for n, v in (
            ("watch", watch), ("c_watch", c_watch), ("ref_threads", threads))
            if getattr(h, n, None) is not v]
        if changed:  # with it: workers.sandbox run_retrying may run the job again
            res = {**_rewritten(res, job, changed), "changed": changed[:8]}
        if entered:  # workers.sandbox ``Sandbox._entered`` ends this process
            res["entered"] = entered[:8]
        answer(wconn, res)
        if res.get("fatal"):
            if res.get("status") == Status.OK:  # the sandbox pings after an `ok` answer,
                _pong(rconn, wconn)               # fatal or not (workers.sandbox)
            return


def _unfit(watch: Sequence[tuple[Any, str, Any]], c_watch: Mapping[str, Any],
           threads: RefThreads) -> dict | None:
    """The answer (``crashed``, fatal: the job is run again in a fresh harness) to a job
    that finds this process unfit for it: more than :data:`FILES_KEPT` files held, or a
    function of ``watch`` replaced (:func:`rewritten`; or a builtin of ``c_watch`` running
    another C function, :func:`c_swapped`), or a Python thread not in ``threads`` running,
    since the last job's end, by code an earlier candidate left here; None when fit."""
    held = open_files()
    if held > FILES_KEPT:
        return {"status": Status.CRASHED, "fatal": True, "error": (
            f"the harness held {held} open files when the job came (at most {FILES_KEPT} "
            "between jobs: code an earlier candidate left there opened them); restarted")}
    if changed := _left_here(watch, c_watch, threads):
        return {"status": Status.CRASHED, "fatal": True, "error": (
            f"the harness's {', '.join(changed[:4])} had been replaced when the job came "
            "(code an earlier candidate left there); restarted")}
    return None


def _run_one(h: Harness, job: Any) -> dict:
    """``job`` run (:meth:`Harness.run`), its outcome with ``fatal``; never raises."""
    try:
        res = h.run(job.payload() if isinstance(job, RunJob) else job)
        res.setdefault("fatal", False)
        if h.parts:  # where its wall time went (Harness.lap): a benchmark's breakdown
            res["parts_ms"] = {k: round(v, 3) for k, v in h.parts.items()}
        if h.signal_escapes:  # what such code left in this process: gone with it
            res["fatal"] = True
    except JobError as e:
        res = {"status": e.status, "error": str(e), "fatal": e.fatal}
    except torch.OutOfMemoryError as e:
        res = {"status": Status.ERROR, "error": f"out of memory: {e}", "fatal": True}
    except Exception as e:
        fatal = h.is_cuda and "CUDA" in str(e)
        res = {"status": Status.CRASHED if fatal else Status.ERROR,
               "error": f"{e!r}\n{traceback.format_exc(limit=3)}", "fatal": fatal}
    return res


def _rewritten(res: dict, job: Any, changed: list[str]) -> dict:
    """``res`` of a job during which ``changed`` (:func:`rewritten`) were replaced: fatal, so
    that a patch made in this job times no later job (the job's own figures are judged as
    they are: the closing's outside clock times them, and its row's ``error`` says what was
    replaced); a clock job whose block rebound one of the watched functions or methods is
    ``crashed`` (only the contender's code ran there; a replaced clock is left to the
    outside clock). :func:`_serve` sends ``changed`` with it: a job that met one in a
    harness where another candidate's code had run is run again in a fresh harness
    (workers.sandbox ``run_retrying``), since code left by that one may have made it."""
    print(f"kopt harness: {', '.join(changed[:8])} replaced during a job; restarting",
          file=sys.stderr, flush=True)
    own = [c for c in changed if not c.startswith(CLOCKS)]
    if own and isinstance(job, dict) and job.get("clock_calls") and not job.get(
            "clock_loads_only"):
        return {"status": Status.CRASHED, "fatal": True, "error": (
            f"code in the harness's process replaced its {', '.join(own[:4])} during a "
            "block of its calls")}
    clocks = [c for c in changed if c.startswith(CLOCKS)]
    if clocks and isinstance(job, dict) and job.get("turns") and not job.get("alone") and res.get(
            "status") == Status.OK:  # its own harness, with rivals: Harness._clock_intact
        return {**res, "status": Status.SUSPECT, "fatal": True,
                "error": _clock_replaced(clocks)}
    said = (f"code in the harness's process replaced its {', '.join(changed[:4])} during the "
            "job: its figures came through them, left to the closing's outside clock")
    return {**res, "fatal": True, "error": "; ".join(x for x in (res.get("error"), said) if x)}


def _clock_replaced(changed: list[str]) -> str:
    """The ``suspect`` line of a contender whose own harness's clocks ``changed``."""
    return (f"code in its own harness's process replaced {', '.join(changed[:4])} during "
            "a contest: its figures came from a clock it changed")


def _pong(rconn: Connection, wconn: Connection) -> None:
    """Answer the sandbox's ping after this process's last answer (a "go" read first is
    skipped), so that the answer is known to be its own; nothing else is read."""
    try:
        kind, nonce = rconn.recv()
        while kind == "go":
            kind, nonce = rconn.recv()
    except (EOFError, OSError):
        return
    if kind == "ping":
        answer(wconn, {"pong": nonce})


def open_files() -> int:
    """How many file descriptors this process holds (``/proc/self/fd``); one more than
    :data:`FILES_KEPT` when it cannot be read (none left to read it with)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return FILES_KEPT + 1


def _await_go(rconn: Connection) -> None:
    """Read ``rconn`` until the sandbox's ``("go", None)``: the start of a clock job's
    calls (:meth:`Harness.clock`). Raises EOFError when the sandbox closed the pipe, and
    RuntimeError for any other message (the sandbox sends no job while one runs)."""
    kind, _ = rconn.recv()
    if kind != "go":
        raise RuntimeError(f"a clock job waited for 'go' and read {kind!r}")


def _await_turn(rconn: Connection) -> bool:
    """Read ``rconn`` for the sandbox's answer to a witness turn: True on ``("go", None)``,
    False on ``("enough", None)``. Raises as :func:`_await_go` does."""
    kind, _ = rconn.recv()
    if kind not in ("go", "enough"):
        raise RuntimeError(f"a witness turn waited for 'go' and read {kind!r}")
    return kind == "go"


def answer(conn: Connection, msg: dict) -> None:
    """Send ``msg`` to the sandbox's side as JSON (never a pickle: the side reading it must
    not run what candidate code could write to this pipe; workers.sandbox ``read_answer``).
    Values JSON cannot hold (a numpy scalar, a path) go as their ``item()`` or text."""
    conn.send_bytes(_encoded(msg))


def _encoded(msg: dict) -> bytes:
    """``msg`` as :func:`answer` sends it (JSON, UTF-8)."""
    return json.dumps(msg, default=_plain).encode()


def _plain(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else str(x)


def _die_with(fd: int) -> None:
    """The harness's tie to its owner (the device actor, ``kopt preflight``, a prestarted
    harness's adopter): a watchdog thread kills this process group -- a candidate's endless
    call or hung kernel and its children too -- once the owner's end of ``fd`` (the job
    pipe's read end, or a prestarted harness's socket) is closed: the owner died. The
    parent-death signal alone did not do it for a prestarted harness (its parent is the
    prestart's reaper) nor for one started from a thread other than the owner's main one
    (the signal follows the starting thread: red-team round 13 left a harness spinning in
    a candidate's endless loop after its owner was killed). Watching the file rather than
    the owner's pid works from inside a PID namespace (workers.jail), where that pid is not
    visible."""
    threading.Thread(target=_watch, args=(fd,), daemon=True, name="kopt-owner-watch").start()


def _watch(fd: int) -> None:
    """:func:`_die_with`'s thread: SIGKILL this process group once the peer of ``fd`` hung
    up (``POLLRDHUP`` on a socket; ``POLLHUP`` on a socket, or on a pipe's read end once no
    writer is left) or ``fd`` is gone."""
    import select

    p = select.poll()
    p.register(fd, select.POLLRDHUP | select.POLLHUP)
    while not any(ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL)
                  for _, ev in p.poll()):
        pass
    os.killpg(0, 9)  # SIGKILL: the whole group, as the harness's parent-death signal would


def _prepare_ahead(h: Harness, path: str) -> None:
    """Make the inputs and reference outputs of the jobs pickled at ``path`` (kept in
    ``h.data`` for the jobs that come later). A failure is written to the log and left
    to the job that needs them: its own :meth:`Harness.prepare` runs ref.py again and
    reports it (see :func:`main`)."""
    import pickle

    progress, h.progress = h.progress, lambda msg: None  # nobody is connected yet
    try:
        with open(path, "rb") as f:
            for job in pickle.load(f):
                h.prepare(job)
    except Exception as e:  # noqa: BLE001 -- the job's own preparation reports it
        print(f"kopt harness: the inputs and reference made ahead failed: {e!r}",
              file=sys.stderr, flush=True)
    finally:
        h.progress = progress


def _data_key(job: dict, reference: bool) -> tuple:
    """``job``'s problem as the key of :attr:`Harness.data`: ref.py's stamp, dims, seed,
    argument shapes, scalars (``reference()`` is given them), ``reference`` and the inputs
    function."""
    return (ref_stamp(job["reference"]), tuple(sorted(job["dims"].items())), job["seed"],
            tuple(sorted((k, tuple(v)) for k, v in job["args"].items())),
            json.dumps(job["scalars"], sort_keys=True), reference, job.get(INPUTS_FN, "inputs"))


def _problem(job: dict, reference: bool) -> tuple[dict[str, Any], dict[str, list[int]], bool]:
    """``job``'s scalar values (by name, as ``solve`` takes them), its arguments' shapes
    from sweep.yaml ``args:`` (by name) and whether its reference runs: ``reference``, or
    an output whose shape only the reference's result gives."""
    sig = job["signature"]
    env = {**job["scalars"], **job["dims"]}
    scalars = {a["name"]: _scalar(a, env[a["name"]]) for a in sig if a["kind"] == "scalar"}
    shapes = {n: [parse(e)(env) if isinstance(e, str) else e for e in s]
              for n, s in job["args"].items()}
    unsized = [a["name"] for a in sig if a["kind"] == "output" and a["name"] not in shapes]
    return scalars, shapes, reference or bool(unsized)


def timed_sets(shapes: Mapping[str, Sequence[int]], is_cuda: bool) -> int:
    """How many seen input sets a job's timed calls cycle through (:data:`TIMED_SET_ELEMS`):
    on a CPU, enough that their arguments (``shapes``, by name) hold that many elements all
    told, from :data:`N_SETS` up to :data:`MAX_TIMED_SETS`; on a GPU (no branch predictor
    learns values there, and its L2 is flushed before every call) :data:`N_SETS`."""
    elems = sum(math.prod(int(x) for x in s) for s in shapes.values())
    if is_cuda or elems <= 0:
        return N_SETS
    return max(N_SETS, min(MAX_TIMED_SETS, -(-TIMED_SET_ELEMS // elems)))


def _shape_of(outs: list[dict], shapes: dict[str, list[int]], s: InputSet
              ) -> dict[str, list[int]]:
    """Each output's shape (``outs``: signature entries): sweep.yaml's, else that of the
    reference's result in input set ``s``, else of its in/out input there."""
    return {a["name"]: (shapes.get(a["name"]) or list(s.expected.get(
        a["name"], s.inputs.get(a["name"])).shape)) for a in outs}


def _rivals(sig: list[dict], shape_of: dict[str, list[int]], ins: int, exp: int,
            copies: int) -> int:
    """What ``copies`` contenders' harnesses of one problem hold on a GPU (bytes), about:
    each its check's, held-back and stress sets (``ins`` bytes of inputs, ``exp`` of
    expected outputs in the reference's dtype, tolerance bands: float32 for 16-bit outputs,
    :func:`_band`), sets kept ready for calls on new values, buffer sets (its witness buffers
    among them), its check's float64 temporaries (:data:`CHECK_BYTES` an element of its
    largest output) and its CUDA context (:data:`CONTEXT_BYTES`)."""
    outs = bands = most = 0
    for a in (a for a in sig if a["kind"] == "output"):
        k, t = _numel(shape_of[a["name"]]), getattr(torch, a["dtype"])
        outs += k * t.itemsize
        bands += 2 * k * max(t.itemsize, 4) if t.is_floating_point else k * t.itemsize
        most = max(most, k)
    sets = 2 * N_SETS + N_UNSEEN + UNSEEN_READY
    return copies * (sets * (ins + exp + bands) + (N_SETS + 1) * (ins + outs)
                     + CHECK_BYTES * most + CONTEXT_BYTES)


def _out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` says the device's memory ran out: torch's error, an exported
    allocation's (workers.devmem), or ref.py's function raising torch's (as :class:`JobError`
    names it)."""
    return isinstance(e, torch.OutOfMemoryError) or (
        isinstance(e, (devmem.DevMemError, JobError)) and any(
            w in str(e) for w in ("OUT_OF_MEMORY", "OutOfMemoryError")))


def _host_memory(e: BaseException) -> bool:
    """Whether ``e`` says the host's memory ran out (Python's MemoryError, an allocation
    refused: ENOMEM), ref.py's raising it too (as :class:`JobError` names it): host memory
    is shared, and another process can take it."""
    said = str(e).lower()
    return isinstance(e, MemoryError) or isinstance(e, JobError) and any(
        w in said for w in ("memoryerror", "cannot allocate memory", "can't allocate memory",
                            "out of memory"))


def _witness_bytes(s: InputSet, sig: list[dict], shape_of: dict[str, list[int]],
                   copies: int) -> tuple[int, int, int, int]:
    """A judge's witness set like ``s`` in bytes: (its inputs, one copy of its outputs, its
    expected outputs, all it holds: inputs, outputs, ``copies`` contenders' copies of them
    and the expected ones)."""
    ins = sum(t.numel() * t.element_size() for t in s.inputs.values())
    exp = sum(t.numel() * t.element_size() for t in s.expected.values())
    outs = sum(_numel(shape_of[a["name"]]) * getattr(torch, a["dtype"]).itemsize
               for a in sig if a["kind"] == "output")
    return ins, outs, exp, ins + outs * (1 + copies) + exp


def _host_fit(n: tuple[int, int], per: int, said: str) -> int:
    """How many of ``n`` (asked for, least) witness sets of ``per`` bytes a CPU's judge
    holds: as many as fit in :data:`HOST_SHARE` of a harness's memory limit
    (workers.cgroup ``limits_wanted``: the judge is a harness, killed past it as a
    contender is), all where no limit can be told. Raises :class:`_TooLarge` (``said``
    why) where not even the least fit: the problem's sizes, no one's doing."""
    try:
        limit = cgroup.limits_wanted()[1]
    except ValueError:  # the sandbox's own start said so first
        return n[0]
    fit = int(HOST_SHARE * limit // max(per, 1))
    if fit >= n[1]:
        return min(n[0], fit)
    raise _TooLarge(Status.ERROR, f"{said} do not fit in {HOST_SHARE:.0%} of the judge's "
                    f"memory limit ({limit / 2**30:.1f} GiB, {cgroup.MEM_ENV})")


class _TooLarge(JobError):
    """A GPU judge's least witness sets that would not fit in the device's whole memory
    beside the contenders' harnesses: the problem's sizes, no one's doing
    (:meth:`Harness._witness_fit`)."""


class _Short(Exception):
    """A GPU judge's witness sets that only other processes' memory keeps out
    (:meth:`Harness._witness_fit`)."""


def _release(s: InputSet) -> None:
    """Input set ``s``'s tensors let go: a held-back set spent by the one artifact of a
    contest's harness of its own (:meth:`Harness._rounds`), which no call uses again. A
    contender's harness held every set its calls on new values drew (about 17 GB of the
    README's sweep on an H100, beside its rivals' and the judge's)."""
    s.inputs, s.expected, s.lo, s.hi = {}, {}, {}, {}


def _canaries_kept(buf: Buffers) -> bool:
    """Whether every canary after ``buf``'s outputs still holds its 0xA5 bytes."""
    return all(bool((g.view(torch.uint8) == 0xA5).all()) for g in buf.guards.values())


if __name__ == "__main__":
    if sys.argv[1] == "--listen":  # python -m workers.harness --listen FD DEVICE [PREPARE]
        main(-1, -1, sys.argv[3], listen_fd=int(sys.argv[2]),
             prepare=sys.argv[4] if len(sys.argv) > 4 else None)
    else:  # python -m workers.harness RFD WFD DEVICE
        main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])

