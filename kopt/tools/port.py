"""``kopt port RUN_ID --to REPO_FILE``: the winner of a sweep back into the user's repository.

The winner's realized source replaces ``REPO_FILE`` on a new branch
``kopt/port-RUN_ID-CANDIDATE`` checked out in a separate git worktree (default
``STORE/port-worktrees/<branch>-<port id>``): the exact source the winner was measured from
(the store's copy, table ``sources``: a submitted version's text when a ``kopt submit``
version won, never the sweep folder as edited since the run) with its ``-D`` defines written
in as ``#define`` lines at the top (:func:`kopt.tools.report.measured_realized`). The user's
checkout, its current branch and any uncommitted change in it are never touched. Refused
with one line when ``REPO_FILE`` has uncommitted changes (the port would silently drop them
from the branch) or the repository is mid-merge, mid-rebase or mid-cherry-pick.

Each command runs through the shell with a timeout. In the port's worktree: ``--build``,
``--test`` on the port's commit; a failing one stops there. With ``--bench``, the base
commit is checked out too (a second, detached worktree, removed afterwards) and built with
``--build`` (the *before* side), then the bench runs ``bench_runs`` times on each side,
interleaved (before, after; after, before; ...: drift hits both sides alike). Each side's
figures (:func:`kopt.util.command.bench_figure`: a time, lower is faster) are summarised as
a candidate's samples are (median, IQR) and compared by kopt's one noise model
(:func:`kopt.core.compare.label`): FASTER, SLOWER or TIED (within noise); see
:class:`BenchVerdict`. Each command, each bench run included, is one ``ports`` row in the
store: exit status (``-9`` when killed at its timeout), duration, the last 4000 characters
of its output, for a bench its figure and its round (``run_no``, from 1), and the port's
status. Nothing is merged: the branch stays for inspection either way.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.core.compare import label, noise_line
from kopt.loop.measured import SourceLost
from kopt.store.database import Database
from kopt.store.files import no_run, now, stored_json
from kopt.store.select import best
from kopt.tools.defaults import BENCH_RUNS
from kopt.tools.report import measured_realized
from kopt.util.command import Step, run_command
from kopt.util.paths import resolved
from workers.timing import summarize

# the port's status -> the exit status of `kopt port` (refusals exit 2)
EXIT_STATUS = {"ok": 0, "build_failed": 1, "test_failed": 1, "bench_failed": 1,
               "slower": 3, "tied": 4}


class PortError(ValueError):
    """A port refused before anything changed (no run, dirty file, mid-merge...)."""


@dataclass
class BenchVerdict:
    """Before against after, from each side's bench figures (a time: lower is faster).

    Attributes:
        label: ``FASTER`` / ``SLOWER`` / ``TIED``: the port (after) against the base commit
            (before) by :func:`kopt.core.compare.label` on each side's (median, IQR): the
            medians must differ by more than max(1%, the smaller relative sigma, sigma =
            IQR / 1.349) to count; None when a side has no figure or a figure is not positive.
        before, after: each side's figures, in the order they were taken.
        before_median, before_iqr, after_median, after_iqr: each side's median and
            interquartile range (:func:`workers.timing.summarize`), in the bench's unit;
            None without figures.
        why: why there is no label ('' when there is one).
    """

    label: str | None
    before: list[float]
    after: list[float]
    before_median: float | None = None
    before_iqr: float | None = None
    after_median: float | None = None
    after_iqr: float | None = None
    why: str = ""

    def lines(self) -> list[str]:
        """The verdict in words, one line each: each side's median and IQR, then the label
        with the ratio of the medians (before / after) and the noise threshold."""

        if self.label is None:
            return [f"bench: no verdict: {self.why}"]
        n = f"{len(self.before)} / {len(self.after)} runs"
        ratio = self.before_median / self.after_median
        return [f"bench before: median {self.before_median:.4g}, IQR {self.before_iqr:.3g} "
                f"({n}, interleaved; lower is faster)",
                f"bench after: median {self.after_median:.4g}, IQR {self.after_iqr:.3g}",
                f"{self.label}: after / before {1 / ratio:.3g} ({ratio:.3g}x); beyond noise "
                "needs a difference over " + noise_line(
                    self.before_iqr / self.before_median, self.after_iqr / self.after_median,
                    "before", "after")]


def bench_verdict(before: list[float], after: list[float]) -> BenchVerdict:
    """:class:`BenchVerdict` of the figures of each side (each a time: lower is faster)."""

    v = BenchVerdict(None, list(before), list(after))
    if not before or not after:
        v.why = "the " + ("before" if not before else "after") + " side printed no figure"
        return v
    b, a = summarize(before), summarize(after)
    v.before_median, v.before_iqr = b.median_ms, b.iqr_ms
    v.after_median, v.after_iqr = a.median_ms, a.iqr_ms
    if b.median_ms <= 0 or a.median_ms <= 0:
        v.why = "a median figure is not positive: the bench must print a time"
        return v
    v.label = label((b.median_ms, b.iqr_ms), (a.median_ms, a.iqr_ms))
    return v


@dataclass
class PortResult:
    """What a port did: the branch and worktree it made, its steps and overall status
    (``ok``, ``build_failed``, ``test_failed``, ``bench_failed``, ``slower``, ``tied``:
    :data:`EXIT_STATUS` maps each to the command's exit status); ``verdict``: the bench's
    (None without ``--bench`` or when a command failed first); ``notes``: on the source
    written (kopt.loop.measured.Measured.notes)."""

    port_id: str
    branch: str
    worktree: Path
    commit: str
    base_commit: str
    candidate_id: str
    device_class: str
    status: str = "ok"
    steps: list[Step] = field(default_factory=list)
    verdict: BenchVerdict | None = None
    notes: list[str] = field(default_factory=list)

    def figures(self, step: str) -> list[float]:
        """The bench figures of ``step`` (``bench_before`` / ``bench``), in run order."""
        return [s.bench_value for s in self.steps
                if s.step == step and s.bench_value is not None]

    @property
    def exit_status(self) -> int:
        """``kopt port``'s exit status for this result (:data:`EXIT_STATUS`)."""
        return EXIT_STATUS.get(self.status, 1)


def _git(repo: Path, *args: str, check: bool = True) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise PortError(f"git {' '.join(args)} in {repo} failed: "
                        f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return r.stdout.strip()


def _add_worktree(root: Path, branch: str, wt: Path, base: str) -> None:
    """``git worktree add -b BRANCH WT BASE``; when it fails (a read-only store: git makes the
    branch, then cannot make the folder) the new branch is deleted again, so a failed port
    leaves nothing in the user's repository (a failed worktree once left its branch).

    Raises:
        PortError: git failed (its last line).
    """
    try:
        _git(root, "worktree", "add", "-b", branch, str(wt), base)
    except PortError:
        _git(root, "worktree", "prune", check=False)
        _git(root, "branch", "-D", branch, check=False)
        raise


def check_repo(target: Path) -> tuple[Path, str]:
    """The repository root of ``target`` and the file's path relative to it.

    Raises:
        PortError: not in a git work tree, no such file or one git does not track (a port
            replaces a tracked file; it never creates one), the file has uncommitted
            changes, or the repository is mid-merge / rebase / cherry-pick / revert.
    """
    folder = target.parent
    if not folder.is_dir():
        raise PortError(f"--to {target}: folder {folder} does not exist")
    r = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise PortError(f"--to {target}: not inside a git repository; kopt port works on a "
                        "new branch of the file's repository")
    root = Path(r.stdout.strip())
    try:
        real = target.resolve(strict=False)
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise PortError(f"--to {target}: cannot be resolved ({e}); name a real file") from None
    if real.is_dir():
        raise PortError(f"--to {target}: is a directory; name the source file to replace")
    if not real.exists():
        raise PortError(f"--to {target}: no such file; a port replaces a file the repository "
                        "tracks (check the path; nothing was changed)")
    rel = os.path.relpath(real, resolved(root))
    if _git(root, "ls-files", "--", rel) == "":
        raise PortError(f"--to {target}: not tracked by git in {root}; `git add` and commit it "
                        "first, then port again (nothing was changed)")
    for marker, what in (("MERGE_HEAD", "a merge"), ("rebase-merge", "a rebase"),
                         ("rebase-apply", "a rebase"), ("CHERRY_PICK_HEAD", "a cherry-pick"),
                         ("REVERT_HEAD", "a revert")):
        if Path(root, _git(root, "rev-parse", "--git-path", marker)).exists():
            raise PortError(f"{root} is in the middle of {what}: finish or abort it, then "
                            "port again (nothing was changed)")
    if _git(root, "status", "--porcelain", "--", rel):
        raise PortError(f"{target} has uncommitted changes: commit or stash them, then port "
                        "again (the port branches from HEAD; nothing was changed)")
    return root, rel


def winner(run_id: str, store: Path, device_class: str | None = None) -> dict[str, Any]:
    """The run's winner: sweep, sweep_dir, backend, candidate_id, device_class, defines
    (dict), median_ms.

    Raises:
        PortError: no such run, no correct candidate, or several device classes and none
            chosen.
    """

    rec = Database(store).run(run_id)
    if rec is None:

        raise PortError(no_run(store, run_id))
    rows = best(rec["sweep"], store, run_id)
    classes = sorted({r["device_class"] for r in rows})
    if device_class is not None:
        rows = [r for r in rows if r["device_class"] == device_class]
    elif len(classes) > 1:
        raise PortError(f"run {run_id} has winners on {', '.join(classes)}: choose one with "
                        "--device-class")
    if not rows:
        raise PortError(f"run {run_id} has no correct candidate"
                        + (f" on {device_class}" if device_class else "") + " to port")
    row = next((r for r in rows if r["named"]), rows[0])
    backend, defines = Database(store).candidate_build(run_id, row["candidate_id"]) or (None, None)
    return {"sweep": rec["sweep"], "sweep_dir": rec["sweep_dir"], "backend": backend,
            "candidate_id": row["candidate_id"], "device_class": row["device_class"],
            "defines": stored_json(defines, "defines"), "median_ms": row["median_ms"]}


def port(run_id: str, target: Path, store: Path, build: str | None = None,
         test: str | None = None, bench: str | None = None, timeout_s: float = 600.0,
         device_class: str | None = None, worktrees: Path | None = None,
         bench_runs: int = BENCH_RUNS) -> PortResult:
    """Port ``run_id``'s winner into ``target`` on a new branch and run the commands
    (module doc); ``timeout_s``: seconds per command; ``bench_runs``: bench runs per side.
    The ``ports`` rows are written to ``store`` before returning.

    Raises:
        PortError: refused before anything changed (see :func:`check_repo`, :func:`winner`;
            the winner's measured source is lost; ``bench_runs`` below 1).
    """

    if bench_runs < 1:
        raise PortError(f"--bench-runs {bench_runs}: at least 1 run per side")
    store = resolved(store)
    root, rel = check_repo(Path(target))
    w = winner(run_id, store, device_class)
    header = (f"kopt port: sweep {w['sweep']}, run {run_id}, candidate {w['candidate_id']} "
              f"({w['device_class']}, {w['median_ms']:.4g} ms in the sweep)")
    try:
        text, measured = measured_realized(Database(store), run_id, w["candidate_id"],
                                           w["defines"], header)
    except SourceLost as e:
        raise PortError(f"{e}; the port needs it (nothing was changed)") from None
    res = _branch(root, store, run_id, w, worktrees)
    res.notes = measured.notes
    before = res.worktree.with_name(res.worktree.name + "-before") if bench else None
    try:
        if before is not None:
            _git(root, "worktree", "add", "--detach", str(before), res.base_commit)
            if build:
                res.steps.append(run_command("build_before", build, before, timeout_s))
        _commit(res.worktree, rel, text,
                f"kopt port: {w['sweep']} run {run_id} candidate {w['candidate_id']} into {rel}")
        res.commit = _git(res.worktree, "rev-parse", "HEAD")
        _build_test(res, build, test, timeout_s)
        if before is not None and res.status == "ok":
            _bench(res, bench, before, timeout_s, bench_runs)
    finally:
        if before is not None:
            _git(root, "worktree", "remove", "--force", str(before), check=False)
            _git(root, "worktree", "prune", check=False)
    _record(store, w, run_id, root, rel, res)
    return res


def _branch(root: Path, store: Path, run_id: str, w: dict[str, Any],
            worktrees: Path | None) -> PortResult:
    """A new branch ``kopt/port-RUN-CAND[-n]`` at HEAD checked out in its own worktree (one
    folder per port: the same run may be ported into several repositories)."""
    base = _git(root, "rev-parse", "HEAD")
    branch = stem = f"kopt/port-{run_id}-{w['candidate_id'][:8]}"
    n = 1
    while _git(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False):
        n += 1
        branch = f"{stem}-{n}"
    port_id = uuid.uuid4().hex[:12]
    wt = (worktrees or store / "port-worktrees") / f"{branch.replace('/', '_')}-{port_id[:6]}"
    wt.parent.mkdir(parents=True, exist_ok=True)
    _add_worktree(root, branch, wt, base)
    return PortResult(port_id=port_id, branch=branch, worktree=wt, commit="",
                      base_commit=base, candidate_id=w["candidate_id"],
                      device_class=w["device_class"])


def _commit(wt: Path, rel: str, text: str, message: str) -> None:
    """Write ``text`` to ``wt/rel`` byte for byte and commit it (as kopt when git knows no
    user)."""
    (wt / rel).parent.mkdir(parents=True, exist_ok=True)
    (wt / rel).write_text(text, newline="")
    who = [] if _git(wt, "config", "user.email", check=False) else [
        "-c", "user.name=kopt", "-c", "user.email=kopt@localhost"]
    _git(wt, "add", "--", rel)
    _git(wt, *who, "commit", "-q", "--allow-empty", "-m", message)


def _build_test(res: PortResult, build: str | None, test: str | None,
                timeout_s: float) -> None:
    """Run ``build`` then ``test`` in the port's worktree; the first failure sets the status
    (``build_failed`` / ``test_failed``) and stops."""
    for step, cmd in (("build", build), ("test", test)):
        if not cmd:
            continue
        s = run_command(step, cmd, res.worktree, timeout_s)
        res.steps.append(s)
        if s.exit_status != 0:
            res.status = f"{step}_failed"
            return


def _bench(res: PortResult, bench: str, before: Path, timeout_s: float, runs: int) -> None:
    """``runs`` rounds of the bench on each side, interleaved (odd rounds before first, even
    rounds after first); a run that fails or prints no figure stops them (``bench_failed``);
    else the verdict sets the status (FASTER ``ok``, SLOWER ``slower``, TIED ``tied``)."""
    sides = [("bench_before", before), ("bench", res.worktree)]
    for k in range(1, runs + 1):
        for step, cwd in (sides if k % 2 else sides[::-1]):
            s = run_command(step, bench, cwd, timeout_s)
            s.run_no = k
            res.steps.append(s)
            if s.exit_status != 0 or s.bench_value is None:
                res.status = "bench_failed"
                return
    res.verdict = bench_verdict(res.figures("bench_before"), res.figures("bench"))
    res.status = {"FASTER": "ok", "SLOWER": "slower", "TIED": "tied"}.get(
        res.verdict.label or "", "bench_failed")


def _record(store: Path, w: dict[str, Any], run_id: str, root: Path, rel: str,
            res: PortResult) -> None:
    """The port's ``ports`` rows: one per command (a ``write`` row when none ran)."""

    common = {"port_id": res.port_id, "run_id": run_id, "sweep": w["sweep"],
              "candidate_id": res.candidate_id, "device_class": res.device_class,
              "repo": str(root), "file": rel, "branch": res.branch,
              "base_commit": res.base_commit, "commit": res.commit, "status": res.status,
              "created_at": now()}
    Database(store).commit("ports", w["sweep"], run_id, [
        {**common, **{k: getattr(s, k) for k in ("step", "command", "exit_status",
                                                 "duration_s", "timed_out", "output_tail",
                                                 "bench_value", "run_no")}}
        for s in res.steps] or [{**common, "step": "write"}])
