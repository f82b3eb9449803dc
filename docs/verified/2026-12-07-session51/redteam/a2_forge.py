# ruff: noqa
"""A2: forged first-"prepared" messages from candidate code, (a) in a clock job that is the
harness's first job, (b) in a clock job after an honest job, (c) in a plain job: any stray
"go"? any hang or wrong verdict? then an honest clock job in the same harness."""
import tempfile
from pathlib import Path
from common import *
tmp = Path(tempfile.mkdtemp(prefix="rt-"))
ref = PACK / "ref.py"
def clk(src, key, **kw): return {**cjob(tmp, src, ref, key, **kw), "clock_calls": 7}
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1"})
sends = []
real = Sandbox._send
Sandbox._send = lambda self, msg: (sends.append(msg[0]), real(self, msg))[1]
try:
    for label, j in [("forger clock, first job", clk(RT / "forge.cpp", "f1")),
                     ("honest clock", clk(PACK / "faults.cpp", "h1", defines={"MODE": 0})),
                     ("forger plain", cjob(tmp, RT / "forge.cpp", ref, "f2")),
                     ("honest clock after", clk(PACK / "faults.cpp", "h2", defines={"MODE": 0})),
                     ("forger clock", clk(RT / "forge.cpp", "f3")),
                     ("honest clock after", clk(PACK / "faults.cpp", "h3", defines={"MODE": 0}))]:
        sends.clear()
        r = box.run(j, 30)
        print(f"{label}: status={r['status']} err={r.get('error','')[:160]!r} outside_ms={r.get('outside_ms')} sends={sends} host={box.host_pid} ended={box.end_leftovers()}")
finally:
    box.close()
