// ln_v1.cu -- layer norm over the last dimension of a float32 [ROWS, COLS] matrix:
//   y[r, c] = (x[r, c] - mean_r) * rsqrt(var_r + eps) * weight[c] + bias[c]
// (var_r the biased variance, as torch.nn.functional.layer_norm).
//
// Version 1, the naive baseline: one block of THREADS threads per row, three strided
// (coalesced) scalar passes over the row -- (1) the sum for the mean, (2) the sum of squared
// deviations for the variance, (3) the output -- and after each of the first two a
// shared-memory tree reduction with a __syncthreads() per level: log2(THREADS) + 2 barriers
// per statistic. Any ROWS >= 1, COLS >= 1.
//
// Launch config (a -D define): THREADS, a power of two in [32, 1024].
#include <cuda_runtime.h>

#ifndef THREADS
#define THREADS 256
#endif
#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif

// The sum of v over the block, returned to every thread. sm holds THREADS floats; it may be
// reused as soon as this returns (the last barrier orders the reads of sm[0] before it).
__device__ float block_sum(float v, float* sm) {
    sm[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
        __syncthreads();
    }
    const float total = sm[0];
    __syncthreads();
    return total;
}

__global__ void __launch_bounds__(THREADS)
ln_v1_kernel(const float* x, const float* weight, const float* bias, float* y, int COLS,
             float eps) {
    __shared__ float sm[THREADS];
    const size_t row = blockIdx.x;
    const float* xr = x + row * (size_t)COLS;
    float* yr = y + row * (size_t)COLS;

    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += THREADS) s += xr[c];
    const float mean = block_sum(s, sm) / (float)COLS;

    float q = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += THREADS) {
        const float d = xr[c] - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_sum(q, sm) / (float)COLS + eps);

    for (int c = threadIdx.x; c < COLS; c += THREADS)
        yr[c] = (xr[c] - mean) * rstd * weight[c] + bias[c];
}

extern "C" void solve(const float* x, const float* weight, const float* bias, float* y,
                      int ROWS, int COLS, float eps) {
    if (ROWS <= 0 || COLS <= 0) return;
    ln_v1_kernel<<<ROWS, THREADS, 0, 0>>>(x, weight, bias, y, COLS, eps);
}
