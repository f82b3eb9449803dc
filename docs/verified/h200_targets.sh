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
python3 -c "import time; t = time.time(); import torch; print(f'import torch: {time.time() - t:.2f} s')" | tee -a "$out/targets.txt"
rm -rf /tmp/vskt
timeout 560 python3 bench/vs_kernel_tuner.py --size 2048 --out /tmp/vskt \
  --kopt "${KOPT_RUNS:-cold,cold-noncu,warm,warm-noncu}" ${KOPT_BENCH_ARGS:-} 2>&1 | tail -30 | tee -a "$out/targets.txt"
cp /tmp/vskt/vs_kernel_tuner.json "$out/" 2>/dev/null
cp /tmp/vskt/ray-timeline-cold.json "$out/" 2>/dev/null  # with KOPT_BENCH_ARGS=--timeline
phases_of() {  # $1 store, $2 its log: the phases but builds and busy, busy jobs, builds
  n=$(basename "$1")
  { echo "== $n"; tail -4 "$2"
    kopt query --store "$1" --format csv "select phase, device, round(start_s,2) s0, round(end_s,2) s1, detail from phases where phase not in ('build', 'busy') order by start_s"
    kopt query --store "$1" --format csv "select count(*) busy_jobs, round(sum(end_s-start_s),2) busy_s, round(min(start_s),2) first, round(max(end_s),2) last from phases where phase = 'busy'"
    kopt query --store "$1" --format csv "select count(*) builds, round(sum(end_s-start_s),1) cpu_s, round(min(start_s),2) first_start, round(min(end_s),2) first_end, round(max(end_s),2) last_end from phases where phase='build'"
  } >> "$out/phases.txt" 2>&1
}
for s in /tmp/vskt/store-*; do phases_of "$s" "/tmp/vskt/kopt-$(basename "${s#*/store-}").log"; done
# AB=1: the cold runs again with a start-up overlap switched off (KOPT_PRESTART=0: no
# harness before Ray; run 10 also had KOPT_PREBUILD, since reverted), fresh store and cache
if [ -n "${AB:-}" ]; then
  for v in ${AB_VARS:-KOPT_PRESTART}; do
    for s in ${AB_SWEEPS:-sgemm_kt_noncu}; do
      rm -rf /tmp/ab-cache /tmp/ab-store; t0=$(date +%s.%N)
      env $v=0 KOPT_CACHE=/tmp/ab-cache python3 -m kopt sweep /tmp/vskt/$s --store /tmp/ab-store --backend cuda > /tmp/ab.log 2>&1
      rc=$?
      echo "$v=0 $s: rc $rc process wall $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s; first result $(kopt query --store /tmp/ab-store --format csv "select round(end_s,2) from phases where phase='first_result'" | tail -1) s" | tee -a "$out/targets.txt"
      rm -rf "/tmp/ab-store-$v" && mv /tmp/ab-store "/tmp/ab-store-$v" && phases_of "/tmp/ab-store-$v" /tmp/ab.log
    done
  done
fi
# the cold run's report (summary.md with the phase table, timeline.png), as one file
rid=$(kopt query --store /tmp/vskt/store-cold --format csv "select distinct run_id from runs" | tail -1)
kopt report "$rid" --store /tmp/vskt/store-cold --out /tmp/vskt/report-cold > /dev/null 2>&1 \
  && tar -czf "$out/report-cold.tgz" -C /tmp/vskt report-cold
if [ -n "${GPU_TESTS:-}" ]; then
  timeout 240 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_gpu_faults.py tests/test_kernel_mode.py 2>&1 | tail -15 | tee "$out/pytest_gpu.txt"
fi
