// honest: y = ((x * 1e-30) * 1e-10) * 1e40, the middle value subnormal (needs gradual underflow)
extern "C" void solve(const float* x, float* y, int N) {
  volatile float a = 1e-30f, b = 1e-10f, c = 1e30f, d = 1e10f;
  for (int i = 0; i < N; ++i) y[i] = ((x[i] * a) * b) * c * d;
}
