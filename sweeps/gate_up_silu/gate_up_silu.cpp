// gate_up_silu.cpp -- CPU backend of gate_up_silu (sweep.yaml): the gate and up projections of
// x (bf16 [M, K]) fused with SiLU(gate) * up, bf16 out, fp32 math:
//   g[m][n] = sum_k x[m][k] * Wg[n][k],  u[m][n] = sum_k x[m][k] * Wu[n][k]
//   y[m][n] = bf16(g / (1 + exp(-g)) * u)
// Wg, Wu are bf16 [N, K] (nn.Linear's layout). Host pointers; bf16 values travel as their
// 16-bit patterns (the high half of a float32), as torch stores them; y is rounded once.
//
// Baseline (no defines): one thread; per output channel n and activation row m, one scalar
// pass over k converting x, Wg and Wu to fp32 (shifts) into two fp32 accumulators g and u:
// two serial chains of dependent adds, which the compiler may not reorder without
// -ffast-math; then SiLU(g) * u (expf) and one rounding to bf16.
//
// Tuning knobs (-D defines, each with a default below):
//   NT    OpenMP threads (num_threads(NT)); output channels dealt out statically. NT=1 runs
//         serially.
//   VEC   memory.vectorized_access: VEC elements per step with VEC independent fp32 partial
//         sums per dot (the GCC/Clang vector extension, split into SSE2 registers of 4),
//         summed in a fixed order at the end: the bf16 -> fp32 widening (a shift) and the
//         multiply-adds become SIMD and each sum's dependency chain is VEC times shorter. The
//         order of the fp32 sums changes (error ~1e-6 relative, inside the band). A tail of
//         K % VEC elements runs scalar.
//   RPB   compute.thread_coarsening: RPB output channels per step, so each value of x loaded
//         and widened serves 2 * RPB weight rows (2 * RPB * VEC accumulators); a tail of
//         N % RPB channels runs one at a time.
#include <cmath>
#include <cstdint>
#include <cstring>

typedef uint16_t bfloat16;  // torch.bfloat16's bits

#ifndef NT
#define NT 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef RPB
#define RPB 1
#endif

static_assert(VEC == 1 || VEC == 4 || VEC == 8 || VEC == 16, "VEC must be 1, 4, 8 or 16");
static_assert(RPB >= 1 && RPB <= 8, "RPB must be in [1, 8]");

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

#if VEC > 1
// VEC fp32 lanes and the VEC bf16 patterns they widen from: lane v sums the products of
// k = v (mod VEC)
typedef float vecf __attribute__((vector_size(4 * VEC)));
typedef uint32_t vecu __attribute__((vector_size(4 * VEC)));
typedef uint16_t vech __attribute__((vector_size(2 * VEC)));

// VEC bf16 values from p, widened to fp32 (each pattern moved to the high half of a word)
static inline void load(vecf& out, const bfloat16* p) {
    vech h;
    std::memcpy(&h, p, sizeof h);
    const vecu u = __builtin_convertvector(h, vecu) << 16;
    std::memcpy(&out, &u, sizeof out);
}
#endif

// R output channels from n: y[m][n + r] for every m
template <int R>
static void channels(const bfloat16* __restrict__ x, const bfloat16* __restrict__ Wg,
                     const bfloat16* __restrict__ Wu, bfloat16* __restrict__ y, int M, int N,
                     int K, int n) {
    const bfloat16* wg[R];
    const bfloat16* wu[R];
    for (int r = 0; r < R; ++r) {
        wg[r] = Wg + (long long)(n + r) * K;
        wu[r] = Wu + (long long)(n + r) * K;
    }
    for (int m = 0; m < M; ++m) {
        const bfloat16* __restrict__ xm = x + (long long)m * K;
        float g[R], u[R];
        int k = 0;
#if VEC > 1
        vecf pg[R], pu[R], xv, wv;
        for (int r = 0; r < R; ++r) pg[r] = pu[r] = vecf{};
        for (; k + VEC <= K; k += VEC) {
            load(xv, xm + k);  // one load of x for 2 * R weight rows
            for (int r = 0; r < R; ++r) {
                load(wv, wg[r] + k);
                pg[r] += xv * wv;
                load(wv, wu[r] + k);
                pu[r] += xv * wv;
            }
        }
        for (int r = 0; r < R; ++r) {
            g[r] = u[r] = 0.0f;
            for (int v = 0; v < VEC; ++v) {
                g[r] += pg[r][v];
                u[r] += pu[r][v];
            }
        }
#else
        for (int r = 0; r < R; ++r) g[r] = u[r] = 0.0f;
#endif
        for (; k < K; ++k) {  // VEC = 1: every k; else the tail (K % VEC)
            const float xv = bf2f(xm[k]);  // one load of x for 2 * R weight rows
            for (int r = 0; r < R; ++r) {
                g[r] += xv * bf2f(wg[r][k]);
                u[r] += xv * bf2f(wu[r][k]);
            }
        }
        for (int r = 0; r < R; ++r)
            y[(long long)m * N + n + r] = f2bf(g[r] / (1.0f + std::exp(-g[r])) * u[r]);
    }
}

extern "C" void solve(const bfloat16* x, const bfloat16* Wg, const bfloat16* Wu, bfloat16* y,
                      int M, int N, int K) {
    if (M < 1 || N < 1 || K < 1) return;
    const int nb = (N + RPB - 1) / RPB, full = N / RPB;  // blocks of RPB channels, then the rest
#pragma omp parallel for num_threads(NT) schedule(static) if (NT > 1)
    for (int b = 0; b < nb; ++b) {
        if (b < full) {
            channels<RPB>(x, Wg, Wu, y, M, N, K, b * RPB);
        } else {
            for (int n = b * RPB; n < N; ++n) channels<1>(x, Wg, Wu, y, M, N, K, n);
        }
    }
}
