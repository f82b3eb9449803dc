// ln_v2.cu -- layer norm over the last dimension of a float32 [ROWS, COLS] matrix:
//   y[r, c] = (x[r, c] - mean_r) * rsqrt(var_r + eps) * weight[c] + bias[c]
// (var_r the biased variance, as torch.nn.functional.layer_norm).
//
// Version 2 = version 1 with the shared-memory tree reductions replaced by warp shuffles
// (claimed: compute.warp_reduction + latency.warp_shuffle_sync, one edit seen from two axes;
// notes/v2.md says why). Each warp reduces its 32 partial sums with a __shfl_xor_sync
// butterfly (every lane gets the warp's sum), lane 0 writes it to one shared slot per warp,
// ONE __syncthreads(), then every warp reduces the THREADS/32 slots with a second butterfly:
// one barrier per statistic instead of log2(THREADS) + 2. The two statistics use separate
// slot arrays, so no barrier is needed before a slot array is written. A butterfly leaves
// the bit-identical sum in every lane (each step adds a + b in one lane, b + a in its
// partner), so every thread of the block uses the same mean and rstd. The memory traffic is
// version 1's, unchanged: three strided scalar passes over the row, the same pointer types
// (no __restrict__: that is memory.cache_policy, not claimed). Any ROWS >= 1, COLS >= 1.
//
// Launch config (a -D define): THREADS, a power of two in [32, 1024].
#include <cuda_runtime.h>

#ifndef THREADS
#define THREADS 256
#endif
#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif
#define WARPS (THREADS / 32)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The sum of v over the block, returned to every thread, with one barrier. slots (WARPS
// floats) must not be written again before the block's next barrier.
__device__ __forceinline__ float block_sum(float v, float* slots) {
    v = warp_sum(v);
#if WARPS > 1
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    v = warp_sum(lane < WARPS ? slots[lane] : 0.0f);
#endif
    return v;
}

__global__ void __launch_bounds__(THREADS)
ln_v2_kernel(const float* x, const float* weight, const float* bias, float* y, int COLS,
             float eps) {
    __shared__ float sum_slots[WARPS], sq_slots[WARPS];
    const size_t row = blockIdx.x;
    const float* xr = x + row * (size_t)COLS;
    float* yr = y + row * (size_t)COLS;

    float s = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += THREADS) s += xr[c];
    const float mean = block_sum(s, sum_slots) / (float)COLS;

    float q = 0.0f;
    for (int c = threadIdx.x; c < COLS; c += THREADS) {
        const float d = xr[c] - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(block_sum(q, sq_slots) / (float)COLS + eps);

    for (int c = threadIdx.x; c < COLS; c += THREADS)
        yr[c] = (xr[c] - mean) * rstd * weight[c] + bias[c];
}

extern "C" void solve(const float* x, const float* weight, const float* bias, float* y,
                      int ROWS, int COLS, float eps) {
    if (ROWS <= 0 || COLS <= 0) return;
    ln_v2_kernel<<<ROWS, THREADS, 0, 0>>>(x, weight, bias, y, COLS, eps);
}
