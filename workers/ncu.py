"""Nsight Compute: capture a candidate's kernels with ``ncu`` and read the report.

Capture runs ``ncu --clock-control none`` on a small target process
(``python -m workers.ncu_target JOB.json``) that loads the artifact, prepares
the inputs like the harness does and calls ``solve`` once. Only the
``__global__`` kernels ``solve`` launches are profiled (matched by their
mangled names from the ptxas report; ``-k solve`` would profile nothing), every
launch of them. ncu runs in its own process group with its own TMPDIR and a
timeout, under a file lock per GPU (:func:`lock_path`: the device actor's
``CUDA_VISIBLE_DEVICES``), so at most one ncu runs per GPU, ncu processes of different GPUs
run at once (each has its own TMPDIR, where Nsight Compute keeps its own lock file), and an
actor's death leaves no orphan holding the GPU or the counter lock. ``KOPT_NCU_LOCK=node``
makes it one ncu per node again.

An iteration's baseline and top-k are captured in one ncu process
(:func:`capture_many`: one ncu start and one CUDA context instead of one per
candidate); markers the target prints around each candidate's call tell whose
launches are whose, and when they cannot, each candidate is captured on its own.

ncu and its target run in the candidate's sandbox (workers.isolation, :func:`confined`):
the target loads candidate code, so it gets the harness's PID, network, IPC and mount
namespaces, every file system read-only but its TMPDIR (a tmpfs) and the capture's own
folder (where ncu writes the report), the system-call filter once its CUDA context is up
(workers.ncu_target), and everything it starts dies with ncu.

Reports are read with the ``ncu_report`` package (the .ncu-rep format); a
metric absent from a report is absent from the rows, never a zero.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workers import isolation
from workers.reap import die_with_parent, package_env
from workers.status import Status

LOCK_PATH = Path(tempfile.gettempdir()) / "kopt-ncu.lock"  # the node-wide lock
# "1" in a sandboxed target's environment: it installs workers.seccomp's filter before it
# loads candidate code; "0" in kopt's environment leaves it off (ncu's own connection to
# its target is made before, at the CUDA context's start)
SECCOMP_ENV = "KOPT_NCU_SECCOMP"


def lock_path(env: dict[str, str] | None = None) -> Path:
    """The lock file one ncu holds while it runs: one per GPU, named by the
    ``CUDA_VISIBLE_DEVICES`` the ncu process gets (Ray sets it per device actor), else
    (unset, or ``KOPT_NCU_LOCK=node``) the node-wide :data:`LOCK_PATH`."""
    env = {**os.environ, **(env or {})}
    gpus = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not gpus or env.get("KOPT_NCU_LOCK") == "node":
        return LOCK_PATH
    return LOCK_PATH.with_name("kopt-ncu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", gpus) + ".lock")
NCU_TIMEOUT_S = 300.0


@dataclass
class MetricRow:
    """One metric of one kernel launch: value in the report's base unit (e.g. ns, %, byte)."""

    kernel: str
    launch: int
    metric: str
    value: float
    unit: str


@dataclass
class ProfileResult:
    """A capture's outcome. ``status``: ok, no_ncu, no_permission, no_kernels, crashed, timeout."""

    status: str
    error: str = ""
    rows: list[MetricRow] = field(default_factory=list)
    command: str = ""
    seconds: float = 0.0


def read_report(path: str | Path, metrics: list[str] | None = None) -> list[MetricRow]:
    """Metric rows of every kernel launch in an ``.ncu-rep`` file.

    Args:
        path: the report.
        metrics: names to read (all numeric metrics of each launch when None).

    Returns:
        Rows in launch order; string-valued and absent metrics are skipped.

    Raises:
        RuntimeError: the file cannot be opened as a report.
    """
    return _read(path, metrics)[0]


READ_TIMEOUT_S = 120.0  # for a child process to read one report


