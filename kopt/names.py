"""Names and values that reach the compiler as ``-DNAME=VALUE``.

Every launch param, method param and method define of a sweep is passed to the compiler as
a macro, so its name rewrites that identifier in the kernel and in every header the
compiler reads (the standard, CUDA and NVRTC ones too). :func:`reserved` says why a name
would break every build (a keyword, a reserved or predefined macro name, the entry point,
kopt's own names).

Stdlib and the node side's ``workers`` modules only (kopt.spec imports this module).
"""

from __future__ import annotations

import re

from workers.ctypes_map import C_TYPES

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
