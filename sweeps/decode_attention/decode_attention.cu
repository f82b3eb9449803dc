// decode_attention.cu -- one decoding step of multi-head attention over a contiguous KV cache:
// for each sequence b and head h, one query token q[b][h] (bf16, [B, H, D]) against the head's
// L cached keys and values K[b][h], V[b][h] (bf16, [B, H, L, D], row-major), fp32 softmax:
//   s[j] = (q . K[j]) / sqrt(D),  p = softmax(s),  o[b][h] = bf16(sum_j p[j] * V[j])
// Bandwidth-bound: K and V are 2 * B * H * L * D * 2 bytes (134 MB at B = 1, H = 32, L = 8192,
// D = 128), each byte read once per call; the kernel is written for D = 128 (HD below).
//
// Baseline (no defines): one block of THREADS threads per (b, h), three passes over the keys.
// q, times 1 / sqrt(D), is staged in shared memory as fp32. Pass 1: thread t scores keys t,
// t + THREADS, ... with a loop of scalar bf16 loads of the key row (each warp load touches 32
// rows: the other elements of their sectors come from L1 on the next steps) against q read
// from shared memory, and stores the scores to a static global buffer (g_p); a shared-memory
// tree reduction (one __syncthreads() per level) gives the row's max M. Pass 2: p = exp(s - M)
// overwrites the scores, a tree reduction gives their sum l. Pass 3: threads own dimensions
// (HD / VEC threads per value row, THREADS * VEC / HD rows at a time), accumulate p[j] * V[j]
// with coalesced loads of V, the row groups are summed through shared memory and o = acc / l is
// rounded to bf16. B * H blocks: 32 at B = 1, a quarter of the H200's 132 SMs.
//
// Tuning knobs (all -D defines, each with a default below):
//   THREADS     threads per block (launch config), a power of two in [128, 1024].
//   USE_SHUFFLE compute.warp_reduction and latency.warp_shuffle_sync (the same edit): the max
//               and the sum are warp butterflies (__shfl_xor_sync), one shared slot per warp,
//               two barriers per reduction instead of log2(THREADS).
//   UNROLL      compute.ilp_unroll: each loop step of passes 1 and 3 issues the loads of UNROLL
//               keys (value rows) before using any of them: UNROLL independent loads in
//               flight per thread and step.
//   VEC         memory.vectorized_access: VEC = 8 moves 16-byte packs of 8 bf16 (LDG.128) of
//               the key and value rows (every row is 256 bytes: always 16-byte aligned).
//   KEY_LANES   memory.coalesced_access: pass 1 scores each key with a group of KEY_LANES
//               adjacent lanes, each reading its own slice (pack k of the row for lane
//               k % KEY_LANES): a warp load reads 32 / KEY_LANES contiguous segments of
//               2 * VEC * KEY_LANES bytes, not one element of 32 rows; the group's partial
//               dots are summed with log2(KEY_LANES) sub-warp __shfl_xor_sync steps and each
//               lane keeps its slice of q in registers.
//   STREAM      memory.cache_policy: K and V are read with __ldcs (ld.global.cs: evict-first,
//               streaming), since each byte is used once; q and the scores stay in cache.
//   SMEM_P      memory.tiling_smem: the block's scores and probabilities live in dynamic
//               shared memory (4 bytes per key of the block) instead of the global buffer:
//               passes 2 and 3 re-read them from shared memory, not L2.
//   SPLITS      latency.split_k (flash-decoding): the context is split into SPLITS chunks, one
//               block per (b, h, chunk): B * H * SPLITS blocks. Each block writes its chunk's
//               max, sum and unnormalized sum p * V to a static workspace; a second kernel
//               (one block of D threads per (b, h)) rescales the chunks to the common max,
//               adds them up and writes o. fp32 sums in another order: results differ from
//               SPLITS = 1 in the last bits.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef THREADS
#define THREADS 256
#endif
#ifndef USE_SHUFFLE
#define USE_SHUFFLE 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef KEY_LANES
#define KEY_LANES 1
#endif
#ifndef STREAM
#define STREAM 0
#endif
#ifndef SMEM_P
#define SMEM_P 0
#endif
#ifndef SPLITS
#define SPLITS 1
#endif

#define HD 128        // the head dimension (solve's D) the kernel is written for
#define MAX_BH 128    // B * H: rows of the workspaces
#define MAX_L 32768   // keys per head: the global scores buffer (16 MB)

