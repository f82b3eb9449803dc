// Pre-included (nvcc --pre-include) into every CUDA build by kopt, so that the
// harness reads errors from the same CUDA runtime instance that solve() used
// (a static cudart is private to each shared object).
#pragma once
#include <cuda_runtime.h>
extern "C" __attribute__((visibility("default"))) int kopt_last_error(void) {
  return (int)cudaGetLastError();
}
extern "C" __attribute__((visibility("default"))) int kopt_synchronize(void) {
  return (int)cudaDeviceSynchronize();
}
extern "C" __attribute__((visibility("default"))) const char* kopt_error_string(int e) {
  return cudaGetErrorString((cudaError_t)e);
}
