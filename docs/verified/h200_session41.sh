#!/usr/bin/env bash
# Session of 2026-12-05 (night). PART=witness: tests/test_witness.py on the GPU host's CPUs
# (h200_session40.sh), then the README's CPU sweep there (`kopt sweep sweeps/vector_add`,
# fresh store and cache): whether its contests' witness turns name any honest candidate
# (NT=2 teams included) `suspect` on a 16-core host with nothing else running.
# Usage (repo root, GPU host, .devsite carried): PART=witness bash docs/verified/h200_session41.sh
set -uo pipefail
if [ "${PART:-}" = witness ]; then
  PART=witness bash docs/verified/h200_session40.sh
  . docs/verified/device_env.sh
  rm -rf /tmp/st41 /tmp/c41; t0=$(date +%s)
  KOPT_CACHE=/tmp/c41 timeout ${SWEEP_S:-240} python3 -m kopt sweep sweeps/vector_add \
    --store /tmp/st41 > "$out/sweep-cpu.txt" 2>&1
  echo "rc $? wall $(( $(date +%s) - t0 )) s" >> "$out/sweep-cpu.txt"
  kopt query --store /tmp/st41 --format csv "select status, count(*) n from candidates group by status" >> "$out/sweep-cpu.txt" 2>&1
  grep -E "suspect|loop result|^rc " "$out/sweep-cpu.txt" | cut -c1-240
fi
