#!/usr/bin/env bash
# Issue 14.2 on one H200: what an ncu profile's time is made of, on a torch 2048^3 matmul
# (one profiled kernel; the target imports torch and makes inputs like kopt's): the
# catalog's 63 `always` metrics against one metric, cache control, and the pass counts ncu
# prints. Usage (repo root on the GPU host): bash docs/verified/h200_ncu_passes.sh
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/ncu-passes.txt"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
ALWAYS=$(python3 -c "import yaml; print(','.join(yaml.safe_load(open('catalog/metrics.yaml'))['always']))")
cat > /tmp/mm.py <<'PY'
import time, torch
t0 = time.time(); a = torch.randn(2048, 2048, device="cuda"); b = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize(); t1 = time.time()
for _ in range(4):
    c = a @ b
torch.cuda.synchronize(); print(f"TARGET inputs {t1-t0:.2f} s, 4 launches {time.time()-t1:.2f} s", flush=True)
PY
run() {  # label, ncu options...
  local lab=$1; shift
  local t0=$(date +%s.%N)
  $NCU --clock-control none "$@" -o /tmp/rep-$lab -f python3 /tmp/mm.py > /tmp/ncu-$lab.log 2>&1
  local rc=$?
  echo "$lab: rc $rc, $(python3 -c "import time;print(f'{time.time()-$t0:.2f}')") s; $(grep -o '[0-9]* passes' /tmp/ncu-$lab.log | sort | uniq -c | tr '\n' ' '); $(grep TARGET /tmp/ncu-$lab.log)" | tee -a "$out/ncu-passes.txt"
}
t0=$(date +%s.%N); python3 /tmp/mm.py | tee -a "$out/ncu-passes.txt"; echo "no ncu: $(python3 -c "import time;print(f'{time.time()-$t0:.2f}')") s" | tee -a "$out/ncu-passes.txt"
run one --target-processes all --metrics gpu__time_duration.sum
run always --target-processes all --metrics "$ALWAYS"
run always-nocache --target-processes all --metrics "$ALWAYS" --cache-control none
run always-apponly --metrics "$ALWAYS" --target-processes application-only
t0=$(date +%s.%N); python3 -c "
import sys, time; sys.path.insert(0, '.')
t = time.time()
from workers.ncu import read_report
rows = read_report('/tmp/rep-always.ncu-rep', '$ALWAYS'.split(','))
print(f'read_report: {len(rows)} rows in {time.time()-t:.2f} s (import included)')" 2>&1 | tee -a "$out/ncu-passes.txt"
