"""Probe for a GPU's witness turns through device memory (docs/judge-outside.md): legacy CUDA
IPC handles do not open across PID namespaces (the handle names the exporter by its pid), so
this asks the GPU host whether the driver's virtual memory management does instead:

1. two "harness" processes, each under ``unshare --pid --fork --mount-proc --ipc --net`` with a
   private /dev/shm (as kopt's sandbox), each map a buffer made by ``cuMemCreate`` with a
   POSIX file descriptor handle, fill it through a torch tensor, and name the descriptor;
2. this process (the "device actor": no torch, the driver API of cuda.bindings only) takes
   both descriptors with ``pidfd_getfd(2)``, imports and maps them in its own context, and
   copies A's buffer into B's (``cuMemcpyDtoD``): B checks what it reads;
3. how long a copy of MB megabytes takes that way, and a 4-byte copy while A's sandbox is
   stopped (SIGSTOP) with a kernel of its own still running on the GPU (``torch.cuda._sleep``):
   whether a contender's leftover GPU work shows in the actor's own copies' times.

Run on the GPU host, repo root: ``python3 docs/verified/vmm_probe.py [MB]`` (default 256).
Prints one line per step; a failed step prints its error and the probe goes on.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, time, torch
from cuda.bindings import driver as cu

def ok(r):
    if r[0] != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(str(r[0]))
    return r[1] if len(r) == 2 else r[1:]

torch.zeros(1, device="cuda"); torch.cuda.synchronize()
nbytes = int(sys.argv[1])
prop = cu.CUmemAllocationProp()
prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
prop.location.id = torch.cuda.current_device()
g = ok(cu.cuMemGetAllocationGranularity(
    prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
size = -(-nbytes // g) * g
h = ok(cu.cuMemCreate(size, prop, 0))
ptr = ok(cu.cuMemAddressReserve(size, 0, 0, 0))
ok(cu.cuMemMap(ptr, size, 0, h, 0))
acc = cu.CUmemAccessDesc()
acc.location.type = prop.location.type
acc.location.id = prop.location.id
acc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
ok(cu.cuMemSetAccess(ptr, size, [acc], 1))
fd = ok(cu.cuMemExportToShareableHandle(
    h, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))

class CAI:
    __cuda_array_interface__ = {"shape": (size // 4,), "typestr": "<f4",
                                "data": (int(ptr), False), "version": 3}

t = torch.as_tensor(CAI(), device="cuda")
print(json.dumps({"fd": int(fd), "bytes": size, "granularity": int(g), "ns_pid": os.getpid()}),
      flush=True)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "fill":
        t.fill_(float(arg)); torch.cuda.synchronize(); print("filled", flush=True)
    elif cmd == "check":
        torch.cuda.synchronize()
        print(f"min {float(t.min())} max {float(t.max())}", flush=True)
    elif cmd == "spin":  # a kernel left running on the GPU (arg: cycles)
        torch.cuda._sleep(int(arg)); print("spinning", flush=True)
    elif cmd == "quit":
        break
"""

PREFIX = ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--ipc",
          "--net", "sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && exec "$0" "$@"']


