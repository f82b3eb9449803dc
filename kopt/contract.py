"""The kernel contract: parse ``extern "C" void solve(...)`` out of a kernel source.

``const T*`` arguments are inputs, ``T*`` outputs, scalars are dims or
constants. The prototype is cut out of the source with a strict regex and
parsed by pycparser (with typedefs for the CUDA/stdint type names), so nobody
restates it in the spec. Kernel mode (a sweep with ``launch:``) parses a
``__global__ void NAME(...)`` prototype by the same rules.
"""

from __future__ import annotations

import ctypes
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pycparser
import pycparser.c_parser
from pycparser import c_ast

# C type name -> torch dtype name (torch.<name>, same width as the C type) and ctypes name
# of a scalar of that type (see scalar_ctype for half/bfloat16 scalars). Linux LP64: long
# and size_t are 64-bit. torch's uint16/uint32/uint64 tensors support the harness's
# allocation, copy and comparison (not all arithmetic: a reference computes in int64).
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
    "uint16_t": ("uint16", "c_uint16"),
    "uint32_t": ("uint32", "c_uint32"),
    "uint64_t": ("uint64", "c_uint64"),
    "char": ("int8", "c_byte"),
    "signed char": ("int8", "c_byte"),
    "unsigned char": ("uint8", "c_ubyte"),
    "short": ("int16", "c_short"),
    "unsigned short": ("uint16", "c_ushort"),
    "int": ("int32", "c_int"),
    "unsigned": ("uint32", "c_uint"),
    "unsigned int": ("uint32", "c_uint"),
    "long": ("int64", "c_long"),
    "unsigned long": ("uint64", "c_ulong"),
    "long long": ("int64", "c_longlong"),
    "unsigned long long": ("uint64", "c_ulonglong"),
    "size_t": ("uint64", "c_size_t"),
    "bool": ("bool", "c_bool"),
    "_Bool": ("bool", "c_bool"),
}
# largest finite value of each floating dtype (IEEE binary32/16, bfloat16)
_FLOAT_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0,
              "bfloat16": 3.3895313892515355e38, "float64": float("inf")}
