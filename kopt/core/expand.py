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
import heapq
import itertools
import json
import math
import operator
import random
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kopt.core.catalog import AXES, Catalog
from kopt.core.restrictions import all_of
from kopt.core.spec import Scalar, Space, SpecError, launch_geometry
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
    """What earlier iterations decided, for the next expansion (see kopt.loop.state).

    Attributes:
        selected: methods kept from earlier winners; applied to every candidate.
        ineffective: method -> the bottleneck axis under which all its candidates lost;
            admissible again once the bottleneck differs.
        bottleneck: the current bottleneck axis (None without NCU evidence).
        triggered: method -> trigger verdict from the current evidence; None (the
            whole map) when there is no evidence: every method counts as triggered.
        baseline_params: the baseline's params (the last winner's); default: the spec's.
        best_id: the current best's candidate id (the next baseline), which stands for the
            bottleneck where no profiler gave one (:func:`judged_under`).
    """

    selected: list[str] = field(default_factory=list)
    ineffective: dict[str, str | None] = field(default_factory=dict)
    bottleneck: str | None = None
    triggered: dict[str, bool | None] | None = None
    baseline_params: dict[str, Scalar] | None = None
    best_id: str | None = None

    def judged_now(self) -> str | None:
        """What an ineffective mark is compared with: :func:`judged_under` of now."""
        return judged_under(self.bottleneck, self.best_id)


def judged_under(bottleneck: str | None, best_id: str | None) -> str | None:
    """The condition a method was found ineffective under: the bottleneck axis; on a device
    with no profiler (no bottleneck), the best it was tried on (``unprofiled:ID``), so that a
    new best there counts as a change, as a new bottleneck does where NCU runs (the
    catalog's rule: an ineffective method is admissible again once the bottleneck changes)."""
    if bottleneck is not None or best_id is None:
        return bottleneck
    return f"unprofiled:{best_id}"


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

    Reasons, checked in this order: ``already_selected``, ``arch_incompatible`` (the
    catalog's arch gate, or the realization's ``needs_sm90a`` off sm_90),
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
            elif not m.arch_ok(sm) or (space.methods[m.id].needs_sm90a and sm != 90):
                reason = "arch_incompatible"
            elif any(catalog.conflict(m.id, s) for s in sel):
                reason = "conflict"
            elif m.id in ctx.ineffective and ctx.ineffective[m.id] == ctx.judged_now():
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


def _target(methods: tuple[str | None, ...], catalog: Catalog, space: Space,
            sm: int | None) -> str:
    if space.backend == "cpu":
        return "host"
    needs_a = space.needs_sm90a or any(
        m and (catalog.methods[m].needs_sm90a
               or (m in space.methods and space.methods[m].needs_sm90a)) for m in methods)
    return f"sm_{sm}a" if needs_a else f"sm_{sm}"


