# ruff: noqa
"""The attackers' Python, run once inside the harness process from the attacker's solve.
name -> (python source, extra sandbox env)."""
FIND_H = "import gc\nh = [o for o in gc.get_objects() if type(o).__name__ == 'Harness'][0]\n"

ATTACKS = {
 # nothing: control (an attacker artifact that runs a no-op)
 "noop": ("pass", {}),
 # A: the native helper library's ctypes function attributes (a CDLL instance's dict, not
 # watched) replaced: every float comparison says close
 "native_cmp": ("""
import workers.native as nv
lib = nv._LIB[0]
def cmp(*a):
    return None            # the Comparison stays zeros: bad=0, max_abs=0
def allc(*a):
    return 1
for t in ('f32', 'f64', 'bf16', 'f16', 'f32_f64', 'bf16_f64', 'f16_f64'):
    setattr(lib, 'kopt_compare_' + t, cmp)
    setattr(lib, 'kopt_all_close_' + t, allc)
""", {}),
 # A2: the same helper's eviction made a no-op: later samples run with warm caches
 "native_evict": ("""
import workers.native as nv
lib = nv._LIB[0]
lib.kopt_evict = lambda p, n: None
m = nv.ctypes.CDLL(None).memcpy
m.argtypes, m.restype = [nv.ctypes.c_void_p, nv.ctypes.c_void_p, nv.ctypes.c_size_t], nv.ctypes.c_void_p
lib.kopt_stream_copy = m
""", {}),
 # B1: ctypes.CDLL.__getattr__ (ctypes is not watched): every later library's solve wrapped
 "cdll_getattr": ("""
import ctypes, time
orig = ctypes.CDLL.__getattr__
class W:
    def __init__(s, f): object.__setattr__(s, 'f', f)
    def __setattr__(s, k, v): setattr(s.f, k, v)
    def __getattr__(s, k): return getattr(s.f, k)
    def __call__(s, *a):
        r = s.f(*a)
        t = time.perf_counter() + 0.002
        while time.perf_counter() < t:
            pass
        return r
def ga(self, name):
    f = orig(self, name)
    if name == 'solve':
        w = W(f)
        setattr(self, name, w)
        return w
    return f
ctypes.CDLL.__getattr__ = ga
""", {}),
 # B2: a Python thread left spinning: the harness's main thread waits for the GIL after
 # every ctypes call (which released it), inside the timed interval
 "gil_hog": ("""
import threading
def spin():
    x = 0
    while True:
        x += 1
threading.Thread(target=spin, daemon=True, name='rt-spin').start()
""", {}),
 # B3: main thread's CPU affinity narrowed to CPU 0 and a thread pinned there that
 # mostly runs without the GIL (hashing), sharing the core with every later solve
 "affinity_spin": ("""
import os, threading, hashlib
os.sched_setaffinity(0, {0})
big = b'x' * (8 << 20)
def spin():
    os.sched_setaffinity(0, {0})
    while True:
        hashlib.sha256(big).digest()
threading.Thread(target=spin, daemon=True, name='rt-hash').start()
import sys, time; time.sleep(0.05)
print('rt: affinity', os.sched_getaffinity(0), [t.name for t in threading.enumerate()], file=sys.stderr, flush=True)
""", {}),
 # B4: libgomp's thread count (the initial thread's ICV) set to 1
 "omp_threads": ("""
import ctypes
ctypes.CDLL('libgomp.so.1').omp_set_num_threads(1)
""", {"OMP_NUM_THREADS": "2"}),
 # B5: this thread's scheduling priority lowered (nice 19) and a spinner at nice 0
 "nice": ("""
import os, threading, hashlib
os.setpriority(os.PRIO_PROCESS, 0, 19)
big = b'x' * (8 << 20)
def spin():
    os.setpriority(os.PRIO_PROCESS, 0, 0) if False else None
    os.sched_setaffinity(0, {0})
    while True:
        hashlib.sha256(big).digest()
os.sched_setaffinity(0, {0})
threading.Thread(target=spin, daemon=True).start()
""", {}),
 # B6: the main thread's floating-point environment: flush-to-zero / denormals-are-zero
 "ftz": ("import torch\ntorch.set_flush_denormal(True)\n", {}),
 # C1: the harness's prepared data (Data.sets' expected outputs) corrupted via gc
 "data_expected": (FIND_H + """
for d in h.data.values():
    for s in [*d.sets, *d.unseen, *d.reserve]:
        for t in s.expected.values():
            t.add_(1.0)
""", {}),
 # C2: torch.sort (not in TORCH_CALLED; ref.py's reference calls it) rebound to sort
 # descending, and the harness's prepared data dropped (h.data.clear()): the next job's
 # expected outputs are made again through it
 "ref_torch_sort": (FIND_H + """
import torch
_sort = torch.sort
def sort(t, *a, **k):
    r = _sort(t, *a, **k)
    return torch.return_types.sort((r.values.flip(-1), r.indices.flip(-1)))
torch.sort = sort
h.data.clear()
""", {}),
 # D1: a TorchFunctionMode pushed and never popped (C-level mode stack, not watched):
 # `ok &= ...` in Harness.within keeps ok True, so timed calls are never failed
 "torch_mode": ("""
import torch
from torch.overrides import TorchFunctionMode
class M(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__iand__:
            return args[0]
        return func(*args, **(kwargs or {}))
M().__enter__()
""", {}),
 # D2: TensorBase's type dict patched through gc (Tensor's namespace untouched)
 "tensorbase_iand": ("""
import gc, ctypes, torch
d = gc.get_referents(torch._C.TensorBase.__dict__)[0]
d['__iand__'] = lambda self, other: self
ctypes.pythonapi.PyType_Modified(ctypes.py_object(torch._C.TensorBase))
""", {}),
}
