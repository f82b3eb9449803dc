#!/usr/bin/env bash
# The decode-time sweeps of issue 26 on one H200, each from a clean store, capped so that all
# of them take under 6 minutes of wall (each sweep under its own `timeout`). Per sweep, into
# $out/summary.txt: the CLI's closing table, `kopt best`, the contender's figures (ref.py's
# PyTorch call), the winner and the baseline per problem size against it (vs_reference), the
# statuses and the first failures; every candidate row goes to $out/SWEEP-candidates.csv.gz
# (8 files in all: the device tool returns at most 8). One sweep's failure never stops the
# others. On a 2-core box one build took rmsnorm_residual ~8 s, rotary ~3 s, lm_head_top1
# ~13 s, w4a16_gemv ~7 s, gate_up_silu ~8 s, decode_attention ~2-3 s, w8a8_gemm ~2-3 s of
# CPU; the lm_head_top1 GEMV reads 1.2 GB per call (~0.3 ms) and its inputs (4 sets of 1.2 GB)
# are drawn on the GPU, as are decode_attention's K and V caches (0.5 GB a set at L = 32768
# and at B = 4; its naive baseline runs one block per (b, h): 32 blocks at B = 1); w8a8_gemm's
# inputs are drawn and quantized on the CPU (~1 s a set at 512 x 11008 x 4096).
# Usage (repo root, on the GPU host): bash docs/verified/h200_decode_kernels.sh [SWEEP ...]
#   (default: all seven decode sweeps; CAP_<sweep>=N overrides a sweep's cap)
set -uo pipefail
. docs/verified/device_env.sh
set -x
sum=$out/summary.txt
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$sum"
nvcc --version | tail -1 | tee -a "$sum"
# candidates per sweep (the baseline and a deterministic sample): ~15 s of Ray start, ~10-20 s
# of builds, ~15-30 s of runs and ~15 s of Nsight Compute (the top 3, `ncu:` default) each
declare -A CAP=([rmsnorm_residual]=16 [rotary]=16 [lm_head_top1]=12 [w4a16_gemv]=12
                [gate_up_silu]=12 [decode_attention]=12 [w8a8_gemm]=12)
# seconds each sweep may take, Ray's start included (320 s together at most; a sweep cut
# short, in Nsight Compute say, keeps the rows it stored, and `kopt best` says it was
# interrupted)
declare -A LIMIT=([rmsnorm_residual]=50 [rotary]=60 [lm_head_top1]=55 [w4a16_gemv]=45
                  [gate_up_silu]=50 [decode_attention]=60 [w8a8_gemm]=60)
q() { timeout 60 python3 -m kopt query --store "$1" --format csv "$2" 2>&1; }
for sw in "${@:-rmsnorm_residual rotary lm_head_top1 w4a16_gemv gate_up_silu decode_attention w8a8_gemm}"; do
  for s in $sw; do
    store=/tmp/kopt-decode-store-$s
    log=/tmp/kopt-decode-$s.log
    rm -rf "$store"
    cap_var=CAP_$s
    cap=${!cap_var:-${CAP[$s]:-30}}
    start=$SECONDS
    timeout "${LIMIT[$s]:-120}" python3 -m kopt sweep "sweeps/$s" --backend cuda --store "$store" \
      --max-candidates "$cap" --top 8 > "$log" 2>&1
    rc=$?
    { echo "==== $s: rc $rc, process wall_s $((SECONDS - start)) (Ray start included), cap $cap"
      grep -v "^built\|^ran " "$log" | tail -40
      timeout 60 python3 -m kopt best "$s" --store "$store" 2>&1
      echo "== the contender (ref.py: what a user calls), per problem size"
      q "$store" "select dims, impl, status, round(median_ms, 4) ms, round(gbps) gbps, max_abs_err, max_rel_err, error from reference order by dims"
      echo "== winner and baseline per problem size vs the contender"
      q "$store" "select dims, is_baseline, compute_method, memory_method, latency_method, params, round(median_ms, 4) ms, round(reference_ms, 4) ref_ms, round(vs_reference, 2) vs_ref, round(speedup, 2) speedup, round(gbps) gbps, max_abs_err, max_rel_err from candidates where status = 'ok' qualify row_number() over (partition by dims, is_baseline order by median_ms) = 1 order by dims, is_baseline"
      echo "== statuses"
      q "$store" "select status, count(*) n, round(sum(compile_s), 1) compile_cpu_s, max(spill_bytes) max_spill from candidates group by 1 order by 1"
      echo "== failures (first 10)"
      q "$store" "select dims, candidate_id, status, left(error, 300) error from candidates where status != 'ok' limit 10"
    } >> "$sum" 2>&1
    q "$store" "select * exclude (samples_ms) from candidates order by dims, median_ms nulls last" > "$out/$s-candidates.csv"
    gzip -f "$out/$s-candidates.csv"
  done
done
cat "$sum"
