#!/bin/bash
# alternate before (oldtree = 1c36652) and after (worktree) runs of vector_add cpu, 2 candidates
for k in 1 2; do
  for side in before after; do
    if [ $side = before ]; then dir=/tmp/h7/oldtree; else dir=/work/wt/h7; fi
    cd $dir
    start=$(date +%s.%N)
    KOPT_CACHE=/tmp/h7/ab/cache-$side-$k PYTHONPATH=$dir timeout 900 python -m kopt.cli sweep sweeps/vector_add --backend cpu --max-candidates 2 --store /tmp/h7/ab/store-$side-$k > /tmp/h7/ab/$side-$k.out 2>&1
    end=$(date +%s.%N)
    echo "$side $k process_wall $(python -c "print(round($end-$start,2))") load $(cut -d' ' -f1 /proc/loadavg)" >> /tmp/h7/ab/walls.txt
  done
done
echo done >> /tmp/h7/ab/walls.txt
