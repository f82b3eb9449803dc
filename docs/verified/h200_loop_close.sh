#!/usr/bin/env bash
# Issue 11 item 8 on an H200: `kopt sweep sweeps/sgemm --iterations 3`, whose closing figure
# comes from the first baseline and every iteration's winner re-measured side by side (the
# contests rows with iteration 0), then the report and every candidate that is not ok with its
# error. Usage (repo root, on the GPU host): bash docs/verified/h200_loop_close.sh
set -uo pipefail
. docs/verified/device_env.sh
store=/tmp/kopt-loop-store
rm -rf "$store"
start=$SECONDS
kopt sweep sweeps/sgemm --iterations 3 --store "$store" --top 5 2>&1 | grep -v "^it [0-9]" | tee "$out/loop.txt"
echo "process wall_s $((SECONDS - start)) (incl. Ray start)" | tee -a "$out/loop.txt"
rid=$(kopt query --store "$store" --format csv "select run_id from runs" | tail -1)
kopt report "$rid" --store "$store" --out /tmp/kopt-report > /dev/null 2>&1
cp /tmp/kopt-report/summary.md "$out/summary.md"
kopt best sgemm --store "$store" 2>&1 | tee -a "$out/loop.txt"
echo "== the closing contest (iteration 0): side-by-side medians" | tee -a "$out/loop.txt"
kopt query --store "$store" --format csv "select c.candidate_id, k.iteration it, k.is_baseline,
  k.compute_method, k.memory_method, k.latency_method, round(c.median_ms, 4) side_ms,
  round(c.iqr_ms, 4) iqr, c.n_samples, c.label, c.winner
  from contests c left join (select distinct candidate_id, min(iteration) iteration,
  bool_or(is_baseline) is_baseline, any_value(compute_method) compute_method,
  any_value(memory_method) memory_method, any_value(latency_method) latency_method
  from candidates group by 1) k using (candidate_id) where c.iteration = 0 order by side_ms" 2>&1 | tee -a "$out/loop.txt"
echo "== per iteration: candidates, statuses, best median" | tee -a "$out/loop.txt"
kopt query --store "$store" --format csv "select iteration, status, count(*) n, round(min(median_ms), 4) best_ms
  from candidates group by all order by all" 2>&1 | tee -a "$out/loop.txt"
echo "== every candidate that is not ok" | tee -a "$out/loop.txt"
kopt query --store "$store" --format csv "select iteration, params, status,
  left(regexp_replace(coalesce(error, ''), '\s+', ' ', 'g'), 400) error
  from candidates where status != 'ok' order by all" 2>&1 | tee "$out/not_ok.csv" | head -40
echo "== guards' cost: job wall per candidate (s)" | tee -a "$out/loop.txt"
kopt query --store "$store" --format csv "select status, count(*) n, round(avg(wall_s), 3) mean_wall_s,
  round(median(wall_s), 3) median_wall_s, round(avg(n_samples), 1) samples from candidates group by 1" 2>&1 | tee -a "$out/loop.txt"
