"""The sandboxed harness process: load artifacts, check them against the reference, time them.

Runs as ``python -m workers.harness RFD WFD`` under a device actor (or
``kopt preflight``), receiving run jobs (dicts) over a pipe and answering with
outcome dicts. Long-lived: artifacts are dlopened once, inputs and reference
outputs are made once per (reference, dims, seed) on this device, and the
CUDA context lives as long as the process. A crash, illegal address or hang
kills only this process; the actor records it and starts a new one.

Per job: outputs poisoned (NaN, or 0x5A bytes for integers) -> ``solve`` (kernel
mode: the ``__global__`` kernel launched through the driver API, workers.launcher) ->
launch error check -> synchronize -> every element compared with the
reference (``|out - ref| <= atol + rtol*|ref|``, NaN never passes) -> warm-up
by time -> samples, each with the L2 flushed outside the timed region (a
buffer of 2x the L2 zeroed) and CUDA events around ``solve`` (CPU: a monotonic
clock) until the median is stable (workers.timing).
"""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import math
import os
import sys
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from kopt.contract import C_TYPES
from kopt.expr import parse
from workers import nvrtc
from workers.timing import should_stop, summarize

MAX_DATA_ENTRIES = 2
# NVML clocks-event reasons that mean thermal or power throttling (nvml.h:
# SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20, HwThermalSlowdown 0x40,
# HwPowerBrakeSlowdown 0x80); idle, application-clock and sync-boost bits do not count
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
GUARD = 4096  # canary elements after each output buffer


class JobError(Exception):
    """A problem that makes one job fail with ``status``, e.g. a bad reference."""

    def __init__(self, status: str, message: str, fatal: bool = False):
        super().__init__(message)
        self.status, self.fatal = status, fatal


