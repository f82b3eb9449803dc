#!/usr/bin/env bash
# Issue 13, "CPU `kopt sweep sweeps/vector_add` time is not worse than before (a ratio
# measured side by side)": the CPU backend on an idle machine (the GPU host's 16 cores, which
# nothing else uses during a device call), the code before the redesign (the archive
# .devsite/old-code.tgz, `git archive 328884f kopt workers catalog sweeps`) and this checkout,
# alternating old, new, old, new, ... so drift shows as old-vs-old differences. Each run has a
# fresh store; each side has its own build cache, emptied before the first round (round 1 is
# cold, the later rounds find their cache warm).
# Usage (repo root): bash docs/verified/cpu_vector_add_old_new.sh [ROUNDS] [MAX_CANDIDATES]
set -uo pipefail
. docs/verified/device_env.sh
rounds=${1:-3}
n=${2:-16}
old=/tmp/kopt-old-cpu; rm -rf "$old"; mkdir -p "$old"; tar -xzf .devsite/old-code.tgz -C "$old"
log="$out/cpu-vector-add-old-new.txt"
echo "old code: $(cat .devsite/old-code.rev)  new code: $(cat .kopt_rev 2>/dev/null)" \
     "cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$log"
new_pp=$PYTHONPATH
here=$PWD
rm -rf /tmp/vs-cache-old /tmp/vs-cache-new
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    root=$here; [ "$side" = old ] && root=$old
    store=/tmp/vs-store-$side-$r; rm -rf "$store"
    start=$(date +%s.%N)
    (cd "$root" && KOPT_CACHE=/tmp/vs-cache-$side PYTHONPATH=${new_pp//$here/$root} \
       python3 -m kopt.cli sweep sweeps/vector_add --backend cpu --max-candidates "$n" \
       --store "$store" > "$out/vs-$side-$r.log" 2>&1)
    rc=$?
    end=$(date +%s.%N)
    wall=$(python3 -c "print(round($end - $start, 2))")
    echo "round $r $side rc $rc process_wall_s $wall load $(cut -d' ' -f1 /proc/loadavg)" \
         "| $(grep -a -o 'run [0-9a-f-]*.*' "$out/vs-$side-$r.log" | tail -1 | cut -c1-160)" \
      | tee -a "$log"
  done
done
python3 - "$log" <<'EOF' | tee -a "$log"
import re, statistics, sys
walls = {"old": [], "new": []}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (old|new) rc 0 process_wall_s ([\d.]+)", line)
    if m:
        walls[m[2]].append((int(m[1]), float(m[3])))
for side, w in walls.items():
    print(side, "walls", [x for _, x in w])
pairs = [n / o for (_, o), (_, n) in zip(walls["old"], walls["new"])]
print("new/old per round:", [round(p, 3) for p in pairs])
if len(pairs) > 1:
    warm = pairs[1:]
    print("new/old warm rounds: median", round(statistics.median(warm), 3))
EOF
