"""The optimization catalog: methods per axis in priority order (catalog/methods.yaml).

Loaded from the ``catalog`` data package with importlib.resources, so it ships
inside the wheel. Each method has an axis, a priority (1 is scanned first),
a minimum SM arch, whether it needs the ``sm_90a`` target, conflicts,
couplings (the same change seen from two axes) and an NCU trigger.
Sources: ../shared/catalog-notes.md (the researched draft).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

AXES = ("compute", "memory", "latency")


@dataclass(frozen=True)
class Method:
    """One catalog method.

    Attributes:
        id: ``"<axis>.<name>"``, e.g. ``"memory.vectorized_access"``.
        axis: ``compute``, ``memory`` or ``latency``.
        priority: 1 = first in the axis's strict priority scan.
        min_sm: minimum SM arch as an int (80 = sm_80); 0 = any.
        needs_sm90a: needs the ``sm_90a`` target (wgmma, setmaxnreg).
        conflicts: ids that may not share a triple with this one.
        couples: ids that are the same code change seen from another axis.
        requires: ids that must be in the triple or selected earlier.
        trigger: the NCU trigger (``text`` and optional ``all``/``any`` conditions).
    """

    id: str
    axis: str
    priority: int
    title: str = ""
    change: str = ""
    min_sm: int = 0
    needs_sm90a: bool = False
    conflicts: frozenset[str] = field(default_factory=frozenset)
    couples: frozenset[str] = field(default_factory=frozenset)
    requires: frozenset[str] = field(default_factory=frozenset)
    notes: str = ""
    trigger: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def arch_ok(self, sm: int | None) -> bool:
        """True when the method can run on SM arch ``sm``: ``sm >= min_sm``, and for an
        ``sm_90a`` method exactly sm 90 (the ``a`` targets' features, wgmma and setmaxnreg,
        exist on compute capability 9.0 only: CUDA C++ Programming Guide, "Feature
        Availability", architecture-specific features). ``sm`` None is a CPU device: only
        the methods with no SM floor (``min_sm`` 0: coarsening, unrolling, tiling...);
        tensor cores, warp shuffles, cp.async, ldmatrix and wgmma are GPU hardware."""
        if sm is None:
            return self.min_sm == 0 and not self.needs_sm90a
        return sm >= self.min_sm and (not self.needs_sm90a or sm == 90)


@dataclass(frozen=True)
class Catalog:
    """All methods by id, in axis then priority order."""

    methods: dict[str, Method]
    stall_metric: str = ""

    def axis(self, axis: str) -> list[Method]:
        """Methods of ``axis`` in priority order."""
        return sorted((m for m in self.methods.values() if m.axis == axis),
                      key=lambda m: m.priority)

    def conflict(self, a: str, b: str) -> bool:
        """True when methods ``a`` and ``b`` may not share a triple (symmetric)."""
        ma, mb = self.methods[a], self.methods[b]
        return b in ma.conflicts or a in mb.conflicts


class CatalogError(ValueError):
    """The catalog file is malformed (message names the method and field)."""


def parse_catalog(data: dict[str, Any], source: str = "catalog/methods.yaml") -> Catalog:
    """Build a Catalog from the parsed YAML mapping; checks ids, axes, priorities, references.

    Raises:
        CatalogError: on any inconsistency.
    """
    methods: dict[str, Method] = {}
    for i, m in enumerate(data.get("methods") or []):
        try:
            mid, axis = m["id"], m["axis"]
        except KeyError as e:
            raise CatalogError(f"{source}: methods[{i}] lacks {e}") from None
        if axis not in AXES or not mid.startswith(axis + "."):
            raise CatalogError(f"{source}: {mid}: axis {axis!r} must be one of {AXES} "
                               "and prefix the id")
        if mid in methods:
            raise CatalogError(f"{source}: {mid} is listed twice")
        methods[mid] = Method(
            id=mid, axis=axis, priority=int(m["priority"]), title=m.get("title", ""),
            change=m.get("change", ""), min_sm=int(m.get("min_sm") or 0),
            needs_sm90a=bool(m.get("needs_sm90a", False)),
            conflicts=frozenset(m.get("conflicts") or ()),
            couples=frozenset(m.get("couples") or ()),
            requires=frozenset(m.get("requires") or ()), notes=m.get("notes", ""),
            trigger=m.get("trigger") or {})
    for ax in AXES:
        prios = [m.priority for m in methods.values() if m.axis == ax]
        if len(prios) != len(set(prios)):
            raise CatalogError(f"{source}: priorities on axis {ax} are not unique: {sorted(prios)}")
    for m in methods.values():
        for ref in m.conflicts | m.couples | m.requires:
            if ref not in methods:
                raise CatalogError(f"{source}: {m.id} names unknown method {ref!r}")
    ordered = dict(sorted(methods.items(), key=lambda kv: (AXES.index(kv[1].axis), kv[1].priority)))
    return Catalog(methods=ordered, stall_metric=data.get("stall_metric", ""))


# libyaml's parser where PyYAML was built with it (about 10x faster than the pure-Python one:
# the two shipped files took 0.45 s of a submitted try's 4 s on a 2-core machine)
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The catalog shipped in the ``catalog`` package (cached)."""
    text = resources.files("catalog").joinpath("methods.yaml").read_text()
    return parse_catalog(yaml.load(text, Loader=_SAFE_LOADER))


@lru_cache(maxsize=1)
def load_metric_guide() -> dict[str, Any]:
    """The NCU metric guide (catalog/metrics.yaml) as a mapping."""
    text = resources.files("catalog").joinpath("metrics.yaml").read_text()
    return yaml.load(text, Loader=_SAFE_LOADER)
