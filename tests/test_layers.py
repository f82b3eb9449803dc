"""Layers point one way.

``workers/`` (node side: the device actor, its sandbox, builds) never imports the driver
(``kopt``), so a sandbox process loads neither Ray, pydantic, YAML, pycparser nor the catalog;
the driver reaches the shared pieces in ``workers/``.

Inside ``kopt/`` each folder is a floor and imports only floors below it or its own
(:data:`FLOORS`, bottom first), imports inside functions included: there is no import cycle,
between folders or between modules. Imports under ``if TYPE_CHECKING:`` are annotations only
(never run) and may name any floor. Every function is at most :data:`MAX_FUNCTION_LINES`
lines and defines no function inside it, but for the names in ``ALLOWED_LONG`` /
``ALLOWED_NESTED``, lists that may only shrink."""

from __future__ import annotations

import ast
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


def test_the_command_line_loads_no_ray_duckdb_or_torch_before_a_command_runs():
    """``kopt --help`` and every read-only command pay the import of kopt.cli.main: Ray,
    DuckDB and torch come in only inside the commands that use them (Ray alone took about
    half a second of it through kopt.tools.port's default)."""
    code = ("import kopt.cli.main, sys; print(sorted(m for m in ('ray', 'duckdb', 'torch') "
            "if m in sys.modules))")
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
    assert kopt.core.restrictions.parse is expr.parse
    assert kopt.core.restrictions.ExprError is expr.ExprError
    assert kopt.core.bottleneck.parse_query_metrics is ncu.parse_query_metrics
    launch = {"block": [128], "grid": ["(N + 127) // 128"], "smem_bytes": 0}
    want = {"block": [128, 1, 1], "grid": [8, 1, 1], "smem_bytes": 0}
    assert kopt.core.spec.launch_geometry(launch, {"N": 1000}) == want
    assert launch_geometry.launch_geometry(launch, {"N": 1000}) == want


