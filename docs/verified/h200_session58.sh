#!/usr/bin/env bash
# Session of 2026-12-07 (night) on one GPU host. PART=cold: h200_session57.sh's cold part
# (the cold sweep against Kernel Tuner, its store's rows, a 4-candidate vector_add sweep with
# KOPT_DEBUG_THREADS), then both stores' rows by status with how many say a worker of the
# harness's OpenMP team was not back in its idle wait (workers.sandbox TEAM_LEFT,
# workers.teams) or the job's code entered the harness's interpreter (ENTERED, workers.audit).
# PART=gpu-x|gpu-y: as h200_session37.sh (pytest -m gpu, its two halves).
# Usage (repo root, GPU host, .devsite carried): PART=cold|gpu-x|gpu-y bash docs/verified/h200_session58.sh
set -uo pipefail
if [ "${PART:-}" != cold ]; then exec bash docs/verified/h200_session37.sh; fi
PART=cold bash docs/verified/h200_session57.sh
. docs/verified/device_env.sh > /dev/null 2>&1
for store in /tmp/vskt/store-cold /tmp/st-va; do
  echo "== $store: team_left, entered"
  kopt query --store "$store" --format csv "select status, count(*) n, sum(case when error like '%OpenMP team still ran%' then 1 else 0 end) team_left, sum(case when error like '%entered the harness''s Python%' then 1 else 0 end) entered from candidates group by status order by status"
done 2>&1 | tee "$out/rows58.txt"
