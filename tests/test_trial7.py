"""What the seventh fresh-clone trial left unfixed (issue 12, docs/verified/2026-11-30-trial7.md):
ref.py's odd contenders and encodings, the too_slow line, --arch bounds, a closed pipe,
SIGTERM, a claim named twice and a store deleted mid-sweep. Each test failed before its fix."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_harness import TIMING, artifact, job

from conftest import ROOT, assert_spec_error, write_sweep
from kopt.core.spec import load_sweep
from workers.harness import Harness, JobError
from workers.sandbox import Sandbox

ADD = ('extern "C" void solve(const float* x, float* y, int N) '
       '{ for (int i = 0; i < N; ++i) y[i] = 2.0f * x[i]; }\n')
REF = "import torch\n\ndef reference(x, N):\n    return 2 * x\n"
YAML = "kernel: k.cpp\ndims: [{N: 4096}]\nargs: {x: [N]}\n"


def sweep(tmp_path, ref: str | bytes = REF):
    d = write_sweep(tmp_path / "s", YAML, {"k.cpp": ADD, "ref.py": ""})
    (d / "ref.py").write_bytes(ref if isinstance(ref, bytes) else ref.encode())
    return d


# -- 5: a UTF-8 BOM or a coding line, which Python accepts -----------------------------------
@pytest.mark.parametrize("ref", [b"\xef\xbb\xbf" + REF.encode(),
                                 b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + REF.encode(),
                                 b"# vim: set fileencoding=cp1252 :\n# \x93q\x94\n" + REF.encode()])
def test_a_ref_py_python_accepts_loads(tmp_path, ref):
    """Refused before: `invalid non-printable character U+FEFF`, `not UTF-8 text`."""
    sw = load_sweep(sweep(tmp_path, ref))
    assert sw.reference.name == "ref.py"


def test_a_coding_line_python_refuses_is_one_line(tmp_path):
    d = sweep(tmp_path, b"# -*- coding: no-such-codec -*-\n" + REF.encode())
    assert_spec_error(d, "field 'reference'", "ref.py: unknown encoding: no-such-codec",
                      "save it as UTF-8")


# -- 3: a contender that is not a function ---------------------------------------------------
@pytest.mark.parametrize("line,shown", [("contender = 5", "is 5, not a function"),
                                        ("contender: list = [1, 2]", "is [1, 2], not a function"),
                                        ("inputs = {'x': 1}", "is {'x': 1}, not a function")])
def test_a_contender_that_is_not_a_function_is_refused_at_load(tmp_path, line, shown):
    """`contender = 5` was silently ignored (the reference was timed instead)."""
    name = line.split()[0].rstrip(":")
    msg = assert_spec_error(sweep(tmp_path, REF + line + "\n"), "field 'reference'",
                            f"ref.py: `{name}` (line 5) {shown}", f"def {name}(")
    assert "\n" not in msg


def test_a_later_def_of_the_contender_wins(tmp_path):
    ref = REF + "contender = 5\n\ndef contender(x, N):\n    return x + x\n"
    assert load_sweep(sweep(tmp_path, ref)).reference.name == "ref.py"


def test_a_contender_only_known_at_import_is_refused_before_timing(tmp_path):
    """A value the load cannot see (`contender = torch.float32`): the harness refuses it when
    it imports ref.py, naming the file, the field and the fix."""
    d = sweep(tmp_path, REF + "contender = torch.float32\n")
    load_sweep(d)  # the load cannot tell: only the import finds it
    with pytest.raises(JobError) as ei:
        Harness("cpu").ref_module(str(d / "ref.py"))
    assert str(ei.value) == (f"{d / 'ref.py'}: `contender` is torch.float32, not a function; "
                             "define `def contender(...)` or remove it")


# -- 4: a contender that ends the process timing it ------------------------------------------
def test_a_contender_that_kills_its_process_is_named(tmp_path):
    """Before: `harness died: exit code 3.`, naming neither ref.py nor contender()."""
    d = sweep(tmp_path, REF + "\ndef contender(x, N):\n    import os\n    os._exit(3)\n")
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        res = sb.run(job("", d / "k.cpp", d / "ref.py", time_reference=True), timeout_s=30)
    finally:
        sb.close()
    assert res["status"] == "crashed"
    assert res["error"] == (f"{d / 'ref.py'}: contender() ended the process timing it (exit "
                            "code 3); it must return its result (no os._exit, sys.exit or "
                            "abort): fix it")


# -- 2: the too_slow line states what happened ------------------------------------------------
SLOW = re.compile(r"one call takes ([\d.e+-]+) ms; ([\d.e+-]+) s of the timing\.timeout_s=0\.001 "
                  r"s budget were spent \(.*\) when (.+) \(about ([\d.e+-]+) s\) did not fit; "
                  r"(measured with (\d+) samples?|its first call's time is the figure) "
                  r"\(min_samples=5\)\. Not a hang: raise "
                  r"timing\.timeout_s to measure it fully")


def test_the_too_slow_line_states_the_budget_it_spent(tmp_path):
    """`timing.timeout_s: 0.001`: before, "one call takes 0.01922 ms: ... need about
    0.000135 s, more than timing.timeout_s=0.001 s" (0.000135 s is not more than 0.001 s).
    Now the line gives the budget spent when the cut came, which with what did not fit
    passes the budget."""
    d = sweep(tmp_path)
    j = job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp", d / "ref.py",
            timing={**TIMING, "timeout_s": 0.001})
    h = Harness("cpu")
    for res in (h.run(j), h.run({**j, "time_reference": True})):
        assert res["status"] == "too_slow", res
        m = SLOW.fullmatch(res["error"])
        assert m, res["error"]
        call_ms, spent, where, need, _, n = m.groups()
        assert float(spent) + float(need) >= 0.001 * 0.999 and float(need) > 0
        assert int(n or 1) == res["n_samples"] >= 1
        assert where in ("the check's call 2", "the first sample", "the next sample")


# -- 6: --arch out of range -------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["0", "-1", "9999", "99999", "abc", "1e3", ""])
def test_preflight_arch_is_bounded(tmp_path, arch):
    """0 read as the default sm_90, -1 and 99999 reached nvcc; now one line naming the flag,
    the format and the range, before anything is built."""
    from click.testing import CliRunner

    from kopt.cli.main import main

    res = CliRunner().invoke(main, ["preflight", str(sweep(tmp_path)), f"--arch={arch}"])
    assert res.exit_code == 2 and res.exception.__class__ is SystemExit
    assert res.output.splitlines()[-1] == (
        f"Error: Invalid value for '--arch': {arch!r} is not an SM arch: give major*10+minor, "
        "30 to 129 (e.g. 90 for sm_90, 120 for sm_120)"), res.output


# -- 7: a closed pipe -------------------------------------------------------------------------
def _kopt(args, tmp_path, **kw):
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, **kw)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_a_closed_pipe_ends_quietly(tmp_path, fmt):
    """`kopt query ... | head -1` said "error: : Broken pipe" and exited 2. Now nothing on
    stderr and 141 (128 + SIGPIPE), as Unix tools. 2M rows: more than any pipe holds."""
    (tmp_path / "store").mkdir()
    p = _kopt(["-m", "kopt.cli.main", "query", "--store", str(tmp_path / "store"), "--format", fmt,
               "select * from range(2000000)"], tmp_path)
    assert p.stdout.readline()  # the reader takes one line and goes
    p.stdout.close()
    err = p.stderr.read().decode()
    assert (p.wait(timeout=120), err) == (141, "")


def test_rich_output_to_a_closed_pipe_ends_quietly(tmp_path):
    """A table or any rich line (`kopt catalog | head -1`): rich exited 1; now 141 and
    nothing on stderr, like the rest. The pipe's reader is gone before the write."""
    code = ("import os, sys\nr, w = os.pipe()\nos.close(r)\nos.dup2(w, 1)\n"
            "from kopt.cli.main import out\nout.print('x' * 100)\nprint('not reached')\n")
    p = _kopt(["-c", code], tmp_path)
    out, err = p.communicate(timeout=120)
    assert (p.returncode, err.decode()) == (141, "")


