"""The console the CLI writes to: an encoding that is not UTF-8, a
closed stdout or stderr, a Ctrl-C in a long query. Each printed a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, write_sweep

ADD = ('#ifndef NT\n#define NT 1\n#endif\n'
       'extern "C" void solve(const float* x, const float* y, float* out, int N) {\n'
       '  for (int i = 0; i < N; ++i) out[i] = x[i] + y[i];\n}\n')
REF = "def reference(x, y, N):\n    return x + y\n"
YAML = """\
name: va
kernel: add.cpp
dims: [{N: 4096}]
tolerance: {atol: 1.0e-6, rtol: 1.0e-6}
args: {x: [N], y: [N], out: [N]}
params: {NT: [1, 2]}
timing: {warmup_ms: 1, min_samples: 3, max_samples: 5, flush: false, timeout_s: 10}
"""


def kopt(*args: str, close: int | None = None, **env: str) -> subprocess.CompletedProcess:
    """``python -m kopt.cli.main ARGS`` with ``env`` added; ``close``: a descriptor (1 or 2)
    closed in the child, as ``>&-`` / ``2>&-`` do."""
    return subprocess.run([sys.executable, "-m", "kopt.cli.main", *args], capture_output=True,
                          text=True, encoding="utf-8", errors="replace", timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                          preexec_fn=None if close is None else lambda: os.close(close))


@pytest.mark.parametrize("enc", ["ascii", "latin-1"])
def test_a_console_that_is_not_utf8_gets_escapes_not_a_traceback(tmp_path, enc):
    store = tmp_path / "st"
    store.mkdir()
    for fmt, want in (("table", "\\u2603"), ("csv", "\\u2603"), ("json", '"\\u00fc\\u2603"')):
        p = kopt("query", "--format", fmt, "select 'ü☃' s", "--store", str(store),
                 PYTHONIOENCODING=enc)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert want in p.stdout, p.stdout
    if enc == "ascii":  # gcc's curly quotes (U+2018) in a compile error, in preflight's table
        d = write_sweep(tmp_path / "bad", YAML, {"ref.py": REF, "add.cpp":
                        'extern "C" void solve(const float* x, const float* y, float* out, '
                        'int N) { this is an error; }\n'})
        p = kopt("preflight", str(d), PYTHONIOENCODING=enc)
        assert "Traceback" not in p.stderr + p.stdout, p.stderr
        assert "invalid use of \\u2018this\\u2019" in p.stdout, p.stdout


def test_closed_stdout_or_stderr(tmp_path):
    store = tmp_path / "st"
    store.mkdir()
    p = kopt("query", "select 1 s", "--store", str(store), close=1)
    assert p.returncode == 0 and p.stderr == "", p.stderr  # was: AttributeError at import
    p = kopt("query", "--format", "csv", "select 1 s", "--store", str(store), close=2)
    assert p.returncode == 0 and p.stdout == "s\n1\n"
    p = kopt("best", "nosuch", "--store", str(store), close=2)  # the error line goes nowhere
    assert p.returncode == 2 and p.stdout == ""


def test_a_sweep_with_stderr_closed_stores_its_work(tmp_path):
    """`kopt sweep ... 2>&-` exited 1 having stored nothing."""
    d = write_sweep(tmp_path / "va", YAML, {"add.cpp": ADD, "ref.py": REF})
    store = tmp_path / "st"
    p = kopt("sweep", str(d), "--backend", "cpu", "--store", str(store), close=2)
    assert p.returncode == 0, p.stdout
    p = kopt("query", "--format", "csv", "--store", str(store),
             "select status, count(*) n from candidates group by 1")
    assert p.stdout == "status,n\nok,2\n", p.stdout + p.stderr


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_ctrl_c_in_a_long_query_is_one_line(tmp_path, fmt):
    """Ctrl-C in `kopt query` printed DuckDB's "RuntimeError: Query interrupted" traceback
    (table), or click's "Aborted!" with exit 1 (csv, while streaming)."""
    import signal
    import time

    store = tmp_path / "st"
    store.mkdir()
    sql = ("select count(*) from range(100000000000)" if fmt == "table"
           else "select * from range(100000000000)")
    p = subprocess.Popen([sys.executable, "-m", "kopt.cli.main", "query", "--format", fmt, sql,
                          "--store", str(store)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while len(os.listdir(f"/proc/{p.pid}/task")) < 8:  # DuckDB's threads: the query runs
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert err == "error: interrupted (Ctrl-C)\n"
