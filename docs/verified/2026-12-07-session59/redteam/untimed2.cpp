// Red-team trial of cc49e5a: MODE 22 revised (validated). The untimed call of a turn (the
// first call after a gap whose outputs are not poisoned: buffer set 0 holds the last sample's
// verified outputs) does no work, keeps those outputs and starts a thread that spins on the
// buffers: once x's last element changed (the harness loads x first) it copies x and computes
// y from the copy; once y is NaN-poisoned (the load's last step) it copies buf and sorts the
// copy, all during the load's rest, the cache flush and the harness's overhead before the
// timed call. The timed call waits for it, checks the copies against its real inputs (a stale
// read falls back to the honest work) and copies the results out; the same input set as the
// last sample: that sample's outputs. No thread outlives the timed call. MODE 26: the same
// thread started after every call instead (for a harness without the untimed call).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
#include "replay_common.h"

#ifndef EARLY
#define EARLY 1
#endif
#ifndef GAP_US
#define GAP_US 1000
#endif
#ifndef TMO_US
#define TMO_US 20000
#endif

static long now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now().time_since_epoch()).count();
}

static std::atomic<int> state{0};  // 0 none, 1 watching, 2 computing, 3 done, 4 gave up
static std::atomic<bool> stop{false};
static std::vector<float> wx, wb, sy, sb;      // the watcher's input copies and results
static std::vector<float> lx, lb, ly, lbs;     // the last timed call's inputs and outputs
static std::thread th;
static long last_ret = 0;

static void watcher(const float* x, float* buf, float* y, int N) {
  long t0 = now_us();
  float x0 = ((volatile const float*)x)[N - 1], b0 = ((volatile float*)buf)[N - 1];
  bool ydone = false;
  wx.resize(N); sy.resize(N); wb.resize(N);
  while (now_us() - t0 < TMO_US && !stop.load()) {
    if (!ydone && ((volatile const float*)x)[N - 1] != x0) {
      state = 2;
      std::memcpy(wx.data(), x, N * sizeof(float));
      for (int i = 0; i < N; ++i) {
        float v = wx[i], acc = 0.f;
        for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
        sy[i] = acc;
      }
      ydone = true;
    }
    if (!ydone && std::isnan(((volatile float*)y)[0])) { state = 4; return; }  // x unchanged
#if EARLY
    if (ydone && ((volatile float*)buf)[N - 1] != b0) {
#else
    if (ydone && std::isnan(((volatile float*)y)[0])) {
#endif
      std::memcpy(wb.data(), buf, N * sizeof(float));
      sb = wb;
      std::sort(sb.begin(), sb.end());
      state = 3;
      return;
    }
  }
  state = 4;
}

static void finish(const float* x, float* buf, float* y, int N) {
  // entered with buf the input; ends with the outputs written and the last-call copies kept
  int s = state.load();
  bool done = false;
  if (s == 3 && !std::memcmp(x, wx.data(), N * 4) && !std::memcmp(buf, wb.data(), N * 4)) {
    lx.assign(x, x + N); lb.assign(buf, buf + N);
    std::memcpy(y, sy.data(), N * 4);
    std::memcpy(buf, sb.data(), N * 4);
    done = true;
  } else if (lx.size() == (size_t)N && !std::memcmp(x, lx.data(), N * 4) &&
             !std::memcmp(buf, lb.data(), N * 4)) {  // the same set as the last call
    std::memcpy(y, ly.data(), N * 4);
    std::memcpy(buf, lbs.data(), N * 4);
    done = true;
  }
  if (!done) {
    lx.assign(x, x + N); lb.assign(buf, buf + N);
    work(x, buf, y, N);
  }
  ly.assign(y, y + N); lbs.assign(buf, buf + N);
}

extern "C" void solve(const float* x, float* buf, float* y, int N) {
#if MODE == 26
  if (th.joinable()) {
    if (state.load() == 1) stop = true;
    while (state.load() == 1 || state.load() == 2) {
    }
    th.join();
    stop = false;
    finish(x, buf, y, N);
  } else {
    state = 0;
    finish(x, buf, y, N);
  }
  state = 1;
  th = std::thread(watcher, x, buf, y, N);
#else
  long t = now_us();
  if (th.joinable()) {  // the timed call after our untimed one
#if SPINWAIT
    while (state.load() == 1 || state.load() == 2) {
    }
#endif
    th.join();
    finish(x, buf, y, N);
    state = 0;
    last_ret = now_us();
    return;
  }
  if (last_ret && t - last_ret > GAP_US && !std::isnan(y[0])) {  // the untimed call
    state = 1;
    th = std::thread(watcher, x, buf, y, N);
    last_ret = now_us();
    return;
  }
  state = 0;
  finish(x, buf, y, N);
  last_ret = now_us();
#endif
}
