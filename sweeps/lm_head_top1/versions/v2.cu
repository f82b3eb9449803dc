// lm_head_top1 v2 -- a bandwidth-first LM-head GEMV fused with the argmax, in one launch.
// Same contract as lm_head_top1.cu: solve(W [V, K] bf16, h [B, K] bf16, idx [B] int64,
// val [B] fp32, B, V, K), fp32 accumulation, idx = the first index of the largest logit
// (torch.argmax's tie rule), val = that logit. THREADS (the sweep's launch param) is the
// block size; no other define is read.
//
// Design (each byte of W is read once, and nothing else of size is):
//   - One warp owns ROWS = 4 consecutive rows of W at a time. Per step every lane issues one
//     16-byte streaming load (ld.global.nc.L1::no_allocate.L2::256B.v4: 8 bf16, read once, not
//     kept in L1) per row; a batch is UNROLL steps (2 at B = 1; 1 at B >= 2, where the
//     extra accumulators take the registers): 8 (4) independent 16-byte loads. A warp-wide load
//     covers 512 contiguous bytes of a row (whole 128-byte lines). K % 8 == 0 (16-byte aligned
//     rows); packs past the last whole batch are read at the end of each row group.
//   - Software pipeline: a warp walks its (row group, batch) sequence issuing the next batch's
//     loads, in a branch of their own, before the FMAs of the current one, across row groups
//     too: 1-2 batches (8-16 x 16 B a lane at B = 1) always in flight. The plain loop did not
//     keep them: ptxas (CUDA 13.0, sm_90) placed each load next to its first use at B = 1,
//     about 2 loads in flight. Costs registers (~120 a thread: 16 warps per SM at 256 threads).
//   - h (B x K bf16, 8-32 KB at K = 4096) is copied into shared memory once per block; each
//     16-byte h pack read from shared memory (conflict-free: consecutive lanes, consecutive
//     16 bytes) serves the ROWS rows. fp32 accumulators: ROWS * B per thread (<= 16).
//   - A row's dot product is finished with warp shuffles (xor butterfly, no shared memory, no
//     barrier); each warp keeps its best (value, index) per batch row.
//   - Persistent grid: as many blocks as are resident at once (occupancy query, cached per
//     batch size), row groups dealt round-robin over all warps, so h is staged once per
//     block (one copy per resident block, a few hundred of <= 32 KB, from L2) instead of once
//     per row group.
//   - Fused argmax, one launch: per block the warps' bests are merged in shared memory, then
//     one 64-bit atomicMax per batch row on a key with the order-preserving float bits high
//     and 0xFFFFFFFF - index low (equal values: the smaller index is the larger key, the
//     reference's first-index rule; -0.0 is folded into +0.0 first, as torch compares them
//     equal). The last block to finish (a __threadfence + atomic ticket) unpacks the keys into
//     idx and val and clears them and the ticket for the next call: no finalize kernel.
//
// Expected: 2 * V * K = 1.245 GB of W per call (h, idx, val: < 40 KB); at 3.6-4.2 TB/s of the
// H200's 4.8 TB/s peak that is 0.30-0.35 ms, for B = 1 and B = 4 alike (B = 4 is 4x the FMAs:
// ~5 GFLOP, still far under the SMs' fp32 rate). Not measured on a GPU yet.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef THREADS
#define THREADS 256
#endif

#define MAX_B 4      // batch rows per call (the sweep's restriction B <= 4)
#define ROWS 4       // rows of W a warp works on at once
// 32-lane steps per batch (ROWS * UNROLL 16-byte loads, two batches in flight): 2 at B = 1,
// 1 at B >= 2 (more accumulators, fewer registers left for loads: B = 2 with 2 spilled at 512
// threads)
#define UNROLL_B1 2
#define UNROLL_BN 1
#define WARPS (THREADS / 32)
// h staged in shared memory up to this many bytes (else read via L1): 48 KB, the most a block
// has without an opt-in, less room for the static per-warp bests (<= 1 KB)
#define H_SMEM_MAX (48 * 1024 - 2048)

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 64 || THREADS > 1024
#error "THREADS must be a power of two in [64, 1024]"
#endif

