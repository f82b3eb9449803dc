#!/usr/bin/env bash
# sweeps/gemm_cutlass on an H200 (device tool, nvidia-h200): CUTLASS 3.x bf16 GEMMs built for
# sm_90a from the nvidia-cutlass package's headers, against torch.matmul (cuBLAS). Usage (repo
# root, on the GPU host; copy nvidia_cutlass-*.whl into .devsite/ first when the host's
# Python lacks the package):
#   bash docs/verified/h200_cutlass.sh [MAX_CANDIDATES [SWEEP [norerun]]]   (default 40 gemm_cutlass)
# norerun: skip the second sweep (12 candidates into a new store, every build a cache hit)
# SWEEP gemm_cutlass_fp32 is the fp32-accuracy problem (3xTF32), against torch.matmul in
# plain FP32 (TF32 off).
# Prints: the sweep (cold build cache), compile CPU-seconds, 12 of the same candidates again
# into a new store (every build a cache hit), the winner's median and TFLOP/s, and
# torch.matmul's under the same flush and statistics (a separate Python step: kopt's reference-as-contender timing,
# issue 17 item 1, is not on this branch). Everything goes to $OUT (or /tmp/kopt-verify).
# compile_s_spent sums the compiler's wall time over the builds that ran (cache hits keep the
# time of the build they reuse and are left out): with one nvcc per core, CPU-seconds.
set -uo pipefail
. docs/verified/device_env.sh
# find_spec, as kopt's `pkg:` include_dirs: the headers are needed, not the package's Python
has_cutlass() { python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('cutlass_library') is None)"; }
if ! has_cutlass; then
  whl=$(ls .devsite/nvidia_cutlass-*.whl 2>/dev/null | head -1)
  if [ -z "$whl" ]; then
    echo "nvidia-cutlass is not installed and no .devsite/nvidia_cutlass-*.whl: copy the wheel there" | tee "$out/cutlass.txt"
    exit 1
  fi
  python3 -m pip install -q --no-deps --target /tmp/site-cutlass "$whl" 2>&1 | tail -2 \
    || { mkdir -p /tmp/site-cutlass && unzip -qo "$whl" -d /tmp/site-cutlass; }
  export PYTHONPATH=/tmp/site-cutlass:${PYTHONPATH:-$PWD}
  has_cutlass || { echo "the wheel did not install: $whl" | tee "$out/cutlass.txt"; exit 1; }
fi
n=${1:-40}
sw=${2:-gemm_cutlass}
dtype=$([ "$sw" = gemm_cutlass_fp32 ] && echo fp32 || echo bf16)
log="$out/$sw.txt"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  nvcc --version | tail -1
  echo "cpus $(nproc)"
  python3 -c "import importlib.util as u, torch; print('nvidia-cutlass at', u.find_spec('cutlass_library').submodule_search_locations[0], 'torch', torch.__version__)"
} 2>&1 | tee "$log"
export KOPT_CACHE=/tmp/kopt-cutlass-cache
rm -rf "$KOPT_CACHE" /tmp/kopt-cutlass-store /tmp/kopt-cutlass-store2  # a cold cache per run
start=$SECONDS
kopt sweep sweeps/$sw --backend cuda --store /tmp/kopt-cutlass-store \
  --max-candidates "$n" --top 10 2>&1 | grep -v "^built\|^ran " | tee -a "$log"
echo "sweep 1 (cold cache) wall_s $((SECONDS - start)) (incl. Ray start)" | tee -a "$log"
q() { kopt query --store "$1" --format csv "$2" 2>&1 | tee -a "$log"; }
echo "== builds, sweep 1: status, candidates, compile CPU-seconds, cache hits" | tee -a "$log"
q /tmp/kopt-cutlass-store "select status, arch, count(*) n, round(sum(compile_s) filter (where not build_cached), 1) compile_s_spent, round(max(compile_s), 1) max_compile_s, sum(case when build_cached then 1 else 0 end) cache_hits from candidates group by 1, 2 order by 1"
q /tmp/kopt-cutlass-store "select status, count(*) n, any_value(error) error from candidates where status <> 'ok' group by 1"
echo "== winner and baseline (median_ms, TFLOP/s = flops / median)" | tee -a "$log"
q /tmp/kopt-cutlass-store "select is_baseline, params, median_ms, iqr_ms, n_samples, round(flops / median_ms / 1e9, 1) tflops, registers, max_abs_err from candidates where status = 'ok' and (is_baseline or median_ms = (select min(median_ms) from candidates where status = 'ok')) order by median_ms"
kopt query --store /tmp/kopt-cutlass-store --format csv "select * exclude (samples_ms) from candidates order by median_ms nulls last" > "$out/$sw-candidates.csv"
gzip -f "$out/$sw-candidates.csv"
if [ "${3:-}" != norerun ]; then
start=$SECONDS
kopt sweep sweeps/$sw --backend cuda --store /tmp/kopt-cutlass-store2 \
  --max-candidates 12 --top 3 2>&1 | grep -v "^built\|^ran " | tail -8 | tee -a "$log"
echo "sweep 2 (same build cache, new store) wall_s $((SECONDS - start))" | tee -a "$log"
echo "== builds, sweep 2: candidates, compile CPU-seconds, cache hits" | tee -a "$log"
q /tmp/kopt-cutlass-store2 "select count(*) n, round(coalesce(sum(compile_s) filter (where not build_cached), 0), 1) compile_s_spent, sum(case when build_cached then 1 else 0 end) cache_hits from candidates"
fi
echo "== torch.matmul $dtype (cuBLAS), same flush and statistics (separate Python step)" | tee -a "$log"
best=$(kopt query --store /tmp/kopt-cutlass-store --format csv "select min(median_ms) from candidates where status = 'ok'" | tail -1)
python3 docs/verified/h200_cutlass_matmul.py 4096 4096 4096 "$best" "$dtype" 2>&1 | tee -a "$log"
echo "== kopt's reference row (ref.py's contender timed by the harness) and kopt best" | tee -a "$log"
q /tmp/kopt-cutlass-store "select impl, status, median_ms, iqr_ms, n_samples, round(flops / median_ms / 1e9, 1) tflops, peak_tflops, max_abs_err, max_rel_err from reference"
kopt best "$sw" --store /tmp/kopt-cutlass-store 2>&1 | tail -12 | tee -a "$log"
run=$(kopt query --store /tmp/kopt-cutlass-store --format csv "select max(run_id) from runs" | tail -1 | tr -d '"')
rm -rf "$out/report-$sw"
kopt report "$run" --store /tmp/kopt-cutlass-store --out "$out/report-$sw" 2>&1 | tail -3 | tee -a "$log"
echo "total wall_s $SECONDS" | tee -a "$log"
