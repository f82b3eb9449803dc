"""Kernel mode at run time: launch a cubin's ``__global__`` kernel through the CUDA driver API.

The harness (workers.harness) loads a kernel-mode artifact (workers.nvrtc)
with ``cuModuleLoadData`` into torch's context, finds the kernel with
``cuModuleGetFunction`` and launches it with ``cuLaunchKernel`` on torch's
current stream: argument pointers are the torch tensors' device addresses,
the geometry and dynamic shared memory come from the sweep's ``launch:``
expressions evaluated with the candidate's defines and the problem's dims
(``cuFuncSetAttribute`` raises the dynamic shared-memory cap above 48 KiB
when a launch needs it). Errors behave like the CUDA runtime's for ``solve``
builds: a failed launch is recorded and reported by :meth:`KernelLauncher.take_error`
(a ``launch_error`` row), a fault surfaces at :meth:`KernelLauncher.synchronize`
(``crashed``).
"""

from __future__ import annotations

import ctypes
from typing import Any

from workers import nvrtc
from workers.ctypes_map import scalar_ctype
from workers.launch_geometry import launch_geometry

DEFAULT_SMEM_CAP = 48 * 1024  # bytes of dynamic shared memory a launch gets without opting in


class LauncherError(RuntimeError):
    """The artifact cannot be loaded or launched here. ``missing`` is True when the cause is
    that cuda-python is not installed."""

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except Exception as e:
        raise LauncherError(
            "kernel mode needs cuda-python's driver API bindings on the device node: install "
            f"{nvrtc.PACKAGES} (`pip install cuda-bindings`) ({e!r})", missing=True) from None
    return driver


class KernelLauncher:
    """A loaded kernel-mode artifact, ready to launch on the current CUDA device.

    Args:
        path: the artifact (workers.nvrtc.pack's bundle: header + cubin).
        signature: the kernel's arguments as dicts (kopt.core.contract.Arg fields).
        device_index: the torch CUDA device whose (primary) context gets the module.

    Raises:
        LauncherError: cuda-python is missing, or the driver rejects the cubin (e.g. built
            for another arch).
    """

    def __init__(self, path: str, signature: list[dict], device_index: int = 0):
        with open(path, "rb") as f:
            self.meta, cubin = nvrtc.unpack(f.read())
        self.drv = drv = _driver()
        self._ok = drv.CUresult.CUDA_SUCCESS
        try:
            self._call(drv.cuInit(0), "cuInit")
        except LauncherError:
            raise
        except Exception as e:  # e.g. cuda-pathfinder finds no libcuda (no driver)
            raise LauncherError(f"cuInit: the CUDA driver cannot be loaded: {e!r}") from None
        ctx = self._call(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(ctx) == 0:  # torch has not made its context current on this thread
            dev = self._call(drv.cuDeviceGet(device_index), "cuDeviceGet")
            ctx = self._call(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            self._call(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.module = self._call(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.name = self.meta["kernel"]
        self.fn = self._call(drv.cuModuleGetFunction(self.module, self.meta["lowered"].encode()),
                             f"cuModuleGetFunction({self.meta['lowered']})")
        self.launch_spec: dict[str, Any] = self.meta["launch"]
        self.defines: dict[str, Any] = self.meta["defines"]
        self.ctypes_of = [ctypes.c_void_p if a["kind"] != "scalar"
                          else scalar_ctype(a["ctype"], "cuda") for a in signature]
        self.smem_cap = DEFAULT_SMEM_CAP
        self.error: str | None = None
        self._geo: dict[tuple, dict[str, Any] | str] = {}
        self._params: dict[tuple, tuple[Any, Any]] = {}
        self._streams: dict[int, Any] = {}

    def _call(self, ret: tuple, what: str) -> Any:
        err = ret[0]
        if err != self._ok:
            raise LauncherError(f"{what}: {self.describe(err)}")
        return ret[1] if len(ret) == 2 else ret[1:] if len(ret) > 2 else None

    def describe(self, err: Any) -> str:
        """``NAME: text (CUresult n)`` for a driver error code."""
        drv = self.drv
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
        return f"{_text(name)}: {_text(text)} (CUresult {int(err)})"

    def geometry(self, env: dict[str, Any]) -> dict[str, Any]:
        """Grid, block (x, y, z) and dynamic shared memory (bytes) for ``env`` (dims and
        scalars; the candidate's defines are added). Raises ValueError for a bad one."""
        key = tuple(sorted(env.items()))
        if key not in self._geo:
            try:
                self._geo[key] = launch_geometry(self.launch_spec, {**env, **self.defines})
            except ValueError as e:
                self._geo[key] = f"launch geometry of {self.name}: {e}"
        g = self._geo[key]
        if isinstance(g, str):
            raise ValueError(g)
        return g

    def launch(self, values: list[Any], env: dict[str, Any], stream: int) -> None:
        """Launch the kernel once with ``values`` (device addresses and scalars in signature
        order) on the CUDA stream handle ``stream``. Never raises for a launch failure: the
        first one is kept (like cudaGetLastError) until :meth:`take_error`."""
        try:
            g = self.geometry(env)
        except ValueError as e:
            self.error = self.error or str(e)
            return
        drv = self.drv
        smem = g["smem_bytes"]
        if smem > self.smem_cap:
            (err,) = drv.cuFuncSetAttribute(
                self.fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem)
            if err != self._ok:
                self.error = self.error or (f"cuFuncSetAttribute(max dynamic smem = {smem} B): "
                                            f"{self.describe(err)}")
                return
            self.smem_cap = smem
        key = tuple(values)
        packed = self._params.get(key)
        if packed is None:
            if len(self._params) > 64:
                self._params.clear()
            cvals = [t(v) for t, v in zip(self.ctypes_of, values)]
            ptrs = (ctypes.c_void_p * max(len(cvals), 1))(*[ctypes.addressof(c) for c in cvals])
            packed = self._params[key] = (cvals, ptrs)
        st = self._streams.get(stream)
        if st is None:
            st = self._streams[stream] = drv.CUstream(stream)
        (gx, gy, gz), (bx, by, bz) = g["grid"], g["block"]
        (err,) = drv.cuLaunchKernel(self.fn, gx, gy, gz, bx, by, bz, smem, st,
                                    ctypes.addressof(packed[1]), 0)
        if err != self._ok:
            self.error = self.error or (f"cuLaunchKernel({self.name}, grid {g['grid']}, block "
                                        f"{g['block']}, smem {smem} B): {self.describe(err)}")

    def take_error(self) -> str | None:
        """The first launch failure since the last call (and forget it), else None."""
        e, self.error = self.error, None
        return e

    def synchronize(self) -> str | None:
        """Wait for the device; the fault text (e.g. an illegal address) or None."""
        (err,) = self.drv.cuCtxSynchronize()
        return None if err == self._ok else self.describe(err)


def _text(b: Any) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)
