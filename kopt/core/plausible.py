"""The physical plausibility gate: a measured figure no device can reach makes a candidate
``suspect`` (workers.status), whatever its own process's check and clock said.

A candidate's bandwidth is the sweep's ``bytes`` (the least a correct call must move, an
expression over dims: kopt.core.spec) over its median. With the cache flushed before every
sample (workers.harness), those bytes come from DRAM, so a figure above the device's DRAM
peak (kopt.run.devices.PEAKS: NVIDIA's datasheet figure, 4.8 TB/s on an H200; the best
kernels of docs/verified/2026-12-02-h200-decode-loop.md reached 85% of it) means the call did
not move what a correct one must: a replay, outputs computed from fewer inputs than the
work needs, or a clock that runs slow. ``SLACK`` leaves room for the datasheet's rounding,
never for a real kernel: none reaches the peak itself.

Not checked: the compute peak. The sweep's dtype (solve's first output, as the reference row
records it) does not tell the precision of the math: an int8 tensor-core GEMM with an fp16
output (sweeps/w8a8_gemm) may honestly run above the fp16 peak.
"""

from __future__ import annotations

SLACK = 1.05  # x the datasheet's DRAM peak


def implausible(median_ms: float | None, nbytes: float | None,
                peak_gbps: float | None) -> str:
    """Why a figure is above what the device can do, or "" when it is not (or cannot be
    told: no median, no ``bytes`` in sweep.yaml, a device whose peak kopt does not know).

    Args:
        median_ms: the candidate's median, ms (> 0).
        nbytes: the sweep's ``bytes`` at this problem size, bytes.
        peak_gbps: the device's DRAM peak, GB/s.
    """
    if not median_ms or median_ms <= 0 or not nbytes or not peak_gbps:
        return ""
    gbps = nbytes / (median_ms * 1e6)
    if gbps <= SLACK * peak_gbps:
        return ""
    return (f"{gbps:.0f} GB/s (sweep.yaml's bytes, {nbytes:.4g}, in its median of "
            f"{median_ms:.4g} ms) is above the device's DRAM peak of {peak_gbps:.0f} GB/s: a "
            "correct call moves those bytes, so it did not, or its clock runs slow (if the "
            "`bytes` formula overstates what a call must move, fix it in sweep.yaml)")
