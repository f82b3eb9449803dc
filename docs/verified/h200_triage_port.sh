#!/usr/bin/env bash
# Issue 16 end to end on an H200, in one call: a fresh PyTorch profiler trace of a small
# decoder -> kopt triage (mapping + formal traces, known routes) -> the generated sweep
# skeleton of the layer-norm hotspot, completed against the LayerNorm kernel of a toy user
# repository -> kopt sweep on the GPU -> kopt port of the winner into the repository's source
# file -> the repository's own build, test and benchmark, before and after.
#
# Usage (repo root):
#   bash docs/verified/h200_triage_port.sh                 # on the GPU host (about 3 minutes)
#   bash docs/verified/h200_triage_port.sh --cpu-dry-run   # anywhere without a GPU
# The dry run takes the checked-in H200 traces (tests/data/triage-h200/) instead of fresh
# ones, sweeps and ports the repository's CPU variant, and in place of the GPU steps builds
# every CUDA candidate with NVRTC for sm_90 and the realized source with nvcc (no run).
#
# The user repository is tests/fixtures/walkthrough/repo (toyllm: model.py, csrc/layer_norm.cu
# and .cpp, Makefile, check.py, bench.py), copied into a fresh git repository; the completed
# sweep files and the known routes are beside it. Everything lands under $work (a temp
# folder, kept); what comes back is in "$out" (at most 8 files: summary.md, env.txt,
# triage.txt, triage.png, sweep.txt, candidates.csv, port.txt, walkthrough.tar.gz).
# Needs git and make on the host (the port is a git branch; the repository builds with make):
# a missing make falls back to the Makefile's compiler line; a missing git stops before the
# port unless .devsite/git/git (a git binary, e.g. /usr/bin/git and libpcre2-8.so.0 of a
# Debian 12 machine) is there.
set -uo pipefail
mode=gpu
case "${1:-}" in
  --cpu-dry-run) mode=cpu ;;
  "") ;;
  *) echo "usage: $0 [--cpu-dry-run]" >&2; exit 2 ;;
esac
root=$PWD
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
if [ $mode = cpu ]; then export OUT=${OUT:-/tmp/kopt-triage-port-dry}; fi
. docs/verified/device_env.sh
export COLUMNS=${COLUMNS:-180}
fix=$root/tests/fixtures/walkthrough
work=$(mktemp -d /tmp/kopt-walk.XXXXXX)
logs=$out  # written as the steps go: a call killed at its limit still returns them
store=$work/store
repo=$work/toyllm
export KOPT_CACHE=$work/cache  # fresh builds: the sweep's figures include them
mkdir -p "$work/traces"
rm -f "$out"/{summary.md,env.txt,triage.txt,triage.png,sweep.txt,candidates.csv,port.txt,walkthrough.tar.gz}
summary=$logs/summary.md
start=$SECONDS
say() { echo "$*" | tee -a "$summary"; }
kt() { timeout "$1" python3 -m kopt.cli "${@:2}"; }  # kopt with a time limit (seconds)
q() { kopt query --store "$store" --format csv "$1" 2>&1; }  # csv of a store query
q1() { q "$1" | tail -n +2 | tail -1 | tr -d '"'; }  # its last row (one column), or nothing
begin() { step_start=$SECONDS; echo; echo "=== $1"; }
took() { echo "$((SECONDS - step_start)) s"; }
say "# kopt triage -> sweep -> port walk-through ($mode mode)"
say ""
say "work folder: $work"

