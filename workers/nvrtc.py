"""Kernel-mode builds: a ``__global__`` kernel -> a cubin with NVRTC, no host compile.

NVRTC (cuda-python's ``cuda.bindings.nvrtc``) compiles the source for the
target SM arch straight to a cubin, with ``--ptxas-options=-v`` so that the
log carries the same ptxas resource lines as an nvcc build. It runs in a
long-lived compiler process per build thread (``python -m workers.nvrtc``,
started once and fed jobs over a pipe): the Python start and the NVRTC
import are paid once per worker, and a compile that hangs or takes the
node's memory kills only that process (timeout ``KOPT_COMPILE_TIMEOUT_S``,
address-space cap ``KOPT_COMPILE_MEM_GB``, as for nvcc) and becomes a
compile error.

The artifact is a small bundle: a header (magic, JSON with the kernel's
lowered name, the launch block and the defines) followed by the cubin, so
that the harness can launch it with the driver API without any other input
(workers.launcher).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from functools import lru_cache
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from workers import build_confine, landlock
from workers.reap import limited, package_env
from workers.sandbox import describe_exit

MAGIC = b"KOPTKRN1"
PACKAGES = "cuda-bindings (cuda-python) and nvidia-cuda-nvrtc"


class NvrtcMissing(RuntimeError):
    """cuda-python's NVRTC bindings (or the NVRTC library) cannot be loaded here."""


def missing_message(exc: BaseException) -> str:
    """The error text for a node without cuda-python / NVRTC, naming the packages."""
    return (f"kernel mode needs NVRTC from cuda-python: install {PACKAGES} "
            f"(`pip install cuda-bindings nvidia-cuda-nvrtc`) on this node ({exc!r})")


def _nvrtc() -> Any:
    """The ``cuda.bindings.nvrtc`` module. Raises NvrtcMissing."""
    try:
        from cuda.bindings import nvrtc

        err, _, _ = nvrtc.nvrtcVersion()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"nvrtcVersion: {err!r}")
    except Exception as e:
        raise NvrtcMissing(missing_message(e)) from None
    return nvrtc


def version() -> tuple[int, int]:
    """NVRTC's (major, minor) version. Raises NvrtcMissing."""
    _, major, minor = _nvrtc().nvrtcVersion()
    return int(major), int(minor)


# -- artifacts ----------------------------------------------------------------------------
def pack(meta: dict[str, Any], cubin: bytes) -> bytes:
    """A kernel-mode artifact: MAGIC, the header length (u32 LE), JSON ``meta``, the cubin."""
    head = json.dumps(meta, sort_keys=True).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + cubin


