"""``kopt submit`` and ``kopt lineage`` (issue 15): new kernel versions into a stored run,
their claims held to the catalog's rules (kopt.claims) first, and the run's version tree.

A submission is one more iteration of the run (or, with ``retry``, another try at its last
one, up to ``max_tries``), planned by kopt.strategy.submitted and run by
kopt.pipeline.Driver as any iteration of the NCU loop. The sources are stored in the store
(the ``sources`` table, and a copy under ``STORE/source-files/HASH/NAME`` that builds read);
each try is a ``versions`` row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kopt.catalog import load_catalog
from kopt.claims import catalog_scan, check_claim_for_plan
from kopt.database import Database
from kopt.expand import space_digest
from kopt.loop import IterState
from kopt.spec import Space, Sweep
from kopt.store import no_run, now, stored_json
from kopt.strategy.submitted import Submitted, Version, version_space

MAX_TRIES = 3  # submissions per iteration (the first and two fixes), `--max-tries`
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx")


class SubmitError(ValueError):
    """A submission refused before anything ran; ``lines``: one per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


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
    raise SubmitError([f"--source {source}: no such file or folder; pass the new version's "
                       "source file (or a folder of versions)"])


def store_source(root: Path, space: Space, path: Path) -> tuple[Path, str, str]:
    """Copy ``path`` into the store (``root/source-files/HASH/NAME``); returns the copy,
    its digest (as a candidate id counts it) and its text.

    Raises:
        SubmitError: the file cannot be read as UTF-8 text, or its prototype is not the
            sweep's (the harness calls every version with the sweep's arguments).
    """
    from kopt.contract import ContractError, parse_signature_file, read_text

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
    digest = space_digest(version_space(space, path))
    copy = root / "source-files" / digest / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not copy.exists():
        copy.write_text(text)
    return copy, digest, text


def stored_source(db: Database, space: Space, source_hash: str) -> Space:
    """The space a stored source (a ``sources`` row) is built from, its copy re-written
    under the store when it is missing.

    Raises:
        SubmitError: the store holds no source with that digest.
    """
    row = db.source(source_hash)
    if row is None:
        raise SubmitError([f"{db.root}: no stored source {source_hash} (table sources); "
                           "the parent's source is lost, submit against a newer run"])
    copy = db.root / "source-files" / source_hash / row["name"]
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(row["text"])
    return version_space(space, copy)


def _prior(db: Database, run_id: str, retry: bool
           ) -> tuple[int, dict[int, dict[str, IterState]]]:
    """The iteration a submission runs as, and the run's states (iteration -> class ->
    state; the one before it is there)."""
    states: dict[int, dict[str, IterState]] = {}
    for it, dc, js in db.iteration_states(run_id):
        states.setdefault(it, {})[dc] = IterState.from_json(js)
    if not states:
        raise SubmitError([f"run {run_id}: no closed iteration to build on; wait for the "
                           "run to finish its first iteration (`kopt sweep`)"])
    last = max(states)
    it = last if retry else last + 1
    if it - 1 not in states:
        raise SubmitError([f"run {run_id}: --retry needs a submitted iteration to retry; "
                           f"iteration {last} is the sweep's own (submit without --retry)"])
    return it, states


def _plan_for(sweep: Sweep, db: Database, run_id: str, dc: str, it: int, st: IterState,
              sm: int | None, retry: bool) -> dict[str, Any]:
    """The plan a claim is held to: ``kopt propose``'s for this run and class when it names
    iteration ``it`` (not a retry), else the same scan from the state ``st`` before ``it``."""
    from kopt.propose import propose

    ctx = st.context()
    space = sweep.space(db.run_info(run_id)["backend"])
    # propose() plans with the sweep's -D realizations: not once a submitted method is selected
    usable = not retry and set(ctx.selected) <= set(space.methods)
    for p in (propose(sweep, db.root) if usable else []):
        if p["run_id"] == run_id and p["device_class"] == dc and p["next_iteration"] == it:
            return p
    return {"sm": sm, "selected": ctx.selected,
            "catalog_scan": {a: [asdict(s) for s in v]
                             for a, v in catalog_scan(load_catalog(), sm, ctx).items()}}


