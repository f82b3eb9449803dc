#!/usr/bin/env bash
# Issue 14.3 on one H200: sweeps/sgemm_kt (kernel mode, 161 configs, NCU on) twice alone
# (cold: the first with an empty build cache), then twice on a kopt service (warm device
# actors: `kopt serve start`), via bench/warm_queue.py; per run the process wall, run wall,
# the devices phase and the first result (seconds since the sweep's process started).
# Usage (repo root on the GPU host): bash docs/verified/h200_warm_queue.sh
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/warm-queue.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/warm-queue.txt"
timeout 540 python3 bench/warm_queue.py --cold 2 --warm 2 sweeps/sgemm_kt -- --backend cuda \
  2>&1 | tee -a "$out/warm-queue.txt"
cp "${KOPT_CACHE:-$HOME/.cache/kopt}/service-ray.log" "$out/" 2>/dev/null || true
