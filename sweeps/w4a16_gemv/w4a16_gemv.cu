// w4a16_gemv.cu -- int4-weight x fp16-activation GEMV / skinny GEMM of weight-only quantized
// decoding (GPTQ/AWQ-style symmetric int4, group size 128), fp32 accumulation:
//   y[m][n] = sum_k x[m][k] * (q[n][k] - 8) * scales[n][k / 128]
// qweight is int32 [N, K/8]: word j of row n packs k = 8j .. 8j+7, nibble e (bits 4e..4e+3)
// holding q[n][8j + e] in [0, 15]; scales is fp16 [N, K/128]; x is fp16 [M, K]; y is fp16
// [M, N] (y = x @ W^T, nn.Linear's convention). Reading the weight is the floor: N * K / 2
// bytes (8 MB for 4096 x 4096).
//
// Baseline (no defines): one block of THREADS threads per output channel n; a strided loop
// over the row's int32 words (4-byte loads), each word's 8 nibbles converted with integer
// shifts and int-to-float conversions, dotted with 8 scalar fp16 loads of x per activation row,
// the group's scale applied per word; M fp32 accumulators per thread; a shared-memory tree
// reduction per activation row (one __syncthreads() per level); thread 0 writes y.
//
// Tuning knobs (all -D defines, each with a default below):
//   THREADS     threads per block (launch config), a power of two in [64, 512].
//   USE_SHUFFLE compute.warp_reduction and latency.warp_shuffle_sync (the same edit): warp
//               butterflies, one shared slot per warp and value, two barriers per reduction.
//   RPB         compute.thread_coarsening: RPB output channels per block, so each x value
//               loaded serves RPB rows (for M = 16, x traffic through L1/L2 dominates the
//               8 MB of weights: N blocks each read all of x).
//   VEC         memory.vectorized_access: VEC = 4 words (32 weights) per 16-byte load, x in
//               16-byte packs of 8 fp16.
//   FAST_DQ     compute.fast_math: the int4 -> fp16 "magic number" conversion (FasterTransformer,
//               Marlin): nibble pairs OR-ed into the mantissa of 1024.0 (0x6400) and 1032.0
//               subtracted in half2 give q - 8 exactly, no integer-to-float instruction.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#ifndef THREADS
#define THREADS 128
#endif
#ifndef USE_SHUFFLE
#define USE_SHUFFLE 0
#endif
#ifndef RPB
#define RPB 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef FAST_DQ
#define FAST_DQ 0
#endif

#define GROUP 128  // weights per scale
#define MAX_ACC 32  // RPB * M fp32 accumulators per thread

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 64 || THREADS > 512
#error "THREADS must be a power of two in [64, 512]"
#endif
#if VEC != 1 && VEC != 4
#error "VEC must be 1 or 4"
#endif
#if RPB < 1 || RPB > 8
#error "RPB must be in [1, 8]"
#endif

// VW int32 words moved as one access (VW = 4: 16 bytes).
template <int VW>
struct alignas(4 * VW) Words {
    uint32_t w[VW];
};

// The 8 weights of word w as q - 8, in fp32.
__device__ __forceinline__ void dequant8(uint32_t w, float (&q)[8]) {
#if FAST_DQ
    // nibbles e and e + 1 become the two halves of a half2, each OR-ed into the mantissa of
    // 1024.0 (0x6400): 1024 + q exactly; subtracting 1032.0 (0x6408) leaves q - 8
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
        const uint32_t lo = (w >> (4 * e)) & 0xFu, hi = (w >> (4 * e + 4)) & 0xFu;
        const uint32_t bits = (lo | (hi << 16)) | 0x64006400u;  // 1024 + q in each half
        const __half2 v = __hsub2(*reinterpret_cast<const __half2*>(&bits),
                                  __half2half2(__ushort_as_half((unsigned short)0x6408u)));
        const float2 f = __half22float2(v);  // q - 8, exact
        q[e] = f.x;
        q[e + 1] = f.y;
    }
#else
#pragma unroll
    for (int e = 0; e < 8; ++e) q[e] = (float)((int)((w >> (4 * e)) & 0xFu) - 8);
#endif
}

