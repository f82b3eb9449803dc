"""The build cache's size: the least recently used builds removed past a cap.

Each build is a folder of ``$KOPT_CACHE/builds`` (workers.build ``cache_root``), named by its
build id; a folder's modification time is when it was last stored or used (a cache hit, a
device writing its artifact: :func:`used`). After a build is stored, at most once every
:data:`SCAN_EVERY_S` per process, :func:`evict` removes the least recently used folders
until the cache holds no more than the cap (``$KOPT_CACHE_MAX_GB``, :func:`cap`),
as ccache keeps its cache within ``max_size`` by removing the least recently used files
(ccache's manual, "Cache size management"). A folder used within :data:`KEEP_S` is never
removed (a sweep on this node may be loading it), so a cache that one sweep filled within
that time may stay over the cap until later. A folder is removed by renaming it aside first
(a reader then finds no entry, a plain miss: workers.build ``lookup``), its time read again
after the rename (one used meanwhile is put back), and folders left by a store that died
midway are removed once as old as :data:`KEEP_S`. Only folders named as kopt names them are
counted or removed (:data:`BUILD_NAME`, :data:`LEFTOVER_NAME`). Only the standard library is
used.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

CAP_GB = 10.0  # the cap when $KOPT_CACHE_MAX_GB is unset (GB, 1e9 bytes)
KEEP_S = 600.0  # a build used within this many seconds is never removed
SCAN_EVERY_S = 60.0  # a process looks at the cache's size at most this often
# the folders kopt makes there: a build id (kopt.run.builder ``build_id``: 20 hex digits), and
# a store's temporary or set-aside copy of one (workers.build ``_store``, :func:`remove`); any
# other name is left alone (a red-team helper's $KOPT_CACHE/builds/.git and notes went)
BUILD_NAME = re.compile(r"[0-9a-f]{20}")
LEFTOVER_NAME = re.compile(r"\.[0-9a-f]{20}\.")
_last_scan: dict[Path, float] = {}  # cache folder -> time.monotonic() of this process's last look
_lock = threading.Lock()


def root() -> Path:
    """The build cache: ``$KOPT_CACHE/builds`` (default ``~/.cache/kopt/builds``)."""
    base = os.environ.get("KOPT_CACHE") or os.path.join(Path.home(), ".cache", "kopt")
    return Path(base) / "builds"


def cap() -> tuple[int, str]:
    """The cache's cap in bytes from ``$KOPT_CACHE_MAX_GB`` (GB, 1e9 bytes; 0: no cap;
    :data:`CAP_GB` when unset), and "" or why the value was refused (then the default
    stands; workers.build ``check_env`` turns the refusal into an error)."""
    raw = os.environ.get("KOPT_CACHE_MAX_GB")
    if raw is None:
        return int(CAP_GB * 1e9), ""
    try:
        gb = float(raw)
    except ValueError:
        gb = math.nan
    if not 0 <= gb <= 1e9:  # NaN fails too
        return int(CAP_GB * 1e9), (f"$KOPT_CACHE_MAX_GB={raw!r}: expected a number of GB from "
                                   "0 (no cap) to 1e+09")
    return int(gb * 1e9), ""


@dataclass(frozen=True)
class Entry:
    """One folder of the build cache: its path, its files' bytes, and when it was last
    stored or used (seconds since the epoch)."""

    path: Path
    bytes: int
    used_at: float


def used(entry: Path) -> None:
    """Mark the build folder ``entry`` as used now (its modification time); nothing when it
    is gone or cannot be written (a read-only cache still serves its builds)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def folder_bytes(path: Path) -> int:
    """The bytes of every file under ``path`` (links not followed); 0 when it is gone."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def entries(cache: Path) -> list[Entry]:
    """The build folders of ``cache`` (named as a build id, :data:`BUILD_NAME`), least
    recently used first; [] when the cache does not exist."""
    out = []
    try:
        names = os.listdir(cache)
    except OSError:
        return []
    for name in names:
        p = cache / name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if BUILD_NAME.fullmatch(name) and os.path.isdir(p) and not os.path.islink(p):
            out.append(Entry(p, folder_bytes(p), st.st_mtime))
    return sorted(out, key=lambda e: e.used_at)


def _used_at(path: Path) -> float:
    """``path``'s modification time (seconds since the epoch); +inf when it cannot be read."""
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return math.inf


