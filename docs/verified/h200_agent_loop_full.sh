#!/usr/bin/env bash
# The agent's whole loop through JSON on a warm H200 service, timed per command: propose ->
# submit --queue -> wait -> submit --retry -> wait -> lineage -> report --workflow -> export ->
# port, on tests/fixtures/submit's kernel-mode form (NVRTC builds, 5 launch configs); then
# checks that report, export and port ship the winning version's text, and stores every
# phase row of the run (device rows too: where a slow try's time went).
# Usage (repo root, GPU host, .devsite carried): bash docs/verified/h200_agent_loop_full.sh
# (BACKEND=cpu LOCAL=1: the same on the CPU backend with base.cpp, on a machine without a GPU
# whose Python has kopt's packages installed)
set -uo pipefail
if [ -z "${LOCAL:-}" ]; then . docs/verified/device_env.sh
else out=${OUT:-/tmp/kopt-verify}; mkdir -p "$out"; kopt() { python3 -m kopt "$@"; }; fi
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
cat .kopt_rev 2>/dev/null | tee "$out/rev.txt"
W=/tmp/kopt-loop; rm -rf $W; mkdir -p $W
export KOPT_CACHE=$W/cache KOPT_STORE=$W/store RAY_USAGE_STATS_ENABLED=0
BACKEND=${BACKEND:-cuda}; ext=cu; [ "$BACKEND" = cpu ] && ext=cpp
cp -r tests/fixtures/submit $W/s
python3 - "$W/s" "$BACKEND" <<'PY'
import pathlib, sys
from bench.agent_loop import KERNEL_MODE, NOTE
s, backend = pathlib.Path(sys.argv[1]), sys.argv[2]
if backend == "cuda":
    (s / "sweep.yaml").write_text((s / "sweep.yaml").read_text().replace("  kernel: base.cu\n", KERNEL_MODE))
    (s / "base.cu").write_text((s / "base_kernel.cu").read_text())
ext = "cu" if backend == "cuda" else "cpp"
base = (s / f"base.{ext}").read_text()
for name, work in (("v1", 8), ("v2", 3)):
    (s.parent / f"{name}.{ext}").write_text(base.replace("#define WORK 64", f"#define WORK {work}"))
(s.parent / "why.md").write_text(NOTE)
PY
CLAIM=compute.thread_coarsening,memory.none,latency.none
log="$out/loop.txt"; : > "$log"
t() { local name=$1; shift; local t0=$(date +%s.%N); "$@" > "$W/$name.out" 2> "$W/$name.err"
  local rc=$?; echo "$name rc $rc $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s" | tee -a "$log"; }
t serve_start kopt serve start --backend $BACKEND
t sweep kopt sweep $W/s --queue
RUN=$(awk '{print $2; exit}' $W/sweep.err); echo "run $RUN" | tee -a "$log"
t propose kopt propose $W/s --format json
t submit1 kopt submit $RUN --source $W/v1.$ext --methods $CLAIM --note $W/why.md --queue --format json
t wait1 kopt wait $RUN --format json
t submit2 kopt submit $RUN --source $W/v2.$ext --methods $CLAIM --note $W/why.md --queue --retry --format json
t wait2 kopt wait $RUN --format json
t lineage kopt lineage $RUN --format json
t report kopt report $RUN --out $W/report --workflow
t export kopt export submit --out $W/export
mkdir -p $W/repo && (cd $W/repo && git init -q && cp $W/s/base.$ext kernel.$ext && git add kernel.$ext \
  && git -c user.email=k@x -c user.name=k commit -qm base)
t port kopt port $RUN --to $W/repo/kernel.$ext --build true --test true
t serve_stop kopt serve stop
for f in propose submit1 wait1 submit2 wait2 lineage; do cp $W/$f.out "$out/$f.json"; done
tail -n 3 $W/port.out $W/port.err >> "$log" 2>&1
python3 - "$W" "$ext" <<'PY' 2>&1 | tee -a "$log"
import glob, json, pathlib, subprocess, sys
W, ext = pathlib.Path(sys.argv[1]), sys.argv[2]; v2 = (W / f"v2.{ext}").read_text()
w = json.loads((W / "wait2.out").read_text())
print("wait2 best:", [c.get("best") for c in w["classes"]], "winner:", [c.get("winner") for c in w["classes"]])
for f in sorted(glob.glob(f"{W}/report/best-*.{ext}")) + sorted(glob.glob(f"{W}/export/**/*.{ext}", recursive=True)):
    print(f, "ends with v2's text:", pathlib.Path(f).read_text().endswith(v2))
br = subprocess.run(["git", "-C", str(W / "repo"), "branch", "--list"], capture_output=True, text=True).stdout.split()
for b in [x for x in br if x.startswith("kopt")]:
    txt = subprocess.run(["git", "-C", str(W / "repo"), "show", f"{b}:kernel.{ext}"], capture_output=True, text=True).stdout
    print("port branch", b, "ends with v2's text:", txt.endswith(v2))
PY
kopt query --format csv "select process_start, phase, device, round(start_s, 3) s0, round(end_s - start_s, 3) dur, detail from phases order by process_start, start_s" > "$out/phases.csv" 2>&1
