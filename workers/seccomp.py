"""The system calls a sandboxed harness refuses once it is set up (``seccomp(2)``, BPF).

The mount, PID, network and IPC namespaces (workers.jail) leave a candidate some ways out
that only a system-call filter closes: a Unix socket of the host is a file on a read-only
mount that ``connect`` may still reach (Ray's raylet, kopt's own launch socket, another
run's prestarted harness), keys added to the kernel's keyrings outlive the harness, and a
user namespace of its own opens kernel surface. :func:`install` refuses, for every thread
of the process (``SECCOMP_FILTER_FLAG_TSYNC``; OpenMP's pool exists before any candidate
runs), with ``EPERM``:

- ``socket``, ``socketpair`` and ``connect`` (the harness holds every socket it needs
  before it is set up; a socket pair's ``sendto`` reached the host's datagram sockets),
  ``io_uring_setup`` / ``io_uring_enter`` / ``io_uring_register`` (which would make and
  connect sockets outside the filter);
- ``userfaultfd``, and ``ioctl(USERFAULTFD_IOC_NEW)`` on ``/dev/userfaultfd`` (outputs
  computed when first read, also by the kernel's own reads);
- ``add_key``, ``request_key``, ``keyctl``;
- ``ptrace``, ``process_vm_writev``, ``perf_event_open`` (the two ways a process sets a
  hardware breakpoint: one on an output's first bytes trapped the harness's first read of
  it after a call, and a handler did the call's work only then, outside its timing window
  and only for calls whose outputs were read; a red-team trial cleared a 1/100 clock 3 of
  4 times). The ncu target keeps ``perf_event_open`` (:func:`install`'s ``keep``): ncu's
  injection there was not run with it refused;
- ``seccomp`` and ``prctl(PR_SET_SECCOMP)``: a filter of the candidate's own, stacked on
  this one for every thread, made the harness's look at its signal handlers fail (a
  handler that computed outputs on their first read went unseen: `ok` at 50-100x the honest
  speed, 4 of 4) and trapped the harness's own ``madvise`` after each call into a handler
  that did the call's work there (`ok` at 500x, 3 of 3: red-team round 7);
- ``inotify_init``, ``inotify_init1`` and ``mq_open``: inotify instances and POSIX
  message queue bytes are counted per user (``fs.inotify.max_user_instances``,
  ``RLIMIT_MSGQUEUE``), and the harness runs as the host's uid 0: a candidate holding
  every instance made ``inotify_init1`` fail for every root process of the host;
- ``unshare``, ``setns``, ``mount``, ``umount2``, ``pivot_root``, ``bpf``, and ``clone``
  with ``CLONE_NEWUSER``; ``clone3`` answers ``ENOSYS`` (its flags lie behind a pointer
  the filter cannot read; the C library then falls back to ``clone``, as under Docker's
  default profile);
- on x86-64, every call of the x32 ABI and of another architecture (the 32-bit entry).

Supported machines: x86-64 and AArch64 (:data:`SYSCALLS`); elsewhere :func:`install`
returns the reason it did nothing. Only the standard library is used.
"""

from __future__ import annotations

import ctypes
import errno
import platform

ENV = "KOPT_SECCOMP"  # "1": the harness installs the filter once set up (workers.sandbox)
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22  # prctl's older way to add a filter
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
LD_ABS_W, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF opcodes
CLONE_NEWUSER = 0x10000000
X32_BIT = 0x40000000
# (process_vm_readv stays allowed: the harness reads its own pages with it to find outputs
# left unreadable, workers.harness ``_unreadable_at``; another process is out of reach by
# the PID namespace and ptrace's rules)
DENIED = ("socket", "socketpair", "connect", "io_uring_setup", "io_uring_enter",
          "io_uring_register", "add_key", "request_key", "keyctl", "ptrace",
          "process_vm_writev", "userfaultfd", "unshare", "setns", "mount", "umount2",
          "pivot_root", "bpf", "inotify_init", "inotify_init1", "mq_open", "perf_event_open",
          "seccomp")
