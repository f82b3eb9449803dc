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
- keeps every event raised inside the harness's own call into a candidate's library
  (:func:`call`, :func:`bound`, the library's load: :func:`load`): on the harness's main
  thread, one whose stack holds :func:`call`'s frame (the interpreter's own record, read
  by the hook: no flag a candidate could turn off; a red-team candidate set such a flag
  back through three C API calls that raise no event, then ran Python unseen), on another
  thread one raised while :data:`WINDOW` is set (that flag can be turned off so). The
  harness's own code raises none inside (its calls of the library are made with their
  arguments already converted), so each is the candidate's (or another thread's acting
  meanwhile: :func:`taken` says which). On the main thread each new one is written at
  once to the sandbox's pipe (``fd``, a progress message: workers.sandbox
  ``Sandbox._entered``), before the code that raised it runs, with the hook's own objects
  only (its defaults: rebinding them raises an event, ``object.__setattr__``, that it
  sends first), so that Python code a candidate runs cannot take back what it was seen
  doing. Events the hook's look at the stack raises itself (``sys._getframe``,
  ``object.__getattr__``) are skipped: a candidate's are too, but nothing runs them
  unseen without one of the others first.

What it cannot see: C code that reads or writes the process's memory without the
interpreter (a pointer into an object, a patched C function), and the C API's calls that
raise no event (an attribute read or set on a module or an instance, a frame's locals
through ``PyEval_GetFrame``, a module's attribute rebound, a callable made from C with
``PyCFunction_New``): workers.harness checks the states and functions these reach
(``STATES``, ``watched``) after every job, and the closing's outside clock times the
winners' calls.
"""

from __future__ import annotations

import builtins
import ctypes
import functools
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

# WINDOW[0] is True while a candidate's code runs on the harness's behalf (:func:`call`): what
# the hook reads for threads other than the main one
WINDOW = [False]
_TAKEN: list[tuple[str, str, int]] = []  # (event, its first text argument, thread ident)
_INSTALLED: list[Any] = []
MAX_TAKEN = 64  # events kept per job (a candidate that loops over one is named by its first)
MAX_DEPTH = 1 << 16  # frames the hook looks down for :func:`call`'s: past any recursion limit
# the events the hook's own look at the stacks raises (``object.__getattr__`` only for a
# frame's ``f_code``)
_OWN = ("sys._getframe", "sys._current_frames")
_TEXT = " ._-()<>/:,"  # what a sent event keeps besides letters and digits (JSON-safe)


class Refused(RuntimeError):
    """Raised inside the hook for ``sys.addaudithook``: the new hook is not added."""


def call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a candidate library's function, arguments already ctypes values or
    ints) as a window: its result."""
    WINDOW[0] = True
    try:
        return fn(*args)
    finally:
        WINDOW[0] = False


def _hook(event: str, args: tuple, st: tuple = ()) -> None:
    """The audit hook's code (its objects in ``st``, :func:`install`'s defaults)."""
    (window, taken, write, fd, getframe, get_ident, main, call_code, init_code, refused,
     ln, isstr, anyof, nextof, skipped, depth, most, text, frames, active, fstat, ino, kill,
     pid, own) = st
    if event in skipped or (event == "object.__getattr__" and ln(args) > 1 and
                            args[1] == "f_code" and type(args[0]).__name__ == "frame"):
        return
    me = get_ident()
    # the main thread: its stack holds call()'s frame; another: the main thread's does, or
    # it is no thread of ``threading``'s (a native one that took the interpreter's lock),
    # or the window's flag is set
    f = getframe(1) if me == main else frames().get(main)
    if me == main and event == "ctypes.dlopen" and f.f_code is init_code and (
            f.f_back is not None and f.f_back.f_code is call_code):
        f = None  # the harness's own load (:func:`load`): its library's code follows
    in_call, n = False, 0
    while f is not None and n < depth and not in_call:
        # a frame of this module's functions (``call``'s, under the candidate's code; the
        # hook's own globals are another dict): ``f_globals`` raises no event, where each
        # read of ``f_code`` does and would run this hook again for every frame
        in_call = f.f_globals is own
        f, n = f.f_back, n + 1
    native = me != main and me not in active
    inside = in_call or native or (me != main and window[0])
    if inside and ln(taken) < most:
        first = nextof((a for a in args[:2] if isstr(a, str)), "")
        new = not anyof(e == event and x == first for e, x, _ in taken)
        taken.append((event, first, me))
        if new and in_call and (me == main or native) and fd is not None and (
                event != "kopt.audit.installed"):
            # out of the process before the code that raised it runs (the main thread is
            # in the candidate's call then, writing nothing of its own); a thread of
            # ``threading``'s (ref.py's may run meanwhile) is left to :func:`taken`'s skip
            said = event + (" (" + first[:80] + ")" if first else "")
            said = "".join(c for c in said if c.isalnum() or c in text)
            body = ('{"progress": true, "entered": ["' + said + '"]}').encode()
            try:  # the pipe it was given, still: else the process ends (``crashed``)
                same = fstat(fd).st_ino == ino
            except OSError:
                same = False
            if not same:
                kill(pid, 9)
            try:
                write(fd, ln(body).to_bytes(4, "big", signed=True) + body)
            except OSError:
                kill(pid, 9)
    if event == "sys.addaudithook":
        raise refused("the harness's process takes no audit hook but its own")


def install(fd: int | None = None) -> bool:
    """Add the hook to the process (once; later calls do nothing), writing what it sees
    on the main thread to ``fd`` (a multiprocessing ``Connection``'s, as its
    ``send_bytes`` frames a message: a 4-byte big-endian length, then the JSON) when given.
    Returns True when it is (now or already) added, False when another hook refused it."""
    if _INSTALLED:
        return True
    st = (WINDOW, _TAKEN, os.write, fd, sys._getframe, threading.get_ident,
          threading.get_ident(), call.__code__, ctypes.CDLL.__init__.__code__, Refused, len,
          isinstance, any, next, frozenset(_OWN), MAX_DEPTH, MAX_TAKEN, _TEXT,
          sys._current_frames, threading._active, os.fstat,  # type: ignore[attr-defined]
          None if fd is None else os.fstat(fd).st_ino, os.kill, os.getpid(), globals())
    # its code with no globals of this module's (a rebound name changes nothing it does)
    hook = types.FunctionType(_hook.__code__, {"__builtins__": builtins}, "kopt_audit_hook",
                              (st,))
    try:
        sys.addaudithook(hook)
    except RuntimeError:
        return False
    # a hook refused by an earlier one raises nothing: it is simply not called. Raise an
    # event of kopt's own inside a window to see that this one is.
    call(sys.audit, "kopt.audit.installed")
    ok = any(e == "kopt.audit.installed" for e, _, _ in _TAKEN)
    _TAKEN.clear()
    if ok:
        _INSTALLED.append(hook)
    return ok


def installed() -> bool:
    """Whether :func:`install` added the hook to this process."""
    return bool(_INSTALLED)


def load(path: str, mode: int) -> ctypes.CDLL:
    """``ctypes.CDLL(path, mode)`` as a window (the library's constructors run in the load;
    the load's own ``ctypes.dlopen`` event, raised by ``CDLL.__init__`` right under
    :func:`call`, is not kept). Raises what ``CDLL`` raises."""
    return call(ctypes.CDLL, path, mode)


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
