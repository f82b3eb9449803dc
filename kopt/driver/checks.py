"""What is checked before Ray starts: the backend, the store path, a space too large to walk
without a cap, and whether ``--resume RUN_ID`` may resume (the spec's per-part hashes name
what changed)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from kopt.core.catalog import load_catalog
from kopt.core.expand import (
    WALK_LIMIT,
    configs_bound,
)
from kopt.core.spec import Space, Sweep
from kopt.run.cluster import cluster_total
from kopt.run.devices import local_gpu_count
from kopt.run.runner import SweepError
from kopt.store.database import run_record
from kopt.store.files import SCHEMAS, no_run, stored_json
from kopt.util.paths import broken_link


def pick_backend(sweep: Sweep, backend: str) -> str:
    """Resolve ``auto``: CUDA when the cluster has a GPU and the sweep a .cu source, else CPU.

    Raises:
        SweepError: the requested backend has no source or no device.
    """
    gpus = cluster_total("GPU")
    if backend == "auto":
        if gpus and "cuda" in sweep.spaces:
            return "cuda"
        if "cpu" in sweep.spaces:
            return "cpu"
        raise SweepError(
            f"{sweep.spec_path}: no GPU is visible and the sweep has no C++ source for the CPU "
            "backend; run it on a GPU node, or add a `cpu:` block with `kernel: NAME.cpp`")
    if backend == "cuda" and not gpus:
        raise SweepError("--backend cuda: no GPU in the Ray cluster (ray.cluster_resources() "
                         "shows none); use --backend cpu or run on a GPU node")
    sweep.space(backend)  # SpecError when missing
    return backend


def resumable_run(store: Path, run_id: str, sweep: Sweep) -> dict[str, Any]:
    """The latest ``runs`` record of ``run_id``, checked to be a run of ``sweep`` with the
    same spec and sources (what ``--resume`` needs).

    Raises:
        SweepError: no such run in ``store``, a run of another sweep, or the spec changed.
    """
    rec = run_record(store, run_id)
    if not rec:
        raise SweepError(f"--resume {run_id}: {no_run(store, run_id)}")
    if rec["sweep"] != sweep.name:
        raise SweepError(f"--resume {run_id}: that run is of sweep {rec['sweep']!r}, "
                         f"not {sweep.name!r}")
    if rec["spec_hash"] != sweep.spec_hash:
        stored = json.loads(rec["spec_parts"]) if rec.get("spec_parts") else None
        what = (" and ".join(changed_parts(stored, spec_parts(sweep))) if stored
                else "the sweep's spec or sources")  # a run stored before spec_parts
        raise SweepError(f"--resume {run_id}: {what} changed since that run; undo the edit "
                         f"to finish it, or start a new run (`kopt sweep {sweep.root}` "
                         "without --resume)")
    return rec


def spec_parts(sweep: Sweep) -> dict[str, str]:
    """What :attr:`kopt.core.spec.Sweep.spec_hash` covers, part by part (stored with each run as
    ``runs.spec_parts``, so a refused ``--resume`` names what changed): ``"sweep.yaml's
    `FIELD`"`` per top-level field, and each file -- every backend's source, the local
    headers it includes, ref.py -- by its path relative to the sweep folder (absolute when
    outside it); each -> sha256 (16 hex)."""
    root = Path(sweep.root).resolve()
    parts = {f"sweep.yaml's `{k}`": _digest(json.dumps(v, sort_keys=True, default=str).encode())
             for k, v in sweep.raw.items()}
    for sp in sweep.spaces.values():
        parts[_part_name(sp.source, root)] = _digest(sp.source.read_bytes())
        for rel, sha in sp.local_inputs().items():
            parts[_part_name(sp.source.parent / rel, root)] = sha[:16]
    parts[_part_name(sweep.reference, root)] = _digest(sweep.reference.read_bytes())
    return parts


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _part_name(path: Path, root: Path) -> str:
    """``path`` relative to the sweep folder ``root`` (resolved), absolute outside it."""
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path.resolve())


def changed_parts(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The parts of :func:`spec_parts` that differ between ``old`` and ``new``, sorted;
    one only in ``new`` is marked ``(added)``, one only in ``old`` ``(removed)``."""
    return [k + (" (added)" if k not in old else " (removed)" if k not in new else "")
            for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def check_store_path(store: Path) -> None:
    """Refuse a ``--store`` that is not a folder and cannot become one.

    Raises:
        SweepError: ``store`` (or the nearest existing folder above it) is a file, or is
            not writable, or a table's folder (or ``locks``) in it is a file.
    """
    for p in [store, *store.absolute().parents]:  # a link loop passed exists() checks
        bad = broken_link(p)
        if bad:
            raise SweepError(f"--store {store}: {p} is {bad}; pass a folder (a missing one "
                             "is created)")
    if store.exists() and not store.is_dir():
        raise SweepError(f"--store {store}: that is a file, not a store folder; pass a "
                         "folder (a missing one is created)")
    above = next(p for p in [store, *store.absolute().parents] if p.exists())
    if not above.is_dir():
        raise SweepError(f"--store {store}: {above} is a file, so the folder cannot be "
                         "created; pass a path under a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise SweepError(f"--store {store}: {above} is not writable by this user; pass a "
                         "folder you can write to")
    for name in [*SCHEMAS, "locks"]:  # else a sweep measures everything, then fails at the write
        if (store / name).exists() and not (store / name).is_dir():
            raise SweepError(f"--store {store}: {store / name} is a file where the store's "
                             f"{name!r} folder goes; move it out of the store (restore the "
                             "folder from a copy if you have one)")


def check_before_ray(sweep: Sweep, store: Path, backend: str, resume: str | None,
                     local: bool, max_candidates: int | None = None) -> None:
    """What can be checked before Ray starts (which takes seconds): the store path, the
    ``--resume`` run, the backend's source, a space too large to walk without a cap
    (:func:`check_walkable`, with the resumed run's own cap) and, on an embedded local
    instance (``local``), a GPU on this machine for the CUDA backend.

    Raises:
        SweepError: see :func:`check_store_path`, :func:`resumable_run`,
            :func:`check_walkable`; no GPU here.
        SpecError: the sweep has no source for the requested backend.
    """
    check_store_path(store)
    if resume:
        rec = resumable_run(store, resume, sweep)
        backend = rec["backend"] if backend == "auto" else backend
        max_candidates = stored_json(rec.get("options"), "options").get("max_candidates")
    if backend == "cpu" and "cpu" not in sweep.spaces and _hopper_only(sweep):
        raise SweepError(f"{sweep.spec_path}: --backend cpu: this sweep has no C++ source; "
                         f"{_hopper_only(sweep)}")
    if backend != "auto":
        sweep.space(backend)  # SpecError when the sweep has no source for it
    check_walkable(sweep, backend if backend != "auto" or not local else
                   "cuda" if local_gpu_count() and "cuda" in sweep.spaces else "cpu",
                   max_candidates)
    if not local or backend == "cpu" or local_gpu_count():
        return
    if backend == "cuda":
        raise SweepError("--backend cuda: this machine has no GPU (NVML sees none"
                         + (f" with CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}"
                            if "CUDA_VISIBLE_DEVICES" in os.environ else "")
                         + "); use --backend cpu, or --address/--cluster for a GPU cluster")
    if "cpu" not in sweep.spaces:
        raise SweepError(f"{sweep.spec_path}: this machine has no GPU and the sweep has no "
                         "C++ source for the CPU backend; " + (
                             _hopper_only(sweep) or "run it on a GPU node, or add a `cpu:` "
                             "block with `kernel: NAME.cpp`"))


def _hopper_only(sweep: Sweep) -> str:
    """The fix for running a sweep whose CUDA candidates all need the sm_90a target (sweep.yaml
    ``needs_sm90a``: wgmma, TMA) anywhere else; "" for any other sweep."""
    cuda = sweep.spaces.get("cuda")
    if cuda is None or not cuda.needs_sm90a:
        return ""
    return (f"{cuda.source.name} needs the sm_90a target (sweep.yaml: `needs_sm90a: true`): "
            "run it on an sm_90 GPU node (H100/H200), e.g. --address or --cluster")


def check_walkable(sweep: Sweep, backend: str, max_candidates: int | None) -> None:
    """Refuse a run with no ``--max-candidates`` of a space of more than
    kopt.core.expand.WALK_LIMIT launch configs (kopt.core.expand.configs_bound: counted, not
    walked):
    every strategy would walk it (random takes a quarter of it, halving screens all of it),
    for hours. With a cap, such a space is sampled by index (kopt.core.expand.Expansion.sample).
    ``backend`` ``auto``: every space of the sweep is checked.

    Raises:
        SweepError: one line naming sweep.yaml's ``params`` field and the fix.
    """
    if max_candidates is not None:
        return
    catalog = load_catalog()
    for name in [backend] if backend in sweep.spaces else sorted(sweep.spaces):
        sp = sweep.spaces[name]
        n = configs_bound(sp, catalog)
        if n > WALK_LIMIT:
            raise SweepError(f"{sp.spec_path}: {sp.prefix}params: {n:,} launch configs (the "
                             "methods' params included, before restrictions), too many to "
                             "walk; give --max-candidates N to measure a random sample of N "
                             f"(with any --strategy), or narrow {sp.prefix}params to at most "
                             f"{WALK_LIMIT:,}")


def classes_for(space: Space, classes: dict[str, dict]) -> tuple[dict[str, dict], list[str]]:
    """The device classes (class -> its first device's info, with ``sm``: 90 for an H100/
    H200, 87 for a Jetson Orin) that can run ``space``, and a note per class left out: a
    space whose every candidate needs the ``sm_90a`` target (sweep.yaml ``needs_sm90a``:
    wgmma, setmaxnreg) runs on the sm_90 classes of a mixed cluster (an Orin beside an
    H200) and leaves the others idle rather than stopping the run.

    Raises:
        SweepError: no class can run it (one line naming the sweep and the fix).
    """
    if not space.needs_sm90a:
        return classes, []
    kept = {dc: info for dc, info in classes.items() if info.get("sm") == 90}
    left = [f"{dc} (sm_{classes[dc].get('sm')})" for dc in classes if dc not in kept]
    if not kept:
        raise SweepError(f"{space.source.name} needs the sm_90a target (sweep.yaml: "
                         f"`needs_sm90a: true`), which no device here can run "
                         f"({', '.join(left)}): run the sweep on an sm_90 device (H100/H200)")
    return kept, [f"{space.source.name} needs the sm_90a target (sweep.yaml: `needs_sm90a: "
                  f"true`): device class {d} sits this sweep out" for d in left]


def realtime_notes(space: Space, infos: list[dict[str, Any]]) -> list[str]:
    """One note per CPU device that cannot honour sweep.yaml's ``timing.realtime`` (its
    info's ``realtime`` is the sandbox's reason, workers.priority); [] when the setting is
    off, the backend is CUDA (whose calls the GPU's clock times: the setting is the CPU
    backend's, as docs/spec.md says) or every device takes it."""
    if not space.timing.realtime or space.backend != "cpu":
        return []
    return [f"sweep.yaml timing.realtime: {i.get('device_class', 'a device')} on "
            f"{i.get('node', 'its node')} times at normal priority: {i['realtime']}"
            for i in infos if i.get("realtime") not in (None, "available")]
