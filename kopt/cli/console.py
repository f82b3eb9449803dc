"""What the ``kopt`` command prints: the stdout and stderr consoles (quiet on a closed pipe),
one-line errors and notes, the sweep's progress display (:class:`ConsoleProgress`), its
closing line and tables, and the wording of figures (speedups, rates, % of peak).

Importing it makes the standard streams safe first (:func:`kopt.cli.streams.prepare`: closed
stdout/stderr, a console encoding that is not UTF-8), since the consoles are sized on them.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape as _markup_escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from kopt.cli import streams
from kopt.run.callbacks import ProgressCallback
from kopt.util.words import counted
from workers.status import Status

streams.prepare()  # closed stdout/stderr, a console encoding that is not UTF-8


class _Err(Console):
    """stderr's console (progress, notes, errors): when its reader is gone (``kopt sweep
    2>&1 | head -1``) it goes quiet and the command carries on, so a sweep still measures
    and stores everything (rich's default exits 1 mid-sweep, losing the rows not yet
    flushed)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
        except (OSError, ValueError):  # stderr without a file descriptor (a test's buffer)
            pass


console = _Err(stderr=True, width=None if sys.stderr.isatty() else 160, emoji=False)


class _Out(Console):
    """stdout's console: a closed pipe (``kopt catalog | head -1``) ends the command as
    :func:`pipe_closed` says (rich's own default exits 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        pipe_closed()


out = _Out(width=None if sys.stdout.isatty() else 160, emoji=False)


HEARTBEAT_S = 10.0  # a plain progress line this often when stderr is not a terminal


# C0 controls but tab and newline, DEL and C1 controls: ESC sequences in a stored string (a
# compile error's #error line, a candidate's printed output) set the terminal's title, wrote
# its clipboard (OSC 52) and erased lines when shown (red-team round 10)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape(text: str) -> str:
    """``text`` for the terminal: every control character but tab and newline shown as
    ``\\xNN`` (never sent: an ESC sequence in a stored error must not drive the user's
    terminal), then rich markup escaped."""
    return _markup_escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def heartbeat_s() -> tuple[float, str]:
    """Seconds between two plain progress lines (no terminal): ``$KOPT_PROGRESS_S`` (0.1 to
    3600), else :data:`HEARTBEAT_S`; and a note when the variable is set but not such a
    number (the default then stands), else ""."""
    from workers.build import env_number

    s, why = env_number("KOPT_PROGRESS_S", HEARTBEAT_S, 0.1, 3600)
    return s, (f"note: {why.lstrip('$')}; a progress line every {HEARTBEAT_S:g} s" if why
               else "")


MAX_TABLE_ROWS = 1000  # `kopt query` table output (rich tables of 1M rows take minutes)


def fail(msg: str, code: int = 2) -> NoReturn:
    """The command's one error line (``error: MSG`` on stderr), then exit ``code``."""
    console.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def show_note(message: Warning | str, category: type[Warning], filename: str, lineno: int,
          file: Any = None, line: str | None = None) -> None:
    """warnings.showwarning for the CLI: a store note (a damaged file skipped) is one line."""
    from kopt.store.files import StoreWarning

    if issubclass(category, StoreWarning):
        if str(message) in noted:  # one note per damaged file per command
            return
        noted.add(str(message))
        console.print(f"[yellow]note:[/] {escape(str(message))}", highlight=False,
                      soft_wrap=True)
    else:
        show_warning(message, category, filename, lineno, file, line)


show_warning = warnings.showwarning


noted: set[str] = set()  # the store notes this command has printed


def spec_notes(sw: Any) -> None:
    """The loaded sweep's warnings (kopt.core.spec.Sweep.warnings), one ``note:`` line each."""
    for w in sw.warnings:
        console.print(f"[yellow]note:[/] {escape(w)}", highlight=False, soft_wrap=True)


