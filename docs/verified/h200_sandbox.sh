#!/usr/bin/env bash
# The candidate sandbox (workers.isolation, workers.jail) on one H200: which isolation the
# host gives, whether CUDA runs in the jail with every file system read-only (and, if not,
# which path it must write: variants with paths left writable, and strace's EROFS lines),
# then `pytest -m gpu` and the CPU sandbox tests with the sandbox on, and a small CUDA sweep
# whose rows record the isolation.
# Usage (repo root, GPU host, .devsite carried): bash docs/verified/h200_sandbox.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/sandbox.txt"
id | tee -a "$out/sandbox.txt"
python3 -c "from workers import isolation; print(isolation.available())" 2>&1 | tee -a "$out/sandbox.txt"
PROG='import torch; x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize(); print("cuda ok", float(x.sum()), torch.cuda.get_device_name())'
mkdir -p /tmp/scr
for rw in "" "/dev" "/tmp" "/dev:/tmp:/run:/var:/root"; do
  args=""; for p in ${rw//:/ }; do args="$args --rw $p"; done
  echo "== jail, writable besides scratch: ${rw:-nothing}" | tee -a "$out/sandbox.txt"
  t0=$(date +%s.%N)
  timeout 120 unshare --pid --fork --kill-child --net --mount -- python3 -m workers.jail /tmp/scr $args -- python3 -c "$PROG" 2>&1 | tail -3 | tee -a "$out/sandbox.txt"
  echo "rc ${PIPESTATUS[0]} in $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s" | tee -a "$out/sandbox.txt"
done
echo "== no sandbox" | tee -a "$out/sandbox.txt"
python3 -c "$PROG" 2>&1 | tail -2 | tee -a "$out/sandbox.txt"
if command -v strace > /dev/null; then
  timeout 120 unshare --pid --fork --kill-child --net --mount -- python3 -m workers.jail /tmp/scr -- strace -f -e trace=%file -o /tmp/scr/st.txt python3 -c "$PROG" > /dev/null 2>&1
  echo "== strace: failed file calls in the jail" | tee -a "$out/sandbox.txt"
  grep -E "EROFS|EACCES|EPERM" /tmp/scr/st.txt | grep -v ENOENT | head -20 | tee -a "$out/sandbox.txt"
else
  echo "(no strace on this host)" | tee -a "$out/sandbox.txt"
fi
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -15 | tee "$out/pytest_gpu.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_isolation.py tests/test_prestart.py 2>&1 | tail -8 | tee "$out/pytest_isolation.txt"
rm -rf /tmp/sb-store /tmp/sb-cache
KOPT_CACHE=/tmp/sb-cache timeout 240 python3 -m kopt sweep sweeps/softmax --backend cuda --store /tmp/sb-store --max-candidates 6 > /tmp/sb-sweep.log 2>&1
echo "sweep rc $?" | tee -a "$out/sandbox.txt"; tail -12 /tmp/sb-sweep.log | tee -a "$out/sandbox.txt"
python3 -m kopt query --store /tmp/sb-store "select status, isolation, count(*) n, round(min(median_ms), 4) best_ms from candidates group by all" 2>&1 | tee -a "$out/sandbox.txt"
python3 -m kopt best softmax --store /tmp/sb-store 2>&1 | tail -8 | tee -a "$out/sandbox.txt"
