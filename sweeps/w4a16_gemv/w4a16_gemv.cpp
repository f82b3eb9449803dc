// w4a16_gemv.cpp -- CPU backend of w4a16_gemv (sweep.yaml): int4-weight x fp16-activation
// GEMV / skinny GEMM, fp32 accumulation:
//   y[m][n] = fp16(sum_g scales[n][g] * sum_{k in group g} x[m][k] * (q[n][k] - 8))
// qweight is int32 [N, K/8]: word j of row n packs k = 8j .. 8j+7, nibble e (bits 4e..4e+3)
// holding q[n][8j + e] in [0, 15]; scales is fp16 [N, K/128]; x is fp16 [M, K]; y is fp16
// [M, N]. Host pointers; fp16 values travel as their IEEE binary16 bit patterns, as torch
// stores them (exact conversions below, float -> half rounded to nearest even). x is widened
// to fp32 once per call into a scratch buffer (M * K floats); the scale multiplies each
// group's fp32 sum of x * (q - 8) once (error ~1e-6 relative), and y is rounded once.
//
// Baseline (no defines): one thread; per output channel and group of 128 weights, the 16
// words unpacked in scalar shifts into 128 fp32 values q - 8 (done once, used by every
// activation row), then per activation row a scalar dot product into one fp32 accumulator:
// a serial chain of dependent adds, which the compiler may not reorder without -ffast-math.
//
// Tuning knobs (-D defines, each with a default below):
//   NT    OpenMP threads (num_threads(NT)); output channels dealt out statically. NT=1 runs
//         serially.
//   VEC   memory.vectorized_access: each group unpacked nibble plane by nibble plane (nibble e
//         of all 16 words at once: one shift, mask, subtract and convert per 4 words, SSE2),
//         x permuted once per call into that plane order, and the dot run with VEC
//         independent fp32 partial sums (the GCC/Clang vector extension, SSE2 registers of 4),
//         summed in a fixed order: the dot becomes SIMD and the sum's dependency chain is VEC
//         times shorter (g++ 12 vectorized plain loops here across k, badly, once RPB > 1).
//         The order of the fp32 sum changes (error ~1e-6 relative, inside the band).
//   RPB   compute.thread_coarsening: RPB output channels per step, so each value of x loaded
//         serves RPB weight rows (RPB * VEC accumulators); a tail of N % RPB channels runs
//         one at a time.
#include <cstdint>
#include <cstring>
#include <vector>

typedef uint16_t half;  // IEEE binary16 bits (torch.float16)

#ifndef NT
#define NT 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef RPB
#define RPB 1
#endif

#define GROUP 128  // weights per scale
#define WORDS (GROUP / 8)  // int32 words per group

static_assert(VEC >= 1 && GROUP % VEC == 0, "VEC must divide the group of 128");
static_assert(RPB >= 1 && RPB <= 16, "RPB must be in [1, 16]");