OS_HINTS = {errno.EEXIST: "a file is in the way: move it or choose another path",
            errno.ENOTDIR: "part of the path is a file, not a folder",
            errno.EISDIR: "is a folder, not a file",
            errno.EACCES: "no permission",
            errno.EROFS: "a read-only file system: pass a folder you can write to",
            errno.ELOOP: "a symlink loop: point it at a real folder or file",
            errno.ENOSPC: "the disk is full: free space there; what was measured before is "
                          "stored, and `kopt sweep DIR --store STORE --resume RUN_ID` "
                          "finishes an interrupted sweep"}


def os_error_line(e: OSError) -> str:
    """One line for an OSError that reached the CLI: the file when it is known, the
    system's words and what to do (:data:`OS_HINTS`); pyarrow's write errors carry their
    number only in the text (``[errno 28]``)."""
    code = e.errno
    if code is None:
        m = re.search(r"\[errno (\d+)\]", str(e))
        code = int(m.group(1)) if m else None
    hint = OS_HINTS.get(code or 0, "")
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{e.strerror or e}" + (f" ({hint})" if hint else "")


def pipe_closed() -> None:
    """Exit quietly, as Unix tools do, when the reader of stdout has gone (``| head -1``):
    stdout is pointed at /dev/null (Python's flush at exit would fail again) and the exit
    code is 141 (128 + SIGPIPE, what a shell reports for ``seq 1 9999999 | head -1``)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (a test's buffer)
        pass
    sys.exit(128 + signal.SIGPIPE)


def print_rejection(device_class: str, iteration: int, verdict: Any) -> None:
    """The review gate's rejection of an iteration's winner, one line on the console."""
    from kopt.loop.review import rejection_line

    console.print(f"[yellow]{escape(rejection_line(iteration, device_class, verdict))}[/]",
                  highlight=False, soft_wrap=True)


def compile_errors_line(obs: ConsoleProgress) -> str | None:
    """The line `kopt sweep` and `kopt submit` print when builds failed (rich markup):
    ``nothing compiled (4 compile errors); the compiler's first error: f.cpp:3:5: error:
    ...`` -- or ``1 of 3 builds failed (...)`` when some compiled; None when every build
    ``obs`` saw compiled."""
    from kopt.tools.report import first_error

    if obs.build_error is None:
        return None
    head = ("nothing compiled" if obs.builds_failed == obs.builds
            else f"{obs.builds_failed} of {counted(obs.builds, 'build')} failed")
    return (f"[red]{head}[/] ({counted(obs.compile_errors, 'compile error')}); the "
            f"compiler's first error: {escape(first_error(obs.build_error))}")


class ConsoleProgress(ProgressCallback):
    """Rich progress: builds done, runs done, failures, ETA."""

    def __init__(self) -> None:
        self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[extra]}"), TimeElapsedColumn(),
                          TextColumn("eta"), TimeRemainingColumn(), console=console)
        self.failed = 0
        self.iteration = 0
        self.label = ""
        self.build_error: str | None = None  # the first failed build's compiler output
        self.builds = self.builds_failed = 0  # builds seen / failed, over every iteration
        self.compile_errors = 0  # jobs left without a build, over every iteration
        self._beat_stop = threading.Event()
        self._beat_thread: threading.Thread | None = None
        self.stages: dict[str, str] = {}  # device class -> what it does now (on_stage)

    def on_run(self, run_id: str, store: Path) -> None:
        self.run_id, self.store = run_id, store
        console.print(f"run {run_id} (store {escape(str(store))})", highlight=False)

    def on_phase(self, label: str) -> None:
        self.label = label

    def on_stage(self, device_class: str, stage: str) -> None:
        """Said by the heartbeat's lines while it lasts (a contest runs long with every
        count already full: a new user read the repeated lines as stuck)."""
        if stage:
            self.stages[device_class] = stage
        else:
            self.stages.pop(device_class, None)

    def stage_text(self) -> str:
        """What the heartbeat's line adds: ``; CLASS: STAGE`` per device class in a stage."""
        return "".join(f"; {dc}: {st}" for dc, st in list(self.stages.items()))

    def on_start(self, n_builds: int, n_jobs: int, devices: list[dict]) -> None:
        self.iteration += 1
        if self.iteration == 1:
            for d in devices:
                console.print(escape(f"device: {d['name']} ({d['device_class']}, "
                                     f"{d.get('node_ip', '')})"), highlight=False)
                if d.get("isolation") == "none":  # workers.isolation
                    console.print("[yellow]note:[/] " + escape(
                        f"{d['name']}: candidates run without a sandbox, with kopt's own "
                        f"rights ({d.get('isolation_why') or 'reason unknown'})"),
                        highlight=False, soft_wrap=True)
            self.p.start()
            if not console.is_terminal:  # a CI log, a file: the bars only draw at the end
                self._beat_thread = threading.Thread(target=self._beat, daemon=True,
                                                     name="kopt-progress")
                self._beat_thread.start()
        else:
            for t in list(self.p.task_ids):
                self.p.remove_task(t)
        it = f"{self.label} " if self.label else ""
        self.failed = 0
        self.tb = self.p.add_task(it + "built", total=n_builds, extra="")
        self.tr = self.p.add_task(it + "ran  ", total=n_jobs, extra="failed 0")

    def on_metrics(self, device_class: str, aliased: dict, missing: list) -> None:
        for alias, name in aliased.items():
            console.print(escape(f"{device_class}: metric {name} read as {alias}"),
                          highlight=False)
        if missing:
            console.print(f"[yellow]{escape(device_class)}: ncu lacks "
                          f"{counted(len(missing), 'metric')}, not collected[/]: "
                          f"{escape(', '.join(missing))}", highlight=False)

    def on_evidence(self, device_class: str, ev: Any, triggered: dict | None) -> None:
        scores = ", ".join(f"{a} {v:.2f}" for a, v in ev.scores.items())
        fired = sorted(m for m, v in (triggered or {}).items() if v)
        self.p.console.print(escape(f"baseline ({device_class}): bottleneck {ev.bottleneck} "
                                    f"({scores}); triggered: {', '.join(fired) or 'none'}"),
                             highlight=False)

    def on_iteration(self, device_class: str, st: Any) -> None:
        if st.closing:  # the loop's close: printed under the closing table
            return
        best = st.best or {}
        trip = " + ".join(m for m in best.get("triple") or [] if m) or "(no method)"
        neck = (f"bottleneck {st.bottleneck_before or '?'} -> {st.bottleneck_after or '?'}"
                if st.bottleneck_before or st.bottleneck_after
                else "bottleneck not measured (no NCU profile)")
        so_far = (f"best so far {trip} {kv_text(json.dumps(best.get('params') or {}), False)} "
                  f"({best.get('speedup') or 1.0:.3g}x the baseline of iteration "
                  f"{best.get('iteration', st.iteration)})"
                  if best.get("candidate_id") else "no correct candidate so far")
        self.p.console.print(escape(
            f"iteration {st.iteration} ({device_class}): "
            f"{counted(st.n_candidates, 'correct candidate')}; "
            f"{neck}; {so_far}"), highlight=False)

    def on_fault(self, message: str) -> None:
        self.p.console.print(f"[yellow]fault:[/] {escape(message)}", highlight=False)

    def on_note(self, message: str) -> None:
        self.p.console.print(f"[yellow]note:[/] {escape(message)}", highlight=False)

    def on_build(self, result: Any, n_jobs: int) -> None:
        self.p.advance(self.tb)
        self.builds += 1
        if not result.ok:
            if self.build_error is None:
                self.build_error = result.error
            self.builds_failed += 1
            self.compile_errors += n_jobs
            self.failed += n_jobs
            self.p.advance(self.tr, n_jobs)
            self.p.update(self.tr, extra=f"failed {self.failed}")

    def on_result(self, row: dict[str, Any]) -> None:
        if row["status"] == "compile_error":
            return
        if row["status"] != Status.OK:
            self.failed += 1
        self.p.advance(self.tr)
        self.p.update(self.tr, extra=f"failed {self.failed}")

    def _beat(self) -> None:
        """Without a terminal the bars only draw at the end: a plain progress line every
        :func:`heartbeat_s` seconds instead, also while nothing completes (long builds, a
        contest)."""
        t0 = time.monotonic()
        every, note = heartbeat_s()
        if note:
            console.print(note, highlight=False)
        while not self._beat_stop.wait(every):
            tasks = {t.id: t for t in self.p.tasks}
            b, r = tasks.get(self.tb), tasks.get(self.tr)
            if b is None or r is None:  # between iterations
                continue
            console.print(escape(f"{self.label or f'it {self.iteration}'}: built "
                                 f"{b.completed:.0f}/{b.total:.0f}, ran {r.completed:.0f}/"
                                 f"{r.total:.0f}, failed {self.failed} "
                                 f"({time.monotonic() - t0:.0f} s){self.stage_text()}"),
                          highlight=False)

    def on_finish(self, summary: Any) -> None:
        self.stop()
        for dc, st in summary.states.items():
            if st.stop:
                console.print(escape(f"{dc}: the loop stopped after iteration "
                                     f"{st.iteration}: {st.stop}"), highlight=False)

    def on_contest(self, device_class: str, verdict: Any) -> None:
        msg = (f"tie within noise between {len(verdict.tied)} candidates; the simplest won"
               if len(verdict.tied) > 1 else "clear winner")
        self.p.console.print(escape(f"contest ({device_class}): {len(verdict.labels)} "
                                    f"contenders re-measured side by side: {msg}"),
                             highlight=False)

    def on_review(self, device_class: str, iteration: int, verdict: Any) -> None:
        print_rejection(device_class, iteration, verdict)

    def stop(self) -> None:
        self._beat_stop.set()
        if self._beat_thread is not None:
            self._beat_thread.join()
        if self.p.live.is_started:  # a never-started display would print an empty line
            self.p.stop()


