// Honest work (fault pack MODE 0), but its library's constructor leaves a process running
// whose thread-group leader has exited (pthread_exit): /proc/PID/stat of the leader says
// "Z" with vsize 0, while its second thread runs on. SPIN=1: that thread spins (steals CPU
// from whatever runs next); SPIN=0: it sleeps.
#include <algorithm>
#include <pthread.h>
#include <unistd.h>
#include <time.h>
#ifndef SPIN
#define SPIN 0
#endif
static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}
static void* body(void*) {
  volatile unsigned long z = 0;
  for (;;) {
    if (SPIN) { for (int i = 0; i < 100000000; ++i) z += i; }
    else pause();
  }
  return nullptr;
}
__attribute__((constructor)) static void leave() {
  if (fork() == 0) {
    pthread_t t;
    for (int k = 0; k < (SPIN > 1 ? SPIN : 1); ++k)
      if (pthread_create(&t, nullptr, body, nullptr) != 0) _exit(3);
    pthread_exit(nullptr);  // the leader exits; the thread group lives on
  }
}
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  honest(x, y, N);
  std::sort(buf, buf + N);
}
