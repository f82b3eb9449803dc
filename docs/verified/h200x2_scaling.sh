#!/usr/bin/env bash
# Issues #4 / #6: sweeps on 1 GPU, then on 2 GPUs of one host (device kind nvidia-h200-x2),
# each from a clean store, measured the same day. Per run: candidates/s, wall time, each
# GPU's busy fraction and idle-waiting-for-builds share (bench/overhead.py), and the device
# each candidate ran on. Usage (repo root, GPU host):
#   bash docs/verified/h200x2_scaling.sh [SWEEP[:cold|warm] ...]   (default: sgemm:cold
#   sgemm:warm vector_add:cold; cold = an empty build cache, warm = the cache of a run
#   before, so that only the queue and the devices are measured)
set -uo pipefail
. docs/verified/device_env.sh
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee "$out/env-x2.txt"
nproc | sed 's/^/cpus /' | tee -a "$out/env-x2.txt"
all=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
for item in ${@:-sgemm:cold sgemm:warm vector_add:cold}; do
  sw=${item%%:*}; mode=${item##*:}
  log="$out/$sw-$mode.txt"; : > "$log"
  for gpus in ${SCALING_GPUS:-0 $all}; do   # SCALING_GPUS=0,1: the 2-GPU run only
    n=$(echo "$gpus" | tr ',' '\n' | wc -l)
    store=/tmp/kopt-scaling-$sw-$mode-$n
    rm -rf "$store"
    if [ "$mode" = cold ]; then export KOPT_CACHE=/tmp/kopt-cache-$sw-cold-$n; rm -rf "$KOPT_CACHE"
    else export KOPT_CACHE=/tmp/kopt-cache-$sw-cold-1; fi   # warm: the 1-GPU cold run's cache
    start=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES=$gpus kopt sweep "sweeps/$sw" --store "$store" --iterations 1 --top 3 \
      2>&1 | grep -v "^it 1 built\|^it 1 ran " | tail -4 >> "$log"
    end=$(date +%s.%N)
    echo "== $sw $mode, $n GPU(s): process wall_s $(python3 -c "print(round($end - $start, 1))") (incl. Ray start)" | tee -a "$log"
    # timing phase: from the run's start to its last candidate row (the NCU tail after it)
    kopt query --store "$store" --format csv \
      "select $n gpus, count(*) candidates, round(any_value(r.wall_s), 2) run_wall_s,
              round(count(*) / any_value(r.wall_s), 2) candidates_per_s,
              round(epoch(max(c.created_at) - any_value(p.started_at)), 2) timing_phase_s,
              round(count(*) / epoch(max(c.created_at) - any_value(p.started_at)), 2) timed_per_s
       from candidates c, runs r, (select started_at from phases where phase = 'run') p" \
      | tee -a "$log"
    kopt query --store "$store" --format csv \
      "select device_id, count(*) candidates, round(sum(wall_s), 1) device_job_s
       from candidates group by all order by all" | tee -a "$log"
    mkdir -p /tmp/scaling-csv
    kopt query --store "$store" --format csv "select candidate_id, params, device_id, status,
      median_ms, wall_s, created_at from candidates order by created_at" \
      > "/tmp/scaling-csv/$sw-$mode-gpus$n.csv"   # the device each candidate ran on
    kopt query --store "$store" --format csv \
      "select phase, device, detail, round(start_s, 2) start_s, round(end_s, 2) end_s,
              round(end_s - start_s, 2) secs from phases
       where phase in ('ncu', 'contest', 'run') or (device is null and phase in ('end', 'store'))
       order by start_s" | tee -a "$log"   # issue 14.4: NCU on both GPUs at once
    python3 bench/overhead.py "$(kopt query --store "$store" --format csv 'select run_id from runs' | tail -1)" \
      --store "$store" 2>&1 | tail -6 | tee -a "$log"
  done
done
tar -C /tmp/scaling-csv -czf "$out/candidates-per-device.tgz" .
