"""Spaces too large to walk: a capped sample is drawn by index, never by enumeration."""

import itertools
import json
import os
import subprocess
import sys

import pytest

import kopt.core.expand
from conftest import ROOT, VADD_CPP, VADD_REF, write_sweep
from kopt.core.catalog import load_catalog
from kopt.core.expand import cap, expand, iter_candidates
from kopt.core.spec import SpecError, load_sweep

CAT = load_catalog()
DIGITS = list(range(1, 11))
# the vector add reading each launch param it is built with (a param no source reads is
# noted at load), whichever of A.. a space has
KERNEL = VADD_CPP + "".join(f"\n#ifdef {n}\nstatic const int huge_{n} = {n};\n#endif\n"
                            for n in "ABCDEFGHIJKL")


def huge_spec(n_params: int, restrictions: str = '["A + B <= C + 10", "D != E or F == 1"]',
              methods: str = "") -> str:
    """A sweep of ``n_params`` launch params of 10 values each: 10**n_params configs."""
    names = [chr(ord("A") + i) for i in range(n_params)]
    params = "\n".join(f"  {n}: {DIGITS}" for n in names)
    return (f"kernel: k.cpp\ndims: [{{N: 4096}}]\nargs: {{x: [N], y: [N], out: [N]}}\n"
            f"params:\n{params}\nrestrictions: {restrictions}\n{methods}")


def huge_space(tmp_path, n_params=12, **kw):
    d = write_sweep(tmp_path / "h", huge_spec(n_params, **kw),
                    {"k.cpp": KERNEL, "ref.py": VADD_REF})
    return load_sweep(d).space("cpu")


def holds(c) -> bool:
    p = c.params
    return p["A"] + p["B"] <= p["C"] + 10 and (p["D"] != p["E"] or p["F"] == 1)


@pytest.fixture
def counted_restrictions(monkeypatch):
    """Counts every evaluation of a compiled restriction check, and stops a walk: past
    100,000 evaluations the check raises (an enumeration of the space would get there)."""
    calls = [0]
    real = kopt.core.expand.all_of

    def counting(*args, **kwargs):
        check = real(*args, **kwargs)

        def counted(values):
            calls[0] += 1
            if calls[0] > 100_000:
                raise RuntimeError("the space is being enumerated")
            return check(values)
        return counted
    monkeypatch.setattr(kopt.core.expand, "all_of", counting)
    return calls


def test_a_capped_sample_of_a_1e12_space_is_drawn_without_enumerating(tmp_path,
                                                                      counted_restrictions):
    sp = huge_space(tmp_path, 12)
    stream = iter_candidates(sp, CAT, None)
    assert stream.configs == 10**12
    got = cap(stream, 5)
    assert len(got) == 5 and len({c.candidate_id for c in got}) == 5
    assert got[0].is_baseline and got[0].params == {n: 1 for n in "ABCDEFGHIJKL"}
    assert not any(c.is_baseline for c in got[1:])
    assert all(holds(c) for c in got) and all(c.dims_ok == [0] for c in got)
    assert counted_restrictions[0] < 1000  # a handful of draws, not 10**12 configs
    assert stream.sampled is not None and stream.sampled.configs == 10**12
    assert stream.sampled.draws >= 4


def test_the_sample_is_seeded_and_reproducible(tmp_path, counted_restrictions):
    sp = huge_space(tmp_path, 12)
    ids = [[c.candidate_id for c in cap(iter_candidates(sp, CAT, None), 20, seed=s)]
           for s in (None, None, 3, 3)]
    assert ids[0] == ids[1] and ids[2] == ids[3]
    assert ids[0][0] == ids[2][0]  # the baseline, whatever the seed
    assert set(ids[0][1:]).isdisjoint(ids[2][1:])


