"""``kopt triage``: which kernels of a profiled step are worth optimizing, and what to do next.

Reads a PyTorch profiler trace (Chrome-trace JSON, optionally gzipped) or an Nsight Systems
SQLite export (optionally gzipped; a ``.nsys-rep`` is exported with the ``nsys`` CLI when it
is on PATH) into one :class:`Launch` per GPU kernel, attributes each kernel to the CPU ranges
(``record_function`` / NVTX push-pop ranges) that enclose its launch call, and summarizes:

- **kernels**: one row per kernel name: total GPU time, share of all kernel time in the trace,
  calls, average/min/max, grid/block, stages, layers, innermost ranges, whether it ran inside
  a CUDA graph;
- **paths**: each hot kernel matched against a YAML of known routes (``--known``);
- **actions**: per kernel, the next step and why (tune the route, write a sweep, leave it).

Attribution. A kernel belongs to the innermost range, on the launching thread, that encloses
its launch call (``cudaLaunchKernel``, ``cuLaunchKernelEx``, ``cudaGraphLaunch``...), found
by correlation id (PyTorch: ``args.correlation`` on both the kernel and the runtime event;
Nsight Systems: ``correlationId`` in ``CUPTI_ACTIVITY_KIND_KERNEL`` and
``CUPTI_ACTIVITY_KIND_RUNTIME``). The stage is the outermost range (PyTorch's own
``ProfilerStep#N`` ranges are skipped), the layer the first range matching the layer
pattern (default ``layer_<i>``). With a mapping trace (CUDA graphs off, ranges on) and a
formal trace (graphs on), the k-th launch of kernel name N in the formal trace takes the
ranges of the (k mod m)-th of the m launches of N in the mapping trace: both traces run the
same steps, so each name's launches recur in the same order.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2

from kopt.core.contract import check_plain_file, too_deep, yaml_error_line
from kopt.store.database import Database, TraceError, read_nsys_export
from kopt.store.files import now
from kopt.util.words import counted

LAYER_PATTERN = r"^layer[_.\-]?\d+$"
MIN_SHARE = 0.05  # below 5% of the trace's kernel time a kernel is left alone
SKIP_RANGES = re.compile(r"^ProfilerStep#\d+$")


class TriageError(ValueError):
    """A trace or routes file that cannot be read; the message names the file and the fix."""


@dataclass
class Launch:
    """One GPU kernel execution.

    Attributes:
        name: demangled name (PyTorch traces carry only this one).
        mangled: mangled name when the trace has it (Nsight Systems), else None.
        start_us, dur_us: GPU start and duration, microseconds.
        grid, block: launch geometry (x, y, z), or None when the trace lacks it.
        correlation: the CUPTI correlation id linking it to its launch call.
        in_graph: launched by a CUDA graph (``cudaGraphLaunch``, or an Nsight graph node).
        ranges: the enclosing CPU ranges at the launch, outermost first.
    """

    name: str
    mangled: str | None
    start_us: float
    dur_us: float
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    correlation: int | None = None
    in_graph: bool = False
    ranges: tuple[str, ...] = ()


@dataclass
class Triage:
    """The three tables (lists of dicts) and the launches they summarize."""

    trace: str
    launches: list[Launch]
    kernels: list[dict[str, Any]]
    paths: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    triage_id: str = ""


# ---------------------------------------------------------------- readers


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _is_sqlite(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(16) == b"SQLite format 3\x00"


def read_trace(path: Path | str) -> list[Launch]:
    """Every kernel launch of the trace at ``path``, sorted by GPU start.

    Raises:
        TriageError: missing or unreadable file, unknown format, no kernels.
    """
    path = Path(path)
    if not path.is_file():
        raise TriageError(f"{path}: no such trace file")
    if path.suffix == ".nsys-rep":
        return _checked(path, _read_nsys_rep(path))
    with tempfile.TemporaryDirectory(prefix="kopt-triage-") as tmp:
        real = path
        if _is_gzip(path):
            real = Path(tmp) / "trace"
            try:
                with gzip.open(path, "rb") as src, open(real, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except (OSError, EOFError) as e:
                raise TriageError(f"{path}: damaged gzip file ({e}); copy the trace again") \
                    from None
        if _is_sqlite(real):
            launches = read_nsys_sqlite(real, shown=path)
        else:
            launches = read_torch_trace(real, shown=path)
    return _checked(path, launches)


def _checked(path: Path, launches: list[Launch]) -> list[Launch]:
    """``launches`` sorted by GPU start; TriageError when there are none, or one has a start
    or duration no clock gives (not finite, or a negative duration): its shares would lie."""
    if not launches:
        raise TriageError(f"{path}: no GPU kernels in the trace; profile with CUDA activity on "
                          "(torch.profiler ProfilerActivity.CUDA, or nsys --trace=cuda)")
    for k in launches:
        if not (math.isfinite(k.start_us) and math.isfinite(k.dur_us) and k.dur_us >= 0):
            raise TriageError(f"{path}: kernel {k.name[:80]!r} starts at {k.start_us} us and "
                              f"lasts {k.dur_us} us, which no profiler writes; the trace is "
                              "damaged or edited: export it again")
    return sorted(launches, key=lambda k: k.start_us)


def _read_nsys_rep(path: Path) -> list[Launch]:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TriageError(f"{path}: a .nsys-rep needs the nsys CLI to export it, and nsys is "
                          f"not on PATH; export it where nsys is (`nsys export --type sqlite "
                          f"{path.name}`) and pass the .sqlite file")
    with tempfile.TemporaryDirectory(prefix="kopt-nsys-") as tmp:
        out = Path(tmp) / "trace.sqlite"
        r = subprocess.run([nsys, "export", "--type", "sqlite", "-o", str(out), str(path)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not out.is_file():
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
            raise TriageError(f"{path}: nsys export failed: {tail[0]}")
        return read_nsys_sqlite(out, shown=path)


def _enclosing(launch_at: dict[Any, list[tuple[float, Any]]],
               ranges: dict[Any, list[tuple[float, float, str]]]) -> dict[Any, tuple[str, ...]]:
    """For each thread, the stack of ranges enclosing each launch time.

    Args:
        launch_at: thread -> [(launch time, key)].
        ranges: thread -> [(start, end, name)] (properly nested per thread).

    Returns:
        key -> range names, outermost first.
    """
    out: dict[Any, tuple[str, ...]] = {}
    for tid, points in launch_at.items():
        rs = sorted(ranges.get(tid, []), key=lambda r: (r[0], -r[1]))
        stack: list[tuple[float, float, str]] = []
        i = 0
        for t, key in sorted(points, key=lambda p: p[0]):
            while i < len(rs) and rs[i][0] <= t:
                while stack and stack[-1][1] < rs[i][0]:
                    stack.pop()
                stack.append(rs[i])
                i += 1
            while stack and stack[-1][1] < t:
                stack.pop()
            # a range that ended before t but sits under one still open was popped above;
            # ranges that are not properly nested are checked one by one
            out[key] = tuple(r[2] for r in stack if r[0] <= t <= r[1])
    return out


def read_torch_trace(path: Path, shown: Path | None = None) -> list[Launch]:
    """Kernels of a PyTorch profiler Chrome trace (``traceEvents``; ``cat`` ``kernel``,
    ``cuda_runtime`` / ``cuda_driver`` launch calls, ``user_annotation`` ranges; times in
    microseconds).

    Raises:
        TriageError: not JSON, or no ``traceEvents`` list.
    """

    shown = shown or path
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except RecursionError:
        raise TriageError(too_deep(shown, "JSON", "the trace is damaged or edited: export it "
                                              "again")) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise TriageError(f"{shown}: neither an Nsight Systems SQLite export nor a PyTorch "
                          f"trace JSON ({e}); pass the profiler's export_chrome_trace file") \
            from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TriageError(f"{shown}: field 'traceEvents' missing; pass a Chrome-trace JSON "
                          "written by torch.profiler (export_chrome_trace)")
    calls: dict[int, dict] = {}
    ranges: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    kernels = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat == "kernel":
            kernels.append(e)
        elif cat in ("cuda_runtime", "cuda_driver"):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                calls[corr] = e
        elif cat == "user_annotation" and not SKIP_RANGES.match(str(e.get("name"))):
            ts = float(e["ts"])
            ranges[(e.get("pid"), e.get("tid"))].append(
                (ts, ts + float(e.get("dur", 0)), str(e.get("name"))))
    launch_at: dict[Any, list[tuple[float, int]]] = defaultdict(list)
    launches = []
    for i, e in enumerate(kernels):
        a = e.get("args") or {}
        call = calls.get(a.get("correlation"))
        if call is not None:
            launch_at[(call.get("pid"), call.get("tid"))].append((float(call["ts"]), i))
        launches.append(Launch(
            name=str(e.get("name")), mangled=None, start_us=float(e["ts"]),
            dur_us=float(e.get("dur", 0)),
            grid=tuple(a["grid"]) if isinstance(a.get("grid"), list) else None,
            block=tuple(a["block"]) if isinstance(a.get("block"), list) else None,
            correlation=a.get("correlation"),
            in_graph=call is not None and "Graph" in str(call.get("name"))))
    for i, rs in _enclosing(launch_at, ranges).items():
        launches[i].ranges = rs
    return launches


def read_nsys_sqlite(path: Path, shown: Path | None = None) -> list[Launch]:
    """Kernels of an Nsight Systems SQLite export (NVIDIA's documented schema: tables
    ``CUPTI_ACTIVITY_KIND_KERNEL``, ``CUPTI_ACTIVITY_KIND_RUNTIME``, ``StringIds``,
    ``NVTX_EVENTS``; times in nanoseconds, converted to microseconds). NVTX push/pop and
    start/end ranges (``eventType`` 59, 60) with an end count; their text is ``text`` or
    ``StringIds[textId]``.

    Raises:
        TriageError: no kernel table (the capture lacked ``--trace=cuda``).
    """

    shown = shown or path
    try:
        ex = read_nsys_export(path)
    except TraceError as e:
        raise TriageError(f"{shown}: not a readable Nsight Systems SQLite export ({e}); "
                          "export it again with `nsys export --type sqlite`") from None
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in ex.tables:
        raise TriageError(f"{shown}: table CUPTI_ACTIVITY_KIND_KERNEL missing; capture with "
                          "`nsys profile --trace=cuda,nvtx` and export to SQLite again")
    strings = ex.strings
    calls = {corr: (start / 1e3, tid) for corr, start, tid in ex.calls}
    ranges: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    for start, end, text, text_id, tid in ex.ranges:
        name = text if text is not None else strings.get(text_id, "?")
        ranges[tid].append((start / 1e3, end / 1e3, str(name)))
    launches, launch_at = [], defaultdict(list)
    for i, (s, e, dem, short, mang, gx, gy, gz, bx, by, bz, corr, in_graph) in enumerate(
            ex.kernels):
        name = strings.get(dem) or strings.get(short) or f"kernel_{dem}"
        launches.append(Launch(name=name, mangled=strings.get(mang), start_us=s / 1e3,
                               dur_us=(e - s) / 1e3, grid=(gx, gy, gz), block=(bx, by, bz),
                               correlation=corr, in_graph=bool(in_graph)))
        if corr in calls:
            t, tid = calls[corr]
            launch_at[tid].append((t, i))
    for i, rs in _enclosing(launch_at, ranges).items():
        launches[i].ranges = rs
    return launches


def map_ranges(formal: list[Launch], mapping: list[Launch]) -> int:
    """Give each launch of ``formal`` (e.g. a CUDA-graph replay, no ranges) the ranges of
    its counterpart in ``mapping`` (the same step run eagerly with ranges): the k-th launch
    of a kernel name in ``formal`` takes the (k mod m)-th of that name's m launches in
    ``mapping`` (both in GPU start order). In place.

    Returns:
        How many formal launches have no counterpart (a name the mapping trace lacks).
    """
    by_name: dict[str, list[Launch]] = defaultdict(list)
    for k in sorted(mapping, key=lambda k: k.start_us):
        by_name[k.name].append(k)
    seen: Counter[str] = Counter()
    missing = 0
    for k in sorted(formal, key=lambda k: k.start_us):
        same = by_name.get(k.name)
        if not same:
            missing += 1
            continue
        k.ranges = same[seen[k.name] % len(same)].ranges
        seen[k.name] += 1
    return missing


# ---------------------------------------------------------------- tables


def stage_of(ranges: tuple[str, ...]) -> str | None:
    """The outermost range (the stage), or None."""
    return ranges[0] if ranges else None


def layer_of(ranges: tuple[str, ...], pattern: str = LAYER_PATTERN) -> str | None:
    """The outermost range matching ``pattern`` (the layer), or None."""
    return next((r for r in ranges if re.match(pattern, r)), None)


def _geometry(launches: list[Launch], attr: str) -> str | None:
    """The launch geometry (``x,y,z``) that took the most time, ``(+n more)`` when several."""
    t: Counter[str] = Counter()
    for k in launches:
        g = getattr(k, attr)
        if g is not None:
            t[",".join(map(str, g))] += k.dur_us
    if not t:
        return None
    top = t.most_common(1)[0][0]
    return top + (f" (+{len(t) - 1} more)" if len(t) > 1 else "")


def _distinct(values: list[str | None]) -> str | None:
    got = sorted({v for v in values if v})
    return ",".join(got) if got else None


def kernel_table(launches: list[Launch], layer_pattern: str = LAYER_PATTERN
                 ) -> list[dict[str, Any]]:
    """One row per kernel name, by total GPU time (largest first).

    ``share`` is the kernel's fraction of the summed duration of every kernel in the trace
    (0..1); times are microseconds.
    """
    total = sum(k.dur_us for k in launches) or math.inf
    groups: dict[str, list[Launch]] = defaultdict(list)
    for k in launches:
        groups[k.name].append(k)
    rows = []
    for name, ks in groups.items():
        durs = [k.dur_us for k in ks]
        rows.append({
            "kernel": name, "mangled": next((k.mangled for k in ks if k.mangled), None),
            "total_us": sum(durs), "share": sum(durs) / total, "calls": len(ks),
            "avg_us": sum(durs) / len(ks), "min_us": min(durs), "max_us": max(durs),
            "grid": _geometry(ks, "grid"), "block": _geometry(ks, "block"),
            "stages": _distinct([stage_of(k.ranges) for k in ks]),
            "layers": _distinct([layer_of(k.ranges, layer_pattern) for k in ks]),
            "ranges": _distinct([k.ranges[-1] if k.ranges else None for k in ks]),
            "in_graph": any(k.in_graph for k in ks)})
    rows.sort(key=lambda r: (-r["total_us"], r["kernel"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def load_routes(path: Path | str) -> list[dict[str, Any]]:
    """The known routes of a YAML file::

        routes:
          - pattern: "gemm|cutlass"      # regex, searched in the demangled name, any case
            operator: aten::linear       # optional, like the fields below
            source: csrc/gemm.cu
            tuning: configs/gemm.yaml#sm90
            owner: alice

    Raises:
        TriageError: unreadable YAML, a route without ``pattern``, a bad regex.
    """
    import yaml


    path = Path(path)
    check_plain_file(path, TriageError)
    try:
        doc = yaml.safe_load(path.read_text())
    except RecursionError:
        raise TriageError(too_deep(path, "YAML")) from None
    except (OSError, yaml.YAMLError) as e:
        raise TriageError(f"{path}: cannot read the routes file ({yaml_error_line(e)}); fix "
                          "it there") from None
    routes = (doc or {}).get("routes") if isinstance(doc, dict) else None
    if not isinstance(routes, list):
        raise TriageError(f"{path}: field 'routes' missing; write `routes:` with a list of "
                          "{pattern, operator, source, tuning, owner}")
    out = []
    for i, r in enumerate(routes):
        if not isinstance(r, dict) or not isinstance(r.get("pattern"), str):
            what = ("missing" if not isinstance(r, dict) or r.get("pattern") is None else
                    f"{r['pattern']!r}, not text")
            raise TriageError(f"{path}: field 'routes[{i}].pattern' {what}; give each route "
                              "a regex `pattern` (quoted text) matched against kernel names")
        unknown = set(r) - {"pattern", "operator", "source", "tuning", "owner"}
        if unknown:
            raise TriageError(f"{path}: field 'routes[{i}].{sorted(unknown)[0]}' is unknown; "
                              "use pattern, operator, source, tuning, owner")
        try:
            compiled = route_regex(r["pattern"])
        except re2.error as e:
            why = e.args[0].decode(errors="replace") if e.args and isinstance(
                e.args[0], bytes) else str(e)
            raise TriageError(f"{path}: field 'routes[{i}].pattern' is not a regex RE2 "
                              f"takes ({why}); write a regular expression without "
                              "backreferences or lookaround") from None
        out.append({**{k: (None if r.get(k) is None else str(r.get(k)))
                       for k in ("pattern", "operator", "source", "tuning", "owner")},
                    "regex": compiled})
    return out


def route_regex(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (google-re2), case-insensitive: a route's pattern is a
    user's, matched against kernel names of thousands of characters, and Python's
    backtracking ``re`` takes exponential time on patterns such as ``(a+)+$``;
    RE2 matches in linear time. Raises ``re2.error`` (RE2's message, not logged)."""
    opts = re2.Options()
    opts.log_errors, opts.case_sensitive = False, False
    return re2.compile(pattern, opts)


