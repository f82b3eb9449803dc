"""Builds that must not be trusted: an edited local header is a new build
and a new spec hash; a cached artifact that is damaged is rebuilt, never loaded."""

import ctypes
import hashlib
import json
import shutil
import textwrap

import pytest

from conftest import VADD_REF, write_sweep
from kopt.core.catalog import load_catalog
from kopt.core.expand import expand, space_digest
from kopt.core.spec import load_sweep
from kopt.run.builder import build_id
from workers import build as wb
from workers import deps

YAML = """
    kernel: k.cpp
    dims: [{N: 4}]
    args: {x: [N], y: [N]}
    params: {CHUNK: [64]}
    include_dirs: [inc]
"""
# out = SCALE * x + y + OFFSET: SCALE from a quoted header in the sweep folder, OFFSET from
# a header that one includes in turn, BIAS from an <angle> header found in include_dirs
K_CPP = """
    #include "scale.h"
    #include <bias.h>
    extern "C" void solve(const float* x, const float* y, float* out, int N) {
      for (int i = 0; i < N; ++i) out[i] = SCALE * x[i] + y[i] + OFFSET + BIAS;
    }
"""
# the header named through a macro: no scanner can see it, the compiler's -MD list does
K_MACRO = """
    #define VALUE_HEADER "value.h"
    #include VALUE_HEADER
    extern "C" void solve(const float* x, const float* y, float* out, int N) {
      for (int i = 0; i < N; ++i) out[i] = VALUE * x[i] + y[i];
    }
"""
SIMPLE_H = "#define SCALE 2.0f\n#define OFFSET 0.0f\n"


def sweep(tmp_path, headers, source=K_CPP):
    d = write_sweep(tmp_path / "s", YAML, {"k.cpp": source, "ref.py": VADD_REF, **headers})
    (d / "inc").mkdir()
    (d / "inc" / "bias.h").write_text("#define BIAS 0.0f\n")
    return d


def job(sw):
    """The baseline's build job, with the build id the pipeline gives it."""
    sp = sw.space("cpu")
    digest = space_digest(sp)
    cand = expand(sp, load_catalog(), None, source_digest=digest)[0]
    bid = build_id(sp, cand, digest, wb.compiler_identity(sp.toolchain), "x86_64")
    return wb.BuildJob(bid, "cpu", sp.source_text(), sp.source.name,
                       str(sp.source.parent), cand.defines, sp.flags, cand.target,
                       sp.include_dirs)


def solve(data, where, name):
    """out[0] of the artifact ``data``'s solve on x = 1, y = 10 (loaded from its own file:
    the dynamic loader hands out one handle per path)."""
    so = where / f"{name}.so"
    so.write_bytes(data)
    lib = ctypes.CDLL(str(so))
    x, y, out = (ctypes.c_float * 4)(*[1.0] * 4), (ctypes.c_float * 4)(*[10.0] * 4), \
        (ctypes.c_float * 4)()
    lib.solve(x, y, out, 4)
    return out[0]


def test_an_edited_header_is_a_new_build_and_a_new_spec_hash(tmp_path):
    d = sweep(tmp_path, {"scale.h": '#include "offset.h"\n#define SCALE 2.0f\n',
                         "offset.h": "#define OFFSET 0.0f\n"})
    cache = tmp_path / "cache"
    sw = load_sweep(d)
    j1, h1 = job(sw), sw.spec_hash
    r1, a1 = wb.build(j1, cache=cache)
    assert r1.ok and not r1.cached and solve(a1, tmp_path, "a1") == 12.0
    assert wb.build(j1, cache=cache)[0].cached

    seen_ids, seen_hashes = {j1.build_id}, {h1}
    for header, text, want in [("scale.h", '#include "offset.h"\n#define SCALE 3.0f\n', 13.0),
                               ("offset.h", "#define OFFSET 5.0f\n", 18.0),
                               ("inc/bias.h", "#define BIAS 100.0f\n", 118.0)]:
        (d / header).write_text(text)
        sw = load_sweep(d)
        j = job(sw)
        assert j.build_id not in seen_ids, header       # a new build id ...
        assert sw.spec_hash not in seen_hashes, header  # ... and --resume refuses the old run
        seen_ids.add(j.build_id)
        seen_hashes.add(sw.spec_hash)
        r, a = wb.build(j, cache=cache)
        assert r.ok and not r.cached, header            # a real rebuild
        assert solve(a, tmp_path, f"after-{header.replace('/', '-')}") == want
    inputs = sw.space("cpu").local_inputs()
    assert list(inputs) == ["inc/bias.h", "offset.h", "scale.h"]
    assert inputs["scale.h"] == hashlib.sha256((d / "scale.h").read_bytes()).hexdigest()


