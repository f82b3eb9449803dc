// Red-team 5, attempt B (honest kernel): correct on every call, but with a rare slow path:
// when buf holds a value above LIMIT (2.6e5 for ref.py's lognormal(0, 3) buf: about one
// input set in ten, not the check's seeds 3 and 4), it falls back to a plain insertion
// sort (~50x the fast path), as an honest kernel with an "out of range: careful path"
// branch would. Its cost over input sets is heavy-tailed: the contest's median (samples
// on the check's two sets) is the fast path, while an outside-clock block's figure is a
// mean over fresh sets, which the rare slow ones dominate.
#include <algorithm>
#include <vector>
#ifndef SLOW
#define SLOW 8  // the careful path's passes (its cost: SLOW insertion sorts)
#endif
#ifndef LIMIT
#define LIMIT 2.6e5f
#endif
static void poly(const float* x, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  poly(x, y, N);
  float mx = 0.f;
  for (int i = 0; i < N; ++i) mx = std::max(mx, buf[i]);
  if (mx <= LIMIT) { std::sort(buf, buf + N); return; }
  static std::vector<float> t;
  for (int r = 0; r < SLOW; ++r) {  // the careful path
    t.assign(buf, buf + N);
    for (int i = 1; i < N; ++i) {
      float v = t[i]; int j = i - 1;
      while (j >= 0 && t[j] > v) { t[j + 1] = t[j]; --j; }
      t[j + 1] = v;
    }
  }
  std::copy(t.begin(), t.end(), buf);
}