def test_sampled_candidates_are_those_the_walk_yields(tmp_path, monkeypatch):
    """Below the limit the walk is kept; above it the sampler builds the very candidates
    the walk would (ids, params, defines, dims, aliases), only fewer: with the limit
    lowered, every sampled candidate of a 10**4 space with methods is one of expand()'s."""
    methods = ("methods:\n  compute.thread_coarsening: {params: {ITEMS: [2, 4]}}\n"
               "  memory.vectorized_access: {defines: {VEC: 4}}\n")
    sp = huge_space(tmp_path, 4, restrictions='["A + B <= C + 4", "D * ITEMS <= 12"]',
                    methods=methods)
    every = {c.candidate_id: c for c in expand(sp, CAT, None)}
    walked = cap(iter_candidates(sp, CAT, None), 30)
    monkeypatch.setattr(kopt.core.expand, "WALK_LIMIT", 1000)
    stream = iter_candidates(sp, CAT, None)
    assert stream.configs == 10**4 * (1 + 2) * 2 and stream.huge
    drawn = cap(stream, 30)
    assert len(drawn) == 30 and drawn[0].candidate_id == walked[0].candidate_id
    assert [c.candidate_id for c in walked] != [c.candidate_id for c in drawn]
    for c in drawn:
        assert c == every[c.candidate_id]


def test_the_index_decodes_to_the_products_order(tmp_path):
    sp = huge_space(tmp_path, 3, restrictions='["A + B <= C + 10"]')
    stream = iter_candidates(sp, CAT, None)
    plan = stream.plans()[0]
    product = list(itertools.product(*plan.values))
    for i in (0, 1, 9, 10, 457, 999):
        assert tuple(v[j] for v, j in zip(plan.values, plan.decode(i))) == product[i]


def test_restrictions_that_reject_everything_are_named(tmp_path, monkeypatch):
    sp = huge_space(tmp_path, 10, restrictions='["A + B + C + D + E + F + G + H + I + J <= 10"]')
    monkeypatch.setattr(kopt.core.expand, "SAMPLE_DRAWS", 2000)
    monkeypatch.setattr(kopt.core.expand, "DRAWS_PER_CANDIDATE", 100)
    with pytest.raises(SpecError, match=r"sweep.yaml: restrictions: none of 2,000 random "
                       r"launch configs .*10,000,000,000 before restrictions"):
        cap(iter_candidates(sp, CAT, None), 5)


def test_an_uncapped_walk_of_a_huge_space_is_refused_before_ray(tmp_path):
    from kopt.driver.checks import check_before_ray
    from kopt.run.runner import SweepError

    d = write_sweep(tmp_path / "h", huge_spec(9), {"k.cpp": KERNEL, "ref.py": VADD_REF})
    sw = load_sweep(d)
    with pytest.raises(SweepError, match=r"sweep.yaml: params: 1,000,000,000 launch configs "
                       r".* give --max-candidates N"):
        check_before_ray(sw, tmp_path / "store", "cpu", None, local=True)
    check_before_ray(sw, tmp_path / "store", "cpu", None, local=True, max_candidates=5)
    assert 10**6 < kopt.core.expand.WALK_LIMIT < 10**9


def kopt_cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kopt", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_propose_plans_a_1e9_space_without_walking_it(tmp_path, counted_restrictions):
    from kopt.loop.propose import propose

    methods = ("methods:\n  compute.thread_coarsening: {params: {ITEMS: [2, 4]}}\n"
               "  memory.vectorized_access: {defines: {VEC: 4}}\n")
    d = write_sweep(tmp_path / "h", huge_spec(9, methods=methods),
                    {"k.cpp": KERNEL, "ref.py": VADD_REF})
    plan, = propose(load_sweep(d), tmp_path / "store")
    assert sorted(map(tuple, plan["triples"]), key=str) == sorted([
        ("compute.thread_coarsening", None, None), (None, "memory.vectorized_access", None),
        ("compute.thread_coarsening", "memory.vectorized_access", None)], key=str)
    assert plan["empty_triples"] == [] and plan["undecided_triples"] == []
    assert counted_restrictions[0] < 10_000


