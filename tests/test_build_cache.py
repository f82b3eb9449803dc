"""The build cache kept within its cap (workers.build_cache): the least recently used builds
removed, never one used lately, folders a dead store left removed once old. (A cap kopt
cannot use is one line: tests/test_cli_input_errors.py.)"""

import os
import time

from test_build import _job

from conftest import ROOT
from kopt.core.catalog import load_catalog
from kopt.core.expand import expand
from kopt.core.spec import load_sweep
from workers import build as wb
from workers import build_cache as bc


def _entry(cache, name, nbytes, age_s, now):
    p = cache / name
    p.mkdir(parents=True)
    (p / "solve.so").write_bytes(b"x" * nbytes)
    os.utime(p, (now - age_s, now - age_s))
    return p


NAMES = {k: f"{i:020x}" for i, k in enumerate(("new", "old", "mid", "older"), start=0xa0)}


def test_the_least_recently_used_builds_go_first_and_a_recent_one_never(tmp_path):
    now = time.time()
    for k, age in (("new", 100), ("old", 4000), ("mid", 2000), ("older", 3000)):
        _entry(tmp_path, NAMES[k], 1000, age, now)
    by = {v: k for k, v in NAMES.items()}
    assert [by[e.path.name] for e in bc.entries(tmp_path)] == ["old", "older", "mid", "new"]
    assert [e.bytes for e in bc.entries(tmp_path)] == [1000] * 4
    gone = bc.evict(tmp_path, 2500, keep_s=600, now=now)
    assert [by[e.path.name] for e in gone] == ["old", "older"]
    assert sorted(by[p.name] for p in tmp_path.iterdir()) == ["mid", "new"]
    # a cap below what the recent build holds: it stays (a sweep may be loading it)
    gone = bc.evict(tmp_path, 10, keep_s=600, now=now)
    assert [by[e.path.name] for e in gone] == ["mid"] and os.listdir(tmp_path) == [NAMES["new"]]
    assert bc.evict(tmp_path, 0, keep_s=0, now=now) == []  # 0: no cap
    assert bc.describe(tmp_path, 10) == (
        f"{tmp_path}: 1 builds, 0.0 MB (cap 1e-08 GB, KOPT_CACHE_MAX_GB; the least recently "
        "used removed past it)")


def test_only_folders_named_as_kopt_names_them_are_counted_or_removed(tmp_path):
    """A red-team helper's old ``$KOPT_CACHE/builds/.git`` and ``my_notes/`` went with the
    first store past the cap (every folder was taken for a build); a link named as a build
    is not followed or removed either."""
    now = time.time()
    for name in (".git", "my_notes", "abc", "0" * 19, "0" * 21):
        _entry(tmp_path, name, 5000, 9000, now)
    target = _entry(tmp_path / "elsewhere", "0" * 20, 5000, 9000, now)
    (tmp_path / ("1" * 20)).symlink_to(target)
    assert bc.entries(tmp_path) == [] and bc.evict(tmp_path, 1, keep_s=0, now=now) == []
    assert sorted(os.listdir(tmp_path)) == sorted(
        [".git", "my_notes", "abc", "0" * 19, "0" * 21, "elsewhere", "1" * 20])
    assert (target / "solve.so").exists()


def test_a_build_used_while_it_is_removed_is_put_back(tmp_path, monkeypatch):
    """:func:`remove` reads the folder's time before its rename aside and again after it: a
    device that marked it used in between (its artifact handed to a job) keeps it. Read
    once, while the whole cache was walked, such a use went unseen and the job's artifact
    was gone when it loaded (red-team round 14). The times read are scripted here (the
    gap cannot be timed): old, then used."""
    now = time.time()
    p = _entry(tmp_path, NAMES["old"], 1000, 4000, now)
    assert not bc.remove(p, now - 5000) and p.exists()  # used after the line: kept
    reads = iter([now - 4000, now])
    monkeypatch.setattr(bc, "_used_at", lambda path: next(reads))
    assert not bc.remove(p, now - 600)
    assert (p / "solve.so").read_bytes() == b"x" * 1000
    assert sorted(os.listdir(tmp_path)) == [NAMES["old"]]  # nothing left aside
    reads = iter([now - 4000, now - 4000])
    assert bc.remove(p, now - 600) and os.listdir(tmp_path) == []


