// ln_v3.cu -- layer norm over the last dimension of a float32 [ROWS, COLS] matrix:
//   y[r, c] = (x[r, c] - mean_r) * rsqrt(var_r + eps) * weight[c] + bias[c]
// (var_r the biased variance, as torch.nn.functional.layer_norm).
//
// Version 3 = version 2 (warp-shuffle reductions, one barrier per statistic) with the
// memory side rewritten (claimed: memory.vectorized_access; notes/v3.md says why): the row
// is read from global memory ONCE, as float4s (16-byte LDG.128), into registers; the mean,
// the variance (two-pass, from the registers, so as exact as versions 1 and 2) and the
// output are computed from those registers, and y is written as float4s (STG.128). Thread t
// holds the float4s t, t + THREADS, ..., t + (VPT - 1) * THREADS of its row (coalesced:
// consecutive threads, consecutive 16-byte chunks); a slot past the row's end is never
// loaded, adds nothing to either sum and is never stored. weight and bias are loaded as
// float4s before the first store (the pointers are not __restrict__: memory.cache_policy
// is not claimed, and the loads must not wait behind the stores).
//
// VPT (float4s per thread) is a template parameter: solve() picks the smallest of 1, 2, 4
// and 8 that covers the row (COLS <= 4 * THREADS * VPT_MAX). Rows that do not fit, COLS not a
// multiple of 4 (a row would not start 16-byte aligned) or a pointer that is not 16-byte
// aligned take the scalar path: version 2's kernel, unchanged. Any ROWS >= 1, COLS >= 1.
//
// Launch config (a -D define): THREADS, a power of two in [32, 1024].
#include <cuda_runtime.h>
#include <cstdint>

#ifndef THREADS
#define THREADS 256
#endif
#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif
#define WARPS (THREADS / 32)
// the register-resident row: at most 8 float4s (32 floats) per thread, and no more than the
// 64 registers a thread has at 1024 threads per block allow
#define VPT_MAX (THREADS >= 1024 ? 2 : THREADS >= 512 ? 4 : 8)

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

// The row in registers, float4 loads and stores. n4 = COLS / 4 <= VPT * THREADS.
template <int VPT>
__global__ void __launch_bounds__(THREADS)
ln_v3_vec_kernel(const float4* x, const float4* weight, const float4* bias, float4* y,
                 int COLS, float eps) {
    __shared__ float sum_slots[WARPS], sq_slots[WARPS];
    const int n4 = COLS >> 2;
    const size_t row = blockIdx.x;
    const float4* xr = x + row * (size_t)n4;
    float4* yr = y + row * (size_t)n4;

    float4 v[VPT];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int c = i * THREADS + threadIdx.x;
        if (c < n4) {
            v[i] = xr[c];
            s += (v[i].x + v[i].y) + (v[i].z + v[i].w);
        }
    }
    const float mean = block_sum(s, sum_slots) / (float)COLS;

    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int c = i * THREADS + threadIdx.x;
        if (c < n4) {
            const float dx = v[i].x - mean, dy = v[i].y - mean, dz = v[i].z - mean,
                        dw = v[i].w - mean;
            q += (dx * dx + dy * dy) + (dz * dz + dw * dw);
        }
    }
    const float rstd = rsqrtf(block_sum(q, sq_slots) / (float)COLS + eps);

    float4 w[VPT], b[VPT];
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int c = i * THREADS + threadIdx.x;
        if (c < n4) {
            w[i] = weight[c];
            b[i] = bias[c];
        }
    }
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int c = i * THREADS + threadIdx.x;
        if (c < n4)
            yr[c] = make_float4((v[i].x - mean) * rstd * w[i].x + b[i].x,
                                (v[i].y - mean) * rstd * w[i].y + b[i].y,
                                (v[i].z - mean) * rstd * w[i].z + b[i].z,
                                (v[i].w - mean) * rstd * w[i].w + b[i].w);
    }
}

// The scalar path: version 2's kernel, unchanged.
__global__ void __launch_bounds__(THREADS)
ln_v3_scalar_kernel(const float* x, const float* weight, const float* bias, float* y,
                    int COLS, float eps) {
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

template <int VPT>
static void launch_vec(const float* x, const float* weight, const float* bias, float* y,
                       int ROWS, int COLS, float eps) {
    ln_v3_vec_kernel<VPT><<<ROWS, THREADS, 0, 0>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(weight),
        reinterpret_cast<const float4*>(bias), reinterpret_cast<float4*>(y), COLS, eps);
}

extern "C" void solve(const float* x, const float* weight, const float* bias, float* y,
                      int ROWS, int COLS, float eps) {
    if (ROWS <= 0 || COLS <= 0) return;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(weight)
                           | reinterpret_cast<uintptr_t>(bias) | reinterpret_cast<uintptr_t>(y);
    const int n4 = COLS / 4;
    const int per = (n4 + THREADS - 1) / THREADS;  // float4s per thread
    if (COLS % 4 != 0 || addr % 16 != 0 || per > VPT_MAX) {
        ln_v3_scalar_kernel<<<ROWS, THREADS, 0, 0>>>(x, weight, bias, y, COLS, eps);
    } else if (per <= 1) {
        launch_vec<1>(x, weight, bias, y, ROWS, COLS, eps);
    } else if (per <= 2) {
        launch_vec<2>(x, weight, bias, y, ROWS, COLS, eps);
    } else if (per <= 4) {
#if VPT_MAX >= 4
        launch_vec<4>(x, weight, bias, y, ROWS, COLS, eps);
#endif
    } else {
#if VPT_MAX >= 8
        launch_vec<8>(x, weight, bias, y, ROWS, COLS, eps);
#endif
    }
}
