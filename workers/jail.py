"""The first process of a candidate's sandbox: sets up its mounts, drops privilege, runs it.

``python -m workers.jail SCRATCH [--rw PATH]... [--lo] [--no-gpu] [--proc-rw] -- CMD...`` is
started by
``unshare`` (util-linux) in new PID, network and mount namespaces (and a user namespace where
kopt does not run as root; workers.isolation builds that command line). As the namespace's
process 1 it:

1. makes every mount private (nothing mounted here reaches the host);
2. mounts a fresh ``/proc``, read-only (only the sandbox's own processes are visible in it,
   and no ``/proc/PID/mem`` opens for writing there: the way around the filter's ``ptrace``
   and ``process_vm_writev`` into another process of the sandbox, as a red-team candidate
   wrote a jump into a process ref.py had started; its ``sys``, ``sysrq-trigger``, ``irq``,
   ``bus`` and ``fs`` read-only in any case: :data:`PROC_READ_ONLY`, as ``--proc-rw``
   leaves the rest writable, for Nsight Compute's target) and a fresh tmpfs on ``/dev/shm``
   (no shared memory of the host's to read or plant);
3. binds ``/dev/null`` over every device node but a few and the GPU's (:data:`DEV_KEPT`,
   :func:`_kept_device`; the GPU's too with ``--no-gpu``, for a CPU device), and mounts a
   tmpfs of :func:`scratch_bytes` on ``SCRATCH`` (a folder the caller made and removes;
   what is written there is in memory, counted by the harness's memory cgroup, and gone
   with the sandbox);
4. remounts every other mount read-only, the root included: the sweep folder and its
   ``ref.py``, kopt's build cache and store, kopt's own code, ``/tmp`` (other runs'
   sockets) and the device nodes' ``/dev`` (opening a device node for writing is not
   writing to its file system, so the GPU stays usable);
5. starts CMD as its child with no capabilities (the bounding set emptied, no new
   privileges: ``prctl(2)``), so that it cannot undo the mounts; with the GPU (not
   ``--no-gpu``) the child's own ``/proc/PID`` writable first (:func:`own_proc`: CUDA's
   start names its threads through ``/proc/self/task/TID/comm``, and "cudaGetDeviceCount()
   Error 304: OS call failed" when that write failed, on an H100 host, 2026-12-07), while
   every other process's stays read-only; no file larger than
   :func:`file_bytes` (``RLIMIT_FSIZE``: its log on the host's disk is bounded), at most
   :data:`SIGPENDING_MAX` queued signals and :data:`NOFILE_MAX` open files, and reaps
   every process left in the namespace until CMD exits;
6. exits with CMD's exit code, or 128 + N when a signal N killed it (process 1 of a PID
   namespace cannot die of a signal sent from inside it, so the signal is passed on as a
   code: workers.isolation.decode_exit). Its exit ends the namespace: the kernel kills
   every process a candidate left behind (a double fork, ``setsid``).

The network namespace has no interface up, not even loopback (but with ``--lo``, for
Nsight Compute and its target): no connection can be made.
Once set up, the harness itself installs a system-call filter (workers.seccomp): no new
socket (the Unix sockets of the host are files a read-only mount still lets ``connect``
reach), keyring, ``ptrace``, io_uring or namespace.
Only the standard library is used here (and workers.cgroup, as small); this process
starts before the harness can.
A setup step that fails exits 125 with one line on stderr naming the step.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import resource
import signal
import stat
import sys
from collections.abc import Callable

from workers.cgroup import env_gib  # the standard library only, too

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38  # <linux/prctl.h>
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4  # <linux/prctl.h>
CAP_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3, <linux/capability.h>
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # <linux/sockios.h>, <net/if.h>
SETUP_FAILED = 125
MNT_DETACH = 2  # umount2(2), <sys/mount.h>
SCRATCH_ENV, SCRATCH_GB_DEFAULT = "KOPT_HARNESS_SCRATCH_GB", 4
FILE_ENV, FILE_GB_DEFAULT = "KOPT_HARNESS_FILE_GB", 1
# parts of the fresh /proc made read-only, as container runtimes do: writes there are checked
# by uid, not by capability, and a candidate still runs as uid 0 (root, no capabilities):
# /proc/sys/kernel/core_pattern would run a program of its choosing as the host's root
# the device nodes left as they are (besides the GPU's nv* nodes); every other one is
# /dev/null in the sandbox (:func:`_mask_devices`)
# (not ``ptmx``: each pseudo-terminal opened there is taken from the host's pool,
# ``kernel.pty.max``; a red-team candidate held 2000 of the host's 4096)
DEV_KEPT = ("null", "zero", "full", "random", "urandom", "tty")
# the harness's hard limits on two counts the kernel keeps per user (the host's root, as
# whom it runs): pending queued signals (``RLIMIT_SIGPENDING``: a candidate that queued
# signals to itself until refused left no root process of the host able to queue one or
# make a POSIX timer, red-team round 8) and open files (``RLIMIT_NOFILE``: what one process
# may hold. It does not bound epoll watches, ``fs.epoll.max_user_watches``: a watch lasts
# as long as its file, not its descriptor, and red-team round 9 held 5.3 million with ~180
# open; a uid of the harness's own would, but the interpreter and kopt may live where only
# root can read, e.g. under /root)
SIGPENDING_MAX, NOFILE_MAX = 64, 1024
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
# the per-mount flags a read-only remount must keep (in a user namespace the kernel refuses
# a remount that would clear one the mount had when the namespace was made)
_KEPT = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
         "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """A step of the sandbox's set-up failed; the message names the step and the errno."""


