"""Where device actors go: Ray nodes, their device classes and platforms.

A node declares the device class of its devices with a custom resource
``kopt_class_<NAME>`` (``ray start --resources='{"kopt_class_orin": 1}'``);
without one, a device's class is derived from the hardware (``h200-sm90``,
``cpu-x86_64``). Every GPU of a node gets one device actor (``num_gpus=1``);
for the CPU backend every node that declares a class gets ``cpu_devices``
actors, and on a cluster where no node declares one (the embedded local
instance) ``cpu_devices`` actors go wherever Ray places them.

Each actor is pinned to its node (hard node affinity), so a restarted actor
never lands on a device of another class. The platform of each node
(x86_64 / aarch64) comes from a probe task pinned to it; builds for a class
run on nodes of that class's platform (:func:`build_nodes`).
"""

from __future__ import annotations

import os
import platform as _platform
import subprocess
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

CLASS_PREFIX = "kopt_class_"


@dataclass(frozen=True)
class Node:
    """One alive Ray node: id, IP, resources (CPU, GPU, custom), platform."""

    node_id: str
    ip: str
    resources: dict[str, float] = field(hash=False)
    platform: str = ""

    @property
    def device_class(self) -> str | None:
        """The class the node declares with a ``kopt_class_<NAME>`` resource, if any."""
        names = sorted(k[len(CLASS_PREFIX):] for k in self.resources
                       if k.startswith(CLASS_PREFIX))
        return names[0] if names else None


@dataclass(frozen=True)
class Slot:
    """A device actor to start: on ``node_id`` (None: anywhere), with ``device_class``
    overriding the hardware-derived class when the node declares one."""

    node_id: str | None
    device_class: str | None
    ordinal: int


def _probe() -> str:
    return _platform.machine()


def alive_nodes(probe_platform: bool = True) -> list[Node]:
    """The alive nodes of the attached cluster; with ``probe_platform``, each node's
    machine type from a zero-CPU task pinned to it (a dead node's probe gives '')."""
    nodes = [Node(n["NodeID"], n["NodeManagerAddress"], dict(n["Resources"]))
             for n in ray.nodes() if n.get("Alive")]
    if not probe_platform:
        return nodes
    if len(nodes) == 1:  # the driver runs on a node of its cluster: this is that node
        return [Node(nodes[0].node_id, nodes[0].ip, nodes[0].resources, _probe())]
    task = ray.remote(num_cpus=0)(_probe)
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)
                         ).remote() for n in nodes]
    out = []
    for n, r in zip(nodes, refs):
        try:
            plat = ray.get(r, timeout=60)
        except (ray.exceptions.RayError, TimeoutError):
            plat = ""
        out.append(Node(n.node_id, n.ip, n.resources, plat))
    return out