class _Plan:
    """One admissible triple's share of the space, prepared once so that each launch config
    costs a product step, the restrictions that can apply and one sha256 (see
    iter_candidates)."""

    def __init__(self, triple: Triple, space: Space, catalog: Catalog, sm: int | None,
                 sel: list[str], restrictions: list[Any]):
        self.triple = triple
        reals = [space.methods[m] for m in sel] + [space.methods[m] for m in triple if m]
        pspace: dict[str, list[Scalar]] = dict(space.params)
        self.mdefines: dict[str, Scalar] = {}
        for r in reals:
            pspace.update(r.params)
            self.mdefines.update(r.defines)
        self.names = list(pspace)
        self.values = [pspace[n] for n in self.names]
        self.size = math.prod(len(v) for v in self.values)  # launch configs, unrestricted
        # a method define named like a param: several configs can realize one build
        self.override = bool(self.mdefines.keys() & pspace.keys())
        self.target = _target((*triple, *sel), catalog, space, sm)
        # candidate ids: sha256 over json.dumps({"backend", "defines", "source"},
        # sort_keys=True), assembled from each define's encoded "key: value" piece
        self.pieces = [[_piece(n, self.mdefines[n] if n in self.mdefines else v) for v in vals]
                       for n, vals in zip(self.names, self.values)]
        mnames = [k for k in self.mdefines if k not in pspace]
        self.mpieces = tuple(_piece(k, self.mdefines[k]) for k in mnames)
        keys = self.names + mnames
        self.keys = sorted(keys)
        at = {k: i for i, k in enumerate(keys)}
        self.order = [at[k] for k in self.keys]
        # the set of builds this triple can realize, per define (sorted): its "box"
        self.box = [set(self.pieces[at[k]]) if at[k] < len(self.names)
                    else {self.mpieces[at[k] - len(self.names)]} for k in self.keys]
        self.earlier: list[_Plan] = []  # plans whose builds may equal this plan's
        self.later: list[_Plan] = []
        # per dims: (dims + method defines, the restrictions that apply, all of them at once)
        self.checks: list[tuple[dict[str, Any], list[Any], Callable[[Any], bool]]] = []
        for d in space.dims:
            env = {**d, **self.mdefines}
            names = env.keys() | set(self.names)
            rs = [r for r in restrictions if r.names <= names]
            self.checks.append((env, rs, all_of(rs, self.names, env)))

    def overlaps(self, other: _Plan) -> bool:
        """Whether some build of this plan is also one of ``other``'s."""
        return self.keys == other.keys and all(a & b for a, b in zip(self.box, other.box))

    def holds(self, spieces: list[str]) -> bool:
        """Whether the build with these sorted define pieces is one of this plan's."""
        return all(p in b for p, b in zip(spieces, self.box))

    def decode(self, index: int) -> list[int]:
        """The value indices of launch config number ``index`` (0 <= index < size) in
        ``itertools.product(*values)`` order: mixed-radix digits, the last param fastest."""
        digits = []
        for vals in reversed(self.values):
            index, d = divmod(index, len(vals))
            digits.append(d)
        return digits[::-1]


def _piece(name: str, value: Any) -> str:
    return f"{json.dumps(name)}: {json.dumps(value, default=str)}"


def _dims_ok(plan: _Plan, params: dict[str, Scalar], space: Space, sm: int | None
             ) -> list[int]:
    """Indices of the dims at which ``params`` (with the plan's method defines) pass every
    restriction that names only what the candidate has (and, in kernel mode, fit the
    device). A restriction dividing by zero excludes the candidate.

    Raises:
        SpecError: a restriction cannot be evaluated (an operand out of bounds).
    """
    ok = []
    values = tuple(params.values())
    for i, (base, rs, holds) in enumerate(plan.checks):
        if rs:
            try:
                good = holds(values)
            except (ZeroDivisionError, ExprError):
                good = _passes(holds, rs, values, {**base, **params}, params, space.dims[i])
            if not good:
                continue
        if space.launch is not None and not fits_device(
                space.launch, {**space.dims[i], **plan.mdefines, **params}, sm):
            continue
        ok.append(i)
    return ok


def _passes(holds: Callable[[Any], bool], restrictions: list[Any], values: tuple[Any, ...],
            env: dict[str, Any], params: dict[str, Scalar], dims: dict[str, int]) -> bool:
    try:
        return holds(values)
    except (ZeroDivisionError, ExprError):
        pass  # which restriction, and why: evaluated one by one below
    for r in restrictions:
        try:
            if not r(env):
                return False
        except ZeroDivisionError:
            return False
        except ExprError as e:
            raise SpecError(f"restriction {r.text!r} cannot be evaluated for params {params} "
                            f"at dims {dims}: {e}; rewrite it with smaller operands") from None
    return True


