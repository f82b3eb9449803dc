// rotary.cpp -- CPU backend of rotary (sweep.yaml): RoPE in the GPT-NeoX / Llama rotate_half
// layout, applied in place to q [T, HQ, D] and k [T, HK, D] (bf16). For token t at position
// p = positions[t], every head (HQ query heads, then HK key heads) and every pair j < D/2, with
// c = cache[p][j], s = cache[p][D/2 + j] (vLLM's [MAXPOS, D] cos/sin cache, bf16):
//   x[j] <- bf16(x[j] * c - x[j + D/2] * s),  x[j + D/2] <- bf16(x[j + D/2] * c + x[j] * s)
// fp32 math, each output rounded once. Host pointers; bf16 values travel as their 16-bit
// patterns (the high half of a float32), as torch stores them.
//
// Baseline (no defines): one thread; for each (token, head) a plain scalar loop over the D/2
// pairs, each pair converting its c and s from the cache row again (as the CUDA baseline
// reads them per pair) and its two values, writing two. Written scalar, but g++ -O3 does
// vectorize this loop (4 fp32 lanes, after a run-time check that q/k and the cache do not
// overlap): the baseline is already SIMD, the knobs below work on top of that.
//
// Tuning knobs (-D defines, each with a default below):
//   NT       OpenMP threads (num_threads(NT)) over the T * ceil((HQ + HK) / ITEMS) work items
//            (token, group of heads), dealt out statically: 40 items at T = 1. NT=1 runs
//            serially.
//   ITEMS    compute.thread_coarsening: a work item rotates ITEMS heads of one token: the
//            pair loop outside, the heads inside, c and s converted once per pair for all
//            ITEMS heads and kept in registers (ITEMS independent rotations per step, the loop
//            vectorized by omp simd); a last group short of ITEMS heads goes the baseline way.
//   SMEM_CS  memory.tiling_smem: the work item's cos and sin are converted once into fp32
//            arrays on the stack (2 x D/2 floats, in L1), the CPU's shared-memory tile, and
//            every head of the item is rotated from them by a __restrict__ loop (no alias
//            check). Needs D <= 2 * MAX_HALF (restrictions); takes the place of ITEMS's
//            register loop when both are set (the item still holds ITEMS heads).
#include <cstdint>
#include <cstring>

typedef uint16_t bfloat16;  // torch.bfloat16's bits

#ifndef NT
#define NT 1
#endif
#ifndef SMEM_CS
#define SMEM_CS 0
#endif
#ifndef ITEMS
#define ITEMS 1
#endif

#if ITEMS < 1
#error "ITEMS must be at least 1"
#endif
#define MAX_HALF 256  // the staged cos/sin (SMEM_CS): head dims up to 512

static inline float bf2f(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// float32 -> bfloat16, round to nearest even (torch's rounding); NaN stays a quiet NaN
static inline uint16_t f2bf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// The pair j of one head: the baseline's step (c and s converted per pair).
static inline void rotate_pair(bfloat16* x, const bfloat16* cs, int j, int half) {
    const float c = bf2f(cs[j]), s = bf2f(cs[half + j]);
    const float x1 = bf2f(x[j]), x2 = bf2f(x[j + half]);
    x[j] = f2bf(x1 * c - x2 * s);
    x[j + half] = f2bf(x2 * c + x1 * s);
}

// One head's D/2 pairs rotated by fp32 c, s staged for its token (the halves never
// overlap: __restrict__, so the loop vectorizes without run-time alias checks).
static inline void rotate_staged(bfloat16* __restrict__ lo, bfloat16* __restrict__ hi,
                                 const float* __restrict__ c, const float* __restrict__ s,
                                 int half) {
    for (int j = 0; j < half; ++j) {
        const float x1 = bf2f(lo[j]), x2 = bf2f(hi[j]);
        lo[j] = f2bf(x1 * c[j] - x2 * s[j]);
        hi[j] = f2bf(x2 * c[j] + x1 * s[j]);
    }
}

extern "C" void solve(const int64_t* positions, bfloat16* q, bfloat16* k,
                      const bfloat16* cos_sin_cache, int T, int HQ, int HK, int D, int MAXPOS) {
    (void)MAXPOS;  // positions are in [0, MAXPOS): the cache's rows
    const int heads = HQ + HK, half = D / 2;
    if (T <= 0 || D <= 1 || heads <= 0) return;
#if SMEM_CS
    if (half > MAX_HALF) return;  // not reached for the sweep's D (restrictions)
#endif
    const int groups = (heads + ITEMS - 1) / ITEMS;  // head groups per token
    const long long items = (long long)T * groups;
#pragma omp parallel for num_threads(NT) schedule(static) if (NT > 1)
    for (long long it = 0; it < items; ++it) {
        const long long t = it / groups;
        const int h0 = (int)(it - t * groups) * ITEMS;
        const int n = heads - h0 < ITEMS ? heads - h0 : ITEMS;
        const bfloat16* cs = cos_sin_cache + positions[t] * (long long)D;
        bfloat16* x[ITEMS];
        for (int u = 0; u < n; ++u) {
            const int h = h0 + u;
            x[u] = h < HQ ? q + (t * HQ + h) * (long long)D
                          : k + (t * HK + (h - HQ)) * (long long)D;
        }
#if SMEM_CS
        float c[MAX_HALF], sn[MAX_HALF];  // the token's cos and sin as fp32, for every head
        for (int j = 0; j < half; ++j) {
            c[j] = bf2f(cs[j]);
            sn[j] = bf2f(cs[half + j]);
        }
        for (int u = 0; u < n; ++u) rotate_staged(x[u], x[u] + half, c, sn, half);
#else
#if ITEMS > 1
        if (n == ITEMS) {
#pragma omp simd
            for (int j = 0; j < half; ++j) {
                const float c = bf2f(cs[j]), s = bf2f(cs[half + j]);
                for (int u = 0; u < ITEMS; ++u) {
                    const float x1 = bf2f(x[u][j]), x2 = bf2f(x[u][j + half]);
                    x[u][j] = f2bf(x1 * c - x2 * s);
                    x[u][j + half] = f2bf(x2 * c + x1 * s);
                }
            }
            continue;
        }
#endif
        for (int u = 0; u < n; ++u)
            for (int j = 0; j < half; ++j) rotate_pair(x[u], cs, j, half);
#endif
    }
}