# kopt's floors, bottom first: a module imports only from its own floor or those below
# (``workers`` and the package root ``kopt/__init__.py`` lie under every floor)
FLOORS = ("util", "core", "store", "strategy", "run", "loop", "driver", "tools", "cli")
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(module: str) -> int:
    """The floor of a first-party module: -1 for workers and the package root, the index in
    FLOORS for kopt's folders, the top floor for ``kopt.__main__`` (it runs the CLI)."""
    parts = module.split(".")
    if parts[0] != "kopt" or len(parts) == 1:
        return -1
    if parts[1] == "__main__":
        return len(FLOORS) - 1
    return FLOORS.index(parts[1])


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    """Line numbers of statements under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                lines.update(range(stmt.lineno, stmt.end_lineno + 1))
    return lines


def _imports(path: Path, known: set[str]) -> list[tuple[str, int]]:
    """First-party modules that ``path`` imports when run (module level or inside
    functions; not under TYPE_CHECKING), each with its line."""
    me = _module_name(path)
    tree = ast.parse(path.read_text())
    skip = _type_checking_blocks(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = me.split(".")[:len(me.split(".")) - node.level
                                      + (path.name == "__init__.py")]
                base = ".".join(package + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != me:
                found.append((name, node.lineno))
    return found


def _graph() -> dict[str, list[tuple[str, int]]]:
    paths = sorted((ROOT / "kopt").rglob("*.py")) + sorted((ROOT / "workers").glob("*.py"))
    known = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, known) for p in paths}


def test_each_floor_imports_only_the_floors_below_it():
    """No module of kopt/ imports a module of a higher floor, at module level or in a
    function (e.g. kopt.run.service starting the CLI's launchpad would be run -> cli)."""
    up = [f"{m}:{line} -> {dep}" for m, deps in _graph().items() for dep, line in deps
          if _floor(dep) > _floor(m)]
    assert up == []


def test_there_is_no_import_cycle():
    """No cycle among first-party modules, imports inside functions counted (a function
    import that closes a cycle only hides it from the interpreter's start-up)."""
    graph = {m: sorted({d for d, _ in deps}) for m, deps in _graph().items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []
    for start in graph:
        if state.get(start):
            continue
        stack = [(start, iter(graph[start]))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                cycles.append(path[path.index(child):] + [child])
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(graph.get(child, []))))
    assert cycles == []


# functions over MAX_FUNCTION_LINES today (path:name): this list may only shrink
ALLOWED_LONG: frozenset[str] = frozenset()
# functions that define a function inside them today: this list may only shrink
ALLOWED_NESTED: frozenset[str] = frozenset({
    "kopt/core/bottleneck.py:wanted_metrics",
    "kopt/core/expand.py:cap",
    "kopt/core/expand.py:sample_key",
    "kopt/core/restrictions.py:all_of",
    "kopt/core/spec.py:_culprits",
    "workers/ctypes_map.py:_converting",
    "workers/envinfo.py:gpus",
    "workers/harness.py:_dtype_problem",
    "workers/harness.py:full_time",
    "workers/reap.py:_run",
})


def _functions():
    for path in sorted((ROOT / "kopt").rglob("*.py")) + sorted((ROOT / "workers").glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{path.relative_to(ROOT)}:{fn.name}", fn


def test_functions_are_short_and_define_no_functions():
    """Every function of kopt/ and workers/ is at most 60 lines and defines no function or
    lambda-free closure inside it, but for the allow-lists; an allowed function that got
    short or lost its closure must leave its list (the lists only shrink)."""
    long, nested = set(), set()
    for where, fn in _functions():
        if fn.end_lineno - fn.lineno + 1 > MAX_FUNCTION_LINES:
            long.add(where)
        if any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
               for node in fn.body for f in ast.walk(node)):
            nested.add(where)
    assert sorted(long - ALLOWED_LONG) == []
    assert sorted(nested - ALLOWED_NESTED) == []
    assert sorted(ALLOWED_LONG - long) == [], "shrink ALLOWED_LONG"
    assert sorted(ALLOWED_NESTED - nested) == [], "shrink ALLOWED_NESTED"


def test_every_folder_of_kopt_is_a_floor():
    """A new folder under kopt/ gets its place in FLOORS (and so in the rule above)."""
    folders = sorted(p.name for p in (ROOT / "kopt").iterdir()
                     if p.is_dir() and (p / "__init__.py").exists())
    assert folders == sorted(FLOORS)


def test_ray_stays_inside_the_run_floor():
    """Only kopt/run/ imports Ray (the machinery on Ray: builder, runner, scheduler, cluster,
    service); the rules, the store, the loop, the driver, the tools and the CLI ask it
    (e.g. kopt.run.cluster.cluster_total) and never hold a Ray object."""
    offenders = []
    for path in sorted((ROOT / "kopt").rglob("*.py")):
        if path.relative_to(ROOT).parts[1] == "run":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names
                          if n.split(".")[0] == "ray"]
    assert offenders == []


def test_imports_inside_functions_say_why():
    """A first-party import inside a function is there for start-up time (a command, a
    sandbox or a Ray worker loads only what it uses), never to hide a cycle (there is none:
    :func:`test_there_is_no_import_cycle`). Outside kopt/cli/ -- where every command imports
    what it runs, as its module docstrings say -- each such import has a ``# lazy:`` comment
    on its line or in the five lines above it saying what it keeps out of whose start."""
    bare = []
    for path in sorted((ROOT / "kopt").rglob("*.py")) + sorted((ROOT / "workers").glob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("kopt", "cli"):
            continue
        lines = path.read_text().splitlines()
        tree = ast.parse(path.read_text())
        skip = _type_checking_blocks(tree)
        for node in ast.walk(tree):
            if (not isinstance(node, (ast.Import, ast.ImportFrom)) or node.col_offset == 0
                    or node.lineno in skip):
                continue
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""])
            if not any(n.split(".")[0] in ("kopt", "workers") for n in names):
                continue
            # the import's own line and the five above it (a comment over a group of imports)
            near = "".join(lines[max(node.lineno - 6, 0):node.lineno])
            if "# lazy" not in near:
                bare.append(f"{rel}:{node.lineno}")
    assert bare == []
