// Honest work, but its constructor forks a child that lives through the whole job (where a
// red-team helper held the host's open files) and exits on its own once solve has not been
// called for 3 ms: gone before the harness's answer reaches end_leftovers.
#include <algorithm>
#include <atomic>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static std::atomic<long>* shared;  // [0]: last solve call (ns), [1]: calls, [2]: child's polls
static long now_ns() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
__attribute__((constructor)) static void leave() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  shared = static_cast<std::atomic<long>*>(p);
  shared[0] = now_ns();
  if (fork() == 0) {
    for (;;) {
      usleep(500); shared[2]++;
      if (shared[1].load() > 0 && now_ns() - shared[0].load() > 3000000L) _exit(0);
      if (now_ns() - shared[0].load() > 20000000000L) _exit(0);
    }
  }
}
static void honest(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) { float v = x[i], acc = 0.f; for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f; y[i] = acc; }
}
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  if (shared) { shared[1]++; shared[0] = now_ns(); }
  honest(x, y, N); std::sort(buf, buf + N);
}
