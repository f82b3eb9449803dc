"""Fields of CPython objects read from this process's memory with no audit event per read.

workers.harness compares, before and after every job, what about a thousand builtins run
(their C pointers) and what about a thousand Python functions run (their code, defaults and
closure) with what they were before any job (``c_swapped``). Read through ``ctypes``'
``from_address``, ``id`` and the functions' ``__code__``, ``__defaults__`` and
``__kwdefaults__``, each read raises an audit event (PEP 578; the table:
https://docs.python.org/3/library/audit_events.html), and workers.audit's hook, which every
harness has, walks the main thread's stack for each: about 4,000 events, 7 ms a check on
this project's CI machine against 1 ms with no hook, two checks a job.

Here one ``memoryview`` spans the address space (:data:`MEMORY`, one ``ctypes`` array made
once at import: one ``ctypes.cdata`` event), and a slice of it reads any mapped address as
native 64-bit words with no event. What is read where is CPython's layout of 3.11-3.13,
64-bit, release builds (Include/cpython/funcobject.h ``PyFunctionObject``,
Include/cellobject.h ``PyCellObject``, Include/cpython/tupleobject.h ``PyTupleObject``,
Include/cpython/methodobject.h ``PyCFunctionObject``, Include/methodobject.h
``PyMethodDef``); :func:`function_words` and :func:`builtin_words` return None where an
object read so does not give what its attributes give (another build), and the caller then
reads the attributes. Reading an unmapped address ends the process (``SIGSEGV``), as
``from_address`` does.

Stdlib only.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

_WORD = 8
SPAN = 1 << 62  # bytes the view spans from address 0: any user address of a 64-bit Linux
# PyObject_HEAD (refcount, type) of a release build; then PyFunctionObject's fields
# globals, builtins, name, qualname, code, defaults, kwdefaults, closure
_HEAD = 16
_FUNC_CODE = _HEAD + 4 * _WORD  # code, defaults, kwdefaults, closure follow it
_TUPLE_ITEMS = _HEAD + _WORD  # PyObject_VAR_HEAD's size, then ob_item
_CELL_REF = _HEAD
# PyCFunctionObject: m_ml, m_self at 16 and 24, vectorcall at 48; PyMethodDef: ml_meth at 8,
# ml_flags (an int, then padding: read as the word) at 16
_CFUNC_M_ML, _CFUNC_VECTORCALL, _ML_METH = 16, 48, 8


def _view() -> memoryview | None:
    if (ctypes.sizeof(ctypes.c_void_p) != _WORD or hasattr(sys, "gettotalrefcount")
            or not (3, 11) <= sys.version_info[:2] <= (3, 13)):
        return None
    return memoryview((ctypes.c_char * SPAN).from_address(0)).cast("B")


MEMORY = _view()  # None where the layouts above are not this interpreter's


def words(at: int, n: int) -> tuple[int, ...]:
    """``n`` native 64-bit words at address ``at`` (:data:`MEMORY` must not be None)."""
    return tuple(MEMORY[at:at + n * _WORD].cast("Q"))  # type: ignore[index]


def function_words(fn: Any, at: int, want: tuple[int, ...] | None = None
                   ) -> tuple[int, ...] | None:
    """Python function ``fn``'s (at address ``at``, ``id(fn)`` when taken) code, defaults,
    keyword defaults and closure pointers, then each closure cell's content pointer (0 for
    NULL or an empty cell). With ``want`` (an earlier reading), the reading stops where it
    first differs (a closure replaced is not read into). None where :data:`MEMORY` is None
    or, without ``want``, where the reading does not match ``fn``'s attributes."""
    if MEMORY is None:
        return None
    head = words(at + _FUNC_CODE, 4)
    out = list(head)
    if (want is None or head == want[:4]) and head[3]:
        cells = words(head[3] + _TUPLE_ITEMS, len(want) - 4 if want else len(fn.__closure__))
        out += [words(c + _CELL_REF, 1)[0] for c in cells]
    got = tuple(out)
    if want is not None:
        return got
    cells = []
    for c in fn.__closure__ or ():
        try:
            cells.append(id(c.cell_contents))
        except ValueError:  # an empty cell
            cells.append(0)
    ids = tuple(0 if x is None else id(x)
                for x in (fn.__code__, fn.__defaults__, fn.__kwdefaults__, fn.__closure__))
    return got if got == (*ids, *cells) else None


def builtin_words(at: int, taken: tuple[int | None, ...] | None = None
                  ) -> tuple[int, ...] | None:
    """A builtin's (a ``PyCFunctionObject`` at address ``at``) ``m_ml``, ``m_self`` and
    ``vectorcall`` pointers, then its method definition's ``ml_meth`` and the word holding
    ``ml_flags``. With ``taken`` (workers.harness ``c_parts``' reading of the same object:
    ``m_ml``, ``m_self``, ``vectorcall``, ``ml_meth``, ``ml_flags``), None unless the two
    agree. None where :data:`MEMORY` is None."""
    if MEMORY is None:
        return None
    ml, m_self = words(at + _CFUNC_M_ML, 2)
    got = (ml, m_self, words(at + _CFUNC_VECTORCALL, 1)[0], *words(ml + _ML_METH, 2))
    if taken is None:
        return got
    same = got[:4] == tuple(x or 0 for x in taken[:4]) and (
        got[4] & 0xFFFFFFFF == (taken[4] or 0) & 0xFFFFFFFF)
    return got if same else None
