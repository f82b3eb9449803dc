#!/usr/bin/env bash
# Issue 14 on one H200: an embedded ray.init and its first task with Ray's defaults and with
# a small object store / no prestarted workers (docs/verified/h200_rayinit.py).
# Usage (repo root, GPU host): bash docs/verified/h200_rayinit.sh
set -uo pipefail
. docs/verified/device_env.sh
export RAY_USAGE_STATS_ENABLED=0
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/rayinit.txt"
timeout 300 python3 docs/verified/h200_rayinit.py 2>&1 | tee -a "$out/rayinit.txt"
