"""ref.py is pinned by its digest when a run starts: a harness refuses a job whose ref.py
changed since (its outputs would judge by another standard), and the driver stops the run,
stored as interrupted and resumable, with one line naming the file and the fix."""

from __future__ import annotations

import pytest
from test_harness import artifact, job
from test_pipeline import _smaller

from conftest import FIXTURES
from kopt.core.spec import load_sweep
from kopt.driver.sweep import ReferenceChanged, run_sweep
from kopt.run.callbacks import ProgressCallback
from kopt.store.database import query
from workers.records import REF_CHANGED, file_sha256
from workers.sandbox import Sandbox


def test_a_harness_refuses_a_job_whose_ref_py_changed(tmp_path):
    """The same job passes with ref.py's digest and is ``error`` naming ref.py with any
    other (the first 12 hex digits of both in the text)."""
    src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
    art = artifact(tmp_path, src, 0)
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        ok = sb.run(job(art, src, ref, reference_sha256=file_sha256(ref)), timeout_s=30)
        bad = sb.run(job(art, src, ref, reference_sha256="0" * 64), timeout_s=30)
    finally:
        sb.close()
    assert ok["status"] == "ok"
    assert bad["status"] == "error"
    assert bad["error"] == (f"{ref}: {REF_CHANGED} (sha256 000000000000 then, "
                            f"{file_sha256(ref)[:12]} now)")


class _EditRef(ProgressCallback):
    """Appends a comment to ref.py when the first batch is announced (before any of its
    jobs is measured), once."""

    def __init__(self, ref):
        self.ref, self.original = ref, None

    def on_start(self, n_builds, n_jobs, devices):
        if self.original is None:
            self.original = self.ref.read_text()
            self.ref.write_text(self.original + "\n# edited mid-run\n")


@pytest.mark.slow
def test_an_edited_ref_py_stops_the_run_and_resume_finishes_it(ray_local, copy_fixture,
                                                              tmp_path):
    """ref.py edited once the run has started: the run stops with the line naming ref.py,
    the run id and `--resume`, stored as interrupted with no row judged by the edited file;
    with ref.py put back, --resume measures every job, all ``ok``."""
    d = _smaller(copy_fixture("cluster"), 20)
    sweep, store = load_sweep(d), tmp_path / "store"
    obs = _EditRef(sweep.reference)
    with pytest.raises(ReferenceChanged) as e:
        run_sweep(sweep, store, backend="cpu", observers=[obs])
    _, runs = query("select run_id, status from runs", store)
    assert len(runs) == 1 and runs[0][1] == "interrupted"
    run_id = runs[0][0]
    assert str(e.value) == (
        f"{sweep.reference}: {REF_CHANGED}; rows judged against two references would not "
        "compare, so the run stops here with every row measured before the change stored "
        f"(run {run_id}, interrupted): put ref.py back and resume it (`kopt sweep --resume "
        f"{run_id}`), or start a new run")
    _, rows = query("select count(*) from candidates", store)
    assert rows == [(0,)]  # ref.py changed before the first job: nothing judged by it
    sweep.reference.write_text(obs.original)
    s = run_sweep(load_sweep(d), store, backend="cpu", resume=run_id)
    assert s.status_counts == {"ok": 8}
    _, rows = query("select count(*), count(distinct job_key) from candidates", store)
    assert rows == [(8, 8)]


@pytest.mark.slow
def test_a_candidate_that_prints_the_words_does_not_stop_the_run(ray_local, tmp_path):
    """A candidate prints the harness's "changed since the run started" text and gets its
    output wrong: the driver's own digest of ref.py (unchanged) decides, so the run
    finishes and the row is the candidate's ``wrong_result``, its printed text kept."""
    from conftest import write_sweep

    d = write_sweep(tmp_path / "liar", "kernel: k.cpp\ndims: [{N: 64}]\n"
                    "args: {x: [N], y: [N]}\nparams: {T: [1, 2]}\n", {
                        "k.cpp": '#include <cstdio>\nextern "C" void solve(const float* x, '
                                 'float* y, int N) {\n  if (T == 2) { printf("ref.py: '
                                 f'{REF_CHANGED}\\n"); fflush(stdout); }}\n'
                                 '  for (int i = 0; i < N; ++i) y[i] = (T == 2 ? 3 : 2) * '
                                 'x[i];\n}\n',
                        "ref.py": "def reference(x, N):\n    return 2 * x\n"})
    s = run_sweep(load_sweep(d), tmp_path / "store", backend="cpu")
    assert not s.interrupted and s.status_counts == {"ok": 1, "wrong_result": 1}
    _, rows = query("select status, error from candidates where status != 'ok'",
                    tmp_path / "store")
    assert len(rows) == 1 and REF_CHANGED in rows[0][1]