# Launch configs (summed over the triples, before restrictions) up to which a capped sample
# walks the whole space (the sample by id kopt always drew; about 10 s per million configs
# on one core); above it, the sample is drawn by index (Expansion.sample).
WALK_LIMIT = 2_000_000
SAMPLE_DRAWS = 200_000  # random configs a sample may draw at least, before it gives up ...
DRAWS_PER_CANDIDATE = 1_000  # ... or this many per candidate asked for, whichever is more


@dataclass(frozen=True)
class SampleInfo:
    """How a sample of a space too large to walk was drawn (Expansion.sample).

    Attributes:
        configs: the space's launch configs over every triple, before restrictions.
        draws: random configs drawn.
        passed: drawn configs that passed the restrictions as a new candidate (not the
            baseline, not drawn before, not another triple's equal build).
        wanted: the candidates asked for (the baseline included).
    """

    configs: int
    draws: int
    passed: int
    wanted: int


class _Setup:
    """What walking or sampling one space needs, prepared once: the triples' plans, the
    candidate-id pieces and the baseline's place (see :class:`Expansion`)."""

    def __init__(self, space: Space, catalog: Catalog, sm: int | None, selected: Iterable[str],
                 source_digest: str | None, ctx: Context | None):
        if space.needs_sm90a and sm is not None and sm != 90:
            raise SpecError(f"{space.source.name} needs the sm_90a target (sweep.yaml: "
                            f"`needs_sm90a: true`), which an sm_{sm} device cannot run: run the "
                            "sweep on an sm_90 device (H100/H200)")
        self.space, self.sm = space, sm
        digest = source_digest or space_digest(space)
        # names were checked against params, method params/defines and dims at load
        restrictions = [parse(space.resolve(text)) for text in space.restrictions]
        ctx = ctx or Context()
        sel = list(dict.fromkeys([*ctx.selected, *selected]))
        self.base_params = ctx.baseline_params or space.baseline
        self.plans = [_Plan(t, space, catalog, sm, sel, restrictions)
                      for t in admissible_triples(space, catalog, sm, sel, ctx)]
        self.head = f'{{"backend": {json.dumps(space.backend)}, "defines": {{'
        self.tail = f'}}, "source": {json.dumps(digest)}}}'
        self.override = any(p.override for p in self.plans)
        if self.override:
            return
        for i, p in enumerate(self.plans):
            for q in self.plans[i + 1:]:
                if p.overlaps(q):
                    p.later.append(q)
                    q.earlier.append(p)

    def cid(self, plan: _Plan, pcs: tuple[str, ...]) -> tuple[str, list[str]]:
        """The candidate id of ``plan``'s build with launch-param pieces ``pcs``, and its
        sorted define pieces."""
        allp = pcs + plan.mpieces
        spcs = [allp[i] for i in plan.order]
        text = self.head + ", ".join(spcs) + self.tail
        return hashlib.sha256(text.encode()).hexdigest()[:16], spcs

    def baseline(self) -> tuple[Candidate, list[int]]:
        """The baseline candidate and its value indices in the (none, none, none) plan.

        Raises:
            SpecError: the baseline is not in the space, or breaks a restriction.
        """
        p0 = self.plans[0]  # (none, none, none): admissible_triples puts it first
        base = self.base_params
        at = [next((j for j, v in enumerate(vals) if v == base.get(n, _MISSING)), None)
              for n, vals in zip(p0.names, p0.values)]
        if set(base) != set(p0.names) or None in at:
            raise SpecError("the baseline (no methods, baseline params) is not in the space")
        idx = [int(j) for j in at]  # type: ignore[arg-type]
        params = {n: vals[j] for n, vals, j in zip(p0.names, p0.values, idx)}
        dims_ok = _dims_ok(p0, params, self.space, self.sm)
        _check_baseline(params, dims_ok, self.space)
        bid, spcs = self.cid(p0, tuple(pcs[j] for pcs, j in zip(p0.pieces, idx)))
        return Candidate(bid, p0.triple, params, {**params, **p0.mdefines}, dims_ok, True,
                         p0.target, self.aliases(p0, spcs)), idx

    def aliases(self, plan: _Plan, spcs: list[str]) -> list[Triple]:
        """The triples besides ``plan``'s that realize the build ``spcs`` as well."""
        others = plan.later if not self.override else [q for q in self.plans if q is not plan]
        return [q.triple for q in others if q.holds(spcs)]

    def candidate_at(self, plan: _Plan, idx: list[int]) -> Candidate | None:
        """The candidate of ``plan``'s launch config with value indices ``idx``, as the walk
        yields it; None where the restrictions (or the device) exclude it at every dims, or
        an earlier triple yields its build."""
        params = {n: vals[j] for n, vals, j in zip(plan.names, plan.values, idx)}
        dims_ok = _dims_ok(plan, params, self.space, self.sm)
        if not dims_ok:
            return None
        c, spcs = self.cid(plan, tuple(pcs[j] for pcs, j in zip(plan.pieces, idx)))
        if plan.earlier and any(q.holds(spcs) for q in plan.earlier):
            return None  # an earlier triple's build: it is drawn as that triple's
        return Candidate(c, plan.triple, params, {**params, **plan.mdefines}, dims_ok, False,
                         plan.target, self.aliases(plan, spcs))