def cell(v: Any) -> str:
    """A table cell: floats to 4 significant digits, and from 10,000 on whole with
    thousands separators (``162,345``, never ``1.623e+05``); rich markup escaped."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if math.isfinite(v) and abs(v) >= 1e4 else f"{v:.4g}"
    return escape(str(v))


def json_safe(col: str, v: Any) -> Any:
    """Non-finite floats become null (JSON has no Infinity/NaN); the JSON-text columns
    (params, defines, dims, state, devices, options, env) are embedded as JSON."""
    import math

    if isinstance(v, float) and not math.isfinite(v):
        return None
    if col in ("params", "defines", "dims", "state", "devices", "options", "env") and \
            isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return v
    return v


def closing_line(device_class: str, closing: dict[str, Any]) -> str:
    """The loop's closing figure on one device class, from its closing contest (the first
    baseline and the iteration winners re-measured side by side; kopt.core.winner.close_loop)."""
    best = closing.get("best") or {}
    trip = " + ".join(m for m in best.get("triple") or [] if m) or "(no method)"
    sp = closing.get("speedup")
    figure = (f"{sp:.3g}x the first baseline" if sp is not None
              else "no total speedup (the first baseline was not re-measured)")
    if closing.get("first_baseline_ms") and closing.get("best_ms"):
        figure += (f" ({closing['first_baseline_ms']:.4g} ms -> {closing['best_ms']:.4g} ms, "
                   "measured side by side)")
    who = (f" from iteration {closing['winner_of'][best['candidate_id']]}"
           if closing.get("winner_of", {}).get(best.get("candidate_id")) else "")
    line = (f"loop result ({device_class}): best {trip}{who} "
            f"{kv_text(json.dumps(best.get('params') or {}))}: {figure}")
    return line + (f"; {closing['note']}" if closing.get("note") else "")


REF_NOTE = ("vs reference: the median of ref.py's contender (else reference), timed as the "
            "candidates are, over the candidate's ('-': not timed; `reference_timing` in "
            "sweep.yaml)")


def speedup_text(v: float | None) -> str:
    v = figure_text(v)
    return "-" if v is None else f"{v:.3f}x"


def kv_text(text: str | None, markup: bool = True) -> str:
    """``{"A": 1, "B": 2}`` (JSON text) -> ``A=1 B=2`` (rich markup escaped unless
    ``markup`` is False)."""
    if not text:
        return "-"
    from kopt.store.files import stored_json

    kv = " ".join(f"{k}={v}" for k, v in stored_json(text, "params or dims").items()) or "-"
    return escape(kv) if markup else kv


def figure_text(v: Any) -> float | None:
    """``v`` as a positive finite float, else None (a rate of 0, NaN or infinity says
    nothing and must never be divided by)."""
    import math

    if v is None or isinstance(v, bool):
        return None
    v = float(v)
    return v if math.isfinite(v) and v > 0 else None


def rate_text(r: dict[str, Any]) -> str:
    """Achieved rate from the spec's flops/bytes: TFLOP/s for arithmetic-heavy kernels
    (>= 10 FLOP per byte moved), else GB/s; ``-`` when neither is a positive figure."""
    tf, gb = figure_text(r.get("tflops")), figure_text(r.get("gbps"))
    if tf is not None and (gb is None or tf * 1e3 >= 10 * gb):
        return f"{tf:.3g} TFLOP/s" + of_peak_text(r.get("pct_peak_flops"))
    return f"{gb:.4g} GB/s" + of_peak_text(r.get("pct_peak_bw")) if gb is not None else "-"


def of_peak_text(pct: Any) -> str:
    """`` (N% of peak)`` for a known share of the device's peak, else nothing."""
    v = figure_text(pct)
    return "" if v is None else f" ({v:.3g}% of peak)"