USERFAULTFD_IOC_NEW = 0xAA00  # _IO(0xAA, 0x00): a userfaultfd from /dev/userfaultfd
# machine -> (AUDIT_ARCH_*, the seccomp syscall's number, name -> number) from the kernel's
# syscall tables (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h)
SYSCALLS: dict[str, tuple[int, int, dict[str, int]]] = {
    "x86_64": (0xC000003E, 317, {
        "socket": 41, "socketpair": 53, "connect": 42, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "add_key": 248, "request_key": 249,
        "keyctl": 250, "ptrace": 101, "process_vm_writev": 311, "userfaultfd": 323,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "bpf": 321, "clone": 56, "clone3": 435, "ioctl": 16, "inotify_init": 253,
        "inotify_init1": 294, "mq_open": 240, "perf_event_open": 298, "seccomp": 317,
        "prctl": 157}),
    "aarch64": (0xC00000B7, 277, {
        "socket": 198, "socketpair": 199, "connect": 203, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "add_key": 217, "request_key": 218,
        "keyctl": 219, "ptrace": 117, "process_vm_writev": 271, "userfaultfd": 282,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "bpf": 280, "clone": 220, "clone3": 435, "ioctl": 29, "inotify_init1": 26,
        "mq_open": 180, "perf_event_open": 241, "seccomp": 277, "prctl": 167}),
}


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def program(machine: str, keep: tuple[str, ...] = ()) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as ``(code, jt, jf, k)`` instructions (see the module
    docstring), the calls of :data:`DENIED` named in ``keep`` allowed. Raises KeyError for a
    machine not in :data:`SYSCALLS`."""
    arch, _, nr = SYSCALLS[machine]
    deny, enosys = (RET_K, 0, 0, RET_ERRNO | errno.EPERM), (RET_K, 0, 0,
                                                            RET_ERRNO | errno.ENOSYS)
    allow = (RET_K, 0, 0, RET_ALLOW)
    # the tail, in order: [clone check: ld arg0, jset NEWUSER], allow, deny, enosys
    body: list[tuple[int, int, int, int]] = [(LD_ABS_W, 0, 0, 4)]  # seccomp_data.arch
    # (AArch64 has no inotify_init: inotify_init1 only)
    checks: list[tuple[str, int]] = [(n, nr[n]) for n in DENIED if n in nr and n not in keep]
    # + ioctl, prctl, clone3, clone (and the x32 bound on x86-64)
    n_checks = len(checks) + 4 + (1 if machine == "x86_64" else 0)
    # positions after the header (arch load, arch jeq, nr load): the checks, then the tail:
    # clone's flags (load, test), ioctl's request (load, test), prctl's option (load,
    # test), allow, deny, enosys
    tail = 3 + n_checks
    at_ld_arg, at_ld_ioctl, at_ld_prctl = tail, tail + 2, tail + 4
    at_allow, at_deny, at_enosys = tail + 6, tail + 7, tail + 8
    body.append((JEQ_K, 0, at_deny - 2, arch))  # another architecture: refused
    body.append((LD_ABS_W, 0, 0, 0))  # seccomp_data.nr
    if machine == "x86_64":
        i = len(body)
        body.append((JGE_K, at_deny - i - 1, 0, X32_BIT))
    for _, num in checks:
        i = len(body)
        body.append((JEQ_K, at_deny - i - 1, 0, num))
    i = len(body)
    body.append((JEQ_K, at_enosys - i - 1, 0, nr["clone3"]))
    i = len(body)
    body.append((JEQ_K, at_ld_ioctl - i - 1, 0, nr["ioctl"]))
    i = len(body)
    body.append((JEQ_K, at_ld_prctl - i - 1, 0, nr["prctl"]))
    i = len(body)
    body.append((JEQ_K, at_ld_arg - i - 1, at_allow - i - 1, nr["clone"]))
    assert len(body) == at_ld_arg
    body.append((LD_ABS_W, 0, 0, 16))  # seccomp_data.args[0], its low 32 bits
    body.append((JSET_K, at_deny - at_ld_arg - 2, at_allow - at_ld_arg - 2, CLONE_NEWUSER))
    assert len(body) == at_ld_ioctl
    body.append((LD_ABS_W, 0, 0, 24))  # seccomp_data.args[1], its low 32 bits
    body.append((JEQ_K, at_deny - at_ld_ioctl - 2, at_allow - at_ld_ioctl - 2,
                 USERFAULTFD_IOC_NEW))
    assert len(body) == at_ld_prctl
    body.append((LD_ABS_W, 0, 0, 16))  # seccomp_data.args[0], its low 32 bits
    body.append((JEQ_K, at_deny - at_ld_prctl - 2, at_allow - at_ld_prctl - 2,
                 PR_SET_SECCOMP))
    assert len(body) == at_allow
    body += [allow, deny, enosys]
    return body


def install(machine: str | None = None, keep: tuple[str, ...] = ()) -> str:
    """Install the filter for this process, every thread (the calls of :data:`DENIED` named
    in ``keep`` allowed); returns "" when installed, else the reason in one line (an
    unsupported machine, a kernel that refused it). Never raises."""
    machine = machine or platform.machine()
    if machine not in SYSCALLS:
        return f"no system-call filter for {machine} (x86_64 and aarch64 only)"
    insns = program(machine, keep)
    arr = (_Insn * len(insns))(*[_Insn(*x) for x in insns])
    prog = _Prog(len(insns), ctypes.cast(arr, ctypes.POINTER(_Insn)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS): {_err()}"
    rc = libc.syscall(ctypes.c_long(SYSCALLS[machine][1]), SECCOMP_SET_MODE_FILTER,
                      SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog))
    if rc != 0:
        return (f"seccomp: thread {rc} could not take the filter" if rc > 0
                else f"seccomp: {_err()}")
    return ""


def _err() -> str:
    import os

    return os.strerror(ctypes.get_errno())
