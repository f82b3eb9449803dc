"""Expansion: method triples x launch configs x dims -> candidates with deterministic ids.

A triple takes at most one realized method per axis, scanned in the
catalog's strict priority order; "none" keeps the baseline code on that axis.
Methods are admitted per axis unless above the device's SM arch
(``arch_incompatible``) or already selected in an earlier iteration
(``already_selected``); triples with conflicting methods, or lacking a
required one, are dropped. Each triple's launch params (the sweep's params
plus its methods' params) are a cartesian product filtered by restrictions,
per problem size. Candidates realizing the same defines collapse into one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kopt.catalog import AXES, Catalog
from kopt.spec import Scalar, Space, SpecError, launch_geometry
from workers.expr import ExprError, parse

Triple = tuple[str | None, str | None, str | None]
NONE_TRIPLE: Triple = (None, None, None)


def stable_hash(obj: Any, n: int = 16) -> str:
    """First ``n`` hex digits of sha256 over canonical JSON of ``obj``."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def space_digest(space: Space) -> str:
    """Digest of what a build of ``space`` reads from the sweep: the source text and, when
    it includes local files, their paths and sha256 (Space.local_inputs). It goes into
    every candidate id and build id, so an edited header is a new build."""
    text, inputs = space.source_text(), space.local_inputs()
    return stable_hash({"source": text, "includes": inputs}) if inputs else stable_hash(text)


@dataclass
class Context:
    """What earlier iterations decided, for the next expansion (see kopt.loop).

    Attributes:
        selected: methods kept from earlier winners; applied to every candidate.
        ineffective: method -> the bottleneck axis under which all its candidates lost;
            admissible again once the bottleneck differs.
        bottleneck: the current bottleneck axis (None without NCU evidence).
        triggered: method -> trigger verdict from the current evidence; None (the
            whole map) when there is no evidence: every method counts as triggered.
        baseline_params: the baseline's params (the last winner's); default: the spec's.
    """

    selected: list[str] = field(default_factory=list)
    ineffective: dict[str, str | None] = field(default_factory=dict)
    bottleneck: str | None = None
    triggered: dict[str, bool | None] | None = None
    baseline_params: dict[str, Scalar] | None = None


@dataclass(frozen=True)
class AxisScan:
    """One method's fate in an axis scan: admitted, or skipped with a reason."""

    method: str
    axis: str
    priority: int
    admitted: bool
    reason: str = ""


@dataclass
class Candidate:
    """One point of the space: a triple and a launch config, realized as defines.

    Attributes:
        candidate_id: 16-hex id over (backend, source digest, defines): equal for
            identical builds of one source.
        triple: (compute, memory, latency) method ids, None for "none".
        params: launch params incl. the triple's method params.
        defines: every ``-D`` the build gets (params and method defines).
        dims_ok: indices into the space's dims for which the restrictions hold.
        is_baseline: the (none, none, none) triple with the baseline params.
        target: the compile target: ``"sm_90"``, ``"sm_90a"``, or ``"host"``.
    """

    candidate_id: str
    triple: Triple
    params: dict[str, Scalar]
    defines: dict[str, Scalar]
    dims_ok: list[int]
    is_baseline: bool = False
    target: str = "host"
    aliases: list[Triple] = field(default_factory=list)


def scan_axes(space: Space, catalog: Catalog, sm: int | None,
              selected: Iterable[str] = (), ctx: Context | None = None
              ) -> dict[str, list[AxisScan]]:
    """Per axis, the realized methods in priority order with admitted/skipped and why.

    Reasons, checked in this order: ``already_selected``, ``arch_incompatible``,
    ``conflict`` (with a selected method), ``ineffective`` (failed before under
    the same bottleneck), ``no_trigger`` (the evidence says no).

    Args:
        space: the backend space (its ``methods`` are what the kernel realizes).
        catalog: the method catalog.
        sm: the target device's SM arch as an int (90 for sm_90); None for CPU devices.
        selected: methods already selected in earlier iterations (added to ctx.selected).
        ctx: the state of earlier iterations.
    """
    ctx = ctx or Context()
    sel = set(selected) | set(ctx.selected)
    out: dict[str, list[AxisScan]] = {}
    for axis in AXES:
        rows = []
        for m in catalog.axis(axis):
            if m.id not in space.methods:
                continue
            reason = ""
            if m.id in sel:
                reason = "already_selected"
            elif not m.arch_ok(sm) or (m.needs_sm90a and sm is not None and sm < 90):
                reason = "arch_incompatible"
            elif any(catalog.conflict(m.id, s) for s in sel):
                reason = "conflict"
            elif m.id in ctx.ineffective and ctx.ineffective[m.id] == ctx.bottleneck:
                reason = "ineffective"
            elif ctx.triggered is not None and ctx.triggered.get(m.id) is False:
                reason = "no_trigger"
            rows.append(AxisScan(m.id, axis, m.priority, not reason, reason))
        out[axis] = rows
    return out


