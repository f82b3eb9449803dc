"""Where a run's time goes: a :class:`PhaseRecorder` that the driver passes down
to the scheduler, builder, runner and strategies, and whose rows become the store's
``phases`` table (one row per interval; written through :mod:`kopt.store.database`'s Writer).

Every time is in seconds since **kopt** started in the process (the first import of the
``kopt`` package, :func:`start_epoch`; not the OS process's start, which a shell that
``exec``s kopt dates to the commands before it), read from one monotone clock; each row also
carries the wall-clock timestamps. Run-level phases (:data:`RUN_PHASES`) occur once per
process of a run; device phases (:data:`DEVICE_PHASES`) are intervals of one device (its
class, id and node);
``build`` rows are compiles (one per build that ran a compiler, none for cache hits).

Device busy intervals are derived from what the scheduler already knows: a job runs from
when it was sent (or, queued behind another, from when the one before it came back) until
its outcome came back. They are exact when the driver waits on the device; a driver
that was busy elsewhere (writing a Parquet file) stretches a job's end by that much.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from typing import Any

import kopt

# once per run (per process of a resumed run), in the order they begin
RUN_PHASES = ("startup", "checks", "ray", "devices", "reference", "first_build",
              "first_result", "run", "stop_devices", "store", "end")
# per device: actor start, ref.py's reference, jobs, idle waiting for builds, NCU, contests,
# the closing's outside clock
DEVICE_PHASES = ("device_start", "reference", "busy", "build_wait", "ncu", "contest", "clock")
PHASE_HELP = {
    "startup": "kopt's start (its package imported) to the sweep's start: imports, "
               "sweep.yaml",
    "checks": "checks before Ray (store, --resume, backend)",
    "ray": "Ray started or attached",
    "devices": "device actors asked for until every one answered (sandboxes, torch)",
    "reference": "ref.py's inputs and reference on one device per class (per device, also "
                 "ref.py's timing after the first iteration's candidates)",
    "first_build": "first build submitted until the first build result",
    "first_result": "first job sent until the first outcome came back",
    "run": "the driver's run, start to end",
    "stop_devices": "device actors stopped",
    "store": "the run's last rows written and its files compacted",
    "end": "the run returned (a point)",
}


_ADOPTED: list[float] = []  # a command's start handed to this process (adopt_start)


def adopt_start(epoch: float) -> None:
    """Count this process's phases from ``epoch`` (epoch seconds) instead of its own start:
    a driver kept ready by the kopt service (kopt.cli.launchpad) runs a command whose process,
    the `kopt` front (kopt.cli.front), started then."""
    _ADOPTED[:] = [float(epoch)]
    start_epoch.cache_clear()


def adopted() -> bool:
    """Whether this process runs a command handed to it (:func:`adopt_start`)."""
    return bool(_ADOPTED)


@functools.cache
def start_epoch() -> float:
    """The wall-clock time (epoch seconds) at which kopt started in this process: the first
    import of the ``kopt`` package (``kopt.STARTED_AT``), the `kopt` command's first step.
    Not the OS process's start: ``bash -c "pip install ... && kopt sweep ..."`` runs its last
    command in bash's own process (``exec``), whose start was before pip's 289 s. After
    :func:`adopt_start`, the epoch given there."""
    if _ADOPTED:
        return _ADOPTED[0]

    return kopt.STARTED_AT


class PhaseRecorder:
    """Collects one process's phase intervals of a run.

    Args:
        started: kopt's start in this process (epoch seconds); default
            :func:`start_epoch`.

    Attributes:
        rows: the intervals so far (``phase``, ``device_class``, ``device``, ``node``,
            ``start_s``, ``end_s``, ``detail``).
    """

    def __init__(self, started: float | None = None) -> None:
        self.started = start_epoch() if started is None else started
        self._perf0, self._wall0 = time.perf_counter(), time.time()
        self.rows: list[dict[str, Any]] = []
        self._open: dict[tuple[str, str | None], tuple[float, dict | None]] = {}
        self._last_end: dict[int, float] = {}  # device -> end of its last busy interval
        self._waits: dict[int, dict[str, Any]] = {}  # device -> its last build-wait row
        self.first_submit: float | None = None  # first build submitted
        self.first_sent: float | None = None  # first job sent to a device
        self._seen: set[str] = set()  # phases with a row

    def now(self) -> float:
        """Seconds since kopt started (monotone)."""
        return self.at(time.perf_counter())

    def at(self, perf: float) -> float:
        """A ``time.perf_counter()`` reading as seconds since kopt started."""
        return self._wall0 - self.started + perf - self._perf0

    def span(self, phase: str, start: float, end: float, info: dict | None = None,
             detail: str | None = None) -> dict[str, Any]:
        """Record ``phase`` from ``start`` to ``end`` (seconds since kopt started) on
        the device described by ``info`` (a runner's device info; None: the run's); returns
        the row."""
        row = {"phase": phase, "start_s": start, "end_s": max(start, end), "detail": detail,
               "device_class": (info or {}).get("device_class"),
               "device": (info or {}).get("device_id"), "node": (info or {}).get("node_ip")}
        self.rows.append(row)
        self._seen.add(phase)
        return row

    def begin(self, phase: str, info: dict | None = None) -> None:
        """``phase`` starts now (on the device of ``info``); :meth:`end` closes it."""
        self._open[(phase, (info or {}).get("device_id"))] = (self.now(), info)

    def end(self, phase: str, info: dict | None = None, detail: str | None = None) -> None:
        """``phase`` (begun with :meth:`begin`) ends now; nothing when it was not begun."""
        got = self._open.pop((phase, (info or {}).get("device_id")), None)
        if got is not None:
            self.span(phase, got[0], self.now(), got[1], detail)

    def has(self, phase: str) -> bool:
        """Whether ``phase`` has a row already."""
        return phase in self._seen

    # -- builds and jobs (the scheduler's and builder's moments) ------------------------
    def build_submitted(self) -> None:
        """A build was submitted (or found in the cache): the first one starts first_build."""
        if self.first_submit is None:
            self.first_submit = self.now()

    def build_done(self, compile_s: float, cached: bool, build_id: str) -> None:
        """A build result reached the driver: a ``build`` row for a compile (its
        ``compile_s`` up to now), and the end of first_build for the first one."""
        t = self.now()
        if not cached and compile_s > 0:
            self.span("build", max(0.0, t - compile_s), t, detail=build_id)
        if not self.has("first_build"):
            self.span("first_build", self.first_submit if self.first_submit is not None
                      else t, t)

    def job_sent(self) -> float:
        """A job is sent to a device now; returns the time (pass it to :meth:`job_done`)."""
        t = self.now()
        if self.first_sent is None:
            self.first_sent = t
        return t

    def job_done(self, device: int, info: dict, sent: float, ok: bool = True) -> None:
        """The outcome of a job sent at ``sent`` to device ``device`` came back now: a
        ``busy`` row from when the device could start it, and first_result for the first
        outcome (``ok``: the device did not die under it)."""
        t = self.now()
        start = max(sent, self._last_end.get(device, sent))
        self._last_end[device] = t
        self.span("busy", start, t, info)
        if ok and not self.has("first_result"):
            self.span("first_result", self.first_sent if self.first_sent is not None
                      else sent, t)

    def waited(self, device: int, info: dict, start_perf: float, end_perf: float) -> None:
        """Device ``device`` sat idle for builds of its class between two
        ``perf_counter`` readings; joined to its previous wait when they touch."""
        start, end = self.at(start_perf), self.at(end_perf)
        last = self._waits.get(device)
        if last is not None and last["end_s"] == start:
            last["end_s"] = end
            return
        self._waits[device] = self.span("build_wait", start, end, info)

    # -- the store ------------------------------------------------------------------------
    def table_rows(self, run_id: str, sweep: str) -> list[dict[str, Any]]:
        """The rows of the store's ``phases`` table (wall-clock timestamps added), by
        start."""
        t0 = dt.datetime.fromtimestamp(self.started, dt.timezone.utc)
        made = dt.datetime.now(dt.timezone.utc)
        return [{**r, "run_id": run_id, "sweep": sweep, "process_start": t0,
                 "started_at": t0 + dt.timedelta(seconds=r["start_s"]),
                 "ended_at": t0 + dt.timedelta(seconds=r["end_s"]), "created_at": made}
                for r in sorted(self.rows, key=lambda r: (r["start_s"], r["end_s"]))]


def phase_summary(rows: list[dict[str, Any]]) -> list[tuple[str, str, float, float, float]]:
    """A text table of a run's phases (Kernel Tuner prints its phase times so): per
    run-level phase ``(phase, where, start s, end s, duration s)`` in order, then per device
    and device phase its total seconds (start and end: its first start, last end; the phase
    named ``busy x140`` when it is the sum of 140 intervals, so that its seconds are not read
    as its span), then the builds' compiler seconds (``build xN``)."""
    out = [(r["phase"], "run", r["start_s"], r["end_s"], r["end_s"] - r["start_s"])
           for p in RUN_PHASES for r in rows if r["phase"] == p and not r.get("device")]
    groups: dict[tuple[str, str], list[float]] = {}  # (where, phase) -> first, last, total, n
    for r in rows:
        if r.get("device") or r["phase"] == "build":
            where = (f"{r.get('device_class') or ''} {r['device']}" if r.get("device")
                     else "compilers")
            g = groups.setdefault((where, r["phase"]), [r["start_s"], r["end_s"], 0.0, 0])
            g[0], g[1] = min(g[0], r["start_s"]), max(g[1], r["end_s"])
            g[2], g[3] = g[2] + r["end_s"] - r["start_s"], g[3] + 1
    order = {p: k for k, p in enumerate((*DEVICE_PHASES, "build"))}
    for (where, p), (a, b, total, n) in sorted(groups.items(), key=lambda kv: (
            kv[0][0] == "compilers", kv[0][0], order.get(kv[0][1], len(order)))):
        out.append((f"{p} x{n}" if n > 1 or p == "build" else p, where, a, b, total))
    return out
