#!/usr/bin/env bash
# Session 49's diagnosis of the cold sweep's critical path on the GPU host (no Kernel Tuner):
# Ray's embedded start per step (ray_init_probe.py), then the cold sgemm_kt sweep (NCU on,
# 2048^3, empty build cache, fresh store) as shipped and again unsandboxed with every line
# of ncu's output time-stamped (NCU= a wrapper), each run's phases and per-job busy figures.
# Usage (repo root, GPU host): bash docs/verified/h200_diag49.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
log="$out/diag.txt"
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
python3 -c "import time; t = time.time(); import torch; print(f'import torch: {time.time() - t:.2f} s')" | tee -a "$log"
python3 docs/verified/2026-12-06-session49/ray_init_probe.py plain noapi plain noapi 2>&1 | tee -a "$log"
rm -rf /tmp/vskt && mkdir -p /tmp/vskt
python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; import vs_kernel_tuner as v; print(v.sweep_copy(Path('/tmp/vskt'), 2048, True))"
cat > /tmp/ncuts.sh <<'W'
#!/usr/bin/env bash
# ncu, every output line also written with its time to /tmp/ncu-ts.log
echo "$(date +%s.%N) START $*" >> /tmp/ncu-ts.log
"${REAL_NCU:-/usr/local/cuda/bin/ncu}" "$@" 2>&1 | while IFS= read -r l; do
  echo "$(date +%s.%N) $l" >> /tmp/ncu-ts.log; printf '%s\n' "$l"; done
rc=${PIPESTATUS[0]}; echo "$(date +%s.%N) EXIT $rc" >> /tmp/ncu-ts.log; exit $rc
W
chmod +x /tmp/ncuts.sh
export REAL_NCU=$(python3 -c "from workers.ncu import ncu_exe; print(ncu_exe())")
run() {  # $1 label, rest: env
  lab=$1; shift
  rm -rf /tmp/d-cache /tmp/d-store-$lab; t0=$(date +%s.%N)
  env "$@" KOPT_CACHE=/tmp/d-cache python3 -m kopt sweep /tmp/vskt/sgemm_kt --store /tmp/d-store-$lab --backend cuda > /tmp/d-$lab.log 2>&1
  rc=$?
  { echo "== $lab ($*): rc $rc process wall $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s, started $t0"
    tail -3 /tmp/d-$lab.log
    kopt query --store /tmp/d-store-$lab --format csv "select phase, device, round(start_s,2) s0, round(end_s,2) s1, detail from phases where phase not in ('build', 'busy') order by start_s"
    kopt query --store /tmp/d-store-$lab --format csv "select count(*) jobs, round(sum(end_s-start_s),2) busy_s, round(min(end_s-start_s)*1000,1) min_ms, round(median(end_s-start_s)*1000,1) med_ms, round(quantile_cont(end_s-start_s,0.9)*1000,1) p90_ms, round(max(end_s-start_s)*1000,1) max_ms, round(min(start_s),2) first, round(max(end_s),2) last from phases where phase = 'busy'"
    kopt query --store /tmp/d-store-$lab --format csv "select count(*) builds, round(sum(end_s-start_s),1) cpu_s, round(min(start_s),2) first_start, round(min(end_s),2) first_end, round(max(end_s),2) last_end from phases where phase='build'"
  } 2>&1 | tee -a "$log"
}
run shipped KOPT_NOTHING=0
rm -f /tmp/ncu-ts.log
run ncuts KOPT_ISOLATION=none NCU=/tmp/ncuts.sh
cp /tmp/ncu-ts.log "$out/ncu-ts.log" 2>/dev/null
grep -v "^[0-9.]* ==PROF== Profiling\|^[0-9.]* *[0-9]*%" /tmp/ncu-ts.log | cut -c1-220 | head -60 | tee -a "$log"
grep -c "==PROF== Profiling" /tmp/ncu-ts.log | tee -a "$log"
run shipped2 KOPT_NOTHING=0
