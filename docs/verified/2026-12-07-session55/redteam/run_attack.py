# ruff: noqa
"""Red-team runner: in one Sandbox("cpu"), job 1 = attacker (faults pack MODE 0 whose first
solve runs PYTHON in the harness), job 2.. = a later candidate. Baseline: the same later
job(s) after an honest (no-Python) MODE 0 job in another fresh Sandbox.
usage: python run_attack.py ATTACK [LATER ...]   (run from /tmp/rt55/tests)"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import faults_running_python
from test_faults import PACK, artifact, job, TIMING
from workers.sandbox import Sandbox
from attacks import ATTACKS

HERE = Path(__file__).resolve().parent
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}

def later_job(tmp, kind):
    if kind.startswith("mode"):  # faults pack MODE n (0 honest, 1 replay, 3 honest-for-2-calls)
        src = PACK / "faults.cpp"
        return job(artifact(tmp, src, {"MODE": int(kind[4:])}), src, PACK / "ref.py",
                   {"N": 4096}, ARGS)
    if kind == "omp":
        src = HERE / "omp.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "omp_ref.py", {"N": 1 << 20},
                   {"x": ["N"], "y": ["N"]})
    if kind == "desc":  # wrong: buf sorted descending
        src = HERE / "desc.cpp"
        return job(artifact(tmp, src, {}), src, PACK / "ref.py", {"N": 4096}, ARGS)
    if kind == "den":  # honest, correct only with gradual underflow (rtol 1e-2)
        src = HERE / "den.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "den_ref.py", {"N": 4096},
                   {"x": ["N"], "y": ["N"]}, tolerance={"atol": 1e-5, "rtol": 1e-2})
    if kind == "vadd":
        src = HERE / "vadd.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "vadd_ref.py", {"N": 1 << 18},
                   {"x": ["N"], "y": ["N"], "out": ["N"]})
    raise SystemExit(kind)

def brief(r):
    return {k: (round(r[k], 4) if isinstance(r.get(k), float) else r.get(k))
            for k in ("status", "median_ms", "n_samples", "max_abs_err", "error") if k in r}

def session(tmp, first, laters, env, runner):
    sb = Sandbox("cpu", env)
    out = []
    try:
        r0 = getattr(sb, runner)(first, timeout_s=60)
        out.append(("first", brief(r0), sb.restarts))
        for k in laters:
            r = getattr(sb, runner)(later_job(tmp, k), timeout_s=60)
            out.append((k, brief(r), sb.restarts))
    finally:
        log = sb.log.read_text(errors="replace") if sb.log.exists() else ""
        sb.close()
    tail = [l for l in log.splitlines() if "rt:" in l or "Error" in l or "Traceback" in l]
    if tail:
        out.append(("log", {"lines": tail[-6:]}, sb.restarts))
    return out

def main():
    name, laters = sys.argv[1], sys.argv[2:] or ["mode0"]
    python, env = ATTACKS[name]
    env = {"OMP_NUM_THREADS": "1", **env}
    runner = "run_retrying" if "--retrying" in laters else "run"
    laters = [l for l in laters if l != "--retrying"]
    tmp = Path(tempfile.mkdtemp(prefix=f"rt55-{name}-"))
    src = PACK / "faults.cpp"
    honest_first = job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, ARGS)
    asrc = faults_running_python(tmp / name, python)
    attacker = job(artifact(tmp, asrc, {"MODE": 0}), asrc, PACK / "ref.py", {"N": 4096}, ARGS)
    t = time.time()
    base = session(tmp, honest_first, laters, env, runner)
    att = session(tmp, attacker, laters, env, runner)
    print(f"== {name} ({runner}, env {env}) {time.time()-t:.0f}s")
    for label, rows in (("WITHOUT attacker", base), ("WITH attacker", att)):
        print(f"-- {label}")
        for k, r, restarts in rows:
            print(f"   {k:6s} restarts={restarts} {json.dumps(r)[:400]}")

main()