def local_compute_caps(visible: str | None = None) -> list[int] | None:
    """SM archs (e.g. 90) of this machine's GPUs that ``CUDA_VISIBLE_DEVICES`` (or
    ``visible``) leaves visible, from ``nvidia-smi``; None when it cannot tell (no
    nvidia-smi, an entry it cannot match, no GPU)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,compute_cap",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for line in out.strip().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 3:
            return None
        try:
            major, minor = parts[2].split(".")
            gpus.append((parts[0], parts[1], int(major) * 10 + int(minor)))
        except ValueError:
            return None
    vis = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if vis is not None:
        want = [v.strip() for v in vis.split(",") if v.strip()]
        picked = []
        for w in want:
            hit = [g for g in gpus if w == g[0] or (w.startswith("GPU-") and g[1].startswith(w))]
            if len(hit) != 1:
                return None
            picked.append(hit[0])
        gpus = picked
    return [g[2] for g in gpus] or None


def local_gpu_count() -> int:
    """How many GPUs an embedded Ray instance started on this machine will see: NVML's
    device count (0 when NVML cannot start: no nvidia-ml-py, no driver), capped by the
    entries of ``CUDA_VISIBLE_DEVICES`` when it is set -- the count Ray's own GPU
    detection makes, known without starting Ray. Never raises."""
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
    except Exception:  # ImportError, NVMLError (LibraryNotFound, DriverNotLoaded, ...)
        return 0
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        n = min(n, 0 if vis == "NoDevFiles" else len([v for v in vis.split(",") if v]))
    return n


def predicted_target(backend: str, nodes: list[Node]) -> dict[str, Any] | None:
    """The ``sm`` and ``platform`` every device of a one-node run will report, known before
    its device actors start (so that builds can begin); None when it cannot be known on
    the driver: several nodes, another machine, GPUs of different archs, no nvidia-smi."""
    if len(nodes) != 1 or nodes[0].platform != _platform.machine():
        return None
    if backend != "cuda":
        return {"sm": None, "platform": nodes[0].platform}
    caps = local_compute_caps()
    if not caps or len(set(caps)) != 1:
        return None
    return {"sm": caps[0], "platform": nodes[0].platform}


def plan_slots(nodes: list[Node], backend: str, cpu_devices: int) -> list[Slot]:
    """The device actors to start, in a stable order (see the module docstring).

    Raises:
        ValueError: ``cpu_devices`` < 1.
    """
    if cpu_devices < 1:
        raise ValueError("cpu_devices must be at least 1")
    slots: list[Slot] = []
    if backend == "cuda":
        for n in sorted(nodes, key=lambda n: n.node_id):
            gpus = int(n.resources.get("GPU", 0))
            slots += [Slot(n.node_id, n.device_class, k) for k in range(gpus)]
        return slots
    declared = [n for n in nodes if n.device_class]
    if not declared:
        return [Slot(None, None, k) for k in range(cpu_devices)]
    for n in sorted(declared, key=lambda n: (n.device_class or "", n.node_id)):
        slots += [Slot(n.node_id, n.device_class, k) for k in range(cpu_devices)]
    return slots


def actor_options(slot: Slot) -> dict[str, Any]:
    """Ray ``.options()`` for the actor of ``slot``: pinned to its node when it has one."""
    if slot.node_id is None:
        return {}
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(slot.node_id, soft=False)}


def build_nodes(nodes: list[Node], platforms: set[str]) -> dict[str, list[str]] | None:
    """Per platform, the ids of nodes that may build for it -- or None when every node
    shares the one platform the devices need (then Ray places builds freely).

    Raises:
        ValueError: a device platform has no alive node with CPUs to build on.
    """
    known = {n.platform for n in nodes if n.platform}
    if len(known) <= 1 and platforms <= known:
        return None
    out: dict[str, list[str]] = {}
    for p in sorted(platforms):
        ids = [n.node_id for n in nodes if n.platform == p and n.resources.get("CPU", 0) >= 1]
        if not ids:
            raise ValueError(f"no alive node of platform {p} with a CPU to build on")
        out[p] = ids
    return out


# Dense peak rates from NVIDIA's datasheets (no sparsity): "NVIDIA H200 Tensor Core GPU"
# (nvidia.com/en-us/data-center/h200, SXM and NVL columns), "NVIDIA H100 Tensor Core GPU"
# (nvidia.com/en-us/data-center/h100, SXM and PCIe columns) and "NVIDIA A100 Tensor Core GPU"
# (nvidia.com/en-us/data-center/a100). The Hopper datasheets quote bf16/fp16 "with
# sparsity": the dense rate is half of that. float32 is the CUDA-core (non-tensor) rate, what an
# fp32-accurate kernel is held to; float64 the FP64 tensor-core rate. Keys: a substring of
# the device name torch reports (first match wins). TFLOP/s per dtype, and GB/s.
PEAKS: list[tuple[str, dict[str, float], float]] = [
    ("H200 NVL", {"float64": 60.0, "float32": 60.0, "bfloat16": 835.5, "float16": 835.5},
     4800.0),
    ("H200", {"float64": 67.0, "float32": 67.0, "bfloat16": 989.5, "float16": 989.5}, 4800.0),
    ("H100 PCIe", {"float64": 51.0, "float32": 51.0, "bfloat16": 756.5, "float16": 756.5},
     2000.0),
    ("H100", {"float64": 67.0, "float32": 67.0, "bfloat16": 989.5, "float16": 989.5}, 3350.0),
    ("A100-SXM4-80GB", {"float64": 19.5, "float32": 19.5, "bfloat16": 312.0,
                        "float16": 312.0}, 2039.0),
    ("A100-SXM4-40GB", {"float64": 19.5, "float32": 19.5, "bfloat16": 312.0,
                        "float16": 312.0}, 1555.0),
]


def peaks(device_name: str | None, dtype: str | None) -> tuple[float | None, float | None]:
    """(peak TFLOP/s for ``dtype``, peak GB/s) of the device named ``device_name`` (as torch
    names it, e.g. ``NVIDIA H200``) from :data:`PEAKS`; None where not known (a CPU, a GPU
    not in the table, a dtype it does not list)."""
    for key, flops, gbps in PEAKS:
        if device_name and key.lower() in device_name.lower():
            return flops.get(dtype or ""), gbps
    return None, None
