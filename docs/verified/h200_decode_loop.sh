#!/usr/bin/env bash
# The decode-time sweeps' loop on one H200, as the workflow runs it: on the warm kopt service
# (`kopt serve start`), per sweep a capped first iteration (`kopt sweep --queue
# --max-candidates`: the baseline and a deterministic sample of the space, NCU on the top 3),
# then each hand-written version in sweeps/<sweep>/versions/ (vN.cu, its analysis vN.md,
# whose first line is `claim: <methods>`) submitted with `kopt submit --queue` and awaited
# with `kopt wait`. Into $out/summary.txt per sweep: every command's exit status and time,
# the contender (ref.py: what a user calls), per iteration and problem size the best `ok`
# candidate (its version, methods, params, ms, GB/s, % of the DRAM peak kopt knows for the
# device, vs the contender) and the baseline, the submit/wait JSON verdicts, and the NCU
# metrics of the final best per problem size; every candidate row and every NCU metric row
# go to $out/decode-loop.tar.gz. One sweep's failure never stops the others.
# Usage (repo root, GPU host, .devsite carried):
#   bash docs/verified/h200_decode_loop.sh [SWEEP ...]   (default: all seven)
# (BACKEND=cpu LOCAL=1 ROOT=<folder of sweeps>: the same flow on the CPU backend, versions
# vN.cpp, on a machine whose Python has kopt's packages: a dry run of the script)
set -uo pipefail
if [ -z "${LOCAL:-}" ]; then . docs/verified/device_env.sh
else out=${OUT:-/tmp/kopt-verify}; mkdir -p "$out"; fi
BACKEND=${BACKEND:-cuda}; ROOT=${ROOT:-sweeps}; ext=cu; [ "$BACKEND" = cpu ] && ext=cpp
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} RAY_USAGE_STATS_ENABLED=0
W=/tmp/kopt-decode-loop; rm -rf $W; mkdir -p $W/csv
export KOPT_STORE=$W/store KOPT_CACHE=$W/cache
sum=$out/summary.txt
{ cat .kopt_rev 2>/dev/null; [ "$BACKEND" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -1; } | tee "$sum"
# candidates per sweep in the first iteration, and seconds each command may take
declare -A CAP=([gate_up_prefill]=13 [rmsnorm_residual]=12 [rotary]=12 [lm_head_top1]=10 [w4a16_gemv]=12
                [gate_up_silu]=10 [decode_attention]=12 [w8a8_gemm]=10)
LIMIT=${LIMIT:-120}
t() { local name=$1; shift; local t0=$(date +%s.%N)
  timeout "$LIMIT" "$@" > "$W/$name.out" 2> "$W/$name.err"; local rc=$?
  echo "$name rc $rc $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s" | tee -a "$sum"
  [ $rc -ne 0 ] && tail -5 "$W/$name.err" | sed 's/^/    /' | tee -a "$sum"; return $rc; }
q() { timeout 60 python3 -m kopt query --format csv "$1" 2>&1; }
t serve_start python3 -m kopt serve start --backend "$BACKEND"
for s in ${@:-rmsnorm_residual rotary lm_head_top1 w4a16_gemv gate_up_silu decode_attention w8a8_gemm}; do
  echo "==== $s" | tee -a "$sum"
  t "$s.sweep" python3 -m kopt sweep "$ROOT/$s" --queue --max-candidates "${CAP[$s]:-12}" --top 8
  RUN=$(awk '$1 == "run" {print $2; exit}' "$W/$s.sweep.err")
  echo "run $RUN" | tee -a "$sum"
  [ -z "$RUN" ] && continue
  grep -v "^built\|^ran " "$W/$s.sweep.out" | tail -25 >> "$sum"
  for v in "$ROOT/$s"/versions/v*.$ext; do
    [ -f "$v" ] || continue
    n=$(basename "$v" ".$ext"); note=${v%.$ext}.md
    claim=$(head -1 "$note" | sed 's/^claim: *//')
    t "$s.$n.submit" python3 -m kopt submit "$RUN" --source "$v" --methods "$claim" --note "$note" \
      --queue --format json
    t "$s.$n.wait" python3 -m kopt wait "$RUN" --format json
    for f in submit wait; do echo "-- $n $f:"; head -c 3000 "$W/$s.$n.$f.out"; echo; done >> "$sum"
  done
  t "$s.lineage" python3 -m kopt lineage "$RUN" --format json && head -c 4000 "$W/$s.lineage.out" >> "$sum"
  {
    echo "== the contender (ref.py: what a user calls), per problem size"
    q "select dims, impl, status, round(median_ms, 4) ms, round(gbps) gbps, round(pct_peak_bw, 1) pct_bw, round(pct_peak_flops, 1) pct_flops, max_abs_err, error from reference where run_id = '$RUN' order by dims"
    echo "== per iteration and problem size: the best ok candidate and the baseline"
    q "select iteration, dims, is_baseline, left(source_hash, 8) src, submitter, compute_method, memory_method, latency_method, params, round(median_ms, 4) ms, round(iqr_ms, 4) iqr, round(gbps) gbps, round(pct_peak_bw, 1) pct_bw, round(pct_peak_flops, 1) pct_flops, round(vs_reference, 2) vs_ref, round(speedup, 2) speedup from candidates where run_id = '$RUN' and status = 'ok' qualify row_number() over (partition by iteration, dims, is_baseline order by median_ms) = 1 order by dims, iteration, is_baseline"
    echo "== statuses per iteration"
    q "select iteration, status, count(*) n, round(sum(compile_s), 1) compile_cpu_s, max(spill_bytes) max_spill from candidates where run_id = '$RUN' group by all order by all"
    echo "== failures (first 8)"
    q "select iteration, dims, candidate_id, status, left(error, 300) error from candidates where run_id = '$RUN' and status != 'ok' limit 8"
    echo "== NCU of the fastest profiled ok candidate per problem size (all iterations)"
    q "with p as (select distinct candidate_id, dims from metrics where run_id = '$RUN'), b as (select c.candidate_id, c.dims from candidates c join p using (candidate_id, dims) where c.run_id = '$RUN' and c.status = 'ok' qualify row_number() over (partition by c.dims order by c.median_ms) = 1) select m.dims, m.candidate_id, m.metric, round(m.value, 2) value, m.unit from metrics m join b using (candidate_id, dims) where m.run_id = '$RUN' and (m.metric like 'gpu__dram_throughput%' or m.metric like 'sm__throughput%' or m.metric like 'dram__bytes%' or m.metric like 'sm__pipe_tensor%' or m.metric like 'sm__inst_executed_pipe_tensor%' or m.metric like 'launch__waves%' or m.metric like 'sm__warps_active%' or m.metric like 'gpu__time_duration%' or m.metric like 'lts__t_sector_hit_rate%' or m.metric like '%long_scoreboard%' or m.metric like '%stalled_barrier%' or m.metric like '%mio_throttle%' or m.metric like '%math_pipe%') order by m.dims, m.metric"
  } >> "$sum" 2>&1
  q "select * exclude (samples_ms) from candidates where run_id = '$RUN' order by iteration, dims, median_ms nulls last" > "$W/csv/$s-candidates.csv"
  q "select * from metrics where run_id = '$RUN'" > "$W/csv/$s-metrics.csv"
  cp "$W"/$s.*.out "$W"/$s.*.err "$W/csv/" 2>/dev/null
done
t serve_stop python3 -m kopt serve stop
tar -czf "$out/decode-loop.tar.gz" -C "$W" csv
cat "$sum"
