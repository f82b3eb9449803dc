#!/usr/bin/env bash
# Issue 14.1/14.2 on one H200: where a cold `kopt sweep sweeps/sgemm_kt` (kernel mode, 2048^3,
# the sweep's 161-config space) spends its time, NCU on (default) and off; the driver sampled by
# py-spy (when the carried site has it); every run's phases table as CSV.
# Usage (repo root on the GPU host): bash docs/verified/h200_breakdown.sh
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/breakdown.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/breakdown.txt"
spy=$(ls /tmp/site/py_spy-*.data/scripts/py-spy 2>/dev/null | head -1)
[ -n "$spy" ] && chmod +x "$spy"
w=/tmp/bd; rm -rf $w; mkdir -p $w
cp -r sweeps/sgemm_kt $w/kt
python3 - <<'PY'
import yaml, pathlib
p = pathlib.Path("/tmp/bd/kt/sweep.yaml"); s = yaml.safe_load(p.read_text())
s["dims"] = [{"M": 2048, "N": 2048, "K": 2048}]
p.write_text(yaml.safe_dump(s, sort_keys=False))
q = pathlib.Path("/tmp/bd/ktnoncu"); q.mkdir(); [ (q/f.name).write_bytes(f.read_bytes()) for f in p.parent.iterdir() ]
s["ncu"] = {"top_k": 0}; (q/"sweep.yaml").write_text(yaml.safe_dump(s, sort_keys=False))
PY
one() {  # label sweepdir
  local t0=$(date +%s.%N)
  if [ -n "$spy" ]; then
    KOPT_CACHE=$w/cache-$1 timeout 300 "$spy" record -r 50 -f speedscope -o "$out/$1.speedscope.json" -- \
      python3 -m kopt.cli sweep $2 --store $w/store-$1 --backend cuda > "$out/$1.log" 2>&1
  else
    KOPT_CACHE=$w/cache-$1 timeout 300 python3 -m kopt.cli sweep $2 --store $w/store-$1 --backend cuda > "$out/$1.log" 2>&1
  fi
  echo "$1: rc $? process wall $(python3 -c "import time;print(round(time.time()-$t0,1))") s" | tee -a "$out/breakdown.txt"
  python3 -m kopt.cli query "select phase, device, round(start_s,2) s0, round(end_s,2) s1, round(end_s-start_s,2) d, detail from phases where phase <> 'build' order by start_s" --store $w/store-$1 --format csv > "$out/$1.phases.csv" 2>&1
  python3 -m kopt.cli query "select count(*) n, round(sum(end_s-start_s),1) cpu_s, round(min(start_s),2) first0, round(min(end_s),2) first1, round(max(end_s),2) last1 from phases where phase='build'" --store $w/store-$1 --format csv >> "$out/$1.phases.csv" 2>&1
  python3 -m kopt.cli query "select phase, round(sum(end_s-start_s),2) total_s, count(*) n from phases group by phase order by 2 desc" --store $w/store-$1 --format csv >> "$out/$1.phases.csv" 2>&1
  python3 -m kopt.cli query "select wall_s, n_candidates from runs" --store $w/store-$1 --format csv >> "$out/$1.phases.csv" 2>&1
  python3 -m kopt.cli query "select iteration, count(*), round(sum(n_samples),0), round(avg(n_samples),1), round(median(median_ms),3), round(sum(compile_s),1) from candidates group by 1" --store $w/store-$1 --format csv >> "$out/$1.phases.csv" 2>&1
  tail -25 "$out/$1.log"
}
one ncu $w/kt
one noncu $w/ktnoncu
echo "--- py-spy present: ${spy:-no}" | tee -a "$out/breakdown.txt"
