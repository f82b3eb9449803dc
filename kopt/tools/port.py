"""``kopt port RUN_ID --to REPO_FILE``: the winner of a sweep back into the user's repository.

The winner's realized source (the exact source it was measured from, the store's copy: a
submitted version's text when one won; its ``-D`` defines written in as ``#define`` lines at
the top: no ``-D`` needed; :func:`kopt.tools.report.measured_realized`) replaces
``REPO_FILE`` on a new branch
``kopt/port-RUN_ID-CANDIDATE`` checked out in a separate git worktree (default
``STORE/port-worktrees/<branch>-<port id>``): the user's checkout, its current branch and any
uncommitted change in it are never touched. Refused with one line when ``REPO_FILE`` has
uncommitted changes (the port would silently drop them from the branch) or the repository is
mid-merge, mid-rebase or mid-cherry-pick.

In the worktree, each command runs through the shell with a timeout, in this order:
``--build`` and ``--bench`` on the base commit (the *before* figure, only with ``--bench``),
then the port's commit, ``--build``, ``--test``, ``--bench`` (the *after* figure). A failing
build or test stops there. Each command becomes one ``ports`` row in the store: exit status
(``-9`` when killed at its timeout), duration, the last 4000 characters of its output, and
for a bench its figure. Nothing is merged: the branch stays for inspection either way.

The bench figure is :func:`kopt.util.command.bench_figure`'s.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.util.command import Step, run_command
from kopt.util.paths import resolved


class PortError(ValueError):
    """A port refused before anything changed (no run, dirty file, mid-merge...)."""




@dataclass
class PortResult:
    """What a port did: the branch and worktree it made, its steps and overall status
    (``ok``, ``build_failed``, ``test_failed``, ``bench_failed``)."""

    port_id: str
    branch: str
    worktree: Path
    commit: str
    base_commit: str
    candidate_id: str
    device_class: str
    status: str = "ok"
    steps: list[Step] = field(default_factory=list)

    def figure(self, step: str) -> float | None:
        """The bench figure of ``step`` (``bench_before`` / ``bench``), or None."""
        return next((s.bench_value for s in self.steps if s.step == step), None)










def _git(repo: Path, *args: str, check: bool = True) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise PortError(f"git {' '.join(args)} in {repo} failed: "
                        f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return r.stdout.strip()


def _add_worktree(root: Path, branch: str, wt: Path, base: str) -> None:
    """``git worktree add -b BRANCH WT BASE``; when it fails (a read-only store: git makes the
    branch, then cannot make the folder) the new branch is deleted again, so a failed port
    leaves nothing in the user's repository (trial 8 D6).

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
    from kopt.store.database import Database
    from kopt.store.files import stored_json
    from kopt.store.select import best

    rec = Database(store).run(run_id)
    if rec is None:
        from kopt.store.files import no_run

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
         device_class: str | None = None, worktrees: Path | None = None) -> PortResult:
    """Port ``run_id``'s winner into ``target`` on a new branch and run the commands
    (module doc). The ``ports`` rows are written to ``store`` before returning.

    Raises:
        PortError: refused before anything changed (see :func:`check_repo`, :func:`winner`).
    """
    from kopt.loop.measured import SourceLost
    from kopt.store.database import Database
    from kopt.store.files import now
    from kopt.tools.report import measured_realized

    store = resolved(store)
    root, rel = check_repo(Path(target))
    w = winner(run_id, store, device_class)
    header = (f"kopt port: sweep {w['sweep']}, run {run_id}, candidate {w['candidate_id']} "
              f"({w['device_class']}, {w['median_ms']:.4g} ms in the sweep)")
    try:
        text, _ = measured_realized(Database(store), run_id, w["candidate_id"], w["defines"],
                                    header)
    except SourceLost as e:
        raise PortError(f"{e}; the port needs it (nothing was changed)") from None
    base = _git(root, "rev-parse", "HEAD")
    branch = stem = f"kopt/port-{run_id}-{w['candidate_id'][:8]}"
    n = 1
    while _git(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False):
        n += 1
        branch = f"{stem}-{n}"
    port_id = uuid.uuid4().hex[:12]
    # one folder per port: the same run may be ported into several repositories
    wt = (worktrees or store / "port-worktrees") / f"{branch.replace('/', '_')}-{port_id[:6]}"
    wt.parent.mkdir(parents=True, exist_ok=True)
    _add_worktree(root, branch, wt, base)
    res = PortResult(port_id=port_id, branch=branch, worktree=wt, commit="",
                     base_commit=base, candidate_id=w["candidate_id"],
                     device_class=w["device_class"])
    if bench:
        if build:
            res.steps.append(run_command("build_before", build, wt, timeout_s))
        res.steps.append(run_command("bench_before", bench, wt, timeout_s))
    (wt / rel).parent.mkdir(parents=True, exist_ok=True)
    (wt / rel).write_text(text, newline="")
    who = [] if _git(wt, "config", "user.email", check=False) else [
        "-c", "user.name=kopt", "-c", "user.email=kopt@localhost"]
    _git(wt, "add", "--", rel)
    _git(wt, *who, "commit", "-q", "--allow-empty", "-m",
         f"kopt port: {w['sweep']} run {run_id} candidate {w['candidate_id']} into {rel}")
    res.commit = _git(wt, "rev-parse", "HEAD")
    for step, cmd in (("build", build), ("test", test), ("bench", bench)):
        if not cmd:
            continue
        s = run_command(step, cmd, wt, timeout_s)
        res.steps.append(s)
        if s.exit_status != 0:
            res.status = f"{step}_failed"
            break
    at = now()
    Database(store).commit("ports", w["sweep"], run_id, [{
        "port_id": res.port_id, "run_id": run_id, "sweep": w["sweep"],
        "candidate_id": res.candidate_id, "device_class": res.device_class,
        "repo": str(root), "file": rel, "branch": branch, "base_commit": base,
        "commit": res.commit, "status": res.status, "created_at": at,
        **{k: getattr(s, k) for k in ("step", "command", "exit_status", "duration_s",
                                      "timed_out", "output_tail", "bench_value")}}
        for s in res.steps] or [{"port_id": res.port_id, "run_id": run_id, "sweep": w["sweep"],
                                 "repo": str(root), "file": rel, "branch": branch,
                                 "base_commit": base, "commit": res.commit,
                                 "status": res.status, "step": "write", "created_at": at}])
    return res
