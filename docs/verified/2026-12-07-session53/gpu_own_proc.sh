#!/usr/bin/env bash
# Session 53's GPU check of the jail's read-only /proc with the harness's own /proc/PID
# writable (workers.jail own_proc): the jail test itself on the GPU host, the GPU tests that
# failed under a read-only /proc at f5f6a08 (ncu's target, the harness started before Ray),
# the new GPU test of a ref.py that starts a process, and the GPU tests that start CUDA
# harnesses, judges, contests and clocks in the jail.
# Usage (repo root, GPU host, .devsite carried): bash THIS
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/code.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/code.txt"
timeout -s INT 60 python3 -m pytest -v -p no:cacheprovider tests/test_isolation.py \
  -k "own_proc_entries" > "$out/pytest-jail-on-gpu-host.txt" 2>&1
tail -2 "$out/pytest-jail-on-gpu-host.txt"
timeout -s INT 250 python3 -m pytest -v -rfE -m gpu -p no:cacheprovider --durations=20 \
  tests/test_gpu_faults.py tests/test_gpu_witness.py tests/test_kernel_mode.py \
  -k "real_ncu or prestarted or twenty_honest or starts_a_process or honest_gpu_contenders \
or fields_exploit or kernel_mode" > "$out/pytest-gpu-own-proc.txt" 2>&1
tail -14 "$out/pytest-gpu-own-proc.txt"
