"""Attaching to Ray: the embedded local instance or a cluster (``--cluster`` YAML or address),
the runtime environment a cluster's workers get (kopt and workers as py_modules, the sweep
folder's files within Ray's upload limits), the sandboxes prestarted before Ray, and Ray's
own timeline for diagnosis."""

from __future__ import annotations

import os
import re
import signal
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

import kopt
import workers
from kopt.core.contract import check_plain_file, too_deep, yaml_error_line
from kopt.core.spec import Sweep
from kopt.run.builder import (
    job_base,
)
from kopt.run.callbacks import ProgressCallback
from kopt.run.devices import local_gpu_count
from kopt.run.probe import NOT_RAY, head_problem
from kopt.run.runner import SweepError
from kopt.run.signals import Terminated, received, terminate
from workers import isolation
from workers.prestart import Prestarter
from workers.records import RunJob


def ensure_ray(address: str | None = None, runtime_env: dict | None = None) -> None:
    """Attach to ``address`` or start an embedded local Ray instance (once per process).

    Raises:
        SweepError: the embedded instance did not start (Ray's own error, e.g. "The
            current node timed out during startup" on an overloaded machine), or
            ``--address auto`` found no running instance. Other addresses raise what Ray
            raises (:func:`attach` words it).
    """
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "ERROR",
                              "log_to_driver": False}
    if runtime_env:
        kwargs["runtime_env"] = runtime_env
    # no address: a new embedded instance ("local"), never a `ray start` cluster that
    # happens to run on this machine (--address auto attaches to that one)
    try:
        ray.init(address=address or "local", **kwargs)
    except Exception as e:  # noqa: BLE001 -- Ray raises a bare Exception when its node fails
        if address not in (None, "local", "auto"):
            raise
        first = (str(e).splitlines() or [type(e).__name__])[0]
        what = "--address auto" if address == "auto" else "an embedded local instance"
        raise SweepError(f"Ray did not start ({what}): {first}; nothing was measured or stored: "
                         "run the command again once the machine is less loaded, or start Ray "
                         "once with `ray start --head` and pass --address auto") from None


def cluster_address(path: str | Path) -> str:
    """The head address (``HEAD_IP:PORT``) of a Ray cluster-launcher file: the local
    provider's ``head_ip`` and the ``--port`` of ``head_start_ray_commands`` (default 6379).

    Raises:
        SweepError: the file is missing or has no ``provider.head_ip``.
    """
    import yaml


    p = Path(path)
    check_plain_file(p, lambda why: SweepError(f"--cluster {why}"))
    try:
        cfg = yaml.safe_load(p.read_text())
    except RecursionError:
        raise SweepError(too_deep(f"--cluster {p}", "YAML")) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        first = yaml_error_line(e)
        raise SweepError(f"--cluster {p}: cannot read it ({first}); pass the Ray "
                         "cluster-launcher YAML you brought up with `ray up`") from None
    if cfg is not None and not isinstance(cfg, dict):
        raise SweepError(f"--cluster {p}: expected a mapping (provider:, head_start_ray_commands:"
                         f", ...), got a YAML {type(cfg).__name__}; pass the Ray "
                         "cluster-launcher YAML you brought up with `ray up`")
    provider = (cfg or {}).get("provider") or {}
    head = provider.get("head_ip") if isinstance(provider, dict) else None
    if not head:
        raise SweepError(f"--cluster {p}: field 'provider.head_ip' is missing; kopt attaches "
                         "to the head of a local-provider cluster (or pass --address HOST:PORT)")
    if not isinstance(head, str) or not re.fullmatch(r"[\w.-]+", head):
        raise SweepError(f"--cluster {p}: field 'provider.head_ip' is {head!r}; expected one "
                         "host name or IPv4 address (e.g. 10.0.0.5)")
    cmds = cfg.get("head_start_ray_commands") or []
    if not isinstance(cmds, list) or not all(isinstance(c, str) for c in cmds):
        raise SweepError(f"--cluster {p}: field 'head_start_ray_commands' is {cmds!r}; "
                         "expected a list of shell commands (- ray start --head --port=6379)")
    port = 6379
    for cmd in cmds:
        m = re.search(r"--port[= ](\S+)", str(cmd))
        if m:
            if not m.group(1).isdigit() or not 0 < int(m.group(1)) < 65536:
                raise SweepError(f"--cluster {p}: head_start_ray_commands has --port "
                                 f"{m.group(1)!r}; expected a port from 1 to 65535")
            port = int(m.group(1))
    return f"{head}:{port}"


# files larger than this stay behind when a sweep folder travels to a cluster: Ray's
# upload limit is 512 MiB for the whole (zipped) folder, and a sweep needs its sources
UPLOAD_FILE_LIMIT = 100 * 2**20
# "0": no judge prestarted beside a GPU's harness (workers.prestart ``judges``; a side by
# side measurement's other arm)
JUDGE_ENV = "KOPT_PRESTART_JUDGE"