class Harness:
    """State of one sandbox process on one device (``cuda`` or ``cpu``)."""

    def __init__(self, device: str):
        self.device = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        self.is_cuda = device == "cuda"
        self.libs: dict[str, Any] = {}
        self.refs: dict[str, Any] = {}
        self.data: dict[tuple, dict] = {}
        if self.is_cuda:
            torch.cuda.init()
            l2 = torch.cuda.get_device_properties(0).L2_cache_size
        else:
            l2 = _llc_bytes()
        self.flush_buf = torch.empty(max(2 * l2, 1 << 20), dtype=torch.int8, device=self.device)
        self.nvml = _Nvml() if self.is_cuda else None

    # -- loading -------------------------------------------------------------------------
    def lib(self, path: str, sig: list[dict]) -> Any:
        """The loaded artifact at ``path``: a ctypes library exporting ``solve``, or (kernel
        mode) a workers.launcher.KernelLauncher. Raises JobError when a kernel-mode artifact
        cannot be loaded (``error`` without cuda-python, else ``launch_error``)."""
        if path not in self.libs and nvrtc.is_kernel_file(path):
            if not self.is_cuda:
                raise JobError("error", "a kernel-mode (cubin) artifact runs on the cuda "
                               "backend only")
            from workers.launcher import KernelLauncher, LauncherError

            try:
                self.libs[path] = KernelLauncher(path, sig, self.device.index or 0)
            except LauncherError as e:
                raise JobError("error" if e.missing else "launch_error",
                               f"loading the cubin: {e}") from None
        if path not in self.libs:
            lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
            fn = lib.solve
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p if a["kind"] != "scalar"
                           else getattr(ctypes, C_TYPES[a["ctype"]][1]) for a in sig]
            if self.is_cuda:
                lib.kopt_last_error.restype = ctypes.c_int
                lib.kopt_synchronize.restype = ctypes.c_int
                lib.kopt_error_string.restype = ctypes.c_char_p
                lib.kopt_error_string.argtypes = [ctypes.c_int]
            self.libs[path] = lib
        return self.libs[path]

    def ref_module(self, path: str) -> Any:
        if path not in self.refs:
            spec = importlib.util.spec_from_file_location(f"kopt_ref_{len(self.refs)}", path)
            mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.path.insert(0, str(Path(path).parent))
            try:
                spec.loader.exec_module(mod)  # type: ignore[union-attr]
            except Exception as e:
                raise JobError("error", f"{path}: import failed: {e!r}") from None
            finally:
                sys.path.pop(0)
            self.refs[path] = mod
        return self.refs[path]

    # -- data ----------------------------------------------------------------------------
    def prepare(self, job: dict) -> dict:
        """Inputs, scalars, poisonable outputs and reference outputs for job's dims (cached)."""
        key = (job["reference"], tuple(sorted(job["dims"].items())), job["seed"],
               tuple(sorted((k, tuple(v)) for k, v in job["args"].items())))
        if key in self.data:
            return self.data[key]
        while len(self.data) >= MAX_DATA_ENTRIES:
            self.data.pop(next(iter(self.data)))
            if self.is_cuda:
                torch.cuda.empty_cache()
        mod = self.ref_module(job["reference"])
        dims, sig = job["dims"], job["signature"]
        env = {**job["scalars"], **dims}
        scalars = {a["name"]: _scalar(a, env[a["name"]]) for a in sig if a["kind"] == "scalar"}
        shapes = {n: [parse(e)(env) if isinstance(e, str) else e for e in s]
                  for n, s in job["args"].items()}
        ref_name = Path(job["reference"]).name
        with torch.no_grad():
            inputs = self._inputs(mod, job, shapes, scalars, ref_name)
            kwargs = {**{k: v for k, v in inputs.items()}, **scalars}
            fn = mod.reference
            params = inspect.signature(fn).parameters
            if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                kwargs = {k: v for k, v in kwargs.items() if k in params}
            try:
                ref = fn(**kwargs)
            except Exception as e:
                raise JobError("error", f"{ref_name}: reference() raised {e!r}") from None
        outs = [a for a in sig if a["kind"] == "output"]
        if isinstance(ref, torch.Tensor):
            if len(outs) != 1:
                raise JobError("error", f"{ref_name}: reference() returned one tensor but solve "
                               f"has outputs {[a['name'] for a in outs]}; return a dict")
            ref = {outs[0]["name"]: ref}
        if not isinstance(ref, dict):
            raise JobError("error", f"{ref_name}: reference() must return a tensor or a dict")
        outputs, expected, guards = {}, {}, {}
        for a in outs:
            n = a["name"]
            if n not in ref and n not in inputs:
                raise JobError("error", f"{ref_name}: reference() did not return output {n!r}")
            r = ref.get(n)
            shape = shapes.get(n) or (list(r.shape) if r is not None else list(inputs[n].shape))
            if r is not None and r.numel() != _numel(shape):
                raise JobError("error", f"{ref_name}: reference output {n!r} has {r.numel()} "
                               f"elements, the args shape {shape} has {_numel(shape)}")
            # GUARD elements of canary after each output catch writes past its end
            flat = torch.empty(_numel(shape) + GUARD, dtype=getattr(torch, a["dtype"]),
                               device=self.device)
            outputs[n] = flat[: _numel(shape)].view(shape)
            guards[n] = flat[_numel(shape):]
            if r is not None and r.is_floating_point() and bool(torch.isnan(r).any()):
                raise JobError("error", f"{ref_name}: reference output {n!r} contains NaN; "
                               "the reference must be finite (NaN never passes)")
            if r is not None:
                expected[n] = r.to(self.device).reshape(shape)
        entry = {"inputs": inputs, "scalars": scalars, "outputs": outputs, "expected": expected,
                 "guards": guards, "pristine": {n: t.clone() for n, t in inputs.items()},
                 "inout": {n: inputs[n].clone() for n in outputs if n in inputs}}
        self.data[key] = entry
        return entry

    def _inputs(self, mod: Any, job: dict, shapes: dict, scalars: dict, ref_name: str) -> dict:
        sig, seed = job["signature"], job["seed"]
        wanted = [a for a in sig if a["kind"] == "input"]
        if hasattr(mod, "inputs"):
            try:
                got = mod.inputs(seed=seed, **job["dims"])
            except Exception as e:
                raise JobError("error", f"{ref_name}: inputs() raised {e!r}") from None
            if not isinstance(got, dict):
                raise JobError("error", f"{ref_name}: inputs() must return a dict name -> tensor")
        else:
            got = {}
            g = torch.Generator().manual_seed(seed)
            for a in wanted:
                if a["name"] not in shapes:
                    raise JobError("error", f"no shape for input {a['name']!r}: give it in "
                                   f"sweep.yaml `args:` or define inputs() in {ref_name}")
                dt = getattr(torch, a["dtype"])
                shp = shapes[a["name"]]
                if dt.is_floating_point:
                    t = torch.randn(shp, generator=g).to(dt)
                elif dt == torch.bool:
                    t = torch.randint(0, 2, shp, generator=g).bool()
                else:
                    t = torch.randint(-8, 8, shp, generator=g).to(dt)
                got[a["name"]] = t
        out = {}
        for a in wanted + [a for a in sig if a["kind"] == "output" and a["name"] in got]:
            n = a["name"]
            if n not in got:
                raise JobError("error", f"{ref_name}: inputs() did not return input {n!r}")
            t = got[n]
            dt = getattr(torch, a["dtype"])
            if t.dtype != dt:
                raise JobError("error", f"{ref_name}: input {n!r} is {t.dtype} but solve takes "
                               f"{a['ctype']}* (torch.{a['dtype']})")
            if n in shapes and t.numel() != _numel(shapes[n]):
                raise JobError("error", f"input {n!r} has {t.numel()} elements; args says "
                               f"{shapes[n]}")
            if t.numel() > 0 and not bool(t.any()):
                raise JobError("error", f"{ref_name}: input {n!r} is all zeros; kopt never "
                               "checks or times on zeros (they hide unwritten outputs)")
            out[n] = t.to(self.device).contiguous()
        return out

    # -- running -------------------------------------------------------------------------
    def call(self, lib: Any, job: dict, d: dict) -> None:
        """One ``solve`` call (kernel mode: one kernel launch) on the prepared data ``d``."""
        args = []
        for a in job["signature"]:
            n = a["name"]
            if a["kind"] == "scalar":
                args.append(d["scalars"][n])
            elif a["kind"] == "input":
                args.append(d["inputs"][n].data_ptr())
            else:
                args.append(d["outputs"][n].data_ptr())
        if isinstance(lib, ctypes.CDLL):
            lib.solve(*args)
        else:
            lib.launch(args, {**job["scalars"], **job["dims"]},
                       torch.cuda.current_stream(self.device).cuda_stream)

    def check_cuda(self, lib: Any, where: str) -> None:
        """Raise JobError ``launch_error`` for a failed launch, ``crashed`` (fatal) for a
        fault found at the synchronize; nothing on the CPU backend."""
        if not self.is_cuda:
            return
        if not isinstance(lib, ctypes.CDLL):
            msg = lib.take_error()
            if msg:
                raise JobError("launch_error", f"{where}: launch failed: {msg}")
            msg = lib.synchronize()
            if msg:
                raise JobError("crashed", f"{where}: {msg}", fatal=True)
            return
        e = lib.kopt_last_error()
        if e:
            msg = lib.kopt_error_string(e).decode()
            raise JobError("launch_error", f"{where}: launch failed: {msg} (cudaError {e})")
        e = lib.kopt_synchronize()
        if e:
            msg = lib.kopt_error_string(e).decode()
            raise JobError("crashed", f"{where}: {msg} (cudaError {e})", fatal=True)

    def poison(self, d: dict) -> None:
        """Restore inputs from their pristine copies, NaN-fill outputs, reset canaries."""
        for n, t in d["inputs"].items():
            if n not in d["outputs"]:
                t.copy_(d["pristine"][n])
        for g in d["guards"].values():
            g.view(torch.uint8).fill_(0xA5)
        for n, t in d["outputs"].items():
            if n in d["inout"]:
                t.copy_(d["inout"][n])
            elif t.dtype.is_floating_point:
                t.fill_(float("nan"))
            else:
                t.view(torch.uint8).fill_(0x5A)

    def check(self, d: dict, tol: dict) -> tuple[bool, float, str]:
        worst, msgs = 0.0, []
        for n, exp in d["expected"].items():
            got = d["outputs"][n]
            if exp.dtype.is_floating_point or got.dtype.is_floating_point:
                g, e = got.double(), exp.double()
                ok = torch.isclose(g, e, rtol=tol["rtol"], atol=tol["atol"], equal_nan=False)
                diff = (g - e).abs()
                diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
            else:
                ok = got == exp.to(got.dtype)
                diff = (got.long() - exp.long()).abs().double()
            err = float(diff.max()) if diff.numel() else 0.0
            worst = max(worst, err)
            bad = int((~ok).sum())
            if bad:
                idx = int((~ok).flatten().nonzero()[0])
                pos = tuple(int(i) for i in _unravel(idx, got.shape))
                msgs.append(f"{n}: {bad} of {got.numel()} elements differ (first at {pos}: got "
                            f"{float(got.flatten()[idx])!r}, expected {float(exp.flatten()[idx])!r}"
                            f"); max abs err {err:.3g}")
        return not msgs, worst, "; ".join(msgs)

    def warm_up(self, lib: Any, job: dict, d: dict) -> int:
        """Call ``solve`` for ``job["timing"]["warmup_ms"]`` (at least twice); the call count."""
        t_end = time.perf_counter() + job["timing"]["warmup_ms"] / 1e3
        n = 0
        while n < 2 or time.perf_counter() < t_end:
            self.call(lib, job, d)
            n += 1
            if self.is_cuda:
                torch.cuda.synchronize()
        return n

    def samples(self, calls: list[tuple[Any, dict]], d: dict, flush: bool) -> list[float]:
        """One timed call (ms) per ``(lib, job)`` in ``calls``, in order, the L2 (CPU: last-
        level cache) flushed before each when ``flush``: CUDA events around each call on the
        GPU, a monotonic clock on the CPU."""
        if self.is_cuda:
            evs = []
            for lib, job in calls:
                if flush:
                    self.flush_buf.zero_()
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                self.call(lib, job, d)
                e.record()
                evs.append((s, e))
            torch.cuda.synchronize()
            return [s.elapsed_time(e) for s, e in evs]
        out = []
        for lib, job in calls:
            if flush:
                self.flush_buf.zero_()
            t0 = time.perf_counter_ns()
            self.call(lib, job, d)
            out.append((time.perf_counter_ns() - t0) / 1e6)
        return out

    def time(self, lib: Any, job: dict, d: dict) -> dict:
        t = job["timing"]
        n_warm = self.warm_up(lib, job, d)
        self.check_cuda(lib, "warm-up")
        clean: list[float] = []  # samples of batches with no thermal/power throttling
        held: list[float] = []  # samples of throttled batches, set aside
        batch, batches, reasons = 5, 0, 0  # samples per batch between NVML readings
        flush = t.get("flush", True)
        clocks: list[float] = []
        temp = None
        max_batches = 3 * math.ceil(t["max_samples"] / batch)  # re-measure at most 2x over
        while not should_stop(clean, t["min_samples"], t["max_samples"], t["max_time_ms"],
                              t["target_rel_error"]):
            if batches >= max_batches or sum(held) >= t["max_time_ms"]:
                break
            batch = max(1, min(5, t["max_samples"] - len(clean)))  # never past max_samples
            before = self.nvml.sample() if self.nvml else {}
            xs = self.samples([(lib, job)] * batch, d, flush)
            batches += 1
            after = self.nvml.sample() if self.nvml else {}
            bits = (before.get("throttle_reasons") or 0) | (after.get("throttle_reasons") or 0)
            reasons |= bits
            clocks += [c for c in (before.get("sm_clock_mhz"), after.get("sm_clock_mhz")) if c]
            temp = after.get("temperature_c", temp)
            (held if bits & THROTTLE_MASK else clean).extend(xs)
        self.check_cuda(lib, "timing")
        # too few clean samples: report them all, flagged, rather than nothing
        throttled = len(clean) < t["min_samples"] and bool(held)
        samples = clean + held if throttled else clean
        st = summarize(samples)
        out = {"median_ms": st.median_ms, "min_ms": st.min_ms, "iqr_ms": st.iqr_ms,
               "mean_ms": st.mean_ms, "n_samples": st.n_samples, "samples_ms": samples,
               "warmup_runs": n_warm, "throttled_samples": len(held), "throttled": throttled}
        if self.nvml:
            out.update(sm_clock_mhz=sum(clocks) / len(clocks) if clocks else None,
                       throttle_reasons=reasons, temperature_c=temp)
        return out

    def contest(self, job: dict) -> dict:
        """Time ``job["contest"]`` (jobs of one problem size, different artifacts) side by side:
        each is checked once, warmed up, then ``job["rounds"]`` rounds each take one sample
        of every contender (rotating who goes first), the L2 flushed before every sample,
        so that drift in clocks, temperature or neighbours hits all alike (kopt.contest).

        Returns ``status`` and ``results``: per contender ``median_ms``, ``iqr_ms``,
        ``n_samples``, ``samples_ms``; a contender that fails its check fails the contest
        (``wrong_result`` with the reason).
        """
        entries = job["contest"]
        flush = entries[0]["timing"].get("flush", True)
        d = self.prepare(entries[0])
        libs = [self.lib(e["artifact"], e["signature"]) for e in entries]
        for e, lib in zip(entries, libs):
            self.poison(d)
            self.call(lib, e, d)
            self.check_cuda(lib, "contest")
            ok, _, msg = self.check(d, e["tolerance"])
            if not ok:
                return {"status": "wrong_result", "error": f"{e['job_key']}: {msg}"}
        for e, lib in zip(entries, libs):
            self.warm_up(lib, e, d)
        samples: list[list[float]] = [[] for _ in entries]
        k = len(entries)
        for r in range(int(job["rounds"])):
            order = [(r + i) % k for i in range(k)]
            xs = self.samples([(libs[i], entries[i]) for i in order], d, flush)
            for i, x in zip(order, xs):
                samples[i].append(x)
        for lib in libs:
            self.check_cuda(lib, "contest timing")
        out = []
        for xs in samples:
            st = summarize(xs)
            out.append({"median_ms": st.median_ms, "iqr_ms": st.iqr_ms,
                        "n_samples": st.n_samples, "samples_ms": xs})
        return {"status": "ok", "error": "", "results": out}

    def run(self, job: dict) -> dict:
        """Run one job; returns an outcome dict with ``status`` (never raises for kernel faults)."""
        if job.get("contest"):
            return self.contest(job)
        d = self.prepare(job)
        if job.get("prepare_only"):
            return {"status": "ok", "error": "",
                    "outputs": {n: list(t.shape) for n, t in d["outputs"].items()}}
        lib = self.lib(job["artifact"], job["signature"])
        self.poison(d)
        self.call(lib, job, d)
        self.check_cuda(lib, "solve")
        bad = self.tampered(d)
        if bad:
            return {"status": "wrong_result", "error": bad}
        ok, err, msg = self.check(d, job["tolerance"])
        out: dict[str, Any] = {"max_abs_err": err}
        if not ok:
            return {**out, "status": "wrong_result", "error": msg}
        if job.get("check_only"):
            return {**out, "status": "ok", "error": ""}
        timing = self.time(lib, job, d)
        bad = self.tampered(d)
        if bad:  # found after the timed calls: the next candidate still gets clean inputs
            return {**out, "status": "wrong_result", "error": bad + " (during timing)"}
        return {**out, "status": "ok", "error": "", **timing}

    def tampered(self, d: dict) -> str:
        """Why the last calls broke the contract: wrote a const input or past an output."""
        for n, t in d["inputs"].items():
            if n not in d["outputs"] and not torch.equal(t, d["pristine"][n]):
                return f"solve wrote to its const input {n!r}"
        for n, g in d["guards"].items():
            if bool((g.view(torch.uint8) != 0xA5).any()):
                return (f"solve wrote past the end of output {n!r} "
                        f"({d['outputs'][n].numel()} elements; give its shape in `args:`)")
        return ""