# -------------------------------------------------------------- 0. environment
{
  echo "mode: $mode"
  echo "code: $(cat .kopt_rev 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  date -u
  [ $mode = gpu ] && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version | tail -1
  python3 -c "import torch, duckdb; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'duckdb', duckdb.__version__)"
  echo "git: $(command -v git || echo missing)  make: $(command -v make || echo missing)"
} 2>&1 | tee "$logs/env.txt"
if ! command -v git > /dev/null && [ -x .devsite/git/git ]; then
  export PATH=$root/.devsite/git:$PATH GIT_EXEC_PATH=$root/.devsite/git
  export LD_LIBRARY_PATH=$root/.devsite/git${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "git: the carried .devsite/git/git ($(git --version 2>&1))" | tee -a "$logs/env.txt"
fi
have_git=$(command -v git > /dev/null && git --version > /dev/null 2>&1 && echo 1 || echo 0)

# -------------------------------------------------------------- 1. the user repository
begin "1. the user repository (toyllm) as a fresh git repository"
cp -r "$fix/repo" "$repo"
if [ "$have_git" = 1 ]; then
  git -C "$repo" init -q && git -C "$repo" symbolic-ref HEAD refs/heads/main \
    && git -C "$repo" add -A \
    && git -C "$repo" -c user.name=toyllm -c user.email=toyllm@localhost commit -qm \
       "toyllm: decoder, LayerNorm kernel, test, benchmark" \
    && git -C "$repo" log --oneline
fi
if command -v make > /dev/null; then build_gpu="make -B"; build_cpu="make -B cpu"
else  # the Makefile's own lines
  build_gpu="mkdir -p build && nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o build/liblayernorm.so csrc/layer_norm.cu"
  build_cpu="mkdir -p build && g++ -O3 -march=native -fopenmp -shared -fPIC -o build/liblayernorm_cpu.so csrc/layer_norm.cpp"
  say "- make is missing: the builds run the Makefile's compiler lines"
fi

# -------------------------------------------------------------- 2. the traces
begin "2. traces of one decoder step (PyTorch profiler)"
eager=$work/traces/eager.json.gz graph=$work/traces/graph.json.gz
trace_src="fresh, this machine"
if [ $mode = gpu ]; then
  for m in eager graph; do  # one process each, as tests/data/triage-h200 was made
    (cd "$repo" && timeout 150 python3 model.py $m "$work/traces/$m.json.gz") 2>&1 \
      | grep -v "^STAGE:" | tee -a "$logs/triage.txt"
  done
fi
if [ ! -s "$eager" ] || [ ! -s "$graph" ]; then
  cp tests/data/triage-h200/toy_graph0.json.gz "$eager"
  cp tests/data/triage-h200/toy_graph1.json.gz "$graph"
  trace_src="checked-in H200 traces (tests/data/triage-h200)"
  [ $mode = gpu ] && trace_src="$trace_src: the fresh trace FAILED (see triage.txt)"
fi
# the layer norm's shape, from the operator events (record_shapes) of the eager trace
python3 - "$eager" "$graph" <<'EOF' 2>&1 | tee -a "$logs/triage.txt"
import collections, gzip, json, os, sys
for path in sys.argv[1:]:
    ev = json.load(gzip.open(path))["traceEvents"]
    cats = collections.Counter(e.get("cat") for e in ev)
    shapes = collections.Counter(str((e.get("args") or {}).get("Input Dims"))
                                 for e in ev if e.get("name") == "aten::layer_norm")
    print(f"{os.path.basename(path)}: {os.path.getsize(path)} bytes, {cats['kernel']} kernels, "
          f"{cats['user_annotation']} ranges; aten::layer_norm input dims: {dict(shapes) or '-'}")
EOF
say "- traces: $trace_src ($(took))"

# -------------------------------------------------------------- 3. triage
begin "3. kopt triage"
{
  echo "## the eager trace alone (its own ranges)"
  kt 120 triage "$eager" --known "$fix/routes.yaml" --store "$store" --top 12
  echo; echo "## --mapping eager --formal graph (timing from the CUDA graph replay)"
  kt 120 triage --mapping "$eager" --formal "$graph" --known "$fix/routes.yaml" --store "$store" \
    --out "$work/triage" --top 12
  echo; echo "## stored (kopt query): launches per triage, unattributed ones"
  q "select triage_id, trace, count(*) launches, count(*) filter (where stage is null) no_stage,
     count(*) filter (where in_graph) in_graph from triage_launches group by all order by 1"
  q "select triage_id, rank, action, round(share, 4) share, left(kernel, 70) kernel
     from triage_actions where action != 'leave' order by triage_id, rank"
} 2>&1 | tee -a "$logs/triage.txt"
cp "$work/triage/triage.png" "$out/" 2>/dev/null
skel=$(python3 - "$work/triage/triage.json" <<'EOF'
import json, sys
try:
    t = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(0)
for a in t["actions"]:
    if a["action"] == "sweep" and "layer_norm" in a["kernel"] and a["sweep_dir"]:
        print(a["sweep_dir"])
        break
EOF
)
if [ -n "$skel" ] && [ -d "$skel" ]; then
  say "- triage: layer-norm skeleton $skel ($(took))"
else
  skel=$work/triage/sweeps/layer_norm
  mkdir -p "$skel"
  say "- triage: NO sweep action for the layer norm (its share or a route changed?): the sweep is written from the fixture alone in $skel ($(took))"
fi
tid=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['triage_id'])" \
  "$work/triage/triage.json" 2>/dev/null)
say "- mapping + formal triage $tid: launches without a stage (of all): $(q1 "select count(*) filter (where stage is null) || ' of ' || count(*) from triage_launches where triage_id = '$tid'")"
python3 - "$work/triage/triage.json" <<'EOF' 2>/dev/null | tee -a "$summary"
import json, sys
t = json.load(open(sys.argv[1]))
print(f"- formal trace {t['trace']}: {len(t['kernels'])} kernel names; top 8 by share:")
for k in t["kernels"][:8]:
    act = next(a for a in t["actions"] if a["rank"] == k["rank"])
    print(f"  {k['rank']}. {k['share']:6.1%} {k['calls']:4d} calls {k['avg_us']:7.2f} us avg  "
          f"{act['action']:6s} grid {k['grid']} block {k['block']}  {k['kernel'][:60]}")
