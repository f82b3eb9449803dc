#!/usr/bin/env bash
# Issue 14 on one H200 host: NVRTC compile latency against the number of compiles at once
# (docs/verified/h200_compile_latency.py). Usage (repo root, GPU host):
# bash docs/verified/h200_compile_latency.sh
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/compile-latency.txt"
timeout 200 python3 docs/verified/h200_compile_latency.py 2>&1 | tee -a "$out/compile-latency.txt"
