"""ref.py's reference(), inputs() and contender() as the harness runs them: one that raises,
ends its process, never returns, returns odd inputs or an output without values is named in
one line (its file and line, and the fix), and a preflight ended by a signal leaves no
harness behind."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest
from click.testing import CliRunner

from conftest import ROOT, write_sweep
from kopt.cli.main import main

ADD = 'extern "C" void solve(const float* x, float* y, int N) { for (int i = 0; i < N; ++i) y[i] = x[i]; }\n'  # noqa: E501


REF = "def reference(x, N):\n    return x\n"


def base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n", **files):
    return write_sweep(tmp_path / "s", yaml, {"add.cpp": ADD, "ref.py": REF, **files})


LOOP_REF = "def reference(x, N):\n    while True:\n        pass\n"


def _harness_of(pid: int) -> int | None:
    """The pid of the `workers.harness` process whose parent is ``pid``, if any."""

    for q in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{q}/stat").read()
            cmd = open(f"/proc/{q}/cmdline", "rb").read()
        except OSError:
            continue
        if b"workers.harness" in cmd and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            return int(q)
    return None


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("make, why", [
    ("(x + 1).to('meta')", "reference() returned output 'y' as a meta tensor"),
    ("(x + 1).to_sparse()", "reference() returned output 'y' as a torch.sparse_coo tensor"),
], ids=["meta", "sparse"])
def test_a_reference_output_without_values_is_one_line(tmp_path, make, why):
    from kopt.core.contract import parse_signature_file
    from workers.harness import Harness, JobError

    d = write_sweep(tmp_path / "s", "kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N], y: [N]}\n",
                    {"add.cpp": ADD,
                     "ref.py": f"import torch\ndef reference(x, N):\n    return {make}\n"})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0,
           "args": {"x": [64], "y": [64]}, "scalars": {}, "signature": sig,
           "tolerance": {"atol": 0, "rtol": 0},
           "timing": {"timeout_s": 10}, "prepare_only": True}
    with pytest.raises(JobError) as e:
        Harness("cpu").run(job)
    assert str(e.value) == f"ref.py: {why}; return a dense tensor with values"


@pytest.mark.parametrize("make, why", [
    ("torch.randn(N, device='meta')", "as a meta tensor"),
    ("torch.randn(N).to_sparse()", "as a torch.sparse_coo tensor"),
    ("(_ for _ in ()).throw(KeyboardInterrupt())", "inputs() raised KeyboardInterrupt()"),
], ids=["meta", "sparse", "base-exception"])
def test_odd_inputs_are_the_references_fault_in_one_line(tmp_path, make, why):
    import dataclasses

    from kopt.core.contract import parse_signature_file
    from workers.harness import Harness, JobError

    d = base(tmp_path, **{"ref.py": "import torch\n"
                                    f"def inputs(seed, N):\n    return {{'x': {make}}}\n"
                                    "def reference(x, N):\n    return x\n"})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0, "args": {},
           "scalars": {}, "signature": sig, "tolerance": {"atol": 0, "rtol": 0},
           "timing": {"timeout_s": 10}, "prepare_only": True}
    with pytest.raises(JobError, match=why.replace("(", r"\(").replace(")", r"\)")):
        Harness("cpu").run(job)


@pytest.mark.parametrize("where, line, code", [
    ("inputs", 3, "raise ValueError('bad seed')"),
    ("reference", 5, "return x.view(3, -1)"),
], ids=["inputs", "reference"])
def test_a_reference_that_raises_names_its_line(tmp_path, where, line, code):
    """New-user trial: `ref.py: reference() raised TypeError(...)` did not say where in
    ref.py; the line of ref.py the error came from (the deepest frame in ref.py: a helper of
    its own, not torch's frames below it) and its code are named."""
    import dataclasses

    from kopt.core.contract import parse_signature_file
    from workers.harness import Harness, JobError

    ref = ("import torch\n"
           "def inputs(seed, N):\n"
           + ("    raise ValueError('bad seed')\n" if where == "inputs"
              else "    return {'x': torch.randn(N)}\n")
           + "def helper(x):\n    return x.view(3, -1)\n"
           "def reference(x, N):\n    return helper(x)\n")
    d = base(tmp_path, **{"ref.py": ref})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0, "args": {},
           "scalars": {}, "signature": sig, "tolerance": {"atol": 0, "rtol": 0},
           "timing": {"timeout_s": 10}, "prepare_only": True}
    with pytest.raises(JobError) as e:
        Harness("cpu").run(job)
    msg = str(e.value)
    raised = (ValueError("bad seed") if where == "inputs" else
              RuntimeError("shape '[3, -1]' is invalid for input of size 64"))
    assert msg.endswith(f"ref.py: {where}() raised {raised!r} at ref.py line {line}: `{code}`"), \
        msg


