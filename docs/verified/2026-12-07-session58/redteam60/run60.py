# ruff: noqa
"""usage (cd /tmp/rt58/tests; PYTHONPATH=/tmp/rt58): python ../redteam58/run58.py NAME [LATER] [--base]
Job 1: the fault pack's MODE 0 with attacks58.ATTACKS[NAME] spliced before solve (its call
at solve's head); then LATER jobs (default: mode0 x2), one Sandbox("cpu", OMP_NUM_THREADS=1
unless the attack's env says), run_retrying. --base: the same with an honest first job."""
import json, sys, tempfile, time
from pathlib import Path
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from conftest import SOLVE_HEAD
from test_faults import PACK, artifact, job
from workers.sandbox import Sandbox
from attacks60 import ATTACKS
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}

def later_job(tmp, kind):
    if kind == "mode0":
        src = PACK / "faults.cpp"
        return job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, ARGS)
    if kind == "omp":
        src = HERE / "omp.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "omp_ref.py", {"N": 1 << 20},
                   {"x": ["N"], "y": ["N"]})
    if kind == "omp3":
        src = HERE / "omp3.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "omp_ref.py", {"N": 1 << 20},
                   {"x": ["N"], "y": ["N"]})
    if kind == "vadd":
        src = HERE / "vadd.cpp"
        return job(artifact(tmp, src, {}), src, HERE / "vadd_ref.py", {"N": 1 << 18},
                   {"x": ["N"], "y": ["N"], "out": ["N"]})
    if kind.startswith("atk:"):  # another attack as a LATER job (its own artifact)
        name = kind[4:]; spec = ATTACKS[name]
        src = tmp / ("later-" + name) / "faults.cpp"; src.parent.mkdir(exist_ok=True)
        src.write_text((PACK / "faults.cpp").read_text().replace(
            SOLVE_HEAD, spec["c"] + SOLVE_HEAD + "\n  " + spec.get("call", "rt_attack();")))
        return job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, ARGS)
    raise SystemExit(kind)

def threads_dbg(sb):
    import os
    pid = sb.host_pid
    out = []
    try:
        for t in sorted(os.listdir(f"/proc/{pid}/task")):
            st = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
            sc = open(f"/proc/{pid}/task/{t}/syscall").read().split()
            out.append(f"{t}:{st[0]} ut={st[11]} st={st[12]} sc={sc[0]} pc={sc[-1][-5:]}")
    except OSError as e:
        out.append(str(e))
    return " | ".join(out)

def brief(r):
    return {k: (round(r[k], 4) if isinstance(r.get(k), float) else r.get(k))
            for k in ("status", "median_ms", "changed", "error") if k in r}

def main():
    name = sys.argv[1]
    laters = [a for a in sys.argv[2:] if not a.startswith("--")] or ["mode0", "mode0"]
    spec = ATTACKS[name]
    tmp = Path(tempfile.mkdtemp(prefix=f"rt59-{name}-"))
    if "--base" in sys.argv:
        src = PACK / "faults.cpp"
    else:
        src = tmp / name / "faults.cpp"; src.parent.mkdir()
        src.write_text((PACK / "faults.cpp").read_text().replace(
            SOLVE_HEAD, spec["c"] + SOLVE_HEAD + "\n  " + spec.get("call", "rt_attack();")))
    first = job(artifact(tmp, src, {"MODE": 0}), src, PACK / "ref.py", {"N": 4096}, ARGS)
    sb = Sandbox("cpu", {"OMP_NUM_THREADS": "1", **spec.get("env", {})})
    t = time.time()
    try:
        r = sb.run_retrying(first, timeout_s=60)
        print(f"first   restarts={sb.restarts} running={sb.running} {json.dumps(brief(r))[:600]}")
        if "--dbg" in sys.argv: print("   threads:", threads_dbg(sb))
        for k in laters:
            r = sb.run_retrying(later_job(tmp, k), timeout_s=60)
            print(f"{k:7s} restarts={sb.restarts} {json.dumps(brief(r))[:600]}")
            if "--dbg" in sys.argv: print("   threads:", threads_dbg(sb))
    finally:
        log = sb.log.read_text(errors="replace") if sb.log.exists() else ""
        sb.close()
    for l in log.splitlines():
        if "rt:" in l or "Traceback" in l or "Error" in l: print("  log:", l[:300])
    print(f"== {name}{' BASE' if '--base' in sys.argv else ''} {time.time()-t:.0f}s")
main()
