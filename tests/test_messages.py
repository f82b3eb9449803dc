"""Messages and figures a first user meets: a submitted version's compiler error, the noise
line's cause, one-line YAML errors, what a --resume found changed, empty tables, `kopt serve
status` with no service, one name rule, the report's figures, the startup phase, export's
size order and plain numbers in triage's tables."""

from __future__ import annotations

from types import SimpleNamespace

from click.testing import CliRunner

from kopt import submit
from kopt.cli import main
from workers.records import BuildResult

GCC = ("v2.cpp: In function 'void solve(const float*, float*, int)':\n"
       "v2.cpp:5:51: error: expected ';' before 'SYNTAXERR'\n"
       "    5 |     y[i] = x[i] SYNTAXERR;\n")


def test_a_submitted_version_that_does_not_compile_prints_the_compilers_first_error(
        tmp_path, monkeypatch):
    src = tmp_path / "v2.cpp"
    src.write_text('extern "C" void solve(const float* x, float* y, int n) {}\n')
    version = SimpleNamespace(name="v2.cpp", source_hash="abc123")
    sub = SimpleNamespace(iteration=2, versions=[version], created={"abc123": ["c1", "c2"]})

    def run(root, run_id, it, try_no, observers, address=None, sweep=None):
        obs = observers[0]
        obs.on_start(1, 4, [])
        obs.on_build(BuildResult("b1", False, error=GCC), 4)
        return sub, None

    monkeypatch.setattr(submit, "open_run", lambda root, run_id: object())
    monkeypatch.setattr(submit, "record", lambda *a, **k: (2, 1))
    monkeypatch.setattr(submit, "run_recorded", run)
    res = CliRunner().invoke(main, ["submit", "r1", "--store", str(tmp_path / "st"),
                                    "--source", str(src), "--methods",
                                    "compute.launch_config"])
    assert res.exit_code == 0, res.output
    assert ("nothing compiled (4 compile errors); the compiler's first error: v2.cpp:5:51: "
            "error: expected ';' before 'SYNTAXERR'") in res.output
    assert "v2.cpp (source abc123, iteration 2, try 1): c1 c2" in res.output