def prepare(sweep: Sweep, root: Path, run_id: str, sources: list[Path], methods: list[str],
            note: str, submitter: str, retry: bool = False, max_tries: int = MAX_TRIES
            ) -> Submitted:
    """Check a submission and record it: the claim against each class's plan (one line per
    broken rule, rule name first), the tries left, then the sources and ``versions`` rows
    stored. Returns the strategy that runs it.

    Raises:
        SubmitError: a refused claim, no tries left, no such run, a lost parent source.
    """
    db = Database(root)
    rec = db.run_info(run_id)
    if rec is None:
        raise SubmitError([f"run {run_id}: {no_run(root, run_id)}"])
    it, states = _prior(db, run_id, retry)
    prior = states[it - 1]
    tries = db.submit_tries(run_id, it)
    if tries >= max_tries:
        raise SubmitError([f"iteration {it} of run {run_id} already had {tries} tries "
                           f"(--max-tries {max_tries}); submit into a new iteration "
                           "(without --retry) or raise --max-tries"])
    devices = stored_json(rec["devices"], "devices", list)
    sm_of = {d.get("device_class"): d.get("sm") for d in devices if isinstance(d, dict)}
    lines = []
    for dc, st in prior.items():
        check = check_claim_for_plan(methods, _plan_for(sweep, db, run_id, dc, it, st,
                                                        sm_of.get(dc), retry), reason=note)
        lines += [f"{r}" for r in check.refusals if f"{r}" not in lines]
    if lines:
        raise SubmitError(lines)
    space = sweep.space(rec["backend"])
    parents, pspace = {}, {}
    for dc, st in prior.items():
        row = _lineage_row(db, run_id, (st.best or {}).get("candidate_id", ""), space, pspace)
        if row is None:
            raise SubmitError([f"run {run_id}: iteration {it - 1} on {dc} has no best "
                               "candidate to derive from (its baseline failed)"])
        parents[dc] = row
    sub = _record(db, sweep, run_id, it, tries + 1, space, sources, methods, note,
                  submitter, prior, parents, pspace)
    for cid in _contested(db, run_id, it, states, retry):
        row = _lineage_row(db, run_id, cid, space, pspace)
        if row is not None:
            sub.rebuild[cid] = row
    return sub


def _lineage_row(db: Database, run_id: str, cid: str, space: Space,
                 pspace: dict[str, Space]) -> dict[str, Any] | None:
    """Candidate ``cid``'s lineage row, its source's space added to ``pspace``."""
    row = db.candidate_lineage(run_id, cid)
    if row is None:
        return None
    src = row["source_hash"] or space_digest(space)
    row["source_hash"] = src
    if src not in pspace:
        pspace[src] = (space if row["submitter"] in (None, "sweep")
                       else stored_source(db, space, src))
    return row


def _contested(db: Database, run_id: str, it: int, states: dict[int, dict[str, IterState]],
               retry: bool) -> set[str]:
    """Earlier candidates a submitted iteration's contests may re-measure: the first
    baseline and every iteration's best (the loop's closing contest) and, on a retry, the
    iteration's correct candidates of earlier tries (its own contest)."""
    out = {h.best["candidate_id"] for per in states.values() for h in per.values() if h.best}
    out |= {h.baseline["candidate_id"] for h in states.get(1, {}).values() if h.baseline}
    if retry:
        out |= {r["candidate_id"] for r in db.lineage_rows(run_id)
                if r["iteration"] == it and r["status"] == "ok"}
    return out


def _record(db: Database, sweep: Sweep, run_id: str, it: int, try_no: int, space: Space,
            sources: list[Path], methods: list[str], note: str, submitter: str,
            prior: dict[str, IterState], parents: dict[str, dict[str, Any]],
            pspace: dict[str, Space]) -> Submitted:
    """Store the sources and ``versions`` rows; the strategy that runs them."""
    versions, srows, vrows = [], [], []
    parent_id = next(iter(parents.values()))["candidate_id"]
    for path in sources:
        copy, digest, text = store_source(db.root, space, path)
        versions.append(Version(path.name, copy, digest, methods, note, submitter))
        srows.append({"source_hash": digest, "name": path.name, "text": text,
                      "created_at": now()})
        vrows.append({"run_id": run_id, "sweep": sweep.name, "iteration": it,
                      "try_no": try_no, "source_hash": digest, "name": path.name,
                      "parent_id": parent_id, "submitter": submitter,
                      "claimed_methods": ",".join(methods), "note": note, "created_at": now()})
    db.commit("sources", sweep.name, run_id, srows)
    db.commit("versions", sweep.name, run_id, vrows)
    return Submitted(it, versions, prior, parents, pspace)


