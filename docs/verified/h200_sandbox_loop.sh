#!/usr/bin/env bash
# The sandbox's newer pieces and the agent's warm loop on one H200, in one device call:
# what the host gives (Landlock, cgroups, namespaces: `kopt env`), `pytest -m gpu` with every
# harness in the sandbox, the sandbox/confinement tests on this host's kernel, a CUDA sweep
# whose nvcc builds run Landlock-confined, then bench/agent_loop.py --backend cuda (one
# version x 5 launch configs per try on a warm service) and bench/check_cost.py on sgemm.
# Usage (repo root, GPU host, .devsite carried): bash docs/verified/h200_sandbox_loop.sh [PART]
# PART: tests, bench, all (default), or loop2 (the loop in kernel mode and nvcc, timelines).
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
part=${1:-all}
cat .kopt_rev 2>/dev/null | tee "$out/rev.txt"
if [ "$part" = tests ] || [ "$part" = all ]; then
  { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uname -r; nproc;
    kopt env 2>&1 | grep -E "isolation|limits|device|driver|nvcc"; } 2>&1 | tee "$out/env.txt"
  timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -15 \
    | tee "$out/pytest_gpu.txt"
  timeout 200 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_isolation.py \
    tests/test_build_confine.py tests/test_prestart.py 2>&1 | tail -15 | tee "$out/pytest_sandbox.txt"
  rm -rf /tmp/sx-cache /tmp/sx-store
  KOPT_CACHE=/tmp/sx-cache timeout 120 python3 -m kopt sweep sweeps/softmax --backend cuda \
    --max-candidates 6 --store /tmp/sx-store > /tmp/sx.log 2>&1; echo "softmax rc $?" \
    | tee "$out/sweep.txt"
  tail -4 /tmp/sx.log | tee -a "$out/sweep.txt"
  kopt query --store /tmp/sx-store "select status, isolation, count(*) n, round(min(median_ms), 4) best_ms from candidates group by all" 2>&1 | tee -a "$out/sweep.txt"
fi
if [ "$part" = loop2 ]; then  # the loop again: NVRTC (kernel mode) and nvcc, with timelines
  for k in 1 2; do  # the fault-rows test that failed once in a second back-to-back run
    timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py -k faults_are_rows \
      2>&1 | grep -E "^E |passed|failed" | head -20 | tee -a "$out/faults_rows.txt"
  done
  timeout 200 python3 bench/agent_loop.py --tries 12 --backend cuda --kernel-mode 2>&1 \
    | tail -18 | tee "$out/agent_loop_kernel_mode.txt"
  timeout 200 python3 bench/agent_loop.py --tries 12 --backend cuda 2>&1 | tail -18 \
    | tee "$out/agent_loop_nvcc.txt"
  exit 0
fi
if [ "$part" != tests ]; then
  timeout 330 python3 bench/agent_loop.py --tries 20 --backend cuda 2>&1 | tail -32 \
    | tee "$out/agent_loop.txt"
  timeout 200 python3 bench/check_cost.py sweeps/sgemm --n 24 --out "$out" 2>&1 | tail -40 \
    > "$out/check_cost.txt"; tail -25 "$out/check_cost.txt"
fi
