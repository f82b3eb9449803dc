# ruff: noqa -- the red-team helper's script as it ran (paths under /tmp/rt49), kept as evidence
import sys; sys.path.insert(0, "/tmp/rt49/kopt")
from kopt.core.winner import close_loop, decide
from kopt.loop.contests import row_labels
I=1.349
# closing: F final winner (noisy), B faster beyond noise than F, Z even faster but noisy
rem = {"F": [(1.0, 0.3*1.0*I)], "B": [(0.8, 0.01*0.8*I)], "Z": [(0.75, 0.3*0.75*I)], "E": [(1.2,0.001)]}
cl = close_loop("E", "F", {"E":0, "Z":1, "B":2, "F":3}, rem)
print("closing best", cl["best_id"], "medians", cl["medians_ms"])
print("labels", cl["labels"], "-> rows", row_labels(cl["labels"]))
# iteration contest across sizes
cands=[{"candidate_id":"A","triple":("x","",""),},{"candidate_id":"B","triple":("x","","")}]
v = decide(cands, {"A":[(1.0,0.001),(4.0,0.001)], "B":[(0.5,0.001),(10.0,0.001)]})
print("decide", v.winner, row_labels(v.labels), "A d1=1.0 B d1=0.5")
# one contender left
v = decide(cands[:1], {"A":[(1.0,0.001)]}); print("single", row_labels(v.labels))
