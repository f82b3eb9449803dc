"""The reference as a contender (ref.py's ``contender``, else its
``reference``, timed by the harness as candidates are, one row per problem size and device
class), every candidate's speed against it, derived rates and share of the device's peak,
and the measured error of every candidate against the reference."""

import json
import shutil
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_harness import TIMING, artifact, job

from conftest import write_sweep
from kopt.cli.main import main
from kopt.core.spec import load_sweep
from kopt.driver.sweep import run_sweep
from kopt.run.devices import peaks
from kopt.store.database import Database, query
from kopt.tools.report import write_report

ROOT = Path(__file__).resolve().parents[1]

SCALE = '''
extern "C" void solve(const float* x, float* y, int N) {
    for (int i = 0; i < N; ++i) y[i] = 2.0f * x[i] * (1.0f + 0x1p-12f);
}
'''
REF = '''
import torch

def reference(x, N):
    return 2 * x.double()

def contender(x, N):
    return 2 * x * (1 + 2 ** -10)
'''


def _sweep(tmp_path: Path, ref: str = REF) -> Path:
    return write_sweep(tmp_path / "scale", "kernel: k.cpp\ndims: [{N: 4096}]\n",
                       {"k.cpp": SCALE, "ref.py": ref})


def test_the_reference_is_timed_by_the_candidates_timing_path(tmp_path):
    """The contender's samples come from Harness.time (the same warm-up, stopping rule and
    flush before every sample); it is not verified against the tolerance (it returns its
    result rather than writing solve's outputs, which stay poisoned) and its error against
    reference() is measured."""
    from workers.harness import Harness
    from workers.timing import summarize

    d = _sweep(tmp_path)
    h = Harness("cpu")
    real, flushed = h.flush, []
    h.flush = lambda buf: (flushed.append(buf), real(buf))
    j = job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp", d / "ref.py",
            time_reference=True)
    res = h.run(j)
    assert res["status"] == "ok" and res["impl"] == "contender", res
    assert TIMING["min_samples"] <= res["n_samples"] <= TIMING["max_samples"]
    assert len(res["samples_ms"]) == res["n_samples"] == len(flushed)
    assert res["median_ms"] == summarize(res["samples_ms"]).median_ms > 0
    assert res["warmup_runs"] >= 2
    assert res["max_rel_err"] == pytest.approx(2 ** -10, rel=1e-3)
    assert res["max_abs_err"] > 0
    # no contender: reference() itself is timed, and agrees with itself
    d2 = _sweep(tmp_path / "plain", REF.split("def contender")[0])
    res = h.run(job(j["artifact"], d2 / "k.cpp", d2 / "ref.py", time_reference=True))
    assert res["status"] == "ok" and res["impl"] == "reference"
    assert (res["max_abs_err"], res["max_rel_err"]) == (0.0, 0.0)


def test_a_candidates_relative_error_is_measured(tmp_path):
    """The check stores what a candidate costs in accuracy, not only that it
    passed: y = 2x(1 + 2^-12) against 2x in float64 is 2^-12 off, relatively."""
    from workers.harness import Harness

    d = _sweep(tmp_path)
    res = Harness("cpu").run(job(artifact(tmp_path, d / "k.cpp", 0, "k.cpp"), d / "k.cpp",
                                 d / "ref.py",
                                 tolerance={"atol": 0.0, "rtol": 1e-3}))
    assert res["status"] == "ok"
    assert res["max_rel_err"] == pytest.approx(2 ** -12, rel=1e-3)


