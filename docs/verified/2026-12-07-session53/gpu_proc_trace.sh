#!/usr/bin/env bash
# Session 53's first GPU call: the gate session 52 could not run (ncu's target, the harness
# started before Ray, twenty honest kernels, at HEAD), then which write under a read-only
# /proc CUDA's start needs: on the device's copy only, the jail's /proc is made read-only for
# GPU devices too and its child is run under `strace -f -Z` (failed calls only), the two
# tests that failed so at f5f6a08 run again, and every failed call naming /proc is counted.
# Usage (repo root, GPU host, .devsite carried, with .devsite/strace.tar.xz: strace and its
# libraries): bash THIS
set -uo pipefail
. docs/verified/device_env.sh
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$out/code.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$out/code.txt"
timeout -s INT 120 python3 -m pytest -v -rfE -m gpu -p no:cacheprovider tests/test_gpu_faults.py \
  -k "real_ncu or prestarted or twenty_honest" > "$out/pytest-gpu-gate.txt" 2>&1
tail -5 "$out/pytest-gpu-gate.txt"
ST=$(command -v strace || true)
if [ -z "$ST" ]; then
  mkdir -p /tmp/stx && tar -xJf .devsite/strace.tar.xz -C /tmp/stx
  printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path /tmp/stx/strace /tmp/stx/strace/strace "$@"\n' > /tmp/stx/st
  chmod +x /tmp/stx/st; ST=/tmp/stx/st
fi
"$ST" -V | head -1
echo "strace: $ST" | tee -a "$out/code.txt"
cp workers/jail.py /tmp/jail.py.orig
python3 - "$ST" <<'PY'
import sys, re
p = "workers/jail.py"; s = open(p).read()
s = s.replace("(0 if gpu else MS_RDONLY)", "MS_RDONLY")
st = sys.argv[1]
s = s.replace('def _start(cmd: list[str]) -> int:\n',
  'def _start(cmd: list[str]) -> int:\n'
  '    import time as _t\n'
  f'    cmd = ["{st}", "-f", "-Z", "-s", "160", "-o", f"/tmp/kst/t{{_t.time_ns()}}", *cmd]\n')
open(p, "w").write(s)
PY
grep -n "kst\|MS_RDONLY))\|\"proc\", \"/proc\"" workers/jail.py | head
rm -rf /tmp/kst; mkdir -p /tmp/kst; chmod 777 /tmp/kst
export KOPT_SANDBOX_WRITABLE=/tmp/kst
timeout -s INT 150 python3 -m pytest -v -rfE -m gpu -p no:cacheprovider tests/test_gpu_faults.py \
  -k "real_ncu or prestarted" > "$out/pytest-gpu-proc-ro-strace.txt" 2>&1
tail -5 "$out/pytest-gpu-proc-ro-strace.txt"
ls /tmp/kst | wc -l
cat /tmp/kst/* 2>/dev/null | grep -E "EROFS|EACCES|EPERM" | grep -v "^[0-9]* +++" \
  | sed -E 's/^[0-9]+ +//; s/0x[0-9a-f]+/0x/g' | sort | uniq -c | sort -rn | head -60 \
  | tee "$out/proc-ro-failed-calls.txt"
tar -czf "$out/strace-logs.tgz" -C /tmp kst 2>/dev/null
cp /tmp/jail.py.orig workers/jail.py
# where Ray's start goes on this host (5.1 s of the cold sweep at 0fc57cb), then with Ray's
# usage-stats collection off
python3 docs/verified/2026-12-07-session53/ray_init_profile.py default > "$out/ray-init.txt" 2>&1
RAY_USAGE_STATS_ENABLED=0 python3 docs/verified/2026-12-07-session53/ray_init_profile.py \
  no-usage-stats >> "$out/ray-init.txt" 2>&1
grep "ray.init" "$out/ray-init.txt"
