// lm_head_top1.cu -- greedy decoding's last step: the LM head GEMV fused with the argmax.
// For each of B hidden vectors h[b] (bf16, [B, K]) and the bf16 LM-head weight W ([V, K],
// nn.Linear's layout: one row per vocabulary entry), with fp32 accumulation:
//   logit[b][v] = sum_k W[v][k] * h[b][k]
//   idx[b] = the first v with the largest logit (torch.argmax's tie rule), val[b] = that logit.
// Bandwidth-bound: W is V * K * 2 bytes (1.2 GB for 151936 x 4096), read once per call.
//
// Baseline (no defines): two kernels. The GEMV runs one block of THREADS threads per row of W:
// a strided, coalesced loop of scalar bf16 loads, B fp32 accumulators per thread, a
// shared-memory tree reduction per batch row (one __syncthreads() per level), thread 0 writes
// the logit to a static device buffer. The argmax kernel (one block per batch row) scans the
// V logits and tree-reduces (value, index) pairs, ties to the smaller index.
//
// Tuning knobs (all -D defines, each with a default below):
//   THREADS     threads per block (launch config), a power of two in [64, 1024].
//   USE_SHUFFLE compute.warp_reduction and latency.warp_shuffle_sync (the same edit): warp
//               butterflies (__shfl_xor_sync), one shared slot per warp and value, two
//               barriers per reduction instead of log2(THREADS) per value.
//   RPB         compute.thread_coarsening: RPB rows of W per block (RPB * B accumulators per
//               thread): each h pack loaded once serves RPB rows, and RPB independent W loads
//               are in flight per step.
//   VEC         memory.vectorized_access: VEC = 8 moves 16-byte packs of 8 bf16 (LDG.128) of
//               W and h. Needs K % 8 == 0 (every row 16-byte aligned); other K take the scalar
//               path at run time.
//   FUSED       memory.kernel_fusion: no logits buffer and no second pass over it: each block
//               keeps the best (value, index) of its rows and merges it into a per-batch-row
//               64-bit key with one atomicMax (value bits made order-preserving in the high
//               word, 0xFFFFFFFF - index in the low word: ties go to the smaller index), skipped
//               when the key already stored is larger; a B-thread kernel unpacks the keys into
//               idx and val and clears them.
//   STREAM      memory.cache_policy: W is read with __ldcs (ld.global.cs: evict-first,
//               streaming), since each byte is used once; h and the logits stay in cache.
//   PERSIST, BPS latency.persistent_kernel: a grid of BPS blocks per SM (resident at once)
//               loops over the rows; with FUSED each block merges its best once at the end.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef THREADS
#define THREADS 256
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
#ifndef FUSED
#define FUSED 0
#endif
#ifndef STREAM
#define STREAM 0
#endif
#ifndef PERSIST
#define PERSIST 0
#endif
#ifndef BPS
#define BPS 1
#endif

#define MAX_B 4            // batch rows (hidden vectors) per call
#define MAX_V 262144       // vocabulary entries (the non-fused logits buffer: 4 MB)
#define MAX_ACC 16         // RPB * B fp32 accumulators per thread

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 64 || THREADS > 1024
#error "THREADS must be a power of two in [64, 1024]"
#endif
#if VEC != 1 && VEC != 8
#error "VEC must be 1 or 8"
#endif
#if RPB < 1 || RPB > 8 || BPS < 1
#error "RPB must be in [1, 8], BPS at least 1"
#endif

typedef __nv_bfloat16 bf16;

// V bf16 values moved as one access (V = 8: 16 bytes).
template <int V>
struct alignas(2 * V) Pack {
    bf16 e[V];
};

// A W pack: streaming (evict-first) loads under STREAM.
template <int V>
__device__ __forceinline__ Pack<V> load_w(const Pack<V>* p) {
#if STREAM
    if constexpr (V == 8) {
        const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
        return *reinterpret_cast<const Pack<V>*>(&u);
    } else {
        const unsigned short u = __ldcs(reinterpret_cast<const unsigned short*>(p));
        return *reinterpret_cast<const Pack<V>*>(&u);
    }
#else
    return *p;
#endif
}

#if FUSED
__device__ unsigned long long g_best[MAX_B];  // per batch row; zero = below every key
#else
__device__ float g_logits[MAX_B * MAX_V];
#endif

// An order-preserving key: a larger logit is a larger key, and for equal logits the smaller
// index is the larger key.
__device__ __forceinline__ unsigned long long pack_key(float v, int idx) {
    unsigned u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned)(0xFFFFFFFFu - (unsigned)idx);
}

// Whether (v, i) beats (bv, bi): larger, or equal at a smaller index (torch.argmax's rule).
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
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

// NB batch rows, V bf16 per access. Blocks take RPB consecutive rows of W at a time.
template <int NB, int V>
__global__ void __launch_bounds__(THREADS)
    gemv_kernel(const bf16* __restrict__ W, const bf16* __restrict__ h, int NV, int K) {
    const int np = K / V;  // packs per row
    const Pack<V>* hv = reinterpret_cast<const Pack<V>*>(h);
#if FUSED
    float best_v[NB];
    int best_i[NB];
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        best_v[b] = -INFINITY;
        best_i[b] = 0x7fffffff;
    }