// Sums each of the N values over the block; thread 0 gets the totals in v. Ends with a
// barrier, so the shared buffers can be reused.
template <int N>
__device__ __forceinline__ void block_sum(float (&v)[N]) {
#if USE_SHUFFLE
    __shared__ float part[THREADS / 32][N];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int j = 0; j < N; ++j) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v[j] += __shfl_xor_sync(0xffffffffu, v[j], off);
        if (lane == 0) part[warp][j] = v[j];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
            float s = lane < THREADS / 32 ? part[lane][j] : 0.0f;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            v[j] = s;
        }
    }
    __syncthreads();
#else
    __shared__ float sm[THREADS];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        sm[threadIdx.x] = v[j];
        __syncthreads();
        for (int s = THREADS / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0) v[j] = sm[0];
        __syncthreads();
    }
#endif
}

// The 8 fp16 activations x[k0 .. k0+7] in fp32.
__device__ __forceinline__ void load_x8(const __half* __restrict__ x, float (&f)[8]) {
#if VEC == 4
    const uint4 u = *reinterpret_cast<const uint4*>(x);
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 p = __half22float2(h[e]);
        f[2 * e] = p.x;
        f[2 * e + 1] = p.y;
    }
#else
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = __half2float(x[e]);
#endif
}

// NM activation rows; blocks take RPB consecutive output channels.
template <int NM>
__global__ void __launch_bounds__(THREADS)
    w4a16_kernel(const uint32_t* __restrict__ qw, const __half* __restrict__ scales,
                 const __half* __restrict__ x, __half* __restrict__ y, int N, int K) {
    const int nw = K / 8, ng = K / GROUP;  // words and groups per row
    const long long r0 = (long long)blockIdx.x * RPB;
    float acc[RPB * NM];
#pragma unroll
    for (int j = 0; j < RPB * NM; ++j) acc[j] = 0.0f;
    for (int i = threadIdx.x; i < nw / VEC; i += THREADS) {
        const int j0 = i * VEC;  // first word; VEC words never straddle a group (16 words)
        Words<VEC> w[RPB];
        float sc[RPB];
#pragma unroll
        for (int r = 0; r < RPB; ++r) {
            const long long row = r0 + r < N ? r0 + r : N - 1;  // past the end: never stored
            w[r] = reinterpret_cast<const Words<VEC>*>(qw + row * nw)[i];
            sc[r] = __half2float(scales[row * ng + (j0 * 8) / GROUP]);
        }
#pragma unroll
        for (int c = 0; c < VEC; ++c) {
            float q[RPB][8];
#pragma unroll
            for (int r = 0; r < RPB; ++r) dequant8(w[r].w[c], q[r]);
#pragma unroll
            for (int m = 0; m < NM; ++m) {
                float xf[8];
                load_x8(x + (long long)m * K + (j0 + c) * 8, xf);
#pragma unroll
                for (int r = 0; r < RPB; ++r) {
                    float d = 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; ++e) d += q[r][e] * xf[e];
                    acc[r * NM + m] += sc[r] * d;
                }
            }
        }
    }
    block_sum<RPB * NM>(acc);
    if (threadIdx.x == 0) {
#pragma unroll
        for (int r = 0; r < RPB; ++r)
#pragma unroll
            for (int m = 0; m < NM; ++m)
                if (r0 + r < N) y[(long long)m * N + r0 + r] = __float2half(acc[r * NM + m]);
    }
}

template <int NM>
static void launch(const uint32_t* qw, const __half* scales, const __half* x, __half* y, int N,
                   int K) {
    if constexpr (RPB * NM > MAX_ACC) {
        return;  // more accumulators than a thread holds without spilling (restrictions)
    } else {
        w4a16_kernel<NM><<<(unsigned)((N + RPB - 1) / RPB), THREADS, 0, 0>>>(qw, scales, x, y,
                                                                             N, K);
    }
}

extern "C" void solve(const int32_t* qweight, const half* scales, const half* x, half* y, int M,
                      int N, int K) {
    if (N < 1 || K < GROUP || K % GROUP != 0) return;  // outside the sweep's sizes
    const uint32_t* qw = reinterpret_cast<const uint32_t*>(qweight);
    switch (M) {  // activation rows handled at once (the sweep's M: restrictions)
        case 1: launch<1>(qw, scales, x, y, N, K); break;
        case 4: launch<4>(qw, scales, x, y, N, K); break;
        case 16: launch<16>(qw, scales, x, y, N, K); break;
        default: break;
    }
}