typedef __nv_bfloat16 bf16;

template <int NB>
struct Unroll {
    static constexpr int value = NB == 1 ? UNROLL_B1 : UNROLL_BN;
};

__device__ unsigned long long g_best[MAX_B];  // per batch row; 0 = below every key
__device__ unsigned int g_ticket;             // blocks done with this call

// A 16-byte pack of W: read once, so not allocated in L1; 256-byte L2 prefetch granularity.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

__device__ __forceinline__ float lo_f(unsigned u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi_f(unsigned u) { return __uint_as_float(u & 0xffff0000u); }

// acc += dot(w, x) over 8 bf16 pairs; x already in fp32.
__device__ __forceinline__ float dot8(const uint4 w, const float (&x)[8], float acc) {
    acc = fmaf(lo_f(w.x), x[0], acc);
    acc = fmaf(hi_f(w.x), x[1], acc);
    acc = fmaf(lo_f(w.y), x[2], acc);
    acc = fmaf(hi_f(w.y), x[3], acc);
    acc = fmaf(lo_f(w.z), x[4], acc);
    acc = fmaf(hi_f(w.z), x[5], acc);
    acc = fmaf(lo_f(w.w), x[6], acc);
    acc = fmaf(hi_f(w.w), x[7], acc);
    return acc;
}

// Whether (v, i) beats (bv, bi): larger, or equal at a smaller index (torch.argmax's rule).
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// Order-preserving key: a larger logit is a larger key; for equal logits the smaller index is
// the larger key.
__device__ __forceinline__ unsigned long long pack_key(float v, int idx) {
    unsigned u = __float_as_uint(v + 0.0f);  // -0.0 -> +0.0 (equal under torch's compare)
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned)(0xFFFFFFFFu - (unsigned)idx);
}

__device__ __forceinline__ void unpack_key(unsigned long long key, float& v, long long& idx) {
    unsigned u = (unsigned)(key >> 32);
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    v = __uint_as_float(u);
    idx = (long long)(0xFFFFFFFFu - (unsigned)(key & 0xFFFFFFFFull));
}

// One batch of a warp's loads: UNROLL 32-lane steps x ROWS rows, 16 bytes each, from pack c.
template <int NB, int UNROLL = Unroll<NB>::value>
__device__ __forceinline__ void load_batch(uint4 (&w)[UNROLL][ROWS], const uint4* const (&wp)[ROWS],
                                           int c) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) w[u][r] = ld_stream(wp[r] + c + 32 * u);
}

// acc[r][b] += W[row r] . h[b] over the packs c + 32u of one batch.
template <int NB, bool HSM, int UNROLL = Unroll<NB>::value>
__device__ __forceinline__ void fma_batch(float (&acc)[ROWS][NB], const uint4 (&w)[UNROLL][ROWS],
                                          const uint4* hv, int nc, int c) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const uint4 p = HSM ? hv[b * nc + c + 32 * u] : __ldg(hv + b * nc + c + 32 * u);
            const float x[8] = {lo_f(p.x), hi_f(p.x), lo_f(p.y), hi_f(p.y),
                                lo_f(p.z), hi_f(p.z), lo_f(p.w), hi_f(p.w)};
#pragma unroll
            for (int r = 0; r < ROWS; ++r) acc[r][b] = dot8(w[u][r], x, acc[r][b]);
        }
    }
}

