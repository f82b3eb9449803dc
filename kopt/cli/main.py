"""The ``kopt`` command line (click): every command (sweep, preflight, query, best, propose,
report, env, serve, submit, wait, lineage, catalog, export, methods, triage, port); what they
print and how goes through :mod:`kopt.cli.console`."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.table import Table

from kopt.cli.console import (
    MAX_TABLE_ROWS,
    REF_NOTE,
    ConsoleProgress,
    cell,
    closing_line,
    compile_errors_line,
    console,
    escape,
    fail,
    json_safe,
    kv_text,
    methods_text,
    noted,
    os_error_line,
    out,
    phases_table,
    pipe_closed,
    print_table,
    rate_text,
    show_note,
    spec_notes,
    speedup_text,
    summary_line,
    tie_lines,
    unnamed_lines,
)
from kopt.core.spec import SpecError, load_sweep
from kopt.store.files import QueryError, complete_rows, default_root, resume_command
from kopt.strategy import STRATEGIES
from kopt.tools.defaults import BENCH_RUNS
from kopt.util.words import counted
from workers.status import Status


class _Finite(click.FloatRange):
    """A FloatRange that refuses NaN, which passes every range check (``--min-share nan``
    kept every kernel), and infinities (``--timeout 1e308``, ``inf``: an OverflowError
    traceback in the timer)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        v = super().convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return v


class _SmArch(click.ParamType):
    """An SM arch as nvcc's ``sm_XY`` takes it: ``major * 10 + minor`` (``90``, ``120``; an
    ``sm_`` prefix is allowed), bounded to ``SM_ARCHS``. 0 read as "no value" (the default
    sm_90), -1 and 99999 reached nvcc as ``-arch=sm_-1``."""

    name = "sm_arch"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        text = str(value).strip().lower().removeprefix("sm_")
        if text.isdigit() and int(text) in SM_ARCHS:
            return int(text)
        self.fail(f"{value!r} is not an SM arch: give major*10+minor, {SM_ARCHS.start} to "
                  f"{SM_ARCHS.stop - 1} (e.g. 90 for sm_90, 120 for sm_120)", param, ctx)


SM_ARCHS = range(30, 130)  # sm_30 (Kepler) .. sm_12x (Blackwell): what nvcc has ever named
WEEK_S = 7 * 86400.0  # the longest --timeout: beyond it no timer is meant
# the most CPU device actors per node: each takes a core of its own (the pipeline refuses
# more than the cluster has, once Ray is up); past this, listing the slots never ends
MAX_CPU_DEVICES = 4096
# the most of any resource Ray accepts (ray._private.ray_constants.MAX_RESOURCE_QUANTITY,
# 100e12): a head asked for more fails to start, and `serve start` said so only after
# 65 s, blaming --address
RAY_MAX_RESOURCE = 10**14
STORE_OPT = click.option("--store", type=click.Path(path_type=Path), default=None,
                         help="Store root (default: $KOPT_STORE or ./kopt-store).")
# which run `kopt best`, `kopt export` and `kopt propose` read without --run (one rule:
# kopt.store.database.LATEST_RUN)
LATEST_HELP = ("the sweep's latest run (the latest that stored a result; when it was "
               "interrupted, a note says so, how to resume it and which run is the latest "
               "finished one)")


def _store(store: Path | None) -> Path:
    return store if store is not None else default_root()










