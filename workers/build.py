"""Builds: one candidate's source + defines -> a shared object exporting ``solve``, or
(kernel mode) a cubin of its ``__global__`` kernel.

CUDA sources go through nvcc for the target SM arch only (SASS, no PTX:
``-gencode arch=compute_90,code=sm_90``, or ``sm_90a`` when a method needs
wgmma or setmaxnreg) with no device-link step, and ``-Xptxas -v`` so that
registers, shared memory and spills are recorded. C++ sources go through the
system compiler with OpenMP. Kernel-mode sources (a sweep with ``launch:``) go
through NVRTC to a cubin with no host compile at all (workers.nvrtc). Every
artifact lands in a content-addressed cache keyed by the build id (source and
the local headers it includes, defines, flags, target, launch, compiler
identity); a compile error is a value, never an exception.

A cache entry is trusted only after a check: its artifact has the size and
sha256 recorded when it was stored, and every local file the compiler read
(its ``-MD`` dependency list; kernel mode: workers.deps's include scan) still
has the recorded sha256. A damaged or stale entry is rebuilt, and the new
BuildResult says so in ``note``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path

from workers import build_cache, build_confine, cgroup, deps, nvrtc
from workers.jail import SetupError, file_bytes, scratch_bytes
from workers.ptxas import as_dicts, parse_ptxas, summarize
from workers.reap import limited, package_env
from workers.records import BuildJob, BuildResult

SHIM = Path(__file__).with_name("kopt_shim.h")
# nvcc's -O is the host compiler's level only. Host -O0 would save ~25 ms of a ~1.9 s
# build (docs/verified/2026-11-30-build-time.md) but solve()'s host code runs inside the
# timed window of a multi-launch solve, so the host code stays optimized.
CUDA_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-lineinfo"]
_RDC = ("-rdc", "--relocatable-device-code", "-dc", "--device-c", "-dlink", "--device-link")
CPU_FLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-fopenmp"]
# nvcc / NVRTC options that choose the GPU target; kopt sets it per device class (the build
# job's ``target``, stored as the ``arch`` column), so a spec's flags may not
ARCH_OPTIONS = ("-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode",
                "--generate-code")


class EnvError(ValueError):
    """An environment variable kopt reads holds a value it cannot use (the message names it,
    the value and the range)."""


def env_number(name: str, default: float, lo: float, hi: float) -> tuple[float, str]:
    """``$name`` as a number in ``[lo, hi]`` (``default`` when unset), and "" or why it was
    refused (then the default stands; :func:`check_env` turns the refusal into an error)."""
    import math

    raw = os.environ.get(name)
    if raw is None:
        return default, ""
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not lo <= v <= hi:  # NaN fails too
        return default, f"${name}={raw!r}: expected a number from {lo:g} to {hi:g}"
    return v, ""


COMPILE_TIMEOUT_S, _TIMEOUT_BAD = env_number("KOPT_COMPILE_TIMEOUT_S", 600.0, 1.0, 86400.0)
# address-space cap of one compiler process (GiB): a runaway compile fails as a compile
# error instead of taking the node's memory (and Ray's OOM killer) with it
COMPILE_MEM_GB, _MEM_BAD = env_number("KOPT_COMPILE_MEM_GB", 8.0, 0.5, 4096.0)


def _cache_bad(create: bool = True) -> str:
    """"" or why the build cache (:func:`cache_root`, ``$KOPT_CACHE/builds``) cannot be
    used: it, or the nearest folder above it that exists, is a file (every build failed
    with a NotADirectoryError or FileExistsError traceback as its error text), or, with
    ``create``, it cannot be created or written (:func:`_cache_unusable`, which creates
    it)."""
    raw = os.environ.get("KOPT_CACHE")
    root = cache_root().absolute()
    p = root
    while not p.exists() and p != p.parent:
        p = p.parent
    if p.is_dir():
        return _cache_unusable(raw, root) if create else ""
    if raw:
        inside = (f" (or move {p} out of the way)"
                  if p.is_relative_to(Path(raw).absolute()) and p != Path(raw).absolute()
                  else "")
        return (f"$KOPT_CACHE={raw!r}: {p} is a file, not a folder; point KOPT_CACHE at a "
                f"folder for the build cache (default ~/.cache/kopt){inside}")
    return (f"the build cache {root}: {p} is a file, not a folder; move it out of the way or "
            "point KOPT_CACHE at a folder for the build cache")


def _cache_unusable(raw: str | None, root: Path) -> str:
    """"" or why the build cache folder ``root`` cannot be made or written (a
    symlink loop, a dangling link or a folder nobody may create passed the file check, and
    every build failed with a traceback): tries to create it (the first build would)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        ok = root.is_dir() and os.access(root, os.W_OK | os.X_OK)
        why = "" if ok else "not a folder this user can write"
    except OSError as e:
        why = f"{e.strerror or type(e).__name__}: {e.filename or root}"
    except RuntimeError:  # Python 3.11's symlink-loop error from pathlib
        why = f"a symlink loop on the way to {root}"
    if not why:
        return ""
    what = f"$KOPT_CACHE={raw!r}" if raw else f"the build cache {root}"
    return (f"{what}: the build cache folder {root} cannot be made or written ({why}); point "
            "KOPT_CACHE at a folder you can write (default ~/.cache/kopt)")


