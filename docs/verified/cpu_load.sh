#!/bin/bash
# A loaded 2-core machine for docs/verified/cpu_realtime_probe.py: $1 busy loops (3), nvcc
# compiling sweeps/vector_add's CUDA source in a loop, and a memory-bandwidth hog (numpy
# copies of 256 MB). Stop it with: kill -- -PGID (start it under setsid).
cd "$(dirname "$0")/../.."
for _ in $(seq "${1:-3}"); do yes > /dev/null & done
(while true; do nvcc -O3 -arch=sm_90 -c sweeps/vector_add/vector_add.cu -o /tmp/kopt-load.o \
    2>/dev/null; done) &
(while true; do python3 -c "import numpy as np; a = np.ones(2**25); [a.copy() for _ in range(50)]"
 done) &
wait
