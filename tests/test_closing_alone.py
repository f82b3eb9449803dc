"""The loop's closing when nothing beat the first baseline, and a harness answer no store
column holds: red-team round 10's findings as whole CPU sweeps (their own file: three sweeps,
run beside the other files' tests under pytest's --dist loadfile)."""

from __future__ import annotations

import json
import os
import shutil
import textwrap

from conftest import FIXTURES, ROOT
from kopt.core.spec import load_sweep
from kopt.driver.sweep import run_sweep
from kopt.loop.state import CLOSING_FAILED
from kopt.run.callbacks import ProgressCallback
from kopt.store.database import Database, query

DC = "cpu-" + os.uname().machine
VADD_REF = ROOT / "sweeps" / "vector_add" / "ref.py"  # with stress_inputs()
TIMING = ("timing: {warmup_ms: 5, min_samples: 5, max_samples: 10, target_rel_error: 0.05, "
          "timeout_s: 30}")


class Faults(ProgressCallback):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_fault(self, message: str) -> None:
        self.seen.append(message)


def _sweep(tmp_path, name: str, files: dict[str, str], yaml_text: str):
    d = tmp_path / name
    d.mkdir()
    for dst, src in files.items():
        shutil.copy(src, d / dst)
    (d / "sweep.yaml").write_text(textwrap.dedent(yaml_text))
    return load_sweep(d)


def _closing(store):
    _, rows = query("select state from iterations order by iteration desc, created_at desc "
                    "limit 1", store)
    return json.loads(rows[0][0])["closing"]


def test_a_first_baseline_with_a_patched_clock_is_not_named_best(ray_local, tmp_path):
    """The only candidate, the first baseline, has Python scale the harness's clock by
    1/100 (attack MODE 10 of tests/fixtures/faultpack/attacks.cpp). Nothing beat it, so no
    closing contest ran, and it was the loop's best at 100x its honest time. Now it is
    contested alone at the closing, where its witness turns (workers.witness: the CPU its
    calls on fresh inputs used, read from outside its process, against its samples) find
    it ``suspect``: the loop names no best and ``kopt best`` shows none."""
    pack = FIXTURES / "faultpack"
    sweep = _sweep(tmp_path, "clock", {f: pack / f for f in (
        "attacks.cpp", "coef.h", "replay_common.h", "ref.py")}, f"""
        name: patched_first
        kernel: attacks.cpp
        dims: [{{N: 32768}}]
        tolerance: {{atol: 1.0e-5, rtol: 1.0e-4}}
        args: {{x: [N], buf: [N], y: [N]}}
        params: {{MODE: [10]}}
        {TIMING}
        """)
    faults, store = Faults(), tmp_path / "store"
    run_sweep(sweep, store, backend="cpu", observers=[faults])
    closing = _closing(store)
    assert "best" not in closing and closing["note"].startswith(CLOSING_FAILED)
    (why,) = closing["dropped"].values()
    assert why.startswith("suspect: ") and "its calls on fresh inputs used at least" in why
    assert any("could not name the first baseline" in f for f in faults.seen), faults.seen
    assert Database(store).best("patched_first") == []


def test_a_first_baseline_wrong_where_only_the_closing_looks_is_not_named_best(
        ray_local, tmp_path):
    """The only candidate is exact on ref.py's inputs() at the sweep's size, but skips the
    tail of a size that is not a multiple of 1024 (check_dims) and zeroes values past 1e4
    (stress_inputs(), the second distribution): it was named best, which the contest's
    checks exist to prevent. Contested alone at the closing, it fails them."""
    here = FIXTURES / "closing_alone"
    sweep = _sweep(tmp_path, "tail", {"tail.cpp": here / "tail.cpp", "ref.py": VADD_REF},
                   f"""
        name: tail_first
        kernel: tail.cpp
        reference: ref.py
        dims: [{{N: 65536}}]
        check_dims: [{{N: 65539}}]
        tolerance: {{atol: 1.0e-6, rtol: 1.0e-6}}
        args: {{x: [N], y: [N], out: [N]}}
        params: {{U: [1]}}
        {TIMING}
        """)
    store = tmp_path / "store"
    s = run_sweep(sweep, store, backend="cpu")
    assert s.status_counts == {"ok": 1}  # its own job passed: only the closing looks there
    closing = _closing(store)
    assert "best" not in closing
    (why,) = closing["dropped"].values()
    assert why.startswith("wrong_result: ")
    assert Database(store).best("tail_first") == []


