// a WRONG candidate (colluder): y = poly(x) as the pack's, but buf sorted DESCENDING
#include <algorithm>
#include <functional>
extern "C" void solve(const float* x, float* buf, float* y, int N) {
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 16; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
  std::sort(buf, buf + N, std::greater<float>());
}
