#!/usr/bin/env bash
# Issue 13 on an H200: the same sgemm sweep (iteration 1, a deterministic sample of
# $N candidates, NCU as configured) with the code before the redesign (the archive
# .devsite/old-code.tgz, made by `git archive $OLD kopt workers catalog sweeps`) and with this
# checkout, back to back (old, new, old: drift shows as old-vs-old differences), then per
# candidate both statuses and medians, and both winners (compare_runs.py).
# Usage (repo root, on the GPU host): bash docs/verified/h200_same_winner.sh [N]
set -uo pipefail
. docs/verified/device_env.sh
n=${1:-60}
old=/tmp/kopt-old; rm -rf "$old"; mkdir -p "$old"; tar -xzf .devsite/old-code.tgz -C "$old"
echo "old code: $(cat .devsite/old-code.rev)  new code: $(cat .kopt_rev 2>/dev/null)" | tee "$out/same-winner.txt"
new_pp=$PYTHONPATH
sweep() {  # $1 = side label, $2 = code root
  local store=/tmp/kopt-store-$1 start=$SECONDS here=$PWD
  rm -rf "$store"
  (cd "$2" && PYTHONPATH=${new_pp//$here/$2} python3 -m kopt.cli sweep sweeps/sgemm \
     --backend cuda --iterations 1 --max-candidates "$n" --store "$store" 2>&1 | tail -4)
  echo "$1: process wall_s $((SECONDS - start))"
}
for side in old1 new old2; do
  root=$PWD; [ "${side#old}" != "$side" ] && root=$old
  sweep "$side" "$root" | tee -a "$out/same-winner.txt"
done
PYTHONPATH=$new_pp python3 docs/verified/compare_runs.py /tmp/kopt-store-old1 /tmp/kopt-store-new \
  /tmp/kopt-store-old2 | tee -a "$out/same-winner.txt"
