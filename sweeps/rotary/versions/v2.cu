// rotary v2 -- RoPE (GPT-NeoX / Llama "rotate_half" layout) in place on q and k, bf16, for the
// same contract as ../rotary.cu:
//   for token t at position p = positions[t], every head h (HQ query heads, then HK key
//   heads) and every pair j < D/2, with c = cache[p][j], s = cache[p][D/2 + j]:
//     x[h][j]       <- x[h][j] * c - x[h][j + D/2] * s
//     x[h][j + D/2] <- x[h][j + D/2] * c + x[h][j] * s
// q [T, HQ, D], k [T, HK, D], cos_sin_cache [MAXPOS, D] (cos | sin halves of a row), all bf16;
// positions int64 [T]. fp32 math, each output rounded once to bf16 (round to nearest even).
// Same solve() signature, same launch parameter (THREADS, -D, a multiple of 32 in
// [32, 1024]); no other define is read.
//
// Design (written from iteration 1's timings, ../versions/v2.md):
// - One thread per (token, head, pack of 8 pairs): D = 128 is 8 packs per head, 320 threads
//   per token (HQ + HK = 40 heads). The grid is flat over T * (HQ + HK) * D/16 items with
//   no loop in the thread, so every load of the call is issued at once: T = 1 is 320
//   threads in 1-5 blocks (one DRAM round trip for q/k, overlapped with the positions ->
//   cos/sin row chain, instead of 10-20 loop trips of iteration 1's per-token block);
//   T = 2048 is 655,360 threads streaming 16-byte accesses.
// - Each thread: two 16-byte loads of its head (x[8p .. 8p+7] and x[D/2 + 8p ..]), which do
//   not depend on positions[t] and are in flight while positions[t] -> the cos/sin row (two
//   dependent 16-byte loads) resolves; 8 pairs rotated in fp32; two 16-byte stores.
// - Cache policy: q and k are touched once, read then written by the same thread:
//   ld.global.cs / st.global.cs (__ldcs / __stcs, evict-first streaming in L1 and L2); the
//   cos/sin row, re-read by all 40 heads of a token (a warp spans 4 heads of one token, a
//   128-thread block 16), and positions through the read-only path (__ldg, L1-allocating).
// - D % 16 != 0 (not a sweep size) takes a scalar path: one thread per pair, same policy.
//
// Bytes moved (the sweep's `bytes`: q, k read and written, one cache row per token,
// positions) and an ESTIMATE of the time on one H200 (4.8 TB/s peak DRAM; ~85% of peak
// sustained assumed, not measured; the launch overhead inside kopt's timed interval excluded):
//   T = 1:     20,744 B   -> latency-bound: ~2 dependent DRAM round trips (positions ->
//                             cos/sin row, the q/k loads overlapped), ~1.5-2 us of kernel
//                             (iteration 1's best: 8.8 us incl. overhead)
//   T = 16:   331,904 B   -> the same chain, ~2 us (iteration 1's best: 5.6 us)
//   T = 2048: 42,483,712 B -> ~10.4 us at 85% of peak + ~1 us ramp-up (iteration 1's best:
//                             16.2 us = 2.62 TB/s, 54.6% of the H200's 4.8 TB/s)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef THREADS
#define THREADS 128
#endif

#if THREADS % 32 != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a multiple of 32 in [32, 1024]"
#endif

typedef __nv_bfloat16 bf16;

// bf16 halves of a 32-bit word as fp32 (exact): low half = the element at the lower address
__device__ __forceinline__ float bf_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

// (lo, hi) rounded to nearest even bf16, lo in the low half
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// 8 pairs: a = x[j .. j+7], b = x[D/2 + j .. + 7], c / s = cos / sin[j .. j+7]
__device__ __forceinline__ void rotate8(uint4& a, uint4& b, const uint4& c, const uint4& s) {
    uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
    const uint32_t cv[4] = {c.x, c.y, c.z, c.w}, sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float x1l = bf_lo(av[i]), x1h = bf_hi(av[i]);
        const float x2l = bf_lo(bv[i]), x2h = bf_hi(bv[i]);
        const float cl = bf_lo(cv[i]), ch = bf_hi(cv[i]);
        const float sl = bf_lo(sv[i]), sh = bf_hi(sv[i]);
        av[i] = pack_bf16x2(x1l * cl - x2l * sl, x1h * ch - x2h * sh);
        bv[i] = pack_bf16x2(x2l * cl + x1l * sl, x2h * ch + x1h * sh);
    }
    a = make_uint4(av[0], av[1], av[2], av[3]);
    b = make_uint4(bv[0], bv[1], bv[2], bv[3]);
}

