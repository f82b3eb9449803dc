#!/usr/bin/env bash
# The sandbox after the red-team fixes (IPC/UTS namespaces, read-only /proc/sys, seccomp
# once set up, JSON answers) on one H200: CUDA in the jail with the filter installed after
# the context is made, then tests/test_gpu.py and tests/test_isolation.py with the sandbox on.
# Usage (repo root, GPU host, .devsite carried): bash docs/verified/h200_sandbox_seccomp.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
python3 -c "from workers import isolation; print(isolation.available())" 2>&1 | tee "$out/seccomp.txt"
PROG='import torch; from workers import seccomp; x = torch.ones(1 << 20, device="cuda"); print("filter:", repr(seccomp.install())); y = (x * 2).sum(); torch.cuda.synchronize(); print("cuda ok after the filter", float(y))'
mkdir -p /tmp/scr
timeout 120 unshare --pid --fork --kill-child --net --mount --ipc --uts -- python3 -m workers.jail /tmp/scr -- python3 -c "$PROG" 2>&1 | tail -3 | tee -a "$out/seccomp.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_isolation.py 2>&1 | tail -6 | tee -a "$out/seccomp.txt"