def path_table(kernels: list[dict[str, Any]], routes: list[dict[str, Any]],
               min_share: float = MIN_SHARE) -> list[dict[str, Any]]:
    """Each hot kernel (``share >= min_share``) with the first route whose pattern its
    demangled (or mangled) name matches; the route fields are None when none does."""
    rows = []
    for k in kernels:
        if k["share"] < min_share:
            continue
        hit = next((r for r in routes if _matches(r, k["kernel"])
                    or (k["mangled"] and _matches(r, k["mangled"]))), None)
        rows.append({"rank": k["rank"], "kernel": k["kernel"], "share": k["share"],
                     "known": hit is not None, "route": hit and hit["pattern"],
                     **{f: hit and hit[f] for f in ("operator", "source", "tuning", "owner")}})
    return rows


def _matches(route: dict[str, Any], name: str) -> bool:
    rx = route.get("regex") or route_regex(route["pattern"])  # a route made by hand
    return rx.search(name) is not None


def _split_params(kernel: str) -> tuple[str, str | None]:
    """``kernel`` as (everything before its trailing parameter list, the list's text), the
    list matched by balancing parentheses from the end; (kernel, None) without one."""
    text = kernel.rstrip()
    if not text.endswith(")"):
        return kernel, None
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += (text[i] == ")") - (text[i] == "(")
        if depth == 0:
            return text[:i], text[i + 1:-1]
    return kernel, None


