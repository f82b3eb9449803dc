"""Submitted versions as one more iteration of a stored run: each version (a new
kernel source written by a person or an agent) x its sweep's launch-config space, measured
next to their parent (the run's current best, re-measured as the iteration's baseline).
Building, checking, timing, ranking, profiling and closing the iteration are the NCU loop's
(kopt.driver.sweep.Driver); this strategy only plans the jobs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kopt.core.catalog import AXES, Catalog
from kopt.core.expand import Candidate, iter_candidates, stable_hash
from kopt.core.spec import Space
from kopt.loop.measured import stored_copy
from kopt.loop.state import IterState
from kopt.run.builder import build_id, build_job
from kopt.store.database import Database
from kopt.strategy.base import Job, SearchStrategy

NO_STOP = 10**9  # a submitted iteration is never the loop's last by count


@dataclass
class Version:
    """One submitted kernel source.

    Attributes:
        name: its file name (e.g. ``v2.cu``).
        path: the stored copy it is built from (under the store root).
        source_hash: its digest (kopt.core.expand.space_digest), the ``source_hash`` column.
        methods: the claimed catalog method ids (at most one per axis).
        note: the submitter's analysis text.
        submitter: who or what submitted it.
    """

    name: str
    path: Path
    source_hash: str
    methods: list[str]
    note: str
    submitter: str

    def triple(self) -> tuple[str | None, ...]:
        """The claimed methods as a (compute, memory, latency) triple."""
        by_axis = {m.split(".", 1)[0]: m for m in self.methods}
        return tuple(by_axis.get(a) for a in AXES)


def version_space(space: Space, path: Path) -> Space:
    """``space`` with ``path`` as its source and no ``-D`` method realizations (a submitted
    version applies its methods in code): its launch-config space is the sweep's params;
    headers resolve from the sweep's folder too."""
    return dataclasses.replace(space, source=path, methods={},
                               include_dirs=[str(space.source.parent), *space.include_dirs])


def version_candidates(space: Space, catalog: Catalog, sm: int | None, v: Version
                       ) -> Iterator[Candidate]:
    """The candidates of version ``v`` on a device of SM arch ``sm`` (None: CPU): every
    launch config of its space (:func:`version_space`), its claimed triple, none a baseline.
    Their ids are what the run stores (``kopt submit --detach`` prints them before)."""
    for c in iter_candidates(version_space(space, v.path), catalog, sm,
                             source_digest=v.source_hash):
        yield dataclasses.replace(c, triple=v.triple(), is_baseline=False, aliases=[])