def _walk(setup: _Setup) -> Iterator[Candidate]:
    """Every candidate of the setup's space, baseline first (see :func:`iter_candidates`)."""
    space, sm, plans = setup.space, setup.sm, setup.plans
    if setup.override:
        yield from _expand_all(plans, space, sm, setup.base_params, setup.cid)
        return
    n_dims = len(space.dims)
    p0 = plans[0]
    base, base_at = setup.baseline()
    base_vals = tuple(vals[j] for vals, j in zip(p0.values, base_at))
    yield base
    every = list(range(n_dims))
    sha256 = hashlib.sha256
    head, tail = setup.head, setup.tail
    for plan in plans:
        plain = space.launch is None and not any(rs for _, rs, _ in plan.checks)
        # one problem size in solve mode (the common case): the check inlined
        one = plan.checks[0] if space.launch is None and n_dims == 1 else None
        names, mdefines, mpieces, order = plan.names, plan.mdefines, plan.mpieces, plan.order
        identity = not mpieces and order == sorted(order)
        for values, pcs in zip(itertools.product(*plan.values),
                               itertools.product(*plan.pieces)):
            if plan is p0 and values == base_vals:
                continue
            if plain:
                dims_ok = every[:]
            elif one is not None:
                try:
                    if not one[2](values):
                        continue
                except (ZeroDivisionError, ExprError):
                    params = dict(zip(names, values))
                    if not _passes(one[2], one[1], values, {**one[0], **params}, params,
                                   space.dims[0]):
                        continue
                dims_ok = [0]
            else:
                params = dict(zip(names, values))
                dims_ok = _dims_ok(plan, params, space, sm)
                if not dims_ok:
                    continue
            spcs = pcs if identity else [(pcs + mpieces)[i] for i in order]
            c = sha256(f"{head}{', '.join(spcs)}{tail}".encode()).hexdigest()[:16]
            if plan.earlier and any(q.holds(spcs) for q in plan.earlier):
                continue  # an earlier triple yielded this build (its aliases name this one)
            params = dict(zip(names, values))
            yield Candidate(c, plan.triple, params, {**params, **mdefines}, dims_ok, False,
                            plan.target, [q.triple for q in plan.later if q.holds(spcs)])


