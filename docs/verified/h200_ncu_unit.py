"""Which ncu_report call crashes reading test_a_real_ncu_capture's report (segfault in
IMetric.unit on the H200 host at 51bb43d)? Captures the test's job with ncu into a kept
folder, then reads the report in child processes, each step printed and flushed first.
Usage (repo root, GPU host, device_env.sh sourced): python3 docs/verified/h200_ncu_unit.py"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [".", "tests"]
READ = r'''
import sys
sys.path[:0] = ["."]
from workers.ncu import _ncu_report
m = _ncu_report(); print("module", m.__file__, flush=True)
if "torch" in sys.argv: import torch; print("torch imported", flush=True)
ctx = m.load_report(sys.argv[1])
for ri in range(ctx.num_ranges()):
    rng = ctx.range_by_idx(ri)
    for ai in range(rng.num_actions()):
        act = rng.action_by_idx(ai)
        print("action", ai, act.name(), flush=True)
        for name in sys.argv[2].split(","):
            x = act.metric_by_name(name)
            print(" ", name, "found" if x is not None else "none", flush=True)
            if x is None: continue
            print("   has_value", x.has_value(), "kind", x.kind(), flush=True)
            print("   value", x.value(), flush=True)
            print("   unit", repr(x.unit()), flush=True)
'''
from test_gpu_faults import cuda_job  # noqa: E402

from workers import ncu  # noqa: E402

tmp = Path(tempfile.mkdtemp(prefix="ncu-unit-"))
mets = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
job = {**cuda_job(tmp, 0), "device": "cuda"}
jf = tmp / "job.json"
jf.write_text(json.dumps(job))
res, out = ncu._run_ncu([str(jf)], ["_Z4polyPKfPfi"], mets, None, 120, None, tmp)
print("capture:", res.status, res.error[:300], flush=True)
rep = tmp / "report.ncu-rep"
for extra in ([], ["torch"]):
    for ms in (mets[:1], mets[1:], mets):
        p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", READ, str(rep),
                            ",".join(ms), *extra], capture_output=True, text=True)
        print(f"== read {ms} {extra}: rc {p.returncode}")
        print(p.stdout[-1500:], p.stderr[-600:])