def test_folders_a_dead_store_left_are_removed_once_old(tmp_path):
    now = time.time()
    old = _entry(tmp_path, f".{'b1' * 10}.x8k2", 10, 4000, now)
    aside = _entry(tmp_path, f".{'b2' * 10}.old.j3m9", 10, 4000, now)
    fresh = _entry(tmp_path, f".{'b3' * 10}.j3m9", 10, 5, now)
    kept = _entry(tmp_path, "b4" * 10, 10, 4000, now)
    other = _entry(tmp_path, ".cache", 10, 4000, now)
    assert bc.evict(tmp_path, 10**9, keep_s=600, now=now) == []
    assert not old.exists() and not aside.exists()
    assert fresh.exists() and kept.exists() and other.exists()


def test_builds_past_the_cap_are_removed_after_a_store_and_a_hit_counts_as_use(
        tmp_path, monkeypatch):
    """Real CPU builds of vector_add: with a cap that holds two builds, a third's store
    removes the one used least lately, which a cache hit decides (``a``, older than ``b``
    but hit since, stays); a removed build is a plain miss, rebuilt."""
    sp = load_sweep(ROOT / "sweeps" / "vector_add").space("cpu")
    a, b, c = (_job(sp, x) for x in expand(sp, load_catalog(), None)[:3])
    monkeypatch.setattr(bc, "KEEP_S", 0.0)
    monkeypatch.setattr(bc, "SCAN_EVERY_S", 0.0)
    monkeypatch.delenv("KOPT_CACHE_MAX_GB", raising=False)
    assert wb.build(a, cache=tmp_path)[0].ok and wb.build(b, cache=tmp_path)[0].ok
    sa, sb = (bc.folder_bytes(tmp_path / j.build_id) for j in (a, b))
    assert min(sa, sb) > 1000
    t = time.time()
    os.utime(tmp_path / a.build_id, (t - 120, t - 120))
    os.utime(tmp_path / b.build_id, (t - 60, t - 60))
    assert wb.build(a, cache=tmp_path)[0].cached  # a hit: a used now
    assert time.time() - (tmp_path / a.build_id).stat().st_mtime < 30
    monkeypatch.setenv("KOPT_CACHE_MAX_GB", str((sa + sb + min(sa, sb) // 2) / 1e9))
    rc, _ = wb.build(c, cache=tmp_path)
    assert rc.ok and not rc.cached
    assert sorted(os.listdir(tmp_path)) == sorted([a.build_id, c.build_id])  # b went
    rb, _ = wb.build(b, cache=tmp_path)
    assert rb.ok and not rb.cached  # removed: rebuilt, and a (used before c) goes now
    assert sorted(os.listdir(tmp_path)) == sorted([b.build_id, c.build_id])


def test_kopt_env_says_what_the_cache_holds_and_its_cap(tmp_path, monkeypatch):
    """``kopt env``'s ``build_cache`` row (workers.envinfo): the folder, its builds and their
    size, and the cap from ``KOPT_CACHE_MAX_GB``."""
    from workers import envinfo

    monkeypatch.setenv("KOPT_CACHE", str(tmp_path))
    monkeypatch.setenv("KOPT_CACHE_MAX_GB", "2.5")
    _entry(tmp_path / "builds", "b1" * 10, 1_500_000, 10, time.time())
    assert envinfo.collect()["build_cache"] == (
        f"{tmp_path / 'builds'}: 1 builds, 1.5 MB (cap 2.5 GB, KOPT_CACHE_MAX_GB; the least "
        "recently used removed past it)")
    monkeypatch.setenv("KOPT_CACHE_MAX_GB", "0")
    assert "(no cap, KOPT_CACHE_MAX_GB;" in envinfo.collect()["build_cache"]
