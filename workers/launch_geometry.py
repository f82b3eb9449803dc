"""Kernel mode's launch geometry: a sweep's ``launch:`` block (grid, block, dynamic shared
memory; integers or expressions) evaluated for one candidate at one problem size.

Shared by the driver (``kopt.core.spec`` checks the baseline's geometry at load,
``kopt.core.expand``
drops candidates whose geometry is invalid) and the node side (``workers.launcher`` sizes
every launch); it needs only :mod:`workers.expr`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.expr import ExprError, parse


def launch_geometry(launch: Mapping[str, Any], env: Mapping[str, Any]) -> dict[str, Any]:
    """Evaluate a launch block with ``env`` (params/defines, dims, scalars).

    Args:
        launch: ``{"block": [...], "grid": [...], "smem_bytes": ...}`` (a ``kopt.core.spec.Launch``
            as ``model_dump()``); each entry an integer or an expression.
        env: name -> number.

    Returns:
        ``{"grid": [x, y, z], "block": [x, y, z], "smem_bytes": n}``; missing y/z are 1.
        Units: blocks, threads per block, bytes.

    Raises:
        ValueError: an expression names an unknown value, divides by zero, or gives
            something other than an integer >= 1 (>= 0 for smem_bytes).
    """
    out: dict[str, Any] = {}
    for key in ("block", "grid", "smem_bytes"):
        vals = launch[key] if key != "smem_bytes" else [launch[key]]
        got = []
        for j, v in enumerate(vals):
            label = key if key == "smem_bytes" else f"{key}[{j}]"
            if isinstance(v, str):
                try:
                    v = parse(v)(env)
                except KeyError as ex:
                    raise ValueError(f"{label} {vals[j]!r}: no value for {ex}") from None
                except ZeroDivisionError:
                    raise ValueError(f"{label} {vals[j]!r}: division by zero") from None
                except ExprError as ex:
                    raise ValueError(f"{label}: {ex}") from None
            if isinstance(v, float) and v.is_integer() and isinstance(vals[j], str):
                raise ValueError(f"{label} {vals[j]!r} gives {v!r}, a float: use // for "
                                 "integer division")
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{label} {vals[j]!r} gives {v!r}, not an integer")
            lo = 0 if key == "smem_bytes" else 1
            if v < lo:
                raise ValueError(f"{label} {vals[j]!r} gives {v}; it must be >= {lo}")
            got.append(v)
        out[key] = got[0] if key == "smem_bytes" else got + [1] * (3 - len(got))
    return out