// Head h of token t: q's (h < HQ) or k's (64-bit offsets).
__device__ __forceinline__ bf16* head_ptr(bf16* q, bf16* k, long long t, int h, int HQ, int HK,
                                          int D) {
    return h < HQ ? q + (t * HQ + h) * (long long)D : k + (t * HK + (h - HQ)) * (long long)D;
}

// One thread per (token, head, pack of 8 pairs); NP packs per half-head (NP = 0: D / 16 read
// at run time). I: the index type (32-bit when the item count fits).
template <int NP, typename I>
__global__ void __launch_bounds__(THREADS)
    rotary_v2_pack(const int64_t* __restrict__ positions, bf16* __restrict__ q,
                   bf16* __restrict__ k, const bf16* __restrict__ cache, I items, int HQ, int HK,
                   int D) {
    const I i = (I)blockIdx.x * (I)THREADS + (I)threadIdx.x;
    if (i >= items) return;
    const int np = NP > 0 ? NP : D / 16;
    const I th = i / (I)np;  // token * (HQ + HK) + head
    const int p = (int)(i - th * (I)np);
    const I t = th / (I)(HQ + HK);
    const int h = (int)(th - t * (I)(HQ + HK));
    const int half = D / 2;
    bf16* x = head_ptr(q, k, (long long)t, h, HQ, HK, D);
    uint4* pa = reinterpret_cast<uint4*>(x) + p;
    uint4* pb = reinterpret_cast<uint4*>(x + half) + p;
    uint4 a = __ldcs(pa), b = __ldcs(pb);  // independent of the position -> cache-row chain
    const bf16* cs = cache + (long long)__ldg(reinterpret_cast<const long long*>(positions) + t) * D;
    const uint4 c = __ldg(reinterpret_cast<const uint4*>(cs) + p);
    const uint4 s = __ldg(reinterpret_cast<const uint4*>(cs + half) + p);
    rotate8(a, b, c, s);
    __stcs(pa, a);
    __stcs(pb, b);
}

// Scalar path (D % 16 != 0): one thread per (token, head, pair).
__global__ void __launch_bounds__(THREADS)
    rotary_v2_pair(const int64_t* __restrict__ positions, bf16* __restrict__ q,
                   bf16* __restrict__ k, const bf16* __restrict__ cache, long long items, int HQ,
                   int HK, int D) {
    const long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    if (i >= items) return;
    const int half = D / 2;
    const long long th = i / half;
    const int j = (int)(i - th * half);
    const long long t = th / (HQ + HK);
    const int h = (int)(th - t * (HQ + HK));
    bf16* x = head_ptr(q, k, t, h, HQ, HK, D);
    const float x1 = __bfloat162float(__ldcs(x + j)), x2 = __bfloat162float(__ldcs(x + half + j));
    const bf16* cs = cache + (long long)__ldg(reinterpret_cast<const long long*>(positions) + t) * D;
    const float c = __bfloat162float(__ldg(cs + j)), s = __bfloat162float(__ldg(cs + half + j));
    __stcs(x + j, __float2bfloat16(x1 * c - x2 * s));
    __stcs(x + half + j, __float2bfloat16(x2 * c + x1 * s));
}

extern "C" void solve(const int64_t* positions, __nv_bfloat16* q, __nv_bfloat16* k,
                      const __nv_bfloat16* cos_sin_cache, int T, int HQ, int HK, int D,
                      int MAXPOS) {
    (void)MAXPOS;  // positions are in [0, MAXPOS): the cache's rows
    if (T <= 0 || D <= 1 || D % 2 != 0 || HQ < 0 || HK < 0 || HQ + HK <= 0) return;
    const long long heads = (long long)T * (HQ + HK);
    if (D % 16 == 0) {  // every half-head starts 16-byte aligned
        const long long items = heads * (D / 16);
        const unsigned blocks = (unsigned)((items + THREADS - 1) / THREADS);
        if (items + THREADS <= 0xffffffffLL) {
            if (D == 128)
                rotary_v2_pack<8, uint32_t><<<blocks, THREADS, 0, 0>>>(
                    positions, q, k, cos_sin_cache, (uint32_t)items, HQ, HK, D);
            else
                rotary_v2_pack<0, uint32_t><<<blocks, THREADS, 0, 0>>>(
                    positions, q, k, cos_sin_cache, (uint32_t)items, HQ, HK, D);
        } else {
            rotary_v2_pack<0, unsigned long long><<<blocks, THREADS, 0, 0>>>(
                positions, q, k, cos_sin_cache, (unsigned long long)items, HQ, HK, D);
        }
        return;
    }
    const long long items = heads * (D / 2);
    rotary_v2_pair<<<(unsigned)((items + THREADS - 1) / THREADS), THREADS, 0, 0>>>(
        positions, q, k, cos_sin_cache, items, HQ, HK, D);
}
