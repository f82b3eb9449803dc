"""Python's audit hooks (PEP 578) as a witness of candidate code entering the interpreter.

A candidate's ``solve`` is native code: an honest one never runs Python. One that does
(``PyRun_SimpleString``, or the C API's calls of ``gc.get_objects``, ``sys._getframe``,
``sys.settrace``...) reaches everything the harness's process holds, and what it changes
there (a clock, a collector callback, a thread's state) can outlive its job; the red-team
reviews' candidates did each of these (``workers.harness``'s "not caught" list). The
interpreter raises an audit event for each of those entries (``compile`` and ``exec``
before a string runs, ``gc.get_objects``, ``sys._getframe``, ``sys.setprofile``, an
``import`` of a module not yet loaded, ``ctypes.*``, ``open``; the table of events:
https://docs.python.org/3/library/audit_events.html), before the action, on the thread
that acts, whoever called: Python code or C. No audit hook can be removed, listed or
skipped once added (``sys.addaudithook``'s documentation).

:func:`install` adds this module's hook, the first of the process, before any candidate's
library is loaded. It

- refuses every later hook, from anyone (``sys.addaudithook`` raises the event
  ``sys.addaudithook`` first and adds nothing when a hook raises ``RuntimeError``;
  ``PySys_AddAuditHook`` alike): code that could watch every later event of the process
  unseen is kept out;
- keeps every event raised while :data:`WINDOW` is set, that is while the harness's own
  call into a candidate's library runs (:func:`call`, the library's load): what
  :func:`taken` returns. The harness's own code raises none inside (its calls of the
  library are made with their arguments already converted), so each is the candidate's
  (or a thread of the harness's process acting meanwhile: :func:`taken` says which).

What it cannot see: C code that reads or writes the process's memory without the
interpreter (a pointer into an object, a patched C function), and the C API's calls that
raise no event (an attribute read or set on a module or an instance, a frame's locals
through ``PyEval_GetFrame``): workers.harness checks the states and functions these reach
(``STATES``, ``watched``) after every job, and the closing's outside clock times the
winners' calls.
"""

from __future__ import annotations

import ctypes
import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

# WINDOW[0] is True while a candidate's code runs on the harness's behalf (:func:`call`)
WINDOW = [False]
_TAKEN: list[tuple[str, str, int]] = []  # (event, its first text argument, thread ident)
_SEND: list[Callable[[str], None]] = []  # set_sender's
_LOADING: list[str | None] = [None]  # the path :func:`load` loads: its own event is not kept
_INSTALLED: list[Any] = []
MAX_TAKEN = 64  # events kept per job (a candidate that loops over one is named by its first)


class Refused(RuntimeError):
    """Raised inside the hook for ``sys.addaudithook``: the new hook is not added."""


class _Hook:
    """The hook: every object it uses bound when it is made (a module global rebound later
    changes nothing it does)."""

    __slots__ = ("window", "taken", "send", "get_ident", "loading", "main")

    def __init__(self):
        self.window, self.taken, self.send, self.loading = WINDOW, _TAKEN, _SEND, _LOADING
        self.get_ident, self.main = threading.get_ident, threading.main_thread().ident

    def __call__(self, event: str, args: tuple) -> None:
        if self.window[0] and len(self.taken) < MAX_TAKEN:
            first = next((a for a in args[:2] if isinstance(a, str)), "")
            if event == "ctypes.dlopen" and self.loading[0] is not None and (
                    first == self.loading[0]):
                self.loading[0] = None  # the harness's own load, once: its library's code follows
                return
            self._keep(event, first)
        if event == "sys.addaudithook":
            raise Refused("the harness's process takes no audit hook but its own")

    def _keep(self, event: str, first: str) -> None:
        me = self.get_ident()
        new = not any(e == event and f == first for e, f, _ in self.taken)
        self.taken.append((event, first, me))
        if new and self.send and me == self.main:  # out of the process before the code runs
            self.window[0] = False  # the sending's own events, if any, are the harness's
            try:
                self.send[0](event + (f" ({first[:80]})" if first else ""))
            except Exception:  # noqa: BLE001 -- kept here all the same
                pass
            finally:
                self.window[0] = True


def install() -> bool:
    """Add this module's hook to the process (once; later calls do nothing). Returns True
    when it is (now or already) added, False when another hook refused it."""
    if _INSTALLED:
        return True
    hook = _Hook()
    try:
        sys.addaudithook(hook)
    except RuntimeError:
        return False
    # a hook refused by an earlier one raises nothing: it is simply not called. Raise an
    # event of kopt's own to see that this one is.
    WINDOW[0] = True
    try:
        sys.audit("kopt.audit.installed")
    finally:
        WINDOW[0] = False
    ok = any(e == "kopt.audit.installed" for e, _, _ in _TAKEN)
    _TAKEN.clear()
    if ok:
        _INSTALLED.append(hook)
    return ok


def set_sender(send: Callable[[str], None]) -> None:
    """Have the hook call ``send`` with each new event (``event (first argument)``) raised
    in a window on the main thread, at once (the harness: a progress message to the
    sandbox, workers.sandbox ``Sandbox._entered``), so that Python code a candidate runs
    cannot take back what it was seen doing."""
    _SEND[:] = [send]


def installed() -> bool:
    """Whether :func:`install` added the hook to this process."""
    return bool(_INSTALLED)


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a candidate library's function, arguments already ctypes values or
    ints) with :data:`WINDOW` set; its result."""
    WINDOW[0] = True
    try:
        return fn(*args)
    finally:
        WINDOW[0] = False


def load(path: str, mode: int) -> ctypes.CDLL:
    """``ctypes.CDLL(path, mode)`` with :data:`WINDOW` set after its own ``ctypes.dlopen``
    event: the library's constructors run in the load. Raises what ``CDLL`` raises."""
    _LOADING[0] = path
    try:
        return call(ctypes.CDLL, path, mode)
    finally:
        _LOADING[0] = None


def bound(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """:func:`call` of ``fn`` on ``args`` as a function of no arguments (a timed call's
    callable: one Python frame around the call)."""
    return functools.partial(call, fn, *args)


def taken(skip: set[int] | None = None) -> list[str]:
    """The events kept since the last call (then forgotten), each as ``event`` or
    ``event (first argument)``, with `` on another thread`` where the thread that raised it
    is not the caller's; events of threads in ``skip`` (idents: those ref.py started, which
    may run Python at any time) are left out. Each distinct one once, in order."""
    me = threading.get_ident()
    out: list[str] = []
    for event, first, ident in _TAKEN:
        if skip and ident in skip:
            continue
        s = event + (f" ({first[:80]})" if first else "") + (
            " on another thread" if ident != me else "")
        if s not in out:
            out.append(s)
    _TAKEN.clear()
    return out
