# ruff: noqa
"""name -> {"c": C++ defining rt_attack() (called at the head of every solve call unless
"call" says otherwise), "env": extra sandbox env}."""
ONCE = "static bool rt_done = false;\n"
ATTACKS = {
 "noop": {"c": "static void rt_attack() {}\n"},
}

PY_PRELUDE = r'''
#include <cstdio>
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char*);
static void rt_py(const char* src) { int g = PyGILState_Ensure(); PyRun_SimpleString(src); PyGILState_Release(g); }
'''

# gc callback (gc.callbacks: not watched) on the harness's main thread starts, during a LATER
# candidate's job only, a Python thread that waits for the main thread to enter
# Harness.samples, holds the GIL (pure-Python spin) while it is there, and exits as soon as
# it leaves: no thread of the attacker's exists at the end of any job (neither RefThreads
# nor the sandbox's /proc task list sees one).
GC_WAITER = r'''
import gc, sys, threading, time
_m = sys.modules['__main__']
_m._rt_h = [o for o in gc.get_objects() if type(o).__name__ == 'Harness'][0]
_m._rt_first = len(_m._rt_h.libs)
_m._rt_done = set()
_m._rt_w = [None]
def _rt_names(f):
    n = set()
    while f is not None:
        n.add(f.f_code.co_name); f = f.f_back
    return n
def _rt_main():
    return _rt_names(sys._current_frames().get(threading.main_thread().ident))
def _rt_wait(key):
    t_end = time.monotonic() + 8
    seen = False
    while time.monotonic() < t_end:
        s = _rt_main()
        if 'samples' in s:
            seen = True
            x = 0
            for _ in range(__SPIN__):
                x += 1
        elif seen or '_run_one' not in s:
            break
        else:
            time.sleep(0.0002)
    _m._rt_done.add(key)
    print('rt: waiter done', key, seen, file=sys.stderr, flush=True)
def _rt_cb(phase, info):
    h = _m._rt_h
    key = len(h.libs)
    if phase != 'start' or key <= _m._rt_first or key in _m._rt_done:
        return
    w = _m._rt_w[0]
    if w is not None and w.is_alive():
        return
    s = _rt_names(sys._getframe())
    if '_run_one' not in s or 'samples' in s:
        return
    _m._rt_done.add(key)
    t = threading.Thread(target=_rt_wait, args=(key,), daemon=True)
    _m._rt_w[0] = t
    t.start()
gc.callbacks.append(_rt_cb)
gc.set_threshold(1, 1000000, 1000000)
print('rt: installed', _m._rt_first, gc.get_threshold(), gc.isenabled(), file=sys.stderr, flush=True)
'''
ATTACKS["gc_waiter"] = {"c": PY_PRELUDE + "static const char* RT_SRC = R\"PY(" + GC_WAITER.replace("__SPIN__", "20000") +
    ")PY\";\nstatic void rt_attack() { static bool d = false; if (d) return; d = true; rt_py(RT_SRC); }\n"}

# gc.set_threshold(1) (not watched) makes every GC-tracked allocation start a gen0
# collection, so the gc callback (gc.callbacks: not watched) runs inside Harness.call,
# i.e. inside every timed call's window; during a LATER candidate's Harness.samples it
# busy-waits __US__ us on the harness's own main thread. No thread at all.
GC_SPIN = r'''
import gc, sys, time
_m = sys.modules['__main__']
_m._rt_h = [o for o in gc.get_objects() if type(o).__name__ == 'Harness'][0]
_m._rt_first = len(_m._rt_h.libs)
def _rt_cb(phase, info):
    if phase != 'start' or len(_m._rt_h.libs) <= _m._rt_first:
        return
    f = sys._getframe(1)
    inside = False
    while f is not None:
        if f.f_code.co_name == 'samples':
            inside = True; break
        f = f.f_back
    if inside:
        t = time.perf_counter() + __US__e-6
        while time.perf_counter() < t:
            pass
gc.callbacks.append(_rt_cb)
gc.set_threshold(1, 1000000, 1000000)
print('rt: gc_spin installed', file=sys.stderr, flush=True)
'''
ATTACKS["gc_spin"] = {"c": PY_PRELUDE + "static const char* RT_SRC = R\"PY(" + GC_SPIN.replace("__US__", "300") +
    ")PY\";\nstatic void rt_attack() { static bool d = false; if (d) return; d = true; rt_py(RT_SRC); }\n"}