def test_an_input_of_the_wrong_size_names_the_reference_and_the_spec(tmp_path):
    """Was "input 'x' has 63 elements; args says [64]": no file, no fix."""
    import dataclasses

    from kopt.core.contract import parse_signature_file
    from workers.harness import Harness, JobError

    d = base(tmp_path, **{"ref.py": "import torch\n"
                                    "def inputs(seed, N):\n    return {'x': torch.ones(N - 1)}\n"
                                    "def reference(x, N):\n    return x\n"})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0, "args": {"x": ["N"]},
           "scalars": {}, "signature": sig, "tolerance": {"atol": 0, "rtol": 0},
           "timing": {"timeout_s": 10}, "prepare_only": True}
    with pytest.raises(JobError, match=re.escape("ref.py: inputs() returned 'x' with 63 "
                                                 "elements, not the 64 of its shape [64] in "
                                                 "sweep.yaml args: make them agree")):
        Harness("cpu").run(job)


@pytest.mark.parametrize("end, how", [("os._exit(3)", "exit code 3"),
                                      ("os.abort()", "killed by SIGABRT")],
                         ids=["os-exit", "abort"])
def test_a_reference_that_ends_the_process_is_named_before_anything_is_built(tmp_path, end, how):
    """A reference() calling os._exit was reported as the candidate `crashed: harness died:
    exit code 3` (preflight built the baseline first and showed it as the crash)."""
    import dataclasses

    from kopt.core.contract import parse_signature_file
    from workers.sandbox import Sandbox

    d = base(tmp_path, **{"ref.py": "import os\nimport torch\n"
                                    "def inputs(seed, N):\n    return {'x': torch.ones(N)}\n"
                                    f"def reference(x, N):\n    {end}\n"})
    ref = (d / "ref.py").resolve()
    r = CliRunner().invoke(main, ["preflight", str(d), "--backend", "cpu"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert " ".join(r.output.split()).startswith(
        f"error: {ref}: inputs()/reference() failed for dims {{'N': 64}} (error): {ref}: the "
        f"harness process ended ({how}) while its inputs()/reference() ran, before any "
        "candidate code was called; they must return (no os._exit, sys.exit or abort): fix "
        "them"), r.output
    assert "nothing was built" in r.output and "compile_s" not in r.output
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    sb = Sandbox("cpu")  # a candidate's job (as a sweep's): the reference's fault, not its own
    try:
        out = sb.run({"reference": str(ref), "dims": {"N": 64}, "seed": 0, "args": {},
                      "scalars": {}, "signature": sig, "tolerance": {"atol": 0, "rtol": 0},
                      "timing": {"timeout_s": 10}, "artifact": "/nonexistent.so"}, 10)
    finally:
        sb.close()
    assert out["status"] == "error" and out["error"].startswith(
        f"{ref}: the harness process ended ({how}) while its inputs()/reference() ran"), out


@pytest.mark.parametrize("keys, shown", [("{'x': t, 'xx': t}", "'xx'"),
                                         ("{'x': t, 'N': t, 3: t}", "'N', 3")],
                         ids=["typo", "scalar-and-int"])
def test_a_key_inputs_returns_that_no_argument_has_is_refused(tmp_path, keys, shown):
    """inputs() returning a key no argument has (a typo `xx` beside `x`, the scalar `N`) was
    ignored silently."""
    import dataclasses

    from kopt.core.contract import parse_signature_file
    from workers.harness import Harness, JobError

    d = base(tmp_path, **{"ref.py": "import torch\ndef inputs(seed, N):\n"
                                    "    g = torch.Generator().manual_seed(seed)\n"
                                    "    t = torch.randn(N, generator=g)\n"
                                    f"    return {keys}\n"
                                    "def reference(x, N):\n    return x\n"})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0, "args": {},
           "scalars": {}, "signature": sig, "tolerance": {"atol": 0, "rtol": 0},
           "timing": {"timeout_s": 10}, "prepare_only": True}
    with pytest.raises(JobError, match=re.escape(
            f"ref.py: inputs() returned {shown}, which no pointer argument of solve is named; "
            "its keys are argument names: x, y (rename or drop the rest)")):
        Harness("cpu").run(job)


SAXPY = ('extern "C" void solve(const float* x, float* y, float a, int N) '
         '{ for (int i = 0; i < N; ++i) y[i] += a * x[i]; }\n')
SAXPY_INPUTS = ("import torch\ndef inputs(seed, N):\n"
                "    g = torch.Generator().manual_seed(seed)\n"
                "    return {'x': torch.randn(N, generator=g), 'y': torch.randn(N, generator=g)}\n")


@pytest.mark.parametrize("returned, shown", [("{'out': a * x + y}", "['out']"),
                                             ("{'y': a * x + y, 'z': x}", "['z']"),
                                             ("{}", "")],
                         ids=["misnamed", "extra", "empty"])
def test_a_reference_key_that_is_no_output_is_refused(tmp_path, returned, shown):
    """reference() keying its result by a name solve does not write: a new user's
    {"out": ...} for saxpy's in/out output `y` left `y` out, which made its unchanged input
    the expected output: every correct kernel was `wrong_result` and one that did nothing
    was `ok` and named best. Now one line names the keys, the outputs and the fix; so does
    an empty dict."""
    from kopt.core.contract import parse_signature_file
    from workers.harness import Harness, JobError

    d = write_sweep(tmp_path / "s", "kernel: saxpy.cpp\ndims: [{N: 64}]\nscalars: {a: 2.5}\n"
                    "args: {x: [N], y: [N]}\n",
                    {"saxpy.cpp": SAXPY, "ref.py": SAXPY_INPUTS + "def reference(x, y, a, N):\n"
                     f"    return {returned}\n"})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "saxpy.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0,
           "args": {"x": [64], "y": [64]}, "scalars": {"a": 2.5}, "signature": sig,
           "tolerance": {"atol": 1e-5, "rtol": 1e-5}, "timing": {"timeout_s": 10},
           "prepare_only": True}
    with pytest.raises(JobError) as e:
        Harness("cpu").run(job)
    assert str(e.value) == (f"ref.py: reference() returned {shown}, which solve does not write "
                            "(its outputs: ['y']); key each output by its argument's name in "
                            "solve, or return one tensor" if shown else
                            "ref.py: reference() returned an empty dict; return solve's "
                            "outputs (['y']) keyed by name, or one tensor")