def _vadd(tmp_path, name: str):
    here = FIXTURES / "closing_alone"
    return _sweep(tmp_path, name, {"forge.cpp": here / "forge.cpp", "ref.py": VADD_REF},
                  f"""
        name: {name}
        kernel: forge.cpp
        reference: ref.py
        dims: [{{N: 65536}}]
        tolerance: {{atol: 1.0e-6, rtol: 1.0e-6}}
        args: {{x: [N], y: [N], out: [N]}}
        params: {{CHUNK: [16384, 262144]}}
        baseline: {{CHUNK: 16384}}
        {TIMING}
        """)


def _rows(store):
    _, rows = query("select params, status, error, median_ms, n_samples from candidates", store)
    _, run = query("select status from runs", store)
    return {json.loads(p)["CHUNK"]: (st, e, m, n) for p, st, e, m, n in rows}, run


def test_an_answer_forged_mid_job_is_a_crash_and_the_run_goes_on(ray_local, tmp_path,
                                                                 monkeypatch):
    """A candidate writes ``{"status": "ok", "n_samples": 2**40, ...}`` to its harness's
    answer pipe on its first call: taken as its job's answer, the Parquet write of the
    batch failed, the driver died and the run's other rows were lost (red-team round 10).
    The harness does not answer the ping after it (its own answer comes first): the job is
    ``crashed``, run again in a fresh harness, ``crashed`` again, and the run finishes."""
    monkeypatch.setenv("KOPT_PRESTART", "0")  # the forger finds the pipe on its command line
    store = tmp_path / "store"
    run_sweep(_vadd(tmp_path, "forged_answer"), store, backend="cpu", max_candidates=2)
    by, run = _rows(store)
    assert by[16384][0] == "ok" and by[16384][2] > 0
    status, error, median, n = by[262144]
    assert (status, median, n) == ("crashed", None, None)
    assert error.startswith("the harness did not answer a ping after its answer")
    assert run[-1] == ("finished",)


def test_a_figure_no_column_holds_is_an_error_row_and_the_run_goes_on(ray_local, tmp_path,
                                                                      monkeypatch):
    """An answer that passes the ping (code that also reads the harness's pipe can answer
    it: workers.harness "What is not caught") with a figure no column holds: the Parquet
    write of the batch failed and the run's rows were lost. That row alone is an ``error``
    naming the value, with no figure; the run finishes with its other rows. (The figure is
    set here, in the driver, on the outcome the device sent: no forger is needed.)"""
    from kopt.driver.sweep import Driver

    emit = Driver._emit

    def forged(self, job, outcome, info):
        if job.candidate.params.get("CHUNK") == 262144:
            outcome.n_samples = 2**40
        return emit(self, job, outcome, info)

    monkeypatch.setattr(Driver, "_emit", forged)
    sweep = _vadd(tmp_path, "unfit_figure")
    for p in sweep.root.glob("forge.cpp"):  # no forging in the kernel
        p.write_text(p.read_text().replace("#define FORGE_CHUNK 262144", "#define FORGE_CHUNK 1"))
    store = tmp_path / "store"
    run_sweep(load_sweep(sweep.root), store, backend="cpu", max_candidates=2)
    by, run = _rows(store)
    assert by[16384][0] == "ok" and by[16384][2] > 0
    status, error, median, n = by[262144]
    assert (status, median, n) == ("error", None, None)
    assert error.startswith("the harness answered n_samples=1099511627776, which the "
                            "candidates table cannot hold")
    assert run[-1] == ("finished",)
