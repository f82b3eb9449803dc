# ruff: noqa
"""Attacks: name -> {"py": Python run once from the attacker's first solve call (through
PyGILState_Ensure + PyRun_SimpleString), "c": C++ defining static void rt_attack() (run once
after "py"), "env": extra sandbox env}. C_PRELUDE gives rt_py(src), rt_spin(seconds),
rt_start(fn), rt_poll_py(src, period_us): a native pthread that runs src now and then until
src sets the C int at address RT_FLAG (written into src in place of the text RT_FLAG) to 1."""

C_PRELUDE = r'''
#include <pthread.h>
#include <unistd.h>
#include <time.h>
#include <cstdio>
#include <cstdlib>
#include <string>
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char*);
static volatile int rt_flag = 0;
static void rt_py(const char* src) { int g = PyGILState_Ensure(); PyRun_SimpleString(src); PyGILState_Release(g); }
static double rt_now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void rt_spin(double s) { double e = rt_now() + s; while (rt_now() < e) {} }
static void rt_start(void* (*fn)(void*), void* arg = nullptr) { pthread_t t; pthread_create(&t, nullptr, fn, arg); pthread_detach(t); }
struct rt_poll_arg { std::string src; long period_us; };
static void* rt_poller(void* p) {
  rt_poll_arg* a = (rt_poll_arg*)p;
  while (!rt_flag) { rt_py(a->src.c_str()); usleep(a->period_us); }
  return nullptr;
}
static void rt_poll_py(const char* src, long period_us) {
  std::string s(src); std::string key = "RT_FLAG"; char addr[32]; snprintf(addr, sizeof addr, "%lu", (unsigned long)&rt_flag);
  for (size_t i; (i = s.find(key)) != std::string::npos;) s.replace(i, key.size(), addr);
  rt_start(rt_poller, new rt_poll_arg{s, period_us});
}
'''

SPIN = """
import threading
def _rt_spin():
    x = 0
    while True:
        x += 1
"""
FIND = """
import gc, sys
_m = sys.modules['__main__']
if not hasattr(_m, '_rt_h'):
    _m._rt_h = [o for o in gc.get_objects() if type(o).__name__ == 'Harness'][0]
h = _m._rt_h
"""
DONE = "\nimport ctypes\nctypes.c_int.from_address(RT_FLAG).value = 1\n"

def main_stack_has(*names):
    return ("threading.main_thread().ident in sys._current_frames() and any(f.f_code.co_name in "
            f"{names!r} for f in __import__('traceback').walk_stack(sys._current_frames()[threading.main_thread().ident]) for f in [f[0]])")