UPLOAD_EXCLUDES = ["kopt-store", "report-*", "__pycache__", "*.parquet", ".git"]


IGNORE_FILE = ".koptignore"


def _gitignore_literal(rel: str) -> str:
    """``rel`` (a path under the sweep folder) as a gitignore pattern matching only it."""
    return "/" + re.sub(r"([\\\[\]*?!# ])", r"\\\1", rel)


def cluster_runtime_env(sweep: Sweep) -> tuple[dict[str, Any], list[str]]:
    """What travels to every node of a cluster, and notes on what stays behind.

    The sweep folder travels as the working_dir (sources, ref.py, headers), without kopt's
    own outputs (``UPLOAD_EXCLUDES``), the patterns of the folder's ``.koptignore``
    (gitignore syntax; Ray also honours ``.gitignore`` and ``.rayignore``) and any file
    over ``UPLOAD_FILE_LIMIT`` bytes (a note names each); kopt's own packages (``kopt``,
    ``workers``) travel as py_modules.
    """
    import fnmatch


    excludes = list(UPLOAD_EXCLUDES)
    ignore = sweep.root / IGNORE_FILE
    if ignore.is_file():
        excludes += [ln for ln in ignore.read_text().splitlines()
                     if ln.strip() and not ln.startswith("#")]
    big = []
    for folder, dirs, files in os.walk(sweep.root):
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, x) for x in UPLOAD_EXCLUDES)]
        for f in files:
            path = Path(folder) / f
            if (not any(fnmatch.fnmatch(f, x) for x in UPLOAD_EXCLUDES) and path.is_file()
                    and path.stat().st_size > UPLOAD_FILE_LIMIT):
                big.append((path.relative_to(sweep.root).as_posix(), path.stat().st_size))
    excludes += [_gitignore_literal(rel) for rel, _ in big]
    notes = [f"{sweep.root / rel} ({size / 2**20:.0f} MiB) stays behind: files over "
             f"{UPLOAD_FILE_LIMIT // 2**20} MiB do not travel to cluster nodes; if ref.py "
             f"reads it, copy it to every node and read it by absolute path (list files the "
             f"sweep does not need in {ignore})" for rel, size in sorted(big)]
    return {"working_dir": str(sweep.root),
            "py_modules": [str(Path(kopt.__file__).parent), str(Path(workers.__file__).parent)],
            "excludes": excludes}, notes


def attach(address: str, source: str, runtime_env: dict | None = None) -> None:
    """Attach to a running Ray cluster; fail fast, naming ``source`` and ``ray up``.

    Raises:
        SweepError: ``address`` is not HOST:PORT, no head answers there, or Ray cannot
            ship ``runtime_env`` (e.g. the sweep folder is over Ray's upload limit).
    """
    problem = head_problem(address)
    if problem == "format":
        raise SweepError(f"{source}: {address!r} is not HOST:PORT (e.g. 127.0.0.1:6379)")
    up = (f"`ray up {source.split(' ', 1)[1]}`" if source.startswith("--cluster")
          else "`ray up ray_cluster.yaml`")
    if problem == "silent":
        raise SweepError(f"{source}: no Ray head answers at {address}; bring the cluster up "
                         f"with {up} (or start one with `ray start --head`)")
    if problem:  # Ray would retry for 90 s and more
        raise SweepError(f"{source}: " + NOT_RAY.format(address=address))
    try:
        ensure_ray(address, runtime_env)
    except ConnectionError as e:
        raise SweepError(f"{source}: {e}; is the cluster up (`ray up ray_cluster.yaml`, "
                         "`ray status`)?") from None
    except ray.exceptions.RuntimeEnvSetupError as e:
        wd = (runtime_env or {}).get("working_dir", "the sweep folder")
        m = re.search(r"Package size \(([^)]*)\) exceeds the maximum size of ([\d.]+ ?\w+)",
                      str(e))
        if m:
            raise SweepError(
                f"{source}: the sweep folder {wd} packs to {m.group(1)}, over Ray's upload "
                f"limit of {m.group(2)}; list the files the sweep does not need in "
                f"{Path(wd) / IGNORE_FILE} (gitignore syntax)") from None
        last = [ln for ln in str(e).splitlines() if ln.strip()][-1:] or [type(e).__name__]
        raise SweepError(f"{source}: Ray could not ship the sweep folder {wd}: "
                         f"{last[0]}") from None