def _limits_bad() -> str:
    """What is wrong with ``$KOPT_HARNESS_PIDS`` / ``$KOPT_HARNESS_MEM_GB`` (the sandboxed
    harness's limits, workers.cgroup), ``$KOPT_HARNESS_SCRATCH_GB`` (its scratch folder's
    size) or ``$KOPT_HARNESS_FILE_GB`` (its largest file, workers.jail), or ""."""
    try:
        cgroup.limits_wanted()
        scratch_bytes()
        file_bytes()
    except (ValueError, SetupError) as e:
        return str(e)
    return ""


def spares_wanted() -> tuple[int, str]:
    """How many fresh harnesses a GPU's device actor keeps started for its contests
    (workers.spares; each holds a CUDA context, about 0.5 GiB of device memory):
    ``$KOPT_SPARES``, a whole number from 0 (each started on demand) to 8, default 3; and
    "" or why the value was refused (the default then stands)."""
    n, bad = env_number("KOPT_SPARES", 3.0, 0.0, 8.0)
    if not bad and n != int(n):
        raw = os.environ["KOPT_SPARES"]
        n, bad = 3.0, f"$KOPT_SPARES={raw!r}: expected a whole number from 0 to 8"
    return int(n), bad


def check_env(builds: bool = True) -> None:
    """Raise EnvError naming each KOPT_COMPILE_* variable (and KOPT_CACHE_MAX_GB,
    KOPT_SPARES) whose value is unusable, and a
    ``$KOPT_CACHE`` that is (or lies under) a file; with ``builds`` (a command that builds),
    also one whose build cache folder cannot be made or written (this creates it)."""
    bad = "; ".join(x for x in (_TIMEOUT_BAD, _MEM_BAD, spares_wanted()[1], build_cache.cap()[1],
                                _limits_bad(), _cache_bad(builds)) if x)
    if bad:
        raise EnvError(bad)


# the compiler wrapper's set-up: memory cap, and SIGTERM when the build task dies (then
# workers.reap kills the compiler's whole process group)
_limit_memory = limited(int(COMPILE_MEM_GB * 2**30), signal.SIGTERM)
# the largest file a compiler may write, solve.so included (bytes, ``RLIMIT_FSIZE``): a
# source that defines a 1 GiB initialized array built a 1.1 GB solve.so into the cache (red-team
# round 10), which keeps such builds until they are the least recently used past its cap;
# CUTLASS builds stay far below it
COMPILE_FILE_BYTES = 1 << 30


def _limit_build() -> None:
    """The compiler wrapper's ``preexec_fn``: :data:`_limit_memory`, then no file past
    :data:`COMPILE_FILE_BYTES` (the write fails with ``EFBIG``, the compiler with it).
    Never raises."""
    _limit_memory()
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (COMPILE_FILE_BYTES, COMPILE_FILE_BYTES))
    except (OSError, ValueError):
        pass