def methods_text(r: dict[str, Any]) -> str:
    """The candidate's methods, one per line (``a\n+ b``: a table's methods column, made
    ``no_wrap``, is then as wide as its longest method id, never one cut in two): those
    carried from earlier iterations' winners (``carried``, a JSON list, when the row has it)
    and its own triple."""
    from kopt.store.files import stored_json

    ms = stored_json(r.get("carried"), "carried", list) + [
        r.get(k) for k in ("compute_method", "memory_method", "latency_method")]
    return escape("\n+ ".join(dict.fromkeys(m for m in ms if m)) or "(no method)")


def print_table(t: Table, empty: str) -> None:
    """Print table ``t`` on stdout, or, when it has no row, the one line ``empty`` (rich
    markup) in its place: a table of headers alone says nothing."""
    if t.row_count:
        out.print(t)
    else:
        out.print(empty, highlight=False, soft_wrap=True)


def phases_table(rows: list[dict[str, Any]]) -> Table:
    """The run's phase times (kopt.util.phases.phase_summary) as a table."""
    from kopt.util.phases import phase_summary

    t = Table(title="where the run's time went: seconds since kopt started "
                    "(`kopt report RUN_ID` draws the timeline)",
              caption="a phase xN: the sum of N intervals between its first start and its "
                      "last end (a device's jobs, the builds' compiler seconds)")
    for c in ("phase", "where", "start s", "end s", "seconds"):
        t.add_column(c, overflow="fold")
    for phase, where, start, end, secs in phase_summary(rows):
        t.add_row(phase, escape(where), f"{start:.2f}", f"{end:.2f}", f"{secs:.2f}")
    return t


