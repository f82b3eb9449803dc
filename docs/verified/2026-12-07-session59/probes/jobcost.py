# ruff: noqa
import sys, time, collections
sys.path.insert(0, "/work/main/tests")
from pathlib import Path
import tempfile
from test_harness import artifact, job, FIXTURES
from workers.harness import Harness
from workers import audit
mode = sys.argv[1]
cnt = collections.Counter()
if mode == "count":
    sys.addaudithook(lambda e, a: cnt.update([e]))
if mode in ("count", "hook"):
    assert audit.install(None)
tmp = Path(tempfile.mkdtemp())
src, ref = FIXTURES / "faulty" / "faulty.cpp", FIXTURES / "faulty" / "ref.py"
h = Harness("cpu")
j = job(artifact(tmp, src, 0), src, ref)
for _ in range(3): h.run(j)
cnt.clear()
t = time.perf_counter()
for _ in range(60): r = h.run(j)
dt = (time.perf_counter() - t) / 60
print(mode, "ms/job", round(dt * 1e3, 2), r["status"], sum(cnt.values()) / 20, cnt.most_common(6))