def test_a_header_named_by_a_macro_is_caught_by_the_manifest(tmp_path):
    d = sweep(tmp_path, {"value.h": "#define VALUE 2.0f\n"}, K_MACRO)
    cache = tmp_path / "cache"
    j = job(load_sweep(d))
    r1, a1 = wb.build(j, cache=cache)
    assert r1.ok and solve(a1, tmp_path, "v2") == 12.0
    assert wb.build(j, cache=cache)[0].cached

    (d / "value.h").write_text("#define VALUE 7.0f\n")
    assert job(load_sweep(d)).build_id == j.build_id  # the scan misses it; the check must not
    assert wb.cached(j, cache) is None
    r2, a2 = wb.build(j, cache=cache)
    assert r2.ok and not r2.cached and "value.h" in r2.note and r2.note.endswith("rebuilt")
    assert solve(a2, tmp_path, "v7") == 17.0
    r3, a3 = wb.build(j, cache=cache)  # the rebuilt entry replaced the stale one
    assert r3.cached and a3 == a2 and r3.note == ""
    check = json.loads((cache / j.build_id / wb.VERIFY).read_text())
    assert check["inputs"] == {  # from c++ -MD: the include scan cannot see it
        "value.h": hashlib.sha256(b"#define VALUE 7.0f\n").hexdigest()}
    assert check["artifact"] == {"name": "solve.so", "bytes": len(a2),
                                 "sha256": hashlib.sha256(a2).hexdigest()}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_nvcc_builds_record_the_headers_they_read(tmp_path):
    src = textwrap.dedent(K_MACRO)
    (tmp_path / "value.h").write_text("#define VALUE 2.0f\n")
    j = wb.BuildJob("cu1", "cuda", src, "k.cu", str(tmp_path), {}, target="sm_90")
    r, _ = wb.build(j, cache=tmp_path / "cache")
    assert r.ok, r.error
    assert " -MD -MF " in r.command
    check = json.loads((tmp_path / "cache" / "cu1" / wb.VERIFY).read_text())
    assert list(check["inputs"]) == ["value.h"]