def summary_line(summary: Any, root: Path) -> str:
    """The run's closing count line. After ``--resume`` the counts are the whole run's (read
    from the store), with how many jobs were measured before and how many now."""
    counts = summary.status_counts
    done = summary.n_jobs - summary.n_skipped
    if summary.n_skipped:
        from kopt.store.database import Database

        counts = Database(root).status_counts(summary.run_id)
    text = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    how = (f"{summary.n_skipped} measured before this resume, {done} now"
           if summary.n_skipped else f"{done} measured")
    return (f"run [bold]{summary.run_id}[/]: {counted(summary.n_candidates, 'candidate')}, "
            f"{counted(summary.n_jobs, 'job')} ({how}) in {summary.wall_s:.1f} s; "
            + (f"whole run: {text}" if summary.n_skipped else text or "nothing to run"))


def ineffective_text(ineffective: dict[str, str | None]) -> str:
    """Methods found ineffective with what they were judged under (kopt.core.expand's
    ``judged_under``): ``m (under a memory bottleneck)``, or without a profiler ``m (no gain
    over ID; admitted again once another candidate is the best)``: a bare list read as if
    the method stayed barred while the next iteration's scan admitted it under a new best."""
    parts = []
    for m, why in ineffective.items():
        if why and why.startswith("unprofiled:"):
            parts.append(f"{m} (no gain over {why.split(':', 1)[1]}, unprofiled; admitted "
                         "again once another candidate is the best)")
        else:
            parts.append(f"{m} (under a {why} bottleneck; admitted again once it changes)"
                         if why else m)
    return ", ".join(parts)


