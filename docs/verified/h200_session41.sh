#!/usr/bin/env bash
# Session of 2026-12-05 (night). PART=witness: tests/test_witness.py on the GPU host's CPUs
# (h200_session40.sh), then the README's CPU sweep there (`kopt sweep sweeps/vector_add`,
# fresh store and cache): whether its contests' witness turns name any honest candidate
# (NT=2 teams included) `suspect` on a 16-core host with nothing else running.
# PART=final: the witness tests, the honest two-thread OpenMP kernels on a device of one thread
# (docs/verified/witness_team.py) and the README's CPU sweep, at the session's last code.
# Usage (repo root, GPU host, .devsite carried): PART=witness|final bash docs/verified/h200_session41.sh
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
if [ "${PART:-}" = final ]; then
  PART=witness bash docs/verified/h200_session40.sh
  . docs/verified/device_env.sh
  EVICT=1 PYTHONPATH=$PYTHONPATH:$PWD/tests timeout 120 python3 docs/verified/witness_team.py \
    16 17 18 19 > "$out/team.txt" 2>&1
  grep -E "^MODE|^median|^->" "$out/team.txt" | cut -c1-200
  rm -rf /tmp/st44 /tmp/c44; t0=$(date +%s)
  KOPT_CACHE=/tmp/c44 timeout 200 python3 -m kopt sweep sweeps/vector_add --backend cpu \
    --store /tmp/st44 > "$out/sweep-cpu.txt" 2>&1
  echo "rc $? wall $(( $(date +%s) - t0 )) s" >> "$out/sweep-cpu.txt"
  grep -E "suspect|loop result|^rc " "$out/sweep-cpu.txt" | cut -c1-240
fi
