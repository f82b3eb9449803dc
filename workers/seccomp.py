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
- ``rt_sigaction`` with a new action, for any signal (a query, with no new action, is
  allowed): a handler of the candidate's own runs its code on the harness's thread after
  the timed call and before the outputs are read. For SIGSEGV, SIGBUS or SIGTRAP, outputs
  computed on their first read (red-team rounds 6 and 7); for SIGUSR2, raised by a POSIX
  timer aimed at the harness's thread a few microseconds after ``solve`` returned, the
  whole call's work done between the clock's stop and the verification (round 8: `ok` at
  100x the honest speed, 12 of 12 jobs). The harness also looks at the fault signals'
  handlers after every call (workers.native ``handlers_changed``), but a thread could
  install one after a look and take it away before the next, change one while another
  candidate was timed (and frame it), or a handler could reset itself
  (``SA_RESETHAND``) before the look. A signal sent to a candidate that could not install
  its handler takes its default action: SIGUSR2 ends the harness (`crashed`). A ref.py
  that sets a handler (``signal.signal``) fails with ``PermissionError``. The ncu target
  keeps it (ncu's injection was not tried without);
- ``inotify_init``, ``inotify_init1``, ``fanotify_init``, ``fanotify_mark`` and ``mq_open``:
  inotify instances, fanotify groups and POSIX message queue bytes are counted per user
  (``fs.inotify.max_user_instances``, ``fs.fanotify.max_user_groups``,
  ``RLIMIT_MSGQUEUE``), and the harness runs as the host's uid 0: a candidate holding
  every instance made ``inotify_init1`` fail for every root process of the host, and
  every fanotify group ``fanotify_init`` (red-team round 8); the jail bounds two more such
  counts by the harness's own limits (workers.jail ``_start``);
- ``io_setup`` (Linux AIO contexts are counted host-wide, ``fs.aio-max-nr``, with no
  exemption: a candidate held 61,432 of 65,536 and a root process of the host got EAGAIN,
  red-team round 9), and ``fcntl`` ``F_SETLEASE`` and ``F_NOTIFY`` (a lease on any file of
  the host, which uid 0 owns, made the host's next writer wait until the harness let go:
  3-4 s in round 9);
- ``epoll_create``, ``epoll_create1`` and ``epoll_ctl`` (epoll watches are counted per
  user, ``fs.epoll.max_user_watches``, and a watch lives as long as its file, not its
  descriptor: red-team round 9 held 5.3 million from ~180 open files and a root process
  of the host got ``ENOSPC``), ``flock`` and ``fcntl``'s record locks (``F_SETLK``,
  ``F_SETLKW``, ``F_OFD_SETLK``, ``F_OFD_SETLKW``; a query, ``F_GETLK``, is allowed) and
  ``F_SETPIPE_SZ`` (pipe pages, counted per user: round 11 left a host process 8 KB pipes): a
  read-only mount still lets a process lock a host file it can open, kopt's own run and
  Nsight Compute locks included, and hold every other process of the host that takes the
  lock. The CPU harness makes none of these calls once set up (its system calls traced
  through a job, 2026-12-05). The GPU harness and the ncu target keep them
  (:data:`UNTRIED_ON_GPU`) until they are run so with the CUDA driver on a GPU host;
- ``unshare``, ``setns``, ``mount``, ``umount2``, ``pivot_root``, ``bpf``, and ``clone``
  with ``CLONE_NEWUSER``;
- ``vfork``, ``clone`` with ``CLONE_THREAD`` but not ``CLONE_FILES`` (a thread with a file
  table of its own holds files beyond the harness's limit, and is no process a look for
  leftover processes finds), and ``clone`` with ``CLONE_VM`` but not ``CLONE_THREAD``: a
  process that shares the harness's memory outside its thread group could do a call's
  work while the
  harness's threads wait, and the paced outside clock counts the CPU time of the
  harness's thread group (workers.sandbox ``_paced_mark``). Threads (``CLONE_THREAD``)
  and processes of their own memory (``fork``) are allowed; so that such a process cannot
  write the harness's buffers either, ``mmap`` with ``MAP_SHARED`` and ``MAP_FIXED``,
  ``mremap`` with ``MREMAP_FIXED`` and ``shmat`` are refused (a shared mapping laid over
  them: red-team round 12's forked child did each call's work so, unseen by that clock,
  3 of 3 named best); ``clone3`` answers ``ENOSYS``
  (its flags lie behind a pointer the filter cannot read; the C library then falls back
  to ``clone``, as under Docker's default profile);
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
          "seccomp", "fanotify_init", "fanotify_mark", "io_setup", "epoll_create",
          "epoll_create1", "epoll_ctl", "flock", "vfork", "shmat")