class Expansion:
    """The candidates of a space: an iterator over them, lazily, baseline first (what
    :func:`iter_candidates` returns), that also knows the space's size without walking it
    and draws a sample of a space too large to walk.

    Attributes:
        n: candidates yielded so far (the whole space's count once it is exhausted).
        sampled: how :meth:`sample` drew its sample; None while none was drawn.
    """

    def __init__(self, space: Space, catalog: Catalog, sm: int | None,
                 selected: Iterable[str] = (), source_digest: str | None = None,
                 ctx: Context | None = None):
        self._args = (space, catalog, sm, tuple(selected), source_digest, ctx)
        self._setup: _Setup | None = None
        self._gen: Iterator[Candidate] | None = None
        self.n = 0
        self.sampled: SampleInfo | None = None

    def setup(self) -> _Setup:
        """The prepared space (computed on first use: errors surface then).

        Raises:
            SpecError: as :func:`expand`.
        """
        if self._setup is None:
            self._setup = _Setup(*self._args)
        return self._setup

    def __iter__(self) -> Expansion:
        return self

    def __next__(self) -> Candidate:
        if self._gen is None:
            self._gen = _walk(self.setup())
        c = next(self._gen)
        self.n += 1
        return c

    def plans(self) -> list[_Plan]:
        """One plan per admissible triple, the (none, none, none) baseline's first."""
        return self.setup().plans

    @property
    def configs(self) -> int:
        """Launch configs over every admissible triple before restrictions: a sum of
        products of option counts, nothing enumerated (candidates are at most this many)."""
        return sum(p.size for p in self.setup().plans)

    @property
    def huge(self) -> bool:
        """Whether the space has more than WALK_LIMIT configs: :func:`cap` then samples it
        by index (:meth:`sample`) instead of walking it."""
        return self.configs > WALK_LIMIT

    def sample(self, n: int, seed: int | None = None) -> list[Candidate]:
        """The baseline plus up to ``n - 1`` distinct candidates drawn uniformly at random
        over the space's launch configs (a seeded ``random.Random``; each draw an integer
        below :attr:`configs`, decoded by mixed radix into one triple's config, kept when
        it passes the restrictions): never walks the space. The candidates are the walk's
        own (ids, params, dims, aliases); the same seed draws the same sample. Fewer come
        back when max(SAMPLE_DRAWS, DRAWS_PER_CANDIDATE * n) draws found no more.

        Raises:
            SpecError: no draw passed the restrictions (naming sweep.yaml's field), or
                the baseline breaks them.
        """
        setup = self.setup()
        base, _ = setup.baseline()
        kept = {base.candidate_id: base}
        ends = list(itertools.accumulate(p.size for p in setup.plans))
        rng = random.Random(f"kopt sample {seed}")
        budget, draws = max(SAMPLE_DRAWS, DRAWS_PER_CANDIDATE * n), 0
        while len(kept) < n and draws < budget:
            draws += 1
            r = rng.randrange(ends[-1])
            i = bisect_right(ends, r)
            c = setup.candidate_at(setup.plans[i], setup.plans[i].decode(
                r - (ends[i - 1] if i else 0)))
            if c is not None and c.candidate_id not in kept:
                kept[c.candidate_id] = c
        self.sampled = SampleInfo(ends[-1], draws, len(kept) - 1, n)
        if len(kept) == 1 and n > 1:
            sp = setup.space
            raise SpecError(f"{sp.spec_path}: {sp.prefix}restrictions: none of {draws:,} random "
                            f"launch configs (of {ends[-1]:,} before restrictions) passes "
                            "them besides the baseline; loosen the restrictions, or narrow "
                            f"{sp.prefix}params to at most {WALK_LIMIT:,} configs (walked "
                            "in full)")
        return list(kept.values())

    def probe(self, plan: _Plan, draws: int) -> bool | None:
        """Whether some launch config of ``plan`` passes the restrictions (as its own
        candidate or as another triple's equal build): every config checked when it has
        at most ``draws``, else ``draws`` random ones (seeded); None when those found none
        (undecided: the restrictions pass few or none of them)."""
        setup = self.setup()
        rng = random.Random(f"kopt probe {plan.triple}")
        picks = (range(plan.size) if plan.size <= draws
                 else (rng.randrange(plan.size) for _ in range(draws)))
        for i in picks:
            idx = plan.decode(i)
            params = {n: vals[j] for n, vals, j in zip(plan.names, plan.values, idx)}
            if _dims_ok(plan, params, setup.space, setup.sm):
                return True
        return False if plan.size <= draws else None


