"""Ctrl-C and SIGTERM during a run: the first stops the sweep with every finished measurement
stored (exit 130 / 143, :class:`Terminated`); held around the store's writes so that a part
file is never left half-renamed."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored inside (main thread only): what runs there finishes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a timeout, a scheduler, systemd) stops a sweep the way Ctrl-C does (every
    finished measurement flushed, the run marked interrupted); ``signum`` tells the CLI to
    exit 128 + 15 = 143, as a process ended by SIGTERM does, where Ctrl-C exits 130."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


received: list[int] = []  # the signals terminate turned into Terminated, in order


def terminate(signum: int, frame: Any) -> None:
    received.append(signum)
    raise Terminated(signum)


def stop_signal(e: KeyboardInterrupt) -> int:
    """The signal that stopped a sweep with ``e``: SIGTERM when :func:`terminate` saw one
    (Ray's ``ray.get`` turns the Terminated raised inside it into a plain
    KeyboardInterrupt), else SIGINT (Ctrl-C)."""
    return getattr(e, "signum", None) or (received[-1] if received else signal.SIGINT)