def short_name(kernel: str) -> str:
    """The bare function name of a demangled kernel (no return type, namespaces, template
    arguments or parameters), e.g. ``vectorized_layer_norm_kernel``."""
    head, depth, out = _split_params(kernel)[0], 0, []
    for c in head:  # drop template arguments
        depth += c == "<"
        if depth == 0 and c not in "<>":
            out.append(c)
        depth -= c == ">"
    words = "".join(out).split()
    name = words[-1] if words else kernel
    return re.sub(r"\W", "_", name.split("::")[-1])[:60] or "kernel"


def _params_of(kernel: str) -> list[str]:
    """The demangled parameter types (empty when the name has no parameter list)."""
    body = _split_params(kernel)[1]
    if not body or not body.strip():
        return []
    out, depth, cur = [], 0, ""
    for c in body:
        if c == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (c in "<({") - (c in ">)}")
        cur += c
    return [*out, cur.strip()]


def _xyz(geometry: str | None, x: int) -> tuple[int, int, int]:
    """A kernels-table geometry (``"32,4,1"``, ``"2,64,1 (+1 more)"``) as (x, y, z); ``(x, 1,
    1)`` when the trace had none."""
    if not geometry:
        return (x, 1, 1)
    v = [int(s) for s in geometry.split(" ")[0].split(",")] + [1, 1]
    return v[0], v[1], v[2]


