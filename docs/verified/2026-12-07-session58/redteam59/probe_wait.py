# ruff: noqa
import ctypes, os, time, glob
import torch
g = ctypes.CDLL("libgomp.so.1")
print([l.split()[-1] for l in open("/proc/self/maps") if "gomp" in l][:1])
nothing = ctypes.cast(ctypes.CDLL(None).free, ctypes.c_void_p)
g.GOMP_parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
g.GOMP_parallel(nothing, None, 2, 0)
time.sleep(0.5)
maps = [l.split() for l in open("/proc/self/maps") if "libgomp" in l]
for t in os.listdir("/proc/self/task"):
    s = open(f"/proc/self/task/{t}/syscall").read().split()
    pc = int(s[-1], 16) if s[0] != "running" else 0
    for m in maps:
        lo, hi = (int(x, 16) for x in m[0].split("-"))
        if lo <= pc < hi:
            print(t, s[0], s[-2], s[-1], m[-1], "file_off", hex(pc - lo + int(m[2], 16)), m[1])
