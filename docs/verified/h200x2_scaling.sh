#!/usr/bin/env bash
# Issue #4 / #6: the sgemm sweep on 1 GPU, then on 2 GPUs of one host (device kind
# nvidia-h200-x2), each from a clean store with the same warm build cache, measured the same
# day; prints candidates/s and the device each candidate ran on. Usage (repo root, GPU host):
#   bash docs/verified/h200x2_scaling.sh [SWEEP]        (default: sgemm)
set -uo pipefail
. docs/verified/device_env.sh
sw=${1:-sgemm}
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee "$out/env-x2.txt"
export KOPT_CACHE=/tmp/kopt-cache-scaling
# warm the build cache once, so that both runs measure the queue, not nvcc
kopt sweep "sweeps/$sw" --store /tmp/kopt-warm --max-candidates 1000 > /dev/null 2>&1
all=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
for gpus in 0 "$all"; do
  n=$(echo "$gpus" | tr ',' '\n' | wc -l)
  store=/tmp/kopt-scaling-$n
  rm -rf "$store"
  start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$gpus kopt sweep "sweeps/$sw" --store "$store" --top 3 2>&1 \
    | grep -v "^it 1 built\|^it 1 ran " | tee "$out/$sw-gpus$n.txt"
  end=$(date +%s.%N)
  kopt query --store "$store" --format csv \
    "select $n gpus, count(*) candidates, round(max(wall_s), 2) run_wall_s,
            round(count(*) / max(wall_s), 2) candidates_per_s
     from candidates, (select wall_s from runs)" | tee -a "$out/$sw-gpus$n.txt"
  echo "process wall_s $(echo "$end - $start" | bc) (incl. Ray start)" | tee -a "$out/$sw-gpus$n.txt"
  kopt query --store "$store" --format csv \
    "select device_id, device_name, count(*) candidates, round(sum(wall_s), 1) device_s
     from candidates group by all order by all" | tee -a "$out/$sw-gpus$n.txt"
  python3 bench/overhead.py "$(kopt query --store "$store" --format csv 'select run_id from runs' | tail -1)" \
    --store "$store" 2>&1 | tee -a "$out/$sw-gpus$n.txt"
done
