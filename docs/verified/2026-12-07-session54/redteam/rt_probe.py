# ruff: noqa
# Runs inside the GPU-style jail as the "harness" (first child of pid 1).
import os, sys, threading, time, ctypes, errno
me = os.getpid()
out = []
def attempt(what, fn):
    try:
        r = fn(); out.append(f"{what}: ok {r if r is not None else ''}")
    except OSError as e:
        out.append(f"{what}: {errno.errorcode.get(e.errno, e.errno)}")
out.append(f"harness pid {me} ppid {os.getppid()}")
# mountinfo: what of /proc is visible
mi = open("/proc/self/mountinfo").read().splitlines()
out.append("mountinfo proc lines: " + " | ".join(l for l in mi if " proc " in l or "proc" in l.split()[4]))
# thread
ev, stop = threading.Event(), threading.Event()
t = threading.Thread(target=lambda: (ev.set(), stop.wait())); t.start(); ev.wait()
tid = t.native_id
attempt("own mem rw", lambda: open(f"/proc/{me}/mem", "r+b").close())
attempt("thread via task comm", lambda: open(f"/proc/{me}/task/{tid}/comm", "w").write("x"))
attempt("thread top-level /proc/TID comm", lambda: open(f"/proc/{tid}/comm", "w").write("x"))
attempt("thread top-level /proc/TID mem", lambda: open(f"/proc/{tid}/mem", "r+b").close())
attempt("dotdot from own", lambda: os.listdir(f"/proc/{me}/.."))
attempt("own/task/.. ", lambda: os.listdir(f"/proc/{me}/task/.."))
attempt("own/root/proc/1/mem", lambda: open(f"/proc/{me}/root/proc/1/mem", "r+b").close())
attempt("pid1 mem rw", lambda: open("/proc/1/mem", "r+b").close())
attempt("pid1 environ", lambda: open("/proc/1/environ","rb").read()[:0])
attempt("pid1 fd list", lambda: os.listdir("/proc/1/fd"))
attempt("scratch list", lambda: os.listdir(sys.argv[1]))
# writable things of own /proc
for f, v in (("oom_score_adj", "1000"), ("timerslack_ns", "1"), ("clear_refs", "1"), ("coredump_filter", "0x33"),
             ("attr/current", "x"), ("sched_autogroup"if False else "autogroup", "19"), ("comm", "harness2"),
             ("loginuid", "0"), ("setgroups", "deny"), ("uid_map", "0 0 1"), ("projid_map","0 0 1"), ("make-it-fail","1"), ("fail-nth","1")):
    def wr(f=f, v=v):
        fd = os.open(f"/proc/{me}/{f}", os.O_WRONLY)
        try: return os.write(fd, v.encode())
        finally: os.close(fd)
    attempt(f"own {f}", wr)
# a child writes the parent's (harness's) entries
r, w = os.pipe()
kid = os.fork()
if kid == 0:
    os.close(r)
    res = []
    def a2(what, fn):
        try: fn(); res.append(f"{what}: ok")
        except OSError as e: res.append(f"{what}: {errno.errorcode.get(e.errno, e.errno)}")
    a2("child: parent mem rw", lambda: open(f"/proc/{me}/mem", "r+b").close())
    a2("child: parent oom_score_adj", lambda: os.write(os.open(f"/proc/{me}/oom_score_adj", os.O_WRONLY), b"500"))
    a2("child: parent task comm", lambda: os.write(os.open(f"/proc/{me}/task/{tid}/comm", os.O_WRONLY), b"y"))
    a2("child: parent timerslack", lambda: os.write(os.open(f"/proc/{me}/timerslack_ns", os.O_WRONLY), b"5"))
    a2("child: parent clear_refs", lambda: os.write(os.open(f"/proc/{me}/clear_refs", os.O_WRONLY), b"1"))
    a2("child: parent task/tid/mem rw", lambda: open(f"/proc/{me}/task/{tid}/mem", "r+b").close())
    a2("child: own mem rw", lambda: open(f"/proc/self/mem", "r+b").close())
    os.write(w, ("\n".join(res)).encode()); os._exit(0)
os.close(w)
data = b""
while True:
    b = os.read(r, 65536)
    if not b: break
    data += b
os.waitpid(kid, 0)
out.append(data.decode())
stop.set(); t.join()
print("\n".join(out))