#if (THREADS & (THREADS - 1)) != 0 || THREADS < HD || THREADS > 1024
#error "THREADS must be a power of two in [HD, 1024]"
#endif
#if VEC != 1 && VEC != 8
#error "VEC must be 1 or 8"
#endif
#if (KEY_LANES & (KEY_LANES - 1)) != 0 || KEY_LANES > 32 || HD % (KEY_LANES * VEC) != 0
#error "KEY_LANES must be a power of two of at most 32 that divides HD / VEC"
#endif
#if UNROLL < 1 || UNROLL > 8 || SPLITS < 1 || SPLITS > 64
#error "UNROLL must be in [1, 8], SPLITS in [1, 64]"
#endif

typedef __nv_bfloat16 bf16;

// V bf16 values moved as one access (V = 8: 16 bytes).
template <int V>
struct alignas(2 * V) Pack {
    bf16 e[V];
};

// A K or V pack: streaming (evict-first) loads under STREAM.
template <int V>
__device__ __forceinline__ Pack<V> load_kv(const Pack<V>* p) {
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

#if !SMEM_P
__device__ float g_p[MAX_BH * MAX_L];  // per (b, h): the scores, then the probabilities
#endif
#if SPLITS > 1
__device__ float g_acc[MAX_BH * SPLITS * HD];  // per (b, h, chunk): sum_j p[j] * V[j]
__device__ float2 g_ml[MAX_BH * SPLITS];       // per (b, h, chunk): (max score, sum of p)
#endif

__device__ __forceinline__ float combine(float a, float b, bool is_max) {
    return is_max ? fmaxf(a, b) : a + b;
}

// The max (IS_MAX) or the sum of v over the block; every thread gets it. Ends with a
// barrier, so the shared buffers can be reused.
template <bool IS_MAX>
__device__ __forceinline__ float block_reduce(float v) {
#if USE_SHUFFLE
    __shared__ float part[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v = combine(v, __shfl_xor_sync(0xffffffffu, v, off), IS_MAX);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = part[lane % (THREADS / 32)];  // every warp reduces the warp results
#pragma unroll
    for (int off = THREADS / 64; off > 0; off >>= 1)
        v = combine(v, __shfl_xor_sync(0xffffffffu, v, off), IS_MAX);
    __syncthreads();
    return v;
#else
    __shared__ float sm[THREADS];
    sm[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sm[threadIdx.x] = combine(sm[threadIdx.x], sm[threadIdx.x + s], IS_MAX);
        __syncthreads();
    }
    v = sm[0];
    __syncthreads();
    return v;
#endif
}

// One block per (chunk, b * H + h): grid (SPLITS, B * H). V bf16 per access.
template <int V>
__global__ void __launch_bounds__(THREADS)
    attn_kernel(const bf16* __restrict__ q, const bf16* __restrict__ K,
                const bf16* __restrict__ Vc, bf16* __restrict__ o, int L, float scale) {
    const int bh = blockIdx.y, split = blockIdx.x, tid = threadIdx.x;
    const int chunk = (L + SPLITS - 1) / SPLITS;
    const int j0 = min(L, split * chunk), n = min(L, j0 + chunk) - j0;  // this block's keys
    const bf16* Kb = K + ((size_t)bh * L + j0) * HD;
    const bf16* Vb = Vc + ((size_t)bh * L + j0) * HD;
#if SMEM_P
    extern __shared__ float smem_p[];
    float* P = smem_p;
#else
    float* P = g_p + (size_t)bh * MAX_L + j0;
#endif
    __shared__ float sq[HD];  // q * scale
    for (int d = tid; d < HD; d += THREADS)
        sq[d] = __bfloat162float(q[(size_t)bh * HD + d]) * scale;
    __syncthreads();

    // Pass 1: the scores, each by a group of KEY_LANES lanes; the block's max.
    constexpr int G1 = THREADS / KEY_LANES;      // keys scored at once
    constexpr int NPK = HD / (V * KEY_LANES);    // packs of a key row per lane
    const int g = tid / KEY_LANES, kl = tid % KEY_LANES;
#if KEY_LANES > 1
    float qr[NPK * V];  // this lane's slice of q
#pragma unroll
    for (int p = 0; p < NPK; ++p)
#pragma unroll
        for (int e = 0; e < V; ++e) qr[p * V + e] = sq[(kl + p * KEY_LANES) * V + e];
#endif
    float mloc = -INFINITY;
    for (int jb = 0; jb < n; jb += G1 * UNROLL) {  // the same trip count in every thread
        float s[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) s[u] = 0.0f;
#if KEY_LANES > 1
#pragma unroll
#else
#pragma unroll 4
#endif
        for (int p = 0; p < NPK; ++p) {
            const int pk = kl + p * KEY_LANES;  // pack index in the row
            Pack<V> kv[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                // keys past the end read the block's last key: never stored, loads stay
                // unconditional
                const int j = jb + u * G1 + g, jj = j < n ? j : n - 1;
                kv[u] = load_kv<V>(reinterpret_cast<const Pack<V>*>(Kb + (size_t)jj * HD) + pk);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
                for (int e = 0; e < V; ++e) {
#if KEY_LANES > 1
                    const float qe = qr[p * V + e];
#else
                    const float qe = sq[pk * V + e];
#endif
                    s[u] += qe * __bfloat162float(kv[u].e[e]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
#if KEY_LANES > 1
#pragma unroll
            for (int off = KEY_LANES / 2; off > 0; off >>= 1)
                s[u] += __shfl_xor_sync(0xffffffffu, s[u], off);
#endif
            const int j = jb + u * G1 + g;
            if (j < n) {
                if (kl == 0) P[j] = s[u];
                mloc = fmaxf(mloc, s[u]);
            }
        }
    }
    const float M = block_reduce<true>(mloc);  // its barriers publish the scores

    // Pass 2: p = exp(s - M) in place; their sum.
    float lsum = 0.0f;
    for (int j = tid; j < n; j += THREADS) {
        const float pj = expf(P[j] - M);
        P[j] = pj;
        lsum += pj;
    }
    const float l = block_reduce<false>(lsum);

    // Pass 3: sum_j p[j] * V[j]; thread c of a row group owns dimensions c * V .. c * V + V - 1.
    constexpr int TPR = HD / V;        // threads per value row
    constexpr int G3 = THREADS / TPR;  // value rows at once
    const int g3 = tid / TPR, c = tid % TPR;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
    for (int jb = 0; jb < n; jb += G3 * UNROLL) {
        Pack<V> vv[UNROLL];
        float pu[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int j = jb + u * G3 + g3, jj = j < n ? j : n - 1;
            vv[u] = load_kv<V>(reinterpret_cast<const Pack<V>*>(Vb + (size_t)jj * HD) + c);
            pu[u] = j < n ? P[jj] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] += pu[u] * __bfloat162float(vv[u].e[e]);
    }
    __shared__ float red[G3 * HD];  // the row groups' sums
#pragma unroll
    for (int e = 0; e < V; ++e) red[g3 * HD + c * V + e] = acc[e];
    __syncthreads();
    if (tid < HD) {
        float t = 0.0f;
        for (int r = 0; r < G3; ++r) t += red[r * HD + tid];
#if SPLITS > 1
        const size_t part = (size_t)bh * SPLITS + split;
        g_acc[part * HD + tid] = t;
        if (tid == 0) g_ml[part] = make_float2(M, l);  // an empty chunk: (-inf, 0)
#else
        o[(size_t)bh * HD + tid] = __float2bfloat16(t / l);
#endif
    }
}

#if SPLITS > 1
// One block of HD threads per (b, h): the chunks rescaled to their common max and summed.
__global__ void __launch_bounds__(HD) combine_kernel(bf16* __restrict__ o) {
    const int bh = blockIdx.x, t = threadIdx.x;
    const float2* ml = g_ml + (size_t)bh * SPLITS;
    float M = -INFINITY;
    for (int s = 0; s < SPLITS; ++s) M = fmaxf(M, ml[s].x);
    float l = 0.0f, a = 0.0f;
    for (int s = 0; s < SPLITS; ++s) {
        const float2 x = ml[s];
        if (x.y > 0.0f) {  // not an empty chunk
            const float w = expf(x.x - M);
            l += w * x.y;
            a += w * g_acc[((size_t)bh * SPLITS + s) * HD + t];
        }
    }
    o[(size_t)bh * HD + t] = __float2bfloat16(a / l);
}
#endif

template <int V>
static void launch(const bf16* q, const bf16* k, const bf16* v, bf16* o, int BH, int L) {
    const float scale = 1.0f / sqrtf((float)HD);
    size_t smem = 0;
#if SMEM_P
    smem = (size_t)((L + SPLITS - 1) / SPLITS) * sizeof(float);
    static size_t opted = 48 * 1024;  // dynamic shared memory above 48 KB must be opted into
    if (smem > opted) {
        cudaFuncSetAttribute(attn_kernel<V>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem);
        opted = smem;
    }
#endif
    attn_kernel<V><<<dim3(SPLITS, BH), THREADS, smem, 0>>>(q, k, v, o, L, scale);
#if SPLITS > 1
    combine_kernel<<<BH, HD, 0, 0>>>(o);
#endif
}

extern "C" void solve(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                      __nv_bfloat16* o, int B, int H, int L, int D) {
    // outside the sweep's sizes (restrictions): the head dimension, the workspaces' rows
    if (D != HD || B < 1 || H < 1 || B * H > MAX_BH || L < 1 || L > MAX_L) return;
    launch<VEC>(q, k, v, o, B * H, L);
}
