"""The CPU harness's native helpers: cache-line eviction and one-pass output checks.

Eviction: a candidate's buffers out of every CPU cache level before a timed call.

The CPU backend used to zero a buffer of twice the last-level cache the machine reports
before every sample: 600 MB on a VM whose sysfs L3 reads 300 MB (about 0.1 s a sample), so
a candidate's own timed calls were a small part of its device time. What a sample must not
see warm is the memory the candidate reads and writes: its input copies, its outputs and
their canaries. This module writes back and invalidates exactly those cache lines:

- x86-64: ``CLFLUSHOPT`` on every line where CPUID.(EAX=7,ECX=0):EBX[23] says the CPU
  has it, else ``CLFLUSH`` (Intel SDM Vol. 2A, "CLFLUSH—Flush Cache Line" and
  "CLFLUSHOPT—Flush Cache Line Optimized": the line is invalidated from every level of the
  cache hierarchy in the cache coherence domain, written back first if modified), between
  ``MFENCE``\\ s, which order them with the loads and stores around them. CLFLUSHOPT
  flushes lines in parallel: 48 MB in 2.5 ms on the CI machine's Xeon, where CLFLUSH took
  120 ms (and zeroing 600 MB, 45 ms);
- AArch64: ``DC CIVAC`` (clean and invalidate by virtual address to the point of
  coherency, Arm ARM D7.4) on every line of ``CTR_EL0``'s smallest data-cache line, then
  ``DSB ISH``. Linux lets user space run it (SCTLR_EL1.UCI).

Checks (:func:`all_close`, :func:`compare`): the test after every timed call and the
correctness check's comparison of float32 / float64 outputs, in float64 and in one pass
over the memory, where torch's elementwise ops take one pass each (the tolerance-band test
of a 4M-element output took about 20 ms on the CI machine's core, after a 3-5 ms call).

The helpers are C (``native.c`` beside this file) compiled with the machine's C compiler
into a folder of this process's own (not the shared build cache a candidate could write),
once per process. Where that fails (no compiler, another architecture), :func:`library`
returns None with the reason in :data:`WHY_NOT`: the harness then zeroes twice the
last-level cache and checks with torch.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

_SRC = Path(__file__).with_name("native.c")

WHY_NOT = ""  # why no helper library could be made in this process ("" when one was)
_LIB: list[ctypes.CDLL | None] = []  # the loaded helper, once tried
_P, _N = ctypes.c_void_p, ctypes.c_size_t


class Comparison(ctypes.Structure):
    """What :func:`compare` found: ``bad`` elements not close, the ``first`` of them (flat
    index, -1 when none), ``max_abs`` (max ``|got - expected|``: 0 where equal, the same
    infinity too; infinite where either is NaN) and ``max_rel`` (max ``|got - expected| /
    |expected|`` over the finite nonzero expected values), both in float64."""

    _fields_ = [("bad", ctypes.c_int64), ("first", ctypes.c_int64),
                ("max_abs", ctypes.c_double), ("max_rel", ctypes.c_double)]


def library() -> ctypes.CDLL | None:
    """The helper library (``native.c``), compiled and loaded on the first call of the
    process; None when it cannot be made, the reason in :data:`WHY_NOT` (the compiler's
    first line, or no compiler on the PATH)."""
    global WHY_NOT
    if _LIB:
        return _LIB[0]
    lib = None
    cc = next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)),
              None)
    if cc is None:
        WHY_NOT = "no C compiler on the PATH ($CC, cc, gcc, clang) to build workers/native.c"
    else:
        with tempfile.TemporaryDirectory(prefix="kopt-native-") as tmp:
            src, so = os.path.join(tmp, "native.c"), os.path.join(tmp, "native.so")
            shutil.copyfile(_SRC, src)
            # -fno-fast-math: the comparisons keep NaN and infinity semantics;
            # -ffp-contract=off: no FMA in atol + rtol * |e|, which torch.isclose rounds twice;
            # -march=native where the compiler takes it (the helper runs where it is built):
            # the float64 test of 2M float32 elements that differ: 1.4 ms against 2.3 ms
            for arch in (["-march=native"], []):
                r = subprocess.run([cc, "-O3", *arch, "-fno-fast-math", "-ffp-contract=off",
                                    "-shared", "-fPIC", "-pthread", "-o", so, src, "-lm"],
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    break
            if r.returncode == 0:
                lib = ctypes.CDLL(so)  # mapped: the file may go with the folder
                _declare(lib)
            else:
                first = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
                WHY_NOT = f"{cc} could not build workers/native.c: {first}"
    _LIB.append(lib)
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    lib.kopt_evict.argtypes, lib.kopt_evict.restype = [_P, _N], None
    lib.kopt_line_bytes.restype = _N
    lib.kopt_evict_opt.restype = ctypes.c_int
    lib.kopt_stream_copy.argtypes, lib.kopt_stream_copy.restype = [_P, _P, _N], None
    lib.kopt_stream_fill.argtypes, lib.kopt_stream_fill.restype = [_P, _P, _N], None
    lib.kopt_restore_rw.argtypes, lib.kopt_restore_rw.restype = [_P, _N], ctypes.c_int
    lib.kopt_handlers_changed.argtypes, lib.kopt_handlers_changed.restype = [], ctypes.c_int
    for t in (*_SUFFIX.values(), "f32_f64", "bf16_f64", "f16_f64"):
        f = getattr(lib, f"kopt_all_close_{t}")
        f.argtypes = [_P, _P, _N, ctypes.c_double, ctypes.c_double]
        f.restype = ctypes.c_int
        f = getattr(lib, f"kopt_compare_{t}")
        f.argtypes = [_P, _P, _N, ctypes.c_double, ctypes.c_double,
                      ctypes.POINTER(Comparison)]
        f.restype = None


def storage_ranges(tensors: Iterable[torch.Tensor]) -> list[tuple[int, int]]:
    """The distinct ``(address, bytes)`` ranges of the storages behind ``tensors`` (a view's
    whole storage: an output's canary elements after it too), in address order, empty ones
    left out. Two tensors on one storage (an in/out argument) give one range."""
    seen: dict[int, int] = {}
    for t in tensors:
        s = t.untyped_storage()
        if s.nbytes():
            seen[s.data_ptr()] = max(seen.get(s.data_ptr(), 0), s.nbytes())
    return sorted(seen.items())


def evict(ranges: Iterable[tuple[int, int]]) -> int:
    """Write back and invalidate every cache line of each ``(address, bytes)`` range from
    every cache level; the bytes covered. Raises RuntimeError when :func:`library` has
    none (call it first and fall back where it returns None)."""
    lib = library()
    if lib is None:
        raise RuntimeError(WHY_NOT)
    total = 0
    for ptr, n in ranges:
        lib.kopt_evict(ptr, n)
        total += n
    return total


def stream_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Copy ``src``'s bytes into ``dst`` (contiguous CPU tensors of one byte size) with
    stores that bypass the caches where the CPU has them (``kopt_stream_copy``): the
    load of a pristine input before a flushed sample, whose lines the flush evicts next.
    Raises ValueError for tensors it cannot take, RuntimeError without the library."""
    _streamable(dst, src)
    library().kopt_stream_copy(dst.data_ptr(), src.data_ptr(), dst.nbytes)


_POISON: dict[tuple[torch.dtype, float | int], bytes] = {}


def stream_fill(dst: torch.Tensor, value: float | int, as_bytes: bool = False) -> None:
    """``dst.fill_(value)`` (``as_bytes``: every byte set to ``value``, 0-255) with stores
    that bypass the caches where the CPU has them (``kopt_stream_fill``): the poison of an
    output and its canaries before a flushed sample. Raises ValueError for a tensor it
    cannot take, RuntimeError without the library."""
    _streamable(dst, dst)
    key = (torch.uint8 if as_bytes else dst.dtype, value)
    if key not in _POISON:
        one = torch.full((8 // torch.empty(0, dtype=key[0]).element_size(),), value,
                         dtype=key[0])
        _POISON[key] = bytes(one.view(torch.uint8).tolist())
    library().kopt_stream_fill(dst.data_ptr(), _POISON[key], dst.nbytes)


def restore_rw(ranges: Iterable[tuple[int, int]]) -> int:
    """Make every page of each ``(address, bytes)`` range readable and writable again
    (``kopt_restore_rw``: ``mprotect``, pages rounded outwards; the ranges must be whole
    allocations of this process, e.g. :func:`storage_ranges` of the outputs' arena); 0, or
    the first errno (ENOMEM: a page is no longer mapped). Raises RuntimeError without the
    library."""
    lib = library()
    if lib is None:
        raise RuntimeError(WHY_NOT)
    for ptr, n in ranges:
        err = lib.kopt_restore_rw(ptr, n)
        if err:
            return int(err)
    return 0


# the signals of native.c's HANDLED_SIGNALS, in its order (bit i of handlers_changed)
HANDLED_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGTRAP", "SIGILL", "SIGFPE", "SIGSYS")


def handlers_changed() -> list[str]:
    """The names of the signals (of :data:`HANDLED_SIGNALS`: those a fault or trap on a
    candidate's outputs raises) whose handler in this process changed since the last call,
    or could not be read (``kopt_handlers_changed``: ``sigaction``); none on the first
    call. Raises RuntimeError
    without the library."""
    lib = library()
    if lib is None:
        raise RuntimeError(WHY_NOT)
    bits = int(lib.kopt_handlers_changed())
    return [n for i, n in enumerate(HANDLED_SIGNALS) if bits >> i & 1]


def _streamable(dst: torch.Tensor, src: torch.Tensor) -> None:
    if library() is None:
        raise RuntimeError(WHY_NOT)
    if (dst.device.type != "cpu" or src.device.type != "cpu" or not dst.is_contiguous()
            or not src.is_contiguous() or dst.nbytes != src.nbytes):
        raise ValueError("stream_copy/stream_fill need contiguous CPU tensors of one size")


_SUFFIX = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16",
           torch.float16: "f16"}


def native_dtype(got: torch.Tensor, exp: torch.Tensor) -> str | None:
    """The helper's name for comparing ``got`` (outputs) with ``exp`` (expected values):
    ``"f32"``, ``"f64"``, ``"bf16"`` or ``"f16"`` for two tensors of that dtype, and
    ``"f32_f64"``, ``"bf16_f64"`` or ``"f16_f64"`` for outputs of float32, bfloat16 or
    float16 against float64 expected values (a reference computed in float64); both CPU
    and contiguous, the library loaded. 16-bit values are widened exactly, as
    ``Tensor.double`` does. None otherwise (the caller uses torch)."""
    if library() is None or any(t.device.type != "cpu" or not t.is_contiguous()
                                for t in (got, exp)):
        return None
    if got.dtype not in _SUFFIX:
        return None
    if exp.dtype == got.dtype:
        return _SUFFIX[got.dtype]
    return f"{_SUFFIX[got.dtype]}_f64" if exp.dtype == torch.float64 else None


def all_close(got: torch.Tensor, exp: torch.Tensor, atol: float, rtol: float) -> bool:
    """Whether every element of ``got`` is close to ``exp`` as :func:`compare` decides
    (``torch.isclose(..., equal_nan=False)`` in float64), reading each array once and
    stopping at the first block of 4096 elements with one that is not; tensors of one size
    that :func:`native_dtype` accepts. Raises ValueError otherwise."""
    t = native_dtype(got, exp)
    if t is None or got.numel() != exp.numel():
        raise ValueError("all_close needs contiguous CPU tensors of one size: float32, float64, "
                         "bfloat16 or float16 outputs, expected values of their dtype or "
                         "float64")
    return bool(getattr(library(), f"kopt_all_close_{t}")(
        got.data_ptr(), exp.data_ptr(), got.numel(), float(atol), float(rtol)))


def compare(got: torch.Tensor, exp: torch.Tensor, atol: float, rtol: float) -> Comparison:
    """``torch.isclose(got, exp, rtol, atol, equal_nan=False)`` in float64, counted, with
    the largest absolute and relative errors (:class:`Comparison`), in one pass; tensors of
    one size that :func:`native_dtype` accepts. Raises ValueError otherwise."""
    t = native_dtype(got, exp)
    if t is None or got.numel() != exp.numel():
        raise ValueError("compare needs contiguous CPU tensors of one size: float32, float64, "
                         "bfloat16 or float16 outputs, expected values of their dtype or "
                         "float64")
    out = Comparison()
    getattr(library(), f"kopt_compare_{t}")(got.data_ptr(), exp.data_ptr(), got.numel(),
                                            float(atol), float(rtol), ctypes.byref(out))
    return out

