#!/usr/bin/env bash
# Session 52's one GPU check of dac4bcd (the jail's /proc read-only; ref.py's processes the
# sandbox's own again): the sandbox's CPU tests of it on the GPU host, then the GPU tests
# that start CUDA harnesses, ncu targets, contests and clocks in the jail, then one cold
# sgemm_kt sweep. Usage (repo root, GPU host, .devsite carried): bash THIS
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/code.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/code.txt"
timeout -s INT 150 python3 -m pytest -v -p no:cacheprovider tests/test_isolation.py \
  tests/test_turns.py -k "reaches_no_file or ref_py" > "$out/pytest-cpu-on-gpu-host.txt" 2>&1
tail -3 "$out/pytest-cpu-on-gpu-host.txt"
PART=gpu GPU_S=${GPU_S:-300} GPU_K="twenty_honest or prestarted or real_ncu or fault_pack \
or exploit_classes or kernel_mode or honest_gpu_contenders" \
  bash docs/verified/h200_session37.sh | tail -16
RUNS=1 timeout 60 bash docs/verified/2026-12-07-session51/cold_probe.sh > /dev/null 2>&1
cat "$out/probe.txt"; grep -E "^(ncu|contest|clock)," "$out/phases-probe.txt"
