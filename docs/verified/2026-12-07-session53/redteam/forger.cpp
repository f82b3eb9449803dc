// Red-team 53: the fault pack's honest kernel that leaves a thread in its harness. Once no
// call of its own came for IDLE_MS (its job is over), the thread has Python send the
// sandbox forged progress messages through the harness's own `progress`, every PERIOD_MS:
// FIRST=1 {"stage": "prepared", "first": True} (the harness's once-per-process message),
// FIRST=0 {"stage": "prepared"}; with CHILD=1 it forks a child first (sleeping) so that the
// forged "first" comes while a process of its own is in the sandbox. SPIN=1: the thread
// spins instead (no message), beside the next candidate's job.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <unistd.h>
#ifndef FIRST
#define FIRST 1
#endif
#ifndef SPIN
#define SPIN 0
#endif
#ifndef CHILD
#define CHILD 0
#endif
#ifndef IDLE_MS
#define IDLE_MS 300
#endif
#ifndef PERIOD_MS
#define PERIOD_MS 20
#endif
#if FIRST
#define MSG "{'stage': 'prepared', 'first': True}"
#else
#define MSG "{'stage': 'prepared'}"
#endif
extern "C" int PyGILState_Ensure(void);
extern "C" void PyGILState_Release(int);
extern "C" int PyRun_SimpleString(const char*);

static std::atomic<long long> last_ns{0};
static long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void forge_loop() {
  bool forked = false;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(PERIOD_MS));
    if (now_ns() - last_ns.load() < IDLE_MS * 1000000LL) continue;
    if (SPIN) { volatile unsigned long z = 0; for (;;) ++z; }
    if (CHILD && !forked) {
      forked = true;
      if (fork() == 0) { for (;;) pause(); }
    }
    int g = PyGILState_Ensure();
    PyRun_SimpleString(
        "import gc\n"
        "for _o in gc.get_objects():\n"
        "    if type(_o).__name__ == 'Harness':\n"
        "        _o.progress(" MSG ")\n");
    PyGILState_Release(g);
  }
}

static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}

extern "C" void solve(const float* x, float* buf, float* y, int N) {
  static bool started = false;
  last_ns = now_ns();
  if (!started) {
    started = true;
    std::thread(forge_loop).detach();
  }
  honest(x, y, N);
  std::sort(buf, buf + N);
  last_ns = now_ns();
}
