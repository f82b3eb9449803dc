"""Parse ``ptxas -v`` (``-Xptxas -v``) resource reports into per-kernel figures."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


@dataclass
class KernelResources:
    """ptxas figures for one ``__global__`` kernel (bytes; registers per thread)."""

    name: str
    arch: str
    registers: int = 0
    smem_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


def parse_ptxas(log: str) -> list[KernelResources]:
    """Kernels reported by ``ptxas -v`` in ``log`` (nvcc's stderr), in order.

    Only entry functions (kernels) are returned; device functions' property
    lines are ignored. Units: registers per thread, bytes of static shared
    memory, stack frame and spill traffic.
    """
    kernels: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    props_for: str | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = kernels.setdefault(m.group(1), KernelResources(m.group(1), m.group(2)))
            continue
        m = _PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _FRAME.search(line)
        if m and props_for in kernels:
            k = kernels[props_for]
            k.stack_bytes, k.spill_store_bytes, k.spill_load_bytes = map(int, m.groups())
            continue
        m = _USED.search(line)
        if m and current is not None:
            current.registers = int(m.group(1))
            s = _SMEM.search(line)
            current.smem_bytes = int(s.group(1)) if s else 0
    return list(kernels.values())


def summarize(kernels: list[KernelResources]) -> dict[str, int | None]:
    """Candidate-level figures: max registers and smem over kernels, total spill bytes."""
    if not kernels:
        return {"registers": None, "smem_bytes": None, "spill_bytes": None}
    return {
        "registers": max(k.registers for k in kernels),
        "smem_bytes": max(k.smem_bytes for k in kernels),
        "spill_bytes": sum(k.spill_bytes for k in kernels),
    }


def as_dicts(kernels: list[KernelResources]) -> list[dict]:
    return [asdict(k) for k in kernels]
