"""Landlock (Linux 5.13+): what a process may read and write, by folder, for it and every
process it starts, set by the process itself with no privilege (``landlock(7)``).

kopt runs each compiler under a ruleset that lets it read the toolchain, the sweep folder
and the space's include_dirs, and write only its build folder: a source that includes a
host file (``#include "/etc/passwd"``, ``.incbin "/root/.ssh/id_rsa"``) gets "Permission
denied", never the file's lines in its stored compile error, and no compiler run on a
candidate's source can write outside its build folder.

Rights, structures and syscall numbers are those of ``<linux/landlock.h>`` (the same on
x86_64 and aarch64: the syscalls came after the table was unified). Rights a kernel's ABI
does not know are left out of the ruleset (its man page's "best effort" use).

Stdlib only (ctypes): the build worker imports it.
"""

from __future__ import annotations

import ctypes
import os
import sys

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_PATH_BENEATH = 1  # LANDLOCK_RULE_PATH_BENEATH
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_ALL_KNOWN = (1 << 16) - 1  # ABI 5 and later (ABI 6 and 7 added no file-system right)
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a file rule takes

READ = EXECUTE | READ_FILE | READ_DIR
WRITE = _ALL_KNOWN  # everything beneath: make, remove, rename, write


# ABI 4: TCP bind and connect (``handled_access_net``, with no rule: every port refused);
# ABI 6: scopes (``scoped``): no signal to, and no abstract Unix socket of, a process
# outside the ruleset's domain. A compiler needs neither; a ``-wrapper`` shell run by a
# sweep's flags reached the network and SIGKILLed a host process (red-team round 10)
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


def _attr_size(version: int) -> int:
    """The ``landlock_ruleset_attr`` size a kernel of ABI ``version`` knows (bytes)."""
    return 8 * (1 + (version >= 4) + (version >= 6))


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class LandlockError(OSError):
    """The ruleset could not be made or applied (errno and the step that failed)."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version (1-7 on Linux 5.13-6.x), 0 where there is none
    (another OS, an older kernel, Landlock not among the enabled LSMs)."""
    if sys.platform != "linux":
        return 0
    r = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    return max(int(r), 0)


def restrict(read: list[str], write: list[str]) -> int:
    """Restrict this process and everything it starts from now on: read (and execute)
    only beneath the paths in ``read``, read and write only beneath those in ``write``;
    every other file-system access fails with EACCES. Paths that do not exist are skipped;
    a path naming a file (not a folder) gets the file rights only. Where the kernel knows
    them, also no TCP bind or connect (ABI 4) and no signal or abstract Unix socket reaching
    a process outside this one's descendants (ABI 6).

    Returns:
        The ABI version applied (0: no Landlock here, nothing was restricted).

    Raises:
        LandlockError: the kernel refused a step (the process is left unrestricted
            unless the last step, ``landlock_restrict_self``, succeeded).
    """
    version = abi()
    if version == 0:
        return 0
    handled = _BY_ABI.get(version, _ALL_KNOWN)
    libc = _libc()
    attr = _RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0)
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(_attr_size(version)),
                      ctypes.c_uint32(0))
    if fd < 0:
        raise LandlockError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for paths, rights in ((read, READ), (write, WRITE)):
            for p in paths:
                _allow(libc, fd, p, rights & handled)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise LandlockError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)
    return version


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    """Add ``path`` (folder: ``rights`` beneath it; file: its file rights) to ``ruleset``."""
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not there: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(rights, pfd)
        if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_uint32(_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise LandlockError(ctypes.get_errno(), f"landlock_add_rule({path})")
    finally:
        os.close(pfd)
