"""Paths a user hands kopt, made absolute without surprises.

Python 3.11's ``Path.resolve()`` raises ``RuntimeError`` for a symlink loop (3.13 raises
``OSError``), which slipped past every ``except OSError`` and reached the user as a
traceback; ``Path.exists()`` is False for a loop and for a dangling link alike, so checks
that walk up to "the nearest folder that exists" walked past both.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def resolved(path: str | Path) -> Path:
    """``Path(path).resolve()``, a symlink loop raised as the OSError it is.

    Raises:
        OSError: errno ELOOP, naming ``path``, for a symlink loop on the way.
    """
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None


def broken_link(path: str | Path) -> str:
    """"" or what is wrong with ``path`` itself as a link: ``a symlink loop`` or ``a
    dangling symlink (to TARGET)``; a plain path, missing or not, is "". Reads only
    ``path``'s own entry and what it points to."""
    p = Path(path)
    if not p.is_symlink():
        return ""
    try:
        p.stat()
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop"
        return f"a dangling symlink (to {os.readlink(p)})"
    return ""
