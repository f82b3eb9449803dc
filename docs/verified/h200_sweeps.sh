#!/usr/bin/env bash
# Runs the shipped sweeps on an H200 (device tool, nvidia-h200), each from a clean store,
# and prints the figures docs/verified/ records. Usage (repo root, on the GPU host):
#   bash docs/verified/h200_sweeps.sh [SWEEP ...]      (default: sgemm softmax vector_add reduction)
set -uo pipefail
. docs/verified/device_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/env.txt"
nvcc --version | tail -1 | tee -a "$out/env.txt"
python3 -c "import torch, ray, duckdb; print('torch', torch.__version__, 'ray', ray.__version__, 'duckdb', duckdb.__version__)" | tee -a "$out/env.txt"
for s in "${@:-sgemm softmax vector_add reduction}"; do
  for sw in $s; do
    store=/tmp/kopt-verify-store-$sw
    rm -rf "$store"
    start=$SECONDS
    kopt sweep "sweeps/$sw" --store "$store" --top 8 2>&1 | grep -v "^built\|^ran " | tee "$out/$sw.txt"
    echo "process wall_s $((SECONDS - start)) (incl. Ray start)" | tee -a "$out/$sw.txt"
    kopt best "$sw" --store "$store" 2>&1 | tee -a "$out/$sw.txt"
    kopt query --store "$store" --format csv \
      "select status, count(*) n, round(sum(compile_s), 1) compile_cpu_s, round(sum(wall_s), 1) device_s from candidates group by 1 order by 1" | tee -a "$out/$sw.txt"
    kopt query --store "$store" --format csv \
      "select dims, median_ms, iqr_ms, n_samples, round(tflops, 3) tflops, round(gbps) gbps, sm_clock_mhz from candidates where is_baseline" | tee -a "$out/$sw.txt"
    kopt query --store "$store" --format csv \
      "select * exclude (samples_ms) from candidates order by median_ms nulls last" > "$out/$sw-candidates.csv"
    gzip -f "$out/$sw-candidates.csv"
  done
done
