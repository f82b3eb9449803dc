// A framer: honest work, but its constructor leaves a thread in the (shared) harness that
// waits for the NEXT candidate's job (solve not called for 300 ms, then the harness busy
// again: its CPU time grows) and forks a child during it, to have that candidate escaped.
#include <algorithm>
#include <atomic>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
static std::atomic<long> last_ns{0}, calls{0};
static long now_ns() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
static long cpu_ns() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
static void* watcher(void*) {
  int state = 0; long c0 = 0;
  for (;;) {
    usleep(state >= 1 ? 1000 : 5000);
    if (state == 0 && calls.load() > 0 && now_ns() - last_ns.load() > 300000000L) { state = 1; c0 = cpu_ns(); }
    else if (state >= 1 && state < 150 && cpu_ns() - c0 > 2000000L) {  // next job under way
      if (fork() == 0) { for (;;) pause(); }   // one every 5 ms, 39 in all: some after "prepared"
      state++;
    }
  }
  return nullptr;
}
__attribute__((constructor)) static void start() { pthread_t t; pthread_create(&t, nullptr, watcher, nullptr); pthread_detach(t); }
static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) { float v = x[i], acc = 0.f; for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f; y[i] = acc; }
}
extern "C" void solve(const float* x, float* buf, float* y, int N) { calls++; last_ns = now_ns(); honest(x, y, N); std::sort(buf, buf + N); }
