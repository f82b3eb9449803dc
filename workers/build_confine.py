"""What a compiler run on a candidate's source may read and write, and which files it
read beyond the ``#include`` list.

The confinement (workers.landlock, applied by workers.reap to the compiler and everything it
starts): read the toolchain's folders (``/usr``, ``/bin``, ``/lib*``, the compiler's own
install prefix, ``$CUDA_HOME``), the sweep folder and the space's include_dirs; write only
the build's own folder (its ``TMPDIR`` too); ``/dev/null``, ``/dev/zero``, ``/dev/urandom``.
Everything else, ``/etc``, ``/home``, ``/root``, the store, the build cache and the driver's
files included, is "Permission denied" to it.

The build's manifest (workers.deps) holds every local file the compiler read: the
preprocessor's ``-MD`` list, and for a GNU toolchain the assembler's too (``as --MD``: a
file pulled in with ``.incbin`` or ``.include``, which the preprocessor never sees).

Stdlib only: the build worker imports it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from workers import landlock
from workers.isolation import ENV_SWITCH, NONE

ENV = "KOPT_BUILD_CONFINE"  # workers.reap reads the ruleset ({"read": [...], "write": [...]})
SYSTEM_READ = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
               "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"]
DEVICES = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"]
_HOST_COMPILER_OPTIONS = ("-ccbin", "--compiler-bindir")


def prefix_of(exe: str) -> str | None:
    """The install prefix of executable ``exe`` (found on PATH, links followed): the folder
    above its ``bin`` (``/opt/cuda-13.0`` for ``/opt/cuda-13.0/bin/nvcc``); None when it is
    not found."""
    found = shutil.which(exe)
    if found is None:
        return None
    real = Path(os.path.realpath(found))
    return str(real.parent.parent if real.parent.name == "bin" else real.parent)


def ruleset(exes: list[str], source_dir: str, include_dirs: list[str], build_dir: str,
            extra_read: list[str], flags: list[str] | tuple[str, ...] = ()
            ) -> dict[str, list[str]]:
    """The confinement of one compile: ``{"read": paths, "write": paths}``.

    Args:
        exes: the compiler executables the build runs (names on PATH or paths); their install
            prefixes (links followed; not a wrapper script's target: name that in
            ``$CUDA_HOME``) become readable.
        source_dir: the sweep folder (read).
        include_dirs: the space's extra ``-I`` folders (read).
        build_dir: the build's own folder (read and write; the compiler's TMPDIR).
        extra_read: more files or folders to read (kopt's pre-included shim).
        flags: the spec's compiler flags: the absolute paths they name are read
            (:func:`flag_paths`).
    """
    read = toolchain(exes)
    read += [source_dir, *include_dirs, *flag_paths(flags), *extra_read]
    return {"read": read, "write": [build_dir, *DEVICES]}


# a compiler's message for a file it could not open: "PATH: No such file or directory" or
# "PATH: Permission denied" (gcc, nvcc's front end); GNU as says "file not found" for both
_CANNOT_OPEN = re.compile(r"(?P<path>/[^\s:'\"]+): (?:No such file or directory|Permission denied)")
UNREADABLE = ("not readable to the compiler (it reads the toolchain, the sweep folder, "
              "include_dirs and the paths the spec's flags name)")


def blur(log: str, read: list[str]) -> str:
    """``log`` (a failed compile's output) with "No such file or directory" and "Permission
    denied" for a path outside ``read`` (the ruleset's readable paths) both said as
    :data:`UNREADABLE`: the two told a source whether any host file exists. Paths inside
    ``read`` keep the compiler's own words."""
    roots = [os.path.realpath(r) for r in read]
    return _CANNOT_OPEN.sub(functools.partial(_said, roots), log)


def _said(roots: list[str], m: re.Match[str]) -> str:
    """One "cannot open" message, as :func:`blur` rewrites it."""
    p = os.path.realpath(m.group("path"))
    if any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots):
        return m.group(0)
    return f"{m.group('path')}: {UNREADABLE}"


def toolchain(exes: list[str]) -> list[str]:
    """The toolchain's folders: :data:`SYSTEM_READ`, the install prefix of each of ``exes``
    (:func:`prefix_of`), ``$CUDA_HOME`` and ``$CUDA_PATH``. What a build reads there is
    covered by the compiler's identity, not by its manifest."""
    read = list(SYSTEM_READ)
    for exe in exes:
        p = prefix_of(exe)
        if p is not None:
            read.append(p)
    return read + [os.environ[v] for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]


# the options whose argument is a file or folder the compiler reads (GCC's and nvcc's):
# joined (``-I/x``, ``--include-path=/x``) or as the next argument (``-isystem /x``); a
# linker's ``-Wl,-rpath,/x`` / ``-Xlinker -rpath=/x`` too. Any other option's path (a
# prefix map's target, ``-fdebug-prefix-map=/none=/etc``) opens nothing: it opened /etc to
# ``#include`` (red-team round 11), as ``-DX=/etc`` did (round 10)
PATH_OPTIONS = ("-I", "-isystem", "-iquote", "-idirafter", "-L", "-include", "-imacros",
                "--include-path", "--system-include", "--library-path", "--pre-include",
                "-rpath")


def flag_paths(flags: list[str] | tuple[str, ...]) -> list[str]:
    """The absolute paths the spec's compiler ``flags`` give to an option that reads them
    (:data:`PATH_OPTIONS`: ``-I/opt/x/include``, ``-L/opt/x/lib``, ``-isystem /opt/y``,
    ``-include /opt/z.h``, ``-Wl,-rpath,/opt/r``): the spec's author chose them, as
    include_dirs, so the compiler may read them. Relative paths are relative to the build
    folder, which is readable already."""
    out: list[str] = []
    words = [w for f in flags for w in (f.split(",") if f.startswith("-Wl,") else [f])]
    for i, w in enumerate(words):
        for opt in PATH_OPTIONS:
            if w == opt and i + 1 < len(words):
                arg = words[i + 1]
            elif w.startswith(opt) and w != opt:
                arg = w[len(opt):].lstrip("=")
            else:
                continue
            if arg.startswith("/"):
                out.append(arg)
            break
    return out


def wanted() -> bool:
    """Whether compilers are to be confined: always, unless ``KOPT_ISOLATION=none`` (the
    switch that also runs candidates unsandboxed) is set."""
    return os.environ.get(ENV_SWITCH, "").lower() != NONE


def env_for(rules: dict[str, list[str]], build_dir: str) -> dict[str, str]:
    """The environment entries that carry ``rules`` to workers.reap (none when
    :func:`wanted` says no) and point the compiler's temporary files (nvcc's, the
    assembler's) into ``build_dir``."""
    return {ENV: json.dumps(rules), "TMPDIR": build_dir} if wanted() else {"TMPDIR": build_dir}


def describe() -> str:
    """One line for ``kopt env``: how this host confines a compiler run on a candidate's
    source (``landlock ABI N: ...``), or ``none`` and why."""
    if not wanted():
        return f"none ({ENV_SWITCH}=none is set in kopt's environment)"
    v = landlock.abi()
    if v == 0:
        return ("none (this kernel has no Landlock, Linux 5.13+ with landlock among its "
                "LSMs: compilers read and write as kopt's user)")
    return (f"landlock ABI {v}: compilers read the toolchain, the sweep folder and "
            "include_dirs, and write their build folder only")


@lru_cache(maxsize=8)
def _gnu(exe: str) -> bool:
    """Whether ``exe`` is GCC (its ``--version`` names the Free Software Foundation):
    its driver takes ``-Wa,--MD,FILE`` for GNU as."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Free Software Foundation" in out.stdout


def assembler_deps(backend: str, host_compiler: str, flags: list[str], rdc: bool,
                   depfile: str) -> list[str]:
    """The options that make GNU as write the files it read (``.incbin``, ``.include``) to
    ``depfile``; [] where it cannot be asked (a compiler other than GCC, a host compiler
    chosen in ``flags``, or a relocatable-device-code build, whose device-link step runs the
    assembler again and overwrites the list).

    Args:
        backend: ``cpu`` (``host_compiler`` compiles) or ``cuda`` (nvcc, whose host compiler
            is ``host_compiler`` unless ``flags`` choose one).
    """
    if backend == "cuda":
        if rdc or any(f.split("=")[0] in _HOST_COMPILER_OPTIONS for f in flags):
            return []
        gnu = _gnu("gcc")  # nvcc's host compiler when none is chosen
        return ["-Xcompiler", f"-Xassembler,--MD,-Xassembler,{depfile}"] if gnu else []
    return [f"-Wa,--MD,{depfile}"] if _gnu(host_compiler) else []