def _artifact(out: Path) -> bytes | str:
    """The bytes of the compiler's output ``out``, or why it is not taken: a link (a
    source's ``-wrapper``, or anything the compiler ran, planted ``solve.so`` as a link to a
    file only root could read, and the unconfined build worker copied it into the cache,
    readable by all: red-team round 10) or anything but a regular file. Opened without
    following a link (``O_NOFOLLOW``)."""
    try:
        fd = os.open(out, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        return f"the compiler's output {out.name} cannot be opened as a file ({e.strerror})"
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return f"the compiler's output {out.name} is not a regular file"
        return f.read()


def _reaped(cmd: list[str], timeout_s: float, confine: dict[str, str] | None = None
            ) -> tuple[list[str], dict[str, str]]:
    """``cmd`` wrapped in workers.reap (its process group dies on timeout or with the
    build task) and the environment that finds the ``workers`` package, plus ``confine``
    (workers.build_confine.env_for: the compiler's Landlock ruleset and TMPDIR)."""
    return ([sys.executable, "-m", "workers.reap", f"{timeout_s:g}", *cmd],
            {**package_env(), **(confine or {})})


def cache_root() -> Path:
    """The build cache: ``$KOPT_CACHE/builds`` (default ``~/.cache/kopt/builds``)."""
    return build_cache.root()


def compiler(backend: str) -> str:
    """The compiler executable for ``backend``: ``$NVCC``/nvcc or ``$CXX``/c++."""
    if backend == "cuda":
        return os.environ.get("NVCC", "nvcc")
    return os.environ.get("CXX", "c++")


WARM_KERNEL = 'extern "C" __global__ void kopt_warm(float *x) { x[threadIdx.x] = 0.f; }'


def warm_nvrtc() -> float | None:
    """Start this thread's NVRTC compiler process (workers.nvrtc.Compiler) and compile a
    one-line kernel in it, so that the next kernel-mode build pays neither the process's
    start and imports nor NVRTC's first compile (a fresh warm builder's first
    build took 0.7 s on an H200 host where builds average 0.24 s). Returns the seconds it
    took, or None without NVRTC (a build then fails with NVRTC's own message)."""
    t0 = time.perf_counter()
    req = {"source": WARM_KERNEL, "name": "kopt_warm.cu", "kernel": "kopt_warm",
           "options": ["-std=c++17"]}
    try:
        nvrtc.compiler(COMPILE_MEM_GB).compile(req, COMPILE_TIMEOUT_S)
    except nvrtc.NvrtcMissing:
        return None
    return time.perf_counter() - t0


@lru_cache(maxsize=4)
def compiler_identity(backend: str) -> str:
    """A 16-hex digest of the compiler's identity.

    Args:
        backend: the toolchain (kopt.core.spec.Space.toolchain): ``cuda`` (nvcc's
            ``--version`` plus the host C++'s, and kopt's pre-included shim), ``cpu``
            (c++'s ``--version``), each with kopt's own flags for that compiler, or
            ``nvrtc`` (NVRTC's version, a digest of the loaded libnvrtc and the CUDA
            header version; workers.nvrtc.identity_text).

    Returns:
        The digest, or ``"missing:<exe or package>"`` when the compiler is not
        installed, so that the build fails as a value later with a clear message.
    """
    if backend == "nvrtc":
        try:
            return hashlib.sha256(nvrtc.identity_text().encode()).hexdigest()[:16]
        except nvrtc.NvrtcMissing:
            return "missing:cuda-bindings"
    texts = [" ".join(CUDA_FLAGS if backend == "cuda" else CPU_FLAGS)]
    if backend == "cuda":  # every CUDA build pre-includes it
        texts.append(SHIM.read_text())
    exes = [compiler(backend)] + ([compiler("cpu")] if backend == "cuda" else [])
    for exe in exes:
        try:
            texts.append(subprocess.run([exe, "--version"], capture_output=True, text=True,
                                        timeout=60).stdout)
        except (OSError, subprocess.TimeoutExpired):
            return f"missing:{exe}"
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]


