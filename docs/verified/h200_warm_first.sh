#!/usr/bin/env bash
# Issue 14 on one H200: a warm service's first result, up close. `kopt serve start`, then
# REPS queued sweeps of bench/vs_kernel_tuner.py's cold-noncu sweep (sgemm_kt at 2048^3, ncu
# top_k 0) through `python -m kopt` (the console script's code), each with an empty build
# cache and a fresh store and Ray's timeline of the run; per run: the process wall, the
# run phases up to the first result, the first builds to land, and the first builder calls
# in Ray's timeline (seconds after the command started).
# Usage (repo root, GPU host): bash docs/verified/h200_warm_first.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} KOPT_CACHE=/tmp/wf/cache
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/warm-first.txt"
rm -rf /tmp/wf && mkdir -p /tmp/wf
python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path
from vs_kernel_tuner import sweep_copy; print(sweep_copy(Path('/tmp/wf'), 2048, False))"
t0=$(date +%s.%N); python3 -m kopt serve start --backend cuda 2>&1 | tee -a "$out/warm-first.txt"
echo "serve start: $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s" | tee -a "$out/warm-first.txt"
sleep 3
for rep in $(seq 1 ${REPS:-3}); do
  rm -rf /tmp/wf/cache/builds /tmp/wf/store; t0=$(date +%s.%N)
  KOPT_RAY_TIMELINE=/tmp/wf/tl-$rep.json python3 -m kopt sweep /tmp/wf/sgemm_kt_noncu --store /tmp/wf/store --backend cuda --queue > /tmp/wf/log 2>&1
  rc=$?; wall=$(python3 -c "print(round($(date +%s.%N)-$t0,2))")
  echo "== rep $rep: rc $rc wall $wall s (timeline written after the run: in the wall)" | tee -a "$out/warm-first.txt"
  python3 -m kopt.cli query --store /tmp/wf/store --format csv "select phase, round(start_s,3) s0, round(end_s,3) s1, detail from phases where phase in ('startup','checks','ray','devices','device_start','first_build','reference','build_wait','first_result') order by start_s" | tee -a "$out/warm-first.txt"
  python3 -m kopt.cli query --store /tmp/wf/store --format csv "select round(start_s,3) s0, round(end_s,3) s1 from phases where phase = 'build' order by end_s limit 5" | tee -a "$out/warm-first.txt"
  python3 - "$t0" /tmp/wf/tl-$rep.json <<'PY' 2>&1 | tee -a "$out/warm-first.txt"
import json, sys
t0, ev = float(sys.argv[1]), json.load(open(sys.argv[2]))
b = sorted((e["ts"] / 1e6 - t0, e.get("dur", 0) / 1e6, e.get("name", ""), e.get("tid"))
           for e in ev if "build" in str(e.get("name", "")).lower() and e.get("ph") == "X")
for s, d, n, tid in b[:8]:
    print(f"timeline {n} on {tid}: {s:.3f}-{s + d:.3f} s")
print(f"timeline: {len(b)} build events")
PY
  sleep 2
done
python3 -m kopt serve status 2>&1 | tail -3 | tee -a "$out/warm-first.txt"
python3 -m kopt serve stop 2>&1 | tee -a "$out/warm-first.txt"
