// reduction.cpp -- CPU backend of out[0] = sum(x[0..N)), float32.
// Host pointers. Without -ffast-math the compiler may not reorder a float
// sum, so the baseline is one serial add chain per chunk: latency-bound
// (one add per FP-add latency), far from the memory bandwidth.
//
// Baseline (no defines): one thread, CHUNK-element chunks, each summed by a
// single float accumulator, chunk sums added in order.
//
// Tuning knobs (all -D defines, each with a default below):
//   NT            OpenMP threads: #pragma omp parallel for reduction(+) over
//                 the chunks (static schedule). NT=1 runs serially.
//   CHUNK         elements per chunk.
//   ACC           compute.ilp_unroll: ACC independent accumulators per chunk
//                 (the loop is unrolled ACC-wide), combined pairwise at the
//                 end: ACC add chains in flight.
//   VEC           memory.vectorized_access: accumulators are GCC vectors of
//                 VEC floats (vector_size(4*VEC)), loaded through
//                 __builtin_memcpy (any alignment), summed lane by lane at
//                 the end of the chunk; scalar tail.
// The knobs compose: ACC accumulators of VEC lanes each.
#include <cstddef>

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vector types in static helpers only

#ifndef NT
#define NT 1
#endif
#ifndef CHUNK
#define CHUNK 65536
#endif
#ifndef ACC
#define ACC 1
#endif
#ifndef VEC
#define VEC 1
#endif

#if (ACC & (ACC - 1)) != 0 || (VEC & (VEC - 1)) != 0
#error "ACC and VEC must be powers of two"
#endif

#if VEC > 1
typedef float acc_t __attribute__((vector_size(4 * VEC)));
#else
typedef float acc_t;
#endif

static inline float lanes_sum(acc_t v) {
#if VEC > 1
    float s = 0.0f;
    for (int l = 0; l < VEC; ++l) s += v[l];
    return s;
#else
    return v;
#endif
}

static inline float sum_range(const float* __restrict__ x, long begin, long end) {
    acc_t acc[ACC];
    for (int a = 0; a < ACC; ++a) acc[a] = acc_t{};
    long i = begin;
    for (; i + VEC * ACC <= end; i += VEC * ACC) {
#pragma GCC unroll 16
        for (int a = 0; a < ACC; ++a) {
            acc_t v;
            __builtin_memcpy(&v, x + i + a * VEC, sizeof(v));
            acc[a] += v;
        }
    }
    // combine the accumulators pairwise, then the lanes
    for (int w = ACC / 2; w > 0; w /= 2)
        for (int a = 0; a < w; ++a) acc[a] += acc[a + w];
    float s = lanes_sum(acc[0]);
    for (; i < end; ++i) s += x[i];  // tail
    return s;
}

extern "C" void solve(const float* x, float* out, int N) {
    const long n = N;
    const long nchunks = (n + CHUNK - 1) / CHUNK;
    float total = 0.0f;
#pragma omp parallel for schedule(static) reduction(+ : total) num_threads(NT) if (NT > 1)
    for (long c = 0; c < nchunks; ++c) {
        const long begin = c * (long)CHUNK;
        const long end = begin + CHUNK < n ? begin + CHUNK : n;
        total += sum_range(x, begin, end);
    }
    out[0] = total;
}
