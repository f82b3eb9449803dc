"""Names and values that reach the compiler as ``-DNAME=VALUE``.

Every launch param, method param and method define of a sweep is passed to the compiler as
a macro, so its name rewrites that identifier in the kernel and in every header the
compiler reads (the standard, CUDA and NVRTC ones too). :func:`reserved` says why a name
would break every build (a keyword, a reserved or predefined macro name, the entry point,
kopt's own names); :func:`notes` gives the ``note:`` lines for what loads and runs but
cannot be what the author meant: a name no source file reads, a value that is no number,
launch configs a restriction cannot evaluate.

Stdlib and the node side's ``workers`` modules only (kopt.core.spec imports this module).
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopt.util.words import counted
from workers import deps
from workers.ctypes_map import C_TYPES
from workers.expr import ExprError, parse

if TYPE_CHECKING:
    from kopt.core.catalog import Catalog
    from kopt.core.spec import Space

# C++20 keywords: [lex.key], table 5 (ISO/IEC 14882:2020)
CXX_KEYWORDS = frozenset("""
    alignas alignof asm auto bool break case catch char char8_t char16_t char32_t class
    concept const consteval constexpr constinit const_cast continue co_await co_return
    co_yield decltype default delete do double dynamic_cast else enum explicit export extern
    false float for friend goto if inline int long mutable namespace new noexcept nullptr
    operator private protected public register reinterpret_cast requires return short signed
    sizeof static static_assert static_cast struct switch template this thread_local throw
    true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
""".split())
# the alternative representations of operators, [lex.key]/2, table 6 ([lex.digraph])
CXX_ALTERNATIVE_TOKENS = frozenset(
    "and and_eq bitand bitor compl not not_eq or or_eq xor xor_eq".split())
# identifiers with special meaning, [lex.name], table 4
CXX_SPECIAL_IDENTIFIERS = frozenset("final import module override".split())
# C keywords that are not C++ ones (C17 6.4.1; C23 adds typeof, typeof_unqual); the
# _Upper ones are also reserved names (see RESERVED_WHY)
C_KEYWORDS = frozenset("""
    restrict typeof typeof_unqual _Alignas _Alignof _Atomic _BitInt _Bool _Complex
    _Decimal32 _Decimal64 _Decimal128 _Generic _Imaginary _Noreturn _Static_assert
    _Thread_local
""".split())
# the preprocessor's own names: `defined` ([cpp.cond]/1) and the variadic-macro names
# ([cpp.replace]/5; these two are reserved names as well)
PREPROCESSOR_NAMES = frozenset({"defined", "__VA_ARGS__", "__VA_OPT__"})
# macros compilers predefine without a leading underscore (GCC and Clang in GNU modes:
# `linux`, `unix`, `i386`) and ones the C/C++ and CUDA headers every build reads define
PREDEFINED_MACROS = frozenset("""
    linux unix i386 NULL EOF assert errno offsetof stdin stdout stderr CHAR_BIT INT_MAX
    INT_MIN UINT_MAX LONG_MAX LONG_MIN SIZE_MAX FLT_MAX DBL_MAX INFINITY NAN RAND_MAX
    EXIT_SUCCESS EXIT_FAILURE CUDA_VERSION CUDART_VERSION
