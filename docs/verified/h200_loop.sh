#!/usr/bin/env bash
# The NCU-guided loop on an H200: `kopt sweep sweeps/sgemm --iterations 3`, then report,
# propose and env. Usage (repo root, on the GPU host): bash docs/verified/h200_loop.sh
set -uo pipefail
. docs/verified/device_env.sh
store=/tmp/kopt-loop-store
rm -rf "$store"
start=$SECONDS
kopt sweep sweeps/sgemm --iterations 3 --store "$store" --top 5 2>&1 | grep -v "^it [0-9]" | tee "$out/loop.txt"
echo "process wall_s $((SECONDS - start)) (incl. Ray start)" | tee -a "$out/loop.txt"
rid=$(kopt query --store "$store" --format csv "select run_id from runs" | tail -1)
kopt report "$rid" --store "$store" --out /tmp/kopt-report | tee -a "$out/loop.txt"
cp /tmp/kopt-report/* "$out/"
kopt propose sweeps/sgemm --store "$store" 2>&1 | tee "$out/propose.txt"
kopt query --store "$store" --format csv "select iteration, count(*) n, sum((status='ok')::int) ok, count(distinct (compute_method, memory_method, latency_method)) triples, min(median_ms) best_ms, count(profile_status) profiled, string_agg(distinct profile_status, ' ') prof from candidates group by 1 order by 1" 2>&1 | tee -a "$out/loop.txt"
kopt query --store "$store" --format csv "select iteration, candidate_id, count(*) n_metrics, count(distinct kernel) kernels from metrics group by 1, 2 order by 1" 2>&1 | tee -a "$out/loop.txt"
kopt env 2>&1 | tee "$out/env.txt"
# the NCU evidence behind each trigger verdict, for calibrating the catalog's draft thresholds
mkdir -p /tmp/loop-data
kopt query --store "$store" --format csv "select iteration, candidate_id, kernel, metric, value, unit
  from metrics order by all" > /tmp/loop-data/metrics.csv
kopt query --store "$store" --format csv "select iteration, candidate_id, is_baseline,
  compute_method, memory_method, latency_method, params, status, median_ms, iqr_ms,
  profile_status, compute_score, memory_score, latency_score, bottleneck
  from candidates order by iteration, median_ms" > /tmp/loop-data/candidates.csv
kopt query --store "$store" --format csv "select * from iterations" > /tmp/loop-data/iterations.csv
tar -C /tmp/loop-data -czf "$out/loop-data.tgz" .