def prestart_sandboxes(sweep: Sweep, backend: str, cpu_devices: int) -> Prestarter | None:
    """Start the harnesses of the embedded instance's devices now, before Ray
    (workers.prestart: torch's import and the CUDA context then overlap Ray's start, issue
    14.2): one per GPU that Ray will see (the same ids: ``CUDA_VISIBLE_DEVICES``'s entries,
    else 0..n-1) for a CUDA run, one per CPU device for a CPU run, each making the inputs and
    reference outputs of the sweep's reference checks ahead; for a CUDA run, each GPU's
    judge too (the witness turns' and outside clock's second harness; not for a CPU run,
    whose judge forks from a zygote on demand, workers.zygote; not with
    ``KOPT_PRESTART_JUDGE=0``). None when the backend cannot be known before Ray, with
    ``KOPT_PRESTART=0``, or when the sandbox could not be tried now (workers.isolation
    ``Unsettled``: each device actor then tries its own)."""
    if os.environ.get("KOPT_PRESTART", "1") == "0":
        return None
    gpus = local_gpu_count()
    if backend == "auto":
        backend = ("cuda" if gpus and "cuda" in sweep.spaces
                   else "cpu" if "cpu" in sweep.spaces else "")
    if backend == "cuda" and gpus:
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        keys = ([v.strip() for v in vis.split(",") if v.strip()][:gpus] if vis is not None
                else [str(i) for i in range(gpus)])
    elif backend == "cpu" and cpu_devices >= 1:
        keys = [str(i) for i in range(cpu_devices)]
    else:
        return None
    if not keys:
        return None
    # the reference checks' inputs and outputs (Driver._check_reference), made ahead
    base = job_base(sweep, sweep.space(backend))
    try:
        return Prestarter(backend, keys, [RunJob("reference", "", d, base).payload()
                                          for d in sweep.space(backend).dims],
                          judges=backend == "cuda" and os.environ.get(JUDGE_ENV, "1") != "0")
    except isolation.Unsettled:  # none ahead: each device actor tries its own sandbox
        return None


def start_ray(sweep: Sweep, cluster: str | None, address: str | None,
               observers: list[ProgressCallback] | None) -> None:
    """Attach to the cluster (``cluster`` / ``address``) or start the embedded Ray, then
    put :func:`terminate` back as the SIGTERM handler (``ray.init`` installs its own).

    Raises:
        Terminated: SIGTERM arrived while Ray started: Ray's own handlers end start-up
            with ``sys.exit`` (15, or 1 after stopping the node they started), which
            would exit 15 with no line; it stops the sweep as any SIGTERM.
    """
    try:
        if cluster or (address and address != "auto"):
            renv, notes = cluster_runtime_env(sweep)
            for o in observers or []:
                for n in notes:
                    o.on_note(n)
            attach(cluster_address(cluster) if cluster else address,
                   f"--cluster {cluster}" if cluster else f"--address {address}", renv)
        else:
            ensure_ray(address)
    except SystemExit:  # only Ray's SIGTERM handlers exit inside ray.init
        received.append(signal.SIGTERM)
        raise Terminated(signal.SIGTERM) from None
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, terminate)


def ray_timeline(path: str | None) -> None:
    """Write Ray's own timeline of this process's Ray job (``ray.timeline``: Chrome tracing
    JSON of every task and actor call, worker start-ups included; open it in
    chrome://tracing or Perfetto) to ``path`` when given (``$KOPT_RAY_TIMELINE``): what the
    run's ``phases`` rows do not show. A failure to write it is a warning, never the
    sweep's."""
    if not path or not ray.is_initialized():
        return
    try:
        ray.timeline(filename=path)
    except Exception as e:  # noqa: BLE001 -- a diagnostic: never fail the sweep for it
        warnings.warn(f"KOPT_RAY_TIMELINE={path}: not written ({e})", stacklevel=1)


def attached() -> bool:
    """Whether this process is attached to Ray already (a caller's, e.g. a test's)."""
    return bool(ray.is_initialized())


def cluster_total(resource: str) -> float:
    """How much of ``resource`` (``"CPU"``, ``"GPU"``) the attached Ray cluster has in all,
    0 where it has none."""
    return float(ray.cluster_resources().get(resource, 0))


def working_dir_travels() -> bool:
    """Whether this driver's runtime environment ships the sweep folder as Ray's
    ``working_dir`` (then paths in jobs are relative to it); False when not attached."""
    if not ray.is_initialized():
        return False
    return bool((ray.get_runtime_context().runtime_env or {}).get("working_dir"))


def on_every_node(fn: Callable[[], Any]) -> list[Any]:
    """``fn()`` run once on every live node of the attached cluster (a zero-CPU task pinned
    to the node), its results in node order."""
    task = ray.remote(num_cpus=0)(fn)
    refs = []
    for node in ray.nodes():
        if node.get("Alive"):
            strat = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node["NodeID"], soft=False)
            refs.append(task.options(scheduling_strategy=strat).remote())
    return ray.get(refs)