ATTACKS = {
 "noop": {"py": "pass"},
 # control: the previous round's spinner (must be caught)
 "gil_hog": {"py": SPIN + "threading.Thread(target=_rt_spin, daemon=True).start()\n"},
 # control: _thread.start_new_thread
 "gil_hog_thread": {"py": SPIN + "import _thread\n_thread.start_new_thread(_rt_spin, ())\n"},
 # 1: the spinner's ident added to RefThreads.known through gc
 "known_gc": {"py": SPIN + FIND + """
t = threading.Thread(target=_rt_spin, daemon=True); t.start()
h.ref_threads.known.add(t.ident)
"""},
 # 2: RefThreads.left rebound on the class (workers.harness's classes' methods: watched?)
 "left_patch": {"py": SPIN + """
import workers.harness as wh
wh.RefThreads.left = lambda self: set()
threading.Thread(target=_rt_spin, daemon=True).start()
"""},
 # 3: the Harness instance's ref_threads replaced by an object whose left() is empty
 "inst_swap": {"py": SPIN + FIND + """
class _F:
    known = set()
    def __enter__(self): return self
    def __exit__(self, *a): pass
    def update(self, i): pass
    def left(self): return set()
h.ref_threads = _F()
threading.Thread(target=_rt_spin, daemon=True).start()
"""},
 # 4: sys._current_frames rebound to hide the spinner
 "frames_patch": {"py": SPIN + """
import sys
_cf = sys._current_frames
t = threading.Thread(target=_rt_spin, daemon=True); t.start()
_id = t.ident
sys._current_frames = lambda: {k: v for k, v in _cf().items() if k != _id}
"""},
 # 5: a native pthread that holds the GIL while spinning in C (no Python frame, so not in
 # sys._current_frames): 4 ms of every 4.2
 "gil_c_hold": {"c": r'''
static void* rt_hold(void*) { for (;;) { int g = PyGILState_Ensure(); rt_spin(0.004); PyGILState_Release(g); usleep(200); } return nullptr; }
static void rt_attack() { rt_start(rt_hold); }
'''},
 # 5b: the same, but holding the GIL only 1 ms out of 10 (a milder, quieter tax)
 "gil_c_hold_1ms": {"c": r'''
static void* rt_hold(void*) { for (;;) { int g = PyGILState_Ensure(); rt_spin(0.001); PyGILState_Release(g); usleep(9000); } return nullptr; }
static void rt_attack() { rt_start(rt_hold); }
'''},
 # 6: a native poller starts the Python spinner while the harness is inside a ref.py window
 # (RefThreads._before not empty): its ident is then allowlisted at the window's end
 "window_ref": {"c": r'''
static const char* SRC = R"PY(
import threading
__SPIN__
__FIND__
if h.ref_threads._before and len(h.libs) >= 1:
    threading.Thread(target=_rt_spin, daemon=True).start()
    __DONE__
)PY";
static void rt_attack() { rt_poll_py(SRC, 500); }
'''},
 # 7: the same in a time_reference job (every thread alive at its end is allowlisted)
 "window_timeref": {"c": r'''
static const char* SRC = R"PY(
import threading
__SPIN__
__FIND__
if __MAINHAS_TR__:
    threading.Thread(target=_rt_spin, daemon=True).start()
    __DONE__
)PY";
static void rt_attack() { rt_poll_py(SRC, 1000); }
'''},
 # 8: a native poller starts a Python spinner only while a later job's calls are timed
 # (main thread inside Harness.checked_calls/time...), the spinner itself exits as soon as the
 # main thread leaves them: no Python thread is left when the harness looks
 "transient_spin": {"c": r'''
static const char* SRC = R"PY(
import threading, sys, traceback
__FIND__
def _rt_in():
    f = sys._current_frames().get(threading.main_thread().ident)
    while f is not None:
        if f.f_code.co_name == 'run' and 'harness' in f.f_code.co_filename and len(h.libs) >= 2:
            return True
        f = f.f_back
    return False
def _rt_spin2():
    x = 0
    while _rt_in():
        for _ in range(2000):
            x += 1
if _rt_in() and not getattr(_m, '_rt_on', None) or (getattr(_m, '_rt_on', None) and not _m._rt_on.is_alive() and _rt_in()):
    _m._rt_on = threading.Thread(target=_rt_spin2, daemon=True)
    _m._rt_on.start()
)PY";
static void rt_attack() { rt_poll_py(SRC, 2000); }
'''},
 # 9: an audit hook (sys.addaudithook: not among the watched hooks) that spins 2 ms on each
 # ctypes call into a library loaded after the attacker's
 "audit_hook": {"py": """
import sys, time
def _rt_hook(ev, args):
    if ev == 'ctypes.call_function':
        t = time.perf_counter() + 0.002
        while time.perf_counter() < t:
            pass
sys.addaudithook(_rt_hook)
"""},
 # 10 FRAME: once a later candidate's library is loaded (h.libs grows), a sleeping Python
 # thread (slows nothing) is started during its job
 "frame_sleeper": {"c": r'''
static const char* SRC = R"PY(
import threading, time
__FIND__
if len(h.libs) >= 2:
    threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
    __DONE__
)PY";
static void rt_attack() { rt_poll_py(SRC, 2000); }
'''},
 # 11: a native pthread spinning in C without the GIL, pinned with the main thread? (no:
 # affinity is watched) -- just spinning on all CPUs, 1 thread
 "c_spin": {"c": r'''
static void* rt_s(void*) { for (;;) rt_spin(1.0); return nullptr; }
static void rt_attack() { rt_start(rt_s); }
''', "env": {"OMP_NUM_THREADS": "2"}},
 # 12: diagnostic: print the harness's known threads and the live ones
 "diag": {"py": FIND + """
import threading
print('rt: known', sorted(h.ref_threads.known), 'live', sorted(sys._current_frames()), [(t.name, t.ident) for t in threading.enumerate()], file=sys.stderr, flush=True)
"""},
}

for a in ATTACKS.values():
    if "c" in a:
        a["c"] = (a["c"].replace("__SPIN__", SPIN).replace("__FIND__", FIND)
                  .replace("__DONE__", DONE.strip().replace("\n", "\n    "))
                  .replace("__MAINHAS_TR__", main_stack_has("time_reference")))
