// A WRONG candidate (writes zeros) that, on every call, sets a Python exception naming
// ENFILE through Python's C API (found with dlsym in the harness process), so the ctypes
// call returns "with an exception set": the harness's job ends in `error` whose text holds
// "Too many open files in system" (the chained OSError in the traceback).
#include <dlfcn.h>
#include <algorithm>
typedef int (*ensure_t)();
typedef void (*release_t)(int);
typedef void (*seterr_t)(void*, const char*);
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  for (int i = 0; i < N; ++i) y[i] = 0.f;  // wrong
  std::sort(buf, buf + N);
#ifdef NOEXC
  return;
#endif
  auto ens = (ensure_t)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
  auto rel = (release_t)dlsym(RTLD_DEFAULT, "PyGILState_Release");
  auto set = (seterr_t)dlsym(RTLD_DEFAULT, "PyErr_SetString");
  void** exc = (void**)dlsym(RTLD_DEFAULT, "PyExc_OSError");
  if (!ens || !rel || !set || !exc) return;
  int g = ens();
  set(*exc, "[Errno 23] Too many open files in system");
  rel(g);
}