def _pidfd_getfd(pid: int, fd: int) -> int:
    """``fd`` of host process ``pid``, duplicated into this process (pidfd_getfd(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd on x86_64 and arm64
        if got < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return got
    finally:
        os.close(pidfd)


def _host_pid(p: subprocess.Popen) -> int:
    """The host pid of the process ``unshare --fork`` started (its only child), waiting for
    it to exec python."""
    for _ in range(200):
        try:
            kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
        except OSError:
            kids = []
        if kids:
            return int(kids[0])
        time.sleep(0.05)
    raise RuntimeError("unshare's child never appeared")


class Child:
    """One sandboxed harness stand-in (CHILD) and its line protocol."""

    def __init__(self, nbytes: int) -> None:
        self.p = subprocess.Popen([*PREFIX, sys.executable, "-c", CHILD, str(nbytes)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = _host_pid(self.p)
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"child ended: rc {self.p.wait()}")
        self.info = json.loads(line)

    def ask(self, cmd: str) -> str:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def end(self) -> None:
        try:
            self.ask("quit")
        except OSError:
            pass
        self.p.wait(timeout=30)


def main() -> None:
    from cuda.bindings import driver as cu

    def ok(r):
        if r[0] != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(str(r[0]))
        return r[1] if len(r) == 2 else (r[1:] or None)

    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    nbytes = mb << 20
    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    free0, total = ok(cu.cuDeviceTotalMem(dev)), None
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    free, total = ok(cu.cuMemGetInfo())
    print(f"actor context: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free (device {free0})")
    a, b = Child(nbytes), Child(nbytes)
    print(f"children: host pids {a.pid} {b.pid}, in their namespaces {a.info['ns_pid']} "
          f"{b.info['ns_pid']}, fds {a.info['fd']} {b.info['fd']}, "
          f"granularity {a.info['granularity']} bytes")
    print("fill A:", a.ask("fill 3.0"), "| fill B:", b.ask("fill 0.0"))
    maps = {}
    for name, c in (("A", a), ("B", b)):
        try:
            fd = _pidfd_getfd(c.pid, c.info["fd"])
            h = ok(cu.cuMemImportFromShareableHandle(
                fd, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
            size = c.info["bytes"]
            ptr = ok(cu.cuMemAddressReserve(size, 0, 0, 0))
            ok(cu.cuMemMap(ptr, size, 0, h, 0))
            acc = cu.CUmemAccessDesc()
            acc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            acc.location.id = 0
            acc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            ok(cu.cuMemSetAccess(ptr, size, [acc], 1))
            maps[name] = ptr
            print(f"imported {name}: fd {c.info['fd']} -> {fd}, mapped at {int(ptr):#x}")
        except Exception as e:  # noqa: BLE001 -- a probe reports and goes on
            print(f"import {name} failed: {e!r}")
    if len(maps) == 2:
        for i in range(3):
            t0 = time.perf_counter()
            ok(cu.cuMemcpyDtoD(maps["B"], maps["A"], nbytes))
            ok(cu.cuCtxSynchronize())
            ms = (time.perf_counter() - t0) * 1e3
            print(f"copy A->B {mb} MB #{i}: {ms:.3f} ms ({2 * nbytes / ms / 1e6:.0f} GB/s r+w)")
        print("B after the copy:", b.ask("check"), "(want 3.0)")
        ok(cu.cuMemsetD32(maps["A"], 0x40E00000, nbytes // 4))  # 7.0f
        ok(cu.cuCtxSynchronize())
        print("A after the actor's memset:", a.ask("check"), "(want 7.0)")
        small = []
        for _ in range(20):
            t0 = time.perf_counter()
            ok(cu.cuMemcpyDtoD(maps["B"], maps["A"], 4))
            ok(cu.cuCtxSynchronize())
            small.append((time.perf_counter() - t0) * 1e3)
        print(f"4-byte copy, GPU otherwise idle: min {min(small):.3f} ms, "
              f"max {max(small):.3f} ms")
        print("A:", a.ask("spin 2000000000"))  # ~1 s at 1.98 GHz
        os.kill(a.pid, signal.SIGSTOP)
        t0 = time.perf_counter()
        ok(cu.cuMemcpyDtoD(maps["B"], maps["A"], 4))
        ok(cu.cuCtxSynchronize())
        first = (time.perf_counter() - t0) * 1e3
        small = []
        for _ in range(20):
            t0 = time.perf_counter()
            ok(cu.cuMemcpyDtoD(maps["B"], maps["A"], 4))
            ok(cu.cuCtxSynchronize())
            small.append((time.perf_counter() - t0) * 1e3)
        os.kill(a.pid, signal.SIGCONT)
        print(f"4-byte copy while A is stopped and its kernel runs: first {first:.3f} ms, "
              f"then min {min(small):.3f} max {max(small):.3f} ms")
    a.end()
    b.end()


if __name__ == "__main__":
    main()