_ahead: dict[str, threading.Thread] = {}


def start_identity(backend: str) -> None:
    """Start computing :func:`compiler_identity` of ``backend`` in a thread of this process
    (it is cached for the process): a sweep's driver does it while Ray starts (NVRTC's
    identity hashes libnvrtc, about 0.2 s before the first builds on an H200 host, measured
    2026-12-01).
    :func:`identity` waits for it."""
    if backend not in _ahead:
        _ahead[backend] = threading.Thread(target=compiler_identity, args=(backend,),
                                           daemon=True)
        _ahead[backend].start()


def identity(backend: str) -> str:
    """:func:`compiler_identity`, after the computation :func:`start_identity` began."""
    t = _ahead.get(backend)
    if t is not None:
        t.join()
    return compiler_identity(backend)


def identity_and_env(backend: str) -> tuple[str, dict]:
    """The node's compiler identity for ``backend`` (:func:`compiler_identity`) and its
    environment (workers.envinfo.collect). A Ray task of the driver's: it lives here, not
    in kopt/, so that the worker that runs it imports this small module only (before,
    a build task's worker that imported kopt.run.builder paid for kopt, pydantic and pyarrow
    before its first compile)."""
    # lazy: a build task's worker imports this small module only; the node's environment when asked
    from workers.envinfo import collect

    return compiler_identity(backend), collect()


ARTIFACT = {"solve": "solve.so", "kernel": "kernel.kopt"}
# beside meta.json in a cache entry: the artifact's size and sha256 and the local files the
# build read ({path relative to the source folder: sha256}), checked on every lookup
VERIFY = "verify.json"


def arch_flag(flags: list[str]) -> str | None:
    """The first of ``flags`` that sets the GPU arch (an ARCH_OPTIONS option, as
    ``-arch=sm_80``, ``-arch sm_80`` or a separate ``-arch``), or None."""
    for f in flags:
        name = re.split(r"[=\s]", f.strip(), maxsplit=1)[0]
        if name in ARCH_OPTIONS:
            return f
    return None


def command(job: BuildJob, src: Path, out: Path) -> list[str]:
    """The compiler command line for a solve-mode ``job`` (source at ``src``, artifact at
    ``out``). Both compilers also write their dependency list (``-MD``) beside ``out``
    (``solve.d``): the build's manifest of local files.

    CUDA: SASS for the target arch only (``-gencode arch=compute_XX,code=sm_XX``: the
    artifact runs on the device class it was built for, so no PTX is embedded for a
    JIT), and no device-link step (``-nodlink``: whole-program builds have nothing to
    link) unless the spec's flags ask for relocatable device code.
    """
    defs = [f"-D{k}={v}" for k, v in sorted(job.defines.items())]
    incs = [f"-I{d}" for d in [job.source_dir, *job.include_dirs]]
    dep = ["-MD", "-MF", str(out.with_suffix(".d"))]
    rdc = any(f.split("=")[0] in _RDC for f in job.flags)
    dep += build_confine.assembler_deps(job.backend, compiler("cpu"), job.flags, rdc,
                                        str(out.with_suffix(".as.d")))
    if job.backend == "cuda":
        sm = job.target.removeprefix("sm_")
        arch = [f"-gencode=arch=compute_{sm},code=sm_{sm}"]
        return [compiler("cuda"), *CUDA_FLAGS, *arch, *([] if rdc else ["-nodlink"]),
                "--pre-include", str(SHIM), *incs, *defs, *job.flags, *dep, "-o", str(out),
                str(src)]
    return [compiler("cpu"), *CPU_FLAGS, *incs, *defs, *job.flags, *dep, "-o", str(out),
            str(src)]


def cached(job: BuildJob, cache: Path | None = None) -> tuple[BuildResult, bytes] | None:
    """``job``'s result and artifact from the build cache (``cached`` True), or None when
    the cache has no entry for it or the entry fails its check (see :func:`lookup`)."""
    return lookup(job, cache)[0]