def test_a_reference_that_never_returns_is_named_within_timeout_s(tmp_path):
    """`kopt preflight` waited 600 s in silence whatever timing.timeout_s said."""
    import subprocess
    import sys
    import time

    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            "timing: {timeout_s: 3}\n", **{"ref.py": LOOP_REF})
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kopt.cli.main", "preflight", str(d)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert time.monotonic() - t0 < 120 and p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert (f"{d / 'ref.py'}: inputs()/reference() did not return within 3 s, before any "
            "candidate code was called") in p.stderr
    assert "nothing was built" in p.stderr


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_preflight_ended_by_a_signal_leaves_no_harness(tmp_path, sig):
    """Ctrl-C or SIGTERM during a reference that never returns left the harness
    spinning forever (reparented to init, one core at 100 %)."""
    import signal
    import subprocess
    import sys
    import time

    d = base(tmp_path, yaml="kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n"
                            "timing: {timeout_s: 300}\n", **{"ref.py": LOOP_REF})
    p = subprocess.Popen([sys.executable, "-m", "kopt.cli.main", "preflight", str(d)], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while (h := _harness_of(p.pid)) is None:
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.2)
    time.sleep(3)  # the harness is up, ref.py's reference() spins
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=60)
    for _ in range(50):
        if not _alive(h):
            break
        time.sleep(0.2)
    else:
        os.kill(h, signal.SIGKILL)
        raise AssertionError(f"harness {h} outlived kopt preflight")
    if sig == "SIGINT":
        assert p.returncode == 130 and err == "error: interrupted (Ctrl-C)\n", err


