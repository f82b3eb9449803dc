# ruff: noqa
"""Red-team runner (session 56). In one Sandbox("cpu"): job 1 = attacker (faults pack MODE 0
whose first solve call runs the attack: Python via PyRun_SimpleString and/or a native pthread),
then the LATER jobs. Baseline: the same LATER jobs after an honest MODE 0 job in another fresh
Sandbox.
usage (from /tmp/rt56/tests, PYTHONPATH=/tmp/rt56):
  python ../redteam56/run56.py ATTACK LATER... [--retrying]
LATER: mode0 | mode0big (N=8192: a new ref window) | vadd (other ref.py) | omp | timeref
(time_reference job of the pack's ref.py) | timerefbig | sleepN (sleep N ms between jobs, in
this process)"""
import json, sys, tempfile, time
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from conftest import SOLVE_HEAD
from test_faults import PACK, artifact, job
from workers.sandbox import Sandbox
from attacks56 import ATTACKS, C_PRELUDE

ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}

def later_job(tmp, kind):
    if kind.startswith("mode0"):
        src = PACK / "faults.cpp"
        return job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py",
                   {"N": 8192 if kind == "mode0big" else 4096}, ARGS)
    if kind.startswith("timeref"):
        src = PACK / "faults.cpp"
        return {**job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py",
                      {"N": 2048 if kind == "timerefbig" else 4096}, ARGS), "time_reference": True}
    if kind == "omp":
        src = HERE / "omp.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "omp_ref.py", {"N": 1 << 20},
                   {"x": ["N"], "y": ["N"]})
    if kind == "vadd":
        src = HERE / "vadd.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "vadd_ref.py", {"N": 1 << 18},
                   {"x": ["N"], "y": ["N"], "out": ["N"]})
    raise SystemExit(kind)

def brief(r):
    return {k: (round(r[k], 4) if isinstance(r.get(k), float) else r.get(k))
            for k in ("status", "median_ms", "n_samples", "changed", "error") if k in r}

def session(tmp, first, laters, env, runner):
    sb = Sandbox("cpu", env)
    out = []
    try:
        r0 = getattr(sb, runner)(first, timeout_s=60)
        out.append(("first", brief(r0), sb.restarts))
        for k in laters:
            if k.startswith("sleep"):
                time.sleep(int(k[5:]) / 1000); continue
            r = getattr(sb, runner)(later_job(tmp, k), timeout_s=60)
            out.append((k, brief(r), sb.restarts))
    finally:
        log = sb.log.read_text(errors="replace") if sb.log.exists() else ""
        sb.close()
    tail = [l for l in log.splitlines() if "rt:" in l or "Error" in l or "Traceback" in l]
    if tail:
        out.append(("log", {"lines": tail[-8:]}, sb.restarts))
    return out

def attacker_src(folder, spec):
    text = (PACK / "faults.cpp").read_text()
    folder.mkdir(parents=True, exist_ok=True)
    py = spec.get("py", "")
    assert ")PY" not in py
    c = C_PRELUDE + spec.get("c", "static void rt_attack() {}\n") + (
        '\nstatic void rt_once() {\n  static bool done = false;\n  if (done) return;\n  done = true;\n'
        + ('  rt_py(R"PY(%s)PY");\n' % py if py else "") + "  rt_attack();\n}\n")
    src = folder / "faults.cpp"
    src.write_text(text.replace(SOLVE_HEAD, c + SOLVE_HEAD + "\n  rt_once();"))
    return src

def main():
    name, laters = sys.argv[1], sys.argv[2:] or ["mode0"]
    spec = ATTACKS[name]
    env = {"OMP_NUM_THREADS": "1", **spec.get("env", {})}
    runner = "run_retrying" if "--retrying" in laters else "run"
    only = "--only" in laters
    laters = [l for l in laters if not l.startswith("--")]
    tmp = Path(tempfile.mkdtemp(prefix=f"rt56-{name}-"))
    src = PACK / "faults.cpp"
    honest_first = job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, ARGS)
    asrc = attacker_src(tmp / name, spec)
    attacker = job(artifact(tmp, asrc, {"MODE": 0}), asrc, PACK / "ref.py", {"N": 4096}, ARGS)
    t = time.time()
    base = [] if only else session(tmp, honest_first, laters, env, runner)
    att = session(tmp, attacker, laters, env, runner)
    print(f"== {name} ({runner}, env {env}) {time.time()-t:.0f}s")
    for label, rows in (("WITHOUT attacker", base), ("WITH attacker", att)):
        print(f"-- {label}")
        for k, r, restarts in rows:
            print(f"   {k:8s} restarts={restarts} {json.dumps(r)[:500]}")

main()
