"""Device memory one process hands another across PID namespaces: a GPU's witness turns.

A GPU contender's outputs are in device memory, out of reach of ``process_vm_readv(2)``, and
legacy CUDA IPC handles (``cudaIpcGetMemHandle``) name their exporter by its process id, so
they do not open across the sandboxes' PID namespaces (nor with a private /dev/shm: measured
on an H100 host, docs/verified/2026-12-06-session44.md). The driver's virtual memory
management does: a harness allocates a witness buffer with ``cuMemCreate`` and exports it
as a POSIX file descriptor (:func:`allocate`); the device actor, which may read the
harness's descriptors (``pidfd_getfd(2)``: ptrace access, as for ``process_vm_readv``),
imports and maps it in a context of its own (:class:`Importer`) and copies between a judge's
buffers and a contender's there (``cuMemcpyDtoD``), while the contender is held still.

Through cuda-python's driver bindings (``cuda.bindings.driver``, a kopt dependency on
Linux); stdlib otherwise. :class:`DevMemError` says why not, in one line.
"""

from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass, field
from typing import Any

SYS_PIDFD_GETFD = 438  # the same number on x86_64 and aarch64 (asm-generic)


class DevMemError(RuntimeError):
    """A driver call, or taking another process's descriptor, failed: the message says
    which and why."""


def _driver() -> Any:
    """``cuda.bindings.driver``. Raises DevMemError where it cannot be imported."""
    try:
        from cuda.bindings import driver
    except Exception as e:  # noqa: BLE001 -- any import failure is the same missing piece
        raise DevMemError(f"cuda-python's driver bindings cannot be imported ({e!r}): "
                          "`pip install cuda-bindings`") from None
    return driver


def _cu(name: str, *args: Any) -> Any:
    """Driver call ``name`` of ``cuda.bindings.driver`` on ``args``: its outputs (None, one,
    or a tuple). Raises DevMemError naming the call when it fails, or when the driver
    cannot be loaded (no NVIDIA driver on this machine)."""
    cu = _driver()
    try:
        r = getattr(cu, name)(*args)
    except Exception as e:  # noqa: BLE001 -- the bindings' own errors: no driver, bad types
        raise DevMemError(f"{name}: {e}") from None
    res = r if isinstance(r, tuple) else (r,)
    if res[0] != cu.CUresult.CUDA_SUCCESS:
        raise DevMemError(f"{name}: {getattr(res[0], 'name', res[0])}")
    return None if len(res) == 1 else res[1] if len(res) == 2 else res[1:]


def _quiet(name: str, *args: Any) -> None:
    """Driver call ``name`` for cleaning up: its failure ignored."""
    try:
        _cu(name, *args)
    except DevMemError:
        pass


def _prop(device: int) -> Any:
    """A device-memory allocation's properties: pinned on ``device``, exportable as a POSIX
    file descriptor."""
    cu = _driver()
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = \
        cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    return prop


def _map(handle: Any, size: int, device: int) -> Any:
    """``handle`` (``size`` bytes, a multiple of the granularity) mapped read-write for
    ``device`` in the current context; its address (``CUdeviceptr``)."""
    cu = _driver()
    ptr = _cu("cuMemAddressReserve", size, 0, 0, 0)
    try:
        _cu("cuMemMap", ptr, size, 0, handle, 0)
        acc = cu.CUmemAccessDesc()
        acc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        acc.location.id = device
        acc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _cu("cuMemSetAccess", ptr, size, [acc], 1)
    except DevMemError:
        _quiet("cuMemUnmap", ptr, size)
        _quiet("cuMemAddressFree", ptr, size)
        raise
    return ptr


def granularity(device: int) -> int:
    """The least size (bytes) and alignment of an exportable allocation on ``device``
    (2 MiB on an H100). Raises DevMemError."""
    cu = _driver()
    return int(_cu("cuMemGetAllocationGranularity", _prop(device),
                   cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))


@dataclass
class Allocation:
    """Device memory of this process that another may map: its address (``ptr``), size
    (bytes, a multiple of :func:`granularity`), the file descriptor that exports it (``fd``,
    in this process) and the driver's handle."""

    ptr: int
    size: int
    fd: int
    handle: Any
    dptr: Any = None  # the CUdeviceptr the driver gave


