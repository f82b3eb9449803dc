// vector_add.cpp -- CPU backend of out[i] = x[i] + y[i], float32.
// Bandwidth-bound: 12 bytes per element, no reuse. Host pointers.
//
// Baseline (no defines): one thread, a plain scalar loop over CHUNK-sized
// chunks, no __restrict__ (the compiler must check aliasing at run time).
//
// Tuning knobs (all -D defines, each with a default below):
//   NT            OpenMP threads (num_threads(NT)); chunks are dealt out
//                 statically, CHUNK elements each. NT=1 runs serially.
//   CHUNK         elements per chunk (the unit of work of one thread).
//   UNROLL        compute.ilp_unroll: explicit UNROLL-wide loop body, all
//                 loads before the stores, __restrict__ pointers.
//   VEC           memory.vectorized_access: GCC vector extension of VEC
//                 floats (vector_size(4*VEC)), loaded/stored through
//                 __builtin_memcpy so any alignment is safe; scalar tail.
//   STREAM_STORES, PF_DIST
//                 memory.cache_policy: non-temporal stores for out
//                 (movntps, i.e. _mm_stream_ps, on x86 with SSE after a scalar prologue that
//                 aligns out to 16 bytes, plain stores elsewhere) and, when
//                 PF_DIST > 0, __builtin_prefetch of x and y PF_DIST floats
//                 ahead, one per 64-byte line.
// The knobs compose: UNROLL units of W floats per loop iteration, W = VEC,
// or 4 with streaming stores, else 1.
#include <cstddef>
#include <cstdint>
// No <immintrin.h>: it alone costs ~1 s of compile time per candidate. The two
// SSE operations needed are GCC builtins: movntps (_mm_stream_ps) and sfence.
#if defined(__SSE2__)
typedef float v4sf_t __attribute__((vector_size(16)));
#endif

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vector types in static helpers only

#ifndef NT
#define NT 1
#endif
#ifndef CHUNK
#define CHUNK 65536
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef STREAM_STORES
#define STREAM_STORES 0
#endif
#ifndef PF_DIST
#define PF_DIST 0
#endif

// One "unit" is W floats: a GCC vector of VEC floats, 4 floats (one SSE
// register) for streaming stores, else a scalar.
#if VEC > 1
#define W VEC
#elif STREAM_STORES && defined(__SSE2__)
#define W 4
#else
#define W 1
#endif
#define STEP (W * UNROLL)  // floats per loop iteration

#if W > 1
typedef float unit_t __attribute__((vector_size(4 * W)));
#else
typedef float unit_t;
#endif

#if VEC > 1 || UNROLL > 1 || STREAM_STORES || PF_DIST > 0
#define RESTRICT __restrict__
#else
#define RESTRICT  // baseline: no aliasing promise
#endif

static inline unit_t ld(const float* RESTRICT p) {
    unit_t v;
    __builtin_memcpy(&v, p, sizeof(v));  // unaligned-safe; compiles to one (v)movups
    return v;
}

static inline void st(float* RESTRICT p, unit_t v) {
#if STREAM_STORES && defined(__SSE2__)
    // p is 16-byte aligned here (see the prologue in add_range), W % 4 == 0.
    for (int q = 0; q < W; q += 4) {
        v4sf_t t;
        __builtin_memcpy(&t, reinterpret_cast<const float*>(&v) + q, 16);
        __builtin_ia32_movntps(p + q, t);  // _mm_stream_ps
    }
#else
    __builtin_memcpy(p, &v, sizeof(v));
#endif
}

// Elements [begin, end) of one chunk.
static inline void add_range(const float* RESTRICT x, const float* RESTRICT y, float* RESTRICT out,
                             long begin, long end) {
    long i = begin;
#if STREAM_STORES && defined(__SSE2__)
    // scalar prologue until out + i is 16-byte aligned (_mm_stream_ps needs it)
    for (; i < end && (reinterpret_cast<uintptr_t>(out + i) & 15u); ++i) out[i] = x[i] + y[i];
#endif
    for (; i + STEP <= end; i += STEP) {
#if PF_DIST > 0
        // one prefetch per 64-byte line, PF_DIST floats ahead
        if (((i - begin) & 15) < STEP) {
            for (int p = 0; p < STEP; p += 16) {
                __builtin_prefetch(x + i + p + PF_DIST, 0, 0);
                __builtin_prefetch(y + i + p + PF_DIST, 0, 0);
            }
        }
#endif
        unit_t a[UNROLL], b[UNROLL];
#pragma GCC unroll 16
        for (int u = 0; u < UNROLL; ++u) {
            a[u] = ld(x + i + u * W);
            b[u] = ld(y + i + u * W);
        }
#pragma GCC unroll 16
        for (int u = 0; u < UNROLL; ++u) st(out + i + u * W, a[u] + b[u]);
    }
    for (; i < end; ++i) out[i] = x[i] + y[i];  // tail
#if STREAM_STORES && defined(__SSE2__)
    __builtin_ia32_sfence();  // _mm_sfence: order this thread's non-temporal stores
#endif
}

extern "C" void solve(const float* x, const float* y, float* out, int N) {
    const long n = N;
    const long nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) num_threads(NT) if (NT > 1)
    for (long c = 0; c < nchunks; ++c) {
        const long begin = c * (long)CHUNK;
        const long end = begin + CHUNK < n ? begin + CHUNK : n;
        add_range(x, y, out, begin, end);
    }
}
