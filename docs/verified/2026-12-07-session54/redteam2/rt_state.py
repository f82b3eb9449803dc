# ruff: noqa
"""A (faults.cpp MODE 0 + Python run once from solve) then honest B, in one CPU sandbox.
usage: python rt/rt_state.py VARIANT [VARIANT...]"""
import base64, os, sys, shutil, tempfile, time
from pathlib import Path
sys.path[:0] = ["/tmp/rt54b", "/tmp/rt54b/tests"]
os.environ.setdefault("KOPT_CACHE", tempfile.mkdtemp(prefix="rt54b-cache-"))
from conftest import faults_running_python
from test_faults import artifact, job, PACK
from workers.sandbox import Sandbox

H = "import gc\nh=[o for o in gc.get_objects() if type(o).__name__=='Harness'][0]\n"
QSRC = ("def quantile(sorted_xs, q):\n    import math\n    pos = (len(sorted_xs) - 1) * q\n"
        "    lo = math.floor(pos)\n    hi = min(lo + 1, len(sorted_xs) - 1)\n"
        "    return (sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)) * 100\n")
V = {
 "noop": "pass\n",
 # same function object, new code: identity watch sees nothing
 "code_swap": "import workers.timing as t\ng={}\nexec(%r, g)\nt.quantile.__code__ = g['quantile'].__code__\n" % QSRC,
 # empty the harness's own watch list and C-pointer table, then rebind plainly
 "watch_clear": H + "h.watch.clear(); h.c_watch.clear()\nimport workers.timing as t\nq=t.quantile\n"
                "t.quantile=lambda xs,qq: q(xs,qq)*100\n",
 # the cached inputs/expected outputs (Harness.data) shared with later jobs of the same ref/dims/seed
 "data_corrupt": H + "for d in h.data.values():\n  for s in list(d.sets)+list(d.unseen)+list(getattr(d,'reserve',[]) or []):\n"
                 "    for e in s.expected.values(): e.add_(1.0)\n",
 # a profile hook that sleeps in every Harness.call (inside the timed interval)
 "setprofile": "import sys,time\ndef p(f,e,a):\n  if e=='call' and f.f_code.co_name=='call': time.sleep(0.002)\nsys.setprofile(p)\n",
 # Harness instance attribute: the rng that draws held-back seeds, fixed
 "rng_seed": H + "h.rng.seed(1234)\n",
}
ARGS = {"x": ["N"], "buf": ["N"], "y": ["N"]}
DIMS = {"N": 1 << 16}

def main(names):
    root = Path(tempfile.mkdtemp(prefix="rt54b-"))
    hon = PACK / "faults.cpp"
    hj = job(artifact(root, hon, {"MODE": 0}), hon, PACK / "ref.py", DIMS, ARGS)
    box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
    try:
        b0 = box.run_retrying(hj, 30)
        print(f"baseline B: {b0['status']} median={b0.get('median_ms')}")
    finally:
        box.close()
    for name in names:
        py = "import base64\nexec(base64.b64decode('%s').decode(), {})\n" % base64.b64encode(V[name].encode()).decode()
        src = faults_running_python(root / name, py)
        aj = job(artifact(root, src, {"MODE": 0}), src, PACK / "ref.py", DIMS, ARGS)
        box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
        try:
            a = box.run_retrying(aj, 30)
            r0 = box.restarts
            b = box.run_retrying(hj, 30)
            b2 = box.run_retrying(hj, 30)
            print(f"[{name}] A: {a['status']} median={a.get('median_ms')} err={str(a.get('error'))[:200]!r}")
            print(f"[{name}]   restarts after A={r0}, after B={box.restarts}")
            for lbl, r in (("B", b), ("B again", b2)):
                print(f"[{name}] {lbl}: {r['status']} median={r.get('median_ms')} err={str(r.get('error'))[:300]!r}")
        finally:
            box.close()

if __name__ == "__main__":
    main(sys.argv[1:])
