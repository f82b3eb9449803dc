"""Builds: one candidate's source + defines -> a shared object exporting ``solve``.

CUDA sources go through nvcc for the target SM arch (``-arch=sm_90``, or
``-gencode arch=compute_90a,code=sm_90a`` when a method needs wgmma or
setmaxnreg), with ``-Xptxas -v`` so that registers, shared memory and spills
are recorded. C++ sources go through the system compiler with OpenMP. Every
artifact lands in a content-addressed cache keyed by the build id (source,
defines, flags, target, compiler identity); a compile error is a value, never
an exception.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from workers.ptxas import as_dicts, parse_ptxas, summarize

SHIM = Path(__file__).with_name("kopt_shim.h")
CUDA_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo"]
CPU_FLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp"]
COMPILE_TIMEOUT_S = float(os.environ.get("KOPT_COMPILE_TIMEOUT_S", 600))
# address-space cap of one compiler process (GiB): a runaway compile fails as a compile
# error instead of taking the node's memory (and Ray's OOM killer) with it
COMPILE_MEM_GB = float(os.environ.get("KOPT_COMPILE_MEM_GB", 8))


def _limit_memory() -> None:
    import resource

    cap = int(COMPILE_MEM_GB * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def cache_root() -> Path:
    """The build cache: ``$KOPT_CACHE/builds`` (default ``~/.cache/kopt/builds``)."""
    base = os.environ.get("KOPT_CACHE") or os.path.join(Path.home(), ".cache", "kopt")
    return Path(base) / "builds"


def compiler(backend: str) -> str:
    """The compiler executable for ``backend``: ``$NVCC``/nvcc or ``$CXX``/c++."""
    if backend == "cuda":
        return os.environ.get("NVCC", "nvcc")
    return os.environ.get("CXX", "c++")


@lru_cache(maxsize=4)
def compiler_identity(backend: str) -> str:
    """A 16-hex digest of the compiler's ``--version`` output (plus the host C++ for nvcc).

    Returns ``"missing:<exe>"`` when the compiler is not installed, so that
    the build fails as a value later with a clear message.
    """
    texts = []
    exes = [compiler(backend)] + ([compiler("cpu")] if backend == "cuda" else [])
    for exe in exes:
        try:
            texts.append(subprocess.run([exe, "--version"], capture_output=True, text=True,
                                        timeout=60).stdout)
        except (OSError, subprocess.TimeoutExpired):
            return f"missing:{exe}"
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]


@dataclass
class BuildJob:
    """What to build. ``source`` is the text (it travels to any node).

    Attributes:
        build_id: content address (see kopt.pipeline.build_id).
        backend: ``cuda`` or ``cpu``.
        source: kernel source text; ``source_name`` its file name (suffix matters).
        source_dir: the sweep folder, added as ``-I`` for relative includes.
        defines: ``-DNAME=value`` pairs.
        flags: extra compiler flags from the spec.
        target: ``sm_90``, ``sm_90a``, ... or ``host``.
        include_dirs: extra ``-I`` folders.
    """

    build_id: str
    backend: str
    source: str
    source_name: str
    source_dir: str
    defines: dict[str, Any]
    flags: list[str] = field(default_factory=list)
    target: str = "host"
    include_dirs: list[str] = field(default_factory=list)


@dataclass
class BuildResult:
    """A build's outcome (a value: ``ok`` False carries the compiler's error text).

    Units: compile_s in seconds; registers per thread; bytes for smem/spills.
    """

    build_id: str
    ok: bool
    error: str = ""
    compile_s: float = 0.0
    cached: bool = False
    registers: int | None = None
    smem_bytes: int | None = None
    spill_bytes: int | None = None
    kernels: list[dict] = field(default_factory=list)
    command: str = ""
    log: str = ""


def command(job: BuildJob, src: Path, out: Path) -> list[str]:
    """The compiler command line for ``job`` (source at ``src``, artifact at ``out``)."""
    defs = [f"-D{k}={v}" for k, v in sorted(job.defines.items())]
    incs = [f"-I{d}" for d in [job.source_dir, *job.include_dirs]]
    if job.backend == "cuda":
        sm = job.target.removeprefix("sm_")
        arch = ([f"-gencode=arch=compute_{sm},code=sm_{sm}"] if sm.endswith("a")
                else [f"-arch=sm_{sm}"])
        return [compiler("cuda"), *CUDA_FLAGS, *arch, "--pre-include", str(SHIM), *incs, *defs,
                *job.flags, "-o", str(out), str(src)]
    return [compiler("cpu"), *CPU_FLAGS, *incs, *defs, *job.flags, "-o", str(out), str(src)]


def build(job: BuildJob, cache: Path | None = None) -> tuple[BuildResult, bytes | None]:
    """Build ``job`` (or take it from the cache). Never raises for a bad source.

    Returns:
        (result, artifact bytes or None when the build failed).
    """
    cache = cache or cache_root()
    entry = cache / job.build_id
    art, meta = entry / "solve.so", entry / "meta.json"
    if art.exists() and meta.exists():
        res = BuildResult(**_load_json(meta))
        res.cached = True
        return res, art.read_bytes()
    with tempfile.TemporaryDirectory(prefix="kopt-build-") as tmp:
        src = Path(tmp) / job.source_name
        src.write_text(job.source)
        out = Path(tmp) / "solve.so"
        cmd = command(job, src, out)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                               cwd=tmp, preexec_fn=_limit_memory)
            rc, log = p.returncode, (p.stdout + p.stderr)
        except FileNotFoundError:
            return BuildResult(job.build_id, False, f"compiler not found: {cmd[0]}"), None
        except subprocess.TimeoutExpired:
            return BuildResult(job.build_id, False,
                               f"compiler timed out after {COMPILE_TIMEOUT_S:.0f} s"), None
        dt = time.perf_counter() - t0
        cmd_s = " ".join(cmd).replace(tmp, ".")
        if rc != 0 or not out.exists():
            return BuildResult(job.build_id, False, _tail(log.replace(tmp + "/", "")), dt,
                               command=cmd_s), None
        kernels = parse_ptxas(log)
        res = BuildResult(job.build_id, True, "", dt, False, **summarize(kernels),
                          kernels=as_dicts(kernels), command=cmd_s, log=_tail(log, 4000))
        data = out.read_bytes()
        _store(entry, data, res)
        return res, data


def ensure_artifact(build_id: str, data: bytes, cache: Path | None = None) -> Path:
    """Write ``data`` as the cached artifact of ``build_id`` if absent; return its path."""
    entry = (cache or cache_root()) / build_id
    art = entry / "solve.so"
    if not art.exists():
        entry.mkdir(parents=True, exist_ok=True)
        tmp = entry / f".solve.so.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, art)
    return art


def _store(entry: Path, data: bytes, res: BuildResult) -> None:
    import json
    from dataclasses import asdict

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    (tmp / "solve.so").write_bytes(data)
    (tmp / "meta.json").write_text(json.dumps(asdict(res)))
    try:
        os.replace(tmp, entry)
    except OSError:  # another worker stored it first
        shutil.rmtree(tmp, ignore_errors=True)


def _load_json(p: Path) -> dict:
    import json

    d = json.loads(p.read_text())
    d.pop("cached", None)
    return d


def _tail(text: str, n: int = 2000) -> str:
    text = text.strip()
    return text if len(text) <= n else "...\n" + text[-n:]
