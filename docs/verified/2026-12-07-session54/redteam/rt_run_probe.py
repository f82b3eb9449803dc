# ruff: noqa
import subprocess, sys, tempfile, os
sys.path.insert(0, "/tmp/rt54")
from workers import isolation
iso = isolation.available()
print("isolated:", iso.isolated, iso.kind)
script = sys.argv[1]
for name, kw in (("gpu", {}), ("cpu", {"gpu": False})):
    scratch = tempfile.mkdtemp(prefix=f"rt54-{name}-")
    cmd = iso.wrap([sys.executable, script, scratch], scratch, **kw)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **iso.env()})
    print(f"===== {name} rc={p.returncode}\n{p.stdout}\n{p.stderr[-1500:]}")
