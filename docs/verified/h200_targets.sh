#!/usr/bin/env bash
# Issue 14's targets on one H200, side by side in one run (bench/vs_kernel_tuner.py): Kernel
# Tuner 1.5 brute force, then kopt cold (NCU on: the sweep's defaults), cold without NCU, and
# the same two on a warm kopt service, each with an empty build cache and a fresh store, on
# Kernel Tuner's sgemm space at 2048^3; every kopt run's phases table as CSV.
# Usage (repo root, GPU host; .devsite carries kernel_tuner, python-constraint2, xmltodict:
# KOPT_DEVICE_PKGS, see ../shared/tools/GPU.md): bash docs/verified/h200_targets.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/targets.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/targets.txt"
rm -rf /tmp/vskt
timeout 560 python3 bench/vs_kernel_tuner.py --size 2048 --out /tmp/vskt \
  --kopt "${KOPT_RUNS:-cold,cold-noncu,warm,warm-noncu}" 2>&1 | tail -30 | tee -a "$out/targets.txt"
cp /tmp/vskt/vs_kernel_tuner.json /tmp/vskt/*.log /tmp/vskt/ray-timeline-*.json "$out/" 2>/dev/null
for s in /tmp/vskt/store-*; do
  n=$(basename "$s")
  kopt query --store "$s" --format csv "select phase, device, round(start_s,2) s0, round(end_s,2) s1, detail from phases where phase <> 'build' order by start_s" > "$out/$n.phases.csv" 2>&1
  kopt query --store "$s" --format csv "select count(*) builds, round(sum(end_s-start_s),1) cpu_s, round(min(start_s),2) first_start, round(min(end_s),2) first_end, round(max(end_s),2) last_end from phases where phase='build'" >> "$out/$n.phases.csv" 2>&1
done
