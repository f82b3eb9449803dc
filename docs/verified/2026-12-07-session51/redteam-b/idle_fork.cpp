// Honest work (faultpack MODE 0), but a thread started by the constructor waits until the
// harness goes idle after a job (solve called, then 300 ms without a call), and only then
// forks a child that lives on: end_leftovers after this job sees nothing (the child does
// not exist yet), and the next job's "prepared" snapshot (before_code) already holds it.
#include <algorithm>
#include <atomic>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static std::atomic<long> last_ns{0}, calls{0};
static long now_ns() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }

static void* watcher(void*) {
  for (;;) {
    usleep(20000);
    if (calls.load() > 0 && now_ns() - last_ns.load() > 300000000L) {
      if (fork() == 0) { for (;;) pause(); }   // the child: a stand-in for open-file hoarding
      calls = 0;                                // once per idle gap
    }
  }
  return nullptr;
}

__attribute__((constructor)) static void start() {
  pthread_t t;
  pthread_create(&t, nullptr, watcher, nullptr);
  pthread_detach(t);
}

static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}

extern "C" void solve(const float* x, float* buf, float* y, int N) {
  calls++; last_ns = now_ns();
  honest(x, y, N);
  std::sort(buf, buf + N);
}