def _mount(src: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    """``mount(2)``. Raises SetupError naming ``target`` and the error."""
    if _libc.mount(src and src.encode(), target.encode(), fstype and fstype.encode(),
                   ctypes.c_ulong(flags), data and data.encode()) != 0:
        err = ctypes.get_errno()
        raise SetupError(f"mount {target} ({fstype or 'flags'} {flags:#x}): "
                         f"{os.strerror(err)}")


def mount_points() -> list[tuple[str, int]]:
    """The mount points of this mount namespace with the flags each must keep, from
    ``/proc/self/mountinfo`` (its fifth and sixth fields; octal escapes undone)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            path = _unescape(fields[4])
            kept = 0
            for opt in fields[5].split(","):
                kept |= _KEPT.get(opt, 0)
            out.append((path, kept))
    return out


def _kept_device(path: str, gpu: bool = True) -> bool:
    """Whether device node ``path`` stays reachable in the sandbox (:data:`DEV_KEPT`, and
    with ``gpu`` the GPU's nodes: NVIDIA's ``nvidia*`` and ``nvidia-caps/``, and a Jetson's
    ``nvmap``, ``nvhost-*`` and ``nvgpu/``: every path part that starts with ``nv``).
    Without ``gpu`` (a CPU device's harness) the GPU's nodes go too: a CPU candidate on a
    GPU host could otherwise do its work on the GPU, using little of the CPU time the
    outside clock counts (workers.sandbox ``outside_cpu_ms``)."""
    name = os.path.basename(path)
    return (os.path.dirname(path) == "/dev" and name in DEV_KEPT) or gpu and any(
        part.startswith("nv") for part in path.split("/"))


def _mask_devices(root: str, gpu: bool = True) -> None:
    """Bind ``/dev/null`` over every character and block device under ``root`` that is
    not kept (:func:`_kept_device`), as container runtimes offer only a few nodes: a
    candidate that is still uid 0 could otherwise open the host's disks (and write a file
    system the host has mounted), loop devices, ``/dev/userfaultfd``, ``/dev/kvm``, other
    users' terminals. Raises SetupError."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) != "/dev/shm"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) and not _kept_device(path, gpu):
                _mount("/dev/null", path, None, MS_BIND)


def _unescape(field: str) -> str:
    """A mountinfo path field with its octal escapes (``\\040`` for a space) undone as
    bytes, so that UTF-8 names stay whole."""
    raw = field.encode("utf-8", "surrogateescape")
    out = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), raw)
    return out.decode("utf-8", "surrogateescape")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def set_up(scratch: str, keep: tuple[str, ...] = (), gpu: bool = True,
           proc_rw: bool = False) -> None:
    """Steps 1-4 of the module docstring; the mounts at and under each path of ``keep``
    are left writable as they were (workers.isolation ``KOPT_SANDBOX_WRITABLE``); the GPU's
    device nodes masked too without ``gpu`` (:func:`_kept_device`); ``/proc`` left writable
    (but :data:`PROC_READ_ONLY`) with ``proc_rw``. Raises SetupError."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc",
           MS_NOSUID | MS_NODEV | MS_NOEXEC | (0 if proc_rw else MS_RDONLY))
    for path in PROC_READ_ONLY:  # the kernel's settings: owned by uid 0, which we still are
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
                   | MS_NOEXEC)
    if os.path.isdir("/dev/shm") and not any(_under("/dev/shm", k) for k in keep):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV)
    _mask_devices("/dev", gpu)
    # scratch: a tmpfs of bounded size, not the host's disk (a candidate wrote 2 GiB there,
    # and could fill the disk the store and the build cache live on); its pages count
    # against the harness's memory cgroup (workers.cgroup)
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={scratch_bytes()},mode=0700")
    for path in keep:
        _mount(path, path, None, MS_BIND | MS_REC)
    writable = (scratch, "/proc", "/dev/shm", *keep)
    for path, kept in reversed(mount_points()):
        if any(_under(path, w) for w in writable) or not os.path.lexists(path):
            continue  # a mount point a later mount hid (its path gone) is not reachable
        _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def own_proc(pid: int, scratch: str) -> None:
    """Make process ``pid``'s own ``/proc/PID`` (its threads' ``task/TID`` and so
    ``/proc/self`` and ``/proc/thread-self`` as it reads them) writable under the read-only
    ``/proc``: a second ``proc`` mount, on a folder of ``scratch`` made for it, whose
    ``PID`` is bound over the first one's, then detached (``MNT_DETACH``) and its folder
    removed before ``pid`` runs anything. Every other process's ``/proc/PID``, the top-level
    ``/proc/TID`` of ``pid``'s threads and ``..`` out of the bind stay on the read-only
    mount. Raises SetupError."""
    view = os.path.join(scratch, f".proc-{pid}")
    try:
        os.mkdir(view, 0o700)
    except OSError as e:
        raise SetupError(f"mkdir {view}: {e.strerror}") from None
    try:
        _mount("proc", view, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        try:
            _mount(os.path.join(view, str(pid)), f"/proc/{pid}", None, MS_BIND)
        finally:
            if _libc.umount2(view.encode(), MNT_DETACH) != 0:
                raise SetupError(f"umount {view}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.rmdir(view)


def loopback_up() -> None:
    """Bring up the network namespace's own loopback interface (``--lo``: a profiler and
    its target talk over 127.0.0.1; the namespace has no other interface, so nothing
    outside it is reachable). ``SIOCGIFFLAGS`` / ``SIOCSIFFLAGS`` with ``IFF_UP``
    (<linux/sockios.h>, <net/if.h>; a ``struct ifreq`` is 40 bytes). Raises OSError."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        got = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sh22x", b"lo", 0))
        flags = struct.unpack("16sh22x", got)[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))