def _read(path: str | Path, metrics: list[str] | None) -> tuple[list[MetricRow], int]:
    """:func:`read_report`'s rows and the number of launches (actions) in the report,
    including launches none of whose metrics were readable. Read in a child process of its
    own (:func:`_read_apart`) where this process has imported torch: Nsight Compute
    2025.3.1's ``ncu_report`` and torch 2.11 in one process crashed it (a segmentation
    fault in ``IMetric.unit``, or in ``import torch`` once ``ncu_report`` was loaded; an
    H200 host, docs/verified/2026-12-04-hold-cpu-and-gpu-tests.md)."""
    if "torch" in sys.modules:
        return _read_apart(path, metrics)
    return _read_here(path, metrics)


def _read_apart(path: str | Path, metrics: list[str] | None) -> tuple[list[MetricRow], int]:
    """:func:`_read_here` in a child process (``python -m workers.ncu read``), which never
    imports torch. Raises RuntimeError when it fails (its exit code and last words)."""
    cmd = [sys.executable, "-m", "workers.ncu", "read", str(path), json.dumps(metrics)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=package_env(),
                           timeout=READ_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{path}: reading the report took over {READ_TIMEOUT_S:.0f} s"
                           ) from None
    if p.returncode != 0:
        raise RuntimeError(f"{path}: the process reading the report ended with code "
                           f"{p.returncode}: {p.stderr.strip()[-400:]}")
    got = json.loads(p.stdout)
    return [MetricRow(**r) for r in got["rows"]], int(got["launches"])


def _read_here(path: str | Path, metrics: list[str] | None) -> tuple[list[MetricRow], int]:
    """:func:`_read` in this process."""
    ncu_report = _ncu_report()
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as e:  # the library raises plain exceptions
        raise RuntimeError(f"{path}: not a readable Nsight Compute report: {e}") from None
    rows: list[MetricRow] = []
    launch = 0
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            act = rng.action_by_idx(ai)
            name = act.name(act.NameBase_MANGLED) or act.name()
            names = metrics if metrics is not None else list(act.metric_names())
            for m in names:
                metric = act.metric_by_name(m)
                if metric is None or not metric.has_value():
                    continue
                if metric.kind() == metric.ValueKind_STRING:
                    continue
                try:
                    value = float(metric.value())
                except (TypeError, ValueError):
                    continue
                rows.append(MetricRow(name, launch, m, value, metric.unit() or ""))
            launch += 1
    return rows, launch


def _ncu_report() -> Any:
    """The ``ncu_report`` module: the PyPI package, else the copy Nsight Compute ships in
    ``<install>/extras/python``. Raises RuntimeError when neither is there."""
    try:
        import ncu_report

        return ncu_report
    except ImportError:
        pass
    import glob
    import importlib

    roots = []
    exe = ncu_exe()
    if exe:
        real = Path(os.path.realpath(exe))
        roots += [real.parent, real.parent.parent, real.parent.parent.parent]
    roots += [Path(p) for p in sorted(glob.glob("/opt/nvidia/nsight-compute/*"), reverse=True)]
    roots += [Path(p) for p in sorted(glob.glob("/usr/local/cuda*/nsight-compute*"), reverse=True)]
    for r in roots:
        cand = r / "extras" / "python"
        if (cand / "ncu_report.py").exists():
            sys.path.insert(0, str(cand))
            return importlib.import_module("ncu_report")
    raise RuntimeError("the ncu_report module is missing: `pip install ncu-report`, or keep "
                       "Nsight Compute's extras/python next to ncu")


