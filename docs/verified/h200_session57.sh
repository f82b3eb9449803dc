#!/usr/bin/env bash
# Session of 2026-12-07 (evening) on one GPU host. PART=cold: the cold sweep against Kernel
# Tuner (h200_targets.sh, cold only), then its store's rows by status with how many say a
# thread started during the job still ran in the harness's process (workers.sandbox
# THREADS_LEFT: the harness ended after it), and a 4-candidate vector_add sweep's the same,
# with the sandbox's thread names (KOPT_DEBUG_THREADS) where one is found.
# PART=gpu-x|gpu-y: as h200_session37.sh (pytest -m gpu, its two halves).
# Usage (repo root, GPU host, .devsite carried): PART=cold|gpu-x|gpu-y bash docs/verified/h200_session57.sh
set -uo pipefail
if [ "${PART:-}" != cold ]; then exec bash docs/verified/h200_session37.sh; fi
KOPT_RUNS=cold bash docs/verified/h200_targets.sh
. docs/verified/device_env.sh > /dev/null 2>&1
rows() {  # $1 store
  kopt query --store "$1" --format csv "select status, count(*) n, sum(case when error like '%still ran in the harness%' then 1 else 0 end) threads_left, sum(case when error like '%retried%' then 1 else 0 end) retried from candidates group by status order by status"
}
{ echo "== cold sweep's rows"; rows /tmp/vskt/store-cold; } 2>&1 | tee "$out/rows.txt"
rm -rf /tmp/c-va /tmp/st-va
KOPT_DEBUG_THREADS=1 KOPT_CACHE=/tmp/c-va timeout 200 python3 -m kopt sweep sweeps/vector_add \
  --backend cuda --max-candidates 4 --store /tmp/st-va > "$out/sweep-va.txt" 2>&1
echo "vector_add rc $?" | tee -a "$out/rows.txt"
{ echo "== vector_add's rows"; rows /tmp/st-va; grep -c "threads left" "$out/sweep-va.txt"; grep "threads left" "$out/sweep-va.txt" | head -5; } 2>&1 | tee -a "$out/rows.txt"