def _used(xyz: tuple[int, int, int]) -> int:
    """How many axes a launch must list: up to the last one above 1, at least x."""
    return max([1] + [i + 1 for i, v in enumerate(xyz) if v > 1])


def write_sweep_skeleton(kernel: dict[str, Any], folder: Path) -> Path:
    """A sweep folder skeleton for ``kernel`` (a kernels-table row) under ``folder``:
    ``sweep.yaml`` (kernel mode, the launch's grid and block as the baseline), ``<name>.cu``
    (the signature guessed from the demangled name, an empty body) and a ``ref.py`` stub.
    Nothing in it runs until the TODOs are filled in. Returns the sweep folder."""
    name = short_name(kernel["kernel"])
    d = folder / f"k{kernel['rank']}_{name}"  # rank: two kernels may share a short name
    d.mkdir(parents=True, exist_ok=True)
    grid, block = _xyz(kernel.get("grid"), 1), _xyz(kernel.get("block"), 128)
    params = _params_of(kernel["kernel"])
    args = ", ".join(f"{t} a{i}" for i, t in enumerate(params)) or "/* TODO: parameters */"
    (d / f"{name}.cu").write_text(
        f"// kopt triage: a standalone copy of {kernel['kernel']}\n"
        f"// {kernel['share']:.1%} of the traced GPU time, {counted(kernel['calls'], 'call')}, "
        f"{kernel['avg_us']:.1f} us each; grid {kernel.get('grid')}, block "
        f"{kernel.get('block')}\n"
        "// TODO: paste the kernel's body; the parameter list below is guessed from the "
        "demangled name\n"
        f'extern "C" __global__ void {name}({args}) {{\n}}\n')
    # the launch's geometry: every axis up to the last one above 1 (a launch lists x, y, z
    # in order); the grid as problem dims, block x swept, block y/z kept as they were
    gn, bn = ("GX", "GY", "GZ")[:_used(grid)], ("BX", "BY", "BZ")[:_used(block)]
    dims = dict(zip(gn, grid))
    sweep = {"BX": sorted({64, 128, 256, block[0]}),
             **{n: [v] for n, v in zip(bn[1:], block[1:])}}
    base = ", ".join(f"{n}: {v}" for n, v in zip(bn, block))
    threads = " * ".join(bn)
    (d / "sweep.yaml").write_text(
        f"# kopt triage skeleton for {name}: fill in the TODOs, then `kopt preflight .`\n"
        f"name: {name}\nkernel: {name}.cu\nreference: ref.py\n"
        f"# the launch's grid ({kernel.get('grid')}) as problem dims; TODO: the real sizes\n"
        f"dims:\n  - {json.dumps(dims)}\n"
        "args: {}          # TODO: one entry per pointer argument, its shape in dims\n"
        "params:\n" + "".join(f"  {n}: {v}\n" for n, v in sweep.items())
        + (f'restrictions:\n  - "{threads} <= 1024"\n' if len(bn) > 1 else "")
        + f"baseline: {{{base}}}   # the traced launch's block ({kernel.get('block')})\n"
        f"launch:\n  kernel: {name}\n  block: [{', '.join(bn)}]\n  grid: [{', '.join(gn)}]\n")
    (d / "ref.py").write_text(
        f'"""Reference for {name} (kopt triage skeleton).\n\nTODO: `inputs` builds the '
        "kernel's input tensors for the dims in sweep.yaml; `reference` computes what the "
        'kernel writes (e.g. with the PyTorch operator it came from)."""\n'
        "import torch\n\n\n"
        "def inputs(seed: int, **dims) -> dict[str, torch.Tensor]:\n"
        "    raise NotImplementedError(\"fill in: the kernel's inputs\")\n\n\n"
        "def reference(**args) -> torch.Tensor:\n"
        "    raise NotImplementedError(\"fill in: what the kernel computes\")\n")
    return d


