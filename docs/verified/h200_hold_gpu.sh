#!/usr/bin/env bash
# `pytest -m gpu` on one H200 in two parts (each within the device tool's 10-minute call), and
# the hold's CPU tests on the host's CPU (the host gives no cgroup: the signals and the
# /proc/PID/stat reading of what a held sandbox used).
# Usage (repo root, GPU host, .devsite carried with google-re2's wheel in .devsite/whl):
#   PART=faults bash docs/verified/h200_hold_gpu.sh    # tests/test_gpu_faults.py
#   PART=rest bash docs/verified/h200_hold_gpu.sh      # the other -m gpu files, the hold's CPU tests
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
f="$out/gpu-${PART}.txt"
{ echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "from workers import isolation, cgroup; print(isolation.available()); print('cgroup:', cgroup.make())"
} 2>&1 | tee "$f"
if [ "$PART" = faults ]; then
  timeout 540 python3 -m pytest -q -rA -m gpu tests/test_gpu_faults.py --durations=0 -p no:cacheprovider 2>&1 | tail -45 | tee -a "$f"
else
  timeout 300 python3 -m pytest -q -rA -m gpu tests/test_gpu.py tests/test_kernel_mode.py --durations=0 -p no:cacheprovider 2>&1 | tail -25 | tee -a "$f"
  timeout 240 python3 -m pytest -q -rA tests/test_isolation.py tests/test_clock.py -k "held or hold or escape" -p no:cacheprovider 2>&1 | tail -30 | tee -a "$out/cpu-hold.txt"
fi
