"""Shared fixtures: sweep folders built in tmp_path, a session-wide local Ray instance."""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Each test session builds into a fresh cache: no reuse from the developer's ~/.cache/kopt.
# Set before Ray starts so that its workers inherit it.
os.environ["KOPT_CACHE"] = tempfile.mkdtemp(prefix="kopt-test-cache-")


def _compile_packages() -> None:
    """Write the bytecode of kopt's packages once, before any test starts a process.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (CI's machine sets it), Python never caches a
    module it compiles, so every process the suite starts -- each Ray worker, harness,
    builder and ``kopt`` command, hundreds in all -- compiled kopt's ~100 modules from
    source again: about 1.2 s of CPU each on a 2-core machine (measured: importing the
    harness, device actor, driver and CLI took 5.2 s with no bytecode, 4.0 s with it).
    ``compileall`` writes the files whatever that variable says (atomically: the xdist
    workers may run this at once), and Python reads them either way."""
    import compileall

    for pkg in ("kopt", "workers", "catalog"):
        compileall.compile_dir(str(ROOT / pkg), quiet=2)


_compile_packages()


SOLVE_HEAD = 'extern "C" void solve(const float* x, float* buf, float* y, int N) {'
RUN_ONCE = '''
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char*);
static void kopt_test_run_python_once() {
  static bool done = false;
  if (done) return;
  done = true;
  int g = PyGILState_Ensure();
  PyRun_SimpleString(R"PY(%s)PY");
  PyGILState_Release(g);
}
'''


def faults_running_python(folder: Path, python: str) -> Path:
    """tests/fixtures/faultpack/faults.cpp written into ``folder`` with ``python`` run once,
    through Python's C API, from its ``solve``'s first call: what a candidate's code can do
    in the harness's process (the red-team reviews' attacks). Returns the source's path."""
    text = (FIXTURES / "faultpack" / "faults.cpp").read_text()
    assert text.count(SOLVE_HEAD) == 1 and ")PY" not in python
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "faults.cpp"
    src.write_text(text.replace(SOLVE_HEAD, RUN_ONCE % python + SOLVE_HEAD
                                + "\n  kopt_test_run_python_once();"))
    return src


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible to torch)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray instance for the whole session (2 CPUs, like CI's machine)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False,
                 logging_level="WARNING", log_to_driver=False)
    yield ray
    ray.shutdown()


def write_sweep(root: Path, yaml_text: str, files: dict[str, str]) -> Path:
    """Create a sweep folder under ``root`` with sweep.yaml and the given files."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.yaml").write_text(textwrap.dedent(yaml_text))
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def copy_fixture(tmp_path):
    def _copy(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(FIXTURES / name, dst)
        return dst
    return _copy


VADD_CPP = """
    #ifndef CHUNK
    #define CHUNK 64
    #endif
    #ifndef VEC
    #define VEC 1
    #endif
    extern "C" void solve(const float* x, const float* y, float* out, int N) {
      for (int i = 0; i < N; ++i) out[i] = x[i] + y[i];
    }
"""
VADD_REF = """
    def reference(x, y, N):
        return (x.double() + y.double()).float()
"""


def assert_spec_error(sweep_dir: Path, *needles: str) -> str:
    """Load ``sweep_dir`` expecting a SpecError that names sweep.yaml and every needle."""
    import pytest

    from kopt.core.spec import SpecError, load_sweep

    with pytest.raises(SpecError) as ei:
        load_sweep(sweep_dir)
    msg = str(ei.value)
    assert "sweep.yaml" in msg
    for n in needles:
        assert n in msg, msg
    return msg


def started(proc, text: str, timeout_s: float = 30.0):
    """``proc`` (a subprocess.Popen) once its /proc command line holds ``text``. Popen
    returns when the child's exec has replaced its memory, and the kernel writes the new
    command line's bounds only after that (fs/binfmt_elf.c: ``begin_new_exec``, then
    ``create_elf_tables``): read at once on a loaded machine, /proc/PID/cmdline was empty
    and a test's "is this our head?" said no. Raises TimeoutError past ``timeout_s``."""
    import time

    deadline = time.monotonic() + timeout_s
    while text.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        if time.monotonic() > deadline:
            raise TimeoutError(f"pid {proc.pid}: {text!r} not on its command line")
        time.sleep(0.01)
    return proc


@pytest.fixture
def outside_clock_alone(monkeypatch):
    """Contests with no witness turns (workers.witness ``TURNS`` = 0), so that the closing's
    outside clock (kopt.core.clock), the second line, is what judges a contender: every
    attacker those tests give it is already `suspect` or `wrong_result` in its contest with
    witness turns (tests/test_witness.py)."""
    import workers.witness

    monkeypatch.setattr(workers.witness, "TURNS", 0)


@pytest.fixture
def threads_kept(monkeypatch):
    """The sandbox's thread check off (workers.sandbox ``Sandbox._threads_left``, which
    ends a harness after a job that left a thread of its code running there), so that such
    a thread stays in the harness as one that check cannot see would (code an earlier job
    left in a thread of the harness's own, reached through its memory): these tests hold
    the layers beneath it to account (the hold, a job run again in a fresh harness)."""
    from workers.sandbox import Sandbox

    monkeypatch.setattr(Sandbox, "_threads_left", lambda self, res: None)


@pytest.fixture
def entry_kept(monkeypatch):
    """The sandbox's end of a harness whose interpreter a job's code entered off
    (workers.sandbox ``Sandbox._entered``: the row keeps the events in ``entered``, and no
    word in ``error``), so that what Python code a test's candidate runs there stays, as
    code that changed the process without the interpreter's events would (C through the
    process's memory): these tests hold the layers beneath it to account (``STATES``, the
    watch, the outside clock, a job run again in a fresh harness)."""
    from workers.sandbox import Sandbox

    monkeypatch.setattr(Sandbox, "_entered", lambda self, res: None)