def lookup(job: BuildJob, cache: Path | None = None
           ) -> tuple[tuple[BuildResult, bytes] | None, str]:
    """``job``'s cache entry, checked. Nothing is modified.

    Returns:
        (result with ``cached`` True, artifact bytes), ``""`` for a good entry; (None,
        ``""``) when there is none, or only one without checksums (an entry of an older
        kopt: a plain miss, rebuilt once); (None, why) when one exists but cannot be
        trusted: an artifact whose size or sha256 differs from the recorded ones, or a
        local file the build read that has changed since (or is gone).
    """
    entry = (cache or cache_root()) / job.build_id
    art, meta = entry / ARTIFACT[job.mode], entry / "meta.json"
    if not (art.exists() and meta.exists()):
        return None, ""
    try:
        check = json.loads((entry / VERIFY).read_text())
        res = BuildResult(**_load_json(meta))
        data = art.read_bytes()
    except FileNotFoundError:  # no checksums (an older kopt's entry), or removed meanwhile
        return None, ""
    except (OSError, ValueError, TypeError) as e:
        return None, f"the cache entry is unreadable ({e})"
    want = check.get("artifact") or {}
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != want.get("bytes") or digest != want.get("sha256"):
        return None, (f"the cached {art.name} is damaged ({len(data)} bytes, sha256 "
                      f"{digest[:12]}; stored as {want.get('bytes')} bytes, sha256 "
                      f"{str(want.get('sha256'))[:12]})")
    rel = deps.changed(check.get("inputs") or {}, job.source_dir)
    if rel is not None:
        return None, f"{rel}, which the cached build read, has changed since"
    res.cached = True
    return (res, data), ""


def build(job: BuildJob, cache: Path | None = None) -> tuple[BuildResult, bytes | None]:
    """Build ``job`` (or take it from the cache). Never raises for a bad source.

    Returns:
        (result, artifact bytes or None when the build failed). compile_s is in
        seconds: the compiler's wall time (kernel mode: the NVRTC compile in the
        worker's compiler process, plus the pipe round trip).
    """
    cache = cache or cache_root()
    hit, why = lookup(job, cache)
    if hit is not None:
        build_cache.used(cache / job.build_id)
        return hit
    entry = cache / job.build_id
    bad = arch_flag(job.flags) if job.backend == "cuda" else None
    if bad is not None:  # kopt.core.spec refuses these at load; a job made another way too
        return BuildResult(job.build_id, False, f"flag {bad!r} sets the GPU arch; kopt builds "
                           f"for the device's own ({job.target}): remove it"), None
    res, data = _build_kernel(job, entry) if job.mode == "kernel" else _compile(job, entry)
    if why:
        res.note = f"{why}: rebuilt"
    return res, data


