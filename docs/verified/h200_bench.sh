#!/usr/bin/env bash
# Issue #5 on one H200: the GPU tests, kopt vs Kernel Tuner 1.5 (bench/vs_kernel_tuner.py),
# re-run stability (bench/rerun.py) and the overhead ratio (bench/overhead.py) of the sgemm
# sweeps. Usage (repo root, GPU host; .devsite must carry kernel_tuner, python-constraint2
# and xmltodict: KOPT_DEVICE_PKGS, see ../shared/tools/GPU.md):
#   bash docs/verified/h200_bench.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv | tee "$out/bench.txt"
python3 -c "import kernel_tuner, cupy; print('kernel_tuner', kernel_tuner.__version__, 'cupy', cupy.__version__)" 2>&1 | tee -a "$out/bench.txt"
timeout 240 python3 -m pytest -q -m gpu tests/test_gpu.py tests/test_kernel_mode.py 2>&1 | tail -15 | tee "$out/pytest_gpu.txt"
echo "== vs_kernel_tuner" | tee -a "$out/bench.txt"
timeout 300 python3 bench/vs_kernel_tuner.py --out /tmp/vskt 2>&1 | tail -40 | tee -a "$out/bench.txt"
cp /tmp/vskt/kopt_sweep.log "$out/vskt_kopt_sweep.log" 2>/dev/null
rid=$(kopt query --store /tmp/vskt/kopt-store --format csv "select run_id from runs" | tail -1)
python3 bench/overhead.py "$rid" --store /tmp/vskt/kopt-store 2>&1 | tee -a "$out/bench.txt"
echo "== rerun sgemm_kt" | tee -a "$out/bench.txt"
timeout 240 python3 bench/rerun.py sweeps/sgemm_kt --out /tmp/rerun-kt --backend cuda 2>&1 | grep "^run " | tee -a "$out/bench.txt"
cp /tmp/rerun-kt/rerun.json "$out/rerun_sgemm_kt.json" 2>/dev/null
for i in 1 2; do
  r=$(kopt query --store /tmp/rerun-kt/store-$i --format csv "select run_id from runs" | tail -1)
  python3 bench/overhead.py "$r" --store /tmp/rerun-kt/store-$i 2>&1 | tail -3 | tee -a "$out/bench.txt"
done