def configs_bound(space: Space, catalog: Catalog) -> int:
    """An upper bound of the launch configs (before restrictions) of ``space``'s first
    iteration on any device: the product of the option counts summed over every triple of
    the realized methods, with no arch gate, conflict or ``requires`` dropping one. Nothing
    is enumerated but the triples."""
    options = [[None] + [m.id for m in catalog.axis(a) if m.id in space.methods] for a in AXES]
    total = 0
    for triple in itertools.product(*options):
        pspace = dict(space.params)
        for m in triple:
            if m is not None:
                pspace.update(space.methods[m].params)
        total += math.prod(len(v) for v in pspace.values())
    return total


def iter_candidates(space: Space, catalog: Catalog, sm: int | None,
                    selected: Iterable[str] = (), source_digest: str | None = None,
                    ctx: Context | None = None) -> Expansion:
    """The candidates of ``space``, lazily, baseline first (then as :func:`expand` lists them):
    an :class:`Expansion`, an iterator that also counts the space's launch configs without
    walking them (``configs``) and samples a space too large to walk (``sample``).

    Restrictions are evaluated per candidate as the iterator advances; nothing but the
    triples is held, so a consumer that keeps few candidates (:func:`cap`) runs in memory
    independent of the space's size. Equal builds of several triples are yielded once, with
    the later triples in ``aliases``. When a method define shares a name with a launch param
    (one build for several configs) the space is expanded in full first, as before.

    Args and raises: as :func:`expand`; errors surface when the iterator reaches them.
    """
    return Expansion(space, catalog, sm, selected, source_digest, ctx)


_MISSING = object()


def _check_baseline(params: dict[str, Scalar], dims_ok: list[int], space: Space) -> None:
    """SpecError unless the baseline's params pass the restrictions at every dims."""
    if len(dims_ok) != len(space.dims):
        bad = [d for i, d in enumerate(space.dims) if i not in dims_ok]
        raise SpecError(f"baseline params {params} violate the restrictions for dims "
                        f"{bad}; change `baseline` or the restrictions")


def _expand_all(plans: list[_Plan], space: Space, sm: int | None,
                base_params: dict[str, Scalar], cid: Any) -> list[Candidate]:
    """Every candidate at once, collapsing equal builds by id (memory: the whole space); for
    spaces where a method define overrides a launch param."""
    by_id: dict[str, Candidate] = {}
    baseline_key = None
    for plan in plans:
        for values, pcs in zip(itertools.product(*plan.values),
                               itertools.product(*plan.pieces)):
            params = dict(zip(plan.names, values))
            dims_ok = _dims_ok(plan, params, space, sm)
            is_base = plan.triple == NONE_TRIPLE and params == base_params
            if is_base:
                _check_baseline(params, dims_ok, space)
            if not dims_ok:
                continue
            c = cid(plan, pcs)[0]
            if c in by_id:
                by_id[c].aliases.append(plan.triple)
                by_id[c].is_baseline |= is_base
                continue
            by_id[c] = Candidate(c, plan.triple, params, {**params, **plan.mdefines}, dims_ok,
                                 is_base, plan.target)
            if is_base:
                baseline_key = c
    if baseline_key is None:
        raise SpecError("the baseline (no methods, baseline params) is not in the space")
    return sorted(by_id.values(), key=lambda c: not c.is_baseline)


