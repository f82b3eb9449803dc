#!/usr/bin/env bash
# The agent's loop on a warm H200 service, once more after the try's fixed costs were cut
# (catalog and metric guide parsed in the spare, runs views reused): bench/agent_loop.py in
# kernel mode (NVRTC builds) and with nvcc builds, 12 tries each, every try's device time
# (busy, contest, NCU, outside clock) and the phases of slow tries; then the whole loop
# through JSON (h200_agent_loop_full.sh) and `pytest -m gpu`.
# Usage (repo root, GPU host, .devsite carried): bash docs/verified/h200_warm_loop.sh [PART]
# PART: all (default), bench, full, tests, or kernel (the kernel-mode bench alone).
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
part=${1:-all}
cat .kopt_rev 2>/dev/null | tee "$out/rev.txt"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -r; nproc; } \
  2>&1 | tee "$out/env.txt"
if [ "$part" = all ] || [ "$part" = bench ] || [ "$part" = kernel ]; then
  timeout 200 python3 bench/agent_loop.py --tries 12 --backend cuda --kernel-mode 2>&1 \
    | tail -40 | tee "$out/agent_loop_kernel_mode.txt"
fi
if [ "$part" = all ] || [ "$part" = bench ]; then
  timeout 200 python3 bench/agent_loop.py --tries 12 --backend cuda 2>&1 | tail -40 \
    | tee "$out/agent_loop_nvcc.txt"
fi
if [ "$part" = all ] || [ "$part" = full ]; then
  OUT="$out/full" timeout 240 bash docs/verified/h200_agent_loop_full.sh 2>&1 | tail -30 \
    > "$out/full.txt"; cat "$out/full.txt"
  tar -czf "$out/full.tar.gz" -C "$out" full && rm -rf "$out/full"  # 8 files come back at most
fi
if [ "$part" = all ] || [ "$part" = tests ]; then
  timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests 2>&1 \
    | grep -E "^(PASSED|FAILED|ERROR|E )|passed|failed" | head -60 | tee "$out/pytest_gpu.txt"
fi
