#!/usr/bin/env bash
# Issue 14.2 on one H200: the warm ncu target's phases and an idle second context's effect on
# timing (docs/verified/h200_ncu_ahead.py says what each part measures).
# Usage (repo root, GPU host): bash docs/verified/h200_ncu_ahead.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/ncu-ahead.txt"
"$NCU" --version | tail -1 | tee -a "$out/ncu-ahead.txt"
timeout 400 python3 docs/verified/h200_ncu_ahead.py 2>&1 | tee -a "$out/ncu-ahead.txt"
