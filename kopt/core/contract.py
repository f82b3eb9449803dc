"""The kernel contract: parse ``extern "C" void solve(...)`` out of a kernel source.

``const T*`` arguments are inputs, ``T*`` outputs, scalars are dims or
constants. The prototype is cut out of the source with a strict regex and
parsed by pycparser (with typedefs for the CUDA/stdint type names), so nobody
restates it in the spec. Kernel mode (a sweep with ``launch:``) parses a
``__global__ void NAME(...)`` prototype by the same rules.
"""

from __future__ import annotations

import io
import re
import stat
import tokenize
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pycparser
import pycparser.c_parser
from pycparser import c_ast

# The C type table and scalar ctypes live on the node side (workers.ctypes_map, which a
# sandbox imports without pycparser); re-exported here under their old names.
from workers.ctypes_map import (  # noqa: F401
    C_TYPES,
    BFloat16Bits,
    Float16Reg,
    Half16,
    bfloat16_bits,
    half_bits,
    scalar_ctype,
    scalar_range,
    supported_types,
)

_TYPEDEF_PRELUDE = "".join(
    f"typedef int {t};\n" for t in
    ["half", "__half", "__nv_bfloat16", "bfloat16", "nv_bfloat16", "int8_t", "int16_t",
     "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "bool"])
_C_WORDS = {"signed", "unsigned", "char", "short", "int", "long"}
# one level of nested parentheses, e.g. __launch_bounds__((BX) * (BY))
_PARENS = r"\((?:[^()]|\([^()]*\))*\)"
# the arguments may hold parentheses: `int N __attribute__((unused))`, `int N = (1 << 4)`
_SOLVE_RE = re.compile(
    r'extern\s+"C"\s*(?:__host__\s+)?(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+solve\s*'
    r"\(((?:[^()]|" + _PARENS + r")*)\)", re.S)
# what an argument may carry that says nothing about its type: attributes, a default value
_DECOR = re.compile(r"\[\[.*?\]\]|__attribute__\s*" + _PARENS + r"|=(?:[^,()]|" + _PARENS + r")*",
                    re.S)
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
    found = _SOLVE_RE.findall(_extern_c_blocks(_strip_comments(source)))
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
    params = _STRIP.sub(" ", _DECOR.sub(" ", params_text))
    try:
        ast = pycparser.CParser().parse(_TYPEDEF_PRELUDE + f"void {fname}({params});", filename)
    except RecursionError:
        raise ContractError(too_deep(f"{filename} ({fname} prototype)", "C")) from None
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
            if (isinstance(p.type, c_ast.TypeDecl)
                    and _type_name(p.type, f"{filename}: {fname}") == "void"):
                continue
            raise ContractError(f"{filename}: every {fname} argument needs a name")
        args.append(_arg(p, filename, fname))
    _written_types(params, plist, args, fname, filename)
    twice = sorted(n for n, k in Counter(a.name for a in args).items() if k > 1)
    if twice:
        raise ContractError(f"{filename}: {fname} argument {twice[0]!r} is named twice; give "
                            "every argument its own name")
    return tuple(args)


def _written_types(params: str, plist: list, args: list[Arg], fname: str,
                   filename: str) -> None:
    """Raise ContractError for an argument pycparser read by C's old rules rather than as
    written: a storage class or function specifier (``auto N``, ``register N``, ``static``;
    C++ reads ``auto N`` as a template parameter, C89 as ``int``) or no type at all
    (``const N``: an implicit ``int``). Names the kernel file, the argument and the types
    accepted."""
    pieces, depth, cur = [], 0, ""
    for ch in params:  # the arguments' texts, split at top-level commas
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            pieces.append(cur)
            cur = ""
        else:
            cur += ch
    pieces.append(cur)
    texts = dict(zip([p.name for p in plist], pieces)) if len(pieces) == len(plist) else {}
    for p, a in zip([p for p in plist if isinstance(p, c_ast.Decl)], args):
        text = " ".join(texts.get(a.name, a.name).split())
        if p.storage or p.funcspec:
            why = f"`{' '.join(p.storage + p.funcspec)}` is a storage class or specifier"
        elif a.ctype == "int" and not _C_WORDS & set(re.findall(r"\w+", text)):
            why = "it has no type (C would read an implicit int)"
        else:
            continue
        raise ContractError(f"{filename}: {fname} argument {a.name!r} is declared `{text}`: "
                            f"{why}, not a C type; write it as `TYPE {a.name}` (or `const TYPE* "
                            f"{a.name}`, `TYPE* {a.name}`) with TYPE one of: {supported_types()}")


def parse_signature_file(path: str | Path, kernel: str | None = None) -> Signature:
    """Read ``path`` and parse its ``solve`` prototype (see parse_signature), or with
    ``kernel`` the prototype of that ``__global__`` kernel (see parse_kernel_signature).

    Raises:
        ContractError: as those functions; OSError when the file cannot be read.
    """
    p = Path(path)
    text = read_text(p, ContractError)
    if kernel is not None:
        return parse_kernel_signature(text, kernel, str(p))
    return parse_signature(text, str(p))


MAX_TEXT_BYTES = 64 * 2**20  # a kernel source, sweep.yaml or ref.py larger than this is not one


def check_plain_file(path: Path, error: Callable[[str], Exception]) -> None:
    """Raise ``error`` (one line naming ``path`` and the fix) when ``path`` is a device, FIFO
    or socket (reading one blocks or never ends) or a file over ``MAX_TEXT_BYTES``. A path
    that cannot be stat'ed passes: the caller's read reports it."""
    try:
        st = path.stat()
    except OSError:
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise error(f"{path}: not a regular file (a device, FIFO or socket); name the file "
                    "itself")
    if st.st_size > MAX_TEXT_BYTES:
        raise error(f"{path}: {st.st_size / 2**20:.0f} MiB, over the {MAX_TEXT_BYTES >> 20} "
                    "MiB kopt reads as a source, spec or reference; name the file itself")


def too_deep(path: Path | str, parser: str, fix: str = "write it flatter") -> str:
    """The one line for input nested deeper than a recursive parser (PyYAML, json, Python's
    own, pycparser) can follow: its RecursionError (Python's parser: MemoryError) is the
    file's fault, not kopt's. ``parser`` names the format, e.g. ``"YAML"``; ``fix`` what to
    do about it."""
    return (f"{path}: nested too deeply for a {parser} parser (brackets or operators inside "
            f"one another past Python's recursion limit); {fix}")


def yaml_error_line(e: Exception) -> str:
    """One line for a PyYAML parse error ``e``: where (1-based line and column), what, and
    the construct it was reading (``while parsing a flow sequence that starts at ...``).
    PyYAML's own text spans several lines, with the source line and a caret."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if not problem or mark is None:
        return " ".join(str(e).split()) or type(e).__name__
    line = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and cmark is not None:
        line += f" ({context} that starts at line {cmark.line + 1}, column {cmark.column + 1})"
    elif context:
        line += f" ({context})"
    return line


def read_text(path: Path, error: Callable[[str], Exception], python: bool = False) -> str:
    """The UTF-8 text of ``path``; a directory, a device, FIFO or socket (reading one would
    block or never end), a file over ``MAX_TEXT_BYTES``, an unreadable file or bytes that are
    not UTF-8 raise ``error`` with one line naming the file and the fix. ``python``: the file
    is Python source, decoded as Python decodes it (PEP 263: a UTF-8 BOM or a ``coding:``
    line, else UTF-8; :func:`tokenize.detect_encoding`)."""
    check_plain_file(path, error)
    try:
        if not python:
            return path.read_text(encoding="utf-8")
        data = path.read_bytes()
        enc = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        return data.decode(enc)
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a file; name the file itself") from None
    except UnicodeDecodeError as e:
        what = "UTF-8" if e.encoding.lower().startswith("utf") else e.encoding
        raise error(f"{path}: not {what} text (byte 0x{e.object[e.start]:02x} at offset "
                    f"{e.start}); save it as UTF-8") from None
    except SyntaxError as e:  # detect_encoding: an unknown encoding, or a BOM and a coding line
        raise error(f"{path}: {e.msg}; save it as UTF-8 with no coding line") from None
    except OSError as e:
        raise error(f"{path}: cannot be read ({e.strerror or e})") from None


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


_BLOCK = re.compile(r'extern\s+"C"\s*\{')
_BRACE = re.compile(r"[{}]")


def _extern_c_blocks(src: str) -> str:
    """``src`` with each ``extern "C" { ... }`` block opened: its braces dropped and every
    ``void solve(`` inside marked ``extern "C"``, as if declared one by one."""
    out, pos = [], 0
    for m in _BLOCK.finditer(src):
        if m.start() < pos:  # inside a block already opened
            continue
        depth, i = 1, len(src)
        for b in _BRACE.finditer(src, m.end()):
            depth += 1 if b.group() == "{" else -1
            if depth == 0:
                i = b.end()
                break
        body = src[m.end():i - 1 if depth == 0 else i]
        out += [src[pos:m.start()], re.sub(r"\bvoid(\s+solve\s*\()", r'extern "C" void\1', body)]
        pos = i
    return "".join(out) + src[pos:]


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
    if not isinstance(p, c_ast.Decl):  # e.g. solve(ARGS) with a macro for the arguments
        raise ContractError(f"{filename}: {fname}'s arguments must be written out in its "
                            "prototype (a macro or an unnamed argument is not read); write "
                            f"each argument with its type and name")
    where = f"{filename}: {fname} argument {p.name!r}"
    t = p.type
    if isinstance(t, c_ast.PtrDecl):
        inner = t.type
        if not isinstance(inner, c_ast.TypeDecl):
            raise ContractError(f"{where}: pointers to pointers, arrays or functions are not "
                                "supported; pass flat device buffers")
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
