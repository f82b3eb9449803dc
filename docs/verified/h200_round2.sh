#!/usr/bin/env bash
# Second H200 round (one GPU): kopt vs Kernel Tuner with the same work on both sides (no
# NCU profiles), then the NCU-guided loop (sweeps/sgemm, 3 iterations) with the realized
# memory.register_pressure and float4 fragments under cp.async. Usage (repo root, GPU host):
#   bash docs/verified/h200_round2.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
top=$out; mkdir -p /tmp/extra "$top/loop"
timeout 280 python3 bench/vs_kernel_tuner.py --out /tmp/vskt2 2>&1 | tail -32 | tee /tmp/extra/vskt.txt
cp /tmp/vskt2/kopt_sweep.log /tmp/vskt2/vs_kernel_tuner.json /tmp/extra/ 2>/dev/null
rid=$(kopt query --store /tmp/vskt2/kopt-store --format csv "select run_id from runs" | tail -1)
python3 bench/overhead.py "$rid" --store /tmp/vskt2/kopt-store 2>&1 | tee -a /tmp/extra/vskt.txt
kopt query --store /tmp/vskt2/kopt-store --format csv "select candidate_id, params, status,
  n_samples, median_ms, wall_s, compile_s, created_at from candidates order by created_at" \
  > /tmp/extra/vskt_candidates.csv
OUT=$top/loop bash docs/verified/h200_loop.sh 2>&1 | tail -45
mv "$top/loop/env.txt" /tmp/extra/ 2>/dev/null   # the device tool returns at most 8 files
tar -C /tmp/extra -czf "$top/extra.tgz" .