def scratch_bytes() -> int:
    """The scratch folder's size in bytes: ``$KOPT_HARNESS_SCRATCH_GB`` GiB (default
    :data:`SCRATCH_GB_DEFAULT`). Raises SetupError for a value that is not a number above
    0 (kopt checks it before any harness starts: workers.build.check_env)."""
    return _bytes(SCRATCH_ENV, SCRATCH_GB_DEFAULT, "the harness's scratch size")


def file_bytes() -> int:
    """The largest file the harness may write, in bytes (``RLIMIT_FSIZE``):
    ``$KOPT_HARNESS_FILE_GB`` GiB (default :data:`FILE_GB_DEFAULT`). Its stdout and stderr
    are a log file on the host's disk: a candidate that printed without end filled it;
    past the limit a write fails (``EFBIG``; Python ignores ``SIGXFSZ``, a C program
    that does not dies of it). Raises SetupError for a value that is not a number above 0."""
    return _bytes(FILE_ENV, FILE_GB_DEFAULT, "the largest file the harness may write")


def _bytes(name: str, default_gb: float, what: str) -> int:
    """``$NAME`` GiB in bytes (``default_gb`` when unset). Raises SetupError."""
    try:
        gb = env_gib(name, 0, what, f"default {default_gb:g}")
    except ValueError as e:
        raise SetupError(str(e)) from None
    return int((default_gb if gb is None else gb) * 2**30)


