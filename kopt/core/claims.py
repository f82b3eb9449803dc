"""Claim checking: do the methods a new kernel version claims to apply obey the catalog?

A version submitted into a run claims at most one catalog method per axis,
written ``compute.X,memory.Y,latency.Z`` (any subset). :func:`check_claim` holds the claim
against the catalog (catalog/methods.yaml) and, when given, against the next iteration's
priority scan as ``kopt propose`` computes it (:func:`kopt.core.expand.scan_axes`; for versions
written by hand or by an agent, :func:`catalog_scan` scans every catalog method, not only
those the sweep realizes with ``-D`` switches). Each broken rule is one
:class:`Refusal`, printed as one line with the rule's name first:

- ``unknown_method``: the id is not in the catalog (the closest id is suggested);
- ``one_method_per_axis``: two claimed methods share an axis;
- ``arch_gate``: the method needs a newer SM arch (``min_sm``) or the ``sm_90a`` target
  (checked as the loop's scan does; a CPU device has no SM gate);
- ``conflict``: two claimed methods, or a claimed and an already selected one, conflict;
- ``requires``: a method's ``requires`` is neither claimed nor selected;
- ``pipeline_pair``: ``memory.multi_stage_pipeline`` and ``latency.async_pipeline``, one
  change seen from two axes, are claimed together;
- ``already_selected``: the current best applies the method already (a method is applied
  once);
- ``ineffective``: the method lost under the current bottleneck, which has not changed
  since (on a device with no profiler, a new best counts as a change: the scan compares
  the best it was judged on, kopt.core.expand ``scan_axes``);
- ``priority_order``: the method lies below higher-priority methods the scan admitted on
  its axis, and the analysis does not name each of them (saying why it was passed over);
- ``not_admitted``: the scan found the method's NCU trigger false on the current evidence
  (``no_trigger``), and the analysis does not name it (saying why it is tried all the
  same).

Only the last two yield to the submitter's analysis text, and only to text that names the
methods concerned (:func:`names`: checked, not any text); every other rule holds whatever
it says.
"""

from __future__ import annotations

import difflib
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kopt.core.catalog import AXES, Catalog, load_catalog
from kopt.core.expand import AxisScan, Context, admissible_triples, scan_axes

RULES = ("unknown_method", "one_method_per_axis", "arch_gate", "conflict", "requires",
         "pipeline_pair", "already_selected", "ineffective", "priority_order", "not_admitted")

# scan reasons a claim may override with a reason; arch_incompatible and conflict are the
# catalog's hard rules, checked (and named) by arch_gate / conflict instead
_SOFT = {"no_trigger": "its NCU trigger does not hold on the current evidence"}
# scan reasons no analysis lifts: a method is applied once, and an ineffective one waits
# for the evidence to show another bottleneck (the catalog's selection rules)
_HARD = {"already_selected": "it is already selected (the current best applies it), and a "
                             "method is applied once",
         "ineffective": "it was ineffective under the current bottleneck, which has not "
                        "changed since (the evidence decides that, not a note)"}
# one change seen from two axes (catalog-notes: "a triple holding both counts them once"):
# never claimed together
PIPELINE_PAIR = ("memory.multi_stage_pipeline", "latency.async_pipeline")


@dataclass(frozen=True)
class Refusal:
    """One broken catalog rule: ``rule`` (one of :data:`RULES`) and a one-line message
    naming the method(s) and the fix."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass(frozen=True)
class ClaimCheck:
    """The verdict on one claim.

    Attributes:
        methods: the claimed method ids, in the order given.
        refusals: every broken rule, one each; empty when the claim is accepted.
    """

    methods: tuple[str, ...]
    refusals: tuple[Refusal, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when no rule is broken."""
        return not self.refusals

    def lines(self) -> list[str]:
        """One line per refusal (rule name first); ``["ok"]`` when accepted."""
        return [str(r) for r in self.refusals] or ["ok"]


def parse_claim(text: str) -> list[str]:
    """``"compute.X,memory.Y,latency.Z"`` (any subset, spaces allowed) as a list of ids.

    Empty items and ``none`` / ``<axis>.none`` (no method on that axis, as ``kopt
    propose`` prints it) are dropped; nothing else is checked here.
    """
    out = []
    for item in text.split(","):
        item = item.strip()
        if item and item != "none" and not (item.endswith(".none") and
                                            item.split(".", 1)[0] in AXES):
            out.append(item)
    return out