def test_sweep_plans_a_1e9_space_before_ray_in_a_fresh_process(tmp_path):
    """What `kopt sweep --max-candidates 5` plans before anything is built, in a fresh
    process on a generated 1e9-config sweep folder: the baseline and 4 distinct sampled
    candidates (the walk of the cap took minutes here)."""
    d = write_sweep(tmp_path / "h", huge_spec(9), {"k.cpp": KERNEL, "ref.py": VADD_REF})
    code = ("import json, sys\nfrom kopt.driver.checks import check_before_ray\n"
            "from kopt.core.catalog import load_catalog\n"
            "from kopt.core.expand import iter_candidates\n"
            "from kopt.strategy import make\nfrom kopt.core.spec import load_sweep\n"
            "from pathlib import Path\n"
            "sw = load_sweep(sys.argv[1]); sp = sw.space('cpu')\n"
            "check_before_ray(sw, Path(sys.argv[2]), 'cpu', None, local=True, max_candidates=5)\n"
            "s = iter_candidates(sp, load_catalog(), None)\n"
            "got = make('exhaustive', 5, 0, sp.timing.model_dump()).select(s)\n"
            "print(json.dumps([[c.is_baseline, c.params] for c in got]))\n")
    out = subprocess.run([sys.executable, "-c", code, str(d), str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert [b for b, _ in got] == [True, False, False, False, False]
    assert len({json.dumps(p, sort_keys=True) for _, p in got}) == 5
    for _, p in got:
        assert p["A"] + p["B"] <= p["C"] + 10 and (p["D"] != p["E"] or p["F"] == 1)


def test_kopt_propose_answers_for_a_1e9_space(tmp_path):
    d = write_sweep(tmp_path / "h", huge_spec(9), {"k.cpp": KERNEL, "ref.py": VADD_REF})
    out = kopt_cli("propose", str(d), "--store", str(tmp_path / "store"), "--format", "json")
    assert out.returncode == 0, out.stderr
    plan, = json.loads(out.stdout)
    assert plan["triples"] == [] and plan["empty_triples"] == []


def test_kopt_sweep_refuses_an_uncapped_1e9_space_in_one_line(tmp_path):
    d = write_sweep(tmp_path / "h", huge_spec(9), {"k.cpp": KERNEL, "ref.py": VADD_REF})
    out = kopt_cli("sweep", str(d), "--store", str(tmp_path / "store"), "--backend", "cpu")
    assert out.returncode == 2
    lines = [x for x in (out.stdout + out.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and "--max-candidates" in lines[0] and "params" in lines[0], lines


@pytest.mark.slow
def test_kopt_sweep_measures_a_capped_sample_of_a_1e9_space(tmp_path):
    d = write_sweep(tmp_path / "h", huge_spec(9) + "timing: {warmup_ms: 1, min_samples: 3, "
                    "max_samples: 5}\n", {"k.cpp": KERNEL, "ref.py": VADD_REF})
    store = tmp_path / "store"
    out = kopt_cli("sweep", str(d), "--store", str(store), "--backend", "cpu",
                   "--max-candidates", "5", timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    words = " ".join((out.stdout + out.stderr).split())  # the console wraps long notes
    assert "5 of 1,000,000,000 launch configs before restrictions" in words, out.stdout
    from kopt.store.database import Database
    _, rows = Database(store).query("select count(distinct candidate_id) from candidates")
    assert rows[0][0] == 5


def test_a_refused_sweep_starts_no_background_import(tmp_path, monkeypatch):
    """A run refused by its checks ends before kopt imports pandas in a thread of its own
    (kopt.store.files ``warm_arrow``): a refused `kopt sweep` that exited while that thread
    was still importing aborted the interpreter (SIGABRT, exit -6, in a loaded CI run)."""
    import kopt.driver.sweep as ds

    started: list[int] = []
    monkeypatch.setattr(ds, "warm_arrow", lambda: started.append(1))
    d = write_sweep(tmp_path / "h", huge_spec(9), {"k.cpp": KERNEL, "ref.py": VADD_REF})
    with pytest.raises(Exception, match="--max-candidates") as e:
        ds.run_sweep(load_sweep(d), tmp_path / "store", backend="cpu")
    assert started == [], e.value
