# ruff: noqa
"""A1 control: the same hijack aimed at the sandbox's own infra from before the change
(its namespace's first process, the zygote's child): is that reachable too?"""
import tempfile
from pathlib import Path
from common import *
tmp = Path(tempfile.mkdtemp(prefix="rt-"))
box = Sandbox("cpu", {"OMP_NUM_THREADS": "1", "RT_NEEDLE": "zygote_server"})
try:
    box.start(); pos = box.log.stat().st_size
    ra = box.run_retrying(cjob(tmp, RT / "hijack.cpp", PACK / "ref.py", "attacker"), 30)
    print("attacker:", ra["status"], "ended:", box.end_leftovers())
    print(box.tail(pos, 2000))
finally:
    box.close()
