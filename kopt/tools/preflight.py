"""``kopt preflight``: build the baseline, run it once against the reference, report. No store."""

from __future__ import annotations

import platform
import tempfile
from pathlib import Path
from typing import Any

from kopt.core.catalog import load_catalog
from kopt.core.expand import iter_candidates, space_digest
from kopt.core.spec import Sweep, launch_geometry
from kopt.run.builder import build_id, job_base
from kopt.util.words import counted
from workers import build as wbuild
from workers.sandbox import Sandbox
from workers.status import Status


class PreflightError(RuntimeError):
    """The baseline could not be checked (no device for the backend, harness failure)."""


def _local_backend(sweep: Sweep, backend: str, arch: int | None) -> tuple[str, int | None, bool]:
    """(backend, SM arch, whether the baseline can run here)."""
    import torch

    has_gpu = torch.cuda.is_available()
    if backend == "auto":
        backend = "cuda" if has_gpu and "cuda" in sweep.spaces else "cpu"
        if backend == "cpu" and "cpu" not in sweep.spaces:
            backend = "cuda"  # no GPU and no C++ source: compile-check the .cu
    if backend == "cuda":
        sweep.space("cuda")
        if not has_gpu:
            return backend, arch or 90, False
        major, minor = torch.cuda.get_device_capability(0)
        return backend, arch or major * 10 + minor, True
    sweep.space("cpu")
    return backend, None, True


def run_preflight(sweep: Sweep, backend: str = "auto", arch: int | None = None
                  ) -> dict[str, Any]:
    """Build and run the baseline on the first dims once (check + timing). With the cuda
    backend and no GPU here, the baseline is only built (for ``arch``, default sm_90).

    Returns:
        A dict: backend, device, signature, command, compile_s, registers,
        smem_bytes, spill_bytes, dims, status, error, max_abs_err, median_ms,
        iqr_ms, n_samples.

    Raises:
        PreflightError: no device for the backend, the harness cannot start, or ref.py's
            inputs()/reference() fail (checked before the baseline is built).
        SpecError: the spec is inconsistent (e.g. the baseline breaks a restriction).
    """
    backend, sm, runnable = _local_backend(sweep, backend, arch)
    space = sweep.space(backend)
    digest = space_digest(space)
    cands = iter_candidates(space, load_catalog(), sm, source_digest=digest)
    base = next(cands)  # the baseline comes first; the rest are only counted
    if cands.huge:  # too many to walk: counted before restrictions, not enumerated
        n_cands = f"at most {cands.configs:,} (launch configs before restrictions)"
    else:
        n_cands = str(1 + sum(1 for _ in cands))
    bid = build_id(space, base, digest, wbuild.compiler_identity(space.toolchain),
                   platform.machine())
    job = wbuild.BuildJob(bid, backend, space.source_text(), space.source.name,
                          str(space.source.parent), base.defines, space.flags, base.target,
                          space.include_dirs, mode=space.mode, launch=space.launch_spec())
    sb = _start_checked(sweep, space, backend) if runnable else None
    try:
        with tempfile.TemporaryDirectory(prefix="kopt-preflight-") as tmp:
            res, data = wbuild.build(job, cache=Path(tmp))
            out: dict[str, Any] = {"backend": backend, "device": "-",
                                   "signature": space.signature.describe(),
                                   "command": res.command, "compile_s": res.compile_s,
                                   "registers": res.registers, "smem_bytes": res.smem_bytes,
                                   "spill_bytes": res.spill_bytes, "dims": space.dims[0],
                                   "candidates": f"{n_cands} (x "
                                   f"{counted(len(space.dims), 'problem size')})"}
            if space.launch is not None:  # kernel mode: the baseline's launch at the first size
                out["launch"] = _launch_line(sweep, space, base.defines)
            if not res.ok:
                return {**out, "status": "compile_error", "error": res.error}
            if sb is None:
                return {**out, "status": "built", "device": f"none (built for sm_{sm})",
                        "note": "no GPU here: built and ptxas-checked only, not run"}
            art = wbuild.ensure_artifact(bid, data, cache=Path(tmp))  # type: ignore[arg-type]
            outcome = sb.run({**job_base(sweep, space), "artifact": str(art), "build_id": bid,
                              "job_key": "preflight", "dims": space.dims[0]},
                             space.timing.timeout_s)
            out["device"] = sb.info.get("name", "-")
    finally:
        if sb is not None:
            sb.close()
    return {**out, **{k: outcome.get(k) for k in ("status", "error", "max_abs_err", "median_ms",
                                                   "iqr_ms", "n_samples")}}


def _launch_line(sweep: Sweep, space: Any, defines: dict[str, Any]) -> str:
    """Kernel mode: the baseline's launch at the first problem size, in words."""
    try:
        g = launch_geometry(space.launch, {**sweep.scalars, **space.dims[0], **defines})
    except ValueError as e:
        return f"not evaluable: {e}"
    return (f"grid {g['grid']} x block {g['block']}, dynamic shared memory {g['smem_bytes']} B "
            "(smem_bytes above: static)")


def _start_checked(sweep: Sweep, space: Any, backend: str) -> Sandbox:
    """A started harness that has run ref.py's inputs() and reference() at the first
    problem size (the one preflight times; the harness keeps what they made), before
    anything is built.

    Raises:
        PreflightError: the harness did not start, or ref.py failed (named, with why).
    """
    sb = Sandbox(backend, {"OMP_NUM_THREADS": "1"} if backend == "cpu" else None)
    try:
        sb.start()
    except RuntimeError as e:
        sb.close()
        raise PreflightError(f"the {backend} harness did not start: {e}") from None
    d = space.dims[0]
    try:  # ref.py gets the candidate's budget here: a reference that never returns is named
        res = sb.run({**job_base(sweep, space), "build_id": "", "job_key": "reference",
                      "dims": d, "prepare_only": True}, space.timing.timeout_s,
                     prepare_timeout_s=space.timing.timeout_s)
    except BaseException:  # Ctrl-C: the harness goes too
        sb.close()
        raise
    if res.get("status") != Status.OK:
        sb.close()
        raise PreflightError(f"{sweep.reference}: inputs()/reference() failed for dims {d} "
                             f"({res.get('status')}): {res.get('error')}; nothing was built")
    return sb
