"""The compiler run on a candidate's source is confined (Landlock): it reads the toolchain,
the sweep folder and include_dirs only, writes its build folder only, and every local file
it read (an ``.incbin`` one too) is in the cached build's manifest."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workers import build as wb
from workers import build_confine, landlock
from workers.reap import package_env

pytestmark = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel has no Landlock")
MARK = "kopt_host_secret_8c1f"  # a line only the host file holds
NVCC = shutil.which("nvcc") is not None


def _secret(tmp_path: Path) -> Path:
    """A host file outside the sweep folder whose one line is a C++ syntax error naming MARK
    (so an unconfined compile quotes it in its error)."""
    p = tmp_path / "host" / "secret.txt"
    p.parent.mkdir()
    p.write_text(f"{MARK} = leaked;\n")
    return p


def _job(tmp_path: Path, source: str, backend: str = "cpu", bid: str = "b1",
         include_dirs: list[str] | None = None) -> wb.BuildJob:
    sweep = tmp_path / "sweep"
    sweep.mkdir(exist_ok=True)
    name = "k.cu" if backend == "cuda" else "k.cpp"
    return wb.BuildJob(bid, backend, source, name, str(sweep), {}, [],
                       "sm_90" if backend == "cuda" else "host", include_dirs or [])


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not NVCC, reason="needs nvcc"))])
def test_an_include_of_a_host_file_is_refused_not_quoted(tmp_path, backend):
    """``#include "/path/outside"`` once put the host file's lines into the stored compile
    error; now the compiler is denied the file."""
    secret = _secret(tmp_path)
    res, data = wb.build(_job(tmp_path, f'#include "{secret}"\n', backend), cache=tmp_path / "c")
    assert not res.ok and data is None
    assert f"{secret}: {build_confine.UNREADABLE}" in res.error and MARK not in res.error, (
        res.error)
    # a host file that exists and one that does not read alike: no existence oracle
    gone = tmp_path / "host" / "absent.txt"  # as long as secret.txt: the caret lines match
    res2, _ = wb.build(_job(tmp_path, f'#include "{gone}"\n', backend, "b3"),
                       cache=tmp_path / "c")
    assert res2.error.replace(str(gone), str(secret)) == res.error
    rel = os.path.relpath(secret, tmp_path / "sweep")  # through ``..`` from the sweep folder
    res, _ = wb.build(_job(tmp_path, f'#include "{rel}"\n', backend, "b2"), cache=tmp_path / "c")
    assert not res.ok and MARK not in res.error, res.error


def test_an_incbin_of_a_host_file_is_refused(tmp_path):
    secret = _secret(tmp_path)
    src = f'asm(".incbin \\"{secret}\\"");\nextern "C" void solve() {{}}\n'
    res, data = wb.build(_job(tmp_path, src), cache=tmp_path / "c")
    assert not res.ok and data is None, res
    assert MARK not in res.error


def test_include_dirs_and_the_sweep_folder_stay_readable(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "two.h").write_text("#define TWO 2\n")
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "one.h").write_text("#define ONE 1\n")
    src = '#include "one.h"\n#include "two.h"\nextern "C" int solve() { return ONE + TWO; }\n'
    res, data = wb.build(_job(tmp_path, src, include_dirs=[str(inc)]), cache=tmp_path / "c")
    assert res.ok and data[:4] == b"\x7fELF", res.error
    check = (tmp_path / "c" / "b1" / "verify.json").read_text()
    assert '"one.h"' in check and '"../inc/two.h"' in check


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not NVCC, reason="needs nvcc"))])
def test_a_file_pulled_in_with_incbin_is_in_the_manifest(tmp_path, backend):
    """A data file pulled into the build with ``.incbin`` was in no list the cache checked:
    edited between runs, the stale build stayed. The assembler's own list (``as --MD``)
    joins the preprocessor's."""
    job = _job(tmp_path, "", backend)
    data_file = Path(job.source_dir) / "table.bin"
    data_file.write_bytes(b"\x01\x02\x03\x04")
    src = (f'asm(".section .rodata\\n.incbin \\"{data_file}\\"\\n.text");\n'
           'extern "C" int solve() { return 0; }\n')
    job = _job(tmp_path, src, backend)
    res, _ = wb.build(job, cache=tmp_path / "c")
    assert res.ok, res.error
    assert wb.build(job, cache=tmp_path / "c")[0].cached
    data_file.write_bytes(b"\x05\x06\x07\x08")
    again, _ = wb.build(job, cache=tmp_path / "c")
    assert not again.cached and again.ok
    assert again.note == "table.bin, which the cached build read, has changed since: rebuilt"


