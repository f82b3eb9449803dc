// decode_attention.cpp -- CPU backend of decode_attention (sweep.yaml): one decoding step of
// multi-head attention over a contiguous KV cache. For each sequence b and head h, one query
// q[b][h] (bf16 [B, H, D]) against the head's L cached keys and values K[b][h], V[b][h] (bf16
// [B, H, L, D], row-major), fp32 math:
//   s[j] = (q . K[j]) / sqrt(D),  p = softmax(s),  o[b][h] = bf16(sum_j p[j] * V[j])
// Host pointers; bf16 values travel as their 16-bit patterns (the high half of a float32), as
// torch stores them. Any D >= 1 (the sweep's is 128).
//
// Baseline (no defines): one thread, the CUDA kernel's three passes per (b, h) as plain scalar
// loops: q times 1 / sqrt(D) widened to fp32 once; pass 1 scores every key into a buffer with
// one fp32 accumulator per key (a serial chain of D dependent adds, which the compiler may
// not reorder without -ffast-math) and takes their max M; pass 2 overwrites them with
// p = exp(s - M) and sums them; pass 3 adds p[j] * V[j] into D fp32 sums and o = sum / l is
// rounded to bf16 (round to nearest even, as torch rounds).
//
// Tuning knobs (-D defines, each with a default below):
//   NT      OpenMP threads (num_threads(NT)); the (b, h, chunk) work items dealt out
//           statically. NT=1 runs serially.
//   VEC     memory.vectorized_access: pass 1's dot products take VEC elements per step into
//           VEC independent fp32 partial sums, summed in a fixed order at the end of the key:
//           the loop becomes SIMD (the bf16 widening is a shift) and the dependency chain is
//           VEC times shorter. The order of the fp32 sum changes (~1e-6 relative, far inside
//           the band).
//   SPLITS  latency.split_k (flash-decoding): the context is split into SPLITS chunks of
//           ceil(L / SPLITS) keys, B * H * SPLITS independent work items. Each takes its
//           chunk's max m, sum l and unnormalized sum of p * V into a workspace; a second
//           loop rescales the chunks of each (b, h) to their common max (exp(m - M)), adds
//           them up and writes o. fp32 sums in another order: results differ from SPLITS = 1
//           in the last bits. An empty chunk (SPLITS > L) gives (-inf, 0) and is skipped.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

typedef uint16_t bfloat16;  // torch.bfloat16's bits

#ifndef NT
#define NT 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef SPLITS
#define SPLITS 1
#endif

#if VEC < 1 || SPLITS < 1
#error "VEC and SPLITS must be at least 1"
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

// sq . k for one key row of D bf16 (sq: q * scale in fp32).
static inline float dot(const float* __restrict__ sq, const bfloat16* __restrict__ k, int D) {
    float acc[VEC];
    for (int v = 0; v < VEC; ++v) acc[v] = 0.0f;
    int d = 0;
    for (; d + VEC <= D; d += VEC)
        for (int v = 0; v < VEC; ++v) acc[v] += sq[d + v] * bf2f(k[d + v]);
    for (; d < D; ++d) acc[0] += sq[d] * bf2f(k[d]);  // the tail (D % VEC)
    float s = 0.0f;
    for (int v = 0; v < VEC; ++v) s += acc[v];
    return s;
}

// One chunk of n keys of one head: its max score *m, its sum of p = exp(s - m) *l and the
// unnormalized sum of p[j] * V[j] into acc[D]. p: n floats of scratch. n == 0: (-inf, 0, 0).
static void chunk(const float* __restrict__ sq, const bfloat16* __restrict__ K,
                  const bfloat16* __restrict__ V, float* __restrict__ p, float* __restrict__ acc,
                  float* m, float* l, int n, int D) {
    float M = -INFINITY;
    for (int j = 0; j < n; ++j) {  // pass 1: the scores and their max
        const float s = dot(sq, K + (long long)j * D, D);
        p[j] = s;
        M = std::fmax(M, s);
    }
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) {  // pass 2: p = exp(s - M) and their sum
        const float pj = std::exp(p[j] - M);
        p[j] = pj;
        sum += pj;
    }
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;
    for (int j = 0; j < n; ++j) {  // pass 3: sum_j p[j] * V[j]
        const bfloat16* vj = V + (long long)j * D;
        const float pj = p[j];
        for (int d = 0; d < D; ++d) acc[d] += pj * bf2f(vj[d]);
    }
    *m = M;
    *l = sum;
}

extern "C" void solve(const bfloat16* q, const bfloat16* k, const bfloat16* v, bfloat16* o,
                      int B, int H, int L, int D) {
    if (B < 1 || H < 1 || L < 1 || D < 1) return;
    const int BH = B * H;
    const int clen = (L + SPLITS - 1) / SPLITS;  // keys per chunk
    const float scale = 1.0f / std::sqrt((float)D);
    // per (b, h, chunk): D unnormalized sums, then (max, sum)
    std::vector<float> ws((size_t)BH * SPLITS * (D + 2));
#pragma omp parallel for num_threads(NT) schedule(static) if (NT > 1)
    for (int item = 0; item < BH * SPLITS; ++item) {
        const int bh = item / SPLITS, split = item % SPLITS;
        const int j0 = split * clen < L ? split * clen : L;
        const int n = (j0 + clen < L ? j0 + clen : L) - j0;
        std::vector<float> sq(D), p(n > 0 ? n : 1);
        for (int d = 0; d < D; ++d) sq[d] = bf2f(q[(long long)bh * D + d]) * scale;
        const long long off = ((long long)bh * L + j0) * D;
        float* part = ws.data() + (size_t)item * (D + 2);
        chunk(sq.data(), k + off, v + off, p.data(), part, part + D, part + D + 1, n, D);
        if (SPLITS == 1)
            for (int d = 0; d < D; ++d) o[(long long)bh * D + d] = f2bf(part[d] / part[D + 1]);
    }
    if (SPLITS == 1) return;
#pragma omp parallel for num_threads(NT) schedule(static) if (NT > 1)
    for (int bh = 0; bh < BH; ++bh) {  // the chunks rescaled to their common max and summed
        const float* parts = ws.data() + (size_t)bh * SPLITS * (D + 2);
        float M = -INFINITY;
        for (int s = 0; s < SPLITS; ++s) M = std::fmax(M, parts[s * (D + 2) + D]);
        std::vector<float> a(D, 0.0f);
        float l = 0.0f;
        for (int s = 0; s < SPLITS; ++s) {
            const float* part = parts + s * (D + 2);
            if (part[D + 1] > 0.0f) {  // not an empty chunk
                const float w = std::exp(part[D] - M);
                l += w * part[D + 1];
                for (int d = 0; d < D; ++d) a[d] += w * part[d];
            }
        }
        for (int d = 0; d < D; ++d) o[(long long)bh * D + d] = f2bf(a[d] / l);
    }
}
