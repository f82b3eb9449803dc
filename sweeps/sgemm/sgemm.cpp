// sgemm.cpp -- CPU backend of C = A @ B, float32, row-major:
// A [M, K], B [K, N], C [M, N]. Host pointers.
//
// Baseline (no defines): one thread, the textbook i-j-k loop: one dot
// product per C element, B walked with stride N (a column), one serial
// add chain per element.
//
// Tuning knobs (all -D defines, each with a default below):
//   NT            OpenMP threads; rows (or row x column blocks) are dealt
//                 out statically. NT=1 runs serially.
//   RM            compute.thread_coarsening (register tile): RM rows of C at
//                 once, so every B element loaded feeds RM FMAs (and RM
//                 independent chains in the i-j-k order).
//   IKJ           memory.coalesced_access: i-k-j loop order: the inner loop
//                 walks a row of B and a row of C with unit stride (SIMD,
//                 no dependent chain); C is zeroed first.
//   BLOCKED, MB, NB, KB
//                 memory.tiling_smem (cache blocking, the CPU analogue of
//                 shared-memory tiles): C is computed in MB x NB blocks, K in
//                 KB slices, i-k-j inside a block so the B slice (KB x NB)
//                 stays in L1/L2 across the MB rows; OpenMP over the blocks.
// Any M, N, K (tails of MB, NB, KB, RM are handled).
#include <cstddef>

#ifndef NT
#define NT 1
#endif
#ifndef RM
#define RM 1
#endif
#ifndef IKJ
#define IKJ 0
#endif
#ifndef BLOCKED
#define BLOCKED 0
#endif
#ifndef MB
#define MB 64
#endif
#ifndef NB
#define NB 128
#endif
#ifndef KB
#define KB 64
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }

#if !IKJ && !BLOCKED
// i-j-k: R rows of C, column j, dot products over all of K.
template <int R>
static inline void rows_ijk(const float* A, const float* B, float* C, int N, int K, int i) {
    for (int j = 0; j < N; ++j) {
        float acc[R];
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
        for (int k = 0; k < K; ++k) {
            const float b = B[(size_t)k * N + j];
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) acc[r] += A[(size_t)(i + r) * K + k] * b;
        }
        for (int r = 0; r < R; ++r) C[(size_t)(i + r) * N + j] = acc[r];
    }
}
#else
// i-k-j: C[i..i+R, j0..j1) += A[i..i+R, k0..k1) @ B[k0..k1, j0..j1).
template <int R>
static inline void rows_ikj(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int N,
                            int K, int i, int k0, int k1, int j0, int j1) {
    for (int k = k0; k < k1; ++k) {
        float a[R];
        float* __restrict__ c[R];
        for (int r = 0; r < R; ++r) {
            a[r] = A[(size_t)(i + r) * K + k];
            c[r] = C + (size_t)(i + r) * N;
        }
        const float* __restrict__ b = B + (size_t)k * N;
        for (int j = j0; j < j1; ++j) {
            const float bj = b[j];
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) c[r][j] += a[r] * bj;
        }
    }
}

// Rows [i0, i1) in steps of RM, the remainder one by one.
static inline void block_ikj(const float* A, const float* B, float* C, int N, int K, int i0, int i1, int k0, int k1,
                             int j0, int j1) {
    int i = i0;
    for (; i + RM <= i1; i += RM) rows_ikj<RM>(A, B, C, N, K, i, k0, k1, j0, j1);
    for (; i < i1; ++i) rows_ikj<1>(A, B, C, N, K, i, k0, k1, j0, j1);
}
#endif

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
#if BLOCKED
    const int mblocks = (M + MB - 1) / MB, nblocks = (N + NB - 1) / NB;
#pragma omp parallel for collapse(2) schedule(static) num_threads(NT) if (NT > 1)
    for (int ib = 0; ib < mblocks; ++ib) {
        for (int jb = 0; jb < nblocks; ++jb) {
            const int i0 = ib * MB, i1 = imin(i0 + MB, M);
            const int j0 = jb * NB, j1 = imin(j0 + NB, N);
            for (int i = i0; i < i1; ++i)
                for (int j = j0; j < j1; ++j) C[(size_t)i * N + j] = 0.0f;
            for (int k0 = 0; k0 < K; k0 += KB) block_ikj(A, B, C, N, K, i0, i1, k0, imin(k0 + KB, K), j0, j1);
        }
    }
#elif IKJ
    const int nsteps = (M + RM - 1) / RM;
#pragma omp parallel for schedule(static) num_threads(NT) if (NT > 1)
    for (int s = 0; s < nsteps; ++s) {
        const int i0 = s * RM, i1 = imin(i0 + RM, M);
        for (int i = i0; i < i1; ++i)
            for (int j = 0; j < N; ++j) C[(size_t)i * N + j] = 0.0f;
        block_ikj(A, B, C, N, K, i0, i1, 0, K, 0, N);
    }
#else
    const int nsteps = (M + RM - 1) / RM;
#pragma omp parallel for schedule(static) num_threads(NT) if (NT > 1)
    for (int s = 0; s < nsteps; ++s) {
        const int i = s * RM;
        if (i + RM <= M) rows_ijk<RM>(A, B, C, N, K, i);
        else
            for (int r = i; r < M; ++r) rows_ijk<1>(A, B, C, N, K, r);
    }
#endif
}
