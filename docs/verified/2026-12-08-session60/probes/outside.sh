# $1 commit: median (wall - parts) ms per job of bench/check_cost.py --n 6 on the CPU at that commit
c=$1; d=/tmp/trees/$c
if [ ! -d $d ]; then mkdir -p $d; (cd /work/main && git archive $c workers kopt bench sweeps/sgemm catalog pyproject.toml | tar -x -C $d); fi
cd $d && timeout 300 env PYTHONPATH=$d python bench/check_cost.py sweeps/sgemm --n 6 --out /tmp/cc-$c > /tmp/cc-$c.txt 2>&1
python - "$c" <<'PY'
import json,statistics,sys
d=json.load(open(f'/tmp/cc-{sys.argv[1]}/check_cost.json'))
v=[]
for r in d['rows']:
  for k in ('guarded','unguarded'):
    p=r.get(f'{k}_parts_ms') or {}
    if not p: continue
    v.append(r[f'{k}_wall_s']*1000-sum(x for kk,x in p.items() if kk!='own'))
print(sys.argv[1], 'outside parts median ms', round(statistics.median(v),1), [round(x,1) for x in v])
PY