class _Nvml:
    """SM clock (MHz), temperature (C) and throttle-reason bits of GPU 0 through nvidia-ml-py."""

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
            self.h = (pynvml.nvmlDeviceGetHandleByUUID(vis) if vis.startswith("GPU-")
                      else pynvml.nvmlDeviceGetHandleByIndex(int(vis or 0)))
            self.nv = pynvml
        except Exception:
            self.nv = None

    def sample(self) -> dict:
        if self.nv is None:
            return {}
        nv = self.nv
        try:
            return {"sm_clock_mhz": float(nv.nvmlDeviceGetClockInfo(self.h, nv.NVML_CLOCK_SM)),
                    "temperature_c": float(nv.nvmlDeviceGetTemperature(self.h,
                                                                       nv.NVML_TEMPERATURE_GPU)),
                    "throttle_reasons": int(nv.nvmlDeviceGetCurrentClocksEventReasons(self.h))}
        except Exception:
            return {}


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _unravel(idx: int, shape: torch.Size) -> list[int]:
    out = []
    for s in reversed(shape):
        out.append(idx % s)
        idx //= s
    return list(reversed(out)) or [idx]


def _scalar(a: dict, v: Any) -> Any:
    return float(v) if a["dtype"].startswith(("float", "bfloat")) else int(v)


