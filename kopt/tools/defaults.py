"""Defaults the command line shows before it loads the tool that uses them (importing
kopt.tools.port itself pulls in Ray, DuckDB and PyArrow: half a second of every `kopt`
command, `--help` included)."""

BENCH_RUNS = 5  # `kopt port`: bench runs per side by default