def expand(space: Space, catalog: Catalog, sm: int | None, selected: Iterable[str] = (),
           source_digest: str | None = None, ctx: Context | None = None) -> list[Candidate]:
    """All candidates of ``space`` for a device of SM arch ``sm`` (None: CPU), baseline first.

    The list of :func:`iter_candidates`; to keep a sample of a large space, pass that
    generator to :func:`cap` instead (memory then grows with the sample, not the space).

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
    return list(iter_candidates(space, catalog, sm, selected, source_digest, ctx))


# Per-block limits of CUDA devices (CUDA C++ Programming Guide, "Technical Specifications
# per Compute Capability"): 1024 threads, block.z <= 64, grid.y/z <= 65535, and the
# dynamic shared memory a block may opt into, in bytes, per SM arch.
MAX_THREADS_PER_BLOCK = 1024
MAX_SMEM_OPTIN = {70: 98304, 72: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912,
                  89: 101376, 90: 232448, 100: 232448, 103: 232448, 120: 101376}


def fits_device(launch: Any, env: dict[str, Any], sm: int | None) -> bool:
    """Whether a kernel-mode candidate's launch geometry (kopt.core.spec.launch_geometry with
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


class Tally:
    """Passes the items of an iterable through, counting them in ``n`` and holding none:
    ``t = Tally(iter_candidates(...)); kept = cap(t, 10); t.n`` is the space's size."""

    def __init__(self, items: Iterable[Any]):
        self._items = items
        self.n = 0

    def __iter__(self) -> Iterator[Any]:
        for x in self._items:
            self.n += 1
            yield x


def sample_key(seed: int | None) -> Callable[[Candidate], str]:
    """The order :func:`cap` samples by: the candidate id, or with a seed
    ``stable_hash({"seed": seed, "id": id})`` (built without the generic encoder: it is
    computed for every candidate of a capped space)."""
    if seed is None:
        return operator.attrgetter("candidate_id")
    tail = f', "seed": {json.dumps(seed, default=str)}}}'

    def key(c: Candidate) -> str:
        text = f'{{"id": {json.dumps(c.candidate_id)}{tail}'
        return hashlib.sha256(text.encode()).hexdigest()[:16]
    return key


def cap(cands: Iterable[Candidate], max_candidates: int | None, seed: int | None = None
        ) -> list[Candidate]:
    """Keep at most ``max_candidates``: the baseline plus a deterministic sample (by id order,
    or by a hash of ``seed`` and the id when a seed is given).

    Candidate ids are sha256 digests, so the first N by id are a uniform,
    reproducible sample of the space; another seed draws another sample. ``cands`` may be
    a generator (:func:`iter_candidates`): only the best ``max_candidates`` keys are held
    (a bounded heap), so memory grows with the sample, not with the space. A list no
    longer than the cap (or no cap) is returned as it is. An :func:`iter_candidates`
    stream of more than WALK_LIMIT launch configs is not walked: its sample is drawn by
    index instead (:meth:`Expansion.sample`, seeded by ``seed``), in seconds at any size.

    Raises:
        ValueError: ``max_candidates`` < 1.
        SpecError: a sample by index found no candidate besides the baseline.
    """
    if max_candidates is None:
        return cands if isinstance(cands, list) else list(cands)
    if isinstance(cands, list) and len(cands) <= max_candidates:
        return cands
    if max_candidates < 1:
        raise ValueError("--max-candidates must be >= 1")
    if isinstance(cands, Expansion) and cands.n == 0 and cands.huge:
        return cands.sample(max_candidates, seed)  # too large to walk: drawn by index
    key = sample_key(seed)
    base: list[tuple[int, Candidate]] = []
    total = 0

    def rest() -> Iterator[tuple[int, Candidate]]:
        nonlocal total
        for total, c in enumerate(cands, 1):
            if c.is_baseline:
                base.append((total, c))
            else:
                yield total, c
    kept = heapq.nsmallest(max_candidates, rest(), key=lambda ic: key(ic[1]))
    if total <= max_candidates:  # nothing to cap: the candidates as they came
        return [c for _, c in sorted(base + kept, key=operator.itemgetter(0))]
    return [c for _, c in base] + [c for _, c in kept[: max_candidates - len(base)]]
