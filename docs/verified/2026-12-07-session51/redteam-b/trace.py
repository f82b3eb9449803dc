# ruff: noqa
# imported by run_seq.py when TRACE=1: logs each end_leftovers and run_retrying
from workers import sandbox
_e, _r, _p = sandbox.Sandbox.end_leftovers, sandbox.Sandbox.run_retrying, sandbox.Sandbox._prepared
def e(self):
    left = self.left_running(); before = self.before_code
    import subprocess; print("    states:", [open(f"/proc/{p}/stat").read().split(")")[1].split()[0] for p in left], flush=True)
    out = _e(self); print(f"    end_leftovers: left={left} before_code={sorted(before) if before is not None else None} -> {out}", flush=True); return out
def r(self, job, t):
    res = _r(self, job, t); print(f"    run_retrying -> {res.get('status')} loaded={sorted(x[-20:] for x in self.loaded)}", flush=True); return res
sandbox.Sandbox.end_leftovers, sandbox.Sandbox.run_retrying = e, r
