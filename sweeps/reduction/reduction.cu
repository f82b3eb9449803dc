// reduction.cu -- out[0] = sum(x[0..N)), float32 in, float32 accumulate.
// Bandwidth-bound: 4 bytes read per element, one float written.
//
// Baseline (no defines): THREADS = 256 threads per block, one element per
// thread (grid = ceil(N / THREADS)), a shared-memory tree reduction per block
// with a __syncthreads() per level, and one atomicAdd of the block's partial
// into out[0], which solve() zeroes on the stream first (kopt poisons
// outputs with NaN before each call).
//
// Tuning knobs (all -D defines, each with a default below):
//   THREADS       threads per block, a power of two (launch config).
//   USE_SHUFFLE   compute.warp_reduction and latency.warp_shuffle_sync (the
//                 same edit): __shfl_down_sync inside each warp, one shared
//                 slot per warp, a second shuffle round in warp 0; one
//                 barrier instead of log2(THREADS).
//   ITEMS         compute.thread_coarsening: each thread loads ITEMS
//                 elements (or float4s) per grid-stride step into ITEMS
//                 independent registers, so the grid shrinks ITEMS times.
//   VEC           memory.vectorized_access: VEC=4 reads float4s (LDG.128)
//                 over the first N/4*4 elements; the N % 4 tail is added by
//                 the first threads of block 0. cudaMalloc/torch pointers are
//                 256-byte aligned.
//   TWO_PASS      latency.atomic_optimize: no float atomics at all. Pass 1
//                 writes one partial per block into a static __device__
//                 buffer (grid capped at MAX_PARTIALS, the grid-stride loop
//                 takes the rest), pass 2 (one block) sums the partials and
//                 stores out[0]. Deterministic; no memset needed. The static
//                 buffer makes solve() non-reentrant across concurrent
//                 streams, which kopt never does.
#include <cuda_runtime.h>

#ifndef THREADS
#define THREADS 256
#endif
#ifndef ITEMS
#define ITEMS 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef USE_SHUFFLE
#define USE_SHUFFLE 0
#endif
#ifndef TWO_PASS
#define TWO_PASS 0
#endif
#ifndef MAX_PARTIALS
#define MAX_PARTIALS 65536
#endif

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 64 || THREADS > 1024
#error "THREADS must be a power of two in [64, 1024]"
#endif
#if VEC != 1 && VEC != 4
#error "VEC must be 1 or 4"
#endif

#if VEC == 4
typedef float4 vec_t;
__device__ __forceinline__ float hsum(float4 v) { return (v.x + v.y) + (v.z + v.w); }
#else
typedef float vec_t;
__device__ __forceinline__ float hsum(float v) { return v; }
#endif

#if TWO_PASS
__device__ float g_partials[MAX_PARTIALS];
#endif

// Sum of v over the block; the result is valid in thread 0.
template <int BLOCK>
__device__ __forceinline__ float block_reduce_sum(float v) {
#if USE_SHUFFLE
    __shared__ float warp_sums[BLOCK / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < BLOCK / 32 ? warp_sums[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    }
    return v;
#else
    __shared__ float sm[BLOCK];
    sm[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
        __syncthreads();
    }
    return sm[0];
#endif
}

__global__ void __launch_bounds__(THREADS) reduce_kernel(const float* __restrict__ x, float* __restrict__ out, int N) {
    const long long nvec = N / VEC;
    const vec_t* xv = reinterpret_cast<const vec_t*>(x);
    const long long step = (long long)THREADS * ITEMS;
    float sum = 0.0f;
    for (long long base = (long long)blockIdx.x * step + threadIdx.x; base < nvec;
         base += (long long)gridDim.x * step) {
        float part[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long i = base + (long long)k * THREADS;
            part[k] = i < nvec ? hsum(xv[i]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) sum += part[k];
    }
#if VEC > 1
    if (blockIdx.x == 0 && threadIdx.x < N % VEC) sum += x[nvec * VEC + threadIdx.x];
#endif
    sum = block_reduce_sum<THREADS>(sum);
    if (threadIdx.x == 0) {
#if TWO_PASS
        g_partials[blockIdx.x] = sum;
#else
        atomicAdd(out, sum);
#endif
    }
}

#if TWO_PASS
// Pass 2: one block sums the nparts block partials and stores the result.
__global__ void __launch_bounds__(THREADS) reduce_partials_kernel(float* __restrict__ out, int nparts) {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += THREADS) sum += g_partials[i];
    sum = block_reduce_sum<THREADS>(sum);
    if (threadIdx.x == 0) out[0] = sum;
}
#endif

extern "C" void solve(const float* x, float* out, int N) {
    const long long nvec = N > 0 ? N / VEC : 0;
    const long long step = (long long)THREADS * ITEMS;
    long long grid = (nvec + step - 1) / step;
    if (grid < 1) grid = 1;
#if TWO_PASS
    if (grid > MAX_PARTIALS) grid = MAX_PARTIALS;
    reduce_kernel<<<(unsigned)grid, THREADS, 0, 0>>>(x, out, N);
    reduce_partials_kernel<<<1, THREADS, 0, 0>>>(out, (int)grid);
#else
    if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;
    cudaMemsetAsync(out, 0, sizeof(float), 0);  // accumulate into a zeroed output
    reduce_kernel<<<(unsigned)grid, THREADS, 0, 0>>>(x, out, N);
#endif
}