def action_table(kernels: list[dict[str, Any]], paths: list[dict[str, Any]],
                 min_share: float = MIN_SHARE, sweeps: Path | None = None
                 ) -> list[dict[str, Any]]:
    """The next step per kernel: ``tune`` (a known route covers it), ``sweep`` (a hotspot
    no route covers; a skeleton is written under ``sweeps`` when given) or ``leave`` (below
    ``min_share`` of the trace's kernel time: a sweep cannot gain much there)."""
    known = {p["kernel"]: p for p in paths if p["known"]}
    rows = []
    for k in kernels:
        row = {"rank": k["rank"], "kernel": k["kernel"], "share": k["share"], "sweep_dir": None}
        if k["share"] < min_share:
            row.update(action="leave", why=f"{k['share']:.1%} of kernel time, below the "
                       f"{min_share:.0%} threshold: even a 2x faster kernel saves under "
                       f"{k['share'] / 2:.1%}")
        elif k["kernel"] in known:
            p = known[k["kernel"]]
            row.update(action="tune", why=(
                f"route {p['route']!r} covers it ({p['operator'] or 'operator ?'}, "
                f"{p['source'] or 'source ?'}): tune "
                + (f"{p['tuning']}" if p["tuning"] else "that route (no tuning entry listed)")
                + (f"; owner {p['owner']}" if p["owner"] else "")))
        else:
            row.update(action="sweep", why=f"{k['share']:.1%} of kernel time and no known "
                       "route covers it: write a standalone sweep")
            if sweeps is not None:
                row["sweep_dir"] = str(write_sweep_skeleton(k, sweeps))
                row["why"] += f" (skeleton in {row['sweep_dir']})"
        rows.append(row)
    return rows


