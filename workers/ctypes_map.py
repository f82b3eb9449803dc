"""C scalar types as the node side passes them: the C type table (C type -> torch dtype and
ctypes name), each scalar type's range, and the ctypes classes that pass ``half`` /
``bfloat16`` scalars by their 16-bit patterns.

Shared by the driver (``kopt.core.contract`` parses prototypes with these names, ``kopt.core.spec``
checks scalar values against their ranges) and the node side (``workers.harness`` and
``workers.launcher`` pass scalars with :func:`scalar_ctype`); it imports nothing but the
standard library, so a sandbox process stays small.
"""

from __future__ import annotations

import ctypes
import math
import struct
from typing import Any

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
        OverflowError: ``value`` is finite but beyond +-65504 (kopt.core.spec refuses those).
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