#endif
    for (long long r0 = (long long)blockIdx.x * RPB; r0 < NV; r0 += (long long)gridDim.x * RPB) {
        float acc[RPB * NB];
#pragma unroll
        for (int j = 0; j < RPB * NB; ++j) acc[j] = 0.0f;
        for (int i = threadIdx.x; i < np; i += THREADS) {
            // rows past the end (a last partial group) read the last row: their sums are
            // never stored, and every load stays unconditional
            Pack<V> w[RPB];
#pragma unroll
            for (int r = 0; r < RPB; ++r) {
                const long long row = r0 + r < NV ? r0 + r : NV - 1;
                w[r] = load_w<V>(reinterpret_cast<const Pack<V>*>(W + row * K) + i);
            }
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const Pack<V> x = hv[(long long)b * np + i];
#pragma unroll
                for (int r = 0; r < RPB; ++r) {
#pragma unroll
                    for (int e = 0; e < V; ++e)
                        acc[r * NB + b] += __bfloat162float(w[r].e[e]) * __bfloat162float(x.e[e]);
                }
            }
        }
        block_sum<RPB * NB>(acc);
        if (threadIdx.x == 0) {
#pragma unroll
            for (int r = 0; r < RPB; ++r) {
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    if (r0 + r >= NV) continue;
#if FUSED
                    // rows come in increasing order: a later equal value never beats
                    if (acc[r * NB + b] > best_v[b]) {
                        best_v[b] = acc[r * NB + b];
                        best_i[b] = (int)(r0 + r);
                    }
#else
                    g_logits[(long long)b * NV + r0 + r] = acc[r * NB + b];
#endif
                }
            }
        }
    }
#if FUSED
    if (threadIdx.x == 0) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            if (best_i[b] == 0x7fffffff) continue;
            const unsigned long long key = pack_key(best_v[b], best_i[b]);
            // keys only grow: a block that cannot win (most of them) skips the atomic
            if (key > *(volatile unsigned long long*)&g_best[b]) atomicMax(&g_best[b], key);
        }
    }
#endif
}

#if FUSED
// Unpacks each batch row's key into idx and val, and clears it for the next call.
__global__ void finalize_kernel(int64_t* __restrict__ idx, float* __restrict__ val, int B) {
    const int b = threadIdx.x;
    if (b >= B) return;
    const unsigned long long key = g_best[b];
    unsigned u = (unsigned)(key >> 32);
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    idx[b] = (int64_t)(0xFFFFFFFFu - (unsigned)(key & 0xFFFFFFFFull));
    val[b] = __uint_as_float(u);
    g_best[b] = 0ull;
}
#else
// One block per batch row: the first index of the largest of its NV logits.
__global__ void __launch_bounds__(THREADS)
    argmax_kernel(int64_t* __restrict__ idx, float* __restrict__ val, int NV) {
    const float* lg = g_logits + (long long)blockIdx.x * NV;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < NV; i += THREADS) {
        const float v = lg[i];
        if (v > bv) {  // i grows: the first index of a value stays
            bv = v;
            bi = i;
        }
    }
#if USE_SHUFFLE
    __shared__ float wv[THREADS / 32];
    __shared__ int wi[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
        if (beats(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    if (lane == 0) { wv[warp] = bv; wi[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = lane < THREADS / 32 ? wv[lane] : -INFINITY;
        bi = lane < THREADS / 32 ? wi[lane] : 0x7fffffff;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (beats(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
    }
#else
    __shared__ float sv[THREADS];
    __shared__ int si[THREADS];
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && beats(sv[threadIdx.x + s], si[threadIdx.x + s], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + s];
            si[threadIdx.x] = si[threadIdx.x + s];
        }
        __syncthreads();
    }
    bv = sv[0];
    bi = si[0];
#endif
    if (threadIdx.x == 0) {
        idx[blockIdx.x] = bi;
        val[blockIdx.x] = bv;
    }
}
#endif

static unsigned grid_for(int NV) {
    long long blocks = ((long long)NV + RPB - 1) / RPB;
#if PERSIST
    static int sms = 0;  // queried once
    if (sms == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    if (blocks > (long long)sms * BPS) blocks = (long long)sms * BPS;
#endif
    return (unsigned)blocks;
}

template <int NB>
static void gemv(const bf16* W, const bf16* h, int NV, int K) {
    if constexpr (RPB * NB > MAX_ACC) {
        return;  // more accumulators than a thread holds without spilling (restrictions)
    } else {
#if VEC == 8
        if (K % 8 == 0) {  // every row starts 16-byte aligned
            gemv_kernel<NB, 8><<<grid_for(NV), THREADS, 0, 0>>>(W, h, NV, K);
            return;
        }
#endif
        gemv_kernel<NB, 1><<<grid_for(NV), THREADS, 0, 0>>>(W, h, NV, K);
    }
}

extern "C" void solve(const __nv_bfloat16* W, const __nv_bfloat16* h, int64_t* idx, float* val,
                      int B, int V, int K) {
    if (B < 1 || B > MAX_B || V < 1 || K < 1) return;  // outside the sweep's sizes (restrictions)
#if !FUSED
    if (V > MAX_V) return;
#endif
    switch (B) {
        case 1: gemv<1>(W, h, V, K); break;
        case 2: gemv<2>(W, h, V, K); break;
        case 3: gemv<3>(W, h, V, K); break;
        default: gemv<4>(W, h, V, K); break;
    }
#if FUSED
    finalize_kernel<<<1, 32, 0, 0>>>(idx, val, B);
#else
    argmax_kernel<<<B, THREADS, 0, 0>>>(idx, val, V);
#endif
}
