// rmsnorm_residual.cpp -- CPU backend of rmsnorm_residual (sweep.yaml): per row of H bf16
// elements, residual <- bf16(x + residual) in place, then
// out = bf16(residual * weight / sqrt(mean(residual^2) + eps)), fp32 math. Host pointers;
// bf16 values travel as their 16-bit patterns (the high half of a float32), as torch stores
// them.
//
// Baseline (no defines): one thread, two scalar passes per row: the add (stored, and its
// square summed into one fp32 accumulator: a serial chain of dependent adds, which the
// compiler may not reorder without -ffast-math), then the scale.
//
// Tuning knobs (-D defines, each with a default below):
//   NT    OpenMP threads (num_threads(NT)); rows dealt out statically. NT=1 runs serially.
//   VEC   memory.vectorized_access: VEC elements per step with VEC independent fp32
//         partial sums, summed in a fixed order at the end of the row: the loops become
//         SIMD (the conversions are shifts and integer adds) and the sum's dependency chain
//         is VEC times shorter. The order of the fp32 sum changes (error ~1e-6 relative,
//         inside the band); the residual stays exact (one rounding per element).
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

static void norm_row(const bfloat16* __restrict__ x, bfloat16* __restrict__ r,
                     const bfloat16* __restrict__ w, bfloat16* __restrict__ out, float eps,
                     int H) {
    float acc[VEC];
    for (int v = 0; v < VEC; ++v) acc[v] = 0.0f;
    int i = 0;
    for (; i + VEC <= H; i += VEC) {
        for (int v = 0; v < VEC; ++v) {
            const uint16_t sb = f2bf(bf2f(x[i + v]) + bf2f(r[i + v]));
            r[i + v] = sb;
            const float s = bf2f(sb);
            acc[v] += s * s;
        }
    }
    for (; i < H; ++i) {  // the tail (H % VEC)
        const uint16_t sb = f2bf(bf2f(x[i]) + bf2f(r[i]));
        r[i] = sb;
        const float s = bf2f(sb);
        acc[0] += s * s;
    }
    float sum = 0.0f;
    for (int v = 0; v < VEC; ++v) sum += acc[v];
    const float inv = 1.0f / std::sqrt(sum / (float)H + eps);
    for (int j = 0; j < H; ++j) out[j] = f2bf(bf2f(r[j]) * inv * bf2f(w[j]));
}

extern "C" void solve(const bfloat16* x, bfloat16* residual, const bfloat16* weight,
                      bfloat16* out, float eps, int ROWS, int H) {
    if (ROWS <= 0 || H <= 0) return;
#pragma omp parallel for num_threads(NT) schedule(static) if (NT > 1)
    for (int row = 0; row < ROWS; ++row) {
        const long long o = (long long)row * H;
        norm_row(x + o, residual + o, weight, out + o, eps, H);
    }
}
