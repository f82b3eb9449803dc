// honest OpenMP kernel: y = poly(x), 64 Horner steps, parallel over elements
extern "C" void solve(const float* x, float* y, int N) {
  #pragma omp parallel for schedule(static) num_threads(3)
  for (int i = 0; i < N; ++i) {
    float v = x[i], acc = 0.f;
    for (int k = 0; k < 64; ++k) acc = acc * v + 0.5f;
    y[i] = acc;
  }
}