def triage(trace: Path | str, mapping: Path | str | None = None,
           known: Path | str | None = None, min_share: float = MIN_SHARE,
           sweeps: Path | None = None, layer_pattern: str = LAYER_PATTERN) -> Triage:
    """Read ``trace`` (the formal trace) and, with ``mapping``, take its ranges from the
    mapping trace; build the three tables.

    Raises:
        TriageError: a file that cannot be read (see :func:`read_trace`, :func:`load_routes`).
    """
    launches = read_trace(trace)
    notes = []
    if mapping is not None:
        missing = map_ranges(launches, read_trace(mapping))
        if missing:
            notes.append(f"{missing} of {len(launches)} kernels of {trace} have no launch of "
                         f"the same name in {mapping}: left without a stage")
    routes = load_routes(known) if known is not None else []
    kernels = kernel_table(launches, layer_pattern)
    paths = path_table(kernels, routes, min_share)
    actions = action_table(kernels, paths, min_share, sweeps)
    tid = "triage-" + time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    return Triage(str(trace), launches, kernels, paths, actions, notes, tid)


def launch_rows(t: Triage, layer_pattern: str = LAYER_PATTERN) -> list[dict[str, Any]]:
    """One row per launch (for the ``triage_launches`` table)."""
    return [{"kernel": k.name, "start_us": k.start_us, "dur_us": k.dur_us,
             "stage": stage_of(k.ranges), "layer": layer_of(k.ranges, layer_pattern),
             "ranges": "/".join(k.ranges) or None, "in_graph": k.in_graph,
             "correlation": k.correlation} for k in t.launches]