// The end of a row group: the packs past the last whole batch (c from c0; K % 256 != 0 only),
// the warp-wide sums (xor butterfly: every lane gets the totals, so every lane tracks the same
// best), the best (value, index) per batch row updated, the accumulators cleared.
template <int NB, bool HSM>
__device__ __forceinline__ void finish_group(float (&acc)[ROWS][NB], const uint4* const (&wp)[ROWS],
                                             const uint4* hv, int nc, int c0, long long r0, int V,
                                             float (&best_v)[NB], int (&best_i)[NB]) {
    for (int c = c0; c < nc; c += 32) {
        uint4 w[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) w[r] = ld_stream(wp[r] + c);
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            const uint4 p = HSM ? hv[b * nc + c] : __ldg(hv + b * nc + c);
            const float x[8] = {lo_f(p.x), hi_f(p.x), lo_f(p.y), hi_f(p.y),
                                lo_f(p.z), hi_f(p.z), lo_f(p.w), hi_f(p.w)};
#pragma unroll
            for (int r = 0; r < ROWS; ++r) acc[r][b] = dot8(w[r], x, acc[r][b]);
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float s = acc[r][b];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            acc[r][b] = 0.0f;
            const long long row = r0 + r;
            if (row < V && beats(s, (int)row, best_v[b], best_i[b])) {
                best_v[b] = s;
                best_i[b] = (int)row;
            }
        }
    }
}

// The ROWS row pointers of group g (rows past the end re-read the last row; never stored).
__device__ __forceinline__ void group_rows(const uint4* (&wp)[ROWS], const bf16* W, long long g,
                                           int V, int K) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const long long row = g * ROWS + r < V ? g * ROWS + r : (long long)V - 1;
        wp[r] = reinterpret_cast<const uint4*>(W + row * K);
    }
}

// NB batch rows; HSM: h staged in shared memory (else read through L1 from global).
template <int NB, bool HSM>
__global__ void __launch_bounds__(THREADS)
    lm_head_kernel(const bf16* __restrict__ W, const bf16* __restrict__ h,
                   int64_t* __restrict__ idx_out, float* __restrict__ val_out, int V, int K) {
    constexpr int UNROLL = Unroll<NB>::value;
    extern __shared__ uint4 hs_dyn[];
    __shared__ float s_bv[WARPS][NB];
    __shared__ int s_bi[WARPS][NB];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nc = K >> 3;  // 16-byte packs per row
    const uint4* hg = reinterpret_cast<const uint4*>(h);
    const uint4* hv;
    if constexpr (HSM) {
        for (int i = threadIdx.x; i < NB * nc; i += THREADS) hs_dyn[i] = __ldg(hg + i);
        __syncthreads();
        hv = hs_dyn;
    } else {
        hv = hg;
    }

    float best_v[NB];
    int best_i[NB];
    float acc[ROWS][NB];
#pragma unroll
    for (int b = 0; b < NB; ++b) {
        best_v[b] = -INFINITY;
        best_i[b] = 0x7fffffff;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r][b] = 0.0f;
    }

    const long long groups = ((long long)V + ROWS - 1) / ROWS;
    const long long nwarps = (long long)gridDim.x * WARPS;
    const int full = nc / (32 * UNROLL);      // whole batches per row group
    const int tail = full * 32 * UNROLL + lane;  // this lane's first pack past them
    long long g = (long long)blockIdx.x * WARPS + warp;  // groups dealt round-robin

    if (g < groups && full > 0) {
        // Software pipeline over the warp's (group, batch) sequence: the next batch's loads are
        // issued (in a block of their own) before this batch's FMAs, across group boundaries
        // too, so 1-2 batches (8-16 x 16 bytes a lane) are always in flight. Without it ptxas
        // scheduled each load next to its first use (about 2 in flight at B = 1).
        const uint4* wp[ROWS];
        group_rows(wp, W, g, V, K);
        int it = 0;
        uint4 cur[UNROLL][ROWS];
        load_batch<NB>(cur, wp, lane);
        for (;;) {
            long long g2 = g;
            int it2 = it + 1;
            const uint4* wp2[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) wp2[r] = wp[r];
            if (it2 == full) {
                it2 = 0;
                g2 += nwarps;
                group_rows(wp2, W, g2, V, K);
            }
            const bool more = g2 < groups;
            uint4 nxt[UNROLL][ROWS];
            if (more) load_batch<NB>(nxt, wp2, it2 * 32 * UNROLL + lane);
            fma_batch<NB, HSM>(acc, cur, hv, nc, it * 32 * UNROLL + lane);
            if (it == full - 1)
                finish_group<NB, HSM>(acc, wp, hv, nc, tail, g * ROWS, V, best_v, best_i);
            if (!more) break;
#pragma unroll
            for (int u = 0; u < UNROLL; ++u)
#pragma unroll
                for (int r = 0; r < ROWS; ++r) cur[u][r] = nxt[u][r];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) wp[r] = wp2[r];
            g = g2;
            it = it2;
        }
    } else {
        for (; g < groups; g += nwarps) {  // rows shorter than one batch (K < 8 * 32 * UNROLL)
            const uint4* wp[ROWS];
            group_rows(wp, W, g, V, K);
            finish_group<NB, HSM>(acc, wp, hv, nc, lane, g * ROWS, V, best_v, best_i);
        }
    }

    if (lane == 0) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            s_bv[warp][b] = best_v[b];
            s_bi[warp][b] = best_i[b];
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float bv = s_bv[0][b];
            int bi = s_bi[0][b];
            for (int w = 1; w < WARPS; ++w) {
                if (beats(s_bv[w][b], s_bi[w][b], bv, bi)) {
                    bv = s_bv[w][b];
                    bi = s_bi[w][b];
                }
            }
            if (bi == 0x7fffffff) continue;  // a block with no rows (not launched: defensive)
            const unsigned long long key = pack_key(bv, bi);
            // keys only grow: a block that cannot win (most of them) skips the atomic
            if (key > *(volatile unsigned long long*)&g_best[b]) atomicMax(&g_best[b], key);
        }
        __threadfence();  // this block's atomics are visible before its ticket is
        const unsigned ticket = atomicAdd(&g_ticket, 1u);
        if (ticket == gridDim.x - 1) {  // the last block: every key is final
            __threadfence();
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                const unsigned long long key = atomicExch(&g_best[b], 0ull);
                float v;
                long long i;
                unpack_key(key, v, i);
                idx_out[b] = (int64_t)i;
                val_out[b] = v;
            }
            atomicExch(&g_ticket, 0u);  // the next call (stream-ordered) starts from zero
        }
    }
}

