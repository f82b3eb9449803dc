"""``kopt submit`` and ``kopt lineage``: new kernel versions into a stored run,
their claims held to the catalog's rules (kopt.core.claims) first, and the run's version tree.

A submission is one more iteration of the run (or, with ``retry``, another try at its last
one, up to ``max_tries``), planned by kopt.loop.submitted and run by
kopt.driver.sweep.Driver as any iteration of the NCU loop. The sources are stored in the store
(the ``sources`` table, and a copy under ``STORE/source-files/HASH/NAME`` that builds read);
each try is a ``versions`` row. :func:`record` checks and records a try, :func:`load`
rebuilds its strategy from the store, so that ``kopt submit --detach`` (:func:`detach`) runs
it in a background process of its own after refusals were given at once.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pydantic import Field, ValidationInfo, field_validator

from kopt.core.catalog import Catalog, load_catalog
from kopt.core.claims import catalog_scan, check_claim_for_plan, parse_claim, unstated_axes
from kopt.core.compare import geo_mean
from kopt.core.contract import ContractError, parse_signature_file, read_text
from kopt.core.expand import space_digest
from kopt.core.spec import Space, SpecError, Sweep, load_sweep
from kopt.loop.propose import propose
from kopt.loop.state import IterState
from kopt.loop.submitted import (
    SubmitError,
    Submitted,
    Version,
    stored_source,
    version_candidates,
    version_space,
)
from kopt.store.database import Database, run_record
from kopt.store.files import RunLock, complete_rows, no_run, now, stored_json
from kopt.util.jsonrecord import MAX_PID, RecordError, RecordModel, read_record, write_record
from kopt.util.paths import broken_link
from kopt.util.words import counted
from workers.status import Status

SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx")
IDEA_KINDS = ("catalog", "paper", "url", "kernel", "other")  # the `provenance` table's kinds




def claimed(text: str) -> list[str]:
    """``--methods`` text as the claimed method ids (:func:`kopt.core.claims.parse_claim`).

    Raises:
        SubmitError: the text names nothing at all (only commas or blanks, once taken as a
            claim of no method), or leaves an axis neither claimed nor stated as skipped
            (``AXIS.none``; ``none`` alone states all three): the workflow takes one method
            per axis or says it skips the axis (:func:`kopt.core.claims.unstated_axes`).
    """
    if not any(item.strip() for item in text.split(",")):
        raise SubmitError([f"--methods {text!r}: names no method; name at least one catalog "
                           "method (`kopt propose` lists them), or `none` for a version "
                           "that applies none"])
    unstated = unstated_axes(text)
    if unstated:
        raise SubmitError([f"--methods {text!r}: every axis is claimed or stated as skipped; "
                           f"add {','.join(a + '.none' for a in unstated)} (or a method on "
                           f"{'that axis' if len(unstated) == 1 else 'each'})"])
    return parse_claim(text)


def source_files(source: Path) -> list[Path]:
    """``source`` itself, or the kernel sources (``SOURCE_SUFFIXES``) of a folder, sorted.

    Raises:
        SubmitError: missing, or a folder with no source.
    """
    if source.is_file():
        return [source]
    if source.is_dir():
        found = sorted(p for p in source.iterdir() if p.suffix in SOURCE_SUFFIXES and p.is_file())
        if found:
            return found
        raise SubmitError([f"--source {source}: the folder holds no kernel source "
                           f"({', '.join(SOURCE_SUFFIXES)}); pass a file or a folder of them"])
    what = broken_link(source)  # a link loop was once reported as missing
    raise SubmitError([f"--source {source}: {what or 'no such file or folder'}; pass the new "
                       "version's source file (or a folder of versions)"])


def _is_url(text: str) -> bool:
    """Whether ``text`` parses as a URL with a scheme and a host (``https://...``)."""
    u = urlparse(text)
    return bool(u.scheme and u.netloc) and not any(c.isspace() for c in text)


def parse_idea(text: str, catalog: Catalog) -> tuple[str, str]:
    """One ``--idea`` as ``(kind, ref)`` (kinds: :data:`IDEA_KINDS`): ``KIND:REF`` names the
    kind (``paper:Merrill & Garland 2016``, ``kernel:cub::BlockReduce``); else a catalog
    method id is ``catalog``, a URL (``https://...``) is ``url``, anything else ``other``.

    Raises:
        SubmitError: empty text, a ``catalog:`` that names no catalog method, a ``url:``
            that does not parse as one.
    """
    text = text.strip()
    kind, sep, rest = text.partition(":")
    if sep and kind in IDEA_KINDS:
        text = rest.strip()
    elif text in catalog.methods:
        kind = "catalog"
    else:
        kind = "url" if _is_url(text) else "other"
    if not text:
        raise SubmitError(["--idea: empty; give a catalog method id, a URL, or KIND:REF "
                           f"(kinds: {', '.join(IDEA_KINDS)})"])
    if kind == "catalog" and text not in catalog.methods:
        raise SubmitError([f"--idea catalog:{text}: not a catalog method (`kopt catalog` lists "
                           "them); write paper:, kernel: or other: for an idea from elsewhere"])
    if kind == "url" and not _is_url(text):
        raise SubmitError([f"--idea url:{text}: not a URL (scheme and host, e.g. "
                           "https://host/path); write other:TEXT for anything else"])
    return kind, text


def store_source(root: Path, space: Space, path: Path, digest: str | None = None
                 ) -> tuple[Path, str, str]:
    """Copy ``path`` into the store (``root/source-files/HASH/NAME``); returns the copy,
    its digest (as a candidate id counts it: ``digest`` when the caller computed it with
    :func:`version_digest`, else computed here) and its text.

    Raises:
        SubmitError: the file cannot be read as UTF-8 text, or its prototype is not the
            sweep's (the harness calls every version with the sweep's arguments).
    """

    text = read_text(path, lambda m: SubmitError([f"--source {m}"]))
    kernel = space.launch.kernel if space.launch is not None else None
    try:
        sig = parse_signature_file(path, kernel).describe()
    except ContractError as e:
        raise SubmitError([f"--source {e}"]) from None
    if sig != space.signature.describe():
        raise SubmitError([f"--source {path}: its prototype `{sig}` is not the sweep's "
                           f"`{space.signature.describe()}`; a version keeps the sweep's "
                           "arguments (kopt calls it with them)"])
    digest = digest or version_digest(space, path)
    copy = root / "source-files" / digest / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not copy.exists():
        copy.write_text(text)
    return copy, digest, text


def version_digest(space: Space, path: Path) -> str:
    """The digest of submitted source ``path`` (kopt.core.expand.space_digest of its version
    space: the text and the local headers it includes; seconds for a CUTLASS source, so a
    submission computes it once per source and passes it on)."""
    return space_digest(version_space(space, path))




def named_states(db: Database, run_id: str) -> dict[int, dict[str, IterState]]:
    """The run's closed iterations' states (iteration -> device class -> state), each as
    the next iteration sees it (:meth:`IterState.named`): where the loop's closing contest
    named another best than an iteration's winner, that best is the parent a submitted
    version derives from, the one ``kopt propose`` plans from and ``kopt best`` names."""
    states: dict[int, dict[str, IterState]] = {}
    for it, dc, js in db.iteration_states(run_id):
        states.setdefault(it, {})[dc] = IterState.from_json(js).named()
    return states


def _prior(db: Database, run_id: str, retry: bool
           ) -> tuple[int, dict[int, dict[str, IterState]]]:
    """The iteration a submission runs as, and the run's states (iteration -> class ->
    state; the one before it is there)."""
    states = named_states(db, run_id)
    if not states:
        raise SubmitError([f"run {run_id}: no closed iteration to build on; wait for the "
                           "run to finish its first iteration (`kopt sweep`)"])
    last = max(states)
    pending = max((v["iteration"] for v in db.versions(run_id) if v["iteration"] > last),
                  default=None)  # submitted, never closed (running, killed or failed)
    if pending is not None and not retry:
        raise SubmitError([f"run {run_id}: iteration {pending} was submitted and has not "
                           f"closed (`kopt wait {run_id}` says why); retry it with --retry, "
                           "or wait for it to close"])
    it = (pending or last) if retry else last + 1
    if it - 1 not in states:
        raise SubmitError([f"run {run_id}: --retry needs a submitted iteration to retry; "
                           f"iteration {last} is the sweep's own (submit without --retry)"])
    return it, states


def _plan_for(sweep: Sweep, db: Database, run_id: str, dc: str, it: int, st: IterState,
              sm: int | None, retry: bool) -> dict[str, Any]:
    """The plan a claim is held to: ``kopt propose``'s for this run and class when it names
    iteration ``it`` (not a retry), else the same scan from the state ``st`` before ``it``."""

    ctx = st.context()
    for p in (propose(sweep, db.root) if not retry else []):
        if p["run_id"] == run_id and p["device_class"] == dc and p["next_iteration"] == it:
            return p
    return {"sm": sm, "selected": ctx.selected,
            "catalog_scan": {a: [asdict(s) for s in v]
                             for a, v in catalog_scan(load_catalog(), sm, ctx).items()}}


def _sms(rec: dict[str, Any]) -> dict[str, int | None]:
    """Device class -> SM arch (None on a CPU device) of a run's ``runs`` record."""
    devices = stored_json(rec["devices"], "devices", list)
    return {d.get("device_class"): d.get("sm") for d in devices if isinstance(d, dict)}


def record(sweep: Sweep, root: Path, run_id: str, sources: list[Path], methods: list[str],
           note: str, submitter: str, retry: bool = False, max_tries: int | None = None,
           ideas: Sequence[str] = ()) -> tuple[int, int]:
    """Check a submission and record it: the claim against each class's plan (one line per
    broken rule, rule name first), the tries left (``max_tries``, default the sweep's
    ``submit.max_tries``; a ``retry`` without a ``note`` keeps the iteration's last one),
    then the sources, ``versions`` rows and ``provenance`` rows (each
    of ``ideas``, :func:`parse_idea`, and each claimed method as kind ``catalog``) stored.
    Returns the iteration it runs as and its try (1 for the first submission into it).

    Raises:
        SubmitError: a refused claim or idea, no tries left, no such run, a lost parent
            source.
    """
    cat = load_catalog()
    known = list(dict.fromkeys([("catalog", m) for m in methods if m in cat.methods]
                               + [parse_idea(i, cat) for i in ideas]))
    db = Database(root)
    rec = db.run_info(run_id)
    if rec is None:
        raise SubmitError([f"run {run_id}: {no_run(root, run_id)}"])
    it, states = _prior(db, run_id, retry)
    prior = states[it - 1]
    if retry and not note.strip():  # a fix of the same claim: its analysis still stands
        note = next((v["note"] or "" for v in reversed(db.versions(run_id))
                     if v["iteration"] == it), "")
    tries, limit = db.submit_tries(run_id, it), max_tries or sweep.submit.max_tries
    if tries >= limit:
        raise SubmitError([f"iteration {it} of run {run_id} already had "
                           f"{counted(tries, 'try', 'tries')} "
                           f"(--max-tries {limit}, sweep.yaml submit.max_tries "
                           f"{sweep.submit.max_tries}); submit into a new iteration "
                           "(without --retry) or raise --max-tries"])
    sm_of = _sms(rec)
    lines = []
    for dc, st in prior.items():
        check = check_claim_for_plan(methods, _plan_for(sweep, db, run_id, dc, it, st,
                                                        sm_of.get(dc), retry), reason=note)
        lines += [f"{r}" for r in check.refusals if f"{r}" not in lines]
    if lines:
        raise SubmitError(lines)
    space = sweep.space(rec["backend"])
    parents = _parents(db, run_id, it, prior, space, {})
    digest_of = {p: version_digest(space, p) for p in sources}  # once per source
    _refuse_repeats(space, digest_of, {p["source_hash"] for p in parents.values()},
                    {v["source_hash"]: v["try_no"] for v in db.versions(run_id)
                     if v["iteration"] == it})
    digests = _record(db, sweep, run_id, it, tries + 1, space, digest_of, methods, note,
                      submitter, next(iter(parents.values()))["candidate_id"])
    db.commit("provenance", sweep.name, run_id, [
        {"run_id": run_id, "sweep": sweep.name, "iteration": it, "try_no": tries + 1,
         "source_hash": h, "kind": kind, "ref": ref, "created_at": now()}
        for h in digests for kind, ref in known])
    return it, tries + 1


def _refuse_repeats(space: Space, digest_of: dict[Path, str], parents: set[str],
                    tried: dict[str, int] | None = None) -> None:
    """Refuse a version whose source is its parent's, or the sweep's own (the same source
    digest, so the same candidate ids: nothing new to measure, and its rows would be read
    as the parent's), or one an earlier try of the same iteration submitted (``tried``:
    source digest -> try number; its candidates are measured already: the try would build
    and run nothing and still use up a try); ``digest_of``: each submitted source's
    :func:`version_digest`.

    Raises:
        SubmitError: one line per such version.
    """
    known, tried = parents | {space_digest(space)}, tried or {}
    lines = [f"--source {p}: identical to its parent's source (digest {d}); change the kernel "
             "(a submitted version must differ from the version it derives from)"
             if d in known else
             f"--source {p}: identical to a version of try {tried[d]} of this iteration "
             f"(digest {d}): it is measured already (`kopt wait` has its verdict); change the "
             "kernel" for p, d in digest_of.items() if d in known or d in tried]
    if lines:
        raise SubmitError(lines)


def _parents(db: Database, run_id: str, it: int, prior: dict[str, IterState], space: Space,
             pspace: dict[str, Space]) -> dict[str, dict[str, Any]]:
    """Device class -> the lineage row of the best candidate of iteration ``it - 1``
    (the parent of iteration ``it``), each parent's source space added to ``pspace``.

    Raises:
        SubmitError: a class has no best candidate (its baseline failed).
    """
    parents = {}
    best = {dc: (st.best or {}).get("candidate_id", "") for dc, st in prior.items()}
    rows = db.candidate_lineages(run_id, sorted(set(best.values())))
    for dc, cid in best.items():
        if cid not in rows:
            raise SubmitError([f"run {run_id}: iteration {it - 1} on {dc} has no best "
                               "candidate to derive from (its baseline failed)"])
        parents[dc] = _lineage_row(dict(rows[cid]), db, space, pspace, {})
    return parents


def load(sweep: Sweep, root: Path, run_id: str, it: int, try_no: int) -> Submitted:
    """The strategy that runs try ``try_no`` of iteration ``it`` of ``run_id``, as
    :func:`record` stored it (its ``versions`` rows and the run's states).

    Raises:
        SubmitError: no such try recorded, a lost parent source.
    """
    db = Database(root)
    rec = db.run_info(run_id)
    states = named_states(db, run_id)
    rows = [v for v in db.versions(run_id) if v["iteration"] == it and v["try_no"] == try_no]
    if rec is None or not rows or it - 1 not in states:
        raise SubmitError([f"run {run_id}: no try {try_no} of iteration {it} recorded in "
                           f"{root}; submit it with `kopt submit`"])
    space, pspace = sweep.space(rec["backend"]), {}
    parents = _parents(db, run_id, it, states[it - 1], space, pspace)
    # every earlier candidate the contests may re-measure, and the sources of all, read at
    # once: one query per candidate and source made a retry's start grow with its tries
    lineage = db.candidate_lineages(run_id, sorted(_contested(db, run_id, it, states,
                                                              try_no > 1)))
    texts = db.sources(sorted({v["source_hash"] for v in rows} | {
        r["source_hash"] for r in lineage.values() if r["submitter"] not in (None, "sweep")}))
    versions = [Version(v["name"], stored_source(db, space, v["source_hash"],
                                                 texts.get(v["source_hash"])).source,
                        v["source_hash"], [m for m in (v["claimed_methods"] or "").split(",") if m],
                        v["note"] or "", v["submitter"]) for v in rows]
    sub = Submitted(it, versions, states[it - 1], parents, pspace)
    for cid, row in sorted(lineage.items()):
        sub.rebuild[cid] = _lineage_row(row, db, space, pspace, texts)
    return sub


def planned_ids(sweep: Sweep, root: Path, run_id: str, it: int, try_no: int) -> Submitted:
    """The strategy of try ``try_no`` of iteration ``it`` (:func:`load`) with ``created``
    filled before it runs: per version the candidate ids the run will store, computed as
    the strategy plans them (kopt.loop.submitted.version_candidates, on the SM arch of
    each of the run's device classes)."""
    rec = Database(root).run_info(run_id) or {"devices": "[]", "backend": sweep.primary}
    sub = load(sweep, root, run_id, it, try_no)
    space, cat = sweep.space(rec["backend"]), load_catalog()
    for sm in dict.fromkeys(_sms(rec).values()):
        for v in sub.versions:
            made = sub.created[v.source_hash]
            made += [c.candidate_id for c in version_candidates(space, cat, sm, v)
                     if c.candidate_id not in made]
    return sub


def _lineage_row(row: dict[str, Any], db: Database, space: Space, pspace: dict[str, Space],
                 texts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A candidate's lineage row (Database.candidate_lineages) with its source digest
    filled in, its source's space added to ``pspace`` (``texts``: the sources already
    read, by digest)."""
    src = row["source_hash"] or space_digest(space)
    row["source_hash"] = src
    if src not in pspace:
        pspace[src] = (space if row["submitter"] in (None, "sweep")
                       else stored_source(db, space, src, texts.get(src)))
    return row


def _contested(db: Database, run_id: str, it: int, states: dict[int, dict[str, IterState]],
               retry: bool) -> set[str]:
    """Earlier candidates a submitted iteration's contests may re-measure: the first
    baseline and every iteration's best (the loop's closing contest: each iteration's own
    winner, as stored, and the best the closing named in its place, ``states``) and, on a
    retry, the iteration's correct candidates of earlier tries (its own contest). The
    closing re-measures the stored winners (kopt.loop.guided.NcuLoop.winners): with the
    named best alone, an iteration winner the closing had passed over was "not at hand"
    and dropped from every later closing contest."""
    raw = [IterState.from_json(js) for _it, _dc, js in db.iteration_states(run_id)]
    out = {h.best["candidate_id"] for per in states.values() for h in per.values() if h.best}
    out |= {h.best["candidate_id"] for h in raw if h.best}
    out |= {h.baseline["candidate_id"] for h in states.get(1, {}).values() if h.baseline}
    if retry:
        out |= {r["candidate_id"] for r in db.lineage_rows(run_id)
                if r["iteration"] == it and r["status"] == Status.OK}
    return out


def _record(db: Database, sweep: Sweep, run_id: str, it: int, try_no: int, space: Space,
            digest_of: dict[Path, str], methods: list[str], note: str, submitter: str,
            parent_id: str) -> list[str]:
    """Store the sources (``digest_of``: each one's digest) and ``versions`` rows of one
    try; returns the sources' digests."""
    srows, vrows = [], []
    for path, known in digest_of.items():
        _, digest, text = store_source(db.root, space, path, known)
        srows.append({"source_hash": digest, "name": path.name, "text": text,
                      "created_at": now()})
        vrows.append({"run_id": run_id, "sweep": sweep.name, "iteration": it,
                      "try_no": try_no, "source_hash": digest, "name": path.name,
                      "parent_id": parent_id, "submitter": submitter,
                      "claimed_methods": ",".join(methods), "note": note, "created_at": now()})
    db.commit("sources", sweep.name, run_id, srows)
    db.commit("versions", sweep.name, run_id, vrows)
    return [v["source_hash"] for v in vrows]


@dataclasses.dataclass
class Node:
    """One node of a run's version tree: the candidates of one source in one iteration."""

    key: tuple[str, int, str]  # (device class, iteration, source hash)
    label: str
    methods: str
    parent: str | None = None  # the parent candidate id
    best: str | None = None  # its fastest correct candidate (speedup over the parent)
    median_ms: float | None = None  # the best's, geometric mean over the problem sizes
    speedup: float | None = None  # the best's over the parent, geometric mean over the sizes
    statuses: dict[str, int] = dataclasses.field(default_factory=dict)
    members: list[str] = dataclasses.field(default_factory=list)
    order: tuple[int, int, str] = (0, 0, "")  # (iteration, try, name): the nodes' order
    # candidate id -> problem size (dims JSON) -> (median ms, speedup) of its correct rows
    figures: dict[str, dict[str, tuple[float, float]]] = dataclasses.field(
        default_factory=dict)
    sizes: set[str] = dataclasses.field(default_factory=set)  # every size the node ran
    triples: dict[str, str] = dataclasses.field(default_factory=dict)  # candidate -> methods
    damaged: int = 0  # ok rows left out: a median or speedup that is not a positive number
    named: bool = False  # its best is the loop's named best (kopt best's), not its fastest
    # the review gate's verdict on the node (:func:`_verdicts`): accepted, rejected: REASON,
    # not the iteration's winner, failed; "" where the iteration has no review row
    verdict: str = ""

    def line(self) -> str:
        """The node as one line of text."""
        st = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        st += f"; {self.verdict}" if self.verdict else ""
        over = "its parent" if self.parent else "its iteration's baseline"  # a root: no parent
        fig = (f"{'named best' if self.named else 'best'} {self.best} median "
               f"{self.median_ms:.4g} ms, {self.speedup:.3g}x over {over}{self._over()}"
               if self.best else self._none())
        return f"{self.label} [{self.methods or 'no methods'}]: {fig}; {st}"

    def _none(self) -> str:
        """Why the node has no best: no correct candidate, or correct rows
        whose figures were left out as damaged."""
        if not self.damaged:
            return "no correct candidate"
        rows = "row" if self.damaged == 1 else "rows"
        return (f"no correct candidate with usable figures ({self.damaged} ok {rows} left out: "
                "a median or speedup that is not a positive number, damaged)")

    def _over(self) -> str:
        """`` (geometric mean of N sizes)`` when the node ran more than one problem size."""
        n = len(self.figures.get(self.best or "", {}))
        return f" (geometric mean of {n} sizes)" if n > 1 else ""

    def caption(self) -> str:
        """The node as the report's lineage picture labels it: its name and try, methods,
        the best median (ms) and speedup over its parent (a root: over its iteration's
        baseline; both geometric means over the problem sizes), and its status counts (one
        line each)."""
        head = self.label.split(", source ")[0].split(" (source ")[0]
        head = head + ")" if "(" in head and not head.endswith(")") else head
        fig = (f"{self.median_ms:.4g} ms, {self.speedup:.3g}x over "
               + ("parent" if self.parent else "baseline") + self._over().replace(
                   " (geometric mean of", " (geo. mean,").replace(" sizes)", " sizes)")
               if self.best else self._none().split(" (")[0])
        st = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        return "\n".join([head, self.methods or "no methods",
                          ("named best: " if self.named else "") + fig, st])


def lineage(root: Path, run_id: str) -> list[Node]:
    """The version tree of ``run_id`` as nodes, by class, iteration, try and name (parents
    before children): one per (device class, iteration, source): a sweep's iteration (its
    methods: the winner's triple) or a submitted version (its claimed methods); a
    re-measured parent is not a node again. A node's best is its fastest correct candidate
    (:func:`_settle`), except in the node that holds the loop's named best of its class
    (its closing contest's pick, as ``kopt best`` names it): that one shows the named best
    (``Node.named``).

    Raises:
        SubmitError: no such run.
    """
    db = Database(root)
    rows = complete_rows(db.lineage_rows(run_id), ("iteration", "device_class"),
                         f"candidate rows of run {run_id}")
    if not rows:
        raise SubmitError([f"run {run_id}: no candidates in {root}"])
    names = {(v["iteration"], v["source_hash"]): (v["name"], v["try_no"])
             for v in db.versions(run_id)}
    base_of = {(r["device_class"], r["iteration"]): r["candidate_id"]
               for r in rows if r["is_baseline"]}
    nodes: dict[tuple[str, int, str], Node] = {}
    for r in rows:
        dc, it = r["device_class"], r["iteration"]
        if r["is_baseline"] and it > 1:
            continue  # the parent, re-measured as the iteration's baseline
        key = (dc, it, r["source_hash"] or "")
        if key not in nodes:
            name, tr = names.get((it, key[2]), (None, None))
            label = (f"it {it} {name} (try {tr}, {r['submitter']}, source {key[2][:8]})"
                     if name else f"it {it} sweep (source {key[2][:8]})")
            nodes[key] = Node(key, label, r["claimed_methods"] or "",
                              base_of.get((dc, it)) if it > 1 else None,
                              order=(it, tr or 0, name or ""))
        _take(nodes[key], r)
    named = db.named_best(run_id)
    out = sorted(nodes.values(), key=lambda n: (n.key[0], n.order))
    for n in out:
        _settle(n, named.pop(n.key[0], None) if named.get(n.key[0]) in n.figures else None)
    _verdicts(db, run_id, out)
    return out


def _verdicts(db: Database, run_id: str, nodes: list[Node]) -> None:
    """Each node's :attr:`Node.verdict` from its iteration's ``reviews`` row (the review
    gate's judgement of the iteration's winner, kopt.loop.review): ``accepted`` (it holds
    the winner, which became the next parent), ``rejected: REASON`` (it holds the winner
    the gate turned down), ``not the iteration's winner`` or ``failed`` (no correct
    candidate); nothing for an iteration with no review row (closed before the gate)."""
    reviews: dict[tuple[str, int], dict[str, Any]] = {}
    for it in sorted({n.key[1] for n in nodes}):
        for r in db.reviews(run_id, it):
            reviews[(r["device_class"], it)] = r
    for n in nodes:
        rv = reviews.get((n.key[0], n.key[1]))
        if rv is None:
            continue
        if rv["candidate_id"] not in n.members:
            n.verdict = "not the iteration's winner" if n.best else "failed"
        elif rv["accepted"]:
            n.verdict = "accepted"
        else:
            why = stored_json(rv["reasons"], "reasons", list) or ["no reason stored"]
            n.verdict = f"rejected: {why[0]}"


def _take(n: Node, r: dict[str, Any]) -> None:
    """Count row ``r`` (one candidate on one problem size) into node ``n``."""
    n.statuses[r["status"]] = n.statuses.get(r["status"], 0) + 1
    if r["candidate_id"] not in n.members:
        n.members.append(r["candidate_id"])
    n.sizes.add(r.get("dims") or "")
    # a measured median and speedup are positive numbers; a row edited by hand or written
    # by another tool with anything else is left out of the node's figures (a negative
    # median once made `kopt lineage` raise ValueError)
    if r["status"] == Status.OK and not (_positive(r["speedup"]) and _positive(r["median_ms"])):
        n.damaged += 1
    elif r["status"] == Status.OK:
        n.figures.setdefault(r["candidate_id"], {})[r.get("dims") or ""] = (
            r["median_ms"], r["speedup"])
        n.triples[r["candidate_id"]] = ",".join(
            m for m in (r["compute_method"], r["memory_method"], r["latency_method"]) if m)


def _positive(x: Any) -> bool:
    """Whether ``x`` is a finite number above 0."""
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def _settle(n: Node, named: str | None = None) -> None:
    """The node's best: ``named`` (the loop's named best, one of the node's correct
    candidates) when given; else among its candidates correct on the most of its problem
    sizes, the one with the highest geometric mean speedup over its parent across those
    sizes (kopt.core.compare.geo_mean), so that nodes run on the same sizes compare like for
    like; its median is the geometric mean of its medians over the same sizes."""
    if not n.figures:
        return
    most = max(len(f) for f in n.figures.values())
    cid, figs = (named, n.figures[named]) if named in n.figures else max(
        ((c, f) for c, f in n.figures.items() if len(f) == most),
        key=lambda cf: (geo_mean(s for _, s in cf[1].values()), cf[0]))
    n.best, n.named = cid, named in n.figures
    n.median_ms = geo_mean(m for m, _ in figs.values())
    n.speedup = geo_mean(s for _, s in figs.values())
    if n.label.startswith(f"it {n.key[1]} sweep"):
        n.methods = n.triples.get(cid, "")  # a sweep's node: its best's triple
def lineage_order(nodes: list[Node]) -> list[tuple[int, Node, Node | None]]:
    """The tree depth first: ``(depth, node, the node holding its parent or None)``, each
    node under the node that holds its parent candidate."""
    owner: dict[str, Node] = {}
    for n in nodes:
        for c in n.members:
            owner.setdefault(c, n)
    kids: dict[Any, list[Node]] = {}
    for n in nodes:
        up = owner.get(n.parent) if n.parent else None
        kids.setdefault(up.key if up else None, []).append(n)
    out: list[tuple[int, Node, Node | None]] = []
    _walk(kids, None, None, 0, out)
    return out


def _walk(kids: dict[Any, list[Node]], up: Node | None, key: Any, depth: int,
          out: list[tuple[int, Node, Node | None]]) -> None:
    for n in kids.get(key, []):
        out.append((depth, n, up))
        _walk(kids, n, n.key, depth + 1, out)


# the caption under the tree: which candidate a node's "best" is
LINEAGE_CAPTION = ("best: the node's fastest correct candidate over its parent; named best: "
                   "the loop's pick (its closing contest's, as `kopt best` names it), in the "
                   "node that holds it; speedup: over its parent re-measured in the node's "
                   "own iteration (a first iteration's: over its baseline), not the ratio of "
                   "two nodes' medians; accepted / rejected: the review gate's verdict on the "
                   "iteration's winner, in the node that holds it")


def node_record(node: Node) -> dict[str, Any]:
    """One node of the version tree as `kopt lineage --format json` prints it: its key
    (``device_class``, ``iteration``, ``source_hash``), ``label``, claimed ``methods``,
    ``parent`` candidate, ``best`` candidate (``named``: the loop's named best), its
    ``median_ms`` (geometric mean over the problem sizes, ms) and ``speedup`` over the
    parent, ``statuses`` (status -> count), ``members`` (candidate ids) and ``verdict``
    (the review gate's, :attr:`Node.verdict`; None where none was stored)."""
    dc, it, src = node.key
    return {"device_class": dc, "iteration": it, "source_hash": src, "label": node.label,
            "methods": node.methods, "parent": node.parent, "best": node.best,
            "named": node.named, "median_ms": node.median_ms, "speedup": node.speedup,
            "statuses": dict(sorted(node.statuses.items())), "members": list(node.members),
            "verdict": node.verdict or None}


def lineage_text(nodes: list[Node]) -> list[str]:
    """The tree as indented lines: each node under the node that holds its parent, then
    :data:`LINEAGE_CAPTION` (which candidate each node's best is)."""
    return ["  " * d + ("└─ " if d else "") + n.line()
            for d, n, _ in lineage_order(nodes)] + [LINEAGE_CAPTION]


def open_run(root: Path, run_id: str) -> Sweep:
    """The sweep of stored run ``run_id``, checked to be unchanged since the run and free
    (no other process writing it).

    Raises:
        SubmitError: no such run; its sweep folder does not load.
        kopt.store.files.RunLocked: another process is writing the run.
        kopt.driver.sweep.SweepError: the sweep changed since the run.
    """
    # lazy: kopt.driver.checks attaches to Ray (kopt.run.cluster); a submission is checked
    # before Ray starts
    from kopt.driver.checks import resumable_run

    info = Database(root).run_info(run_id)
    if info is None:
        raise SubmitError([f"run {run_id}: {no_run(root, run_id)}"])
    try:
        sweep = load_sweep(info["sweep_dir"])
    except SpecError as e:
        raise SubmitError([f"run {run_id}: its sweep {info['sweep_dir']} does not load: "
                           f"{e}"]) from None
    RunLock(root, run_id).check()
    resumable_run(root, run_id, sweep)
    return sweep


def run_submission(root: Path, run_id: str, sources: list[Path], methods: list[str], note: str,
                   submitter: str, retry: bool = False, max_tries: int | None = None,
                   observers: list[Any] | None = None, address: str | None = None,
                   ideas: Sequence[str] = ()) -> tuple[Submitted, Any]:
    """Check, record (:func:`record`; ``ideas``: the sources of its idea, the
    ``provenance`` table) and run a submission into ``run_id``
    (:func:`run_recorded`); returns the strategy (``created``: source digest -> candidate
    ids) and the run's summary (kopt.driver.sweep.RunSummary).

    Raises:
        SubmitError: as :func:`record`, :func:`open_run`.
        kopt.store.files.RunLocked: another process is writing the run.
        kopt.driver.sweep.SweepError: the sweep changed since the run.
    """

    sweep = open_run(root, run_id)
    with RunLock(root, run_id):  # from the record to the run: a refused writer records nothing
        it, try_no = record(sweep, root, run_id, sources, methods, note, submitter, retry,
                            max_tries, ideas)
        return run_recorded(root, run_id, it, try_no, observers, address, sweep)


def run_recorded(root: Path, run_id: str, it: int, try_no: int,
                 observers: list[Any] | None = None, address: str | None = None,
                 sweep: Sweep | None = None, queue: bool = False) -> tuple[Submitted, Any]:
    """Run try ``try_no`` of iteration ``it`` (recorded by :func:`record`) on the attached
    (or an embedded local) Ray, as kopt.driver.sweep.Driver runs any iteration of the loop;
    returns the strategy and the run's summary. ``queue``: on the warm kopt service's
    devices (kopt.run.service) at ``address``, or the one ``kopt serve start`` recorded,
    as ``kopt sweep --queue`` runs; its Ray head's token is used for its address.

    Raises:
        SubmitError: as :func:`load`, :func:`open_run`.
        kopt.store.files.RunLocked: another process is writing the run.
        kopt.run.service.ServiceError: ``queue`` and no service runs there, or it runs
            another backend than the run's.
    """
    # lazy: Ray and the driver only when the iteration runs, after its claims are checked
    # without them
    from kopt.driver.sweep import Driver
    from kopt.run.cluster import ensure_ray
    from kopt.run.service import queue_backend, recorded_address, service_config, use_token
    from kopt.run.signals import terminate

    sweep = sweep or open_run(root, run_id)
    sub = load(sweep, root, run_id, it, try_no)
    if queue and address is None:
        address = recorded_address()
    if address is not None:  # kopt's own service's head asks for its token
        use_token(address)
    ensure_ray(address)
    svc = service_config(str(address)) if queue else None
    backend = queue_backend(svc, _run_backend(root, run_id)) if svc is not None else "auto"
    if threading.current_thread() is threading.main_thread():
        # SIGTERM stops it as Ctrl-C does: what was measured flushed, the run interrupted
        signal.signal(signal.SIGTERM, terminate)
    summary = Driver(sweep, root, backend, resume=run_id, observers=observers, submission=sub,
                     queue=svc, cpu_devices=int(svc.get("cpu_devices") or 1) if svc else 1,
                     attach={"address": address, "cluster": None}).run()
    return sub, summary


def _run_backend(root: Path, run_id: str) -> str:
    """The backend run ``run_id`` was made on (``auto`` when its record does not say)."""
    rec = run_record(root, run_id) or {}
    return str(rec.get("backend") or "auto")


def detach(root: Path, run_id: str, it: int, try_no: int, address: str | None = None,
           queue: bool = False) -> Path:
    """Run try ``try_no`` of iteration ``it`` in a background process of its own session
    (``python -m kopt.cli.main run-submitted``, which outlives this one); returns its log file,
    ``STORE/submit-logs/RUN_ID-itN-tryK.log``. Next to it, ``.json`` names the process
    (``pid``, ``host``) and, once it ends, its exit status ``rc`` (what `kopt wait` reads)."""
    log = job_file(root, run_id, it, try_no, ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "kopt.cli.main", "run-submitted", run_id, "--iteration", str(it),
           "--try", str(try_no), "--store", str(Path(root).absolute())]
    with open(log, "ab") as f:
        cmd += (["--address", address] if address else []) + (["--queue"] if queue else [])
        p = subprocess.Popen(cmd, stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    write_record(job_file(root, run_id, it, try_no, ".json"),
                 {"pid": p.pid, "host": platform.node(), "log": str(log.absolute())})
    return log


def job_file(root: Path, run_id: str, it: int, try_no: int, suffix: str) -> Path:
    """``STORE/submit-logs/RUN_ID-itN-tryK`` + ``suffix``: a detached try's log / record."""
    return Path(root) / "submit-logs" / f"{run_id}-it{it}-try{try_no}{suffix}"


def mark_exit(root: Path, run_id: str, it: int, try_no: int, rc: int) -> None:
    """Write a detached try's exit status ``rc`` into its record (:func:`detach`)."""
    try:
        rec = read_try(root, run_id, it, try_no)
    except RecordError:
        rec = None
    old = rec.model_dump(exclude_none=True) if rec is not None else {}
    write_record(job_file(root, run_id, it, try_no, ".json"), {**old, "rc": rc})


class TryRecord(RecordModel):
    """A detached try's record (:func:`detach`): its process, its log, once it ended its
    exit status."""

    rc: int | None = None  # before pid: pid's check reads it
    pid: int | None = Field(None, ge=1, le=MAX_PID, validate_default=True)
    host: str | None = None
    log: str | None = None

    @field_validator("pid")
    @classmethod
    def _pid_or_rc(cls, pid: int | None, info: ValidationInfo) -> int | None:
        """A record with neither a pid nor an exit status cannot say whether its try
        still runs (`kopt wait` then said the iteration was not closed)."""
        if pid is None and info.data.get("rc") is None:
            raise ValueError("missing: the record names neither the try's process (pid) "
                             "nor its exit status (rc)")
        return pid


def read_try(root: Path, run_id: str, it: int, try_no: int) -> TryRecord | None:
    """Try ``try_no`` of iteration ``it``'s record (None: it was not detached).

    Raises:
        RecordError: the record is damaged (one line naming the file, the field and the fix).
    """
    return read_record(job_file(root, run_id, it, try_no, ".json"), TryRecord,
                       "remove it, and if its process is gone run the try again with "
                       "`kopt submit --retry`")
