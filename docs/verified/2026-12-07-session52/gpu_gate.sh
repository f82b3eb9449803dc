#!/usr/bin/env bash
# Session 52's last GPU check: after the GPU's /proc was made writable again (the read-only
# one only for CPU devices), the GPU tests that failed under a read-only /proc at f5f6a08
# (ncu's target, the harness started before Ray) and twenty honest kernels.
# Usage (repo root, GPU host, .devsite carried): bash THIS
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/code.txt"
timeout -s INT 90 python3 -m pytest -v -rfE -m gpu -p no:cacheprovider tests/test_gpu_faults.py \
  -k "real_ncu or prestarted or twenty_honest" > "$out/pytest-gpu-gate.txt" 2>&1
tail -8 "$out/pytest-gpu-gate.txt"
