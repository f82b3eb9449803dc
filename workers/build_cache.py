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
(a reader then finds no entry, a plain miss: workers.build ``lookup``), and folders left by
a store that died midway (names starting with ``.``) are removed once as old as
:data:`KEEP_S`. Only the standard library is used.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

CAP_GB = 10.0  # the cap when $KOPT_CACHE_MAX_GB is unset (GB, 1e9 bytes)
KEEP_S = 600.0  # a build used within this many seconds is never removed
SCAN_EVERY_S = 60.0  # a process looks at the cache's size at most this often
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
    """The build folders of ``cache`` (names not starting with ``.``), least recently used
    first; [] when the cache does not exist."""
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
        if not name.startswith(".") and os.path.isdir(p) and not os.path.islink(p):
            out.append(Entry(p, folder_bytes(p), st.st_mtime))
    return sorted(out, key=lambda e: e.used_at)


def remove(path: Path) -> bool:
    """Remove the folder ``path``, renamed aside first so that no reader finds it half
    removed; False when it was already gone or could not be moved."""
    try:
        aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.evicted.", dir=path.parent))
    except OSError:
        return False
    try:
        os.replace(path, aside / "entry")
        return True
    except OSError:
        return False
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def evict(cache: Path, max_bytes: int, keep_s: float | None = None,
          now: float | None = None) -> list[Entry]:
    """Remove the least recently used build folders of ``cache`` until its folders hold no
    more than ``max_bytes`` (bytes; 0 or less: no cap), never one used within ``keep_s``
    seconds (default :data:`KEEP_S`) of ``now`` (default: the clock); also remove folders a
    store left behind (``.``-named) that are as old. Returns the folders removed, least
    recently used first."""
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
        if remove(e.path):
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
    """Remove the ``.``-named folders of ``cache`` (a store's temporary or set-aside copy,
    left when its process died) last changed before ``before`` (seconds since the epoch)."""
    try:
        names = [n for n in os.listdir(cache) if n.startswith(".")]
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
