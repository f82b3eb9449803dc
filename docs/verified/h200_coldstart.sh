#!/usr/bin/env bash
# Issue 14.2 on one H200: what a cold `kopt sweep` start and its exit cost, piece by piece:
# python, ray and torch imports; ray.init alone and while another process makes a CUDA context
# (a prestarted harness does that during Ray's start), each under cProfile (the top entries);
# then a cold and a warm `kopt sweep` of sgemm_kt (2048^3, NCU off) sampled by py-spy, and the
# driver's main thread in the time after the run's `end` phase (printing, leaving Ray, exit).
# Usage (repo root, GPU host; .devsite with py-spy): bash docs/verified/h200_coldstart.sh
set -uo pipefail
. docs/verified/device_env.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
f=$out/coldstart.txt
echo "code: $(cat .kopt_rev 2>/dev/null || echo unknown)" | tee "$f"
spy=$(ls /tmp/site/py_spy-*.data/scripts/py-spy 2>/dev/null | head -1); [ -n "$spy" ] && chmod +x "$spy"
t() { local t0; t0=$(date +%s.%N); "$@" > /dev/null 2>&1
      echo "$(python3 -c "print(round($(date +%s.%N)-$t0,2))") s: $*" | tee -a "$f"; }
t python3 -c "pass"
t python3 -c "import ray"
t python3 -c "import torch"
t python3 -c "import kopt.cli"
cat > /tmp/ri.py <<'PY'
import cProfile, io, pstats, sys, time
import ray
pr = cProfile.Profile(); t = time.time(); pr.enable()
ray.init(address="local", include_dashboard=False, logging_level="ERROR", log_to_driver=False)
pr.disable(); init = time.time() - t; t = time.time(); ray.shutdown()
print(f"{sys.argv[1]}: ray.init {init:.2f} s, ray.shutdown {time.time() - t:.2f} s")
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(18)
print("\n".join(l for l in s.getvalue().splitlines() if "ray/" in l or "ncalls" in l))
PY
python3 /tmp/ri.py alone 2>&1 | tee -a "$f"
python3 /tmp/ri.py alone-again 2>&1 | grep "ray.init" | tee -a "$f"
python3 -c "import torch; torch.cuda.init(); torch.ones(1, device='cuda').sum().item(); import time; time.sleep(8)" &
sleep 0.05
python3 /tmp/ri.py "beside a torch import and CUDA context" 2>&1 | tee -a "$f"
wait
python3 -c "import time; t=time.time(); import pynvml; pynvml.nvmlInit(); n=pynvml.nvmlDeviceGetCount(); print('nvml init + count', round(time.time()-t,3), n)" | tee -a "$f"
# cold and warm sweeps under py-spy
w=/tmp/cs; rm -rf $w; mkdir -p $w; cp -r sweeps/sgemm_kt $w/kt
python3 - <<'PY'
import yaml, pathlib
p = pathlib.Path("/tmp/cs/kt/sweep.yaml"); s = yaml.safe_load(p.read_text())
s["dims"] = [{"M": 2048, "N": 2048, "K": 2048}]; s["ncu"] = {"top_k": 0}
p.write_text(yaml.safe_dump(s, sort_keys=False))
PY
sweep() {  # label extra-args...
  local label=$1; shift
  rm -rf $w/cache/builds; local t0; t0=$(date +%s.%N)
  KOPT_CACHE=$w/cache timeout 200 "$spy" record -r 100 --idle -f speedscope -o "$w/$label.json" -- \
    python3 -m kopt.cli sweep $w/kt --store $w/store-$label --backend cuda "$@" > "$w/$label.log" 2>&1
  echo "$label: rc $? process wall $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s" | tee -a "$f"
  python3 -m kopt.cli query --store $w/store-$label --format csv "select phase, round(start_s,2) s0, round(end_s,2) s1, detail from phases where device is null and phase not in ('build') order by start_s" | tee -a "$f"
  local end; end=$(python3 -m kopt.cli query --store $w/store-$label --format csv "select max(end_s) from phases where phase = 'end'" | tail -1)
  python3 - "$w/$label.json" "$end" <<'PY' | tee -a "$f"
import json, sys, collections
sp = json.load(open(sys.argv[1])); frames = sp["shared"]["frames"]
end = float(sys.argv[2])
prof = max(sp["profiles"], key=lambda p: sum(p["weights"]))  # the main thread lives longest
t, rows = 0.0, []
for st, wt in zip(prof["samples"], prof["weights"]):
    rows.append((t, st, wt)); t += wt
print(f"-- {prof['name']}: {t:.2f} s sampled; after the end phase ({end:.2f} s), by stack:")
def name(i):
    fr = frames[i]
    return f"{fr['name']} ({fr.get('file', '').split('site-packages/')[-1]}:{fr.get('line', '')})"
c = collections.Counter()
for t0, st, wt in rows:
    if t0 >= end:
        mine = [name(i) for i in st if "/kopt/" in frames[i].get("file", "")][-2:]
        c[" > ".join(mine + [name(i) for i in st[-2:]])] += wt
for k, v in c.most_common(14):
    print(f"{v:5.2f} s  {k}")
PY
}
# the prestarted harness of the cold run sampled too: where a candidate's 35 ms go
( for i in $(seq 1 400); do
    hp=$(pgrep -f "workers.harness --listen" | head -1); [ -n "$hp" ] && break; sleep 0.02; done
  [ -n "$hp" ] && "$spy" record --pid "$hp" -r 200 -d 16 --idle -f speedscope -o $w/harness.json > /dev/null 2>&1 ) &
sweep cold
wait
python3 - $w/harness.json <<'PY' | tee -a "$f"
import json, sys, collections
sp = json.load(open(sys.argv[1])); frames = sp["shared"]["frames"]
prof = max(sp["profiles"], key=lambda p: sum(p["weights"]))
incl, leaf = collections.Counter(), collections.Counter()
for st, wt in zip(prof["samples"], prof["weights"]):
    names = [f"{frames[i]['name']} ({frames[i].get('file','').split('/')[-1]})" for i in st]
    for n in set(names):
        if "harness.py" in n or "timing.py" in n or "observers.py" in n or "nvrtc.py" in n:
            incl[n] += wt
    leaf[" > ".join(names[-3:])] += wt
print(f"-- harness: {sum(prof['weights']):.2f} s sampled; inclusive s by function:")
for k, v in incl.most_common(28):
    print(f"{v:6.2f} s  {k}")
print("-- leaf stacks:")
for k, v in leaf.most_common(20):
    print(f"{v:6.2f} s  {k}")
PY
export KOPT_CACHE=$w/cache
python3 -m kopt.cli serve start --backend cuda > $w/serve.log 2>&1; echo "serve start rc $?" | tee -a "$f"
sweep warm1 --queue
sweep warm2 --queue
python3 -m kopt.cli serve stop > /dev/null 2>&1
tar -czf "$out/coldstart-spy.tgz" -C $w cold.json warm2.json harness.json cold.log warm2.log 2>/dev/null