def unpack(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(meta, cubin) of an artifact made by :func:`pack`. Raises ValueError for other data."""
    if not is_kernel_artifact(data):
        raise ValueError("not a kopt kernel-mode artifact (bad magic)")
    (n,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    return json.loads(data[start:start + n]), data[start + n:]


def is_kernel_artifact(data: bytes) -> bool:
    """True when ``data`` (at least its first 8 bytes) starts a kernel-mode artifact."""
    return data[:len(MAGIC)] == MAGIC


def is_kernel_file(path: str | Path) -> bool:
    """True when the file at ``path`` is a kernel-mode artifact (reads 8 bytes)."""
    with open(path, "rb") as f:
        return is_kernel_artifact(f.read(len(MAGIC)))


# -- the toolchain ------------------------------------------------------------------------
@lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[str, ...]:
    """The CUDA toolkit headers NVRTC needs for ``#include <cuda_fp16.h>`` and friends:
    cuda-pathfinder's cudart and CCCL dirs, else ``$CUDA_HOME``/``$CUDA_PATH`` or nvcc's
    ``../include``. Empty when none is found (plain kernels need no header)."""
    found: list[str] = []
    try:
        import cuda.pathfinder as pf

        for lib in ("cudart", "cccl"):
            d = pf.find_nvidia_header_directory(lib)
            if d:
                found.append(str(d))
    except Exception:
        pass
    if not found:
        import shutil

        roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
        nvcc = shutil.which(os.environ.get("NVCC", "nvcc"))
        if nvcc:
            roots.append(str(Path(os.path.realpath(nvcc)).parent.parent))
        for r in roots:
            if r and (Path(r) / "include" / "cuda_runtime.h").exists():
                found.append(str(Path(r) / "include"))
                if (Path(r) / "include" / "cccl").is_dir():
                    found.append(str(Path(r) / "include" / "cccl"))
                break
    return tuple(dict.fromkeys(found))


def _loaded_library() -> str | None:
    """Path of the libnvrtc this process loaded (from /proc/self/maps)."""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if name.startswith("libnvrtc") and "builtins" not in name:
                return path
    except OSError:
        pass
    return None


@lru_cache(maxsize=1)
def identity_text() -> str:
    """What identifies this node's NVRTC: its version, a sha256 of the loaded libnvrtc
    and the CUDA runtime header version NVRTC compiles against. Raises NvrtcMissing."""
    major, minor = version()
    lib = _loaded_library()
    digest = "unknown"
    if lib:
        h = hashlib.sha256()
        with open(lib, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        digest = h.hexdigest()
    headers = []
    for d in cuda_include_dirs():
        p = Path(d) / "cuda_runtime_api.h"
        if p.exists():
            m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", p.read_text(errors="replace"))
            headers.append(m.group(1) if m else "?")
    return f"nvrtc {major}.{minor}\nlibnvrtc sha256 {digest}\ncudart headers {headers}"


def options(target: str, defines: dict[str, Any], include_dirs: list[str],
            flags: list[str]) -> list[str]:
    """NVRTC options of a kernel-mode build: the arch (a cubin for ``sm_XX``/``sm_XXa``),
    C++17, ptxas resource report, line info, ``-I`` folders (the CUDA headers last), ``-D``
    defines, then the spec's ``flags``."""
    incs = [*include_dirs, *cuda_include_dirs()]
    return [f"--gpu-architecture={target}", "-std=c++17", "--ptxas-options=-v", "-lineinfo",
            *(f"-I{d}" for d in incs), *(f"-D{k}={v}" for k, v in sorted(defines.items())),
            *flags]


def compile_in_process(source: str, name: str, kernel: str, opts: list[str]) -> dict[str, Any]:
    """Compile ``source`` with NVRTC in this process.

    Args:
        source: the kernel source text.
        name: its file name (appears in error messages).
        kernel: the ``__global__`` kernel whose lowered (mangled) name is wanted.
        opts: NVRTC options (see :func:`options`).

    Returns:
        ``ok``, ``log`` (NVRTC's log: errors, or the ptxas report), ``cubin`` (bytes or
        None), ``lowered`` (the kernel's symbol in the cubin), ``seconds`` (wall time of
        the compile).

    Raises:
        NvrtcMissing: cuda-python or the NVRTC library is not installed.
    """
    nvrtc = _nvrtc()
    ok_code = nvrtc.nvrtcResult.NVRTC_SUCCESS
    t0 = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    if err != ok_code:
        return {"ok": False, "log": f"nvrtcCreateProgram: {err!r}", "cubin": None,
                "lowered": None, "seconds": time.perf_counter() - t0}
    try:
        nvrtc.nvrtcAddNameExpression(prog, kernel.encode())
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * n
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\0").decode(errors="replace")
        if res != ok_code:
            return {"ok": False, "log": log or repr(res), "cubin": None, "lowered": None,
                    "seconds": time.perf_counter() - t0}
        err, n = nvrtc.nvrtcGetCUBINSize(prog)
        if err != ok_code or n == 0:
            return {"ok": False, "cubin": None, "lowered": None,
                    "log": log + f"\nno cubin ({err!r}): the arch must be a real sm_XX",
                    "seconds": time.perf_counter() - t0}
        cubin = b" " * n
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        err, lowered = nvrtc.nvrtcGetLoweredName(prog, kernel.encode())
        if err != ok_code:
            return {"ok": False, "log": log + f"\nkernel {kernel!r} not found: {err!r}",
                    "cubin": None, "lowered": None, "seconds": time.perf_counter() - t0}
        return {"ok": True, "log": log, "cubin": bytes(cubin), "lowered": lowered.decode(),
                "seconds": time.perf_counter() - t0}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# -- the compiler process -----------------------------------------------------------------
class Compiler:
    """One long-lived NVRTC compiler process (``python -m workers.nvrtc``).

    Args:
        mem_gb: address-space cap of the process (GiB).
    """

    def __init__(self, mem_gb: float):
        self.mem_gb = mem_gb
        self.proc: subprocess.Popen | None = None
        self.w: Connection | None = None
        self.r: Connection | None = None
        self.confined_to: list[str] | None = None  # the folders the process may read

    def _start(self) -> None:
        r_child, w_parent = os.pipe()
        r_parent, w_child = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workers.nvrtc", str(r_child), str(w_child)],
            pass_fds=(r_child, w_child), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=package_env(),
            # memory cap; SIGKILL with its Ray worker: no compile outlives the task
            preexec_fn=limited(int(self.mem_gb * 2**30), signal.SIGKILL))
        os.close(r_child)
        os.close(w_child)
        self.w = Connection(w_parent, readable=False)
        self.r = Connection(r_parent, writable=False)
        if not self.r.poll(120):
            self.kill()
            raise NvrtcMissing("the NVRTC compiler process did not start in 120 s")
        try:
            hello = self.r.recv()
        except EOFError:
            code = self.kill()
            raise NvrtcMissing(f"the NVRTC compiler process died at start ({describe_exit(code)})"
                               ) from None
        if not hello.get("ready"):
            self.kill()
            raise NvrtcMissing(hello.get("error", "the NVRTC compiler process failed"))

    def compile(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Compile one request (``source``, ``name``, ``kernel``, ``options``) in the process.

        Returns:
            As :func:`compile_in_process`; a timeout or a dead process gives ``ok`` False
            with the reason in ``log`` (the process is restarted on the next call).

        Raises:
            NvrtcMissing: the process cannot start (no cuda-python / NVRTC here).
        """
        # a process confined to other folders is replaced; an unconfined one (started by
        # warm_nvrtc) confines itself at this request
        confine = request.get("confine")
        if self.proc is not None and self.confined_to not in (None, confine):
            self.kill()
        if self.proc is None or self.proc.poll() is not None:
            self.kill()
            self._start()
        self.confined_to = confine
        assert self.w is not None and self.r is not None
        t0 = time.perf_counter()
        try:
            self.w.send(request)
            ready = self.r.poll(timeout_s)
        except (BrokenPipeError, OSError):
            ready = True
        if not ready:
            self.kill()
            return {"ok": False, "cubin": None, "lowered": None,
                    "log": f"NVRTC timed out after {timeout_s:.0f} s", "seconds": timeout_s}
        try:
            return self.r.recv()
        except (EOFError, OSError):
            code = self.kill()
            return {"ok": False, "cubin": None, "lowered": None,
                    "seconds": time.perf_counter() - t0,
                    "log": f"the NVRTC compiler process died ({describe_exit(code)}); a compile "
                           f"past the {self.mem_gb:g} GiB cap (KOPT_COMPILE_MEM_GB) ends so"}

    def kill(self) -> int | None:
        """Stop the process; returns its exit code (None if it was not running)."""
        for c in (self.w, self.r):
            if c is not None:
                c.close()
        self.w = self.r = None
        p, self.proc = self.proc, None
        if p is None:
            return None
        if p.poll() is None:
            p.kill()
        try:
            return p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return None


_local = threading.local()


def compiler(mem_gb: float) -> Compiler:
    """This thread's compiler process (started on first use)."""
    c = getattr(_local, "compiler", None)
    if c is None:
        c = _local.compiler = Compiler(mem_gb)
    return c




def confine(folders: list[str]) -> str | None:
    """Confine this compiler process (and anything it starts) with Landlock
    (workers.landlock), as workers.build_confine confines nvcc: read the toolchain's
    folders, Python's (its prefixes and absolute ``sys.path`` entries but the working
    folder), the folders of every shared library it has loaded (libnvrtc's, where NVRTC
    loads its builtins from), the CUDA headers and ``folders`` (the sweep folder,
    include_dirs and the paths the spec's flags name); write nothing but ``/dev/null``.
    Returns the reason it could not, else None (also where the kernel has no Landlock)."""
    cwd = os.getcwd()
    python = [p for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path}
              if os.path.isabs(p) and os.path.isdir(p) and p not in (cwd, "/")]
    read = [*build_confine.SYSTEM_READ, *python, *_mapped_folders(), *cuda_include_dirs(),
            *folders]
    try:
        landlock.restrict(read, build_confine.DEVICES)
    except OSError as e:
        return f"cannot confine the compiler ({e})"
    return None


def _mapped_folders() -> list[str]:
    """The folders of the files this process has mapped (its shared libraries)."""
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    found.add(os.path.dirname(parts[5].strip()))
    except OSError:
        pass
    return sorted(found - {"/"})


def main(rfd: int, wfd: int) -> None:
    """Serve compile requests over the pipe until EOF (the parent went away)."""
    rconn, wconn = Connection(rfd, writable=False), Connection(wfd, readable=False)
    try:
        _nvrtc()
    except NvrtcMissing as e:
        wconn.send({"ready": False, "error": str(e)})
        return
    wconn.send({"ready": True, "pid": os.getpid()})
    confined = False
    while True:
        try:
            req = rconn.recv()
        except EOFError:
            return
        why = None if confined or req.get("confine") is None else confine(req["confine"])
        if why is not None:
            wconn.send({"ok": False, "log": why, "cubin": None, "lowered": None,
                        "seconds": 0.0})
            return
        confined = confined or req.get("confine") is not None
        try:
            res = compile_in_process(req["source"], req["name"], req["kernel"], req["options"])
        except Exception as e:
            res = {"ok": False, "log": f"NVRTC: {e!r}", "cubin": None, "lowered": None,
                   "seconds": 0.0}
        wconn.send(res)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