EOF

# -------------------------------------------------------------- 4. complete the skeleton
begin "4. the skeleton completed against the repository's kernel"
cp -r "$skel" "$work/skeleton-as-generated"
rel=$(python3 -c "import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))" "$repo" "$skel")
rm -f "$skel"/*.cu  # the placeholder copy: the kernel is the repository's own file now
sed "s#@REPO@#$rel#g" "$fix/sweep/sweep.yaml" > "$skel/sweep.yaml"
cp "$fix/sweep/ref.py" "$skel/ref.py"
{
  diff -ruN "$work/skeleton-as-generated" "$skel"
  echo
  echo "## kopt preflight (the baseline)"
  if [ $mode = gpu ]; then kt 120 preflight "$skel" --backend cuda
  else kt 300 preflight "$skel" --backend cpu; kt 300 preflight "$skel" --backend cuda --arch 90; fi
} > "$logs/sweep.txt" 2>&1
tail -22 "$logs/sweep.txt"
if [ $mode = cpu ]; then
  echo "## every CUDA candidate built with NVRTC for sm_90 (no GPU here to run them)" \
    | tee -a "$logs/sweep.txt"
  python3 - "$skel" <<'EOF' 2>&1 | tee -a "$logs/sweep.txt"
import re, sys
from pathlib import Path
from kopt.catalog import load_catalog
from kopt.expand import iter_candidates, space_digest
from kopt.spec import load_sweep
from workers import nvrtc
space = load_sweep(Path(sys.argv[1])).space("cuda")
src, kernel = space.source_text(), space.launch_spec()["kernel"]
n, bad, regs = 0, [], []
for c in iter_candidates(space, load_catalog(), 90, source_digest=space_digest(space)):
    opts = nvrtc.options(c.target, c.defines, [str(space.source.parent), *space.include_dirs],
                         space.flags)
    r = nvrtc.compile_in_process(src, space.source.name, kernel, opts)
    n += 1
    if not r["ok"] or re.search(r"[1-9]\d* bytes spill", r["log"]):
        bad.append((c.defines, r["log"][-300:]))
    regs += [int(x) for x in re.findall(r"Used (\d+) registers", r["log"])]
print(f"{n} candidates built for sm_90, {len(bad)} failed or spilled; registers "
      f"{min(regs)}..{max(regs)}")
for d, log in bad:
    print("  FAILED/SPILLED", d, log)
EOF
fi
say "- sweep folder: $skel, kernel $rel/csrc/layer_norm.cu ($(took))"

# -------------------------------------------------------------- 5. sweep
begin "5. kopt sweep"
backend=cuda; [ $mode = cpu ] && backend=cpu
# a candidate in one line: its methods and params, e.g. memory.kernel_fusion LN_ITEMS: 1, ...
cand_sql="concat_ws(' ', compute_method, memory_method, latency_method,
  regexp_replace(params, '[{}\"]', '', 'g'))"
cand() { q1 "select $cand_sql || '; ' || round(median_ms, 5) || ' ms' from candidates
  where run_id = '$run_id' and $1"; }
kt 330 sweep "$skel" --backend $backend --store "$store" --top 8 2>&1 \
  | grep -v "^built\|^ran " | tee -a "$logs/sweep.txt"
run_id=$(q1 "select run_id from runs order by created_at")
{
  echo "## kopt best"
  kopt best toy_layer_norm --store "$store"
  echo "## statuses, builds and device time"
  q "select status, count(*) n, round(sum(compile_s), 1) compile_cpu_s, round(sum(wall_s), 1) device_s
     from candidates where run_id = '$run_id' group by 1 order by 1"
  echo "## the baseline and the eight fastest"
  q "select is_baseline base, $cand_sql candidate, round(median_ms, 5) median_ms, round(iqr_ms, 5) iqr_ms,
     n_samples, round(gbps, 1) gbps from candidates where run_id = '$run_id' and status = 'ok'
     order by is_baseline desc, median_ms limit 9"
} 2>&1 | tee -a "$logs/sweep.txt"
q "select * exclude (samples_ms) from candidates where run_id = '$run_id' order by median_ms nulls last" \
  > "$logs/candidates.csv"
if [ -n "$run_id" ]; then
  say "- sweep: run $run_id on $backend ($(took)); statuses: $(q1 "select string_agg(status || ' ' || n, ', ') from (select status, count(*) n from candidates where run_id = '$run_id' group by 1)")"
  say "  baseline: $(cand "is_baseline limit 1")"
  say "  fastest:  $(cand "status = 'ok' order by median_ms limit 1")"
else
  say "- sweep: NO run stored ($(took)); see sweep.txt"
fi

# -------------------------------------------------------------- 6. port
begin "6. kopt port into the repository, its own build, test and benchmark"
if [ $mode = gpu ]; then
  target=$repo/csrc/layer_norm.cu build=$build_gpu test="python3 check.py" bench="python3 bench.py"
else
  target=$repo/csrc/layer_norm.cpp build=$build_cpu test="python3 check.py --cpu" bench="python3 bench.py --cpu"
fi
if [ "$have_git" != 1 ]; then
  say "- port: SKIPPED, git is not on this machine (kopt port makes a git branch); see the header"
elif [ -z "$run_id" ]; then
  say "- port: SKIPPED, the sweep stored no run"
else
  head_before=$(git -C "$repo" rev-parse HEAD)
  kt 420 port "$run_id" --to "$target" --store "$store" --build "$build" --test "$test" \
    --bench "$bench" --timeout 90 2>&1 | tee "$logs/port.txt"
  port_rc=${PIPESTATUS[0]}
  branch=$(git -C "$repo" for-each-ref --format='%(refname:short)' refs/heads/kopt/ | tail -1)
  {
    echo "## ports (kopt query)"
    q "select step, command, exit_status, round(duration_s, 2) secs, bench_value, status, branch
       from ports where run_id = '$run_id'"
    for s in build_before bench_before build test bench; do
      echo "## $s: output (last 4000 characters, from the store)"
      q "select output_tail from ports where run_id = '$run_id' and step = '$s'" | tail -n +2
    done
    echo "## the user's checkout after the port: branch, HEAD, status"
    git -C "$repo" rev-parse --abbrev-ref HEAD
    [ "$(git -C "$repo" rev-parse HEAD)" = "$head_before" ] && echo "HEAD unchanged ($head_before)"
    git -C "$repo" status --porcelain
    echo "## the port branch"
    git -C "$repo" log --oneline -2 "$branch"
    git -C "$repo" diff --stat main "$branch"
    git -C "$repo" diff main "$branch" | head -30
  } 2>&1 | tee -a "$logs/port.txt"
  before=$(q1 "select bench_value from ports where run_id = '$run_id' and step = 'bench_before'")
  after=$(q1 "select bench_value from ports where run_id = '$run_id' and step = 'bench'")
  test_line=$(q "select output_tail from ports where run_id = '$run_id' and step = 'test'" \
    | grep "sizes passed" | tail -1)
  say "- port: exit $port_rc, status $(q1 "select any_value(status) from ports where run_id = '$run_id'"), branch ${branch:-?} ($(took))"
  say "  ported: $(cand "candidate_id = (select any_value(candidate_id) from ports where run_id = '$run_id')")"
  say "  repository test: ${test_line:-no result}"
  say "  repository benchmark (layer_norm_ms, 2048 x 1024): before $before, after $after"
  say "  user's checkout: branch $(git -C "$repo" rev-parse --abbrev-ref HEAD), HEAD $([ "$(git -C "$repo" rev-parse HEAD)" = "$head_before" ] && echo unchanged || echo MOVED), status '$(git -C "$repo" status --porcelain | tr '\n' ' ')'"
fi
if [ $mode = cpu ]; then
  # the GPU port's text, compiled as the repository builds it (nvcc, sm_90; not run)
  begin "6b. the realized CUDA source of a fused candidate, built by the repository's Makefile"
  cp -r "$fix/repo" "$work/toyllm-nvcc"
  python3 - "$skel" "$work/toyllm-nvcc/csrc/layer_norm.cu" <<'EOF' 2>&1 | tee -a "$logs/port.txt"
import sys
from pathlib import Path
from kopt.report import realized_source
d = {"LN_THREADS": 128, "LN_VEC": 8, "LN_CACHE_ROW": 1, "LN_ITEMS": 1}
Path(sys.argv[2]).write_text(realized_source(Path(sys.argv[1]), "cuda", d, "dry run"))
print("realized with", d)
EOF
  (cd "$work/toyllm-nvcc" && eval "$build_gpu" && nm -D build/liblayernorm.so | grep toy_layer_norm) \
    2>&1 | tee -a "$logs/port.txt"
  say "- dry run: the realized .cu built with nvcc: $([ -s "$work/toyllm-nvcc/build/liblayernorm.so" ] && echo ok || echo FAILED) ($(took))"
fi

# -------------------------------------------------------------- 7. what comes back
say "- total wall time: $((SECONDS - start)) s"
tar -czf "$out/walkthrough.tar.gz" -C "$work" --exclude=cache --exclude=build \
  --exclude='*.so' --exclude=__pycache__ --exclude=toyllm-nvcc . 2>/dev/null
echo; echo "=== summary ($out)"; cat "$summary"