def test_a_truncated_cached_artifact_is_rebuilt_not_loaded(tmp_path):
    d = sweep(tmp_path, {"scale.h": SIMPLE_H})
    cache = tmp_path / "cache"
    j = job(load_sweep(d))
    r1, a1 = wb.build(j, cache=cache)
    art = cache / j.build_id / "solve.so"
    assert r1.ok and art.read_bytes() == a1 and len(a1) > 1000
    with open(art, "r+b") as f:
        f.truncate(1000)

    assert wb.cached(j, cache) is None
    r2, a2 = wb.build(j, cache=cache)
    assert r2.ok and not r2.cached
    assert r2.note.startswith("the cached solve.so is damaged (1000 bytes") and "rebuilt" in r2.note
    assert len(a2) == len(a1) and solve(a2, tmp_path, "whole") == 12.0
    assert art.read_bytes() == a2  # the entry holds the rebuilt artifact ...
    r3, a3 = wb.build(j, cache=cache)
    assert r3.cached and a3 == a2  # ... and is trusted again

    # same size, one byte changed: the sha256 catches it
    data = bytearray(a2)
    data[len(data) // 2] ^= 0xFF
    art.write_bytes(bytes(data))
    r4, a4 = wb.build(j, cache=cache)
    assert not r4.cached and "damaged" in r4.note and a4 == a2
    # an entry without checksums (an older kopt's): a plain miss, rebuilt, no note
    (cache / j.build_id / wb.VERIFY).unlink()
    r5, a5 = wb.build(j, cache=cache)
    assert not r5.cached and r5.note == "" and a5 == a2
    assert wb.build(j, cache=cache)[0].cached


def test_ensure_artifact_rewrites_a_damaged_file(tmp_path):
    d = sweep(tmp_path, {"scale.h": SIMPLE_H})
    _, data = wb.build(job(load_sweep(d)), cache=tmp_path / "builds")
    dev = tmp_path / "device-cache"  # a device node's cache: artifacts only
    art = wb.ensure_artifact("b1", data, cache=dev)
    assert art.read_bytes() == data
    with open(art, "r+b") as f:
        f.truncate(1000)
    assert wb.ensure_artifact("b1", data, cache=dev) == art and art.read_bytes() == data
    flipped = bytearray(data)
    flipped[100] ^= 0xFF
    art.write_bytes(bytes(flipped))
    wb.ensure_artifact("b1", data, cache=dev)
    assert art.read_bytes() == data and solve(art.read_bytes(), tmp_path, "dev") == 12.0
    assert [p.name for p in art.parent.iterdir()] == ["solve.so"]  # no temp file left


def test_the_include_scan_and_the_dependency_list(tmp_path):
    """workers.deps: cycles and ``..`` end, every #include line counts (also under #if 0),
    system headers are skipped; a Make dependency list with continuations and escaped
    spaces parses, and every entry, resolved, outside the build folder and the toolchain
    is local."""
    (tmp_path / "a.h").write_text('#include "sub/b.h"\n#include <vector>\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.h").write_text('#include "../a.h"\n#if 0\n  # include "c.h"\n#endif\n')
    (tmp_path / "sub" / "c.h").write_text("")
    found = deps.include_closure('#include "a.h"\n', tmp_path, [str(tmp_path)])
    assert found == [tmp_path / "a.h", tmp_path / "sub" / "b.h", tmp_path / "sub" / "c.h"]
    assert deps.include_closure("#include <a.h>\n", tmp_path / "sub", []) == []
    # the digraph and comments between the parts of the line
    for line in ('%:include "a.h"', '#/**/include "a.h"', ' # /* x */ include/**/"a.h"'):
        assert deps.include_closure(line + "\n", tmp_path, [])[0] == tmp_path / "a.h", line

    text = ("solve.so : k.cu /usr/include/stdio.h \\\n  /w/my\\ dir/x.h /w/s/../common/y.h \\\n"
            "  z.h\n/w/s/extra.h:\n")
    listed = deps.parse_depfile(text)
    assert listed == ["k.cu", "/usr/include/stdio.h", "/w/my dir/x.h", "/w/s/../common/y.h",
                      "z.h"]
    local = deps.local_deps(listed, "/tmp/build", ["/w/s", "/w/my dir"], ["/usr"])
    # resolved; outside the -I folders but not the toolchain's: kept (fail closed)
    assert [str(p) for p in local] == ["/w/common/y.h", "/w/my dir/x.h"]
    assert [str(p) for p in deps.local_deps(["//w/s/a.h", "/proc/self/root/w/s/b.h"],
                                            "/tmp/build", ["/w/s"], ["/usr"])] == [
        "/w/s/a.h", "/w/s/b.h"]


def test_the_include_scan_reads_no_file_outside_the_sweep_folder_and_include_dirs(tmp_path):
    """kopt's own process (not the confined compiler) reads what the scan finds and stores
    each file's digest with the run: a source naming ``/etc/shadow`` (in ``#if 0``, so the
    build passed) had its digest and existence stored (red-team round 10). Only files
    beneath the source's folder and the ``-I`` folders are scanned."""
    d = sweep(tmp_path, {"scale.h": SIMPLE_H})
    outside = tmp_path / "outside.h"
    outside.write_text("#define SECRET 1\n")
    (d / "link.h").symlink_to(outside)
    src = textwrap.dedent(f"""
        #if 0
        #include "{outside}"
        #include "../outside.h"
        #include "link.h"
        #endif
        #include "scale.h"
    """)
    assert deps.include_closure(src, d, [str(d / "inc")]) == [d / "scale.h"]
    assert list(deps.local_inputs(src, str(d), [str(d / "inc")])) == ["scale.h"]


def test_nothing_a_compiler_started_outlives_its_build(tmp_path):
    """A program a sweep's flags run around the compiler (``-wrapper``) left a process in a
    session of its own that outlived the build (red-team round 10): workers.reap, the
    compiler's parent, is a subreaper and kills whatever is left once the compiler ends,
    also under the compilers' Landlock ruleset (round 11: /proc unreadable there, the list
    of what was left read empty)."""
    import subprocess
    import sys

    from workers import build_confine
    from workers.reap import package_env, pid_alive

    pidfile = tmp_path / "pid"
    script = f"setsid sh -c 'echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; " \
             "exec sleep 300' & while [ ! -e " + str(pidfile) + " ]; do sleep 0.01; done"
    # under the compilers' Landlock ruleset, as a build runs (/proc not readable there)
    rules = build_confine.ruleset(["sh", "setsid", "sleep", "mv"], str(tmp_path), [],
                                  str(tmp_path), [])
    env = {**package_env(), **build_confine.env_for(rules, str(tmp_path))}
    p = subprocess.run([sys.executable, "-m", "workers.reap", "30", "sh", "-c", script],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert not pid_alive(int(pidfile.read_text()))


def _probe_build(folder, source: str, cache, bid: str):
    """A CPU build of ``source`` in sweep folder ``folder``: (cached?, kopt_probe()'s value
    or None when it failed, the result's note)."""
    job = wb.BuildJob(bid, "cpu", source, "k.cpp", str(folder), {}, [], "host", [])
    res, data = wb.build(job, cache=cache)
    assert res.ok, res.error
    so = folder.parent / f"probe-{len(list(folder.parent.iterdir()))}.so"
    so.write_bytes(data)
    f = ctypes.CDLL(str(so)).kopt_probe
    f.restype = ctypes.c_int
    return res.cached, f(), res.note


@pytest.mark.parametrize("first", [True, False])
def test_a_file_has_include_asks_about_is_in_the_manifest(tmp_path, first):
    """A source whose build depends on whether ``marker.h`` exists (``__has_include``) was
    loaded from the cache after marker.h was removed: no dependency list names a file that
    is not there (red-team round 10). The names it asks about are in the manifest, there or
    not, so that either change is a rebuild."""
    folder = tmp_path / "s"
    folder.mkdir()
    src = ('#if __has_include("marker.h")\nstatic const int v = 1;\n#else\n'
           'static const int v = 0;\n#endif\nextern "C" int kopt_probe() { return v; }\n')
    marker = folder / "marker.h"
    if first:
        marker.write_text("")
    cache = tmp_path / "cache"
    assert _probe_build(folder, src, cache, "hi")[:2] == (False, int(first))
    assert _probe_build(folder, src, cache, "hi")[:2] == (True, int(first))
    if first:
        marker.unlink()
    else:
        marker.write_text("")
    assert _probe_build(folder, src, cache, "hi")[:2] == (False, int(not first))


def test_a_header_with_a_hash_in_its_name_is_checked_again(tmp_path):
    """``%:include "a#b.h"`` (a digraph the include scan does not read): the compiler's list
    names the header as ``a\\#b.h``, which was kept as written, a file never there, and an
    edit of the header left the cached build trusted (red-team round 10)."""
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "a#b.h").write_text("#define K 1\n")
    src = '%:include "a#b.h"\nextern "C" int kopt_probe() { return K; }\n'
    cache = tmp_path / "cache"
    assert _probe_build(folder, src, cache, "dg")[:2] == (False, 1)
    assert _probe_build(folder, src, cache, "dg")[:2] == (True, 1)
    (folder / "a#b.h").write_text("#define K 2\n")
    assert _probe_build(folder, src, cache, "dg")[:2] == (False, 2)


def test_a_dependency_list_that_names_a_file_not_there_is_not_cached(tmp_path):
    """An ``.incbin`` of a name holding a newline cut the assembler's dependency list: the
    manifest held ``n`` ("missing") and not ``data.bin``, whose edit was never seen (red-team
    round 10). A build whose list names a file that is not there is used but not cached."""
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "data.bin").write_bytes((1).to_bytes(4, "little"))
    (folder / "n\nl.bin").write_bytes(b"\0")
    src = ('asm(".section .rodata\\n.globl kopt_table\\nkopt_table:\\n.incbin \\"data.bin\\"\\n"\n'
           '    ".incbin \\"n\\\\nl.bin\\"\\n.text\\n");\n'
           'extern "C" const int kopt_table[];\n'
           'extern "C" int kopt_probe() { return kopt_table[0]; }\n')
    cache = tmp_path / "cache"
    cached, v, note = _probe_build(folder, src, cache, "nl")
    assert (cached, v) == (False, 1) and note.startswith("not cached: the compiler's dependency "
                                                         "list names ")
    (folder / "data.bin").write_bytes((2).to_bytes(4, "little"))
    assert _probe_build(folder, src, cache, "nl")[:2] == (False, 2)