def allocate(nbytes: int, device: int) -> Allocation:
    """``nbytes`` (rounded up to :func:`granularity`) of device memory on ``device``, mapped
    in the calling thread's current context (a harness: torch's, once it has touched the
    GPU) and exported as a file descriptor. Raises DevMemError."""
    cu = _driver()
    g = granularity(device)
    size = max(-(-nbytes // g) * g, g)
    handle = _cu("cuMemCreate", size, _prop(device), 0)
    try:
        ptr = _map(handle, size, device)
    except DevMemError:
        _quiet("cuMemRelease", handle)
        raise
    try:
        fd = _cu("cuMemExportToShareableHandle", handle,
                 cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
    except DevMemError:
        free(Allocation(int(ptr), size, -1, handle, ptr))
        raise
    return Allocation(int(ptr), size, int(fd), handle, ptr)


def free(a: Allocation) -> None:
    """``a`` unmapped and released, its descriptor closed; a process that imported it keeps
    its memory until it releases its own mapping. Never raises."""
    ptr = a.dptr if a.dptr is not None else a.ptr
    _quiet("cuMemUnmap", ptr, a.size)
    _quiet("cuMemAddressFree", ptr, a.size)
    _quiet("cuMemRelease", a.handle)
    if a.fd >= 0:
        try:
            os.close(a.fd)
        except OSError:
            pass


class CudaArray:
    """``nbytes`` of device memory at ``ptr`` as bytes, through the CUDA array interface
    (version 3): what ``torch.as_tensor(..., device="cuda")`` wraps without a copy."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3}


def take_fd(pid: int, fd: int) -> int:
    """File descriptor ``fd`` of process ``pid`` (a host pid), duplicated into this process
    (``pidfd_getfd(2)``, Linux 5.6; needs ptrace access to ``pid``). Raises DevMemError."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as e:
        raise DevMemError(f"pidfd_open({pid}): {e.strerror}") from None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        got = libc.syscall(ctypes.c_long(SYS_PIDFD_GETFD), ctypes.c_int(pidfd),
                           ctypes.c_int(fd), ctypes.c_uint(0))
        if got < 0:
            err = ctypes.get_errno()
            raise DevMemError(f"pidfd_getfd({pid}, {fd}): {os.strerror(err)}")
        return int(got)
    finally:
        os.close(pidfd)


@dataclass
class _Mapped:
    handle: Any
    dptr: Any
    size: int


@dataclass
class Importer:
    """The device actor's context on its GPU (ordinal ``device`` as its process sees
    devices) and the other processes' buffers it has mapped there, by (host pid, their
    descriptor): made by :func:`importer`, emptied by :meth:`release`."""

    device: int = 0
    ctx: Any = None
    maps: dict[tuple[int, int], _Mapped] = field(default_factory=dict)
    scratch: Any = None  # 4 bytes of its own, for :meth:`probe_ms`

    def current(self) -> None:
        """This context made the calling thread's (the driver is started on first use).
        Raises DevMemError."""
        if self.ctx is None:
            _cu("cuInit", 0)
            dev = _cu("cuDeviceGet", self.device)
            self.ctx = _cu("cuDevicePrimaryCtxRetain", dev)
        _cu("cuCtxSetCurrent", self.ctx)

    def address(self, pid: int, fd: int, nbytes: int, size: int) -> int:
        """The address here of the allocation of ``size`` bytes (its whole: the driver maps
        no part of one) that process ``pid`` exported as descriptor ``fd``, of which
        ``nbytes`` are to be used: imported and mapped on first use. Raises DevMemError
        (not a descriptor of exported device memory, of another size, or ``nbytes`` beyond
        it)."""
        if not nbytes <= size:
            raise DevMemError(f"{nbytes} bytes asked of an allocation of {size}")
        m = self.maps.get((pid, fd))
        if m is not None and m.size == size:
            return int(m.dptr)
        if m is not None:
            raise DevMemError(f"descriptor {fd} of process {pid} was named with {m.size} "
                              f"bytes, now {size}")
        cu = _driver()
        self.current()
        local = take_fd(pid, fd)
        try:
            handle = _cu("cuMemImportFromShareableHandle", local,
                         cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        except DevMemError as e:
            raise DevMemError(f"{e} (descriptor {fd} of process {pid})") from None
        finally:
            os.close(local)
        try:
            dptr = _map(handle, size, self.device)
        except DevMemError as e:
            _quiet("cuMemRelease", handle)
            raise DevMemError(f"{e} ({nbytes} bytes of descriptor {fd} of process {pid})"
                              ) from None
        self.maps[(pid, fd)] = _Mapped(handle, dptr, size)
        return int(dptr)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """``nbytes`` copied from address ``src`` to ``dst`` (both mapped here), in order
        after every earlier copy. Raises DevMemError."""
        _cu("cuMemcpyDtoDAsync", dst, src, nbytes, 0)

    def sync(self) -> None:
        """Wait for every copy asked for. Raises DevMemError (a fault)."""
        _cu("cuCtxSynchronize")

    def probe_ms(self) -> float:
        """How long (ms) a 4-byte write of this context's own takes, waited for: about
        0.01 ms on an idle GPU, a time slice (2.1-2.4 ms on an H100) while another
        process's kernel runs, however that process is held (kernels are not stopped with
        their process: docs/verified/2026-12-06-session44.md). Raises DevMemError."""
        self.current()
        if self.scratch is None:
            self.scratch = _cu("cuMemAlloc", 4)
        t0 = time.perf_counter()
        _cu("cuMemsetD32Async", self.scratch, 0, 1, 0)
        _cu("cuCtxSynchronize")
        return (time.perf_counter() - t0) * 1e3

    def idle(self, limit_ms: float, busy_ms: float) -> bool:
        """Whether the GPU became idle (:meth:`probe_ms` under ``busy_ms``) within about
        ``limit_ms``, probing until it does. Raises DevMemError."""
        end = time.perf_counter() + limit_ms / 1e3
        while self.probe_ms() >= busy_ms:
            if time.perf_counter() > end:
                return False
        return True

    def release(self) -> None:
        """Every mapping unmapped and released: the memory goes back once its owner frees
        it too. Never raises."""
        if not self.maps:
            return
        try:
            self.current()
        except DevMemError:
            pass
        for m in self.maps.values():
            _quiet("cuMemUnmap", m.dptr, m.size)
            _quiet("cuMemAddressFree", m.dptr, m.size)
            _quiet("cuMemRelease", m.handle)
        self.maps.clear()


def self_check(device: int = 0) -> None:
    """What a GPU's witness turns need of the driver first, tried within this process: a
    page of exportable device memory made on ``device`` (in the :func:`importer`'s
    context) and exported as a file descriptor, then let go (a driver that refuses it,
    under WSL or some virtual GPUs, refuses every harness's). Its import elsewhere is not
    tried here. Raises DevMemError naming the call the driver refused."""
    importer().current()
    free(allocate(1, device))


_IMPORTER: Importer | None = None


def importer() -> Importer:
    """This process's :class:`Importer` (one per device actor: one context on its GPU,
    ordinal 0 of the devices it sees)."""
    global _IMPORTER
    if _IMPORTER is None:
        _IMPORTER = Importer()
    return _IMPORTER