class _Group(click.Group):
    """Store problems surface as one clear line, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from kopt.store.files import StoreWarning

        noted.clear()
        with warnings.catch_warnings():  # every store note reaches show_note, once per command
            warnings.simplefilter("always", StoreWarning)
            warnings.showwarning = show_note
            return self._invoke(ctx)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """Click's, then a usable build cache for a command that builds (:data:`BUILDING`;
        others neither need nor create ``$KOPT_CACHE/builds``)."""
        from workers.build import check_env

        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and cmd.name in BUILDING:
            check_env(builds=True)
        return name, cmd, rest

    def _invoke(self, ctx: click.Context) -> Any:
        from kopt.store.database import DatabaseError, explain, interrupted
        from workers.build import EnvError, check_env

        try:
            check_env(builds=False)  # no side effect; a building command checks the rest
            return super().invoke(ctx)
        except BrokenPipeError:  # `kopt query ... | head -1`: the reader has what it wanted
            pipe_closed()
        except (QueryError, EnvError) as e:
            fail(str(e))
        except (KeyboardInterrupt, RuntimeError) as e:  # Ctrl-C, also inside a DuckDB query
            if not interrupted(e):
                raise
            fail("interrupted (Ctrl-C)", 130)
        except DatabaseError as e:  # a Ctrl-C inside DuckDB's call back into Python, too
            fail("interrupted (Ctrl-C)", 130) if interrupted(e) else fail(str(explain(e)))
        except OSError as e:  # a path in the way, a full disk, a read-only store
            fail(os_error_line(e))


# OSError numbers -> what to do (a full disk once said only "error: : No space left")
# the commands that build candidates: only they need a usable build cache ($KOPT_CACHE)
BUILDING = frozenset({"sweep", "preflight", "submit", "run-submitted", "port"})






@click.group(cls=_Group)
@click.version_option(package_name="kopt")
def main() -> None:
    """kopt: sweep CUDA/C++ kernel candidates over launch configs and optimization methods."""


































@main.command()
@click.argument("sweep_dir", type=click.Path(path_type=Path))
@STORE_OPT
@click.option("--backend", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True, help="auto: CUDA when a GPU is visible, else the C++ source.")
@click.option("--max-candidates", type=click.IntRange(min=1), default=None,
              help="Cap per device class: the baseline plus a deterministic sample (drawn "
                   "at random by index in a space of over 2,000,000 launch configs, which "
                   "needs a cap).")
@click.option("--resume", "resume", metavar="RUN_ID", default=None,
              help="Finish a killed run; nothing already measured is measured again.")
@click.option("--cpu-devices", type=click.IntRange(1, MAX_CPU_DEVICES), default=1,
              show_default=True, help="CPU backend: how many single-thread CPU device actors.")
@click.option("--address", default=None, help="Ray cluster address (default: embedded local Ray).")
@click.option("--cluster", type=click.Path(dir_okay=False), default=None,
              help="A Ray cluster-launcher YAML (ray_cluster.yaml): attach to its head.")
@click.option("--iterations", type=click.IntRange(min=1), default=None,
              help="Optimization-loop iterations (default: the spec's `iterations`).")
@click.option("--strategy", type=click.Choice(list(STRATEGIES)),
              default=None,
              help="(default exhaustive) exhaustive: measure every candidate fully; "
                   "random: a uniform sample (--max-candidates, or a quarter of the space; "
                   "--seed); halving: screen every candidate with 5 samples, re-measure the "
                   "best third (at least 3) with 15, then the best third (at least 3) of those "
                   "with the spec's timing; the baseline in every rung.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="The random strategy's sample (default 0).")
@click.option("--top", "top_k", default=5, show_default=True, type=click.IntRange(min=1),
              help="Rows in the closing table.")
@click.option("--queue", is_flag=True,
              help="Run on the warm kopt service (`kopt serve start`) of --address/--cluster, "
                   "else the one recorded on this machine: its device actors, no start-up.")
def sweep(sweep_dir: Path, store: Path | None, backend: str, max_candidates: int | None,
          resume: str | None, cpu_devices: int, address: str | None, cluster: str | None,
          iterations: int | None, strategy: str | None, seed: int | None,
          top_k: int, queue: bool) -> None:
    """Expand, build, run and store every candidate of SWEEP_DIR; print the best.

    With several iterations, each takes the last winner as its baseline and the
    next method triples from the catalog's priority scan and the NCU evidence.
    """
    from kopt.driver.sweep import run_sweep
    from kopt.run.runner import SweepError
    from kopt.store.database import interrupted

    try:
        sw = load_sweep(sweep_dir)
    except SpecError as e:
        fail(str(e))
    spec_notes(sw)
    root = _store(store)
    if cluster and address:
        fail("--cluster and --address both name a Ray head: give one")
    if seed is not None and (strategy or "exhaustive") != "random" and not resume:
        fail(f"--seed {seed} only applies to --strategy random")
    if resume and root.is_dir():
        _exit_if_finished(root, resume, sw.name)
    obs = ConsoleProgress()
    ray_before = _ray_up()
    try:
        summary = run_sweep(sw, root, backend=backend, max_candidates=max_candidates,
                            resume=resume, cpu_devices=cpu_devices, address=address,
                            iterations=iterations, observers=[obs], cluster=cluster,
                            strategy=strategy, seed=seed, queue=queue)
    except SpecError as e:
        obs.stop()
        msg = str(e)
        fail(msg if msg.startswith(str(sw.spec_path)) else f"{sw.spec_path}: {msg}")
    except SweepError as e:
        obs.stop()
        fail(str(e))
    except (KeyboardInterrupt, Exception) as e:  # Exception: DuckDB's form of a Ctrl-C
        if not interrupted(e):
            raise
        obs.stop()
        _sweep_interrupted(e, getattr(obs, "run_id", None),
                           resume_command(sweep_dir, root, obs.run_id, queue=queue,
                                          address=address, cluster=cluster)
                           if getattr(obs, "run_id", None) else "")
    try:
        _show_sweep(summary, sw, root, top_k, obs, leave_ray=not ray_before)
    except KeyboardInterrupt as e:  # the run is stored; say so, not "Ctrl-C"
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        console.print(escape(f"interrupted while showing the results: run {summary.run_id} is "
                             f"finished and stored (`kopt best {sw.name} --run "
                             f"{summary.run_id}` shows it)"), highlight=False, soft_wrap=True)
        sys.exit(_interrupt_code(e))


def _exit_if_finished(root: Path, run_id: str, sweep_name: str) -> None:
    """``--resume RUN_ID`` of a finished run: say so and exit 0 (nothing to resume)."""
    from kopt.store.database import run_record

    rec = run_record(root, run_id)
    if rec is not None and rec.get("status") == "finished" and rec.get("sweep") == sweep_name:
        console.print(escape(f"run {run_id} is finished: every job is measured and its "
                             f"winners are stored; nothing to resume (`kopt best {sweep_name} "
                             f"--run {run_id}` or `kopt report {run_id}` show it)"),
                      highlight=False, soft_wrap=True)
        sys.exit(0)


def _sweep_interrupted(e: BaseException, run_id: str | None, hint: str) -> NoReturn:
    """Exit after a sweep stopped by Ctrl-C or SIGTERM (``e``), saying whether anything was
    stored and ``hint``, the command that finishes run ``run_id``."""
    # everything is flushed; more Ctrl-C would only cut Ray's shutdown with a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if run_id is None:
        console.print("[yellow]interrupted[/] before the run started: nothing was stored")
    else:
        console.print("[yellow]interrupted[/]: every finished measurement is stored; finish "
                      + escape(f"with `{hint}`"), highlight=False)
    sys.exit(_interrupt_code(e if isinstance(e, KeyboardInterrupt) else KeyboardInterrupt()))


def _show_sweep(summary: Any, sw: Any, root: Path, top_k: int, obs: Any,
                leave_ray: bool) -> None:
    """The end of `kopt sweep` once its run is stored: leave Ray (``leave_ray``), print the
    summary, the fastest candidates, each loop's closing line and the phase totals; exits
    0, or 1 when no candidate was correct."""
    from kopt.store.select import top

    if leave_ray:
        _leave_ray()
    console.print(summary_line(summary, root), highlight=False)
    for it, rungs in sorted(summary.rungs.items()):
        if len(rungs) > 1:
            console.print(f"iteration {it}, successive halving: " + ", ".join(
                f"rung {r} measured {counted(n, 'candidate')}" for r, n in sorted(rungs.items())),
                highlight=False)
    rows = top(summary.run_id, top_k, root)
    if not summary.status_counts.get(Status.OK) and not summary.n_skipped:
        line = compile_errors_line(obs)
        if set(summary.status_counts) == {"compile_error"} and line is not None:
            console.print(line, highlight=False)
        console.print("[red]no candidate was correct[/]: see `kopt query \"select params, status, "
                      f"error from candidates where run_id = '{summary.run_id}'\"`")
        if set(summary.status_counts) == {Status.WRONG_RESULT}:
            console.print(ALL_WRONG_HINT, highlight=False)
        exit_code = 1
    else:
        exit_code = 0
    t = Table(title=f"{escape(sw.name)}: fastest correct candidates ({summary.backend}), at "
                    f"most {top_k} per problem size (--top); "
                    "* = the loop's named best; speedup over the row's own iteration's "
                    "baseline; side by side: the closing contest (first baseline and "
                    "iteration winners re-measured together); " + REF_NOTE)
    for c in ("device class", "dims", "it", "methods", "params", "median ms", "IQR ms",
              "speedup", "side by side ms", "vs first baseline", "vs reference", "rate"):
        t.add_column(c, overflow="fold", no_wrap=c == "methods")  # methods_text: one a line
    for r in rows:
        t.add_row(cell(r["device_class"]), kv_text(r["dims"]), str(r["iteration"]),
                  ("* " if r["named"] else "") + methods_text(r)
                  + (" (baseline)" if r["is_baseline"] else ""),
                  kv_text(r["params"]), cell(r["median_ms"]), cell(r["iqr_ms"]),
                  speedup_text(r["speedup"]), cell(r["side_by_side_ms"]),
                  speedup_text(r["vs_first_baseline"]), speedup_text(r["vs_reference"]),
                  rate_text(r))
    if rows or not exit_code:  # none correct: the line above says so
        print_table(t, "no fastest correct candidates to show: none of this run's measured "
                        "jobs is correct")
    for dc, st in sorted(summary.states.items()):
        if st.closing:
            out.print(closing_line(dc, st.closing), highlight=False)
    for line in unnamed_lines(rows):
        out.print(escape(line), highlight=False)
    _reference_note(root, summary.run_id, rows)
    if summary.phases:
        out.print(phases_table(summary.phases))
    _exit_now(exit_code)


_STANDALONE = False  # this process is the `kopt` command itself (entry), not a caller's


def _exit_now(code: int) -> NoReturn:
    """End `kopt sweep` once its run is stored and printed: stdout and stderr flushed, then
    ``os._exit`` -- the interpreter's teardown (every module, Ray's core worker) took about
    0.3 s of an H200 host's sweep after its last line (py-spy, docs/verified run 8c), and
    nothing is left to write. Only when this process is the `kopt` command (:func:`entry`);
    under a caller (a test's CliRunner) a plain SystemExit."""
    if not _STANDALONE:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or None: nothing to flush
            pass
    os._exit(code)


def entry() -> None:
    """The `kopt` console script and ``python -m kopt.cli.main``: :func:`main` as the process."""
    global _STANDALONE
    _STANDALONE = True
    main()


def _ray_up() -> bool:
    """Whether this process is attached to Ray already (a caller's, e.g. a test's)."""
    from kopt.run.cluster import attached

    return attached()


def _leave_ray() -> None:
    """Leave the Ray this command attached to (its embedded instance stopped, a cluster only
    left) once the sweep is stored, before the results are printed: Ray's own exit hook
    first sleeps 0.5 s "to make sure log messages finish printing"
    (ray._private.worker.shutdown), time a finished sweep has no use for, and then stops
    the embedded instance's processes one by one (kopt.run.raystop.leave_ray: all at once)."""
    from kopt.run.raystop import leave_ray

    leave_ray()


@main.command()
@click.argument("sweep_dir", type=click.Path(path_type=Path))
@click.option("--backend", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True)
@click.option("--arch", type=_SmArch(), default=None,
              help="SM arch to build for when no GPU is here (e.g. 90, 87); default 90.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              help="json: the figures as one object (the table's rows, NaN as null).")
def preflight(sweep_dir: Path, backend: str, arch: int | None, fmt: str) -> None:
    """Build the baseline, run it once against the reference, print its figures. Writes nothing."""
    from kopt.tools.preflight import PreflightError, run_preflight

    try:
        sw = load_sweep(sweep_dir)
        spec_notes(sw)
        r = run_preflight(sw, backend, arch)
    except (SpecError, PreflightError) as e:
        fail(str(e))
    if fmt == "json":
        click.echo(json.dumps({k: json_safe(k, v) for k, v in r.items()}, indent=1,
                              default=str))
        sys.exit(0 if r["status"] in (Status.OK, "built") else 1)
    t = Table(title=escape(f"preflight {sw.name} ({r['backend']}, {r['device']})"),
              show_header=False)
    for k in ("signature", "candidates", "command", "compile_s", "registers", "smem_bytes",
              "spill_bytes", "launch", "dims", "status", "error", "note", "max_abs_err",
              "median_ms", "iqr_ms", "n_samples"):
        if r.get(k) not in (None, ""):
            t.add_row(k, cell(r[k]))
    out.print(t)
    if r["status"] not in (Status.OK, "built"):
        sys.exit(1)


@main.command()
@click.argument("sql")
@STORE_OPT
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.option("--max-rows", type=click.IntRange(min=1), default=MAX_TABLE_ROWS,
              show_default=True,
              help="Rows in table output; the others are counted (csv and json print all).")
def query(sql: str, store: Path | None, fmt: str, max_rows: int) -> None:
    """Run read-only SQL over the store's views (one per table: candidates, runs, metrics,
    iterations, contests, profiles, reference, phases, sources, versions, provenance,
    evidence, reviews, ports, triage_kernels, triage_paths, triage_actions, triage_launches).

    The query reads only the store's views: other files, URLs and extensions are refused.
    """
    from kopt.store.database import Database

    if not _store(store).is_dir():
        fail(f"no store at {_store(store)} (run `kopt sweep` first, or pass --store DIR)")
    try:
        res = Database(_store(store)).open_query(sql)
    except QueryError as e:
        fail(str(e))
    with res:
        cols = res.columns
        if fmt == "csv":  # streamed: a batch of rows at a time
            w = csv.writer(sys.stdout, lineterminator="\n")
            w.writerow(cols)
            for rows in res.batches():
                w.writerows(rows)
        elif fmt == "json":  # streamed, the same text as json.dumps(list, indent=1)
            first = True
            for rows in res.batches():
                text = json.dumps([{c: json_safe(c, v) for c, v in zip(cols, r)}
                                   for r in rows], default=str, indent=1)
                sys.stdout.write(("[\n" if first else ",\n") + text[2:-2])  # "[\n" ... "\n]"
                first = False
            sys.stdout.write("[]\n" if first else "\n]\n")
        else:
            t = Table()
            for c in cols:
                t.add_column(escape(c), overflow="fold")  # user text (markup escaped)
            shown = left = 0
            for rows in res.batches():
                take = rows[:max_rows - shown]
                for r in take:
                    t.add_row(*(cell(v) for v in r))
                shown += len(take)
                left += len(rows) - len(take)
            print_table(t, escape(f"no rows (columns: {', '.join(cols)})"))
            if left:
                console.print(f"{shown} of {shown + left} rows shown; `--format csv` or "
                              "`--format json` prints all of them (or `--max-rows N`)",
                              highlight=False)


def _interrupt_code(e: KeyboardInterrupt) -> int:
    """The exit code after an interrupted sweep: 128 + the signal, as a shell reports a
    process the signal ended: 130 for Ctrl-C (SIGINT), 143 for SIGTERM
    (kopt.driver.sweep.stop_signal)."""
    from kopt.run.signals import stop_signal

    return 128 + int(stop_signal(e))


def _run_state_note(root: Path, run_id: str, unrecorded: bool = True, sweep: str | None = None,
                    shown: str = "these are the figures measured before it stopped") -> None:
    """A note on stderr when ``run_id`` is not finished: interrupted (its driver stopped or
    was killed; ``shown`` says what the command shows of it, then how to resume it with the
    ``--queue``/``--address``/``--cluster`` it ran with and, given ``sweep``, the sweep's
    latest finished run when that is another), still running (who writes it), or without
    a record (a damaged or partial store: :func:`kopt.store.files.no_run`; not when ``unrecorded``
    is False: the caller refuses such a run itself)."""
    from kopt.store.database import Database
    from kopt.store.files import lock_holder, no_run, recorded_resume_command

    db = Database(root)
    rec = db.run(run_id) or {}
    if not rec and unrecorded:
        console.print("[yellow]note:[/] " + escape(no_run(root, run_id)), highlight=False,
                      soft_wrap=True)
    elif rec.get("status") == "interrupted":
        done = db.latest_runs(sweep)[1] if sweep else None
        console.print(f"[yellow]note:[/] run {escape(run_id)} was interrupted: {shown}; finish "
                      "it with " + escape(f"`{recorded_resume_command(root, rec)}`")
                      + (escape(f"; run {done} is the latest finished one (`kopt best {sweep} "
                                f"--run {done}`)") if done and done != run_id else ""),
                      highlight=False, soft_wrap=True)
    elif rec.get("status") == "running":
        console.print(f"[yellow]note:[/] run {escape(run_id)} is still running ("
                      + escape(lock_holder(root, run_id) or "?") + "): figures so far",
                      highlight=False, soft_wrap=True)


ALL_WRONG_HINT = (
    "every candidate, the baseline included, disagreed with ref.py: when even the plain "
    "baseline is wrong, look at ref.py first (its reference() and the scalars and inputs it "
    "takes; `kopt preflight SWEEP_DIR` checks the baseline alone and names its first "
    "mismatch)")

REFERENCE_TIMED_NOTE = (
    "vs reference: ref.py defines no contender(), so its reference() was timed: a function "
    "written to be right (often in float64), not a library's speed; define contender() "
    "(e.g. the library call in the outputs' dtype, such as `A @ B`) for a baseline worth "
    "beating")


def _reference_note(root: Path, run_id: str, rows: list[dict[str, Any]]) -> None:
    """A line under a table with a ``vs reference`` figure where the run timed ref.py's
    ``reference()`` (it has no ``contender()``): a new user read 6x over a float64
    reference as a speedup over the library."""
    from kopt.store.database import Database

    if any(r.get("vs_reference") is not None for r in rows) and "reference" in Database(
            root).reference_impls(run_id):
        out.print(REFERENCE_TIMED_NOTE, highlight=False)


def _folders_note(root: Path, sweep: str, shown: str) -> None:
    """A note on stderr when runs of sweeps named ``sweep`` came from more than one folder
    (its latest run, ``shown``, may be another folder's than the one meant): the folders,
    whose run is shown and how to pick another's (``--run``)."""
    from kopt.store.database import Database

    db = Database(root)
    folders = db.sweep_folders(sweep)
    if len(folders) < 2:
        return
    mine = (db.run(shown) or {}).get("sweep_dir") or folders[0][0]
    others = "; ".join(f"{f} (latest run {latest})" for f, latest in folders if f != mine)
    console.print(f"[yellow]note:[/] sweeps named {escape(sweep)!r} ran from "
                  f"{len(folders)} folders: these figures are run {escape(shown)}'s, of "
                  f"{escape(mine)}; the others: {escape(others)} (`kopt best {escape(sweep)} "
                  "--run RUN_ID` for one of theirs)", highlight=False, soft_wrap=True)


@main.command()
@click.argument("sweep_name")
@STORE_OPT
@click.option("--run", "run_id", default=None, help=f"A run id (default: {LATEST_HELP}).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def best(sweep_name: str, store: Path | None, run_id: str | None, fmt: str) -> None:
    """Best correct candidate per device class (and problem size) of SWEEP_NAME, from one run:
    --run, else the sweep's latest (the latest that stored a result; when it was
    interrupted, a note says so, how to resume it and which run is the latest finished
    one; `kopt export` and `kopt propose` read the same run)."""
    from kopt.store.database import Database
    from kopt.store.select import best as select_best

    root = _store(store)
    if not root.is_dir():
        fail(f"no store at {root} (run `kopt sweep` first, or pass --store DIR)")
    rows = select_best(sweep_name, root, run_id)
    if not rows:
        names = Database(root).sweeps()
        from kopt.store.files import no_run, runs_missing

        if sweep_name not in names and runs_missing(root):
            fail(f"no sweep {sweep_name!r} found: {runs_missing(root)}")
        if sweep_name not in names:
            fail(f"no sweep {sweep_name!r} in {root}; it holds: {', '.join(names) or 'nothing'}")
        if run_id and Database(root).run(run_id) is None:
            fail(no_run(root, run_id))
        latest, done = Database(root).latest_runs(sweep_name)
        fail(f"no correct candidate of sweep {sweep_name!r} in {root}"
              + (f" run {run_id}" if run_id else f" (latest run {latest})")
              + "; `kopt query \"select status, error from candidates\"` shows why"
              + (f"; run {done} is the latest finished one (`kopt best {sweep_name} --run "
                 f"{done}`)" if not run_id and done and done != latest else ""), 1)
    _run_state_note(root, rows[0]["run_id"], sweep=None if run_id else sweep_name)
    if not run_id:
        _folders_note(root, sweep_name, rows[0]["run_id"])
    if fmt == "json":
        click.echo(json.dumps(rows, default=str, indent=1))
        return
    t = Table(title=escape(f"best of {sweep_name} (run {rows[0]['run_id']})"))
    for c in ("device class", "dims", "methods", "params", "median ms", "IQR ms", "speedup",
              "loop speedup", "vs reference", "rate", "max abs / rel err"):
        t.add_column(c, overflow="fold", no_wrap=c == "methods")  # methods_text: one a line
    for r in rows:
        t.add_row(cell(r["device_class"]), kv_text(r["dims"]), methods_text(r),
                  kv_text(r["params"]), cell(r["median_ms"]),
                  cell(r["iqr_ms"]), speedup_text(r["speedup"]), speedup_text(r["loop_speedup"]),
                  speedup_text(r["vs_reference"]), rate_text(r),
                  f"{cell(r['max_abs_err'])} / {cell(r['max_rel_err'])}")
    out.print(t)
    out.print("speedup: over the baseline of the candidate's own iteration; loop speedup: the "
              "first baseline's median over the named best's, re-measured side by side at "
              "the loop's close; " + REF_NOTE, highlight=False)
    for dc, note in dict.fromkeys((r["device_class"], r["loop_note"]) for r in rows
                                  if r["loop_note"]):
        out.print(f"{dc}: {note}", highlight=False)
    _reference_note(root, rows[0]["run_id"], rows)
    _trust_lines(out, rows)


def _trust_lines(out: Any, rows: list[dict[str, Any]]) -> None:
    """`kopt best`'s lines on how far each best can be trusted: found without a sandbox,
    named without witness turns, tied, or never named; printed to ``out`` (a rich
    console)."""
    for dc in dict.fromkeys(r["device_class"] for r in rows if r["isolation"] == "none"):
        out.print(f"{escape(dc)}: found without a sandbox (isolation none): its code ran "
                  "with kopt's own rights and could reach kopt's files and clock, so this "
                  "verdict holds only if the code is trusted (`kopt env` says why the "
                  "sandbox was off)", highlight=False)
    for r in rows:
        if (r.get("witness") or "").startswith("none:"):
            out.print(f"{escape(r['device_class'])}: named without witness turns "
                      f"({escape(r['witness'][5:].strip())}): its contest's samples and "
                      "checks ran in its own process, where its code can write them",
                      highlight=False)
    for line in tie_lines(rows) + unnamed_lines(rows):
        out.print(escape(line), highlight=False)


@main.command()
@click.argument("sweep_dir", type=click.Path(path_type=Path))
@STORE_OPT
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def propose(sweep_dir: Path, store: Path | None, fmt: str) -> None:
    """The next iteration's methods per axis (admitted / skipped and why) and its triples,
    after the sweep's latest run as `kopt best` reads it (the latest that stored a
    result; when it was interrupted, a note says so and how to resume it: the plan is
    the iteration its resume goes on with)."""
    from kopt.loop.propose import propose as make_plans

    try:
        sw = load_sweep(sweep_dir)
        spec_notes(sw)
        plans = make_plans(sw, _store(store))
    except SpecError as e:
        fail(str(e))
    for rid in dict.fromkeys(p["run_id"] for p in plans if p["run_id"]):
        _run_state_note(_store(store), rid, False, sweep=sw.name,
                        shown="this plan goes on from what it stored")
    if fmt == "json":
        click.echo(json.dumps(plans, indent=1))
        return
    for p in plans:
        out.print(f"[bold]{escape(p['device_class'])}[/]: iteration {p['next_iteration']}"
                  + (f" after run {escape(p['run_id'])}" if p["run_id"] else " (no stored run)")
                  + f"; selected: {', '.join(p['selected']) or 'none'}; bottleneck: "
                  f"{p['bottleneck'] or 'unknown'}"
                  + ("" if p["evidence"] else "; no NCU evidence: every method counts as "
                     "triggered") + (f"; last stop: {escape(p['stop'])}" if p["stop"] else ""))
        t = Table()
        for c in ("axis", "P", "method", "admitted", "reason"):
            t.add_column(c)
        for axis, scans in p["scan"].items():
            if not scans:
                t.add_row(axis, "-", "(no realized method: none)", "-", "")
            for s in scans:
                t.add_row(axis, str(s["priority"]), escape(s["method"]),
                          "yes" if s["admitted"] else "no", escape(s["reason"]))
        out.print(t)
        if p.get("triples_from") == "catalog":
            out.print(f"the best is a submitted version ({escape(p['best_source'])}): the "
                      f"next version may claim any of {len(p['triples'])} admissible catalog "
                      "triples (`--format json` lists them)", highlight=False)
            continue
        out.print(f"{counted(len(p['triples']), 'triple')} besides the baseline:")
        for tr in p["triples"]:
            out.print(escape("  (" + ", ".join(m or "none" for m in tr) + ")"))
        for key, why in PROPOSE_SETS:
            if p.get(key):
                out.print(f"{counted(len(p[key]), 'admissible triple')} {why}:")
                for tr in p[key]:
                    out.print(escape("  (" + ", ".join(m or "none" for m in tr) + ")"))


# the triples `kopt propose` lists besides those it runs, and what each list means
PROPOSE_SETS = (
    ("empty_triples", "with no candidate (the restrictions, or in kernel mode the device's "
                      "launch limits, exclude every launch config)"),
    ("undecided_triples", "too large to check whose random launch configs the restrictions "
                          "all excluded (they may have a few candidates)"))


@main.command()
@click.argument("run_id")
@STORE_OPT
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for summary.md, the best source and plots (default: report-RUN_ID).")
@click.option("--workflow", is_flag=True,
              help="Also the run folder the manual workflow leaves: state.json and per "
                   "iteration kernel.*, methods.json, analysis.md, profile.md.")
def report(run_id: str, store: Path | None, out_dir: Path | None, workflow: bool) -> None:
    """Write a run's summary.md (environment, iterations, best candidate, plots) and
    best-<class>.cu/.cpp: the source each class's best was measured from (the store's copy,
    a submitted version's too), its -D defines written in as #define lines."""
    from kopt.tools.report import ReportError, write_report
    from kopt.tools.workflow import write_workflow

    notes: list[str] = []
    out_dir = out_dir or Path(f"report-{run_id}")
    try:
        path = (write_workflow(run_id, _store(store), out_dir, notes)[0] if workflow
                else write_report(run_id, _store(store), out_dir, notes))
    except ReportError as e:
        fail(str(e))
    for note in notes:
        console.print("[yellow]note:[/] " + escape(note), highlight=False, soft_wrap=True)
    out.print(f"wrote {escape(str(path))}", highlight=False)


@main.command()
@click.option("--address", default=None, help="Ray cluster address (default: this machine).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def env(address: str | None, fmt: str) -> None:
    """Per Ray node: GPUs and SM arch, driver, nvcc, ncu and counter access, CUTLASS, torch, ray."""
    from kopt.run.cluster import attach, ensure_ray, on_every_node
    from kopt.run.runner import SweepError
    from workers.envinfo import collect

    if address and address != "auto":  # as `kopt sweep --address`: one line, at once
        try:
            attach(address, f"--address {address}")
        except SweepError as e:
            fail(str(e))
    else:
        try:
            ensure_ray(address)
        except SweepError as e:
            fail(str(e))
    infos = on_every_node(collect)
    if fmt == "json":
        click.echo(json.dumps(infos, indent=1))
        return
    for info in infos:
        t = Table(title=escape(f"node {info['host']} ({info['platform']})"), show_header=False)
        t.add_row("GPUs", escape("; ".join(_gpu_line(g) for g in info["gpus"]) or "none"))
        for k in ("driver", "nvcc", "cxx", "ncu", "ncu_counters", "cutlass", "torch",
                  "torch_cuda", "ray", "python", "isolation", "harness_start", "witness",
                  "build_isolation", "limits", "build_cache"):
            unset = "unknown" if k == "driver" and info["gpus"] else "not found"
            t.add_row(k, cell(info.get(k)) if info.get(k) is not None else unset)
        for note in info.get("notes") or []:
            t.add_row("note", escape(note))
        out.print(t)


@main.group("serve")
def serve() -> None:
    """A warm queue: a long-lived kopt service keeps device actors warm on a Ray cluster;
    `kopt sweep --queue` runs on them (no start-up cost after the first)."""


@serve.command("start")
@click.option("--address", default=None,
              help="A running Ray cluster's HOST:PORT (default: start a Ray head here).")
@click.option("--backend", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True, help="auto: CUDA when the cluster has a GPU, else CPU.")
@click.option("--cpu-devices", type=click.IntRange(1, MAX_CPU_DEVICES), default=1,
              show_default=True, help="CPU backend: single-thread CPU device actors per node.")
@click.option("--num-cpus", type=click.IntRange(1, RAY_MAX_RESOURCE), default=None,
              help="CPUs of the Ray head it starts (default: this machine's); not with "
                   "--address.")
def serve_start(address: str | None, backend: str, cpu_devices: int,
                num_cpus: int | None) -> None:
    """Start the service: its device actors stay up until `kopt serve stop`."""
    from kopt.run.runner import SweepError  # ServiceError is one; so are the runner's
    from kopt.run.service import start_service

    if address and num_cpus:
        fail("--num-cpus sizes the Ray head `kopt serve start` starts; with --address the "
              "cluster's own CPUs count: leave --num-cpus out")
    try:
        cfg = start_service(address, backend, cpu_devices, num_cpus)
    except SweepError as e:
        fail(str(e))
    except KeyboardInterrupt:
        _interrupted_start()
    addr = cfg["address"]
    actors = counted(len(cfg["devices"]), f"{cfg['backend']} device actor")
    out.print(escape(f"kopt service at {addr}: {actors} warm "
                     f"({', '.join(i['device_id'] for i in cfg['infos'])}), "
                     f"{counted(len(cfg.get('builders') or []), 'builder')}"), highlight=False)
    out.print("sweep on it: kopt sweep SWEEP_DIR --queue; see it: kopt serve status; stop it: "
              "kopt serve stop", highlight=False)


def _interrupted_start() -> None:
    """Ctrl-C during `kopt serve start`, once it has stopped what it started: one line, exit
    130, without Ray's exit hooks (a connection interrupted half-made made them segfault:
    exit 139; there is no embedded Ray instance for them to stop)."""
    console.print("[bold red]error:[/] interrupted (Ctrl-C): nothing is left running; start "
                  "it again with `kopt serve start`", highlight=False, soft_wrap=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(130)


@serve.command("stop")
@click.option("--address", default=None,
              help="The service's Ray HOST:PORT (default: the one `kopt serve start` recorded).")
def serve_stop(address: str | None) -> None:
    """Stop the service's actors (and the Ray head and launchpad `kopt serve start`
    started); the line names what it stopped."""
    from kopt.run.runner import SweepError  # ServiceError is one; so are the runner's
    from kopt.run.service import stop_service

    try:
        names = stop_service(address)
    except SweepError as e:
        fail(str(e))
    out.print(escape(f"kopt service stopped ({', '.join(names)})"
                     if names else "kopt service stopped (its Ray head was gone already)"),
              highlight=False)


@serve.command("status")
@click.option("--address", default=None,
              help="The service's Ray HOST:PORT (default: the one `kopt serve start` recorded).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def serve_status(address: str | None, fmt: str) -> None:
    """The service's devices (idle/busy, jobs, busy seconds) and the sweeps it served."""
    from kopt.run.runner import SweepError  # ServiceError is one; so are the runner's
    from kopt.run.service import read_state, service_status, state_path

    try:
        if address is None and not read_state().get("address"):
            if fmt == "json":
                out.print_json(json.dumps({"service": None, "record": str(state_path())}))
            else:
                out.print(escape(f"no service: none is recorded in {state_path()} (`kopt "
                                 "serve start` starts one; one elsewhere: pass --address "
                                 "HOST:PORT)"), highlight=False, soft_wrap=True)
            return
        st = service_status(address)
    except SweepError as e:
        fail(str(e))
    if fmt == "json":
        out.print_json(json.dumps(st))
        return
    t = Table(title=escape(f"kopt service at {st['address']} ({st['backend']}): "
                           f"{counted(st['sweeps_served'], 'sweep')} served, "
                           f"{len(st['sweeps_running'])} running"))
    for c in ("device", "class", "state", "jobs", "busy s", "sandbox restarts"):
        t.add_column(c)
    for d in st["devices"]:
        t.add_row(cell(d["device_id"]), cell(d["device_class"]), d["state"],
                  cell(d.get("jobs")), cell(d.get("busy_s")), cell(d.get("restarts")))
    print_table(t, escape(f"kopt service at {st['address']} ({st['backend']}): no device "
                           "actor is up (`kopt serve stop`, then `kopt serve start`, makes "
                           "them again)"))
    b = st.get("builders") or []
    states = ", ".join(f"{n} {s}" for s, n in sorted(Counter(x["state"] for x in b).items()))
    out.print(f"{counted(len(b), 'warm builder')} ({states or 'none'}), "
              f"{counted(sum(x.get('builds', 0) for x in b), 'build')} since start",
              highlight=False)
    pad = st.get("launchpad")
    if pad:
        out.print(escape(f"launchpad (pid {pad.get('pid')}): a sweep driver "
                         f"{'ready' if pad.get('spare_ready') else 'starting'}, "
                         f"{counted(pad.get('served', 0), 'queued sweep')} started in one"
                         f" ({pad.get('declined', 0)} declined: they ran in their own "
                         "process); "
                         f"{counted(pad.get('spare_failures', 0), 'spare driver')} failed to "
                         "start"),
                  highlight=False)


def _gpu_line(g: dict[str, Any]) -> str:
    """``0: NAME sm_90 141 GiB``; a figure NVML could not read is ``unknown``."""
    mem = g.get("memory_bytes")
    return (f"{g['index']}: {g.get('name') or 'unknown GPU'} {g.get('sm') or 'sm unknown'} "
            + (f"{mem / 2**30:.0f} GiB" if mem is not None else "memory unknown"))


@main.command("submit")
@click.argument("run_id")
@click.option("--source", type=click.Path(path_type=Path), required=True,
              help="The new version's kernel source, or a folder of versions.")
@click.option("--methods", required=True, help="Claimed methods: compute.X,memory.Y,latency.Z.")
@click.option("--note", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The analysis (a text file): why these methods.")
@click.option("--submitter", default=None, help="Who or what submits (default: $USER).")
@click.option("--retry", is_flag=True, help="Another try at the last submitted iteration.")
@click.option("--max-tries", type=click.IntRange(min=1), default=None,
              help="Submissions allowed per iteration (default: sweep.yaml submit.max_tries, 3).")
@click.option("--detach", is_flag=True, help="Check and record, then run the iteration in a "
              "background process and return at once (`kopt wait` for its verdict).")
@click.option("--idea", "ideas", multiple=True,
              help="A source of the version's idea (repeatable): a catalog method id, a URL, "
                   "or KIND:REF (paper:, kernel:, other:); stored in the provenance table.")
@STORE_OPT
@click.option("--address", default=None, help="Ray cluster address (default: embedded local Ray).")
@click.option("--queue", is_flag=True,
              help="Run on the warm kopt service's devices (`kopt serve start`; with "
                   "--address, the service of that cluster): no Ray or device start-up.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def submit_cmd(run_id: str, source: Path, methods: str, note: Path | None,
               submitter: str | None, retry: bool, max_tries: int | None, detach: bool,
               ideas: tuple[str, ...],
               store: Path | None, address: str | None, queue: bool, fmt: str) -> None:
    """Run new kernel versions as the next iteration of RUN_ID: each version x its sweep's
    launch configs against the run's current best; prints the candidate ids it created.
    A claim that breaks the catalog's rules is refused (one line per rule, exit 1)."""
    import os

    from kopt.core.contract import read_text
    from kopt.run.runner import SweepError
    from kopt.store.files import RunLock, RunLocked
    from kopt.tools import submit as sm

    root = _store(store)
    log: Path | None = None
    try:
        claim, files = sm.claimed(methods), sm.source_files(source)
        text = (read_text(note, lambda m: sm.SubmitError([f"--note {m}"])) if note is not None
                else "")
        sweep = sm.open_run(root, run_id)
        with RunLock(root, run_id):  # from the record to the run, one writer
            it, try_no = sm.record(sweep, root, run_id, files, claim, text,
                                   submitter or os.environ.get("USER") or "user", retry,
                                   max_tries, ideas)
            if not detach:  # its progress and notes (a review rejection) as a sweep's
                log, obs = None, ConsoleProgress()
                try:
                    sub, _ = sm.run_recorded(root, run_id, it, try_no, [obs], address=address,
                                             sweep=sweep, queue=queue)
                finally:
                    obs.stop()
                line = compile_errors_line(obs)
                if line is not None:  # the version's own compiler message, as a sweep's
                    console.print(line, highlight=False, soft_wrap=True)
        if detach:
            log = sm.detach(root, run_id, it, try_no, address, queue)
            sub = sm.planned_ids(sweep, root, run_id, it, try_no)
    except sm.SubmitError as e:
        if fmt == "json":  # a loop driver reads the refusals as data too (stderr: as text)
            click.echo(json.dumps({"refused": e.lines, "exit_status": 1}, indent=1))
        for line in e.lines:
            console.print(f"[bold red]refused:[/] {escape(line)}", highlight=False,
                          soft_wrap=True)
        if note is None and any("(the analysis note)" in line for line in e.lines):
            console.print("the reason these refusals ask for is `--note FILE` (a text file: "
                          "your analysis, why these methods)", highlight=False, soft_wrap=True)
        sys.exit(1)
    except OSError as e:  # the note, else the store (a read-only store)
        if note is not None and e.filename and Path(e.filename) == Path(note):
            _submit_failed(f"--note {note}: cannot read it ({e.strerror}); pass a text file",
                           fmt)
        _submit_failed(os_error_line(e), fmt)
    except (SweepError, RunLocked, SpecError) as e:
        _submit_failed(str(e), fmt)
    _submitted(run_id, try_no, sub, log, fmt)


def _submit_failed(message: str, fmt: str) -> NoReturn:
    """A submission that could not run: the one error line (stderr), and under ``--format
    json`` the same as ``{"error": ..., "exit_status": 1}`` on stdout; exit 1."""
    if fmt == "json":
        click.echo(json.dumps({"error": message, "exit_status": 1}, indent=1))
    fail(message, 1)


def _submitted(run_id: str, try_no: int, sub: Any, log: Path | None, fmt: str) -> None:
    """`kopt submit`'s output: per version (of ``sub``, kopt.loop.submitted.Submitted)
    its source digest and candidate ids (``candidates``: the same list, its older name)."""
    it = sub.iteration
    rows = [{"name": v.name, "source_hash": v.source_hash,
             "candidate_ids": sub.created[v.source_hash],
             "candidates": sub.created[v.source_hash]} for v in sub.versions]
    if fmt == "json":
        click.echo(json.dumps({"run_id": run_id, "iteration": it, "try": try_no,
                               "versions": rows, "log": str(log) if log else None}))
        return
    for r in rows:
        click.echo(f"{r['name']} (source {r['source_hash']}, iteration {it}, try {try_no}): "
                   + " ".join(r["candidate_ids"]))
    if log is not None:
        click.echo(f"running in the background; log: {log}; `kopt wait {run_id}` for the "
                   "verdict")


@main.command("run-submitted", hidden=True)
@click.argument("run_id")
@click.option("--iteration", type=click.IntRange(min=1), required=True)
@click.option("--try", "try_no", type=click.IntRange(min=1), required=True)
@click.option("--store", type=click.Path(path_type=Path), required=True)
@click.option("--address", default=None)
@click.option("--queue", is_flag=True)
def run_submitted_cmd(run_id: str, iteration: int, try_no: int, store: Path,
                      address: str | None, queue: bool) -> None:
    """A recorded try run by `kopt submit --detach` in its background process; its exit
    status goes into STORE/submit-logs/RUN_ID-itN-tryK.json."""
    from kopt.run.runner import SweepError
    from kopt.store.files import RunLocked
    from kopt.tools import submit as sm

    rc, obs = 1, ConsoleProgress()
    try:
        sm.run_recorded(store, run_id, iteration, try_no, [obs], address, queue=queue)
        rc = 0
    except sm.SubmitError as e:
        console.print(f"[bold red]error:[/] {escape(e.lines[0])}", highlight=False)
    except (SweepError, RunLocked, SpecError) as e:
        console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
    except KeyboardInterrupt as e:
        rc = _interrupt_code(e)
    finally:
        obs.stop()
        sm.mark_exit(store, run_id, iteration, try_no, rc)
    sys.exit(rc)


@main.command("wait")
@click.argument("run_id")
@click.option("--iteration", type=click.IntRange(min=1), default=None,
              help="Which iteration (default: the run's latest, stored or submitted).")
@click.option("--timeout", "timeout_s", type=_Finite(0, WEEK_S), default=None,
              help="Give up after this many seconds (exit 3).")
@click.option("--poll", "poll_s", type=_Finite(0.05, 3600), default=2.0, show_default=True,
              help="Seconds between two looks at the store.")
@STORE_OPT
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text")
def wait_cmd(run_id: str, iteration: int | None, timeout_s: float | None, poll_s: float,
             store: Path | None, fmt: str) -> None:
    """Block until an iteration of RUN_ID is closed, then print its verdict per device
    class: winner, median, speedup, accepted by the review gate and why, ineffective
    methods, bottleneck before/after, stop decision, candidate ids. Exit 1 when there is no
    such run or iteration, or its background process ended without closing it; 4 when the
    run was interrupted before the iteration closed (the line says how to go on); 3 on
    --timeout."""
    from kopt.cli.console import verdict_lines
    from kopt.tools.wait import WaitError, wait

    try:
        v = wait(_store(store), run_id, iteration, timeout_s, poll_s)
    except WaitError as e:
        if fmt == "json":  # a loop driver reads stdout: the failure as data too (stderr: text)
            click.echo(json.dumps({"error": str(e), "exit_status": e.code}))
        fail(str(e), e.code)
    if fmt == "json":
        click.echo(json.dumps(v, default=str))
        return
    for line in verdict_lines(v):
        click.echo(line)


@main.command("lineage")
@click.argument("run_id")
@STORE_OPT
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              help="json: one object per node (depth, device_class, iteration, source_hash, "
                   "label, "
                   "methods, parent, best, named, median_ms, speedup, statuses, members, "
                   "verdict), in the text's order.")
def lineage_cmd(run_id: str, store: Path | None, fmt: str) -> None:
    """The version tree of RUN_ID: each node's best candidate (its fastest; in the node
    that holds it, the loop's named best, as `kopt best` names it), median, speedup over its
    parent, statuses and claimed methods; the last line says which best is shown."""
    from kopt.loop.submitted import SubmitError
    from kopt.tools.submit import lineage, lineage_order, lineage_text, node_record

    try:
        nodes = lineage(_store(store), run_id)
    except SubmitError as e:
        fail(e.lines[0], 1)
    if fmt == "json":
        click.echo(json.dumps([{**node_record(n), "depth": depth}
                               for depth, n, _ in lineage_order(nodes)], indent=1))
        return
    for line in lineage_text(nodes):
        click.echo(line)


@main.command("catalog")
@click.option("--axis", type=click.Choice(["compute", "memory", "latency"]), default=None)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def catalog_cmd(axis: str | None, fmt: str) -> None:
    """List the optimization catalog: methods per axis in priority order."""
    from kopt.core.catalog import AXES, load_catalog

    cat = load_catalog()
    axes = [axis] if axis else list(AXES)
    if fmt == "json":
        click.echo(json.dumps([{**m.__dict__, "conflicts": sorted(m.conflicts),
                                "couples": sorted(m.couples), "requires": sorted(m.requires)}
                               for a in axes for m in cat.axis(a)], indent=1))
        return
    for a in axes:
        t = Table(title=f"{a} axis", caption="P: priority (1 is scanned first); "
                  "'= X': the same code change as X seen from another axis (counted once)")
        for c in ("P", "id", "change", "min SM", "conflicts / couples", "trigger"):
            t.add_column(c, overflow="fold")
        for m in cat.axis(a):
            sm = (f"{m.min_sm}" if m.min_sm else "any") + ("a" if m.needs_sm90a else "")
            rel = ", ".join([*sorted(m.conflicts)] + [f"= {c}" for c in sorted(m.couples)])
            t.add_row(str(m.priority), m.id, escape(m.change), sm, rel,
                      escape(m.trigger.get("text", "")))
        out.print(t)


@main.command("export")
@click.argument("sweep_name")
@STORE_OPT
@click.option("--run", "run_id", default=None, help=f"A run id (default: {LATEST_HELP}).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Folder for the header, the T4 JSON and the sources (default: "
                   "export-SWEEP_NAME).")
def export_cmd(sweep_name: str, store: Path | None, run_id: str | None,
               out_dir: Path | None) -> None:
    """Write SWEEP_NAME's best configuration per device class and problem size as a C
    header of #defines (one block per class: -DKOPT_DEVICE_<CLASS> picks it,
    -DKOPT_PROBLEM_SIZE=i the size), as T4 autotuning JSON, and the realized best sources.
    The run is --run, else the sweep's latest, as `kopt best` reads it (the latest that
    stored a result; when it was interrupted, a note says so and how to resume it)."""
    from kopt.tools.export import ExportError, export

    root = _store(store)
    if not root.is_dir():
        fail(f"no store at {root} (run `kopt sweep` first, or pass --store DIR)")
    try:
        res = export(sweep_name, root, out_dir or Path(f"export-{sweep_name}"), run_id)
    except ExportError as e:
        fail(str(e))
    for r in res.rows:
        out.print(escape(f"{r['device_class']} size {r['size']} "
                         f"({' '.join(f'{k}={v}' for k, v in r['dims'].items())}): "
                         f"{r['candidate_id']} "
                         + " ".join(f"{k}={v}" for k, v in sorted(r["defines"].items()))),
                  highlight=False)
    for p in [res.header, res.t4, *res.sources]:
        out.print(f"wrote {escape(str(p))}", highlight=False)
    for n in res.notes:
        console.print(f"[yellow]note:[/] {escape(n)}", highlight=False, soft_wrap=True)
    _run_state_note(root, res.run_id, False,  # as `kopt best`: an unfinished run's winner
                    sweep=None if run_id else sweep_name)


@main.command("methods")
@STORE_OPT
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def methods_cmd(store: Path | None, fmt: str) -> None:
    """Each catalog method's record over the whole store, per device class and the
    bottleneck it was applied under: times tried, accepted (in an iteration's named winner),
    its median own gain (best speedup of a triple holding it over the same triple without
    it, as the loop judges it) and times judged ineffective."""
    from kopt.core.catalog import load_catalog
    from kopt.store.database import Database

    root = _store(store)
    if not root.is_dir():
        fail(f"no store at {root} (run `kopt sweep` first, or pass --store DIR)")
    order = {m: i for i, m in enumerate(load_catalog().methods)}
    rows = sorted(complete_rows(Database(root).method_effectiveness(), ("method", "device_class"),
                                "method rows"), key=lambda r: (
        order.get(r["method"], len(order)), r["method"], r["device_class"], r["bottleneck"] or ""))
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        out.print(f"no method was tried in the store {escape(str(root))}", highlight=False)
        return
    t = Table(title=escape(f"method effectiveness over the store {root}"),
              caption="gain: the method's own, as the loop judges it (best speedup of a "
              "triple holding it over the same triple without it); median over the "
              "iterations that measured one")
    for c in ("method", "device class", "bottleneck", "tried", "accepted", "median gain",
              "ineffective"):
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(escape(r["method"]), escape(r["device_class"]), escape(r["bottleneck"] or "-"),
                  str(r["tried"]), str(r["accepted"]), speedup_text(r["median_gain"]),
                  str(r["ineffective"]))
    out.print(t)
    never = [m for m in order if m not in {r["method"] for r in rows}]
    if never:
        out.print(f"{counted(len(never), 'catalog method')} never tried: {', '.join(never)}",
                  highlight=False)


@main.command("triage")
@click.argument("trace", required=False, type=click.Path(path_type=Path))
@click.option("--mapping", type=click.Path(path_type=Path), default=None,
              help="A trace with ranges (CUDA graphs off): stages and layers come from it.")
@click.option("--formal", type=click.Path(path_type=Path), default=None,
              help="The trace timed (CUDA graphs on); the same as TRACE.")
@click.option("--known", type=click.Path(path_type=Path), default=None,
              help="YAML of known routes (routes: [{pattern, operator, source, tuning, owner}]).")
@click.option("--min-share", type=_Finite(0, 1), default=0.05, show_default=True,
              help="Kernels below this share of the trace's kernel time are left alone.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table")
@click.option("--top", "top_k", type=click.IntRange(min=1), default=15, show_default=True,
              help="Kernel rows in the terminal table.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Report folder: triage.json, the three CSVs, triage.png, sweep skeletons.")
@click.option("--plot", "plot_file", type=click.Path(path_type=Path), default=None,
              help="Write the time-share picture (PNG) here.")
@STORE_OPT
@click.option("--no-store", is_flag=True, help="Do not write the tables to the store.")
def triage_cmd(trace: Path | None, mapping: Path | None, formal: Path | None,
               known: Path | None, min_share: float, fmt: str, top_k: int,
               out_dir: Path | None, plot_file: Path | None, store: Path | None,
               no_store: bool) -> None:
    """Hotspots of a profiled step (PyTorch trace JSON or Nsight Systems SQLite): kernels,
    known paths, actions. See kopt/tools/triage.py for how kernels are attributed to ranges."""
    import pyarrow as pa

    from kopt.tools import triage as tr

    if trace and formal and trace != formal:
        fail(f"TRACE {trace} and --formal {formal} both name the trace to time: give one")
    formal = formal or trace
    if formal is None:
        fail("give TRACE (or --mapping EAGER --formal GRAPH)")
    try:
        t = tr.triage(formal, mapping=mapping, known=known, min_share=min_share,
                      sweeps=out_dir / "sweeps" if out_dir else None)
        if not no_store:
            tr.store_triage(t, _store(store))
    except tr.TriageError as e:
        fail(str(e))
    except (KeyError, ValueError, TypeError, AttributeError, OverflowError,
            pa.ArrowException) as e:
        # a trace, a --known file or a plot name kopt cannot use: one line, not a traceback
        # (OverflowError: a time like 10**400, an integer no float holds)
        files = ", ".join(str(f) for f in (mapping, formal, known) if f)
        fail(f"{files}: not a trace (or known-routes file) kopt can read: "
              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else e!r}; PyTorch "
              "profiler JSON and Nsight Systems SQLite exports are read (docs: README, Triage)")
    tables = {"kernels": t.kernels, "paths": t.paths, "actions": t.actions}
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "triage.json").write_text(json.dumps(tr.as_json(t), indent=1))
        for name, rows in tables.items():
            with open(out_dir / f"{name}.csv", "w", newline="") as f:
                _csv(f, rows)
        tr.plot(t, out_dir / "triage.png")
    if plot_file:
        _triage_plot(t, plot_file)
    for n in t.notes:
        console.print(f"[yellow]note:[/] {escape(n)}", highlight=False)
    if fmt == "json":
        click.echo(json.dumps(tr.as_json(t), indent=1))
    elif fmt == "csv":
        for i, (name, rows) in enumerate(tables.items()):
            sys.stdout.write(("\n" if i else "") + f"# {name}\n")
            _csv(sys.stdout, rows)
    else:
        _triage_tables(t, top_k)
    console.print(f"triage {t.triage_id}" + ("" if no_store else escape(
        f" stored in {_store(store)} (`kopt query \"select * from triage_kernels where "
        f"triage_id = '{t.triage_id}'\"`)")), highlight=False, soft_wrap=True)


def _triage_plot(t: Any, plot_file: Path) -> None:
    """``--plot FILE``: triage ``t``'s figure; a name without an extension is written as PNG,
    with a note (matplotlib would pick PNG and rename it, silently)."""
    from kopt.tools import triage as tr

    if not plot_file.suffix:
        named = plot_file
        plot_file = plot_file.with_name(plot_file.name.rstrip(".") + ".png")
        console.print(escape(f"note: --plot {named} has no extension: writing {plot_file} "
                             "(PNG; name .svg, .pdf or .jpeg for another format)"),
                      highlight=False, soft_wrap=True)
    try:
        tr.plot(t, plot_file)
    except ValueError as e:  # matplotlib: an extension it cannot write
        fail(f"--plot {plot_file}: {str(e).splitlines()[0]}")


def _csv(f: Any, rows: list[dict[str, Any]]) -> None:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["kernel"],
                       lineterminator="\n")
    w.writeheader()
    w.writerows(rows)


def _triage_tables(t: Any, top_k: int) -> None:
    """The three triage tables in the terminal."""
    k = Table(title=escape(f"kernels of {t.trace} (share of all kernel time)"))
    for c in ("#", "kernel", "share", "total us", "calls", "avg us", "min", "max", "grid",
              "block", "stages", "layers", "graph"):
        k.add_column(c, overflow="fold")
    for r in t.kernels[:top_k]:
        k.add_row(str(r["rank"]), escape(r["kernel"][:90]), f"{r['share']:.1%}",
                  cell(r["total_us"]), str(r["calls"]), cell(r["avg_us"]), cell(r["min_us"]),
                  cell(r["max_us"]), cell(r["grid"]), cell(r["block"]), cell(r["stages"]),
                  cell(r["layers"]), "yes" if r["in_graph"] else "no")
    print_table(k, escape(f"no kernel in {t.trace}"))
    if len(t.kernels) > top_k:
        console.print(f"{top_k} of {len(t.kernels)} kernels shown (--top N)", highlight=False)
    p = Table(title="known paths of the hot kernels")
    for c in ("#", "kernel", "share", "route", "operator", "source", "tuning", "owner"):
        p.add_column(c, overflow="fold")
    for r in t.paths:
        p.add_row(str(r["rank"]), escape(r["kernel"][:60]), f"{r['share']:.1%}",
                  cell(r["route"]) if r["known"] else "(none)", cell(r["operator"]),
                  cell(r["source"]), cell(r["tuning"]), cell(r["owner"]))
    print_table(p, "known paths of the hot kernels: none")
    a = Table(title="actions")
    for c in ("#", "kernel", "action", "why"):
        a.add_column(c, overflow="fold")
    for r in t.actions:
        if r["action"] != "leave" or r["rank"] <= top_k:
            a.add_row(str(r["rank"]), escape(r["kernel"][:60]), r["action"], escape(r["why"]))
    print_table(a, "actions: none")

@main.command("port")
@click.argument("run_id")
@click.option("--to", "target", required=True, type=click.Path(path_type=Path),
              help="The repository file the winner's realized source replaces.")
@click.option("--build", default=None, help="Build command (shell, run in the port's worktree).")
@click.option("--test", "test_cmd", default=None, help="Test command.")
@click.option("--bench", default=None,
              help="Benchmark command: its last printed number is the figure, a time (lower "
                   "is faster); run on the base commit and on the port, interleaved.")
@click.option("--bench-runs", type=click.IntRange(1, 1000), default=BENCH_RUNS,
              show_default=True, help="Bench runs per side (before and after).")
@click.option("--timeout", "timeout_s", type=_Finite(1, WEEK_S), default=600,
              show_default=True, help="Seconds per command.")
@click.option("--device-class", default=None, help="Whose winner, when the run has several.")
@STORE_OPT
def port_cmd(run_id: str, target: Path, build: str | None, test_cmd: str | None,
             bench: str | None, bench_runs: int, timeout_s: float, device_class: str | None,
             store: Path | None) -> None:
    """Port RUN_ID's winner into a repository file on a new branch; build, test, bench.

    The file gets the exact source the winner was measured from (the store's copy; a
    submitted version's text when one won) with its -D defines as #define lines. The
    user's checkout and branch are never touched (a separate git worktree); nothing is
    merged. With --bench, each side's median and IQR are compared by kopt's noise rule
    (NVBench's). Exit status: 0 ported (and FASTER with --bench), 1 a command failed or the
    bench printed no figure, 2 refused (nothing changed), 3 SLOWER, 4 TIED (within noise);
    the branch stays for inspection in every case."""
    from kopt.tools.port import PortError, port

    if _store(store).is_dir():
        _run_state_note(_store(store), run_id, False)  # an unfinished run's winner: say so
    try:
        res = port(run_id, target, _store(store), build=build, test=test_cmd, bench=bench,
                   timeout_s=timeout_s, device_class=device_class, bench_runs=bench_runs)
    except PortError as e:
        fail(str(e))
    for n in res.notes:
        console.print(f"[yellow]note:[/] {escape(n)}", highlight=False, soft_wrap=True)
    t = Table(title=escape(f"port of {run_id} ({res.candidate_id}, {res.device_class}) on "
                           f"branch {res.branch}"))
    for c in ("step", "run", "command", "exit", "seconds", "figure", "output (last line)"):
        t.add_column(c, overflow="fold")
    for s in res.steps:
        last = (s.output_tail.strip().splitlines() or [""])[-1][:100]
        t.add_row(s.step, cell(s.run_no), escape(s.command),
                  "timeout" if s.timed_out else str(s.exit_status), f"{s.duration_s:.2f}",
                  cell(s.bench_value), escape(last))
    out.print(t)
    for line in res.verdict.lines() if res.verdict else []:
        out.print(escape(line), highlight=False, soft_wrap=True)
    where = escape(f"branch {res.branch} in worktree {res.worktree}")
    if res.status != "ok":
        console.print(f"[red]{res.status.replace('_', ' ')}[/]: {where} left for inspection; "
                      "your branch is untouched", highlight=False, soft_wrap=True)
        sys.exit(res.exit_status)
    console.print(f"ported: {where}; nothing merged (`git merge {escape(res.branch)}` when "
                  "you are happy with it)", highlight=False, soft_wrap=True)


class _NotEmpty(click.ParamType):
    """``inner`` (a path or text type) that refuses an empty or blank value: ``--store ""``
    would be the current folder, ``--resume ""`` a new run, ``--run ""`` no run at all."""

    def __init__(self, inner: click.ParamType) -> None:
        self.inner, self.name = inner, inner.name

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail(f"empty ({value!r}); give a value (an unset shell variable?)", param, ctx)
        return self.inner.convert(value, param, ctx)


for _cmd in main.commands.values():  # every path and text argument of every command
    for _p in _cmd.params:
        if _p.name != "sql" and (isinstance(_p.type, click.Path) or _p.type is click.STRING):
            _p.type = _NotEmpty(_p.type)

if __name__ == "__main__":
    entry()
