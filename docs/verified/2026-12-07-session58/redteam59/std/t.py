# ruff: noqa
import ctypes, os, time, sys
sys.path.insert(0, "/tmp/rt59")
import torch
from workers import teams
g = ctypes.CDLL("libgomp.so.1")
nothing = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p)
g.GOMP_parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
g.GOMP_parallel(nothing, None, 2, 0)
pid = os.getpid()
known = teams.team_waits(pid); print("known", known)
t = ctypes.CDLL(os.path.abspath("t.so"))
print("n", t.rt_go())
time.sleep(0.3)
print("strays", teams.strays(pid, known))
for i in range(5):
    print(teams.wait_of(pid, list(known)[0]), ctypes.c_long.in_dll(t, "rt_parks").value, ctypes.c_long.in_dll(t, "rt_last").value, hex(ctypes.c_int.in_dll(t, "rt_word_after").value & 0xffffffff)); time.sleep(0.001)
print("strays", teams.strays(pid, known))
os._exit(0)
