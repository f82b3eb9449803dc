// Red-team trial of cc49e5a (session 59's untimed call before each contest turn's sample).
// MODE 20: the first call after a gap (> GAP_US: a turn's wait; the untimed call) does no work
// and starts a thread that spins on the output y; once the harness has loaded the next sample's
// inputs (y NaN-poisoned last) it computes them into private arrays during the cache flush and
// the harness's own overhead before the timed call, which waits for it, copies the result, and
// joins the thread (nothing left behind).
// MODE 21: MODE 20, and the untimed call also burns SPIN_US of CPU (free, untimed) first.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
#include <sched.h>
#include "replay_common.h"

#ifndef GAP_US
#define GAP_US 1000
#endif
#ifndef SPIN_US
#define SPIN_US 2000
#endif

static long now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

static std::atomic<int> state{0};  // 0 none, 1 watching, 2 computing, 3 done, 4 gave up
static std::vector<float> sy, sb, py, pb;
static std::thread th;
static long last_ret = 0;
static std::atomic<bool> stop{false};
#ifndef TMO_US
#define TMO_US 20000
#endif

static int main_cpu = -1;
static void watcher(const float* x, float* buf, float* y, int N) {
#if PIN
  if (main_cpu >= 0) {
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(main_cpu ^ 1, &cs);
    sched_setaffinity(0, sizeof cs, &cs);
  }
#endif
  long t0 = now_us();
#if MODE == 22 || MODE == 25  // earliest start: x's and buf's last elements changed (loaded in order x, buf)
  float lx = ((volatile const float*)x)[N - 1], lb = ((volatile float*)buf)[N - 1];
  bool ydone = false;
  sy.resize(N);
  while (now_us() - t0 < TMO_US && !stop.load()) {
#if YIELD
    sched_yield();
#endif
    if (!ydone && ((volatile const float*)x)[N - 1] != lx) {
      state = 2;
      for (int i = 0; i < N; ++i) {
        float v = x[i], acc = 0.f;
        for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
        sy[i] = acc;
      }
      ydone = true;
    }
    if (ydone && ((volatile float*)buf)[N - 1] != lb) {
      sb.assign(buf, buf + N);
      std::sort(sb.begin(), sb.end());
      state = 3;
      return;
    }
#ifndef GIVEUP
#define GIVEUP 1
#endif
#if GIVEUP  // x unchanged once y is poisoned (the same set again): the timed call works
    if (!ydone && std::isnan(((volatile float*)y)[0])) {
      state = 4;
      return;
    }
#endif
#if SAME
    if (!ydone && std::isnan(((volatile float*)y)[0])) {  // the same set again: no change seen
      state = 5;
      return;
    }
#endif
  }
  state = 4;
  return;
#endif
  while (now_us() - t0 < 20000) {
    if (std::isnan(((volatile float*)y)[0])) {
      state = 2;
      sb.assign(buf, buf + N);
      sy.resize(N);
      work(x, sb.data(), sy.data(), N);
      state = 3;
      return;
    }
  }
  state = 4;
}

#if MODE == 25
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  if (th.joinable()) {
    int s0 = state.load();
    if (s0 == 1) stop = true;  // nothing loaded since: compute here
    while (state.load() == 1 || state.load() == 2) {
    }
    int s = state.load();
    th.join();
    stop = false;
    if (s == 3) {
      std::memcpy(y, sy.data(), N * sizeof(float));
      std::memcpy(buf, sb.data(), N * sizeof(float));
    } else if (s == 5) {
      std::memcpy(y, py.data(), N * sizeof(float));
      std::memcpy(buf, pb.data(), N * sizeof(float));
    } else {
      work(x, buf, y, N);
    }
  } else {
    work(x, buf, y, N);
  }
  py.assign(y, y + N);
  pb.assign(buf, buf + N);
  state = 1;
  th = std::thread(watcher, x, buf, y, N);
}
#else
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  long t = now_us();
  if (state.load() != 0) {  // a timed call after our untimed one
#ifndef SPINWAIT
#define SPINWAIT 1
#endif
#if SPINWAIT
    while (state.load() == 1 || state.load() == 2) {
    }
#endif
    int s = state.load();
    th.join();
    state = 0;
    if (s == 3) {
      std::memcpy(y, sy.data(), N * sizeof(float));
      std::memcpy(buf, sb.data(), N * sizeof(float));
    } else if (s == 5) {  // same inputs as the call before: its outputs
      std::memcpy(y, py.data(), N * sizeof(float));
      std::memcpy(buf, pb.data(), N * sizeof(float));
    } else {
      work(x, buf, y, N);
    }
    last_ret = now_us();
    return;
  }
#if MODE == 23 || MODE == 24
  if (last_ret && t - last_ret > GAP_US && !std::isnan(y[0])) {  // untimed: honest + free extra
#if MODE == 23
    while (now_us() - t < SPIN_US) {
    }
#else
    static std::vector<char> junk(64 << 20);
    for (size_t i = 0; i < junk.size(); i += 64) junk[i] = (char)i;
#endif
  }
  work(x, buf, y, N);
  last_ret = now_us();
  return;
#endif
  if (last_ret && t - last_ret > GAP_US && !std::isnan(y[0])) {  // outputs not poisoned: untimed  // the untimed call: no work, a watcher instead
#if MODE == 21
    while (now_us() - t < SPIN_US) {
    }
#endif
    py.assign(y, y + N);
    pb.assign(buf, buf + N);
    main_cpu = sched_getcpu();
    state = 1;
    th = std::thread(watcher, x, buf, y, N);
    last_ret = now_us();
    return;
  }
  work(x, buf, y, N);
  last_ret = now_us();
}
#endif