def admissible_triples(space: Space, catalog: Catalog, sm: int | None,
                       selected: Iterable[str] = (), ctx: Context | None = None
                       ) -> list[Triple]:
    """Every admissible triple, the (none, none, none) baseline first, then priority order.

    A triple is dropped when two of its methods conflict, or when a method's
    ``requires`` is neither in the triple nor selected.
    """
    ctx = ctx or Context()
    sel = set(selected) | set(ctx.selected)
    scans = scan_axes(space, catalog, sm, sel, ctx)
    options = [[None] + [s.method for s in scans[a] if s.admitted] for a in AXES]
    triples: list[Triple] = []
    for t in itertools.product(*options):
        chosen = [m for m in t if m]
        if any(catalog.conflict(a, b) for a, b in itertools.combinations(chosen, 2)):
            continue
        have = set(chosen) | sel
        if any(not catalog.methods[m].requires <= have for m in chosen):
            continue
        triples.append(t)  # type: ignore[arg-type]
    return triples


def _target(methods: tuple[str | None, ...], catalog: Catalog, backend: str,
            sm: int | None) -> str:
    if backend == "cpu":
        return "host"
    needs_a = any(m and catalog.methods[m].needs_sm90a for m in methods)
    return f"sm_{sm}a" if needs_a else f"sm_{sm}"


def expand(space: Space, catalog: Catalog, sm: int | None, selected: Iterable[str] = (),
           source_digest: str | None = None, ctx: Context | None = None) -> list[Candidate]:
    """All candidates of ``space`` for a device of SM arch ``sm`` (None: CPU), baseline first.

    Args:
        space: the backend space.
        catalog: the method catalog.
        sm: the target SM arch as an int, or None for CPU devices.
        selected: methods selected in earlier iterations (skipped as already_selected,
            and applied to every candidate).
        source_digest: the source's digest (default: :func:`space_digest`, from the files).
        ctx: the state of earlier iterations (selected, ineffective, evidence, baseline).

    Raises:
        SpecError: the baseline violates the restrictions for some problem size.
    """
    digest = source_digest or space_digest(space)
    # names were checked against params, method params/defines and dims when the spec loaded
    restrictions = [parse(text) for text in space.restrictions]

    ctx = ctx or Context()
    sel = list(dict.fromkeys([*ctx.selected, *selected]))
    base_params = ctx.baseline_params or space.baseline
    by_id: dict[str, Candidate] = {}
    baseline_key = None
    for triple in admissible_triples(space, catalog, sm, sel, ctx):
        reals = [space.methods[m] for m in sel] + [space.methods[m] for m in triple if m]
        pspace: dict[str, list[Scalar]] = dict(space.params)
        mdefines: dict[str, Scalar] = {}
        for r in reals:
            pspace.update(r.params)
            mdefines.update(r.defines)
        names = list(pspace)
        for values in itertools.product(*(pspace[n] for n in names)):
            params = dict(zip(names, values))
            dims_ok = _dims_ok(restrictions, params, mdefines, space.dims)
            if space.launch is not None:  # kernel mode: the launch must fit the device
                dims_ok = [i for i in dims_ok
                           if fits_device(space.launch, {**space.dims[i], **mdefines, **params},
                                          sm)]
            is_base = triple == NONE_TRIPLE and params == base_params
            if is_base and len(dims_ok) != len(space.dims):
                bad = [space.dims[i] for i in range(len(space.dims)) if i not in dims_ok]
                raise SpecError(f"baseline params {params} violate the restrictions for dims "
                                f"{bad}; change `baseline` or the restrictions")
            if not dims_ok:
                continue
            defines = {**params, **mdefines}
            cid = stable_hash({"backend": space.backend, "source": digest, "defines": defines})
            if cid in by_id:
                by_id[cid].aliases.append(triple)
                by_id[cid].is_baseline |= is_base
                continue
            by_id[cid] = Candidate(cid, triple, params, defines, dims_ok, is_base,
                                   _target((*triple, *sel), catalog, space.backend, sm))
            if is_base:
                baseline_key = cid
    cands = list(by_id.values())
    if baseline_key is None:  # the baseline params were filtered out as a duplicate? cannot be
        raise SpecError("the baseline (no methods, baseline params) is not in the space")
    cands.sort(key=lambda c: (not c.is_baseline,))
    return cands