def drop_privilege() -> None:
    """No capability for this process or anything it runs (``PR_CAPBSET_DROP`` for each
    capability up to ``/proc/sys/kernel/cap_last_cap``, then ``PR_SET_NO_NEW_PRIVS``; the
    effective set empties at the next ``execve``, or at once with
    :func:`clear_capabilities` in a process that runs on without one). Raises SetupError."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise SetupError(f"prctl(PR_CAPBSET_DROP, {cap}): "
                             f"{os.strerror(ctypes.get_errno())}")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SetupError(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def clear_capabilities() -> None:
    """Empty this process's effective, permitted, inheritable and ambient capability sets
    now (``capset(2)`` with ``_LINUX_CAPABILITY_VERSION_3``, two 32-bit words each, then
    ``PR_CAP_AMBIENT_CLEAR_ALL``: <linux/capability.h>, <linux/prctl.h>), what ``execve``
    does after :func:`drop_privilege` for a process that runs on without one (a harness
    forked from workers.zygote). Raises SetupError."""
    data = (_CapData * 2)()
    if _libc.capset(ctypes.byref(_CapHeader(CAP_VERSION_3, 0)), data) != 0:
        raise SetupError(f"capset: {os.strerror(ctypes.get_errno())}")
    if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        raise SetupError(f"prctl(PR_CAP_AMBIENT_CLEAR_ALL): "
                         f"{os.strerror(ctypes.get_errno())}")


def _start(cmd: list[str], gate: tuple[int, int] | None = None) -> int:
    """Fork and exec ``cmd`` with no privilege (:func:`confine`); returns its pid. With
    ``gate`` (a pipe's read and write ends), the child waits until its write end is closed
    (by :func:`first_process`, once :func:`own_proc` is done) before anything else."""
    pid = os.fork()
    if pid == 0:
        try:
            if gate is not None:
                os.close(gate[1])
                os.read(gate[0], 1)
                os.close(gate[0])
            confine()
            os.execvp(cmd[0], cmd)
        except BaseException as e:  # noqa: BLE001 -- a child must never return here
            print(f"kopt sandbox: cannot start {cmd[0]}: {e}", file=sys.stderr, flush=True)
        os._exit(127)
    if gate is not None:
        os.close(gate[0])
    return pid


def confine() -> None:
    """Step 5 of the module docstring for the calling process (the sandbox's child, before
    it runs the harness): default handlers for the signals process 1 passes on, no file
    larger than :func:`file_bytes`, at most :data:`SIGPENDING_MAX` queued signals and
    :data:`NOFILE_MAX` open files, and no privilege (:func:`drop_privilege`). Raises
    SetupError or OSError."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    cap = file_bytes()  # no file, its log on the host's disk included, past it
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
    for res, most in ((resource.RLIMIT_SIGPENDING, SIGPENDING_MAX),
                      (resource.RLIMIT_NOFILE, NOFILE_MAX)):
        soft, hard = resource.getrlimit(res)
        top = most if hard == resource.RLIM_INFINITY else min(hard, most)
        resource.setrlimit(res, (top if soft == resource.RLIM_INFINITY
                                 else min(soft, top), top))
    drop_privilege()  # (CAP_SYS_RESOURCE gone: the limits cannot be raised)


def _reap_until(child: int) -> int:
    """Reap every process of the namespace until ``child`` exits; its exit as a code:
    the exit code, or 128 + N for signal N."""
    while True:
        try:
            pid, status = os.wait()
        except InterruptedError:
            continue
        except ChildProcessError:
            return SETUP_FAILED
        if pid == child:
            return (128 + os.WTERMSIG(status) if os.WIFSIGNALED(status)
                    else os.WEXITSTATUS(status))


def main(argv: list[str]) -> int:
    """``SCRATCH [--rw PATH]... [--lo] [--no-gpu] [--proc-rw] -- CMD...``: set up, run CMD,
    return its exit code (see the module)."""
    keep: list[str] = []
    flags = {"--lo": False, "--no-gpu": False, "--proc-rw": False}
    while len(argv) > 2 and argv[1] in ("--rw", *flags):
        if argv[1] in flags:
            flags[argv[1]], argv = True, [argv[0], *argv[2:]]
            continue
        keep.append(os.path.realpath(argv[2]))
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m workers.jail SCRATCH [--rw PATH]... [--lo] [--no-gpu] "
              "[--proc-rw] -- CMD...", file=sys.stderr)
        return 2
    scratch, cmd = os.path.realpath(argv[0]), argv[2:]
    gate = os.pipe() if not (flags["--no-gpu"] or flags["--proc-rw"]) else None
    return first_process(scratch, tuple(keep), not flags["--no-gpu"], flags["--lo"],
                         functools.partial(_start, cmd, gate), proc_rw=flags["--proc-rw"],
                         gate=gate[1] if gate else None)