class Submitted(SearchStrategy):
    """Iteration ``iteration`` of a stored run: ``versions`` against ``parents``.

    Args:
        iteration: the iteration they run as (a new one, or a retry of the last).
        versions: the submitted versions.
        prior: device class -> the loop state the iteration starts from (the previous one's).
        parents: device class -> the parent candidate's lineage row
            (kopt.store.database.Database.candidate_lineage).
        parent_space: source digest -> the space a parent of that source is built from.
    """

    name = "submitted"

    def __init__(self, iteration: int, versions: list[Version], prior: dict[str, IterState],
                 parents: dict[str, dict[str, Any]], parent_space: dict[str, Space]):
        super().__init__(None)
        self.iteration, self.versions, self.prior = iteration, versions, prior
        self.parents, self.parent_space = parents, parent_space
        self.created: dict[str, list[str]] = {v.source_hash: [] for v in versions}
        # candidate id -> lineage row of an earlier candidate a contest may re-measure (its
        # build is made before the iteration closes: :attr:`prebuilds`)
        self.rebuild: dict[str, dict[str, Any]] = {}
        self.prebuilds: dict[str, Any] = {}

    def select(self, cands: Iterable[Candidate]) -> list[Candidate]:
        """Every candidate of a version's space (its launch configs)."""
        return list(cands)

    def prepare(self, loop: Any, classes: list[str]) -> None:
        """Set ``loop`` (kopt.loop.guided.NcuLoop) to the prior states, stop cleared,
        so that this iteration is closed afresh (a retry replaces its earlier closing)."""
        loop.stored = {}
        loop.iterations = NO_STOP
        for dc in classes:
            if dc in self.prior:
                loop.states[dc] = dataclasses.replace(self.prior[dc], stop="")

    def plan_jobs(self, driver: Any, classes: list[str]
                  ) -> tuple[list[Job], dict[str, Any]]:
        """The jobs and builds of the parent (as the baseline) and every version, on each
        class of ``classes`` that has a parent (``driver``: kopt.driver.sweep.Driver, started)."""
        jobs: list[Job] = []
        builds: dict[str, Any] = {}
        for dc in classes:
            parent = self.parents.get(dc)
            if parent is None:
                continue
            info = driver.classes[dc]
            plat = info.get("platform") or ""
            plan = _Planner(self.iteration, dc, plat, driver.compilers[plat], driver.builder)
            pspace = self.parent_space[parent["source_hash"]]
            plan.add(pspace, parent["source_hash"], _parent_candidate(parent, pspace),
                     {k: parent[k] for k in ("parent_id", "source_hash", "submitter",
                                             "claimed_methods", "note")})
            for v in self.versions:
                vspace = version_space(driver.space, v.path)
                lineage = {"parent_id": parent["candidate_id"], "source_hash": v.source_hash,
                           "submitter": v.submitter, "claimed_methods": ",".join(v.methods),
                           "note": v.note}
                for c in version_candidates(driver.space, driver.catalog, info["sm"], v):
                    plan.add(vspace, v.source_hash, c, lineage)
                    self.created[v.source_hash].append(c.candidate_id)
            jobs += plan.jobs
            builds.update(plan.builds)
            again = _Planner(self.iteration, dc, plat, driver.compilers[plat], driver.builder)
            for row in self.rebuild.values():
                sp = self.parent_space[row["source_hash"]]
                again.add(sp, row["source_hash"], _parent_candidate(row, sp), {}, jobs=False)
            self.prebuilds.update(again.builds)
        return jobs, builds


class _Planner:
    """Jobs and builds of one device class, as kopt.driver.sweep.Driver._plan makes them."""

    def __init__(self, iteration: int, dc: str, plat: str, compiler: str, builder: Any):
        self.iteration, self.dc, self.plat, self.compiler = iteration, dc, plat, compiler
        self.builder = builder
        self.jobs: list[Job] = []
        self.builds: dict[str, Any] = {}

    def add(self, space: Space, digest: str, c: Candidate, lineage: dict[str, Any],
            jobs: bool = True) -> None:
        """Candidate ``c`` of ``space``: its build and (with ``jobs``) its jobs."""
        bid = build_id(space, c, digest, self.compiler, self.plat)
        self.builds[bid] = self.builder.plan(build_job(space, c, bid, space.source_text()),
                                             self.plat)
        if not jobs:
            return
        self.jobs += [Job(stable_hash({"candidate": c.candidate_id, "dims": space.dims[di],
                                       "device_class": self.dc, "iteration": self.iteration,
                                       "build": bid}),
                          c, self.dc, di, space.dims[di], bid, self.iteration, lineage=lineage)
                      for di in c.dims_ok]


def _parent_candidate(row: dict[str, Any], space: Space) -> Candidate:
    """The parent (a stored candidate row) as the iteration's baseline candidate."""
    return Candidate(row["candidate_id"],
                     (row["compute_method"], row["memory_method"], row["latency_method"]),
                     json.loads(row["params"]), json.loads(row["defines"]),
                     list(range(len(space.dims))), True, row["arch"] or "host")


class SubmitError(ValueError):
    """A submission refused before anything ran; ``lines``: one per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def stored_source(db: Database, space: Space, source_hash: str,
                  row: dict[str, Any] | None = None) -> Space:
    """The space a stored source (a ``sources`` row; ``row`` when already read) is built
    from, its copy re-written under the store when it is missing or differs
    (:func:`kopt.loop.measured.stored_copy`).

    Raises:
        SubmitError: the store holds no source with that digest.
    """
    got = stored_copy(db, source_hash, row)
    if got is None:
        raise SubmitError([f"{db.root}: no stored source {source_hash} (table sources); "
                           "the parent's source is lost, submit against a newer run"])
    return version_space(space, got[0])
