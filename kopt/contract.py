"""The kernel contract: parse ``extern "C" void solve(...)`` out of a kernel source.

``const T*`` arguments are inputs, ``T*`` outputs, scalars are dims or
constants. The prototype is cut out of the source with a strict regex and
parsed by pycparser (with typedefs for the CUDA/stdint type names), so nobody
restates it in the spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pycparser
import pycparser.c_parser
from pycparser import c_ast

# C type name -> torch dtype name (torch.<name>) and ctypes name.
C_TYPES: dict[str, tuple[str, str]] = {
    "float": ("float32", "c_float"),
    "double": ("float64", "c_double"),
    "half": ("float16", "c_uint16"),
    "__half": ("float16", "c_uint16"),
    "__nv_bfloat16": ("bfloat16", "c_uint16"),
    "bfloat16": ("bfloat16", "c_uint16"),
    "nv_bfloat16": ("bfloat16", "c_uint16"),
    "int8_t": ("int8", "c_int8"),
    "int16_t": ("int16", "c_int16"),
    "int32_t": ("int32", "c_int32"),
    "int64_t": ("int64", "c_int64"),
    "uint8_t": ("uint8", "c_uint8"),
    "char": ("int8", "c_char"),
    "signed char": ("int8", "c_byte"),
    "unsigned char": ("uint8", "c_ubyte"),
    "short": ("int16", "c_short"),
    "int": ("int32", "c_int"),
    "unsigned": ("int64", "c_uint"),
    "unsigned int": ("int64", "c_uint"),
    "long": ("int64", "c_long"),
    "long long": ("int64", "c_longlong"),
    "unsigned long": ("int64", "c_ulong"),
    "unsigned long long": ("int64", "c_ulonglong"),
    "size_t": ("int64", "c_size_t"),
    "bool": ("bool", "c_bool"),
    "_Bool": ("bool", "c_bool"),
}
_TYPEDEF_PRELUDE = "".join(
    f"typedef int {t};\n" for t in
    ["half", "__half", "__nv_bfloat16", "bfloat16", "nv_bfloat16", "int8_t", "int16_t",
     "int32_t", "int64_t", "uint8_t", "size_t", "bool"])

_SOLVE_RE = re.compile(
    r'extern\s+"C"\s*(?:__host__\s+)?(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+solve\s*\(([^)]*)\)',
    re.S)
_STRIP = re.compile(r"\b(__restrict__|__restrict|restrict|__host__|__device__|volatile)\b")


class ContractError(ValueError):
    """The kernel source breaks the ``solve`` contract (message names the file)."""


@dataclass(frozen=True)
class Arg:
    """One ``solve`` argument.

    Attributes:
        name: the argument name.
        ctype: the C type name without qualifiers and pointer, e.g. ``"float"``.
        kind: ``"input"`` (``const T*``), ``"output"`` (``T*``) or ``"scalar"``.
        dtype: torch dtype name for the pointee or scalar, e.g. ``"float32"``.
    """

    name: str
    ctype: str
    kind: str
    dtype: str

    @property
    def is_pointer(self) -> bool:
        return self.kind != "scalar"


@dataclass(frozen=True)
class Signature:
    """The parsed prototype of ``solve``: its arguments in order."""

    args: tuple[Arg, ...]

    @property
    def inputs(self) -> list[Arg]:
        return [a for a in self.args if a.kind == "input"]

    @property
    def outputs(self) -> list[Arg]:
        return [a for a in self.args if a.kind == "output"]

    @property
    def scalars(self) -> list[Arg]:
        return [a for a in self.args if a.kind == "scalar"]

    def describe(self) -> str:
        """C-like one-line rendering, e.g. ``solve(const float* x, float* out, int N)``."""
        parts = []
        for a in self.args:
            if a.kind == "input":
                parts.append(f"const {a.ctype}* {a.name}")
            elif a.kind == "output":
                parts.append(f"{a.ctype}* {a.name}")
            else:
                parts.append(f"{a.ctype} {a.name}")
        return f"solve({', '.join(parts)})"


def parse_signature(source: str, filename: str = "<source>") -> Signature:
    """Parse the ``extern "C" void solve(...)`` prototype of a kernel source.

    Args:
        source: the kernel file's text.
        filename: used in error messages.

    Returns:
        The Signature, arguments in declaration order.

    Raises:
        ContractError: no or several ``solve`` definitions, an unnamed argument,
            a pointer-to-pointer, or an unsupported type.
    """
    found = _SOLVE_RE.findall(_strip_comments(source))
    if not found:
        raise ContractError(
            f'{filename}: no `extern "C" void solve(...)` found; the kernel file must export '
            'a host function `extern "C" void solve(const T* in, ..., T* out, ..., int N)`')
    protos = {re.sub(r"\s+", " ", f.strip()) for f in found}
    if len(protos) > 1:
        raise ContractError(f"{filename}: several different `solve` prototypes: {sorted(protos)}")
    params = _STRIP.sub(" ", found[0])
    try:
        ast = pycparser.CParser().parse(_TYPEDEF_PRELUDE + f"void solve({params});", filename)
    except pycparser.c_parser.ParseError as e:
        raise ContractError(
            f"{filename}: cannot parse the solve prototype `solve({found[0].strip()})`: {e}; "
            f"argument types must be one of: {', '.join(sorted(C_TYPES))}") from None
    decl = ast.ext[-1]
    plist = decl.type.args.params if decl.type.args else []
    args: list[Arg] = []
    for p in plist:
        if isinstance(p, c_ast.Typename):  # (void) or an unnamed arg
            if isinstance(p.type, c_ast.TypeDecl) and _type_name(p.type) == "void":
                continue
            raise ContractError(f"{filename}: every solve argument needs a name")
        args.append(_arg(p, filename))
    return Signature(tuple(args))


def parse_signature_file(path: str | Path) -> Signature:
    """Read ``path`` and parse its ``solve`` prototype (see parse_signature)."""
    p = Path(path)
    return parse_signature(p.read_text(), str(p))


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def _type_name(t: c_ast.TypeDecl) -> str:
    inner = t.type
    if isinstance(inner, c_ast.IdentifierType):
        return " ".join(inner.names)
    raise ContractError(f"unsupported type node {type(inner).__name__}")


def _arg(p: c_ast.Decl, filename: str) -> Arg:
    t = p.type
    if isinstance(t, c_ast.PtrDecl):
        inner = t.type
        if not isinstance(inner, c_ast.TypeDecl):
            raise ContractError(f"{filename}: solve argument {p.name!r}: pointers to pointers "
                                "or arrays are not supported; pass flat device buffers")
        cname = _type_name(inner)
        kind = "input" if "const" in (inner.quals or []) else "output"
    elif isinstance(t, c_ast.TypeDecl):
        cname = _type_name(t)
        kind = "scalar"
    else:
        raise ContractError(f"{filename}: solve argument {p.name!r} has an unsupported declarator")
    cname = cname.replace("signed int", "int") if cname != "unsigned int" else cname
    if cname not in C_TYPES:
        raise ContractError(
            f"{filename}: solve argument {p.name!r} has type {cname!r}; supported: "
            + ", ".join(sorted(C_TYPES)))
    return Arg(name=p.name, ctype=cname, kind=kind, dtype=C_TYPES[cname][0])