def _llc_bytes() -> int:
    """Size of the last-level CPU cache in bytes (sysfs), 32 MiB when unknown."""
    best = 0
    for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            s = (idx / "size").read_text().strip()
            mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1], 1)
            best = max(best, int(s.rstrip("KM")) * mult)
        except (OSError, ValueError):
            continue
    return best or (32 << 20)


def device_info(h: Harness) -> dict:
    """Name, SM arch, memory, L2, multiprocessors, platform and device class of this device."""
    import platform

    machine = platform.machine()
    if h.is_cuda:
        p = torch.cuda.get_device_properties(0)
        sm = p.major * 10 + p.minor
        name = p.name
        return {"backend": "cuda", "name": name, "sm": sm, "arch": f"sm_{sm}",
                "memory_bytes": int(p.total_memory), "l2_bytes": int(p.L2_cache_size),
                "multiprocessors": int(p.multi_processor_count), "platform": machine,
                "device_class": f"{_slug(name)}-sm{sm}", "torch": torch.__version__,
                "cuda": torch.version.cuda, "node": platform.node()}
    name = _cpu_name()
    return {"backend": "cpu", "name": name, "sm": None, "arch": "host", "platform": machine,
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "l2_bytes": _llc_bytes(), "multiprocessors": torch.get_num_threads(),
            "device_class": f"cpu-{machine}", "torch": torch.__version__, "cuda": None,
            "node": platform.node()}


def _slug(name: str) -> str:
    import re

    s = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def main(rfd: int, wfd: int, device: str) -> None:
    """Serve jobs over the pipe until EOF. Messages: ("run", job) -> outcome dict."""
    rconn, wconn = Connection(rfd, writable=False), Connection(wfd, readable=False)
    try:
        h = Harness(device)
        wconn.send({"ready": True, "pid": os.getpid(), "info": device_info(h)})
    except Exception as e:
        wconn.send({"ready": False, "error": f"harness start failed: {e!r}"})
        return
    while True:
        try:
            kind, job = rconn.recv()
        except EOFError:
            return
        try:
            res = h.run(job)
            res["fatal"] = False
        except JobError as e:
            res = {"status": e.status, "error": str(e), "fatal": e.fatal}
        except torch.OutOfMemoryError as e:
            res = {"status": "error", "error": f"out of memory: {e}", "fatal": True}
        except Exception as e:
            fatal = h.is_cuda and "CUDA" in str(e)
            res = {"status": "crashed" if fatal else "error",
                   "error": f"{e!r}\n{traceback.format_exc(limit=3)}", "fatal": fatal}
        wconn.send(res)
        if res.get("fatal"):
            return


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
