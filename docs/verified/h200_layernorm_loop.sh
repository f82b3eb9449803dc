#!/usr/bin/env bash
# Issue 15 on an H200, in one call: a layer-norm kernel the shipped sweeps do not contain
# (docs/verified/layernorm: ln_v1.cu, one block per row, shared-memory tree reductions,
# float eps; the sweep realizes no catalog method) taken through three iterations by
# submitted versions, each checked, swept over its launch configs, timed and profiled by kopt:
#   1. kopt sweep            iteration 1: v1 x THREADS, NCU on the top 2; the loop stops
#                            (no realized method: "(no realized method)" on every axis)
#   2. kopt propose --format json -> layernorm_claim.py chooses v2's claim from the admitted
#      methods and the NCU evidence -> kopt submit ln_v2.cu (warp shuffles)    iteration 2
#   3. the same for ln_v3.cu (float4, the row in registers)                    iteration 3
#   4. kopt lineage, kopt report (its pictures), kopt best, kopt methods, kopt query: each
#      iteration's winner and NCU evidence, the closing side-by-side contest (v1 -> best)
# Optional steps, taken only when this kopt has them (other engineers are adding them):
# `kopt wait RUN --format json` after each submit, `kopt submit --idea`, and the `evidence`
# and `provenance` tables.
#
# Usage (repo root):
#   bash docs/verified/h200_layernorm_loop.sh                 # on the GPU host (about 4 min)
#   bash docs/verified/h200_layernorm_loop.sh --cpu-dry-run   # anywhere: the C++ twins
#                                                             # (ln_v*.cpp), no NCU
# Everything lands under $work (a temp folder, kept); what comes back is in "$out" (at most
# 8 files): summary.md, loop.log (every command and its output, set -x with the elapsed
# seconds), plans.json (both propose plans, the claims chosen and the submit outputs),
# evidence.csv (every NCU metric the run stored), candidates.csv, the report's pictures
# (lineage*.png when the report draws one, speedup_per_iteration.png) and layernorm.tar.gz
# (the report folder, the store, the notes as submitted, every JSON).
set -uo pipefail
mode=gpu
if [ "${1:-}" = --cpu-dry-run ]; then mode=cpu
elif [ -n "${1:-}" ]; then echo "usage: $0 [--cpu-dry-run]" >&2; exit 2; fi
root=$PWD
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
if [ $mode = cpu ]; then export OUT=${OUT:-/tmp/kopt-layernorm-dry}; fi
. docs/verified/device_env.sh
export COLUMNS=${COLUMNS:-180}
sweep=$root/docs/verified/layernorm
work=$(mktemp -d /tmp/kopt-ln.XXXXXX)
store=$work/store
export KOPT_CACHE=$work/cache  # fresh builds: the figures include them
backend=cuda ext=cu
[ $mode = cpu ] && backend=cpu ext=cpp
rm -f "$out"/{summary.md,loop.log,plans.json,evidence.csv,candidates.csv,layernorm.tar.gz}
rm -f "$out"/*.png
exec > >(tee -a "$out/loop.log") 2>&1
summary=$out/summary.md
start=$SECONDS
say() { echo "$*" >> "$summary"; echo "$*"; }
kt() { timeout "$1" python3 -m kopt.cli "${@:2}"; }  # kopt with a time limit (seconds)
q() { local -; set +x; kopt query --store "$store" --format csv "$1" 2>&1; }  # csv of a query
q1() { q "$1" | tail -n +2 | tail -1 | tr -d '"'; }  # its last row (one column), or nothing
begin() { step=$1; step_start=$SECONDS; echo; echo "=== $1"; }
took() { echo "$((SECONDS - step_start)) s"; }
timing() { say "  - time: $step: $(took)"; }
PS4='+ [${SECONDS}s] '
say "# layer norm through three submitted iterations ($mode mode)"
say ""
say "work folder: $work"

# ---------------------------------------------------------------- 0. environment
begin "0. environment"
set -x
echo "code: $(cat .kopt_rev 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
date -u
[ $mode = gpu ] && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
nvcc --version | tail -1
[ $mode = gpu ] && { ncu --version | tail -1; }
set +x
kopt_help=$(kopt --help 2>&1)
submit_help=$(kopt submit --help 2>&1)
have() { grep -qE "^ +$1( |$)" <<< "$kopt_help"; }  # this kopt has subcommand $1
if have wait; then say "- optional: kopt wait is here, used after each submit"
else say "- optional: kopt wait is not in this kopt (skipped)"; fi
idea=0
if grep -q -- "--idea" <<< "$submit_help"; then
  idea=1; say "- optional: kopt submit --idea is here, used"
else say "- optional: kopt submit --idea is not in this kopt (skipped)"; fi
timing

# ---------------------------------------------------------------- 1. iteration 1: the sweep
begin "1. kopt sweep (iteration 1, NCU)"
set -x
kt 400 sweep "$sweep" --backend $backend --store "$store" --top 8 2>&1 | grep -v "^built\|^ran "
set +x
run=$(q1 "select run_id from runs where sweep = 'layernorm' order by created_at")
if [ -z "$run" ]; then
  say "- sweep: NO run stored ($(took)); see loop.log"
  exit 1
fi
say "- iteration 1: run $run on $backend ($(took)); statuses: $(q1 "select string_agg(status || ' ' || n, ', ') from (select status, count(*) n from candidates where run_id = '$run' group by 1)")"
set -x
kt 120 propose "$sweep" --store "$store"  # the table: no realized method on any axis
set +x
timing

# ---------------------------------------------------------------- 2, 3. submitted versions
# submit VERSION ITERATION: propose (JSON) -> claim -> kopt submit -> (kopt wait)
submit() {
  local v=$1 it=$2 claim rc ideas=()
  begin "$it. iteration $it: ln_$v.$ext"
  set -x
  kt 120 propose "$sweep" --store "$store" --format json > "$work/propose-it$it.json"
  set +x
  python3 docs/verified/layernorm_claim.py "$work/propose-it$it.json" "$run" "$v" \
    "$sweep/notes/$v.md" "$work/note-$v.md" | tee "$work/claim-$v.txt"
  claim=$(tail -1 "$work/claim-$v.txt")
  say "- iteration $it: ln_$v.$ext claims $claim (chosen from propose's catalog_scan; the note as submitted: note-$v.md in the tarball)"
  grep -E "NOT admitted|higher-priority" "$work/claim-$v.txt" | sed 's/^/  /' >> "$summary"
  if [ "$idea" = 1 ]; then  # provenance of the idea (optional: the flag is new)
    for m in ${claim//,/ }; do ideas+=(--idea "catalog:$m"); done
    if [ "$v" = v2 ]; then
      ideas+=(--idea "url:https://developer.nvidia.com/blog/faster-parallel-reductions-kepler/")
    else
      ideas+=(--idea "kernel:https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/cuda/layer_norm_kernel.cu")
    fi
  fi
  set -x
  kt 400 submit "$run" --source "$sweep/ln_$v.$ext" --methods "$claim" --note "$work/note-$v.md" \
    --submitter h200_layernorm_loop.sh "${ideas[@]}" --store "$store" --format json \
    > "$work/submit-$v.json"
  rc=$?
  if [ $rc = 2 ] && [ ${#ideas[@]} -gt 0 ]; then  # a usage error: --idea takes another form
    kt 400 submit "$run" --source "$sweep/ln_$v.$ext" --methods "$claim" \
      --note "$work/note-$v.md" --submitter h200_layernorm_loop.sh --store "$store" \
      --format json > "$work/submit-$v.json"
    rc=$?
  fi
  set +x
  cat "$work/submit-$v.json"
  say "- iteration $it: kopt submit exit $rc ($(took)): $(tail -1 "$work/submit-$v.json" | head -c 400)"
  if have wait; then
    set -x
    kt 400 wait "$run" --store "$store" --format json > "$work/wait-$v.json"
    set +x
    cat "$work/wait-$v.json"
    say "  kopt wait: $(head -c 400 "$work/wait-$v.json")"
  fi
  say "  winner: $(q1 "select json_extract_string(state, '\$.best.candidate_id') || ' (found in iteration ' || json_extract_string(state, '\$.best.iteration') || ', params ' || json_extract_string(state, '\$.best.params') || '); gain ' || coalesce(round(json_extract(state, '\$.gain')::double, 3)::varchar, '-') || '; selected ' || json_extract_string(state, '\$.selected') || '; stop: ' || coalesce(json_extract_string(state, '\$.stop'), '') from iterations where run_id = '$run' and iteration = $it order by created_at")"
  timing
}
submit v2 2
submit v3 3

# ---------------------------------------------------------------- 4. lineage, report, queries
begin "4. lineage, report, queries"
set -x
kt 120 lineage "$run" --store "$store" | tee "$work/lineage.txt"
kt 180 report "$run" --store "$store" --out "$work/report-$run"
kt 120 methods --store "$store"
set +x
say "- lineage (kopt lineage):"
sed 's/^/      /' "$work/lineage.txt" >> "$summary"
ls -la "$work/report-$run"
for f in "$work/report-$run"/*lineage*.png "$work/report-$run/speedup_per_iteration.png"; do
  [ -f "$f" ] && cp "$f" "$out/"
done
say "- report: $(cd "$work/report-$run" && printf '%s ' *)"
ls "$work/report-$run"/*lineage*.png > /dev/null 2>&1 \
  || say "  (no lineage picture in this kopt's report: that part of issue 15 is still to come)"

echo "## per-iteration winners (the latest state of each iteration)"
winners_sql="select iteration, device_class,
  json_extract_string(state, '\$.best.candidate_id') winner,
  json_extract_string(state, '\$.best.iteration') found_in,
  json_extract_string(state, '\$.best.params') params,
  round(json_extract(state, '\$.best.median_ms')::double, 5) median_ms,
  round(json_extract(state, '\$.gain')::double, 3) gain,
  json_extract_string(state, '\$.selected') selected,
  json_extract_string(state, '\$.bottleneck_before') bottleneck_before,
  json_extract_string(state, '\$.bottleneck_after') bottleneck_after,
  json_extract_string(state, '\$.stop') stop
  from iterations where run_id = '$run'
  qualify row_number() over (partition by iteration, device_class order by created_at desc) = 1
  order by iteration"
set -x
q "$winners_sql" | tee "$work/winners.csv"
set +x
say "- per-iteration winners (kopt query over iterations):"
sed 's/^/      /' "$work/winners.csv" >> "$summary"

echo "## the versions and their candidates (kopt query, candidates x versions)"
set -x
q "select c.iteration it, coalesce(v.name, 'ln_v1 (the sweep)') version, v.try_no,
   c.claimed_methods, c.params, c.dims, c.status, round(c.median_ms, 5) median_ms,
   round(c.speedup, 3) speedup_over_parent, c.is_baseline base
   from candidates c left join versions v using (run_id, source_hash)
   where c.run_id = '$run' order by c.iteration, c.dims, c.median_ms" | tee "$work/versions.csv"
set +x

echo "## the closing contest: the first baseline and every iteration's winner, side by side"
closing_sql="select json_extract(state, '\$.closing.speedup')::double speedup,
  json_extract(state, '\$.closing.first_baseline_ms')::double first_baseline_ms,
  json_extract(state, '\$.closing.best_ms')::double best_ms,
  json_extract_string(state, '\$.closing.best.candidate_id') best,
  json_extract_string(state, '\$.closing.winner_of') winner_of,
  json_extract_string(state, '\$.closing.note') note
  from iterations where run_id = '$run' order by iteration desc, created_at desc limit 1"
set -x
q "$closing_sql" | tee "$work/closing.csv"
q "select dims, candidate_id, label, round(median_ms, 5) median_ms, round(iqr_ms, 5) iqr_ms,
   n_samples, winner from contests where run_id = '$run' and iteration = 0
   qualify row_number() over (partition by dims, candidate_id order by created_at desc) = 1
   order by dims, median_ms" | tee "$work/closing_contest.csv"
set +x
say "- v1 -> best, side by side (the closing contest, geometric mean over the sweep's sizes): $(q1 "select 'speedup ' || coalesce(round(speedup, 3)::varchar, '-') || 'x: first baseline ' || coalesce(round(first_baseline_ms, 5)::varchar, '-') || ' ms -> ' || coalesce(round(best_ms, 5)::varchar, '-') || ' ms (' || coalesce(best, '-') || '); ' || coalesce(note, '') from ($closing_sql)")"
say "  per problem size (kopt best: loop_speedup is first baseline / best, side by side):"
kt 120 best layernorm --store "$store" --run "$run" --format json > "$work/best.json"
python3 - "$work/best.json" <<'EOF' | tee -a "$summary"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    sys.exit(f"      (kopt best --format json unreadable: {e})")
for r in rows:
    methods = ",".join(m for m in (r.get("compute_method"), r.get("memory_method"),
                                   r.get("latency_method")) if m) or "no -D method"
    print(f"      {r.get('dims')}: {r.get('candidate_id')} ({methods}, {r.get('params')}) "
          f"median {r.get('median_ms')} ms; loop_speedup {r.get('loop_speedup')} "
          f"{r.get('loop_note') or ''}")
EOF

echo "## NCU evidence per iteration: the key figures of each profiled candidate"
ncu_sql="with st as (select iteration, json_extract_string(state, '\$.best.candidate_id') w,
  json_extract_string(state, '\$.baseline.candidate_id') b from iterations where run_id = '$run'
  qualify row_number() over (partition by iteration order by created_at desc) = 1)
  select m.iteration it, case when m.candidate_id = st.w then 'winner'
    when m.candidate_id = st.b then 'baseline' else 'top-k' end role, m.candidate_id, m.dims,
  round(avg(value) filter (where metric = 'gpu__time_duration.sum'), 2) duration,
  any_value(unit) filter (where metric = 'gpu__time_duration.sum') unit,
  round((avg(value) filter (where metric = 'dram__bytes_read.sum')
    + avg(value) filter (where metric = 'dram__bytes_write.sum')) / 1e6, 1) dram_mb,
  round(avg(value) filter (where metric = 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'), 1) mem_pct,
  round(avg(value) filter (where metric = 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'), 1) dram_pct,
  round(avg(value) filter (where metric = 'sm__throughput.avg.pct_of_peak_sustained_elapsed'), 1) sm_pct,
  round(avg(value) filter (where metric = 'sm__warps_active.avg.pct_of_peak_sustained_active'), 1) occ_pct,
  round(avg(value) filter (where metric = 'smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio'), 3) st_barrier,
  round(avg(value) filter (where metric = 'smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio'), 3) st_long_sb,
  round(avg(value) filter (where metric = 'smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio'), 3) st_lg_throttle,
  round(avg(value) filter (where metric = 'smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio'), 3) st_short_sb,
  round(avg(value) filter (where metric = 'smsp__sass_inst_executed_op_global_ld.sum'), 0) global_ld_inst,
  round(avg(value) filter (where metric = 'lts__t_sector_hit_rate.pct'), 1) l2_hit_pct
  from metrics m join st using (iteration) where m.run_id = '$run'
  group by all order by 1, 2 desc, 3"
set -x
q "$ncu_sql" | tee "$work/ncu_key.csv"
q "select c.iteration, c.candidate_id, p.profile_status, p.bottleneck,
   round(p.compute_score, 3) compute, round(p.memory_score, 3) memory,
   round(p.latency_score, 3) latency, p.profile_error
   from profiles p join candidates c using (run_id, job_key) where p.run_id = '$run'
   order by 1, 2" | tee "$work/profiles.csv"
q "select * from metrics where run_id = '$run' order by iteration, candidate_id, metric" \
  > "$out/evidence.csv"
q "select * exclude (samples_ms) from candidates where run_id = '$run'
   order by iteration, median_ms nulls last" > "$out/candidates.csv"
set +x
say "- NCU evidence (key figures; every metric in evidence.csv):"
sed 's/^/      /' "$work/ncu_key.csv" >> "$summary"

# optional: the ledgers of issue 15 item 4, when this kopt stores them
for t in evidence provenance; do
  if q "select count(*) from $t" > "$work/has-$t.txt" 2>&1 && ! grep -qi "error\|not found\|does not exist" "$work/has-$t.txt"; then
    set -x
    q "select * from $t" | tee "$work/$t.csv"
    set +x
    say "- optional: table $t: $(($(wc -l < "$work/$t.csv") - 1)) rows (in the tarball: $t.csv)"
  else
    say "- optional: table $t is not in this kopt's store (skipped)"
  fi
done
timing

# ---------------------------------------------------------------- 5. what comes back
python3 - "$work" > "$out/plans.json" <<'EOF'
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
def load(name):
    p = w / name
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return p.read_text() if p.exists() else None
print(json.dumps({n: load(n) for n in ("propose-it2.json", "propose-it3.json", "submit-v2.json",
                  "submit-v3.json", "wait-v2.json", "wait-v3.json")}
                 | {f"claim-{v}.txt": load(f"claim-{v}.txt") for v in ("v2", "v3")}, indent=1))
EOF
cp "$sweep"/notes/*.md "$work/" 2>/dev/null
say "- total wall time: $((SECONDS - start)) s"
tar -czf "$out/layernorm.tar.gz" -C "$work" --exclude=cache --exclude='*.so' . 2>/dev/null
ls -la "$out"
echo; echo "=== summary ($out)"; cat "$summary"
