#!/usr/bin/env bash
# Session of 2026-12-05 (evening). PART=gpu-a / gpu-b: `pytest -m gpu` in two halves
# (h200_session37.sh). PART=witness: tests/test_witness.py on the GPU host's CPUs (the CPU
# backend's witness turns: process_vm_readv/writev from the device actor into a sandboxed
# harness there, Yama's ptrace_scope and the user the host runs it as).
# Usage (repo root, GPU host, .devsite carried): PART=gpu-a|gpu-b|witness bash docs/verified/h200_session40.sh
set -uo pipefail
case "${PART:-}" in
  gpu-a|gpu-b) bash docs/verified/h200_session37.sh ;;
  witness)
    . docs/verified/device_env.sh
    { id; cat /proc/sys/kernel/yama/ptrace_scope 2>&1; uname -r; } > "$out/witness-host.txt"
    timeout -s INT -k 20 ${W_S:-200} python3 -m pytest -v -rfE -p no:cacheprovider \
      tests/test_witness.py --durations=10 > "$out/pytest-witness.txt" 2>&1
    echo "rc $?" >> "$out/pytest-witness.txt"
    tail -30 "$out/pytest-witness.txt"
    ;;
esac