def test_a_contender_that_raises_names_its_line(tmp_path):
    import importlib.util
    from types import SimpleNamespace

    from workers.harness import JobError, RefCall

    f = tmp_path / "ref.py"
    f.write_text("def contender():\n    return 1 / 0\n")
    spec = importlib.util.spec_from_file_location("ref_contender", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(JobError) as e:
        RefCall(mod.contender, [], "ref.py").run(SimpleNamespace(inputs={}), {})
    assert str(e.value) == ("ref.py: contender() raised ZeroDivisionError('division by zero') "
                            "at ref.py line 2: `return 1 / 0` (timed as the reference)")


@pytest.mark.parametrize("yaml, ref_extra, what, raised", [
    ("kernel: add.cpp\ndims: [{N: 64}]\nargs: {x: [N]}\n",
     "def stress_inputs(seed, N):\n    raise ValueError('no stress here')\n",
     "stress_inputs()/reference() failed for dims {'N': 64}",
     "stress_inputs() raised ValueError('no stress here') at ref.py line 8"),
    ("kernel: add.cpp\ndims: [{N: 64}]\ncheck_dims: [{N: 65}]\nargs: {x: [N]}\n",
     "",
     "inputs()/reference() at sweep.yaml's check_dims failed for dims {'N': 65}",
     "inputs() raised ValueError('N must be a multiple of 8') at ref.py line 3"),
], ids=["stress_inputs", "check_dims"])
def test_what_contests_check_on_is_run_before_anything_is_built(tmp_path, yaml, ref_extra,
                                                                 what, raised):
    """A ref.py whose stress_inputs() raised (or whose inputs() failed at a check_dims size)
    was met only in the run's first contest, which then dropped every contender: the sweep
    measured everything and named nothing. Both are run once with the dims' own check, and a
    failure stops the sweep in one line before any build."""
    ref = ("import torch\ndef inputs(seed, N):\n"
           "    if N % 8: raise ValueError('N must be a multiple of 8')\n"
           "    return {'x': torch.ones(N)}\n"
           "def reference(x, N):\n    return x\n" + ref_extra)
    d = base(tmp_path, yaml, **{"ref.py": ref})
    r = CliRunner().invoke(main, ["sweep", str(d), "--backend", "cpu", "--store",
                                  str(tmp_path / "st")])
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert out.startswith(f"error: {(d / 'ref.py').resolve()}: {what} on cpu-"), out
    assert raised in out and "nothing was built or measured" in out, out
    assert not list((tmp_path / "st").rglob("candidates*")), "a build or a row was made"


def test_a_probe_leaves_the_harness_cached_sets_alone(tmp_path):
    """The driver's probes (stress_inputs(), check_dims) used to go through the harness's
    data cache of two entries, evicting the dims' sets a prestarted harness had made ahead:
    every CPU vector_add run took 2.2 s more (1.7 s -> 3.9 s for one candidate, and a suite
    minutes longer). A probe now makes the check's two sets, checks them, and keeps nothing."""
    import dataclasses

    from kopt.core.contract import parse_signature_file
    from workers.harness import N_SETS, Harness

    ref = ("import torch\ndef inputs(seed, N):\n    return {'x': torch.ones(N) + seed}\n"
           "def stress_inputs(seed, N):\n    return {'x': torch.full((N,), 1e6) + seed}\n"
           "def reference(x, N):\n    return x\n")
    d = base(tmp_path, **{"ref.py": ref})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "add.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0, "args": {},
           "scalars": {}, "signature": sig, "tolerance": {"atol": 0, "rtol": 0},
           "timing": {"timeout_s": 10}}
    h = Harness("cpu")
    kept = [h.prepare(job), h.prepare({**job, "dims": {"N": 32}})]
    probe = h.prepare({**job, "inputs_fn": "stress_inputs", "probe": True}, probe=True)
    assert len(probe.sets) == N_SETS and not probe.unseen
    assert float(probe.sets[0].inputs["x"][0]) == 1e6
    assert list(h.data.values()) == kept  # both still cached, the probe not
    assert len(kept[0].unseen) > 0


