#!/usr/bin/env bash
# Issue 14 on one H200: kopt cold without NCU (bench/vs_kernel_tuner.py's cold-noncu sweep:
# sgemm_kt at 2048^3, ncu top_k 0), fresh build cache and store each time, with and without
# each setting in AB_ENVS (default: Ray starting no worker processes ahead of the first
# driver), interleaved, REPS times; process wall, first result and Ray's phase per run.
# Usage (repo root, GPU host): bash docs/verified/h200_ab_cold.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/ab-cold.txt"
rm -rf /tmp/abc && mkdir -p /tmp/abc
python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path
from vs_kernel_tuner import sweep_copy; print(sweep_copy(Path('/tmp/abc'), 2048, False))"
for rep in $(seq 1 ${REPS:-2}); do
  for v in "" ${AB_ENVS:-RAY_prestart_worker_first_driver=0}; do
    rm -rf /tmp/abc/cache /tmp/abc/store; t0=$(date +%s.%N)
    env $v KOPT_CACHE=/tmp/abc/cache python3 -m kopt sweep /tmp/abc/sgemm_kt_noncu --store /tmp/abc/store --backend cuda > /tmp/abc/log 2>&1
    rc=$?; wall=$(python3 -c "print(round($(date +%s.%N)-$t0,2))")
    ph=$(python3 -m kopt.cli query --store /tmp/abc/store --format csv "select string_agg(phase || ' ' || round(start_s,2) || '-' || round(end_s,2), '; ' order by start_s) from phases where phase in ('ray','devices','first_build','first_result','end')" | tail -1)
    echo "${v:-defaults} rep $rep: rc $rc wall $wall s; $ph" | tee -a "$out/ab-cold.txt"
  done
done
