"""The source a stored candidate was measured from: the one answer every product gives
(``kopt report``'s best-*.cu/.cpp, ``kopt export``'s, ``kopt port``'s committed file and
``kopt propose``'s ``best_source``).

Every run stores each source it measures in the ``sources`` table, keyed by its digest
(:func:`kopt.core.expand.space_digest`): the sweep's own source when the run starts, and
each version ``kopt submit`` sends in; each candidate row names its source's digest
(``source_hash``) and who submitted it (``submitter``: ``sweep`` for the sweep's own). The
measured text is that stored copy. Only a store older than those columns (or one whose
``sources`` table was lost) falls back to the run's sweep folder, and then only for the
sweep's own source, verified by its digest or the run's spec hash where the store has one;
a submitted version is never replaced by the sweep's source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.core.expand import space_digest
from kopt.core.spec import Space, load_sweep
from kopt.store.database import Database

# what a changed sweep folder is, in the notes
CHANGED = "(sweep.yaml, a source, a header or ref.py)"


class SourceLost(ValueError):
    """The measured source cannot be had: the candidate is a submitted version whose stored
    copy is gone, or the store holds no copy of the sweep's own source and the run's sweep
    folder does not load. The message says which, in one line."""


@dataclass
class Measured:
    """The source one stored candidate was measured from.

    Attributes:
        text: its exact text (no defines written in).
        name: its file name (``v2.cu``, the sweep's ``kernel:``).
        path: a file that holds exactly ``text``: the sweep folder's own file when it is
            unchanged, else the store's copy (``STORE/source-files/<digest>/<name>``).
        source_hash: its digest (the candidate's ``source_hash``); None in an older store.
        submitted: a version sent in by ``kopt submit``, not the sweep's own source.
        submitter: who submitted it (``sweep`` for the sweep's own; None in an older store).
        stored: ``text`` is the store's copy (table ``sources``); False: the sweep folder's
            file, read today.
        space: today's space of the run's sweep (for sweep.yaml's derived quantities);
            None when the sweep folder does not load.
        notes: one line each: the sweep folder changed since the run or does not load, or
            the text could not be verified against the store.
    """

    text: str
    name: str
    path: Path
    source_hash: str | None
    submitted: bool
    submitter: str | None
    stored: bool
    space: Space | None
    notes: list[str] = field(default_factory=list)


def stored_copy(db: Database, source_hash: str, row: dict[str, Any] | None = None
                ) -> tuple[Path, str] | None:
    """(the file ``STORE/source-files/<digest>/<name>``, an absolute path also for a store
    named by a relative one, its text) of the stored source
    with digest ``source_hash``: the ``sources`` table's text (``row``, its ``name`` and
    ``text`` when already read), written to the file byte for byte when the file is missing
    or differs; None when the table holds no such source."""
    row = row if row is not None else db.source(source_hash)
    if row is None:
        return None
    copy = Path(os.path.abspath(db.root)) / "source-files" / source_hash / row["name"]
    if _reads(copy) != row["text"]:
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(row["text"], newline="")
    return copy, row["text"]


def _today(info: dict[str, Any]) -> tuple[Space | None, str | None, str]:
    """(today's space of the run's sweep folder, its spec hash, '') or (None, None, why it
    does not load: its first line)."""

    where = info.get("sweep_dir")
    if not where:
        return None, None, "the run recorded no sweep folder"
    try:
        sweep = load_sweep(Path(where))
        return sweep.space(info.get("backend") or "cpu"), sweep.spec_hash, ""
    except Exception as e:  # noqa: BLE001 -- whatever stops it loading is the reason to say
        return None, None, (str(e).splitlines()[0] if str(e) else type(e).__name__)


def measured_source(db: Database, run_id: str, candidate_id: str,
                    space: Space | None = None) -> Measured:
    """The source candidate ``candidate_id`` of run ``run_id`` was measured from (module
    doc). ``space``: the sweep's space to read today's folder from (default: the run's
    ``sweep_dir`` loaded for its backend).

    Raises:
        SourceLost: a submitted version whose stored copy is gone, or no stored copy of the
            sweep's own source and its folder does not load.
    """
    info = db.run_info(run_id) or {}
    row = db.candidate_lineage(run_id, candidate_id) or {}
    digest = row.get("source_hash") or None
    submitted = bool(digest) and row.get("submitter") not in (None, "sweep")
    spec_now, problem = None, ""
    if space is None:
        space, spec_now, problem = _today(info)
    where = info.get("sweep_dir") or (str(space.source.parent) if space else "(unknown)")
    changed = _changed(info, spec_now, space, digest, submitted)
    got = stored_copy(db, digest) if digest else None
    if got is not None:
        copy, text = got
        own = space is not None and not submitted and _reads(space.source) == text
        notes = ([f"run {run_id}'s sweep folder {where} does not load now ({problem}): the "
                  "best-*.cu/.cpp files hold the store's copy of the measured source, "
                  "without sweep.yaml's derived quantities"] if space is None else
                 [f"run {run_id}'s sweep folder {where} changed since the run {CHANGED}: the "
                  "best-*.cu/.cpp files hold the source that was measured (the store's "
                  "copy), not today's"] if changed else [])
        return Measured(text, copy.name, space.source if own else copy, digest, submitted,
                        row.get("submitter"), True, space, notes)
    if submitted:
        raise SourceLost(f"{db.root}: no stored source {digest} (table sources): candidate "
                         f"{candidate_id} of run {run_id} is a submitted version and the "
                         "source it was measured from is lost")
    if space is None:
        raise SourceLost(f"no best-*.cu/.cpp written: run {run_id}'s sweep folder {where} does "
                         f"not load now ({problem}); restore it to get the realized sources")
    return Measured(space.source_text(), space.source.name, space.source, digest, False,
                    row.get("submitter"), False, space,
                    _unverified(run_id, candidate_id, where, changed))


def _changed(info: dict[str, Any], spec_now: str | None, space: Space | None,
             digest: str | None, submitted: bool) -> bool | None:
    """Whether the sweep folder changed since the run: its spec hash against the run's,
    else (the sweep's own source) its source digest against the candidate's; None when
    neither can be compared."""
    if space is None:
        return None
    if spec_now is not None and info.get("spec_hash"):
        return spec_now != info["spec_hash"]
    if digest and not submitted:
        return space_digest(space) != digest
    return None


def _unverified(run_id: str, candidate_id: str, where: str, changed: bool | None
                ) -> list[str]:
    """The notes on the sweep folder's own text used for lack of a stored copy."""
    if changed:
        return [f"run {run_id}'s sweep folder {where} changed since the run {CHANGED}: the "
                "best-*.cu/.cpp files hold today's source with the winner's defines, not the "
                "source that was measured"]
    if changed is None:
        return [f"candidate {candidate_id} of run {run_id}: the store holds no copy of its "
                f"source (table sources) and nothing to check {where} against: the "
                "best-*.cu/.cpp files hold the sweep folder's source as it is today, not "
                "verified against the store"]
    return []


def _reads(path: Path) -> str | None:
    """``path``'s text as it is (no newline translation), None when it cannot be read."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None
