// lm_head_top1.cpp -- CPU backend of lm_head_top1 (sweep.yaml): greedy decoding's last step,
// the LM-head GEMV fused with the argmax. For each of B hidden vectors h[b] (bf16, [B, K]) and
// the bf16 weight W ([V, K], nn.Linear's layout: one row per vocabulary entry), fp32 math:
//   logit[b][v] = sum_k W[v][k] * h[b][k]
//   idx[b] = the first v with the largest logit (torch.max / torch.argmax's rule: the first
//   index wins a tie; a NaN logit counts as the largest, as in torch), val[b] = that logit.
// Host pointers; bf16 values travel as their 16-bit patterns (the high half of a float32), as
// torch stores them.
//
// Baseline (no defines): one thread, two passes, as the CUDA baseline. The GEMV walks the rows
// of W in order, a plain scalar loop over k with one fp32 accumulator per batch row (B serial
// chains of dependent adds, which the compiler may not reorder without -ffast-math), each
// logit stored to a static buffer; then a scalar scan of each batch row's V logits.
//
// Tuning knobs (-D defines, each with a default below):
//   NT    OpenMP threads (num_threads(NT)) over the rows of W (groups of RPB rows), dealt out
//         statically; the argmax scan after them stays serial (B * V floats, ~1/K of the
//         GEMV's work). NT=1 runs serially.
//   VEC   memory.vectorized_access: VEC elements of a row per step, loaded as one VEC-lane
//         vector (GCC vector extensions: the bf16 patterns widened and shifted, SSE's 4-lane
//         registers at -O3's default target) into VEC independent fp32 partial sums per
//         (row, batch row), summed lane by lane in a fixed order at the end: each dependency
//         chain is VEC times shorter. The order of the fp32 sum changes (error ~1e-6
//         relative, far inside the 2% gap inputs() leaves between the top two logits, and
//         inside val's band); K % VEC elements go the scalar way. A power of two up to 16.
//   RPB   compute.thread_coarsening: a step covers RPB rows of W at once (RPB * B * VEC
//         accumulators): each h element, loaded and converted once, serves RPB rows, and RPB
//         independent W streams are in flight. A last group short of RPB rows re-reads the
//         last row for the missing ones and stores no logit for them.
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

#define MAX_B 4         // batch rows (hidden vectors) per call
#define MAX_V 262144    // vocabulary entries (the static logits buffer: 4 MB)

#if (VEC & (VEC - 1)) != 0 || VEC < 1 || VEC > 16 || RPB < 1
#error "VEC must be a power of two in [1, 16], RPB at least 1"
#endif

static float g_logits[MAX_B * MAX_V];  // [B, V]: the GEMV's output, the argmax's input

static inline float bf2f(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

#if VEC > 1
// VEC lanes (GCC vector extensions): VEC fp32 partial sums, VEC bf16 patterns
typedef float vf __attribute__((vector_size(4 * VEC)));
typedef uint32_t vu __attribute__((vector_size(4 * VEC)));
typedef uint16_t vh __attribute__((vector_size(2 * VEC)));

// VEC bf16 values from p (any alignment) into f as fp32 lanes: widened, shifted into the high
// half (out by reference: a by-value vector wider than SSE's would draw g++'s ABI warning)
static inline void load_vec(const bfloat16* p, vf& f) {
    vh raw;
    std::memcpy(&raw, p, sizeof raw);
    const vu u = __builtin_convertvector(raw, vu) << 16;
    std::memcpy(&f, &u, sizeof f);
}
#endif

// The logits of every row of W for NB batch rows, into g_logits.
template <int NB>
static void gemv(const bfloat16* W, const bfloat16* h, int V, int K) {
    const long long groups = ((long long)V + RPB - 1) / RPB;
#pragma omp parallel for num_threads(NT) schedule(static) if (NT > 1)
    for (long long g = 0; g < groups; ++g) {
        const long long r0 = g * RPB;
        const bfloat16* w[RPB];
        for (int r = 0; r < RPB; ++r)
            w[r] = W + (r0 + r < V ? r0 + r : (long long)V - 1) * K;
        float acc[RPB][NB];  // the baseline's accumulators, or the tail's
        for (int r = 0; r < RPB; ++r)
            for (int b = 0; b < NB; ++b) acc[r][b] = 0.0f;
        int k = 0;
#if VEC > 1
        vf vacc[RPB][NB];
        for (int r = 0; r < RPB; ++r)
            for (int b = 0; b < NB; ++b) vacc[r][b] = vf{};
        for (; k + VEC <= K; k += VEC) {
            for (int b = 0; b < NB; ++b) {
                vf x, y;
                load_vec(h + (long long)b * K + k, x);
                for (int r = 0; r < RPB; ++r) {
                    load_vec(w[r] + k, y);
                    vacc[r][b] += y * x;
                }
            }
        }
        for (int r = 0; r < RPB; ++r)
            for (int b = 0; b < NB; ++b)
                for (int e = 0; e < VEC; ++e) acc[r][b] += vacc[r][b][e];  // lanes in order
#endif
        for (; k < K; ++k) {  // every element (VEC 1), or the tail (K % VEC)
            for (int b = 0; b < NB; ++b) {
                const float x = bf2f(h[(long long)b * K + k]);
                for (int r = 0; r < RPB; ++r) acc[r][b] += bf2f(w[r][k]) * x;
            }
        }
        for (int r = 0; r < RPB && r0 + r < V; ++r)
            for (int b = 0; b < NB; ++b) g_logits[(long long)b * V + r0 + r] = acc[r][b];
    }
}

extern "C" void solve(const bfloat16* W, const bfloat16* h, int64_t* idx, float* val, int B,
                      int V, int K) {
    if (B < 1 || B > MAX_B || V < 1 || V > MAX_V || K < 1) return;  // restrictions
    switch (B) {
        case 1: gemv<1>(W, h, V, K); break;
        case 2: gemv<2>(W, h, V, K); break;
        case 3: gemv<3>(W, h, V, K); break;
        default: gemv<4>(W, h, V, K); break;
    }
    for (int b = 0; b < B; ++b) {
        const float* lg = g_logits + (long long)b * V;
        float bv = lg[0];
        int bi = 0;
        for (int v = 1; v < V && bv == bv; ++v) {  // a NaN found ends the scan: it stays
            if (lg[v] > bv || lg[v] != lg[v]) {    // strictly larger: the first index stays
                bv = lg[v];
                bi = v;
            }
        }
        idx[b] = bi;
        val[b] = bv;
    }
}