def unstated_axes(text: str) -> list[str]:
    """The axes (in :data:`~kopt.core.catalog.AXES` order) that ``--methods`` text neither
    claims a method on (``axis.X``) nor states as skipped (``axis.none``); ``none`` alone
    states every axis. Empty when every axis is accounted for."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    if items == ["none"]:
        return []
    said = {i.split(".", 1)[0] for i in items if "." in i}
    return [a for a in AXES if a not in said]


def catalog_scan(catalog: Catalog, sm: int | None, ctx: Context | None = None
                 ) -> dict[str, list[AxisScan]]:
    """The priority scan over every catalog method (not only those a sweep realizes):
    what a version written from scratch may claim. Reasons as :func:`kopt.core.expand.scan_axes`
    (the same function, given every method as realized)."""
    every = SimpleNamespace(methods=catalog.methods)  # scan_axes reads only `.methods`
    return scan_axes(every, catalog, sm, ctx=ctx)  # type: ignore[arg-type]


def catalog_triples(catalog: Catalog, sm: int | None, ctx: Context | None = None
                    ) -> list[tuple[str | None, ...]]:
    """Every admissible triple over the whole catalog (:func:`kopt.core.expand.admissible_triples`
    given every method as realized, as :func:`catalog_scan`), the baseline first: what a
    version written from scratch may claim."""
    every = SimpleNamespace(methods=catalog.methods)
    return admissible_triples(every, catalog, sm, ctx=ctx)  # type: ignore[arg-type]


def _suggest(mid: str, catalog: Catalog) -> str:
    """The catalog id whose name (after the axis) is closest to ``mid``'s, on ``mid``'s
    axis when several are as close (the same name on another axis first), or ''."""
    axis, _, name = mid.rpartition(".")
    names = {k.split(".", 1)[1]: k for k in catalog.methods}
    if name in names:
        return names[name]
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.6)
    ids = [names[c] for c in close]
    return next((k for k in ids if k.startswith(axis + ".")), ids[0] if ids else "")


def _scan_rows(scan: Mapping[str, Iterable[AxisScan | Mapping[str, Any]]]
               ) -> dict[str, list[dict[str, Any]]]:
    """A scan as plain dicts per axis (AxisScan objects or the dicts of propose's JSON)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for axis, rows in scan.items():
        out[axis] = [dict(r) if isinstance(r, Mapping) else
                     {"method": r.method, "axis": r.axis, "priority": r.priority,
                      "admitted": r.admitted, "reason": r.reason} for r in rows]
    return out


def check_claim(methods: Iterable[str], catalog: Catalog | None = None, sm: int | None = None,
                scan: Mapping[str, Iterable[AxisScan | Mapping[str, Any]]] | None = None,
                selected: Iterable[str] = (), reason: str | None = None) -> ClaimCheck:
    """Check the methods a version claims against the catalog's rules (module docstring).

    Args:
        methods: claimed method ids (see :func:`parse_claim` for the text form).
        catalog: the catalog (default: the shipped one).
        sm: the device's SM arch as an int (90 for sm_90); None for a CPU device.
        scan: the next iteration's priority scan, axis -> rows (``AxisScan`` or the dicts
            ``kopt propose --format json`` prints); None: the priority and admission rules
            are not checked.
        selected: methods the current best already applies (earlier winners).
        reason: the submitter's analysis; text naming the methods concerned lifts
            ``priority_order`` and ``not_admitted`` (module docstring).

    Returns:
        A :class:`ClaimCheck`; every broken rule is one refusal, none raises.
    """
    cat = catalog or load_catalog()
    given = tuple(methods)
    claim, refusals = _once(given)  # every rule below sees each id once
    sel = set(selected)
    known = []
    for m in claim:
        if m in cat.methods:
            known.append(cat.methods[m])
            continue
        hint = _suggest(m, cat)
        refusals.append(Refusal("unknown_method", f"{m} is not a catalog method"
                                + (f"; did you mean {hint}?" if hint else "")
                                + " (`kopt catalog` lists them)"))
    for axis in AXES:
        on = [m.id for m in known if m.axis == axis]
        if len(on) > 1:
            refusals.append(Refusal("one_method_per_axis", f"{' and '.join(on)} are all on "
                                    f"the {axis} axis; claim at most one method per axis"))
    refusals += _arch_refusals(known, sm)
    refusals += _pair_refusals(known, claim, sel, cat)
    if all(m in claim for m in PIPELINE_PAIR):
        refusals.append(Refusal("pipeline_pair", f"{' and '.join(PIPELINE_PAIR)} are one "
                                "change seen from two axes: claim one of them"))
    if scan is not None:
        refusals += _scan_refusals(known, _scan_rows(scan), reason or "")
    return ClaimCheck(given, tuple(refusals))


def _arch_refusals(known: list[Any], sm: int | None) -> list[Refusal]:
    """The claimed methods the device's arch cannot run (``sm`` None: a CPU device)."""
    refusals = []
    for m in known:
        if sm is None and not m.arch_ok(None):
            refusals.append(Refusal("arch_gate", f"{m.id} is GPU hardware (sm_{m.min_sm} or "
                                    "newer); the device is a CPU"))
        elif sm is not None and sm < m.min_sm:
            refusals.append(Refusal("arch_gate", f"{m.id} needs sm_{m.min_sm} or newer; the "
                                    f"device is sm_{sm}"))
        elif not m.arch_ok(sm):
            refusals.append(Refusal("arch_gate", f"{m.id} needs the sm_90a target (an sm_90 "
                                    f"device only); the device is sm_{sm}"))
    return refusals


def _pair_refusals(known: list[Any], claim: tuple[str, ...], sel: set[str], cat: Catalog
                   ) -> list[Refusal]:
    """Conflicts among the claimed methods and with the current best's (``sel``), and the
    methods a claimed one requires that neither claims nor selects."""
    refusals = []
    for a, b in itertools.combinations(known, 2):
        if cat.conflict(a.id, b.id):
            refusals.append(Refusal("conflict", f"{a.id} and {b.id} conflict in the "
                                    "catalog: claim one of them"))
    for m in known:
        for s in sorted(sel - set(claim)):
            if s in cat.methods and cat.conflict(m.id, s):
                refusals.append(Refusal("conflict", f"{m.id} conflicts with {s}, which the "
                                        "current best already applies"))
    have = set(claim) | sel
    for m in known:
        missing = sorted(m.requires - have)
        if missing:
            refusals.append(Refusal("requires", f"{m.id} requires {', '.join(missing)}: "
                                    "claim it too (or select it in an earlier iteration)"))
    return refusals


def _once(claim: tuple[str, ...]) -> tuple[tuple[str, ...], list[Refusal]]:
    """``claim`` with each id once (first place kept), and one ``one_method_per_axis``
    refusal per id given more than once: a method named twice is one method, not two lines
    of every rule it breaks."""
    counts = Counter(claim)
    return tuple(counts), [Refusal("one_method_per_axis", f"{m} is claimed {n} times; claim "
                                   "it once") for m, n in counts.items() if n > 1]


def names(reason: str, method: str) -> bool:
    """Whether analysis text ``reason`` names ``method``: its id (``memory.kernel_fusion``),
    its name after the axis (``kernel_fusion``) or that name in words (``kernel fusion``),
    in any case."""
    low = reason.lower()
    name = method.split(".", 1)[-1].lower()
    return any(n in low for n in (method.lower(), name, name.replace("_", " ")))


def _scan_refusals(known: list[Any], rows: dict[str, list[dict[str, Any]]], reason: str
                   ) -> list[Refusal]:
    """The priority and admission rules against the scan. A method already selected, or
    ineffective under a bottleneck that has not changed, is refused whatever the reason; a
    higher-priority method the scan admits is passed over, and a method whose trigger does
    not hold is tried, only with an analysis that names that method."""
    out = []
    for m in known:
        axis_rows = rows.get(m.axis, [])
        higher = [r for r in axis_rows if r["admitted"] and r["priority"] < m.priority]
        unnamed = [r["method"] for r in sorted(higher, key=lambda r: r["priority"])
                   if not names(reason, r["method"])]
        if unnamed:
            h = min(higher, key=lambda r: r["priority"])
            out.append(Refusal("priority_order", f"{m.id} (priority {m.priority}) is below "
                               f"{h['method']} (priority {h['priority']}), which the scan "
                               f"admits on the {m.axis} axis; claim {h['method']}, or say in "
                               "the analysis note why not, naming each method passed over"
                               + (" (the note does not name: " if reason.strip() else ": ")
                               + ", ".join(unnamed) + (")" if reason.strip() else "")))
        own = next((r for r in axis_rows if r["method"] == m.id), None)
        if own is None or own["admitted"]:
            continue
        if own["reason"] in _HARD:
            out.append(Refusal(own["reason"], f"{m.id}: {_HARD[own['reason']]}; claim another "
                               f"{m.axis} method, or {m.axis}.none"))
        elif own["reason"] in _SOFT and not names(reason, m.id):
            out.append(Refusal("not_admitted", f"{m.id} was skipped by the scan: "
                               f"{_SOFT[own['reason']]} ({own['reason']}); say in the analysis "
                               "note why to try it all the same, naming it"))
    return out


def check_claim_for_plan(methods: Iterable[str], plan: Mapping[str, Any],
                         catalog: Catalog | None = None, reason: str | None = None
                         ) -> ClaimCheck:
    """:func:`check_claim` against one device class's plan of ``kopt propose``
    (:func:`kopt.loop.propose.propose`): its SM arch (``sm``), selected methods and its
    ``catalog_scan`` (every catalog method; the sweep's own ``scan`` when absent)."""
    return check_claim(methods, catalog, plan.get("sm"),
                       plan.get("catalog_scan") or plan.get("scan"),
                       plan.get("selected") or (), reason)