# The host libgomp's pool worker that _warm_teams started (its tid is in the sandbox's
# threads_known) is hijacked: GOMP_parallel_start(team of 2) runs the attacker's function
# on it, which never returns; the main thread's libgomp TLS block (found by
# dl_iterate_phdr's dlpi_tls_data) is snapshotted before and restored after, so
# omp_in_parallel() (STATES "OpenMP region left open") reads 0 again. The worker then
# holds the GIL 4 ms of every 4.2 ms (PyGILState_Ensure: no Python frame) forever.
OMP_HIJACK = r'''
#include <omp.h>
#include <link.h>
#include <dlfcn.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
extern "C" void GOMP_parallel_start(void (*)(void*), void*, unsigned);
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
static double rt_now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
struct rt_tls { void* addr; size_t size; };
struct rt_tls_index { unsigned long mod, off; };
extern "C" void* __tls_get_addr(rt_tls_index*);
static int rt_cb(struct dl_phdr_info* i, size_t, void* p) {
  rt_tls* r = (rt_tls*)p;
  if (!i->dlpi_name || !strstr(i->dlpi_name, "libgomp.so.1")) return 0;
  for (int k = 0; k < i->dlpi_phnum; ++k)
    if (i->dlpi_phdr[k].p_type == PT_TLS) {
      rt_tls_index ti = {i->dlpi_tls_modid, 0};
      r->addr = i->dlpi_tls_data ? i->dlpi_tls_data : __tls_get_addr(&ti); r->size = i->dlpi_phdr[k].p_memsz; }
  return r->addr != nullptr;
}
static void rt_worker(void*) {
  if (omp_get_thread_num() == 0) return;
  for (;;) { int g = PyGILState_Ensure(); double e = rt_now() + __HOLD__; while (rt_now() < e) {} PyGILState_Release(g); usleep(200); }
}
static void rt_attack() {
  static bool done = false;
  if (done) return;
  done = true;
  rt_tls t = {nullptr, 0};
  dl_iterate_phdr(rt_cb, &t);
  if (!t.addr) { fprintf(stderr, "rt: no libgomp TLS\n"); return; }
  static char save[65536];
  if (t.size > sizeof save) return;
  memcpy(save, t.addr, t.size);
  GOMP_parallel_start(rt_worker, nullptr, 2);
  int in = omp_in_parallel();
  memcpy(t.addr, save, t.size);
  Dl_info di; dladdr((void*)&GOMP_parallel_start, &di);
  fprintf(stderr, "rt: gomp=%s ", di.dli_fname);
  fprintf(stderr, "rt: hijack tls=%p size=%zu in_parallel %d -> %d\n", t.addr, t.size, in, omp_in_parallel());
}
'''
ATTACKS["omp_hijack"] = {"c": PY_PRELUDE + OMP_HIJACK.replace("__HOLD__", "0.004")}
ATTACKS["omp_hijack2"] = {**ATTACKS["omp_hijack"], "env": {"OMP_NUM_THREADS": "2"}}
ATTACKS["noop2"] = {**ATTACKS["noop"], "env": {"OMP_NUM_THREADS": "2"}}

# the harness's main thread put under SCHED_IDLE (its nice value, which STATES reads,
# unchanged); policy not in STATES
ATTACKS["sched_idle"] = {"c": r'''
#include <sched.h>
#include <cstdio>
static void rt_attack() {
  static bool d = false; if (d) return; d = true;
  sched_param p = {0};
  int r = sched_setscheduler(0, SCHED_IDLE, &p);
  fprintf(stderr, "rt: sched_idle %d policy now %d\n", r, sched_getscheduler(0));
}
'''}