@dataclasses.dataclass
class Node:
    """One node of a run's version tree: the candidates of one source in one iteration."""

    key: tuple[str, int, str]  # (device class, iteration, source hash)
    label: str
    methods: str
    parent: str | None = None  # the parent candidate id
    best: str | None = None  # its fastest correct candidate (speedup over the parent)
    median_ms: float | None = None
    speedup: float | None = None
    statuses: dict[str, int] = dataclasses.field(default_factory=dict)
    members: list[str] = dataclasses.field(default_factory=list)
    order: tuple[int, int, str] = (0, 0, "")  # (iteration, try, name): the nodes' order

    def line(self) -> str:
        """The node as one line of text."""
        st = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        fig = (f"best {self.best} median {self.median_ms:.4g} ms, {self.speedup:.3g}x over "
               f"its parent" if self.best else "no correct candidate")
        return f"{self.label} [{self.methods or 'no methods'}]: {fig}; {st}"


def lineage(root: Path, run_id: str) -> list[Node]:
    """The version tree of ``run_id`` as nodes, by class, iteration, try and name (parents
    before children): one per (device class, iteration, source): a sweep's iteration (its
    methods: the winner's triple) or a submitted version (its claimed methods); a
    re-measured parent is not a node again.

    Raises:
        SubmitError: no such run.
    """
    db = Database(root)
    rows = db.lineage_rows(run_id)
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
    return sorted(nodes.values(), key=lambda n: (n.key[0], n.order))


def _take(n: Node, r: dict[str, Any]) -> None:
    """Count row ``r`` into node ``n`` (its fastest correct candidate is the node's best)."""
    n.statuses[r["status"]] = n.statuses.get(r["status"], 0) + 1
    n.members.append(r["candidate_id"])
    if r["status"] == "ok" and r["speedup"] is not None and (
            n.speedup is None or r["speedup"] > n.speedup):
        n.best, n.median_ms, n.speedup = r["candidate_id"], r["median_ms"], r["speedup"]
        if n.label.startswith(f"it {n.key[1]} sweep"):
            n.methods = ",".join(m for m in (r["compute_method"], r["memory_method"],
                                             r["latency_method"]) if m)


def lineage_text(nodes: list[Node]) -> list[str]:
    """The tree as indented lines: each node under the node that holds its parent."""
    owner = {}
    for n in nodes:
        for c in n.members:
            owner.setdefault(c, n.key)
    kids: dict[Any, list[Node]] = {}
    for n in nodes:
        kids.setdefault(owner.get(n.parent) if n.parent else None, []).append(n)
    out: list[str] = []
    _walk(kids, None, 0, out)
    return out


def _walk(kids: dict[Any, list[Node]], key: Any, depth: int, out: list[str]) -> None:
    for n in kids.get(key, []):
        out.append("  " * depth + ("└─ " if depth else "") + n.line())
        _walk(kids, n.key, depth + 1, out)


def run_submission(root: Path, run_id: str, sources: list[Path], methods: list[str], note: str,
                   submitter: str, retry: bool = False, max_tries: int = MAX_TRIES,
                   observers: list[Any] | None = None, address: str | None = None
                   ) -> tuple[Submitted, Any]:
    """Check, record and run a submission into ``run_id`` (see :func:`prepare`) on the
    attached (or an embedded local) Ray; returns the strategy (``created``: source digest ->
    candidate ids) and the run's summary (kopt.pipeline.RunSummary).

    Raises:
        SubmitError: as :func:`prepare`; the run's sweep folder cannot be loaded.
        kopt.store.RunLocked: another process is writing the run.
        kopt.pipeline.SweepError: the sweep changed since the run.
    """
    from kopt.pipeline import Driver, ensure_ray, resumable_run
    from kopt.spec import SpecError, load_sweep
    from kopt.store import RunLock

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
    sub = prepare(sweep, root, run_id, sources, methods, note, submitter, retry, max_tries)
    ensure_ray(address)
    summary = Driver(sweep, root, resume=run_id, observers=observers, submission=sub).run()
    return sub, summary