def _compile(job: BuildJob, entry: Path) -> tuple[BuildResult, bytes | None]:
    """nvcc / c++ build of a solve-mode ``job``, stored at ``entry`` when it succeeds."""
    with tempfile.TemporaryDirectory(prefix="kopt-build-") as tmp:
        src = Path(tmp) / job.source_name
        src.write_text(job.source)
        out = Path(tmp) / "solve.so"
        cmd = command(job, src, out)
        rules = build_confine.ruleset(_exes(job.backend), job.source_dir, job.include_dirs,
                                      tmp, [str(SHIM)], job.flags)
        t0 = time.perf_counter()
        wrapped, env = _reaped(cmd, COMPILE_TIMEOUT_S, build_confine.env_for(rules, tmp))
        try:
            p = subprocess.run(wrapped, capture_output=True, text=True, cwd=tmp, env=env,
                               timeout=COMPILE_TIMEOUT_S + 60, preexec_fn=_limit_build)
            rc, log = p.returncode, (p.stdout + p.stderr)
        except subprocess.TimeoutExpired:  # the wrapper itself hung: cannot happen
            rc, log = 124, ""
        dt = time.perf_counter() - t0
        if rc == 127 and log.startswith("cannot start"):
            return BuildResult(job.build_id, False, f"compiler not found: {cmd[0]} "
                               f"({log.strip()})", dt), None
        if rc == 124:
            return BuildResult(job.build_id, False,
                               f"compiler timed out after {COMPILE_TIMEOUT_S:.0f} s", dt), None
        if rc == 126 and log.startswith("cannot confine"):
            return BuildResult(job.build_id, False, log.strip(), dt), None
        cmd_s = " ".join(cmd).replace(tmp, ".")
        if rc != 0 or not out.exists():
            if build_confine.ENV in env:  # confined: whether a host file exists is not said
                log = build_confine.blur(log, rules["read"])
            return BuildResult(job.build_id, False, _tail(log.replace(tmp + "/", "")), dt,
                               command=cmd_s), None
        data = _artifact(out)
        if isinstance(data, str):
            return BuildResult(job.build_id, False, data, dt, command=cmd_s), None
        kernels = parse_ptxas(log)
        res = BuildResult(job.build_id, True, "", dt, False, **summarize(kernels),
                          kernels=as_dicts(kernels), command=cmd_s, log=_tail(log, 4000))
        inputs = _read_files(job, out, tmp)
        probed = deps.probed([job.source], job.source_dir, job.include_dirs)
        gone = sorted(k for k, v in inputs.items() if v == "missing" and k not in probed)
        if gone:  # a dependency list cut short (a newline in an .incbin name) or wrong
            res.note = (f"not cached: the compiler's dependency list names {gone[0]!r}, which "
                        "is not there; the build's inputs are not known")
            return res, data
        _store(entry, data, res, ARTIFACT["solve"], inputs)
        return res, data


def _exes(backend: str) -> list[str]:
    """The compilers a solve-mode build for ``backend`` runs: nvcc and its host compiler,
    or the C++ compiler."""
    return [compiler(backend)] + (["gcc", compiler("cpu")] if backend == "cuda" else [])


def _read_files(job: BuildJob, out: Path, tmp: str) -> dict[str, str]:
    """``{path relative to the sweep folder: sha256}`` of the local files a finished compile
    read: the preprocessor's list (``-MD``; without one, the include scan's) and the
    assembler's (``.incbin``, ``.include``) where it wrote one."""
    depfile, asm = out.with_suffix(".d"), out.with_suffix(".as.d")
    roots = [job.source_dir, *job.include_dirs]
    if not depfile.exists():  # a compiler that wrote no list: the include scan's
        return deps.local_inputs(job.source, job.source_dir, job.include_dirs)
    listed = deps.parse_depfile(depfile.read_text())
    if asm.exists():
        listed += deps.parse_depfile(asm.read_text())
    tools = build_confine.toolchain(_exes(job.backend)) + [str(SHIM)]
    read = deps.local_deps(listed, tmp, roots, tools)
    found = deps.digests(read, os.path.realpath(job.source_dir))
    if "missing" in found.values():  # a list that names what the compiler could not read
        return found
    texts = [job.source] + [p.read_text(errors="replace") for p in read if p.is_file()]
    return {**deps.probed(texts, job.source_dir, job.include_dirs), **found}


def kernel_command(job: BuildJob) -> list[str]:
    """The NVRTC options of a kernel-mode ``job`` (workers.nvrtc.options)."""
    return nvrtc.options(job.target, job.defines, [job.source_dir, *job.include_dirs],
                         job.flags)


