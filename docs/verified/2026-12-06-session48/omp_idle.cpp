// A plain OpenMP loop (num_threads(2), 2^21 floats) timed after ARG1 us of sleep (ARG2: one untimed call first) then a 64 MB write: g++ -O2 -fopenmp omp_idle.cpp -o t; OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive ./t 20000 0
#include <omp.h>
#include <chrono>
#include <thread>
#include <vector>
#include <cstdio>
#include <algorithm>
int main(int argc, char** argv) {
  int N = 1 << 21; int idle_us = atoi(argv[1]); int warm = atoi(argv[2]);
  std::vector<float> x(N, 1.f), y(N);
  std::vector<char> fl(64 << 20);
  auto call = [&]{
#pragma omp parallel for num_threads(2) schedule(static)
    for (int i = 0; i < N; ++i) y[i] = 2.f * x[i] + 1.f;
  };
  std::vector<double> ts;
  for (int s = 0; s < 40; ++s) {
    if (idle_us) std::this_thread::sleep_for(std::chrono::microseconds(idle_us));
    if (warm) call();
    for (size_t i = 0; i < fl.size(); i += 64) fl[i]++;
    auto t0 = std::chrono::steady_clock::now(); call();
    ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  printf("idle %d us warm %d: median %.3f ms\n", idle_us, warm, ts[ts.size()/2]);
}