def test_a_timed_ref_py_function_missing_an_output_says_what_it_returned():
    """ref.py's timed function (contender, else reference) that does not return an output:
    the line says what it returned instead (it read "reference() must return output 'y'
    ... as reference() does" about reference() itself, naming neither the key it found nor
    the fix)."""
    import torch

    from workers.harness import JobError, RefCall

    def reference(x, y, a, N):
        return {"out": x}

    def contender(x, y, a, N):
        return x[:3]

    expected = {"y": torch.zeros(8)}
    said = []
    for fn in (reference, contender):
        with pytest.raises(JobError) as e:
            RefCall(fn, [], "ref.py").errors(fn(torch.zeros(8), None, 1.0, 8), expected)
        said.append(str(e.value))
    assert said == [
        "ref.py: reference() must return output 'y' as a tensor of 8 elements; it returned a "
        "dict with keys ['out']",
        "ref.py: contender() must return output 'y' as a tensor of 8 elements, as reference() "
        "does; it returned a tensor of 3 elements"]


@pytest.mark.parametrize("params, left", [("x, y, N", "'a'"), ("y, a, N", "'x'"),
                                          ("y, N", "'x', 'a'"), ("x, y, a, N", ""),
                                          ("**kw", "")],
                         ids=["scalar", "input", "both", "all", "kwargs"])
def test_a_reference_that_takes_no_scalar_or_input_is_said_in_a_note(tmp_path, params, left):
    """reference() without an input or a sweep.yaml scalar that solve gets (a new user's
    saxpy ``reference(x, y, N)`` ignored ``a`` without a word): a note names them (a
    reference may hold a value fixed on purpose, so not an error); none when it takes them
    all, or ``**kwargs``."""
    from kopt.core.contract import parse_signature_file
    from workers.harness import Harness

    d = write_sweep(tmp_path / "s", "kernel: saxpy.cpp\ndims: [{N: 64}]\nscalars: {a: 2.5}\n"
                    "args: {x: [N], y: [N]}\n",
                    {"saxpy.cpp": SAXPY, "ref.py": SAXPY_INPUTS + f"def reference({params}):\n"
                     "    v = {**locals(), **locals().get('kw', {})}\n"
                     "    return {'y': 2.5 * v['x'] + v['y'] if 'x' in v else v['y']}\n"})
    sig = [dataclasses.asdict(a) for a in parse_signature_file(d / "saxpy.cpp").args]
    job = {"reference": str(d / "ref.py"), "dims": {"N": 64}, "seed": 0,
           "args": {"x": [64], "y": [64]}, "scalars": {"a": 2.5}, "signature": sig,
           "tolerance": {"atol": 1e-5, "rtol": 1e-5}, "timing": {"timeout_s": 10},
           "prepare_only": True}
    res = Harness("cpu").run(job)
    assert res["status"] == "ok", res
    said = [n for n in res["notes"] if "reference() takes no" in n]
    if not left:
        assert said == [], said
        return
    one = "," not in left
    assert said == [f"ref.py: reference() takes no {left}, which solve gets: its expected "
                    f"outputs cannot depend on {'it' if one else 'them'}; add "
                    f"{'it' if one else 'them'} to reference()'s arguments unless it holds "
                    "the value fixed on purpose"], said
