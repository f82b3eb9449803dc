"""Issue 13.3: layers point one way. ``workers/`` (node side: the device actor, its sandbox,
builds) never imports the driver (``kopt``), so a sandbox process loads neither Ray, pydantic,
YAML, pycparser nor the catalog; the driver reaches the shared pieces in ``workers/``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRIVER_SIDE = {"ray", "pydantic", "yaml", "pycparser", "kopt"}


def test_node_side_modules_load_nothing_of_the_driver():
    """A fresh interpreter that imports what a sandbox and a build run has none of the
    driver-side packages in sys.modules (before: kopt.core.spec, kopt.core.catalog, pydantic, yaml,
    pycparser came with workers.harness)."""
    code = ("import workers.harness, workers.sandbox, workers.launcher, workers.build, "
            "workers.ncu_target, sys; print(sorted(m for m in sys.modules "
            f"if m.split('.')[0] in {sorted(DRIVER_SIDE)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_no_workers_module_imports_kopt():
    """No ``import kopt`` / ``from kopt`` anywhere in workers/*.py, lazy imports inside
    functions included (device_actor may import ray -- it is the Ray actor -- but not kopt)."""
    pattern = re.compile(r"^\s*(import\s+kopt\b|from\s+kopt\b)", re.M)
    offenders = [f"{p.name}:{text[:m.start()].count(chr(10)) + 1}"
                 for p in sorted((ROOT / "workers").glob("*.py"))
                 for text in [p.read_text()] for m in pattern.finditer(text)]
    assert offenders == []


def test_the_driver_names_are_the_shared_ones():
    """kopt's public names still work and are the very objects that workers/ holds (one
    definition, re-exported): the C type table, scalar ctypes, expressions, launch geometry,
    the ``ncu --query-metrics`` parser."""
    import kopt.core.bottleneck
    import kopt.core.contract
    import kopt.core.restrictions
    import kopt.core.spec
    from workers import ctypes_map, expr, launch_geometry, ncu

    assert kopt.core.contract.C_TYPES is ctypes_map.C_TYPES
    assert kopt.core.contract.scalar_ctype is ctypes_map.scalar_ctype
    assert kopt.core.contract.scalar_range is ctypes_map.scalar_range
    assert kopt.core.restrictions.parse is expr.parse and kopt.core.restrictions.ExprError is expr.ExprError
    assert kopt.core.bottleneck.parse_query_metrics is ncu.parse_query_metrics
    launch = {"block": [128], "grid": ["(N + 127) // 128"], "smem_bytes": 0}
    want = {"block": [128, 1, 1], "grid": [8, 1, 1], "smem_bytes": 0}
    assert kopt.core.spec.launch_geometry(launch, {"N": 1000}) == want
    assert launch_geometry.launch_geometry(launch, {"N": 1000}) == want


# the driver's modules that issue 13.1 split out of kopt/driver/sweep.py
SPLIT = ["pipeline.py", "builder.py", "runner.py", "scheduler.py", "service.py",
         "strategy/*.py"]
MAX_FUNCTION_LINES = 60


def test_the_driver_has_small_functions_and_no_closures():
    """Issue 13.1: no function of the pipeline, builder, runner, scheduler or strategies is
    over 60 lines, and none defines a function inside a function (before: Driver._loop was
    201 lines with eight closures over its mutable locals, Driver._run 165)."""
    import ast

    long, nested = [], []
    for pattern in SPLIT:
        for path in sorted((ROOT / "kopt").glob(pattern)):
            tree = ast.parse(path.read_text())
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                where = f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name}"
                if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{where} ({fn.end_lineno - fn.lineno + 1} lines)")
                nested += [f"{where} defines {f.name}" for node in fn.body
                           for f in ast.walk(node)
                           if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert (long, nested) == ([], [])
    assert len(list((ROOT / "kopt" / "strategy").glob("*.py"))) >= 5