template <int NB, bool HSM>
static void launch(const bf16* W, const bf16* h, int64_t* idx, float* val, int V, int K) {
    const size_t smem = HSM ? (size_t)NB * K * sizeof(bf16) : 0;
    // resident blocks per SM for this kernel and shared-memory size, queried once
    static int sms = 0, per_sm = 0;
    static size_t for_smem = (size_t)-1;
    if (sms == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    if (for_smem != smem) {
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, lm_head_kernel<NB, HSM>, THREADS,
                                                      smem);
        if (per_sm < 1) per_sm = 1;
        for_smem = smem;
    }
    const long long groups = ((long long)V + ROWS - 1) / ROWS;
    long long blocks = (groups + WARPS - 1) / WARPS;
    if (blocks > (long long)sms * per_sm) blocks = (long long)sms * per_sm;
    lm_head_kernel<NB, HSM><<<(unsigned)blocks, THREADS, smem, 0>>>(W, h, idx, val, V, K);
}

template <int NB>
static void dispatch(const bf16* W, const bf16* h, int64_t* idx, float* val, int V, int K) {
    if ((size_t)NB * K * sizeof(bf16) <= H_SMEM_MAX)
        launch<NB, true>(W, h, idx, val, V, K);
    else
        launch<NB, false>(W, h, idx, val, V, K);
}

extern "C" void solve(const __nv_bfloat16* W, const __nv_bfloat16* h, int64_t* idx, float* val,
                      int B, int V, int K) {
    // outside the sweep's sizes (restrictions): B <= 4, 16-byte aligned rows
    if (B < 1 || B > MAX_B || V < 1 || K < 8 || K % 8 != 0) return;
    switch (B) {
        case 1: dispatch<1>(W, h, idx, val, V, K); break;
        case 2: dispatch<2>(W, h, idx, val, V, K); break;
        case 3: dispatch<3>(W, h, idx, val, V, K); break;
        default: dispatch<4>(W, h, idx, val, V, K); break;
    }
}