F_SETLEASE, F_NOTIFY = 1024, 1026  # <linux/fcntl.h>: fcntl's commands refused
# fcntl's commands that take from the host (<asm-generic/fcntl.h>, <linux/fcntl.h>): record
# locks (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW) and F_SETPIPE_SZ (pipe buffer pages
# are counted per user: a candidate's large pipes left a host root process without
# capabilities 8 KB pipes, red-team round 11), refused unless ``keep`` names FCNTL_HOST
F_HOST, FCNTL_HOST = (6, 7, 37, 38, 1031), "fcntl_host"
# what the GPU harness (and the ncu target) keep: calls the CPU harness was seen not to make,
# not yet tried refused with the CUDA driver in the process
# clone's CLONE_VM without CLONE_THREAD, and vfork: a process sharing the harness's memory
# outside its thread group, whose CPU time the paced outside clock does not count, refused
# unless ``keep`` names CLONE_SHARED
CLONE_VM, CLONE_THREAD, CLONE_SHARED = 0x100, 0x10000, "clone_shared"
# a thread (CLONE_THREAD) must share the harness's file table: one with a table of its own
# held 1 000 files beyond the harness's open-file limit each, unseen by workers.turns' look
# for processes a contender left (a red-team helper: 16 such threads, 16 122 files)
CLONE_FILES = 0x400
# a shared mapping laid over memory already mapped (mmap's MAP_SHARED with MAP_FIXED,
# mremap's MREMAP_FIXED, shmat): a forked child writing the harness's buffers through it did
# a call's work outside the thread group (red-team round 12), refused unless ``keep`` names
# MAP_OVER (the CUDA driver lays its own shared mappings)
MAP_SHARED, MAP_FIXED, MREMAP_FIXED, MAP_OVER = 0x01, 0x10, 0x2, "map_over"
UNTRIED_ON_GPU = ("epoll_create", "epoll_create1", "epoll_ctl", "flock", FCNTL_HOST,
                  "vfork", CLONE_SHARED, "shmat", MAP_OVER)
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
        "prctl": 157, "rt_sigaction": 13, "fanotify_init": 300, "fanotify_mark": 301,
        "io_setup": 206, "fcntl": 72, "epoll_create": 213, "epoll_create1": 291,
        "epoll_ctl": 233, "flock": 73, "vfork": 58, "mmap": 9, "mremap": 25,
        "shmat": 30}),
    "aarch64": (0xC00000B7, 277, {
        "socket": 198, "socketpair": 199, "connect": 203, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "add_key": 217, "request_key": 218,
        "keyctl": 219, "ptrace": 117, "process_vm_writev": 271, "userfaultfd": 282,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "bpf": 280, "clone": 220, "clone3": 435, "ioctl": 29, "inotify_init1": 26,
        "mq_open": 180, "perf_event_open": 241, "seccomp": 277, "prctl": 167,
        "rt_sigaction": 134, "fanotify_init": 262, "fanotify_mark": 263,
        "io_setup": 0, "fcntl": 25, "epoll_create1": 20, "epoll_ctl": 21, "flock": 32,
        "mmap": 222, "mremap": 216, "shmat": 196}),
}


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def program(machine: str, keep: tuple[str, ...] = ()) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as ``(code, jt, jf, k)`` instructions (see the module
    docstring), the calls of :data:`DENIED` (and ``rt_sigaction``'s check, and fcntl's
    record locks and pipe sizes: :data:`FCNTL_HOST`) named in ``keep`` allowed. Raises
    KeyError for a machine not in :data:`SYSCALLS`."""
    arch, _, nr = SYSCALLS[machine]
    # (code, jt, jf, k) with jt / jf a label (str) or None (the next instruction); a str
    # alone is a label for the instruction after it
    asm: list[tuple[int, str | None, str | None, int] | str] = [
        (LD_ABS_W, None, None, 4),  # seccomp_data.arch
        (JEQ_K, None, "deny", arch),  # another architecture: refused
        (LD_ABS_W, None, None, 0)]  # seccomp_data.nr
    if machine == "x86_64":
        asm.append((JGE_K, "deny", None, X32_BIT))
    # (AArch64 has no inotify_init: inotify_init1 only)
    asm += [(JEQ_K, "deny", None, nr[n]) for n in DENIED if n in nr and n not in keep]
    locks = () if FCNTL_HOST in keep else F_HOST
    asm += [(JEQ_K, "enosys", None, nr["clone3"]), (JEQ_K, "ioctl", None, nr["ioctl"]),
            (JEQ_K, "prctl", None, nr["prctl"]), (JEQ_K, "fcntl", None, nr["fcntl"])]
    if "rt_sigaction" not in keep:
        asm.append((JEQ_K, "act", None, nr["rt_sigaction"]))
    if MAP_OVER not in keep:
        asm += [(JEQ_K, "mmap", None, nr["mmap"]), (JEQ_K, "mremap", None, nr["mremap"])]
    shared = CLONE_SHARED in keep
    asm += [(JEQ_K, "clone", "allow", nr["clone"]),
            "clone", (LD_ABS_W, None, None, 16),  # seccomp_data.args[0], its low 32 bits
            (JSET_K, "deny", "allow" if shared else None, CLONE_NEWUSER)]
    if not shared:  # CLONE_VM: allowed with CLONE_THREAD and CLONE_FILES (a thread) only
        asm += [(JSET_K, None, "allow", CLONE_VM), (JSET_K, None, "deny", CLONE_THREAD),
                (JSET_K, "allow", "deny", CLONE_FILES)]
    asm += ["ioctl", (LD_ABS_W, None, None, 24),  # args[1], low 32 bits
            (JEQ_K, "deny", "allow", USERFAULTFD_IOC_NEW),
            "prctl", (LD_ABS_W, None, None, 16),
            (JEQ_K, "deny", "allow", PR_SET_SECCOMP),
            "fcntl", (LD_ABS_W, None, None, 24),  # args[1], the command
            *[(JEQ_K, "deny", None, c) for c in locks],
            (JEQ_K, "deny", None, F_SETLEASE),
            (JEQ_K, "deny", "allow", F_NOTIFY),
            "mmap", (LD_ABS_W, None, None, 40),  # args[3], the flags
            (JSET_K, None, "allow", MAP_SHARED),
            (JSET_K, "deny", "allow", MAP_FIXED),
            "mremap", (LD_ABS_W, None, None, 40),  # args[3], the flags
            (JSET_K, "deny", "allow", MREMAP_FIXED),
            "act", (LD_ABS_W, None, None, 24),  # the new action's pointer: NULL is a query
            (JEQ_K, None, "deny", 0),
            (LD_ABS_W, None, None, 28),  # its high 32 bits
            (JEQ_K, "allow", "deny", 0),
            "allow", (RET_K, None, None, RET_ALLOW),
            "deny", (RET_K, None, None, RET_ERRNO | errno.EPERM),
            "enosys", (RET_K, None, None, RET_ERRNO | errno.ENOSYS)]
    return _assemble(asm)


def _assemble(asm: list[tuple[int, str | None, str | None, int] | str]
              ) -> list[tuple[int, int, int, int]]:
    """:func:`program`'s instructions with their labels (a str in ``asm`` names the
    instruction after it; a jump's target is a label or None, the next instruction) made
    relative jump offsets."""
    at: dict[str, int] = {}
    n = 0
    for x in asm:
        if isinstance(x, str):
            at[x] = n
        else:
            n += 1
    body: list[tuple[int, int, int, int]] = []
    for x in asm:
        if isinstance(x, str):
            continue
        code, jt, jf, k = x
        i = len(body)
        body.append((code, 0 if jt is None else at[jt] - i - 1,
                     0 if jf is None else at[jf] - i - 1, k))
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
