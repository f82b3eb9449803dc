"""The CLI's standard streams, made safe before anything prints.

Two ways a console broke every command with a traceback:

- an encoding that is not UTF-8 (``PYTHONIOENCODING=ascii``, a Latin-1 locale): a value
  holding a character the encoding lacks (gcc's curly quotes in a compile error, a
  string in a query result) raised ``UnicodeEncodeError`` from rich, csv or json output;
- a closed descriptor (``kopt ... >&-`` or ``2>&-``, as a daemon, cron job or supervisor
  may start it): Python sets ``sys.stdout`` / ``sys.stderr`` to ``None``, and the next
  file opened takes descriptor 1 or 2, so that whatever writes there lands in that file.

:func:`prepare` handles both, for every output path at once.
"""

from __future__ import annotations

import fcntl
import io
import os
import sys

# the standard descriptors and the ``sys`` attribute of each, with its mode
_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def _usable(fd: int, mode: str) -> bool:
    """Whether descriptor ``fd`` is open for ``mode`` (``"r"`` or ``"w"``). A closed
    descriptor can be taken by a file some launcher opened read-only (a ``pyenv`` shim
    script lands on descriptor 2 under ``2>&-``): writing there fails with EBADF."""
    try:
        access = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        return False
    return access == os.O_RDWR or access == (os.O_RDONLY if mode == "r" else os.O_WRONLY)


def _reopen_closed(fd: int, mode: str) -> bool:
    """Open ``/dev/null`` on descriptor ``fd`` when it is closed or not open for
    ``mode``; True when it was."""
    if _usable(fd, mode):
        return False
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)
    return True


def _never_fails_to_encode(stream: object) -> None:
    """Characters the stream's encoding lacks are written as ``\\u2603``-style escapes
    (``errors="backslashreplace"``), never a ``UnicodeEncodeError``; the encoding stays."""
    try:
        stream.reconfigure(errors="backslashreplace")  # type: ignore[attr-defined]
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass  # not a text stream of its own (a test runner's capture): leave it


def prepare() -> None:
    """Make the standard streams safe for the CLI: a closed descriptor 0, 1 or 2 gets
    ``/dev/null`` (what would have been written there goes nowhere, and no file opened
    later takes its number), a ``None`` ``sys.stdin``/``stdout``/``stderr`` becomes a
    stream on it, and output never fails on a character the console's encoding lacks.
    Idempotent; raises nothing but an ``OSError`` from opening ``/dev/null``."""
    for fd, name, mode in _STREAMS:
        reopened = _reopen_closed(fd, mode)
        if reopened or getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, encoding="utf-8", errors="backslashreplace",
                                    closefd=False))
        if mode == "w":
            _never_fails_to_encode(getattr(sys, name))