def test_the_confined_compiler_writes_its_build_folder_only(tmp_path):
    """workers.reap applies the ruleset to itself and whatever it starts."""
    build_dir, outside = tmp_path / "build", tmp_path / "outside"
    build_dir.mkdir()
    outside.mkdir()
    (outside / "r").write_text("readable by kopt's user\n")
    rules = build_confine.ruleset(["sh"], str(tmp_path / "sweep"), [], str(build_dir), [])
    env = {**package_env(), **build_confine.env_for(rules, str(build_dir))}
    script = (f"echo ok > {build_dir}/a && cat {build_dir}/a; echo no > {outside}/b; "
              f"cat {outside}/r /etc/hostname; true")
    p = subprocess.run([sys.executable, "-m", "workers.reap", "30", "sh", "-c", script],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.stdout == "ok\n" and p.returncode == 0, p.stdout + p.stderr
    assert not (outside / "b").exists()
    assert p.stderr.count("Permission denied") == 3, p.stderr


@pytest.mark.skipif(landlock.abi() < 6, reason="Landlock's signal scope needs ABI 6")
def test_the_confined_compiler_reaches_no_port_and_signals_no_process_of_the_host(tmp_path):
    """A sweep's ``flags: [-wrapper, ...]`` runs a program of its choosing around every
    compiler pass: red-team round 10's shell connected to a host service and SIGKILLed a
    host process. Under the ruleset nothing the compiler starts makes a TCP connection
    (Landlock ABI 4) or signals a process outside the build (ABI 6: a scope); unconfined,
    the same script does both."""
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        script = ("import os, socket\n"
                  "s = socket.socket()\n"
                  f"print(s.connect_ex(('127.0.0.1', {server.getsockname()[1]})) == 0)\n"
                  "try:\n"
                  f"    os.kill({os.getpid()}, 0); print(True)\n"
                  "except PermissionError:\n"
                  "    print(False)\n")
        rules = build_confine.ruleset([sys.executable], str(tmp_path / "sweep"), [],
                                      str(build_dir), [sys.prefix, sys.base_prefix])
        got = {}
        for confined in (True, False):
            env = {**package_env(),
                   **(build_confine.env_for(rules, str(build_dir)) if confined else {})}
            p = subprocess.run([sys.executable, "-m", "workers.reap", "30", sys.executable,
                                "-c", script], capture_output=True, text=True, env=env,
                               timeout=60)
            assert p.returncode == 0, p.stderr
            got[confined] = p.stdout.split()
    assert got == {True: ["False", "False"], False: ["True", "True"]}


def test_a_ruleset_the_kernel_refuses_is_a_failed_build_never_an_unconfined_one(tmp_path):
    env = {**package_env(), build_confine.ENV: "{not json"}
    p = subprocess.run([sys.executable, "-m", "workers.reap", "30", "true"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 126 and p.stderr.startswith("cannot confine the compiler ("), p.stderr


def test_isolation_none_leaves_the_compiler_unconfined(tmp_path, monkeypatch):
    monkeypatch.setenv("KOPT_ISOLATION", "none")
    assert build_confine.env_for({"read": [], "write": []}, "/x") == {"TMPDIR": "/x"}
    assert build_confine.describe().startswith("none (KOPT_ISOLATION=none")
    secret = _secret(tmp_path)
    res, _ = wb.build(_job(tmp_path, f'#include "{secret}"\n'), cache=tmp_path / "c")
    assert MARK in res.error  # what the switch gives up, shown
    monkeypatch.delenv("KOPT_ISOLATION")
    assert build_confine.describe() == (
        f"landlock ABI {landlock.abi()}: compilers read the toolchain, the sweep folder and "
        "include_dirs, and write their build folder only")


def test_folders_the_specs_flags_name_stay_readable(tmp_path):
    """``-I/abs/folder`` in the spec's flags is the spec author's choice, as include_dirs."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "three.h").write_text("#define THREE 3\n")
    job = _job(tmp_path, '#include "three.h"\nextern "C" int solve() { return THREE; }\n')
    job.flags = [f"-I{other}"]
    res, data = wb.build(job, cache=tmp_path / "c")
    assert res.ok, res.error
    assert build_confine.flag_paths(["-I/opt/x", "-isystem", "/opt/y", "-Wl,-rpath,/opt/r",
                                     "-include=/opt/z.h", "-O3"]) == [
        "/opt/x", "/opt/y", "/opt/r", "/opt/z.h"]
    # a macro's value, a prefix map's target: no file read (each opened /etc to #include)
    assert build_confine.flag_paths(["-DX=/etc", "-D", "Y=/root", "-UZ=/x", "-Xcompiler",
                                     "-I/opt/w", "-fdebug-prefix-map=/none=/etc",
                                     "-fmacro-prefix-map=/x=/etc", "-Wl,--rpath-link=/l",
                                     "-isystem=/opt/v"]) == ["/opt/w", "/opt/v"]


@pytest.mark.parametrize("form", ["{w}/other/../sweep/f.h", "/proc/self/root{w}/sweep/f.h",
                                  "/{w}/sweep/f.h", "../..{w}/sweep/f.h"])
def test_a_header_named_in_another_spelling_is_still_in_the_manifest(tmp_path, form):
    """A sweep-folder header included through a macro as ``/x/other/../sweep/f.h`` (or
    through ``/proc/self/root``, ``//``, or ``..`` from the build folder) was compared as
    written, was in no manifest, and an edit left the stale build trusted."""
    (tmp_path / "other").mkdir()
    job = _job(tmp_path, "")
    (Path(job.source_dir) / "f.h").write_text("static const int XV = 1;\n")
    name = form.format(w=tmp_path)
    src = f'#define H "{name}"\n#include H\nextern "C" int solve() {{ return XV; }}\n'
    job = _job(tmp_path, src)
    res, _ = wb.build(job, cache=tmp_path / "c")
    assert res.ok, res.error
    (Path(job.source_dir) / "f.h").write_text("static const int XV = 2;\n")
    again, _ = wb.build(job, cache=tmp_path / "c")
    assert not again.cached
    assert again.note == "f.h, which the cached build read, has changed since: rebuilt"


def _nvrtc_here() -> bool:
    from workers import nvrtc

    try:
        nvrtc.version()
    except nvrtc.NvrtcMissing:
        return False
    return True


@pytest.mark.skipif(not _nvrtc_here(), reason="needs NVRTC (cuda-bindings)")
def test_a_kernel_mode_include_of_a_host_file_is_refused_not_quoted(tmp_path):
    """Kernel mode's NVRTC compiler process is confined as nvcc is (after its warm-up, at
    its first build): a host file is "cannot open", never its lines in the error, while
    a header of the sweep folder still builds."""
    secret = _secret(tmp_path)
    launch = {"kernel": "k", "block": [1], "grid": [1], "smem_bytes": 0}
    wb.warm_nvrtc()
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "one.h").write_text("#define ONE 1\n")
    ok = wb.BuildJob("n1", "cuda", '#include "one.h"\nextern "C" __global__ void k(int *x) '
                     "{ x[0] = ONE; }\n", "k.cu", str(tmp_path / "sweep"), {},
                     target="sm_90", mode="kernel", launch=launch)
    res, data = wb.build(ok, cache=tmp_path / "c")
    assert res.ok and data, res.error
    bad = wb.BuildJob("n2", "cuda", f'#include "{secret}"\nextern "C" __global__ void k() {{}}\n',
                      "k.cu", str(tmp_path / "sweep"), {}, target="sm_90", mode="kernel",
                      launch=launch)
    res, data = wb.build(bad, cache=tmp_path / "c")
    assert not res.ok and data is None
    assert MARK not in res.error and "cannot open source file" in res.error, res.error


def test_a_compiler_output_that_is_a_link_is_not_taken(tmp_path):
    """A program a sweep's flags run (``-wrapper``) planted ``solve.so`` as a link to a file
    only root could read, and the unconfined build worker copied that file into the cache
    (red-team round 10): the output is opened without following a link, and only a regular
    file is taken."""
    secret = _secret(tmp_path)
    link = tmp_path / "solve.so"
    link.symlink_to(secret)
    assert wb._artifact(link).startswith("the compiler's output solve.so cannot be opened "
                                         "as a file (")
    fifo = tmp_path / "fifo.so"
    os.mkfifo(fifo)
    with open(os.open(fifo, os.O_RDWR), "rb"):  # a writer, so that opening it cannot block
        assert wb._artifact(fifo) == "the compiler's output fifo.so is not a regular file"
    real = tmp_path / "real.so"
    real.write_bytes(b"\x7fELF")
    assert wb._artifact(real) == b"\x7fELF"


def test_no_file_a_compiler_writes_passes_the_cap(tmp_path, monkeypatch):
    """A source that defines a 1 GiB initialized array built a 1.1 GB solve.so into the
    cache, which kopt never evicts (red-team round 10): every file a compiler writes is
    capped (``RLIMIT_FSIZE``, workers.build COMPILE_FILE_BYTES; 64 KiB here, for a 1 MiB
    array), and past it the build fails."""
    src = 'static char blob[1 << 20] = {1};\nextern "C" char* solve() { return blob; }\n'
    monkeypatch.setattr(wb, "COMPILE_FILE_BYTES", 1 << 16)
    res, data = wb.build(_job(tmp_path, src, bid="big"), cache=tmp_path / "c")
    assert not res.ok and data is None
    monkeypatch.setattr(wb, "COMPILE_FILE_BYTES", 1 << 30)
    res, data = wb.build(_job(tmp_path, src, bid="big2"), cache=tmp_path / "c")
    assert res.ok and len(data) > 1 << 20
