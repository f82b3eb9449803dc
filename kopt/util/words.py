"""Counts in messages: "1 candidate", "3 candidates" (new-user trial: "1 cpu device actors")."""

from __future__ import annotations


def counted(n: float, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, the noun plural unless ``n`` is 1: ``counted(1, "device actor")``
    is ``"1 device actor"``, ``counted(3, "device actor")`` ``"3 device actors"``. The
    plural is ``noun + "s"``, or ``plural`` for a noun that forms it otherwise (``"try"``,
    ``"tries"``). A float is shown as ``{n:g}``."""
    shown = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{shown} {noun if n == 1 else plural or noun + 's'}"
