# ruff: noqa -- the red-team helper's script as it ran (paths under /tmp/rt49), kept as evidence
"""Feed the contest answer the ENFILE attack produced (contest_enfile.py) to
kopt.loop.contests.SideBySide._culprits, as SideBySide._size does."""
import sys; sys.path.insert(0, "/tmp/rt49/kopt")
from kopt.loop.contests import SideBySide
res = {"status": "error", "failed": ["honest"], "failed_status": {"honest": "error"},
       "error": "honest: OSError(23, 'Too many open files in system') ..."}
s = SideBySide.__new__(SideBySide)
s.by_cand = {"A": {"d": ("attacker", "bA", 1.0, 0.01)}, "H": {"d": ("honest", "bH", 0.5, 0.01)}}
s.replay_cleared = set()
s._contest = lambda *a, **k: (_ for _ in ()).throw(AssertionError("no solo run"))
why = f"{res['status']}: {res['error']}"
print(s._culprits(["A", "H"], "d", why, res))
