#!/usr/bin/env bash
# Issue 14.2 on one H200: what an NCU profile of the top candidates costs, piece by piece:
# ncu's own start, python + torch under ncu (no kernel profiled), then a cold kopt sweep of
# sgemm_kt at 2048^3 with its phases (the ncu phase's detail: the ncu processes' seconds).
# Usage (repo root on the GPU host): bash docs/verified/h200_ncu_cost.sh
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/ncu-cost.txt"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
t() { local t0=$(date +%s.%N); "$@" > /dev/null 2>&1; echo "$(python3 -c "import time;print(f'{time.time()-$t0:.2f}')") s: $*" | tee -a "$out/ncu-cost.txt"; }
t $NCU --version
t python3 -c "import torch"
t python3 -c "import torch; torch.cuda.init(); torch.ones(10, device='cuda').sum().item()"
t $NCU --clock-control none --target-processes all -k regex:^nomatch$ --metrics sm__throughput.avg.pct_of_peak_sustained_elapsed python3 -c "import torch; torch.cuda.init(); torch.ones(10, device='cuda').sum().item()"
t $NCU --clock-control none --target-processes all --metrics sm__throughput.avg.pct_of_peak_sustained_elapsed python3 -c "import torch; a=torch.randn(2048,2048,device='cuda'); (a@a).sum().item()"
w=/tmp/nc; rm -rf $w; mkdir -p $w; cp -r sweeps/sgemm_kt $w/kt
python3 - <<'PY'
import yaml, pathlib
p = pathlib.Path("/tmp/nc/kt/sweep.yaml"); s = yaml.safe_load(p.read_text())
s["dims"] = [{"M": 2048, "N": 2048, "K": 2048}]
p.write_text(yaml.safe_dump(s, sort_keys=False))
PY
KOPT_CACHE=$w/cache timeout 200 python3 -m kopt.cli sweep $w/kt --store $w/store --backend cuda > $w/log 2>&1
echo "sweep rc $?" | tee -a "$out/ncu-cost.txt"
kopt query --store $w/store --format csv "select phase, round(start_s,2) s0, round(end_s,2) s1, detail from phases where phase not in ('build','busy') order by start_s" | tee -a "$out/ncu-cost.txt"
kopt query --store $w/store --format csv "select count(*), round(sum(end_s-start_s),2), round(min(start_s),2), round(max(end_s),2) from phases where phase = 'busy'" | tee -a "$out/ncu-cost.txt"