# -- 8: a claim that names a method twice ----------------------------------------------------
@pytest.mark.parametrize("claim,lines", [
    ("compute.tensor_core,compute.tensor_core",
     ["one_method_per_axis: compute.tensor_core is claimed 2 times; claim it once",
      "arch_gate: compute.tensor_core is GPU hardware (sm_70 or newer); the device is a CPU"]),
    ("compute.foo, compute.foo,compute.foo",
     ["one_method_per_axis: compute.foo is claimed 3 times; claim it once",
      "unknown_method: compute.foo is not a catalog method (`kopt catalog` lists them)"])])
def test_a_method_claimed_twice_is_one_line_per_rule(claim, lines):
    """Before, every rule the method broke was printed once per mention (two identical
    arch_gate / unknown_method lines), after "X and X are all on the compute axis"."""
    from kopt.core.claims import check_claim, parse_claim

    assert check_claim(parse_claim(claim)).lines() == lines


# -- 1: the store deleted while a sweep writes it ----------------------------------------------
def test_a_store_deleted_mid_run_is_written_again(tmp_path):
    """`rm -rf` of the store while a sweep runs: before, the rows flushed so far (the run's
    `running` record, its source and its reference rows) vanished, and so did the run's
    lock (a second writer could take a new one), with no word. Now the next flush writes
    them again, takes the lock again and says so in one line."""
    import shutil
    import warnings

    from kopt.store.database import Database, query
    from kopt.store.files import StoreWarning

    root = tmp_path / "store"
    db = Database(root)
    w = db.writer("s", "r1", flush_rows=1000)
    with db.lock("r1"):
        w.add("runs", [{"run_id": "r1", "sweep": "s", "event": "running"}])
        w.add("reference", [{"run_id": "r1", "sweep": "s", "dims": f'{{"N": {n}}}',
                             "median_ms": 1.0 + n} for n in (1, 2)])
        w.flush()
        shutil.rmtree(root)
        w.add("candidates", [{"run_id": "r1", "sweep": "s", "job_key": "j1", "status": "ok"}])
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            w.flush()
        assert [str(x.message) for x in seen if x.category is StoreWarning] == [
            f"{root}: 2 file(s) of run r1 were removed while it ran (the store folder deleted "
            "or moved?); kopt wrote them again (2 reference, 1 runs rows) and took the run's "
            "lock again; rows of other runs in that folder are not kopt's to restore"]
        assert query("select count(*) from reference", root)[1] == [(2,)]
        assert query("select count(*) from runs", root)[1] == [(1,)]
        assert query("select count(*) from candidates", root)[1] == [(1,)]
        other = subprocess.run(  # a second writer of the run is refused again
            [sys.executable, "-c", "import sys; from kopt.store.files import RunLock, RunLocked\n"
             "try:\n    RunLock(sys.argv[1], 'r1').acquire(wait_s=0)\n"
             "except RunLocked:\n    sys.exit(3)", str(root)],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
        assert other.returncode == 3
        w.flush()  # nothing removed since: no second note, nothing written twice
        assert query("select count(*) from reference", root)[1] == [(2,)]



def test_a_closed_stderr_pipe_silences_and_the_command_carries_on(tmp_path):
    """`kopt sweep ... 2>&1 | head -1`: rich exited 1 at the next progress line, mid-sweep
    (rows not yet flushed were lost). Now stderr's console goes quiet and the command goes
    on to its end."""
    code = ("import os\nr, w = os.pipe()\nos.close(r)\nos.dup2(w, 2)\n"
            "from kopt.cli.main import console\nconsole.print('x' * 100)\nconsole.print('y')\n"
            "print('carried on', flush=True)\n")
    p = _kopt(["-c", code], tmp_path)
    out, _ = p.communicate(timeout=120)
    assert (p.returncode, out.decode()) == (0, "carried on\n")
