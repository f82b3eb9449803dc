#!/usr/bin/env bash
# Issue 11 on an H200: the gpu tests, the fault pack as one sweep, and what the guards cost on
# sgemm (bench/check_cost.py). Usage (repo root, on the GPU host):
#   bash docs/verified/h200_faults.sh [tests] [pack] [cost]
set -uo pipefail
. docs/verified/device_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee "$out/env.txt"
git_rev=$(cat .kopt_rev 2>/dev/null || echo unknown); echo "code: $git_rev" | tee -a "$out/env.txt"
for step in "$@"; do
  case $step in
  tests)
    timeout 420 python3 -m pytest -q -m gpu -s tests/test_gpu_faults.py tests/test_gpu.py \
      tests/test_kernel_mode.py 2>&1 | tee "$out/gpu-tests.txt" ;;
  pack)
    store=/tmp/kopt-pack; rm -rf "$store"; export KOPT_CACHE=/tmp/kopt-pack-cache
    rm -rf "$KOPT_CACHE"
    rows() {  # the candidates of run $1, in the order they finished
      kopt query --store "$store" --format csv "select params->>'MODE' mode,
        params->>'GOOD' good, status, round(median_ms, 4) med_ms, round(full_ms, 4) full_time_ms,
        leaked_bytes, build_cached, n_samples,
        left(regexp_replace(coalesce(error, ''), '\s+', ' ', 'g'), 150) error
        from candidates where run_id = '$1' order by created_at"; }
    last_run() { kopt query --store "$store" --format csv \
      "select run_id from runs order by created_at" | tail -1; }
    kopt sweep tests/fixtures/faultpack --backend cuda --store "$store" 2>&1 | tail -5 | tee "$out/pack.txt"
    rows "$(last_run)" | tee -a "$out/pack.txt"
    # a damaged cache entry: the same sweep again (same build ids) rebuilds it
    f=$(ls "$KOPT_CACHE"/builds/*/solve.so | head -1); truncate -s 1000 "$f"
    echo "== truncated $f to 1000 bytes" | tee -a "$out/pack.txt"
    kopt sweep tests/fixtures/faultpack --backend cuda --store "$store" 2>&1 | grep -i "damaged\|rebuilt\|statuses\|ok " | tail -8 | tee -a "$out/pack.txt"
    rows "$(last_run)" | tee -a "$out/pack.txt"
    # a header edit: new build ids, every candidate rebuilt against the new coefficient
    sed -i 's/KOPT_COEF 0.5f/KOPT_COEF 0.25f/' tests/fixtures/faultpack/coef.h
    echo "== coef.h: KOPT_COEF 0.5f -> 0.25f" | tee -a "$out/pack.txt"
    kopt sweep tests/fixtures/faultpack --backend cuda --store "$store" 2>&1 | tail -3 | tee -a "$out/pack.txt"
    rows "$(last_run)" | tee -a "$out/pack.txt"
    sed -i 's/KOPT_COEF 0.25f/KOPT_COEF 0.5f/' tests/fixtures/faultpack/coef.h ;;
  cost)
    timeout 400 python3 bench/check_cost.py sweeps/sgemm --backend cuda --n 24 --out "$out" 2>&1 \
      | grep -v '^   ' | tee "$out/cost.txt" ;;
  esac
done
