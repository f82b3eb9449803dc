// Red-team 53: an honest kernel (the fault pack's MODE 0) that, on its first call, has Python
// look at the harness's current job: in a contest WITH rivals it aborts (`crashed`, judged
// alone); in a contest ALONE (a solo contest of SideBySide._judged_alone) it scales the
// harness's time.perf_counter_ns by 10/SCALE10 (a patched clock alone is left to the closing's
// outside clock); in an outside-clock block it stays honest.
#include <algorithm>
#include <string>
#ifndef SCALE10
#define SCALE10 1000
#endif
#define STR2(x) #x
#define STR(x) STR2(x)
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char*);

static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}

static void hook() {
  static bool done = false;
  if (done) return;
  done = true;
  int g = PyGILState_Ensure();
  PyRun_SimpleString(
      "import gc, os, time as _t\n"
      "_mode = 'job'\n"
      "for _o in gc.get_objects():\n"
      "    if type(_o) is dict and 'job_key' in _o and 'dims' in _o:\n"
      "        if 'clock_calls' in _o: _mode = 'clock'; break\n"
      "        if 'rounds' in _o and 'turns' in _o:\n"
      "            _mode = 'alone' if len(_o.get('contest') or []) == 1 else 'company'; break\n"
      "if _mode == 'company':\n"
      "    os.abort()\n"
      "if _mode == 'alone' and not hasattr(_t, '_real_ns'):\n"
      "    _t._real_ns = _t.perf_counter_ns\n"
      "    _t._base_ns = _t._real_ns()\n"
      "    _t.perf_counter_ns = lambda: _t._base_ns + (_t._real_ns() - _t._base_ns) * 10 // " STR(SCALE10) "\n");
  PyGILState_Release(g);
}

extern "C" void solve(const float* x, float* buf, float* y, int N) {
  hook();
  honest(x, y, N);
  std::sort(buf, buf + N);
}