_TYPEDEF_PRELUDE = "".join(
    f"typedef int {t};\n" for t in
    ["half", "__half", "__nv_bfloat16", "bfloat16", "nv_bfloat16", "int8_t", "int16_t",
     "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "bool"])
_C_WORDS = {"signed", "unsigned", "char", "short", "int", "long"}


def supported_types() -> str:
    """The C types a contract argument may have, comma-separated (for messages)."""
    return ", ".join(sorted(C_TYPES))


def scalar_range(ctype: str) -> tuple[float, float, bool]:
    """``(lo, hi, integral)``: the values a scalar of C type ``ctype`` can hold.

    Integers (and bool): the type's exact range (``unsigned``: 0 .. 2**32 - 1);
    floating types: +-their largest finite value (``half``: 65504), infinity allowed.

    Raises:
        KeyError: ``ctype`` is not in C_TYPES.
    """
    dtype, cname = C_TYPES[ctype]
    if dtype in _FLOAT_MAX:
        return -_FLOAT_MAX[dtype], _FLOAT_MAX[dtype], False
    if dtype == "bool":
        return 0, 1, True
    bits = 8 * ctypes.sizeof(getattr(ctypes, cname))
    if dtype.startswith("uint"):
        return 0, 2**bits - 1, True
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, True


def half_bits(value: float) -> int:
    """The IEEE binary16 bit pattern of ``value`` (round to nearest even).

    Raises:
        OverflowError: ``value`` is finite but beyond +-65504 (kopt.spec refuses those).
    """
    return struct.unpack("<H", struct.pack("<e", value))[0]


def bfloat16_bits(value: float) -> int:
    """The bfloat16 bit pattern of ``value``: the float32 rounded to nearest even in its top
    16 bits (torch's conversion), NaN as the quiet NaN 0x7FC0."""
    if math.isnan(value):
        return 0x7FC0
    f32 = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((f32 + 0x7FFF + ((f32 >> 16) & 1)) >> 16) & 0xFFFF


def _converting(name: str, base: Any, convert: Any, doc: str) -> Any:
    """A ctypes ``base`` subclass whose constructor and ``from_param`` (the argtypes hook)
    take a Python float and store ``convert(value)``."""
    def __init__(self: Any, value: float = 0.0) -> None:
        base.__init__(self, convert(float(value)))

    def from_param(cls: Any, value: Any) -> Any:
        return value if isinstance(value, cls) else cls(value)

    return type(name, (base,), {"__init__": __init__, "from_param": classmethod(from_param),
                                "__doc__": doc, "__module__": __name__})


Half16 = _converting(
    "Half16", ctypes.c_uint16, half_bits,
    "A ``half``/``__half`` scalar in an integer register (CUDA's ``__half`` is a struct of "
    "one ``unsigned short``): takes a Python float, holds its binary16 bits.")
BFloat16Bits = _converting(
    "BFloat16Bits", ctypes.c_uint16, bfloat16_bits,
    "A bfloat16 scalar in an integer register (CUDA's ``__nv_bfloat16`` struct, or a CPU "
    "source's ``typedef uint16_t bfloat16``): takes a Python float, holds its bf16 bits.")
Float16Reg = _converting(
    "Float16Reg", ctypes.c_double,
    lambda v: struct.unpack("<d", struct.pack("<Q", half_bits(v)))[0],
    "A ``_Float16`` scalar (CPU backend: ``typedef _Float16 half;``), which the x86-64 and "
    "AArch64 ABIs pass in a floating-point register: a double whose low 16 bits are the "
    "binary16 bits, so that the callee reads exactly the half value.")


def scalar_ctype(ctype: str, backend: str) -> Any:
    """The ctypes type that passes a scalar of C type ``ctype`` to ``solve`` (or, in kernel
    mode, packs it as a kernel parameter) built for ``backend`` (``"cuda"`` or ``"cpu"``).

    Every type accepts the Python number the harness holds (``workers.harness._scalar``):
    half/bfloat16 ones convert a float to its 16-bit pattern (:class:`Half16`,
    :class:`BFloat16Bits`; on the CPU backend ``half`` is ``_Float16``, passed in a floating
    register: :class:`Float16Reg`).

    Raises:
        KeyError: ``ctype`` is not in C_TYPES.
    """
    dtype, cname = C_TYPES[ctype]
    if dtype == "float16":
        return Float16Reg if backend == "cpu" else Half16
    if dtype == "bfloat16":
        return BFloat16Bits
    return getattr(ctypes, cname)


_SOLVE_RE = re.compile(
    r'extern\s+"C"\s*(?:__host__\s+)?(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+solve\s*\(([^)]*)\)',
    re.S)
# one level of nested parentheses, e.g. __launch_bounds__((BX) * (BY))
_PARENS = r"\((?:[^()]|\([^()]*\))*\)"
_GLOBAL_RE = re.compile(
    r'(template\s*<[^>]*>\s*)?(?:extern\s+"C"\s*)?(?:static\s+)?__global__\s+'
    r"(?:__launch_bounds__\s*" + _PARENS + r"\s*)?void\s+"
    r"(?:__launch_bounds__\s*" + _PARENS + r"\s*)?(\w+)\s*\(([^)]*)\)", re.S)
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
    """The parsed prototype of ``solve`` (or, in kernel mode, of the ``__global__`` kernel
    ``name``): its arguments in order."""

    args: tuple[Arg, ...]
    name: str = "solve"

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
        prefix = "" if self.name == "solve" else "__global__ void "
        return f"{prefix}{self.name}({', '.join(parts)})"


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
        hint = ""
        kernels = sorted({m.group(2) for m in _GLOBAL_RE.finditer(_strip_comments(source))})
        if kernels:
            hint = (f"; or, for kernel mode, give the __global__ kernel ({', '.join(kernels)}) "
                    "and its launch geometry in sweep.yaml `launch:` (see docs/spec.md)")
        raise ContractError(
            f'{filename}: no `extern "C" void solve(...)` found; the kernel file must export '
            'a host function `extern "C" void solve(const T* in, ..., T* out, ..., int N)`'
            + hint)
    protos = {re.sub(r"\s+", " ", f.strip()) for f in found}
    if len(protos) > 1:
        raise ContractError(f"{filename}: several different `solve` prototypes: {sorted(protos)}")
    return Signature(_parse_args(found[0], "solve", filename))


def parse_kernel_signature(source: str, kernel: str, filename: str = "<source>") -> Signature:
    """Parse the prototype of the ``__global__ void <kernel>(...)`` of a kernel-mode source.

    Same rules as :func:`parse_signature`: ``const T*`` inputs, ``T*`` outputs,
    scalars are dims or constants. ``__launch_bounds__``, ``extern "C"`` and
    ``static`` are allowed; the same prototype may be defined in several
    ``#if`` branches.

    Args:
        source: the kernel file's text.
        kernel: the kernel's name (``launch.kernel`` in sweep.yaml).
        filename: used in error messages.

    Returns:
        The Signature (``name`` = ``kernel``), arguments in declaration order.

    Raises:
        ContractError: no such ``__global__`` kernel (the message lists those found),
            different prototypes of it, a template kernel, an unnamed argument, a
            pointer-to-pointer, or an unsupported type.
    """
    matches = list(_GLOBAL_RE.finditer(_strip_comments(source)))
    mine = [m for m in matches if m.group(2) == kernel]
    if not mine:
        found = sorted({m.group(2) for m in matches})
        raise ContractError(
            f"{filename}: no `__global__ void {kernel}(...)` found (__global__ kernels in the "
            f"file: {', '.join(found) if found else 'none'})")
    if any(m.group(1) for m in mine):
        raise ContractError(f"{filename}: __global__ {kernel} is a template; kernel mode "
                            "launches plain kernels: make the template parameters -D defines")
    protos = {re.sub(r"\s+", " ", m.group(3).strip()) for m in mine}
    if len(protos) > 1:
        raise ContractError(f"{filename}: several different prototypes of __global__ {kernel}: "
                            f"{sorted(protos)}")
    return Signature(_parse_args(mine[0].group(3), kernel, filename), name=kernel)


def _parse_args(params_text: str, fname: str, filename: str) -> tuple[Arg, ...]:
    params = _STRIP.sub(" ", params_text)
    try:
        ast = pycparser.CParser().parse(_TYPEDEF_PRELUDE + f"void {fname}({params});", filename)
    except pycparser.c_parser.ParseError as e:
        which = _unknown_type_arg(params, fname, filename)
        what = (f"{fname}{which} has a type kopt does not know" if which
                else f"cannot parse the {fname} prototype `{fname}({params_text.strip()})`: {e}")
        raise ContractError(f"{filename}: {what}; argument types must be one of: "
                            f"{supported_types()}") from None
    decl = ast.ext[-1]
    plist = decl.type.args.params if decl.type.args else []
    args: list[Arg] = []
    for p in plist:
        if isinstance(p, c_ast.Typename):  # (void) or an unnamed arg
            if isinstance(p.type, c_ast.TypeDecl) and _type_name(p.type) == "void":
                continue
            raise ContractError(f"{filename}: every {fname} argument needs a name")
        args.append(_arg(p, filename, fname))
    return tuple(args)


def parse_signature_file(path: str | Path, kernel: str | None = None) -> Signature:
    """Read ``path`` and parse its ``solve`` prototype (see parse_signature), or with
    ``kernel`` the prototype of that ``__global__`` kernel (see parse_kernel_signature).

    Raises:
        ContractError: as those functions; OSError when the file cannot be read.
    """
    p = Path(path)
    if kernel is not None:
        return parse_kernel_signature(p.read_text(), kernel, str(p))
    return parse_signature(p.read_text(), str(p))


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def _type_name(t: c_ast.TypeDecl, where: str) -> str:
    """The C type name of a declaration's base type, integer spellings made canonical
    (``long int`` -> ``long``, ``unsigned`` -> ``unsigned int``, ``signed`` -> ``int``).
    ``where`` (``k.cu: solve argument 'p'``) starts the error of a struct, union or enum."""
    inner = t.type
    if not isinstance(inner, c_ast.IdentifierType):
        kind = type(inner).__name__.lower()  # struct, union, enum
        name = getattr(inner, "name", None) or "(anonymous)"
        article = "an" if kind == "enum" else "a"
        raise ContractError(f"{where} is {article} {kind} {name}; pass plain buffers and "
                            f"scalars of the supported types: {supported_types()}")
    names = list(inner.names)
    if not set(names) <= _C_WORDS:
        return " ".join(names)
    sign = "unsigned " if "unsigned" in names else ""
    base = [w for w in names if w not in ("signed", "unsigned", "int")]
    if base == ["char"] and "signed" in names:
        return "signed char"
    text = " ".join(base) or "int"
    return sign + text if text != "int" or sign else "int"


def _arg(p: c_ast.Decl, filename: str, fname: str = "solve") -> Arg:
    where = f"{filename}: {fname} argument {p.name!r}"
    t = p.type
    if isinstance(t, c_ast.PtrDecl):
        inner = t.type
        if not isinstance(inner, c_ast.TypeDecl):
            raise ContractError(f"{where}: pointers to pointers or arrays are not supported; "
                                "pass flat device buffers")
        cname = _type_name(inner, where)
        kind = "input" if "const" in (inner.quals or []) else "output"
    elif isinstance(t, c_ast.TypeDecl):
        cname = _type_name(t, where)
        kind = "scalar"
    else:
        raise ContractError(f"{where} has an unsupported declarator (an array or a function); "
                            "pass a pointer")
    if cname not in C_TYPES:
        raise ContractError(f"{where} has type {cname!r}; supported: {supported_types()}")
    return Arg(name=p.name, ctype=cname, kind=kind, dtype=C_TYPES[cname][0])


def _unknown_type_arg(params: str, fname: str, filename: str) -> str:
    """``" argument 'p' (`Pair* p`)"`` for the first argument that does not parse alone (a
    type name pycparser does not know), else ``""``."""
    parser = pycparser.CParser()
    for part in params.split(","):
        try:
            parser.parse(_TYPEDEF_PRELUDE + f"void {fname}({part});", filename)
        except pycparser.c_parser.ParseError:
            words = re.findall(r"\w+", part)
            name = f" {words[-1]!r}" if words else ""
            return f" argument{name} (`{' '.join(part.split())}`)"
    return ""