def first_process(scratch: str, keep: tuple[str, ...], gpu: bool, loopback: bool,
                  start: Callable[[], int], proc_rw: bool = False,
                  gate: int | None = None) -> int:
    """What process 1 of the sandbox does (steps 1-4 and 6 of the module docstring): set
    up (the loopback up with ``loopback``, ``/proc`` writable with ``proc_rw``),
    ``start()`` its child (returns its pid: step 5 is the child's; with ``gate``, the write
    end of the pipe the child waits on, its own ``/proc/PID`` made writable first:
    :func:`own_proc`), pass SIGTERM, SIGINT and SIGHUP on to it and reap until it exits;
    returns its exit code (128 + N for signal N), or :data:`SETUP_FAILED` with one line on
    stderr when a set-up step failed."""
    try:
        if loopback:
            loopback_up()
        set_up(scratch, keep, gpu=gpu, proc_rw=proc_rw)
    except (SetupError, OSError) as e:
        print(f"kopt sandbox: set-up failed: {e}", file=sys.stderr, flush=True)
        return SETUP_FAILED
    child = start()
    if gate is not None:
        try:
            own_proc(child, scratch)
        except (SetupError, OSError) as e:
            print(f"kopt sandbox: set-up failed: {e}", file=sys.stderr, flush=True)
            os.kill(child, signal.SIGKILL)
            _reap_until(child)
            return SETUP_FAILED
        finally:
            os.close(gate)  # the child goes on
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # passed on to the child
        signal.signal(sig, functools.partial(_pass_on, child))
    return _reap_until(child)


def _pass_on(child: int, sig: int, _frame: object) -> None:
    os.kill(child, sig)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
