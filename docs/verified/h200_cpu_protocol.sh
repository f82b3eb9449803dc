#!/usr/bin/env bash
# The CPU protocol's cost per sample before and after c0ed74c on the H200 host's Xeon (the
# CPU backend, no GPU used): the main job with f141065's kopt and this tree's, alternating.
# Usage (repo root, on the GPU host, with .old/old.tgz = `git archive f141065 kopt workers
# sweeps/vector_add catalog pyproject.toml | gzip`):  bash docs/verified/h200_cpu_protocol.sh
set -uo pipefail
. docs/verified/device_env.sh
out=${OUT:-/tmp/out}; mkdir -p "$out"
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/env.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$out/env.txt"
rm -rf /tmp/oldtree && mkdir -p /tmp/oldtree && tar -xzf .old/old.tgz -C /tmp/oldtree
base=$PYTHONPATH
for round in 1 2; do
  for v in old new; do
    if [ $v = old ]; then R=/tmp/oldtree; else R=$PWD; fi
    D=/tmp/mj-$round-$v; rm -rf "$D"; mkdir -p "$D"
    t0=$(date +%s.%N)
    (cd "$R" && env PYTHONPATH="$R:$base" KOPT_CACHE="$D/cache" \
       timeout 300 python3 -m kopt sweep "$R/sweeps/vector_add" --backend cpu --store "$D/store") \
       > "$out/main-job-$round-$v.txt" 2>&1
    echo "wall $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" >> "$out/main-job-$round-$v.txt"
    PYTHONPATH="$PWD:$base" python3 -m kopt query --store "$D/store" --format csv "select
      count(*) n, round(regr_slope(job_ms, n_samples), 2) ms_per_sample,
      round(regr_intercept(job_ms, n_samples), 1) ms_per_job_beside,
      round(median(job_ms / (median_ms * n_samples)), 2) busy_over_timed,
      round(median(median_ms), 3) median_ms, median(n_samples) samples,
      round(sum(job_ms) / 1000, 1) busy_s from (select
      (epoch(device_end) - epoch(device_start)) * 1000 job_ms, * from candidates
      where status = 'ok')" 2>&1 | tee "$out/figures-$round-$v.csv"
    grep -E "^wall|jobs \(" "$out/main-job-$round-$v.txt"
  done
done
