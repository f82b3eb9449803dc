// Red-team trial of cc49e5a (MODE 27): the untimed call of a contest turn (the first call after
// a gap > GAP_US whose outputs are not poisoned: buffer set 0 holds the last sample's verified
// outputs; a witness turn's call has them poisoned) does no work and starts a detached thread
// that spins on the buffers: once x's last element changed (the harness loads x first) it
// computes y from x, once buf's last element changed it sorts a copy of buf: during the rest of
// the load, the cache flush and the harness's overhead before the timed call. The timed call
// waits up to WAIT_US for it and copies its results; else (the same set again, the thread
// late) it stops it and does the honest work. Every other call is honest.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
#include "replay_common.h"

#ifndef GAP_US
#define GAP_US 1000
#endif
#ifndef WAIT_US
#define WAIT_US 30
#endif
#ifndef IDLE_US
#define IDLE_US 10
#endif
#ifndef TMO_US
#define TMO_US 5000
#endif

static long now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

struct Ctx {
  std::atomic<int> state{1};  // 1 watching, 2 computing, 3 done, 4 gave up
  std::atomic<bool> stop{false};
  std::atomic<bool> alive{false};
  std::vector<float> y, b;
};

static void watcher(std::shared_ptr<Ctx> c, const float* x, float* buf, float* y, int N,
                    float lx, float lb) {
  c->alive = true;
  long t0 = now_us();  // lx, lb: x's and buf's last elements as the untimed call found them
  bool ydone = false;
  c->y.resize(N);
  while (now_us() - t0 < TMO_US && !c->stop.load()) {
    if (!ydone && ((volatile const float*)x)[N - 1] != lx) {
      c->state = 2;
      for (int i = 0; i < N; ++i) {
        float v = x[i], acc = 0.f;
        for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
        c->y[i] = acc;
      }
      ydone = true;
    }
    if (ydone && ((volatile float*)buf)[N - 1] != lb) {
      c->b.assign(buf, buf + N);
      std::sort(c->b.begin(), c->b.end());
      c->state = 3;
      return;
    }
    if (!ydone && std::isnan(((volatile float*)y)[0])) break;  // x unchanged: the same set
  }
  c->state = 4;
}

static std::shared_ptr<Ctx> cur;
static long last_ret = 0;

#if MODE == 28  // for a harness without the untimed call: a watcher started after every call
static void consume(const float* x, float* buf, float* y, int N) {
  long t = now_us();
  std::shared_ptr<Ctx> c = cur;
  cur.reset();
  if (c) {
    for (int st; (st = c->state.load()) == 1 || st == 2;) {
      long w = now_us() - t;
      if (w > WAIT_US || (st == 1 && w > IDLE_US)) break;
    }
    if (c->state.load() == 3) {
      std::memcpy(y, c->y.data(), N * sizeof(float));
      std::memcpy(buf, c->b.data(), N * sizeof(float));
      return;
    }
    c->stop = true;
  }
  work(x, buf, y, N);
}
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  consume(x, buf, y, N);
  cur = std::make_shared<Ctx>();
  std::thread(watcher, cur, x, buf, y, N, x[N - 1], buf[N - 1]).detach();
  while (!cur->alive.load()) {
  }
}
#else
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  long t = now_us();
  if (cur) {  // the timed call after our untimed one
    std::shared_ptr<Ctx> c = cur;
    cur.reset();
    for (int st; (st = c->state.load()) == 1 || st == 2;) {  // computing: up to WAIT_US
      long w = now_us() - t;
      if (w > WAIT_US || (st == 1 && w > IDLE_US)) break;
    }
    if (c->state.load() == 3) {
      std::memcpy(y, c->y.data(), N * sizeof(float));
      std::memcpy(buf, c->b.data(), N * sizeof(float));
    } else {
      c->stop = true;
      work(x, buf, y, N);
    }
    last_ret = now_us();
    return;
  }
  if (last_ret && t - last_ret > GAP_US && !std::isnan(y[0])) {  // the untimed call
    cur = std::make_shared<Ctx>();
    std::thread(watcher, cur, x, buf, y, N, x[N - 1], buf[N - 1]).detach();
#if ALIVE
    while (!cur->alive.load()) {  // untimed: until the thread runs
    }
#endif
    last_ret = now_us();
    return;
  }
  work(x, buf, y, N);
  last_ret = now_us();
}
#endif
