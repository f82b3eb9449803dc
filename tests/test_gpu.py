"""GPU paths (marked gpu; skipped without a CUDA GPU): faults and a real sweep on the device."""

import json
import re

import pytest

from conftest import ROOT
from kopt.core.spec import load_sweep
from kopt.driver.sweep import run_sweep
from kopt.store.database import query
from kopt.store.select import best

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_cuda_faults_are_rows(ray_local, copy_fixture, tmp_path):
    s = run_sweep(load_sweep(copy_fixture("faulty")), tmp_path / "st", backend="cuda")
    assert s.n_jobs == 6
    _, rows = query("select params, status, error, median_ms, registers from candidates",
                    tmp_path / "st")
    by_mode = {json.loads(r[0])["MODE"]: r for r in rows}
    seen = {m: (r[1], (r[2] or "")[:300]) for m, r in sorted(by_mode.items())}  # on failure
    assert by_mode[0][1] == "ok" and by_mode[0][3] > 0 and by_mode[0][4] > 0, seen
    assert by_mode[1][1] == "wrong_result", seen
    assert by_mode[2][1] == "crashed" and "illegal" in by_mode[2][2], seen
    assert by_mode[3][1] == "timeout", seen
    assert by_mode[4][1] == "launch_error" and "invalid" in by_mode[4][2], seen
    assert by_mode[5][1] == "compile_error", seen


def test_cuda_vector_add_sweep(ray_local, tmp_path):
    from test_closing_alone import Faults

    faults = Faults()
    s = run_sweep(load_sweep(ROOT / "sweeps" / "vector_add"), tmp_path / "st", backend="cuda",
                  max_candidates=12, observers=[faults])
    assert s.status_counts == {"ok": 12}
    b = best("vector_add", tmp_path / "st")
    assert len(b) == 1 and b[0]["device_class"].endswith("-sm90")
    # 12 bytes per element must move through HBM: beyond ~5 TB/s would mean a broken timer
    assert 500 < b[0]["gbps"] < 5500
    # every contender of every contest measured (an honest one dropped there, out of device
    # memory beside the judge's witness sets, was a false verdict), each with witness turns
    _, rows = query("select candidate_id, label, median_ms, witness from contests",
                    tmp_path / "st")
    assert rows and all(r[2] is not None for r in rows), (rows, faults.seen)
    assert all(re.fullmatch(r"\d+ witness turns each(; taken again, .*)?", r[3] or "")
               for r in rows), rows
