#!/usr/bin/env bash
# Issue 14.1 and 14.3: where a CPU `kopt sweep sweeps/vector_add --backend cpu
# --max-candidates 16` run's time goes, on the GPU host's idle CPU cores (a device call; the
# CPU backend uses no GPU). Every run has a fresh store and an empty build cache (cold).
# Usage (repo root, .devsite and .h7prof carried):
#   bash docs/verified/cpu_phases.sh profile   the code before the phases table
#                                              (.h7prof/code-b84aed9.tgz) under cProfile
#   bash docs/verified/cpu_phases.sh ab ROUNDS alternating: the phases code without the torch
#                                              fix (.h7prof/code-1c36652.tgz) and this checkout
set -uo pipefail
. docs/verified/device_env.sh
mode=${1:-ab}
rounds=${2:-1}
here=$PWD
pp=$PYTHONPATH
log="$out/cpu-phases-$mode.txt"
echo "checkout $(cat .h7prof/rev 2>/dev/null)" \
     "cores $(nproc) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"

unpack() {  # unpack .h7prof/code-REV.tgz to /tmp/code-REV; prints its path
  local d=/tmp/code-$1
  rm -rf "$d"; mkdir -p "$d"; tar -xzf ".h7prof/code-$1.tgz" -C "$d"; echo "$d"
}

one() {  # one run: NAME ROOT [python args before -m]
  local name=$1 root=$2; shift 2
  local store=/tmp/ph-store-$name; rm -rf "$store" "/tmp/ph-cache-$name"
  local start end
  start=$(date +%s.%N)
  (cd "$root" && KOPT_CACHE=/tmp/ph-cache-$name PYTHONPATH=${pp//$here/$root} \
     python3 "$@" -m kopt.cli sweep sweeps/vector_add --backend cpu --max-candidates 16 \
     --store "$store" > "$out/$name.log" 2>&1)
  local rc=$?
  end=$(date +%s.%N)
  echo "$name rc $rc process_wall_s $(python3 -c "print(round($end - $start, 2))") load" \
       "$(cut -d' ' -f1 /proc/loadavg) | $(grep -a -o 'run [0-9a-f-]*: .*' "$out/$name.log" \
       | tail -1 | cut -c1-120)" | tee -a "$log"
  python3 - "$store" <<'EOF' | tee -a "$log"
import sys
from kopt.database import Database
from kopt.phases import phase_summary
db = Database(sys.argv[1])
_, runs = db.query("select run_id from runs")
for (run_id,) in runs:
    rows = db.phases(run_id)
    for p, where, a, b, d in phase_summary(rows):
        print(f"  {p:14s} {where[:40]:40s} {a:8.2f} {b:8.2f} {d:8.2f}")
EOF
}

if [ "$mode" = profile ]; then
  root=$(unpack b84aed9)
  one profile-b84aed9 "$root" -m cProfile -o "$out/b84aed9.prof"
  python3 - "$out/b84aed9.prof" <<'EOF' | tee -a "$log"
import pstats, sys
p = pstats.Stats(sys.argv[1])
p.sort_stats("cumulative").print_stats(r"kopt/|ray/_private/worker.py:.*(wait|get|init|connect)|"
                                       r"services.py:.*start_api|state.py:.*get_node|"
                                       r"torch/__init__|_pickle", 45)
p.sort_stats("tottime").print_stats(20)
EOF
else
  before=$(unpack 1c36652)
  for r in $(seq 1 "$rounds"); do
    one "before-1c36652-$r" "$before"
    one "after-$r" "$here"
  done
fi
