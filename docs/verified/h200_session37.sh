#!/usr/bin/env bash
# Session of 2026-12-05 (afternoon) on one H200. PART=targets: the cold sweep against Kernel
# Tuner (h200_targets.sh, cold only), the guards' cost (bench/check_cost.py, sgemm, 24
# candidates), then the 4-candidate vector_add sweep twice: as shipped, and with the GPU
# harness refusing every call the CPU harness refuses (workers.harness's
# ``seccomp.install(keep=...)`` edited on the device's copy only; the ncu target keeps its
# list), each with its phases. PART=gpu: `pytest -m gpu` whole, with durations.
# PART=sweep: the 4-candidate vector_add sweep alone, with its contests' witness figures.
# PART=cold: the cold sweep against Kernel Tuner and the guards' cost alone (targets' first two).
# Usage (repo root, GPU host, .devsite carried): PART=targets|cold|judge-ab|cost29|gpu|gpu-a|gpu-b|gpu-c|gpu-x|gpu-y|sweep
# bash docs/verified/h200_session37.sh; PART may name several, comma-separated, run in order
# (with SWEEP=1 beside other PARTs, the sweep runs after each of them: its file keeps the last)
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/code.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/code.txt"
phases() {  # $1 store: the phases but builds and busy, and the busy jobs' sum
  kopt query --store "$1" --format csv "select phase, round(start_s,2) s0, round(end_s,2) s1, round(end_s-start_s,2) len, detail from phases where phase not in ('build', 'busy') order by start_s"
  kopt query --store "$1" --format csv "select count(*) busy_jobs, round(sum(end_s-start_s),2) busy_s from phases where phase = 'busy'"
}
sweep4() {  # $1 label: the 4-candidate vector_add sweep, cold cache, fresh store
  rm -rf /tmp/c-$1 /tmp/st-$1; t0=$(date +%s.%N)
  KOPT_CACHE=/tmp/c-$1 timeout 200 python3 -m kopt sweep sweeps/vector_add --backend cuda \
    --max-candidates 4 --store /tmp/st-$1 > "$out/sweep-$1.txt" 2>&1
  echo "$1: rc $? wall $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/sweep-$1.txt"
  phases /tmp/st-$1 >> "$out/sweep-$1.txt" 2>&1
  kopt query --store /tmp/st-$1 --format csv "select status, count(*) n from candidates group by status" >> "$out/sweep-$1.txt" 2>&1
  kopt query --store /tmp/st-$1 --format csv "select * from contests" >> "$out/sweep-$1.txt" 2>&1
}
one_part() {
# PART=judge-ab: the cold sweep against Kernel Tuner, then the same sweep with
# KOPT_PRESTART_JUDGE=0 (no judge started before Ray: the prestarted judge's other arm) and
# with KOPT_SPARES=0 (no contender harness started ahead: workers.spares' other arm), fresh
# store and cache each, back to back, each with its phases; then the guards' cost as PART=cold
if [ "${PART:-}" = judge-ab ]; then
  KOPT_RUNS=cold AB=1 AB_VARS="${AB_VARS:-KOPT_PRESTART_JUDGE KOPT_SPARES}" AB_SWEEPS=sgemm_kt \
    bash docs/verified/h200_targets.sh
  PART=cold_cost
fi
if [ "${PART:-}" = targets ] || [ "${PART:-}" = cold ]; then
  KOPT_RUNS=cold bash docs/verified/h200_targets.sh
  PART=${PART/cold/cold_cost}
fi
if [ "${PART:-}" = targets ] || [ "${PART:-}" = cold_cost ]; then
  timeout 200 python3 bench/check_cost.py sweeps/sgemm --n 24 --out /tmp/cc > "$out/check_cost.txt" 2>&1
  echo "check_cost rc $?" >> "$out/check_cost.txt"; cp /tmp/cc/check_cost.json "$out/" 2>/dev/null
  tail -12 "$out/targets.txt"; grep -E "per candidate|extra|wall" "$out/check_cost.txt" | head
fi
# PART=cost29: bench/check_cost.py at eac0941 (the judge-outside issue's filing: its target is
# the guards' device time per candidate within 15 % of that commit's) and here, back to back on
# one device. The old tree: `git archive eac0941 workers kopt bench sweeps/sgemm catalog
# pyproject.toml | xz -9 > .old/eac0941-min.tar.xz`, carried (.old)
if [ "${PART:-}" = cost29 ]; then
  rm -rf /tmp/old29 && mkdir -p /tmp/old29 && tar -xJf .old/eac0941-min.tar.xz -C /tmp/old29
  old_path=${PYTHONPATH/$PWD//tmp/old29}  # the packed site kept, this checkout not
  (cd /tmp/old29 && PYTHONPATH=$old_path timeout 280 python3 bench/check_cost.py \
    sweeps/sgemm --n 24 --out /tmp/cc-old > "$out/check_cost-eac0941.txt" 2>&1; echo "rc $?" >> "$out/check_cost-eac0941.txt")
  cp /tmp/cc-old/check_cost.json "$out/check_cost-eac0941.json" 2>/dev/null
  timeout 280 python3 bench/check_cost.py sweeps/sgemm --n 24 --out /tmp/cc > "$out/check_cost.txt" 2>&1
  echo "rc $?" >> "$out/check_cost.txt"; cp /tmp/cc/check_cost.json "$out/" 2>/dev/null
  grep -A3 wall_s_per_candidate "$out/check_cost-eac0941.txt" "$out/check_cost.txt"
fi
if [ "${PART:-}" = targets ]; then
  sweep4 shipped
  cp workers/harness.py /tmp/harness.py.shipped
  sed -i 's/seccomp.install(keep=() if device == "cpu" else seccomp.UNTRIED_ON_GPU)/seccomp.install(keep=())/' workers/harness.py
  grep -n "seccomp.install(keep" workers/harness.py | tee "$out/patched.txt"
  sweep4 refused
  cp /tmp/harness.py.shipped workers/harness.py
fi
# PART=gpu-a / gpu-b / gpu-c: the GPU tests in three parts (about 460, 250 and 300 s of tests
# on an H100 at 7947577/64389ce; the whole set took 580 s there at 5b2d5c7, before witness
# turns, and no longer fits in one 600 s device call)
THIRD_A="ncu_loop or vector_add_sweep or faults_are_rows or kernel_mode or twenty_honest"
THIRD_C="plausibility_gate or patched_gpu_clock or gpu_forgers or honest_gpu_contenders"
# gpu-x / gpu-y: the same in two parts of about 490 and 450 s of tests (H100, the same
# commits), for a session whose device time allows only two calls
HALF_X="$THIRD_A or l2_set_aside or real_ncu_capture or preflight_on or prestarted or nvml or leak_measure"
local label=$PART GPU_K=${GPU_K:-}
case "${PART:-}" in
  gpu-x) PART=gpu GPU_K="$HALF_X" ;;
  gpu-y) PART=gpu GPU_K="not ($HALF_X)" ;;
  gpu-a) PART=gpu GPU_K="$THIRD_A" ;;
  gpu-b) PART=gpu GPU_K="not ($THIRD_A) and not ($THIRD_C)" ;;
  gpu-c) PART=gpu GPU_K="$THIRD_C" ;;
esac
if [ "${PART:-}" = gpu ]; then
  # GPU_S: pytest's time limit (SIGINT: pytest still prints what failed); GPU_K: a -k expression (a part, where device time is short)
  timeout -s INT -k 20 ${GPU_S:-560} python3 -m pytest -v -rfE -m gpu -p no:cacheprovider tests/test_gpu.py \
    tests/test_gpu_faults.py tests/test_kernel_mode.py tests/test_gpu_witness.py --durations=20 ${GPU_K:+-k "$GPU_K"} \
    > "$out/pytest-$label.txt" 2>&1
  tail -45 "$out/pytest-$label.txt"
fi
if [ "${PART:-}" = sweep ] || [ -n "${SWEEP:-}" ]; then
  sweep4 kept; tail -30 "$out/sweep-kept.txt"
fi
}
for PART in ${PART//,/ }; do one_part; done