def _build_kernel(job: BuildJob, entry: Path) -> tuple[BuildResult, bytes | None]:
    launch = job.launch or {}
    if not launch.get("kernel"):
        return BuildResult(job.build_id, False, "kernel-mode build job without a launch "
                           "block (launch.kernel)"), None
    if not job.target.startswith("sm_"):
        return BuildResult(job.build_id, False, f"kernel mode builds for a GPU arch "
                           f"(sm_XX), not {job.target!r}"), None
    opts = kernel_command(job)
    try:
        ver = ".".join(map(str, nvrtc.version()))
    except nvrtc.NvrtcMissing as e:
        return BuildResult(job.build_id, False, str(e)), None
    cmd_s = f"nvrtc {ver} " + " ".join(opts) + f" {job.source_name}"
    req = {"source": job.source, "name": job.source_name, "kernel": launch["kernel"],
           "options": opts, "confine": [job.source_dir, *job.include_dirs,
                                        *build_confine.flag_paths(job.flags)]
           if build_confine.wanted() else None}
    t0 = time.perf_counter()
    try:
        out = nvrtc.compiler(COMPILE_MEM_GB).compile(req, COMPILE_TIMEOUT_S)
    except nvrtc.NvrtcMissing as e:
        return BuildResult(job.build_id, False, str(e), command=cmd_s), None
    dt = time.perf_counter() - t0
    if not out["ok"]:
        return BuildResult(job.build_id, False, _tail(out["log"]), dt, command=cmd_s), None
    kernels = parse_ptxas(out["log"])
    res = BuildResult(job.build_id, True, "", dt, False, **summarize(kernels),
                      kernels=as_dicts(kernels), command=cmd_s, log=_tail(out["log"], 4000))
    meta = {"kernel": launch["kernel"], "lowered": out["lowered"], "launch": launch,
            "defines": job.defines, "arch": job.target, "nvrtc": ver}
    data = nvrtc.pack(meta, out["cubin"])
    # NVRTC writes no dependency list (13.x rejects -MD/-MF): the include scan stands in
    _store(entry, data, res, ARTIFACT["kernel"],
           deps.local_inputs(job.source, job.source_dir, job.include_dirs))
    return res, data


def ensure_artifact(build_id: str, data: bytes, cache: Path | None = None) -> Path:
    """The path of ``build_id``'s artifact in the cache (``solve.so``, or ``kernel.kopt``
    for a kernel-mode artifact), holding exactly ``data``: written (atomically: a temp
    file renamed over it) when absent or when the file there differs from ``data``
    (truncated or otherwise damaged). Raises OSError when the cache is not writable."""
    entry = (cache or cache_root()) / build_id
    name = ARTIFACT["kernel" if nvrtc.is_kernel_artifact(data) else "solve"]
    art = entry / name
    for attempt in range(3):
        try:
            if art.stat().st_size == len(data) and art.read_bytes() == data:
                build_cache.used(entry)
                return art
        except FileNotFoundError:
            pass
        try:
            entry.mkdir(parents=True, exist_ok=True)
            tmp = entry / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, art)
            return art
        except FileNotFoundError:  # a builder replaced the entry meanwhile: again
            if attempt == 2:
                raise
    return art


def _store(entry: Path, data: bytes, res: BuildResult, name: str,
           inputs: dict[str, str]) -> None:
    """Store a build at ``entry`` atomically (a folder renamed into place) with its checks
    (VERIFY): the artifact's size and sha256 and ``inputs``, the local files the build
    read. An entry already there (one that failed its check, one that a device wrote
    without a result, or the same build stored by another worker meanwhile) is moved aside
    and removed first; when another worker stores one in between, that one stays. Then the
    cache is kept within ``KOPT_CACHE_MAX_GB`` (workers.build_cache ``maybe_evict``)."""
    from dataclasses import asdict

    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    (tmp / name).write_bytes(data)
    (tmp / "meta.json").write_text(json.dumps(asdict(res)))
    check = {"artifact": {"name": name, "bytes": len(data),
                          "sha256": hashlib.sha256(data).hexdigest()}, "inputs": inputs}
    (tmp / VERIFY).write_text(json.dumps(check, indent=1))
    if entry.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{entry.name}.old.", dir=entry.parent))
        try:
            os.replace(entry, old / "entry")
        except OSError:
            pass
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.replace(tmp, entry)
    except OSError:  # another worker stored one in between
        shutil.rmtree(tmp, ignore_errors=True)
    build_cache.maybe_evict(entry.parent, build_cache.cap()[0])


def _load_json(p: Path) -> dict:
    d = json.loads(p.read_text())
    d.pop("cached", None)
    return d


def _tail(text: str, n: int = 2000) -> str:
    text = text.strip()
    return text if len(text) <= n else "...\n" + text[-n:]