""".split())
# CUDA's built-in variables (CUDA C++ Programming Guide, "Built-in Variables") and the
# C++ standard library's namespace
CUDA_BUILTINS = frozenset("gridDim blockIdx blockDim threadIdx warpSize dim3".split())
# the type names of the kernel contract (workers.ctypes_map), one word each
CONTRACT_TYPES = frozenset(w for t in C_TYPES for w in t.split()) - CXX_KEYWORDS
# kopt's own names: `kopt export` writes KOPT_* macros, the CUDA builds' pre-included shim
# (workers/kopt_shim.h) defines kopt_* functions
KOPT_PREFIXES = ("KOPT_", "kopt_")
ENTRY_POINT = "solve"
_RESERVED_FORM = re.compile(r"__|_[A-Z]")


def reserved(name: str, entry: str = ENTRY_POINT) -> str | None:
    """Why a macro named ``name`` would break every build, as a phrase ("a C++ keyword
    ([lex.key])"), or None when the name is free.

    Args:
        name: a param's or define's name (a C identifier).
        entry: the space's entry point: ``solve``, or kernel mode's ``__global__`` kernel.

    The names refused: C++20 keywords ([lex.key] table 5), the alternative operator tokens
    ([lex.key]/2, table 6), identifiers with special meaning ([lex.name] table 4), C
    keywords that C++ lacks (C17 6.4.1 and C23: ``restrict``, ``_Bool``, ``typeof`` ...),
    the preprocessor's ``defined``, names reserved to the implementation (beginning with
    ``__`` or ``_`` and an upper-case letter: C17 7.1.3, C++ [lex.name]/3; every compiler
    macro such as ``__cplusplus``, ``__CUDACC__`` or ``_OPENMP`` has that form), macros
    compilers or standard and CUDA headers define (``linux``, ``unix``, ``NULL``,
    ``assert``, ``CUDA_VERSION`` ...), CUDA's built-in variables, the contract's type names
    (``half``, ``size_t`` ...), ``std``, the entry point (``solve``, the kernel's name)
    and kopt's own prefixes (``KOPT_``, ``kopt_``).
    """
    if name in CXX_KEYWORDS:
        return "a C++ keyword ([lex.key])"
    if name in CXX_ALTERNATIVE_TOKENS:
        return "a C++ operator keyword ([lex.key]/2: `and`, `or`, `not` ...)"
    if name in CXX_SPECIAL_IDENTIFIERS:
        return "a C++ identifier with special meaning ([lex.name]: final, import, module, override)"
    if name in C_KEYWORDS:
        return "a C keyword (C17 6.4.1, C23)"
    if name in PREPROCESSOR_NAMES:
        return "a name of the preprocessor itself (`#if defined(X)`)"
    if _RESERVED_FORM.match(name):
        return ("reserved to the compiler: names beginning with __ or with _ and an "
                "upper-case letter are its own (C17 7.1.3, C++ [lex.name]), as __cplusplus, "
                "__CUDACC__ and _OPENMP are")
    if name in PREDEFINED_MACROS:
        return "a macro the compiler or the standard and CUDA headers already define"
    if name in CUDA_BUILTINS:
        return "a CUDA built-in (threadIdx, blockDim, warpSize ...)"
    if name in CONTRACT_TYPES or name == "std":
        return "a type or namespace name the kernel and its headers use"
    if name in (ENTRY_POINT, entry):
        return "the kernel's entry point, which kopt calls by that name"
    if name.startswith(KOPT_PREFIXES):
        return ("kopt's own prefix (kopt export writes KOPT_* macros; CUDA builds pre-include "
                "kopt_* functions)")
    return None


def free_name(name: str, taken: set[str], entry: str = ENTRY_POINT) -> str:
    """A name to suggest instead of ``name``: upper-cased, without leading underscores or a
    ``KOPT_`` prefix (``int`` -> ``INT``, ``__cplusplus`` -> ``CPLUSPLUS``), else prefixed
    with ``P_``; one that :func:`reserved` accepts and ``taken`` does not hold."""
    stem = re.sub(r"^(kopt_)+", "", name.lstrip("_"), flags=re.I).upper() or "P"
    for cand in (stem, f"P_{stem}", f"P_{stem}_1"):
        if cand not in taken and reserved(cand, entry) is None:
            return cand
    return f"P_{stem}_X"


# C comments and string / character literals, matched together so that `"http://"` holds
# no comment and `// "x` no literal; neither is a place a macro is expanded
_COMMENT_OR_LITERAL = re.compile(
    r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")


def _tokens(text: str) -> set[str]:
    """The identifiers of a C/C++ source text outside its comments and string literals."""
    return set(_IDENT.findall(_COMMENT_OR_LITERAL.sub(" ", text)))


def unread(space: Space, names: set[str]) -> set[str]:
    """The members of ``names`` that neither the kernel source nor any local header it
    includes (recursively, as the build key finds them: workers.deps.include_closure) has
    as an identifier outside comments and string literals, nor (kernel mode) the launch
    geometry names.
    Headers are read only while some name is still unfound; an unreadable header counts
    as reading everything (no note rather than a wrong one)."""
    text = space.source_text()
    left = set(names) - _tokens(text) - _launch_names(space)
    if not left:
        return left
    for path in deps.include_closure(text, space.source.parent,
                                     [str(space.source.parent), *space.include_dirs]):
        try:
            left -= _tokens(Path(path).read_text(errors="replace"))
        except OSError:
            return set()
        if not left:
            break
    return left


def _launch_names(space: Space) -> set[str]:
    """Every name kernel mode's launch geometry uses (its derived names inlined)."""
    if space.launch is None:
        return set()
    out: set[str] = set()
    for e in [*space.launch.block, *space.launch.grid, space.launch.smem_bytes]:
        if isinstance(e, str):
            try:
                out |= parse(e).names
            except ExprError:
                continue
    return out


def _fields(space: Space, prefix: str) -> list[tuple[str, str, list[Any], str]]:
    """(field, name, values, what) of every macro the space passes: its launch params,
    method params and method defines."""
    out = [(f"{prefix}params.{k}", k, list(v), "param") for k, v in space.params.items()]
    for mid, real in space.methods.items():
        out += [(f"{prefix}methods.{mid}.params.{k}", k, list(v), "method param")
                for k, v in real.params.items()]
        out += [(f"{prefix}methods.{mid}.defines.{k}", k, [v], "define")
                for k, v in real.defines.items()]
    return out


def unread_notes(space: Space, prefix: str = "") -> list[str]:
    """One line per param, method param or method define that no source file of the space
    reads (:func:`unread`): each of its values is a candidate of its own whose build is the
    same code, e.g. ``params.NT: no source file of this sweep reads 'NT' (k.cpp and the
    local headers it includes, comments aside): its 3 values make 3x the candidates, the
    same build each; use NT in the kernel or drop it``."""
    fields = _fields(space, prefix)
    missing = unread(space, {k for _, k, _, _ in fields})
    out = []
    where = f"{space.source.name} and the local headers it includes, comments and strings aside"
    if space.launch is not None:
        where += ", nor `launch:`"
    for field, k, values, what in fields:
        if k not in missing:
            continue
        if what == "define":
            effect = "the method's candidates build the same code as without it"
        elif len(values) > 1:
            effect = (f"its {counted(len(values), 'value')} make {len(values)}x the "
                      "candidates, the same build each")
        else:
            effect = "it changes nothing in the build"
        out.append(f"{field}: no source file of this sweep reads {k!r} ({where}): {effect}; "
                   f"use {k} in the kernel or drop the {what}")
    return out


# a C integer or floating literal (an optional sign; digit separators, suffixes)
_NUMBER = re.compile(r"[+-]?(0[xX][0-9a-fA-F']+|0[bB][01']+|(\d[\d']*\.?[\d']*|\.\d[\d']*)"
                     r"([eE][+-]?\d+)?)[uUlLfFzZ]*")


def text_value_notes(space: Space, prefix: str = "") -> list[str]:
    """One line per param, method param or method define with values that are text, not
    numbers (``NT: [1, two]``): kopt passes each value as it is, as ``-D`` text
    (``-DNT=two``), which is right only for a macro the kernel expands as code (a type
    name, say); the line names the field and those values. A string that is a C number
    (``"4"``, ``"0x10"``, ``"1.5f"``) gets none."""
    out = []
    for field, k, values, _ in _fields(space, prefix):
        texts = [v for v in values if isinstance(v, str) and not _NUMBER.fullmatch(v.strip())]
        if not texts:
            continue
        shown = ", ".join(repr(v) for v in texts)
        verb = "is not a number" if len(texts) == 1 else "are not numbers"
        out.append(f"{field}: {shown} {verb}; kopt passes it as-is, as -D text (-D{k}="
                   f"{texts[0]}): if you meant a number, write it as one; text is right only "
                   f"for a macro the kernel expands as code (a type name, say)")
    return out


# Most restriction evaluations the zero-division check of one space may take
ZERO_DIVISION_BUDGET = 200_000
_DIVIDES = re.compile(r"/|%|\*\*")


def zero_division_notes(space: Space, catalog: Catalog, prefix: str = "") -> list[str]:
    """One line per restriction that divides by zero (``ZeroDivisionError``: ``/``, ``//``,
    ``%`` by 0, or ``0 ** -1``) for launch configs that every other restriction admits,
    which expansion then drops without a row: the restriction, how many launch configs of
    how many, the first problem size where it happens and one example, e.g.
    ``restrictions[0] ('N // (ITEMS - 1) > 4') divides by zero for 4 of 8 launch configs at
    the problem size {'N': 1024} (e.g. {'ITEMS': 1}) ...``.

    The spaces checked are the baseline code's (the launch params) and each realized
    method's with the methods it requires (their params and defines added); a restriction
    is named once, for the first of them. Counts are of launch configs of that space at
    that problem size. Nothing is said once the check would take more than
    ZERO_DIVISION_BUDGET evaluations, or for a restriction that cannot be evaluated
    otherwise (expansion reports that as an error).
    """
    texts = [space.resolve(r) for r in space.restrictions]
    if not any(_DIVIDES.search(t) for t in texts):
        return []
    exprs = [parse(t) for t in texts]
    divides = [e for e, t in zip(exprs, texts) if _DIVIDES.search(t)]
    budget = [ZERO_DIVISION_BUDGET]
    said: dict[int, str] = {}
    for label, pspace, mdefines in _groups(space, catalog, prefix):
        for dims in space.dims:
            env = {**dims, **mdefines}
            try:
                if not any(_may_divide_by_zero(e, pspace, env, budget) for e in divides):
                    continue
                found = _zero_divisions(exprs, pspace, env, budget)
            except (ExprError, _OverBudget):
                return list(said.values())
            for j, (n, example) in found.items():
                if j in said:
                    continue
                total = math.prod(len(v) for v in pspace.values())
                said[j] = (f"{prefix}restrictions[{j}] ({space.restrictions[j]!r}) divides by "
                           f"zero for {n} of {counted(total, 'launch config')}{label} at the "
                           f"problem size {dims} (e.g. {example}); expansion drops them there "
                           "without a row: if they should run, guard the division "
                           "(`D == 0 or ...`, D its divisor); if not, exclude them by a "
                           "restriction of their own (`D != 0`)")
    return [said[j] for j in sorted(said)]


class _OverBudget(Exception):
    """The zero-division check would exceed ZERO_DIVISION_BUDGET evaluations."""


def _groups(space: Space, catalog: Catalog, prefix: str
            ) -> list[tuple[str, dict[str, list[Any]], dict[str, Any]]]:
    """(label, params -> values, method defines) of the baseline code's space and of each
    realized method's (with the realized methods it requires), as expansion combines
    them."""
    out: list[tuple[str, dict[str, list[Any]], dict[str, Any]]] = [
        ("", dict(space.params), {})]
    for mid in space.methods:
        group = [m for m in catalog.methods[mid].requires if m in space.methods] + [mid]
        pspace, mdefines = dict(space.params), {}
        for m in group:
            pspace.update(space.methods[m].params)
            mdefines.update(space.methods[m].defines)
        out.append((f" of {prefix}methods.{mid}'s candidates", pspace, mdefines))
    return out


def _may_divide_by_zero(expr: Any, pspace: dict[str, list[Any]], env: dict[str, Any],
                        budget: list[int]) -> bool:
    """Whether restriction ``expr``, if it applies with ``env`` (dims and method defines),
    divides by zero for some values of the params it names (the others not consulted): the
    cheap test before :func:`_zero_divisions`.

    Raises:
        ExprError, _OverBudget: as :func:`_zero_divisions`.
    """
    if not expr.names <= env.keys() | pspace.keys():
        return False
    names = sorted(expr.names & pspace.keys())
    budget[0] -= math.prod(len(pspace[n]) for n in names)
    if budget[0] < 0:
        raise _OverBudget
    for values in itertools.product(*(pspace[n] for n in names)):
        try:
            expr({**env, **dict(zip(names, values))})
        except ZeroDivisionError:
            return True
    return False


def _zero_divisions(exprs: list[Any], pspace: dict[str, list[Any]], env: dict[str, Any],
                    budget: list[int]) -> dict[int, tuple[int, dict[str, Any]]]:
    """Restriction index -> (launch configs of ``pspace`` it alone drops by dividing by
    zero, one example as {name: value} over its own names), for the restrictions that apply
    with ``env`` (dims and method defines). A config another restriction rejects is not
    counted.

    Raises:
        ExprError: a restriction cannot be evaluated for some config.
        _OverBudget: the budget (a one-element list, decremented) ran out.
    """
    have = env.keys() | pspace.keys()
    rs = [(j, e) for j, e in enumerate(exprs) if e.names <= have]
    names = sorted({n for _, e in rs for n in e.names} & pspace.keys())
    size = math.prod(len(pspace[n]) for n in names)
    budget[0] -= size * max(len(rs), 1)
    if budget[0] < 0:
        raise _OverBudget
    rest = math.prod(len(v) for k, v in pspace.items() if k not in names)
    found: dict[int, tuple[int, dict[str, Any]]] = {}
    for values in itertools.product(*(pspace[n] for n in names)):
        full = {**env, **dict(zip(names, values))}
        first, rejected = None, False
        for j, e in rs:
            try:
                if not e(full):
                    rejected = True
                    break
            except ZeroDivisionError:
                first = j if first is None else first
        if first is None or rejected:
            continue
        n, example = found.get(first, (0, None))
        found[first] = (n + rest, example or {k: full[k] for k in sorted(exprs[first].names)
                                               if k in pspace})
    return found
