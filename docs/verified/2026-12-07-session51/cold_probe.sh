#!/usr/bin/env bash
# Where a cold sgemm_kt sweep's wall goes (session 51): the same cold sweep Kernel Tuner is
# compared with (bench/vs_kernel_tuner.py's copy of sweeps/sgemm_kt at 2048^3, NCU on, empty
# build cache, fresh store), run plainly (RUNS of them), then once under py-spy (every Python
# process of the run, its children too, sampled with idle threads: a chrometrace), then the
# per-job parts of 24 candidates (bench/check_cost.py). Carry .devsite and .prof (py-spy's
# binary, xz). Usage (repo root, GPU host): RUNS=2 SPY=1 COST=1 bash THIS
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/probe.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/probe.txt"
rm -rf /tmp/cp && mkdir -p /tmp/cp
python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path
from vs_kernel_tuner import sweep_copy; print(sweep_copy(Path('/tmp/cp'), 2048, True))" || exit 1
phases_of() {  # $1 store, $2 its log
  { echo "== $(basename "$1")"; tail -3 "$2"
    kopt query --store "$1" --format csv "select phase, device, round(start_s,2) s0, round(end_s,2) s1, detail from phases where phase not in ('build', 'busy') order by start_s"
    kopt query --store "$1" --format csv "select count(*) busy_jobs, round(sum(end_s-start_s),2) busy_s, round(min(start_s),2) first, round(max(end_s),2) last from phases where phase = 'busy'"
    kopt query --store "$1" --format csv "select count(*) builds, round(sum(end_s-start_s),1) cpu_s, round(min(start_s),2) first_start, round(min(end_s),2) first_end, round(max(end_s),2) last_end from phases where phase='build'"
  } >> "$out/phases-probe.txt" 2>&1
}
cold() {  # $1 label, then an optional command prefix
  local label=$1; shift
  rm -rf "/tmp/cp/cache-$label" "/tmp/cp/store-$label"; t0=$(date +%s.%N)
  env KOPT_CACHE="/tmp/cp/cache-$label" "$@" python3 -m kopt sweep /tmp/cp/sgemm_kt \
    --store "/tmp/cp/store-$label" --backend cuda > "/tmp/cp/$label.log" 2>&1
  echo "$label: rc $? process wall $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/probe.txt"
  phases_of "/tmp/cp/store-$label" "/tmp/cp/$label.log"
}
for i in $(seq 1 "${RUNS:-1}"); do cold "plain$i"; done
if [ -n "${SPY:-}" ] && [ -f .prof/py-spy.xz ]; then
  xz -dc .prof/py-spy.xz > /tmp/py-spy && chmod +x /tmp/py-spy
  cold spy /tmp/py-spy record --subprocesses --idle --rate 50 --format chrometrace \
    -o /tmp/cp/trace.json --
  tail -5 /tmp/cp/spy.log
  ls -la /tmp/cp/trace.json && gzip -9c /tmp/cp/trace.json > "$out/trace-spy.json.gz"
fi
if [ -n "${COST:-}" ]; then
  timeout 200 python3 bench/check_cost.py /tmp/cp/sgemm_kt --n 24 --out /tmp/cp/cc > /tmp/cp/cc.log 2>&1
  echo "check_cost rc $?" | tee -a "$out/probe.txt"; tail -60 /tmp/cp/cc.log > "$out/check_cost.txt"
fi
cat "$out/phases-probe.txt"
