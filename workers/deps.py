"""The local files a build reads: the ``#include`` closure of a source, the compiler's own
dependency list, and sha256 digests of both.

A build reads more than its source: every local header it ``#include``s. Their contents
go into the build id and the spec hash (the include scanner, before any build), and
into a manifest stored with each cached build (the compiler's ``-MD`` list, after the
build) that is checked again on every cache lookup, so that an include the scanner cannot
see (``#include MACRO``) still invalidates a stale artifact.

"Local" means found through the build's own search path: the including file's folder
(for ``"..."``) and the ``-I`` folders (the sweep folder and the space's include_dirs).
System and toolkit headers are the compiler's and are covered by its identity.

Stdlib only: this module is imported by the build worker and by the spec loader.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

# every #include line, whatever #if it sits under (an over-approximation, which is safe)
# an include line: ``#`` or its digraph ``%:``, then blanks or comments, ``include`` (a
# header named by ``%:include`` or ``#/**/include`` was in no candidate id, build id or
# stored source: red-team round 10)
_INCLUDE = re.compile(r'^[ \t]*(?:#|%:)(?:[ \t]|/\*.*?\*/)*include(?:[ \t]|/\*.*?\*/)*'
                      r'([<"])([^>"\n]+)[>"]', re.M)
_DIGESTS: dict[tuple, str] = {}


def sha256_file(path: str | Path) -> str:
    """sha256 (hex) of the file at ``path``, computed once per process for each
    (path, inode, size, mtime, ctime). Raises OSError when the file cannot be read."""
    st = os.stat(path)
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def include_closure(text: str, here: str | Path, search: list[str]) -> list[Path]:
    """The local files reached from source ``text`` through ``#include``, recursively.

    Args:
        text: the source text.
        here: the folder of the source (where ``"..."`` includes are looked up first).
        search: the ``-I`` folders, in order.

    Returns:
        Each local file once (search folder joined with the include's name, ``..``
        collapsed), sorted. A name found in several folders contributes every one of them; a name
        found in none is a system header and is skipped, and so is a file outside ``here``
        and the ``search`` folders (resolved): kopt's own process reads what this finds,
        not the confined compiler, and a source naming ``/etc/shadow`` had its digest and
        its existence stored with the run (red-team round 10). The compiler is refused it.
    """
    found: set[Path] = set()
    roots = [os.path.realpath(r) for r in (here, *search)]
    todo = [(text, Path(here))]
    while todo:
        src, folder = todo.pop()
        for kind, name in _INCLUDE.findall(src):
            dirs = [folder, *map(Path, search)] if kind == '"' else list(map(Path, search))
            for d in dirs:
                p = Path(os.path.normpath(d / name.strip()))
                if p in found or not _beneath(p, roots) or not p.is_file():
                    continue
                found.add(p)
                try:
                    todo.append((p.read_text(errors="replace"), p.parent))
                except OSError:
                    pass
    return sorted(found)


def _beneath(p: Path, roots: list[str]) -> bool:
    """Whether ``p``, resolved (links and ``..`` followed), lies beneath one of ``roots``."""
    real = os.path.realpath(p)
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def digests(paths: list[Path], base: str | Path) -> dict[str, str]:
    """``{path relative to base: sha256}`` of ``paths``, sorted by path (a file that
    vanished reads as ``"missing"``)."""
    out = {}
    for p in paths:
        try:
            out[os.path.relpath(p, base)] = sha256_file(p)
        except OSError:
            out[os.path.relpath(p, base)] = "missing"
    return dict(sorted(out.items()))


def local_inputs(text: str, source_dir: str, include_dirs: list[str]) -> dict[str, str]:
    """``{path relative to source_dir: sha256}`` of every local file that a source with
    text ``text`` in ``source_dir`` includes (the ``-I`` folders: source_dir, then
    include_dirs). Empty when it includes no local file."""
    return digests(include_closure(text, source_dir, [source_dir, *include_dirs]), source_dir)


_HAS_INCLUDE = re.compile(r'__has_include(?:_next)?\s*\(\s*([<"])([^>"\n]+)[>"]')


def probed(texts: list[str], source_dir: str, include_dirs: list[str]) -> dict[str, str]:
    """``{path relative to source_dir: sha256 or "missing"}`` of every file that
    ``__has_include`` in ``texts`` (the source and the local files it read) asks about, in
    each folder it is looked up in (``"..."``: source_dir first; both: include_dirs), within
    those folders. Whether such a file exists changes the build, and no dependency list
    names a file that is not there: a source that said 1 while ``marker.h`` existed was
    still loaded from the cache once it was removed (red-team round 10)."""
    roots = [os.path.realpath(r) for r in (source_dir, *include_dirs)]
    paths = set()
    for text in texts:
        for kind, name in _HAS_INCLUDE.findall(text):
            dirs = ([source_dir] if kind == '"' else []) + list(include_dirs)
            for d in dirs:
                p = Path(os.path.normpath(Path(d) / name.strip()))
                if _beneath(p, roots):
                    paths.add(p)
    return digests(sorted(paths), source_dir)


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a Make-format dependency file (``-MD -MF``): every path after
    the first target's colon, continuation lines joined, ``\\ ``, ``\\#`` and ``$$``
    unescaped (a header named ``a#b.h`` was listed as ``a\\#b.h``, a file that is never
    there, and an edit of it left the cached build trusted: red-team round 10)."""
    text = text.replace("\\\n", " ")
    m = re.search(r":(\s|$)", text)
    if m is None:
        return []
    body = text[m.end():].split("\n", 1)[0]
    return [p.replace("\\ ", " ").replace("\\#", "#").replace("$$", "$")
            for p in re.split(r"(?<!\\)\s+", body) if p]


def local_deps(deps: list[str], cwd: str | Path, roots: list[str],
               toolchain: list[str] | tuple[str, ...] = ()) -> list[Path]:
    """The entries of a compiler's dependency list (paths relative to ``cwd``, the build
    folder, or absolute) that a cached build must be checked against: each resolved (links,
    ``..``, ``//`` and ``/proc/self/root`` followed: a source named a sweep-folder header
    as ``/x/other/../sweep/f.h`` and the manifest, compared as written, held nothing), then
    kept when it lies under one of ``roots`` or, failing closed, anywhere but the build
    folder and ``toolchain`` (the compiler's own folders, covered by its identity).
    Sorted, without duplicates."""
    build = Path(os.path.realpath(cwd))
    real_roots = [Path(os.path.realpath(r)) for r in roots]
    tools = [Path(os.path.realpath(t)) for t in toolchain]
    out = set()
    for d in deps:
        p = Path(os.path.realpath(os.path.join(cwd, d)))
        if p.is_relative_to(build):
            continue
        if any(p.is_relative_to(r) for r in real_roots) or not any(
                p.is_relative_to(t) for t in tools):
            out.add(p)
    return sorted(out)


def changed(manifest: dict[str, str], base: str | Path) -> str | None:
    """The first file of ``manifest`` (``{path relative to base: sha256}``) whose contents
    differ now (or that is gone), or None when every one is unchanged."""
    for rel, digest in manifest.items():
        try:
            now = sha256_file(Path(base) / rel)
        except OSError:
            now = "missing"
        if now != digest:
            return rel
    return None
