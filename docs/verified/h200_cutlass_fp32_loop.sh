#!/usr/bin/env bash
# Issue 17 (fp32-accuracy GEMM target, item 3's sm_90a methods, item 1's reference row) on one
# H200, in one device call: sweeps/gemm_cutlass_fp32 through the NCU loop, cold build cache.
#   iteration 1: the 3xTF32 baseline's launch configs (CUTLASS 2.x Sm80, sm_90) and every
#     realized method (the loop's first iteration treats each as triggered): memory.async_copy
#     (TMA form, bf16x3 on wgmma) and compute.warp_specialization (requires async_copy), both
#     built for sm_90a; NCU on the baseline and the top 2
#   iteration 2: from the winner and its NCU evidence (stops when nothing is left to try)
# then kopt report (pictures), propose, best, and queries: per-iteration winners against the
# reference row (cuBLAS plain FP32, TF32 off: ref.py's contender), accuracy against the fp64
# reference, the evidence ledger, stall fractions of baseline and winner, builds.
# Usage (repo root on the GPU host; copy nvidia_cutlass-*.whl into .devsite/ first when the
# host's Python lacks the package):  bash docs/verified/h200_cutlass_fp32_loop.sh [ITERATIONS]
set -uo pipefail
. docs/verified/device_env.sh
has_cutlass() { python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass_library') is None)"; }
if ! has_cutlass; then
  whl=$(ls .devsite/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  [ -n "$whl" ] || { echo "no nvidia-cutlass and no .devsite/nvidia_cutlass-*.whl" | tee "$out/fp32-loop.txt"; exit 1; }
  mkdir -p /tmp/site-cutlass && python3 -m zipfile -e "$whl" /tmp/site-cutlass
  export PYTHONPATH=/tmp/site-cutlass:${PYTHONPATH:-$PWD}
  has_cutlass || { echo "the wheel did not install: $whl" | tee "$out/fp32-loop.txt"; exit 1; }
fi
export COLUMNS=${COLUMNS:-200}
its=${1:-2}
sw=sweeps/gemm_cutlass_fp32
store=/tmp/kopt-fp32-store
export KOPT_CACHE=/tmp/kopt-fp32-cache
rm -rf "$KOPT_CACHE" "$store"
log=$out/fp32-loop.txt
exec > >(tee -a "$log") 2>&1
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)"; date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
nvcc --version | tail -1; ncu --version | tail -1; echo "cpus $(nproc)"
start=$SECONDS
timeout 480 python3 -m kopt.cli sweep $sw --backend cuda --store $store --iterations "$its" \
  --top 12 2>&1 | grep -v "^built\|^ran "
echo "sweep wall_s $((SECONDS - start)) (incl. Ray start)"
q() { echo "== $1"; timeout 60 python3 -m kopt.cli query --store $store --format csv "$2" 2>&1; }
q "runs" "select run_id, status, n_candidates, n_jobs, round(wall_s, 1) wall_s, round(compile_cpu_s, 1) compile_cpu_s from runs order by created_at"
q "statuses per iteration and arch" "select iteration, arch, status, count(*) n, round(sum(compile_s) filter (where not build_cached), 1) compile_s_spent, round(max(compile_s), 1) max_compile_s, sum(case when build_cached then 1 else 0 end) cache_hits from candidates group by all order by all"
q "errors" "select status, count(*) n, any_value(left(error, 300)) error from candidates where status not in ('ok') group by 1"
q "reference row (timed contender)" "select impl, status, dims, median_ms, iqr_ms, n_samples, round(flops / median_ms / 1e9, 1) tflops, max_abs_err, max_rel_err, peak_tflops from reference"
q "best per iteration and triple (median ms, x vs reference, TFLOP/s, errors vs fp64)" "select iteration, compute_method, memory_method, arch, min(median_ms) best_ms, arg_min(params, median_ms) params, round(max(vs_reference), 3) vs_ref, round(max(tflops), 1) tflops, arg_min(max_abs_err, median_ms) max_abs_err, arg_min(max_rel_err, median_ms) max_rel_err, count(*) n from candidates where status = 'ok' group by all order by iteration, best_ms"
q "baseline" "select iteration, median_ms, iqr_ms, vs_reference, tflops, max_abs_err from candidates where is_baseline and status = 'ok'"
q "evidence ledger" "select iteration, method, metric, op, threshold, round(before, 4) before, round(after, 4) after, holds_before, holds_after, accepted, note from evidence order by created_at"
q "profiles" "select p.job_key, p.profile_status, round(compute_score, 3) c, round(memory_score, 3) m, round(latency_score, 3) l, bottleneck from profiles_raw p"
q "stall fractions per profiled candidate and kernel (of all stall cycles)" "with s as (select candidate_id, iteration, kernel, metric, value from metrics where metric like 'smsp__average_warps_issue_stalled_%_per_issue_active.ratio' or metric = 'smsp__average_warp_latency_per_inst_issued.ratio'), t as (select candidate_id, iteration, kernel, max(value) filter (where metric = 'smsp__average_warp_latency_per_inst_issued.ratio') tot from s group by all) select s.iteration, left(s.candidate_id, 8) cand, left(s.kernel, 50) kernel, replace(replace(metric, 'smsp__average_warps_issue_stalled_', ''), '_per_issue_active.ratio', '') stall, round(value / tot, 3) frac from s join t using (candidate_id, iteration, kernel) where metric <> 'smsp__average_warp_latency_per_inst_issued.ratio' and value / tot >= 0.05 order by s.iteration, cand, kernel, frac desc"
q "SOL of profiled candidates" "select iteration, left(candidate_id, 8) cand, left(kernel, 50) kernel, metric, round(value, 2) v from metrics where metric in ('sm__throughput.avg.pct_of_peak_sustained_elapsed', 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed', 'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', 'sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active', 'gpu__time_duration.sum', 'launch__registers_per_thread', 'sm__warps_active.avg.pct_of_peak_sustained_active') order by all"
timeout 120 python3 -m kopt.cli propose $sw --store $store
timeout 120 python3 -m kopt.cli best gemm_cutlass_fp32 --store $store 2>&1 | tail -20
run=$(timeout 60 python3 -m kopt.cli query --store $store --format csv "select max(run_id) from runs" | tail -1 | tr -d '"')
rm -rf "$out/report"; timeout 180 python3 -m kopt.cli report "$run" --store $store --out "$out/report" 2>&1 | tail -5
timeout 60 python3 -m kopt.cli lineage "$run" --store $store 2>&1 | tail -30
timeout 60 python3 -m kopt.cli query --store $store --format csv "select * exclude (samples_ms) from candidates order by iteration, median_ms nulls last" > "$out/fp32-candidates.csv"
gzip -f "$out/fp32-candidates.csv"
tar -czf "$out/fp32-store.tar.gz" -C /tmp kopt-fp32-store
echo "total wall_s $((SECONDS - start))"