# Per-block limits of CUDA devices (CUDA C++ Programming Guide, "Technical Specifications
# per Compute Capability"): 1024 threads, block.z <= 64, grid.y/z <= 65535, and the
# dynamic shared memory a block may opt into, in bytes, per SM arch.
MAX_THREADS_PER_BLOCK = 1024
MAX_SMEM_OPTIN = {70: 98304, 72: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912,
                  89: 101376, 90: 232448, 100: 232448, 103: 232448, 120: 101376}


def fits_device(launch: Any, env: dict[str, Any], sm: int | None) -> bool:
    """Whether a kernel-mode candidate's launch geometry (kopt.spec.launch_geometry with
    ``env``) fits a device of SM arch ``sm``: threads per block, block and grid extents, and
    dynamic shared memory (bytes) against MAX_SMEM_OPTIN (unknown arch: not checked). A
    geometry that cannot be evaluated here (it names a scalar) counts as fitting: the run
    reports it."""
    try:
        g = launch_geometry(launch, env)
    except ValueError:
        return True
    bx, by, bz = g["block"]
    if bx * by * bz > MAX_THREADS_PER_BLOCK or bz > 64:
        return False
    if g["grid"][0] > 2**31 - 1 or g["grid"][1] > 65535 or g["grid"][2] > 65535:
        return False
    return g["smem_bytes"] <= MAX_SMEM_OPTIN.get(sm or 0, g["smem_bytes"])


def _dims_ok(restrictions: Sequence[Any], params: dict[str, Scalar],
             mdefines: dict[str, Scalar], dims: list[dict[str, int]]) -> list[int]:
    ok = []
    for i, d in enumerate(dims):
        env = {**d, **mdefines, **params}
        good = True
        for r in restrictions:
            if not r.names <= env.keys():
                continue  # names a param this candidate does not have
            try:
                if not r(env):
                    good = False
                    break
            except ZeroDivisionError:
                good = False
                break
            except ExprError as e:
                raise SpecError(f"restriction {r.text!r} cannot be evaluated for params "
                                f"{params} at dims {d}: {e}; rewrite it with smaller operands"
                                ) from None
        if good:
            ok.append(i)
    return ok


def cap(cands: list[Candidate], max_candidates: int | None, seed: int | None = None
        ) -> list[Candidate]:
    """Keep at most ``max_candidates``: the baseline plus a deterministic sample (by id order,
    or by a hash of ``seed`` and the id when a seed is given).

    Candidate ids are sha256 digests, so the first N by id are a uniform,
    reproducible sample of the space; another seed draws another sample.

    Raises:
        ValueError: ``max_candidates`` < 1.
    """
    if max_candidates is None or len(cands) <= max_candidates:
        return cands
    if max_candidates < 1:
        raise ValueError("--max-candidates must be >= 1")
    base = [c for c in cands if c.is_baseline]
    key = ((lambda c: c.candidate_id) if seed is None
           else (lambda c: stable_hash({"seed": seed, "id": c.candidate_id})))
    rest = sorted((c for c in cands if not c.is_baseline), key=key)
    return base + rest[: max_candidates - len(base)]
