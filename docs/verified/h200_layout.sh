#!/usr/bin/env bash
# The layered packages on one H200, side by side in one device call: `pytest -m gpu` on this
# tree, then sweeps/sgemm_kt (kernel mode, NVRTC, 4096^3, the spec's defaults: NCU on) swept
# by this tree and by the flat layout before it (.old/: `git archive df12f3d kopt workers
# catalog sweeps/sgemm_kt`), each with an empty build cache and a fresh store, new-old-new-old;
# every correct candidate's median per config and each run's named best, as JSON.
# Usage (repo root, GPU host, .devsite carried): bash docs/verified/h200_layout.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/layout.txt"
if [ -z "${SKIP_PYTEST:-}" ]; then
  timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -25 | tee "$out/pytest_gpu.txt"
fi
for round in ${ROUNDS-1 2}; do
  for side in new old; do
    tree=$PWD; [ $side = old ] && tree=$PWD/.old
    mod=kopt.cli.main; [ $side = old ] && mod=kopt.cli
    rm -rf /tmp/lay-cache /tmp/lay-store-$side-$round; t0=$(date +%s.%N)
    (cd "$tree" && PYTHONPATH=/tmp/site:$tree KOPT_CACHE=/tmp/lay-cache timeout 200 \
      python3 -m $mod sweep sweeps/sgemm_kt --backend cuda --store /tmp/lay-store-$side-$round \
      > /tmp/lay-$side-$round.log 2>&1)
    echo "$side round $round: rc $? wall $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s" | tee -a "$out/layout.txt"
    tail -3 /tmp/lay-$side-$round.log | tee -a "$out/layout.txt"
    (cd "$tree" && PYTHONPATH=/tmp/site:$tree python3 -m $mod best sgemm_kt --format json \
      --store /tmp/lay-store-$side-$round > /tmp/lay-store-$side-$round/best.json 2>&1)
    # where the wall went: each phase's first start and last end (s since kopt started), and
    # the device's busy seconds
    (cd "$tree" && PYTHONPATH=/tmp/site:$tree python3 -m $mod query --format csv \
      --store /tmp/lay-store-$side-$round "select phase, count(*) n, round(min(start_s), 2) s0, round(max(end_s), 2) s1, round(sum(end_s - start_s), 2) total_s from phases group by phase order by s0" \
      > "$out/phases-$side-$round.csv" 2>&1)
  done
done
python3 - "$out/layout.json" <<'PY' 2>&1 | tee -a "$out/layout.txt"
import duckdb, glob, json, sys
res = {}
for store in sorted(glob.glob("/tmp/lay-store-*")):
    con = duckdb.connect()
    rows = con.execute(f"select params, median_ms, iqr_ms, status from read_parquet('{store}/candidates/**/*.parquet', hive_partitioning=true, union_by_name=true) ").fetchall()
    try:
        named = json.load(open(f"{store}/best.json"))
    except ValueError:
        named = open(f"{store}/best.json").read()[-500:]
    ok = {p: (m, q) for p, m, q, s in rows if s == "ok"}
    best = min(ok, key=lambda p: ok[p][0]) if ok else None
    res[store.rsplit("-", 2)[-2] + "-" + store.rsplit("-", 1)[-1]] = {
        "n_ok": len(ok), "n": len(rows), "fastest": best, "fastest_ms": ok.get(best),
        "medians": {p: v[0] for p, v in ok.items()},
        "best": named}
json.dump(res, open(sys.argv[1], "w"), indent=1, default=str)
for k, v in res.items():
    print(k, v["n_ok"], "ok of", v["n"], "fastest", v["fastest"], v["fastest_ms"])
PY