def verdict_lines(v: dict[str, Any]) -> list[str]:
    """`kopt wait`'s text: three lines per device class of ``v`` (kopt.tools.wait.verdict):
    the winner with its median and speedup over the baseline (with several problem sizes,
    said to be geometric means over them, as `kopt lineage` says), the review's verdict;
    the best, bottleneck, ineffective methods and stop; the candidate ids."""
    out = []
    for c in v["classes"]:
        ok = {True: "accepted", False: "rejected", None: "not reviewed"}[c["accepted"]]
        won = next((r for r in c.get("results", []) if r["candidate_id"] == c["winner"]), {})
        n = won.get("sizes") or 0
        gm = f" (geometric means over {n} problem sizes)" if n > 1 else ""
        out.append(f"{c['device_class']} iteration {c['iteration']}: winner "
                   f"{c['winner'] or 'none'}, {cell(c['median_ms'])} ms, "
                   f"{speedup_text(c['speedup'])} over the baseline{gm}; {ok}"
                   + (": " + "; ".join(c["reasons"]) if c["reasons"] else ""))
        out.append(f"  best {c['best']}; bottleneck {c['bottleneck_before'] or 'unknown'} -> "
                   f"{c['bottleneck_after'] or 'unknown'}; ineffective: "
                   f"{ineffective_text(c['ineffective']) or 'none'}; stop: {c['stop'] or 'no'}")
        out.append(f"  candidates: {' '.join(c['candidates']) or 'none'}")
    return out


def tie_lines(rows: list[dict[str, Any]]) -> list[str]:
    """`kopt best`'s line per row of ``rows`` (kopt.store.select.best) whose named best is
    in a tie within noise; with several rows (problem sizes), each line names its size."""
    return [f"{r['device_class']}{' at ' + kv_text(r['dims'], False) if len(rows) > 1 else ''}"
            f": a tie within noise between {r['tied_with']} candidates, re-measured side by "
            "side; the simplest is named: the fewest methods, then the lowest median "
            "(`kopt query \"select iteration, candidate_id, label, round(median_ms, 4) "
            f"median_ms, winner from contests where run_id = '{r['run_id']}' order by "
            "iteration, median_ms\"` lists them)"
            for r in rows if r["tied_with"] > 1]


def unnamed_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per device class of ``rows`` (kopt.store.select ``best`` or ``top``) none of
    whose rows is the loop's named best: the run did not close with a winner there
    (interrupted before its closing, no first baseline passed its check, or the closing
    dropped every contender), so the rows are candidates' own figures, which only a closing
    checks again and times by the outside clock (a candidate that scaled the harness's clock
    by 1/100 read 274x in its own job: red-team round 11)."""
    named = {r["device_class"] for r in rows if r["named"]}
    return [f"{dc}: no best named in this run (the loop did not close with a winner); these "
            "figures are each candidate's own job, not checked again and not timed by the "
            "outside clock at a closing: not a verdict" for dc in
            dict.fromkeys(r["device_class"] for r in rows) if dc not in named]
