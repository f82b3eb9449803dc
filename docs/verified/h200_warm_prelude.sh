#!/usr/bin/env bash
# Issue 14 on one H200: what a queued sweep's driver does between its reference check and its
# first result (the warm first result's path; FROM_PHASE=startup: from the end of startup). `kopt serve start`, then two queued sweeps of
# sgemm_kt (2048^3, NCU off) run in-process (`python -m kopt.cli`) under py-spy (100 Hz,
# idle included); the driver's main-thread stacks in that window, by kopt frame.
# Usage (repo root, GPU host; .devsite with py-spy): bash docs/verified/h200_warm_prelude.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} KOPT_CACHE=/tmp/wp/cache
f="$out/warm-prelude.txt"
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$f"
spy=$(ls /tmp/site/py_spy-*.data/scripts/py-spy 2>/dev/null | head -1); [ -n "$spy" ] && chmod +x "$spy"
w=/tmp/wp; rm -rf $w; mkdir -p $w
python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path
from vs_kernel_tuner import sweep_copy; print(sweep_copy(Path('$w'), 2048, False))"
python3 -m kopt serve start --backend cuda 2>&1 | tail -1 | tee -a "$f"
sleep 2
for rep in 1 2; do
  rm -rf $w/cache/builds $w/store
  timeout 200 "$spy" record -r 100 --idle -f speedscope -o "$w/p$rep.json" -- \
    python3 -m kopt.cli sweep $w/sgemm_kt_noncu --store $w/store --backend cuda --queue > "$w/p$rep.log" 2>&1
  echo "== rep $rep: rc $?" | tee -a "$f"
  python3 -m kopt.cli query --store $w/store --format csv "select phase, round(start_s,3) s0, round(end_s,3) s1 from phases where device is null and phase in ('startup','ray','devices','first_build','reference','first_result') order by start_s" | tee -a "$f"
  a=$(python3 -m kopt.cli query --store $w/store --format csv "select max(end_s) from phases where phase = '${FROM_PHASE:-reference}' and device is null" | tail -1)
  b=$(python3 -m kopt.cli query --store $w/store --format csv "select min(start_s) from phases where phase = 'first_result'" | tail -1)
  python3 - "$w/p$rep.json" "$a" "$b" "${FROM_PHASE:-reference}" <<'PY' | tee -a "$f"
import json, sys, collections
sp = json.load(open(sys.argv[1])); frames = sp["shared"]["frames"]
a, b = float(sys.argv[2]), float(sys.argv[3])
prof = max(sp["profiles"], key=lambda p: sum(p["weights"]))
t, c = 0.0, collections.Counter()
def name(i):
    fr = frames[i]
    return f"{fr['name']} ({fr.get('file', '').split('/')[-1]}:{fr.get('line', '')})"
for st, wt in zip(prof["samples"], prof["weights"]):
    if a <= t < b:
        mine = [name(i) for i in st if "/kopt/" in frames[i].get("file", "")][-3:]
        c[" > ".join(mine + [name(i) for i in st[-1:]])] += wt
    t += wt
print(f"-- main thread from the end of phase {sys.argv[4]} ({a:.2f} s) to the first result's start ({b:.2f} s):")
for k, v in c.most_common(16):
    print(f"{v:5.2f} s  {k}")
PY
done
python3 -m kopt serve stop 2>&1 | tail -1