def store_triage(t: Triage, root: Path) -> None:
    """Write the tables to the store as ``triage_kernels``, ``triage_paths``,
    ``triage_actions`` and ``triage_launches`` (partition sweep=triage, run=triage id)."""

    at, db = now(), Database(root)
    for table, rows in (("triage_kernels", t.kernels), ("triage_paths", t.paths),
                        ("triage_actions", t.actions), ("triage_launches", launch_rows(t))):
        db.commit(table, "triage", t.triage_id,
                  [{**r, "triage_id": t.triage_id, "trace": t.trace, "created_at": at}
                   for r in rows])


def _bar(ranges: tuple[str, ...]) -> str:
    """The plot's bar of a launch: ``stage / layer`` (``stage`` outside any layer)."""
    stage, layer = stage_of(ranges) or "(no range)", layer_of(ranges)
    return f"{stage} / {layer}" if layer and layer != stage else stage


def plot(t: Triage, path: Path, top: int = 8) -> Path:
    """A PNG: one horizontal bar per stage and layer (``stage / layer``), its length that
    part's share of all kernel time, split by the ``top`` largest kernels (the rest as
    ``other``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    total = sum(k.dur_us for k in t.launches) or 1.0
    names = [k["kernel"] for k in t.kernels[:top]]
    share: dict[tuple[str, str], float] = defaultdict(float)
    for k in t.launches:
        label = short_name(k.name) if k.name in names else "other"
        share[(_bar(k.ranges), label)] += 100 * k.dur_us / total
    stages = sorted({s for s, _ in share})
    labels = [short_name(n) for n in names] + ["other"]
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.5 * len(stages)))
    left = [0.0] * len(stages)
    cmap = plt.get_cmap("tab10")
    for j, lab in enumerate(dict.fromkeys(labels)):
        w = [share.get((s, lab), 0.0) for s in stages]
        ax.barh(stages, w, left=left, label=lab, color=cmap(j % 10))
        left = [a + b for a, b in zip(left, w)]
    ax.set_xlabel("% of GPU kernel time in the trace")
    ax.set_title(f"time share by stage and kernel: {Path(t.trace).name}")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def as_json(t: Triage) -> dict[str, Any]:
    """The tables as one JSON-ready dict (``triage_id``, ``trace``, ``kernels``, ``paths``,
    ``actions``, ``notes``)."""
    return {"triage_id": t.triage_id, "trace": t.trace, "kernels": t.kernels,
            "paths": t.paths, "actions": t.actions, "notes": t.notes}


__all__ = ["Launch", "Triage", "TriageError", "read_trace", "map_ranges", "triage",
           "kernel_table", "path_table", "action_table", "store_triage", "plot", "as_json",
           "load_routes", "write_sweep_skeleton"]