def remove(path: Path, used_before: float = math.inf) -> bool:
    """Remove the folder ``path``, renamed aside first so that no reader finds it half
    removed, unless it was used at or after ``used_before`` (seconds since the epoch), read
    right before the rename and again after it: one used in between (a device handed its
    artifact to a job, :func:`used`) is put back. (Read once, while the whole cache was
    walked, a use in between went unseen and a job's artifact went: red-team round 14.)
    False when it was kept, already gone or could not be moved."""
    if _used_at(path) >= used_before:
        return False
    try:
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.evicted.", dir=path.parent))
    except OSError:
        return False
    moved = aside / "entry"
    try:
        os.replace(path, moved)
    except OSError:
        shutil.rmtree(aside, ignore_errors=True)
        return False
    if _used_at(moved) >= used_before:
        try:
            os.replace(moved, path)  # back; unless a new one was stored there meanwhile
            shutil.rmtree(aside, ignore_errors=True)
            return False
        except OSError:
            pass
    shutil.rmtree(aside, ignore_errors=True)
    return True


def evict(cache: Path, max_bytes: int, keep_s: float | None = None,
          now: float | None = None) -> list[Entry]:
    """Remove the least recently used build folders of ``cache`` until its folders hold no
    more than ``max_bytes`` (bytes; 0 or less: no cap), never one used within ``keep_s``
    seconds (default :data:`KEEP_S`) of ``now`` (default: the clock); also remove folders a
    store left behind (:data:`LEFTOVER_NAME`) that are as old; no folder of another name.
    Returns the folders removed, least recently used first."""
    now = time.time() if now is None else now
    keep_s = KEEP_S if keep_s is None else keep_s
    _sweep_leftovers(cache, now - keep_s)
    if max_bytes <= 0:
        return []
    found = entries(cache)
    total = sum(e.bytes for e in found)
    gone = []
    for e in found:
        if total <= max_bytes or e.used_at > now - keep_s:
            break
        if remove(e.path, now - keep_s):
            gone.append(e)
            total -= e.bytes
    return gone


def maybe_evict(cache: Path, max_bytes: int) -> list[Entry]:
    """:func:`evict` with the defaults, unless this process looked at ``cache`` within
    :data:`SCAN_EVERY_S` (a sweep stores hundreds of builds: one look at the whole cache
    each would cost more than the builds' own writes); returns the folders removed."""
    with _lock:
        last = _last_scan.get(cache)
        t = time.monotonic()
        if last is not None and t - last < SCAN_EVERY_S:
            return []
        _last_scan[cache] = t
    return evict(cache, max_bytes)


def _sweep_leftovers(cache: Path, before: float) -> None:
    """Remove the folders of ``cache`` named as a store's temporary or set-aside copy of a
    build (:data:`LEFTOVER_NAME`, left when its process died) last changed before
    ``before`` (seconds since the epoch)."""
    try:
        names = [n for n in os.listdir(cache) if LEFTOVER_NAME.match(n)]
    except OSError:
        return
    for n in names:
        p = cache / n
        try:
            old = os.lstat(p).st_mtime < before and os.path.isdir(p) and not os.path.islink(p)
        except OSError:
            continue
        if old:
            shutil.rmtree(p, ignore_errors=True)


def describe(cache: Path, max_bytes: int) -> str:
    """``kopt env``'s line: the cache's folder, how many builds it holds, their size and
    the cap (``KOPT_CACHE_MAX_GB``)."""
    found = entries(cache)
    size = sum(e.bytes for e in found)
    held = f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"
    cap = f"cap {max_bytes / 1e9:g} GB" if max_bytes > 0 else "no cap"
    return (f"{cache}: {len(found)} builds, {held} ({cap}, KOPT_CACHE_MAX_GB; the least "
            "recently used removed past it)")
