"""ref.py as the harness and the load read it: encodings Python accepts (a UTF-8 BOM, a coding
line), contenders that are not functions or that end their process, and the too_slow line that
states the timing budget it spent. Each test failed before its fix."""

from __future__ import annotations

import re

import pytest
from test_harness import TIMING, artifact, job

from conftest import assert_spec_error, write_sweep
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


SLOW = re.compile(r"one call takes ([\d.e+-]+) ms; ([\d.e+-]+) s of the timing\.timeout_s=0\.001 "
                  r"s budget were spent \(.*\) when (.+) \(about ([\d.e+-]+) s\) did not fit; "
                  r"(measured with (\d+) samples?|its first call's time is the figure) "
                  r"\(min_samples=5\)\. Not a hang: raise "
                  r"timing\.timeout_s to measure it fully")


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
