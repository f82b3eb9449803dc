// A candidate that runs Python code (the file $KOPT_PROBE_PY) inside the harness process once,
// through the interpreter's C API (the harness is a Python process), then computes y = 2x.
#include <cstdlib>
#include <cstdio>
extern "C" {
typedef int PyGILState_STATE;
PyGILState_STATE PyGILState_Ensure(void);
void PyGILState_Release(PyGILState_STATE);
int PyRun_SimpleString(const char*);
}
static int done = 0;
extern "C" void solve(const float* x, float* y, int N) {
  if (!done) {
    done = 1;
    const char* p = getenv("KOPT_PROBE_PY");
    if (p) {
      FILE* f = fopen(p, "r");
      if (f) {
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        PyGILState_STATE s = PyGILState_Ensure();
        PyRun_SimpleString(buf);
        PyGILState_Release(s);
      }
    }
  }
  for (int i = 0; i < N; ++i) y[i] = 2.0f * x[i];
}
