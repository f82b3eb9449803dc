"""``kopt export SWEEP``: a sweep's best configuration per device class and problem size,
ready for a build.

Three kinds of file, from ``kopt best``'s choice (:func:`kopt.store.select.best`: the loop's named
best of each device class, else the fastest correct candidate of each problem size):

- ``<sweep>.h``: a C/C++ header of ``#define`` lines. One ``#if defined(KOPT_DEVICE_<CLASS>)``
  block per device class (``<CLASS>``: the class name upper-cased, every character other
  than a letter or digit as ``_``), so a build picks its class with one macro, e.g.
  ``-DKOPT_DEVICE_NVIDIA_H200_SM90``; without one the header stops the build with an
  ``#error`` that lists them. Inside a class, one ``#if KOPT_PROBLEM_SIZE == i`` block per
  problem size (``i`` counts the class's problem sizes in the order sweep.yaml's ``dims:``
  lists them, from 0; the default, 0, is the first size listed). Each block defines every
  ``-D`` the candidate was built with (launch params and method defines, written exactly as
  kopt passed them), ``KOPT_DIM_<NAME>`` per problem-size dimension, ``KOPT_DEVICE_CLASS``
  and ``KOPT_CANDIDATE_ID`` (strings) and ``KOPT_MEDIAN_MS`` (the measured median, ms).
- ``<sweep>.t4.json``: the same rows in the T4 autotuning results format (schema_version
  1.0.0, Kernel Tuner's ``kernel_tuner/schema/T4``): per row ``configuration`` (the
  ``-D`` defines), ``times`` (``compilation_time`` in ms, ``runtimes``: every timed sample
  in ms), ``invalidity`` ``"correct"``, ``correctness`` 1, ``objectives`` ``["time"]`` and
  ``measurements`` (``time``, ``time_iqr`` in ms; ``device_class``, ``problem_size``,
  ``methods``, ``candidate_id``).
- ``best-<class>.<cu|cpp>``: the realized source of each class's best: the exact source
  the candidate was measured from (the store's copy, table ``sources``: a submitted
  version's text when a ``kopt submit`` version won; never the sweep folder as edited
  since the run) with its defines written in
  (:func:`kopt.tools.report.measured_realized`); one per candidate
  (``best-<class>-<candidate id>``) when the class's problem sizes chose different ones.
  A sweep folder changed since the run, or a source the store holds no copy of, is a note.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kopt.core.spec import SpecError, load_sweep
from kopt.loop.measured import SourceLost
from kopt.store.database import Database
from kopt.store.files import complete_rows, stored_json
from kopt.store.select import best
from kopt.tools.report import measured_realized

T4_VERSION = "1.0.0"


class ExportError(ValueError):
    """Nothing to export (no such sweep or run, no correct candidate) or class names that
    collide as macros; the message says which."""


@dataclass
class Exported:
    """What :func:`export` wrote: ``header``, ``t4`` and ``sources`` (paths), and ``rows``:
    one dict per device class and problem size (``device_class``, ``macro``, ``size``,
    ``dims``, ``candidate_id``, ``defines``, ``median_ms``); ``notes``: why no source was
    written, or that the sweep folder changed since the run; ``run_id``: the run exported."""

    header: Path
    t4: Path
    run_id: str = ""
    sources: list[Path] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def device_macro(device_class: str) -> str:
    """``KOPT_DEVICE_<CLASS>`` for a device class (``nvidia-h200-sm90`` ->
    ``KOPT_DEVICE_NVIDIA_H200_SM90``)."""
    return "KOPT_DEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", device_class).upper()


def _c_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid C string literal here


def _dims_text(dims: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items()) or "(no dims)"


def _comment(text: str) -> str:
    """``text`` safe inside a C block comment."""
    return text.replace("*/", "* /")


def in_sweep_order(picked: list[dict[str, Any]], info: dict[str, Any]
                   ) -> list[dict[str, Any]]:
    """``picked`` (rows with ``device_class`` and ``dims`` JSON) with each class's problem
    sizes in the order its sweep.yaml lists them (``dims:``, read from the run's
    ``sweep_dir`` for its ``backend``), so that ``KOPT_PROBLEM_SIZE=0`` is the first size
    listed; the classes stay in their order. A size the sweep no longer lists goes after
    those it does, and a sweep folder that does not load leaves the order as it is (the
    report's source notes say why)."""

    try:
        dims = load_sweep(info["sweep_dir"]).space(info["backend"]).dims
    except (SpecError, OSError, KeyError, TypeError):
        dims = []
    listed = {json.dumps(d, sort_keys=True): k for k, d in enumerate(dims)}
    classes: dict[str, int] = {}
    for p in picked:
        classes.setdefault(p["device_class"], len(classes))
    return sorted(picked, key=lambda p: (classes[p["device_class"]], listed.get(
        json.dumps(stored_json(p["dims"], "dims"), sort_keys=True), len(listed))))


def export(sweep: str, store: Path | str, out: Path, run_id: str | None = None
           ) -> Exported:
    """Write the header, the T4 JSON and the realized sources of ``sweep``'s best (module
    docstring) into ``out`` (created).

    Args:
        sweep: the sweep's name.
        store: the store root.
        out: the folder to write into.
        run_id: one run (default: the sweep's latest, as ``kopt best``).

    Raises:
        ExportError: no correct candidate of the sweep (or run), or two device classes that
            map to one macro.
    """
    picked = complete_rows(best(sweep, store, run_id), ("candidate_id", "device_class", "dims"),
                           f"best rows of sweep {sweep!r}")
    if not picked:
        raise ExportError(f"no correct candidate of sweep {sweep!r}"
                          + (f" run {run_id}" if run_id else "") + f" in {store}; "
                          "`kopt best` and `kopt query` show what the store holds")
    run = picked[0]["run_id"]
    picked = in_sweep_order(picked, Database(store).run_info(run) or {})
    got = Database(store).candidate_rows(run, sorted({r["candidate_id"] for r in picked}))
    rows = []
    sizes: dict[str, int] = {}
    for p in picked:
        dc = p["device_class"]
        row = got[(p["candidate_id"], dc, p["dims"])]
        rows.append({"device_class": dc, "macro": device_macro(dc),
                     "size": sizes.setdefault(dc, 0), "dims": stored_json(p["dims"], "dims"),
                     "candidate_id": p["candidate_id"],
                     "defines": stored_json(row["defines"], "defines"),
                     "params": stored_json(row["params"], "params"), "median_ms": row["median_ms"],
                     "device_name": p.get("device_name"), "row": row})
        sizes[dc] += 1
    by_macro: dict[str, set[str]] = {}
    for r in rows:
        by_macro.setdefault(r["macro"], set()).add(r["device_class"])
    clash = {m: sorted(v) for m, v in by_macro.items() if len(v) > 1}
    if clash:
        m, v = next(iter(clash.items()))
        raise ExportError(f"device classes {', '.join(v)} would share the macro {m}; export "
                          "one run of each (--run)")
    out.mkdir(parents=True, exist_ok=True)
    info = Database(store).run_info(run) or {}
    res = Exported(header=out / f"{sweep}.h", t4=out / f"{sweep}.t4.json", run_id=run)
    res.header.write_text(header_text(sweep, run, rows))
    res.t4.write_text(json.dumps(t4_results(rows), indent=1) + "\n")
    res.sources = _sources(Database(store), rows, info, run, out, res.notes)
    res.rows = [{k: v for k, v in r.items() if k != "row"} for r in rows]
    return res


def header_text(sweep: str, run_id: str, rows: list[dict[str, Any]]) -> str:
    """The header (module docstring) for ``rows`` as :func:`export` builds them."""
    classes = list(dict.fromkeys(r["device_class"] for r in rows))
    guard = "KOPT_EXPORT_" + re.sub(r"[^A-Za-z0-9]", "_", sweep).upper() + "_H"
    macros = [device_macro(dc) for dc in classes]
    lines = [f"/* kopt export: the best configuration of sweep {_comment(sweep)} (run "
             f"{_comment(run_id)}) per",
             " * device class and problem size. Written by `kopt export`; do not edit.",
             " *",
             " * Pick the device class with one macro (-DMACRO) and the problem size with",
             " * -DKOPT_PROBLEM_SIZE=i (default 0):"]
    for dc, m in zip(classes, macros):
        lines.append(f" *   {m}: {_comment(dc)}")
        lines += [f" *     KOPT_PROBLEM_SIZE={r['size']}: {_comment(_dims_text(r['dims']))}"
                  for r in rows if r["device_class"] == dc]
    lines += [" */", f"#ifndef {guard}", f"#define {guard}", "",
              "#ifndef KOPT_PROBLEM_SIZE", "#define KOPT_PROBLEM_SIZE 0", "#endif", ""]
    for i, (dc, m) in enumerate(zip(classes, macros)):
        lines.append(f"#{'if' if i == 0 else 'elif'} defined({m})")
        lines.append(f"#define KOPT_DEVICE_CLASS {_c_string(dc)}")
        mine = [r for r in rows if r["device_class"] == dc]
        for j, r in enumerate(mine):
            lines.append(f"#{'if' if j == 0 else 'elif'} KOPT_PROBLEM_SIZE == {r['size']}"
                         f"  /* {_comment(_dims_text(r['dims']))} */")
            lines.append(f"#define KOPT_CANDIDATE_ID {_c_string(r['candidate_id'])}")
            lines.append(f"#define KOPT_MEDIAN_MS {r['median_ms']!r}")
            lines += [f"#define KOPT_DIM_{k} {v}" for k, v in r["dims"].items()]
            lines += [f"#define {k} {v}" for k, v in sorted(r["defines"].items())]
        lines += ["#else", f'#error "kopt export: KOPT_PROBLEM_SIZE must be 0..{len(mine) - 1}'
                  f' for {dc}"', "#endif"]
    lines += ["#else", '#error "kopt export: define one device class macro: '
              + ", ".join(f"-D{m}" for m in macros) + '"', "#endif", "",
              f"#endif  /* {guard} */", ""]
    return "\n".join(lines)


def t4_results(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The T4 results document (module docstring) for ``rows`` as :func:`export` builds
    them."""
    results = []
    for r in rows:
        row = r["row"]
        methods = [m for m in (row["compute_method"], row["memory_method"],
                               row["latency_method"]) if m]
        results.append({
            "timestamp": row["created_at"].isoformat() if row["created_at"] else None,
            "configuration": r["defines"],
            "objectives": ["time"],
            "times": {"compilation_time": (row["compile_s"] * 1e3
                                           if row["compile_s"] is not None else None),
                      "runtimes": list(row["samples_ms"] or [])},
            "invalidity": "correct",
            "correctness": 1,
            "measurements": [
                {"name": "time", "value": row["median_ms"], "unit": "ms"},
                {"name": "time_iqr", "value": row["iqr_ms"], "unit": "ms"},
                {"name": "device_class", "value": r["device_class"], "unit": ""},
                {"name": "problem_size", "value": _dims_text(r["dims"]), "unit": ""},
                {"name": "methods", "value": methods, "unit": ""},
                {"name": "candidate_id", "value": r["candidate_id"], "unit": ""}]})
    return {"schema_version": T4_VERSION, "results": results}


def _sources(db: Database, rows: list[dict[str, Any]], info: dict[str, Any], run_id: str,
             out: Path, notes: list[str]) -> list[Path]:
    """Write the realized source of each class's chosen candidate(s) (the measured source,
    :func:`kopt.tools.report.measured_realized`); the paths written. ``notes`` gets each
    note once, and why a source was not written."""

    written = []
    for dc in dict.fromkeys(r["device_class"] for r in rows):
        mine = {r["candidate_id"]: r for r in rows if r["device_class"] == dc}
        for cid, r in mine.items():
            try:
                text, m = measured_realized(db, run_id, cid, r["defines"],
                                            f"kopt best candidate {cid} of run {run_id} on {dc}")
            except SourceLost as e:
                notes += [str(e)] if str(e) not in notes else []
                continue
            notes += [n for n in m.notes if n not in notes]
            backend = r["row"]["backend"] or info.get("backend") or "cpu"
            suffix = ".cu" if backend == "cuda" else ".cpp"
            path = out / (f"best-{dc}{suffix}" if len(mine) == 1 else
                          f"best-{dc}-{cid}{suffix}")
            path.write_text(text, newline="")
            written.append(path)
    return written