def test_a_cpu_sweep_stores_the_reference_and_every_table_compares_with_it(ray_local,
                                                                           tmp_path):
    d = tmp_path / "vector_add"
    shutil.copytree(ROOT / "sweeps" / "vector_add", d)
    # two problem sizes of ~1 ms calls (the replay rule can name an honest candidate whose
    # calls are a few microseconds on a loaded machine; which candidates are `ok` does not
    # matter here, only that the tables compare them with the stored reference)
    spec = (d / "sweep.yaml").read_text().replace(
        "    - {N: 2097152}", "    - {N: 262144}\n    - {N: 524288}")
    (d / "sweep.yaml").write_text(spec)
    store = tmp_path / "store"
    s = run_sweep(load_sweep(d), store, backend="cpu", max_candidates=2)
    assert sum(s.status_counts.values()) == 4
    _, refs = query("select device_class, dims, impl, status, median_ms, n_samples, "
                    "samples_ms, flops, tflops, gbps, pct_peak_flops, run_id from reference "
                    "order by dims", store)
    classes = {r[0] for r in refs}
    assert len(refs) == 2 and len(classes) == 1 and classes.pop().startswith("cpu-")
    assert [json.loads(r[1]) for r in refs] == [{"N": 262144}, {"N": 524288}]
    for _, dims, impl, status, med, n, xs, flops, tflops, gbps, pct, run_id in refs:
        assert (impl, status, run_id) == ("contender", "ok", s.run_id)
        assert n == len(xs) >= 5 and med == pytest.approx(statistics.median(xs), rel=1e-12)
        n_el = json.loads(dims)["N"]
        assert flops == n_el and tflops == pytest.approx(n_el / (med * 1e9), rel=1e-12)
        assert gbps == pytest.approx(12 * n_el / (med * 1e6), rel=1e-12)
        assert pct is None  # a CPU's peak is not known
    ref_ms = {r[1]: r[4] for r in refs}
    r = CliRunner().invoke(main, ["best", "vector_add", "--store", str(store),
                                  "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("["):])
    assert len(rows) == 2
    for b in rows:
        assert b["reference_ms"] == ref_ms[b["dims"]]
        assert b["vs_reference"] == pytest.approx(ref_ms[b["dims"]] / b["median_ms"],
                                                  rel=1e-12)
        assert b["tflops"] == pytest.approx(json.loads(b["dims"])["N"]
                                            / (b["median_ms"] * 1e9), rel=1e-12)
        assert b["max_abs_err"] == 0.0 and b["max_rel_err"] == 0.0
    md = write_report(s.run_id, store, tmp_path / "report").read_text()
    assert "## The reference" in md and "| contender | ok |" in md
    assert all(f"| {b['vs_reference']:.3f}x |" in md for b in rows)
    # opt-out: no reference row, nothing to compare with
    (d / "sweep.yaml").write_text(spec + "\nreference_timing: false\n")
    s2 = run_sweep(load_sweep(d), store, backend="cpu", max_candidates=2)
    _, n = query(f"select count(*) from reference where run_id = '{s2.run_id}'", store)
    assert n == [(0,)]
    _, n = query("select count(*) filter (where status = 'ok'), count(vs_reference) "
                 f"from candidates where run_id = '{s2.run_id}'", store)
    assert n[0][0] > 0 and n[0][1] == 0


def test_vs_reference_and_share_of_peak_come_from_the_stored_rows(tmp_path):
    """The candidates view: vs_reference = reference median / candidate median; % of peak =
    the candidate's rate over the peak stored with the reference row; a reference that was
    not `ok` gives no ratio (its peak still applies)."""
    db = Database(tmp_path)
    dims = json.dumps({"N": 1})
    cand = {"sweep": "s", "iteration": 1, "rung": 0, "job_key": "j", "candidate_id": "c",
            "is_baseline": True, "dims": dims, "device_class": "h200-sm90", "status": "ok",
            "median_ms": 2.0, "flops": 1e9, "bytes": 4e9, "created_at": None}
    ref = {"sweep": "s", "dims": dims, "device_class": "h200-sm90", "status": "ok",
           "median_ms": 4.0, "flops": 1e9, "bytes": 4e9, "peak_tflops": 1.0,
           "peak_gbps": 4000.0}
    db.commit("candidates", "s", "r1", [{**cand, "run_id": "r1"}])
    db.commit("reference", "s", "r1", [{**ref, "run_id": "r1"}])
    db.commit("candidates", "s", "r2", [{**cand, "run_id": "r2"}])
    db.commit("reference", "s", "r2", [{**ref, "run_id": "r2", "status": "too_slow"}])
    one, two = (db.best("s", rid)[0] for rid in ("r1", "r2"))
    assert (one["vs_reference"], one["reference_ms"]) == (2.0, 4.0)
    assert one["tflops"] == 0.5 and one["pct_peak_flops"] == pytest.approx(50.0)
    assert one["gbps"] == 2000.0 and one["pct_peak_bw"] == pytest.approx(50.0)
    assert (two["vs_reference"], two["pct_peak_flops"]) == (None, pytest.approx(50.0))
    _, rows = db.query("select tflops, gbps, pct_peak_flops from reference where run_id = 'r1'")
    assert rows == [(0.25, 1000.0, pytest.approx(25.0))]


def test_peaks_are_the_datasheets_and_unknown_is_none():
    assert peaks("NVIDIA H200", "float32") == (67.0, 4800.0)
    assert peaks("NVIDIA H200", "bfloat16") == (989.5, 4800.0)
    assert peaks("NVIDIA H200 NVL", "float32") == (60.0, 4800.0)
    assert peaks("NVIDIA H100 80GB HBM3", "float32") == (67.0, 3350.0)
    assert peaks("NVIDIA H100 PCIe", "float32") == (51.0, 2000.0)
    assert peaks("NVIDIA H200", "int8_t") == (None, 4800.0)
    assert peaks("Intel(R) Xeon(R) Processor", "float32") == (None, None)
    assert peaks(None, None) == (None, None)


def test_reference_timing_is_validated(tmp_path):
    from conftest import assert_spec_error

    d = _sweep(tmp_path)
    assert load_sweep(d).reference_timing is True
    (d / "sweep.yaml").write_text("kernel: k.cpp\ndims: [{N: 4096}]\nreference_timing: false\n")
    assert load_sweep(d).reference_timing is False
    (d / "sweep.yaml").write_text("kernel: k.cpp\ndims: [{N: 4096}]\nreference_timing: nope\n")
    assert_spec_error(d, "reference_timing", "valid boolean")


@pytest.mark.parametrize("impl", ["reference", "contender"])
def test_best_says_when_its_vs_reference_is_over_refpys_reference(tmp_path, impl):
    """`kopt best` under a `vs reference` figure over ref.py's ``reference()`` (it defines no
    ``contender()``) says that is no library's speed and how to time one (a new user read
    6.7x over a float64 reference as a speedup); over a ``contender()``, no such line."""
    from click.testing import CliRunner

    from kopt.cli.main import REFERENCE_TIMED_NOTE, main

    db = Database(tmp_path)
    dims = json.dumps({"N": 1})
    db.commit("candidates", "s", "r1", [{
        "run_id": "r1", "sweep": "s", "iteration": 1, "rung": 0, "job_key": "j",
        "candidate_id": "c", "is_baseline": True, "dims": dims, "device_class": "cpu-x86_64",
        "status": "ok", "median_ms": 2.0, "created_at": None}])
    db.commit("reference", "s", "r1", [{"run_id": "r1", "sweep": "s", "dims": dims,
                                        "device_class": "cpu-x86_64", "status": "ok",
                                        "impl": impl, "median_ms": 13.0}])
    r = CliRunner().invoke(main, ["best", "s", "--store", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "6.500x" in r.stdout
    said = " ".join(r.stdout.split())
    assert (" ".join(REFERENCE_TIMED_NOTE.split()) in said) == (impl == "reference"), said