def ncu_exe() -> str | None:
    """The ncu executable: ``$NCU``, ``ncu`` on PATH, or the CUDA toolkit's."""
    for cand in (os.environ.get("NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and os.path.exists(cand):
            return cand
    return None


def ncu_version() -> str | None:
    """``ncu --version``'s last line, or None without ncu."""
    exe = ncu_exe()
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def query_metrics() -> list[str] | None:
    """Base metric names ``ncu --query-metrics`` lists for this node's GPUs, sorted (None
    without ncu, or when it fails or lists none). One ncu process: 1.2-2.8 s on an H200
    host (docs/verified/2026-12-01-h200-targets.md, its Kernel Tuner comparison)."""
    exe = ncu_exe()
    if exe is None:
        return None
    try:
        p = subprocess.run([exe, "--query-metrics"], capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sorted(parse_query_metrics(p.stdout)) or None


_early: list[Future[list[str] | None]] = []  # this process's query started ahead


def start_query() -> None:
    """Start :func:`query_metrics` in a thread of this process now: a sweep's driver does it
    before Ray starts, so that its local devices' metric list is known before their first
    job (the driver waited for it between the devices' start and the first job, 1.9 s cold
    on an H200, docs/verified/2026-12-01-h200-targets.md). :func:`early_query` gives its
    result."""
    if not _early:
        _early.append(ThreadPoolExecutor(1, thread_name_prefix="ncu-query").submit(
            query_metrics))


def early_query() -> tuple[bool, list[str] | None]:
    """(started, names): whether :func:`start_query` ran in this process, and its result
    once done (waits for it; None where :func:`query_metrics` gives None)."""
    if not _early:
        return False, None
    try:
        return True, _early[0].result()
    except Exception:  # noqa: BLE001 -- as query_metrics: no list, the catalog's names
        return True, None


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names from ``ncu --query-metrics`` output (first column of its table)."""
    out = set()
    for line in text.splitlines():
        tok = line.split()[0] if line.split() else ""
        if "__" in tok and not tok.startswith("-"):
            out.add(tok)
    return out


def confined(cmd: list[str], tmp: Path) -> tuple[list[str], dict[str, str]]:
    """``cmd`` (ncu on its target) as run in the candidate's sandbox (workers.isolation),
    with the environment it adds: ``tmp`` (the capture's folder: jobs, report) left
    writable, the namespace's loopback up (ncu reaches its target over 127.0.0.1),
    ``tmp/scratch`` a tmpfs and ``TMPDIR`` and ``HOME`` (ncu's lock file, torch's
    caches), the seccomp switch for the target (:data:`SECCOMP_ENV`). Without a sandbox
    here: ``cmd`` as it is, ``TMPDIR`` ``tmp`` (the row's ``isolation`` says ``none``)."""
    iso = isolation.available()
    if not iso.isolated:
        return list(cmd), {"TMPDIR": str(tmp)}
    scratch = tmp / "scratch"
    scratch.mkdir(exist_ok=True)
    # /proc writable: the target, ncu's child, names its threads there as CUDA starts
    # (workers.jail ``own_proc`` makes only the sandbox's first process's own writable)
    return iso.wrap(cmd, str(scratch), keep=(str(tmp),), loopback=True, proc_rw=True), {
        "TMPDIR": str(scratch), "HOME": str(scratch),
        SECCOMP_ENV: "0" if os.environ.get(SECCOMP_ENV) == "0" else "1"}


def tied() -> Any:
    """A ``preexec_fn`` for ncu's process: SIGKILL when the process that started it dies
    (its sandbox, and the target in it, go with it: ``unshare --kill-child``), set only
    from the main thread (the parent-death signal follows the starting thread); else
    None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return functools.partial(die_with_parent, signal.SIGKILL)


def kernel_regex(kernels: list[str]) -> str:
    """ncu ``-k regex:`` matching exactly these mangled kernel names."""
    return "regex:^(" + "|".join(re.escape(k) for k in kernels) + ")$"


def _run_ncu(target: list[str], kernels: list[str], metrics: list[str],
             sections: list[str] | None, timeout_s: float, env: dict[str, str] | None,
             tmp: Path) -> tuple[ProfileResult, str]:
    """Run ncu on ``python -m workers.ncu_target TARGET...`` under its GPU's ncu lock, in
    its own process group, TMPDIR ``tmp``; the report is ``tmp/report.ncu-rep``. Returns
    the outcome (status ``ok`` with no rows yet when ncu exited 0 and wrote the report,
    else the failure) and ncu's combined output."""
    exe = ncu_exe()
    if exe is None:
        return ProfileResult("no_ncu", "ncu not found (set $NCU or put Nsight Compute on "
                             "PATH)"), ""
    if not kernels:
        return ProfileResult("no_kernels", "the build reported no __global__ kernels to "
                             "profile"), ""
    t0 = time.perf_counter()
    rep = tmp / "report"
    # application-only: the target is this interpreter itself (sys.executable, no child
    # process to follow); 8.3 s against 10.5 s with "all" for a torch matmul under the
    # catalog's metrics on an H200 (docs/verified/2026-12-01-h200-targets.md)
    cmd = [exe, "--clock-control", "none", "--target-processes", "application-only",
           "--kernel-name-base", "mangled", "-k", kernel_regex(kernels),
           "--metrics", ",".join(metrics), "-o", str(rep), "-f"]
    for s in sections or []:
        cmd += ["--section", s]
    cmd += [sys.executable, "-m", "workers.ncu_target", *target]
    run, extra = confined(cmd, tmp)
    penv = {**package_env(), **(env or {}), **extra}  # runs in tmp: no cwd import
    with open(lock_path(penv), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one ncu per GPU
        try:
            p = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, env=penv, cwd=tmp, start_new_session=True,
                                 preexec_fn=tied())
            try:
                out, _ = p.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                return ProfileResult(Status.TIMEOUT, f"ncu ran past {timeout_s:.0f} s; killed",
                                     command=" ".join(cmd),
                                     seconds=time.perf_counter() - t0), ""
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    cmd_s = " ".join(cmd).replace(str(tmp), ".")
    dt = time.perf_counter() - t0
    if "ERR_NVGPUCTRPERM" in out:
        return ProfileResult("no_permission", "ERR_NVGPUCTRPERM: this user may not read GPU "
                             "performance counters (see NVIDIA's ERR_NVGPUCTRPERM page)",
                             command=cmd_s, seconds=dt), out
    if p.returncode != 0 or not rep.with_suffix(".ncu-rep").exists():
        return ProfileResult(Status.CRASHED, f"ncu exit code {p.returncode}: {out[-1500:]}",
                             command=cmd_s, seconds=dt), out
    return ProfileResult(Status.OK, "", command=cmd_s, seconds=dt), out


def capture(job: dict[str, Any], kernels: list[str], metrics: list[str],
            sections: list[str] | None = None, timeout_s: float = NCU_TIMEOUT_S,
            env: dict[str, str] | None = None) -> ProfileResult:
    """Profile one candidate's kernels (every launch) and read the chosen metrics.

    Args:
        job: a harness run job (artifact, signature, reference, dims, ...).
        kernels: mangled ``__global__`` names from the build's ptxas report.
        metrics: metric names to collect (``--metrics``) and read.
        sections: extra ``--section`` identifiers.
        timeout_s: kill ncu's whole process group after this long.
        env: extra environment (CUDA_VISIBLE_DEVICES is inherited).

    Returns:
        A ProfileResult; never raises for a profiling failure.
    """
    with tempfile.TemporaryDirectory(prefix="kopt-ncu-") as tmp:
        jf = Path(tmp) / "job.json"
        jf.write_text(json.dumps(job))
        res, out = _run_ncu([str(jf)], kernels, metrics, sections, timeout_s, env, Path(tmp))
        if res.status != Status.OK:
            return res
        try:
            rows = read_report(Path(tmp) / "report.ncu-rep", metrics)
        except RuntimeError as e:
            return ProfileResult(Status.CRASHED, str(e), command=res.command, seconds=res.seconds)
    if not rows:
        return ProfileResult("no_kernels", f"ncu profiled no kernel matching {kernels}: "
                             f"{out[-800:]}", command=res.command, seconds=res.seconds)
    return ProfileResult(Status.OK, "", rows, res.command, res.seconds)


def split_launches(out: str, n_jobs: int) -> tuple[list[int], dict[int, str]] | None:
    """Which profiled launches belong to which job of a ``--many`` target run.

    Args:
        out: ncu's combined stdout/stderr: the target's ``KOPT_NCU_BEGIN/END/FAIL i``
            markers and ncu's ``==PROF== Profiling`` line per profiled launch, in order.
        n_jobs: how many jobs the target was given.

    Returns:
        ``(counts, failed)``: profiled launches per job in order, and job index -> the
        target's failure message; None when the markers do not bracket every job exactly
        once in order (the caller then profiles the jobs one by one).
    """
    counts = [0] * n_jobs
    failed: dict[int, str] = {}
    cur, nxt = None, 0
    for line in out.splitlines():
        if line.startswith("KOPT_NCU_BEGIN "):
            if cur is not None or int(line.split()[1]) != nxt:
                return None
            cur = nxt
        elif line.startswith("KOPT_NCU_END "):
            if cur is None or int(line.split()[1]) != cur:
                return None
            cur, nxt = None, nxt + 1
        elif line.startswith("KOPT_NCU_FAIL "):
            parts = line.split(" ", 2)
            if cur is None or int(parts[1]) != cur:
                return None
            failed[cur] = parts[2] if len(parts) > 2 else "failed"
        elif line.startswith("==PROF== Profiling"):
            if cur is None:
                return None
            counts[cur] += 1
    return (counts, failed) if nxt == n_jobs and cur is None else None


def capture_many(items: list[tuple[dict[str, Any], list[str]]], metrics: list[str],
                 sections: list[str] | None = None, timeout_s: float = NCU_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> list[ProfileResult] | None:
    """Profile several candidates in one ncu process (one start, one CUDA context).

    Args:
        items: per candidate, its harness job and its mangled kernel names.
        metrics, sections, env: as :func:`capture`.
        timeout_s: per candidate; the run gets ``timeout_s * len(items)``.

    Returns:
        One ProfileResult per item, in order, each with its own launches numbered from 0;
        the same failure for every item when ncu itself failed (no ncu, no permission,
        timeout); None when the launches cannot be attributed to the candidates (the
        caller then profiles them one by one with :func:`capture`).
    """
    kernels = sorted({k for _, ks in items for k in ks})
    with tempfile.TemporaryDirectory(prefix="kopt-ncu-") as tmp:
        jf = Path(tmp) / "jobs.json"
        jf.write_text(json.dumps([job for job, _ in items]))
        res, out = _run_ncu(["--many", str(jf)], kernels, metrics, sections,
                            timeout_s * len(items), env, Path(tmp))
        return attribute(items, metrics, res, out, Path(tmp))


def attribute(items: list[tuple[dict[str, Any], list[str]]], metrics: list[str],
              res: ProfileResult, out: str, tmp: Path) -> list[ProfileResult] | None:
    """Each candidate's launches of a batch profiled in one ncu process (``res``: how it
    ended; ``out``: its output, with the target's markers; ``tmp``: where its
    ``report.ncu-rep`` is): as :func:`capture_many` returns them."""
    if res.status in ("no_ncu", "no_permission", Status.TIMEOUT, "no_kernels"):
        return [res for _ in items]
    if res.status != Status.OK:
        return None
    split = split_launches(out, len(items))
    if split is None:
        return None
    try:
        rows, n_launches = _read(tmp / "report.ncu-rep", metrics)
    except RuntimeError:
        return None
    counts, failed = split
    if n_launches != sum(counts):
        return None
    results: list[ProfileResult] = []
    first = 0
    for i, n in enumerate(counts):
        mine = [MetricRow(r.kernel, r.launch - first, r.metric, r.value, r.unit)
                for r in rows if first <= r.launch < first + n]
        first += n
        share = res.seconds / len(items)
        if i in failed:
            results.append(ProfileResult(Status.CRASHED, f"ncu target: {failed[i]}",
                                         command=res.command, seconds=share))
        elif not mine:
            results.append(ProfileResult("no_kernels", f"ncu profiled no kernel matching "
                                         f"{items[i][1]}", command=res.command,
                                         seconds=share))
        else:
            results.append(ProfileResult(Status.OK, "", mine, res.command, share))
    return results


def main(argv: list[str]) -> int:
    """``python -m workers.ncu read PATH METRICS_JSON``: a report's metric rows and launch
    count as one JSON object (``rows``, ``launches``) on stdout (:func:`_read_apart`'s
    child); exit 1 with the reason on stderr when the report cannot be read."""
    if len(argv) != 3 or argv[0] != "read":
        print("usage: python -m workers.ncu read PATH METRICS_JSON", file=sys.stderr)
        return 2
    try:
        rows, launches = _read_here(argv[1], json.loads(argv[2]))
    except RuntimeError as e:
        print(str(e), file=sys.stderr)
        return 1
    print(json.dumps({"rows": [asdict(r) for r in rows], "launches": launches}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
