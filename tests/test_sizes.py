"""Empty problem sizes are refused at load, and no output divides by a figure
that can be 0 (a 0 ms median, a 0 work figure)."""

from conftest import VADD_CPP, VADD_REF, assert_spec_error, write_sweep
from kopt.cli.console import rate_text, speedup_text
from kopt.store.database import Writer, query

SPEC = """
    kernel: k.cpp
    dims: [{N: 1024}]
    args: {x: [N], y: [N]}
"""


def expect(tmp_path, yaml_text, *needles):
    d = write_sweep(tmp_path / "s", yaml_text, {"k.cpp": VADD_CPP, "ref.py": VADD_REF})
    return assert_spec_error(d, *needles)


def test_empty_problem_sizes_are_refused_at_load(tmp_path):
    """`N = 0` was accepted, "measured" at a fake 1.32x and then crashed the closing table."""
    expect(tmp_path, SPEC.replace("{N: 1024}", "{N: 0}"), "field 'dims[0].N'",
           "0 is not a problem size: dims must be >= 1", "`scalars`")
    expect(tmp_path, SPEC.replace("x: [N]", 'x: ["N - 1024"]'), "field 'args.x[0]'",
           "'N - 1024' gives 0 with dims[0] = {'N': 1024}, not a size", ">= 1")
    expect(tmp_path, SPEC.replace("x: [N]", "x: [N, 0]"), "field 'args.x[1]'",
           "0 gives 0", "not a size")


def test_rates_and_speedups_of_zero_figures_print_a_dash():
    """console.rate_text divided by a 0 GB/s figure (ZeroDivisionError); non-finite speedups
    printed as 'infx'."""
    assert rate_text({"tflops": 0.0, "gbps": 0.0}) == "-"
    assert rate_text({"tflops": 2.0, "gbps": 0.0}) == "2 TFLOP/s"
    assert rate_text({"tflops": 0.0, "gbps": 500.0}) == "500 GB/s"
    assert rate_text({"tflops": 0.05, "gbps": 500.0}) == "500 GB/s"
    assert rate_text({"tflops": 50.0, "gbps": 500.0}) == "50 TFLOP/s"
    assert rate_text({"tflops": None, "gbps": float("nan")}) == "-"
    assert speedup_text(float("inf")) == "-" and speedup_text(None) == "-"
    assert speedup_text(1.25) == "1.250x"


def test_the_store_never_divides_by_a_zero_median_or_work(tmp_path):
    """A 0 ms median or a 0 work figure gives NULL speedup and rates, not inf / NaN."""
    def row(job, median, base=False, **kw):
        return {"run_id": "r1", "sweep": "s", "iteration": 1, "job_key": job,
                "candidate_id": job, "is_baseline": base, "device_class": "cpu-x86_64",
                "dims": '{"N": 1}', "status": "ok", "median_ms": median, **kw}

    w = Writer(tmp_path, "s", "r1")
    w.add("candidates", [row("b", 2.0, base=True, flops=0.0, bytes=8e6),
                         row("z", 0.0, flops=1e9, bytes=8e6)])
    w.flush()
    _, rows = query("select job_key, speedup, tflops, gbps from candidates order by job_key",
                    tmp_path)
    assert rows == [("b", 1.0, None, 4.0), ("z", None, None, None)]
