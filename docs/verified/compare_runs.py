"""Per candidate, the status and median of the same sweep in stores A, B (and C): what
differs in status, which medians differ beyond noise (kopt.compare.label, NVBench's rule;
inclusive: runs at different times), and each store's winner (kopt best's pick: the fastest
ok median). Usage: python3 compare_runs.py STORE_A STORE_B [STORE_C]"""
import sys

import duckdb

from kopt.compare import label


def rows(store: str) -> dict[str, tuple]:
    con = duckdb.connect()
    q = ("select candidate_id, status, median_ms, iqr_ms from read_parquet(?, "
         "union_by_name=true) where iteration = 1")
    got = con.execute(q, [f"{store}/candidates/**/*.parquet"]).fetchall()
    return {r[0]: r[1:] for r in got}


stores = sys.argv[1:]
runs = [rows(s) for s in stores]
ids = sorted(set().union(*runs))
print(f"candidates: {[len(r) for r in runs]} (union {len(ids)})")
a, b = runs[0], runs[1]
changed = [(i, a.get(i, ("-",))[0], b.get(i, ("-",))[0]) for i in ids
           if a.get(i, ("-",))[0] != b.get(i, ("-",))[0]]
print(f"status differs {stores[0]} vs {stores[1]}: {len(changed)}", changed[:20])
for k, c in enumerate(runs[1:], 1):
    both = [i for i in ids if a.get(i, (None,))[0] == c.get(i, (None,))[0] == "ok"]
    labels = [label((a[i][1], a[i][2]), (c[i][1], c[i][2]), inclusive=True) for i in both]
    print(f"{stores[0]} vs {stores[k]}: {len(both)} ok in both; "
          f"{ {x: labels.count(x) for x in ('TIED', 'FASTER', 'SLOWER')} }")
for s, r in zip(stores, runs):
    ok = sorted((v[1], i) for i, v in r.items() if v[0] == "ok")
    print(f"{s}: winner {ok[0][1]} {ok[0][0]:.4f} ms; next {[(i, round(m, 4)) for m, i in ok[1:4]]}"
          if ok else f"{s}: no ok candidate")
    counts = {st: sum(v[0] == st for v in r.values()) for st in {v[0] for v in r.values()}}
    print(f"  statuses {counts}")