// fp16 bits -> float, exact (subnormals, infinities and NaN included)
static inline float h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else {
        const float f = (float)m * 0x1p-24f;  // a subnormal (or zero): m * 2^-24, exact
        std::memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// float -> fp16 bits, round to nearest even (torch's rounding); NaN stays a quiet NaN
static inline uint16_t f2h(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520: infinity
    if (u >= 0x38800000u) {  // a normal half: rebias, round the 13 dropped bits to even
        u = u - (112u << 23) + 0xfffu + ((u >> 13) & 1u);
        return (uint16_t)(sign | (u >> 13));
    }
    // a subnormal half (or zero): adding 0.5 puts the float's ulp at 2^-24, the half's
    // subnormal step, so the hardware add rounds to nearest even; the low bits are the code
    float a;
    std::memcpy(&a, &u, 4);
    a += 0.5f;
    std::memcpy(&u, &a, 4);
    return (uint16_t)(sign | (u - 0x3f000000u));
}

// The index that x[k] of a group takes in the scratch copy: plain with VEC = 1, nibble-plane
// order (16 * e + j for k = 8j + e) with VEC > 1, matching unpack()
static inline int slot(int k) {
    return VEC > 1 ? 16 * (k & 7) + (k >> 3) : k;
}

// The group's 16 words as 128 fp32 values q - 8, in slot() order
static inline void unpack(const uint32_t* __restrict__ w, float* __restrict__ q) {
    if (VEC > 1) {
        for (int e = 0; e < 8; ++e)
            for (int j = 0; j < WORDS; ++j)
                q[16 * e + j] = (float)((int)((w[j] >> (4 * e)) & 0xfu) - 8);
    } else {
        for (int j = 0; j < WORDS; ++j)
            for (int e = 0; e < 8; ++e)
                q[8 * j + e] = (float)((int)((w[j] >> (4 * e)) & 0xfu) - 8);
    }
}

#if VEC > 1
// VEC fp32 lanes (the GCC/Clang vector extension, split into SSE2 registers of 4): the
// partial sums of a dot, lane v summing the products of k = v (mod VEC)
typedef float vecf __attribute__((vector_size(4 * VEC)));

static inline void load(vecf& v, const float* p) {
    std::memcpy(&v, p, sizeof v);
}
#endif

// R output channels from n (rows of qweight w, scales s): y[m][n + r] for every m
template <int R>
static void channels(const uint32_t* __restrict__ w, const half* __restrict__ s,
                     const float* __restrict__ xs, half* __restrict__ y, int M, int N, int K,
                     int n, float* __restrict__ acc) {
    const int G = K / GROUP, KW = K / 8;
    float q[R][GROUP];
    for (int i = 0; i < R * M; ++i) acc[i] = 0.0f;
    for (int g = 0; g < G; ++g) {
        for (int r = 0; r < R; ++r) unpack(w + (long long)(n + r) * KW + g * WORDS, q[r]);
        for (int m = 0; m < M; ++m) {
            const float* __restrict__ xg = xs + (long long)m * K + g * GROUP;
#if VEC > 1
            vecf p[R], xv, wv;
            for (int r = 0; r < R; ++r) p[r] = vecf{};
            for (int k = 0; k < GROUP; k += VEC) {
                load(xv, xg + k);  // one load of x for R weight rows
                for (int r = 0; r < R; ++r) {
                    load(wv, q[r] + k);
                    p[r] += xv * wv;
                }
            }
#else
            float p[R][1];
            for (int r = 0; r < R; ++r) p[r][0] = 0.0f;
            for (int k = 0; k < GROUP; ++k) {
                const float xv = xg[k];  // one load of x for R weight rows
                for (int r = 0; r < R; ++r) p[r][0] += xv * q[r][k];
            }
#endif
            for (int r = 0; r < R; ++r) {
                float sum = 0.0f;
                for (int v = 0; v < VEC; ++v) sum += p[r][v];
                acc[r * M + m] += sum * h2f(s[(long long)(n + r) * G + g]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < M; ++m) y[(long long)m * N + n + r] = f2h(acc[r * M + m]);
}

extern "C" void solve(const int32_t* qweight, const half* scales, const half* x, half* y, int M,
                      int N, int K) {
    if (M < 1 || N < 1 || K < GROUP || K % GROUP != 0) return;  // outside the sweep's sizes
    // x in fp32 (slot order within each group) and RPB * M accumulators per block of channels:
    // one scratch buffer kept across calls (solve is called from one thread at a time)
    static std::vector<float> scratch;
    const int nb = (N + RPB - 1) / RPB;
    const size_t nx = (size_t)M * K;
    scratch.resize(nx + (size_t)nb * RPB * M);
    float* xs = scratch.data();
    for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k)
            xs[(size_t)m * K + (k & -GROUP) + slot(k & (GROUP - 1))] = h2f(x[(size_t)m * K + k]);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(qweight);
    const int full = N / RPB;  // blocks of RPB channels; the rest one at a time
#pragma omp parallel for num_threads(NT) schedule(static) if (NT > 1)
    for (int b = 0; b < nb; ++b) {
        float* acc = xs + nx + (size_t)b * RPB * M;
        if (b < full) {
            channels<RPB>(w, scales, xs, y, M, N, K, b * RPB, acc);
        } else {
            for (int n = b * RPB; n < N; ++n) channels<1>(w, scales, xs, y, M, N, K, n, acc);
        }
    }
}
