// w8a8_gemm.cu -- W8A8 GEMM (SmoothQuant-style int8 activations and weights), int32
// accumulation, the scales applied once at the end, fp16 out:
//   y[m][n] = fp16( (sum_k A[m][k] * W[n][k]) * sa[m] * sw[n] )
// A is int8 [M, K] (per-token quantized activations) with fp32 scales sa [M]; W is int8 [N, K]
// (nn.Linear's layout: K contiguous in both, the "TN" GEMM int8 tensor cores want) with
// per-output-channel fp32 scales sw [N]; y is fp16 [M, N]. The int32 sums are exact (|sum| <=
// K * 127^2 < 2^31 for K < 133000): only the scaling in fp32 and the fp16 rounding lose bits.
//
// Baseline (no defines): CUDA cores, one thread per output y[m][n] (THREADS threads along n,
// one row m per grid row), a loop over k of scalar int8 loads of A's row and W's row (each
// thread walks its own weight row: uncoalesced) and an int32 multiply-add; the scales and the
// fp16 rounding in the epilogue.
//
// Tuning knobs (all -D defines, each with a default below):
//   THREADS      threads per block (launch config). CUDA-core paths: output columns per block;
//                tensor-core path: THREADS / 32 warps.
//   TM           compute.thread_coarsening (CUDA-core paths): TM rows m per thread (TM int32
//                accumulators), so each weight byte loaded serves TM rows (TM = 16: the whole
//                decode batch of M = 16 per weight read).
//   VEC          memory.vectorized_access: VEC = 16 moves 16-byte packs (LDG.128) of A and W
//                and consumes them as packed words with __dp4a (4 int8 products and the sum in
//                one instruction; unpacking them to bytes would cost 4x). Tiled path: 16-byte
//                global -> shared copies and packs read from shared memory. Needs K % 16 == 0.
//   TILED, BK    memory.tiling_smem: the block's tile of A (TM rows) and W (THREADS rows, or
//                the tensor-core tile) staged through shared memory BK bytes of k at a time,
//                copied with coalesced 4-byte (16 with VEC) words. Needs K % (BK * SPLITK) == 0.
//   TC, BM       compute.tensor_core (implies TILED): mma.sync.aligned.m16n8k32 s8 x s8 -> s32
//                (sm_80+, so sm_87 Orin and sm_90 alike; no wgmma). Block tile BM x 128 x BK,
//                warps WM x WN (WM = 1 for BM = 16, else 2), each a (BM / WM) x (128 / WN) tile
//                of 16 x 8 fragments; A and W tiles K-contiguous in shared memory, fragments
//                read as 32-bit words by the PTX fragment layout, global -> shared by 16-byte
//                words. Needs N % 128 == 0; rows past M are zero-filled, never stored.
//   PAD          memory.bank_conflict: shared rows padded by PAD (16) bytes. Tensor-core
//                fragment reads (8 rows x 4 words at a 64-byte stride share 2 bank groups:
//                4-way; 8-way at BK = 128) and ldmatrix become conflict-free at a stride of
//                BK + 16 bytes (versions/emulate_fragments.py counts them); the CUDA-core
//                tiled path's per-thread rows go from 16-way to 4-way (byte reads) and from
//                4-way to none (16-byte reads, 8 threads a phase).
//   USE_CP_ASYNC, STAGES  memory.multi_stage_pipeline and latency.async_pipeline (one edit,
//                sm_80+): a ring of STAGES shared-memory tiles filled with cp.async (4 or 16
//                bytes; zero-fill past M and N), cp.async.wait_group STAGES - 2, one barrier per
//                k tile: STAGES - 1 tiles in flight while one is consumed.
//   LDSM         memory.ldmatrix (tensor-core path): fragments loaded with
//                ldmatrix.sync.aligned.m8n8.x4.b16 (an 8 x 16-byte matrix per lane octet is
//                exactly an s8 A/B fragment register): 1 instruction per 16 x 32 A fragment and
//                per two 8 x 32 B fragments, instead of 4 and 4 LDS.32.
//   SPLITK       latency.split_k: gridDim.z = SPLITK slices of K; each block adds its int32
//                partial sums into a zeroed int32 workspace with atomicAdd (integer sums:
//                exact and order-independent, so the result is deterministic) and the last
//                block of each output tile (a per-tile arrival counter) takes the totals with
//                atomicExch(.., 0) (the workspace is zero again for the next call), scales and
//                stores them. Workspace: M * N <= 2^20 int32 (4 MB, static) and at most 2^14
//                output tiles; K % (SPLITK * 16) == 0 (tiled: BK * SPLITK).
// solve() refuses sizes a build cannot run (the restrictions in sweep.yaml), says why on
// stderr and writes nothing.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>

#ifndef THREADS
#define THREADS 128
#endif
#ifndef TM
#define TM 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef TC
#define TC 0
#endif
#ifndef TILED
#define TILED 0
#endif
#ifndef BM
#define BM 64
#endif
#ifndef BK
#define BK 64
#endif
#ifndef PAD
#define PAD 0
#endif
#ifndef USE_CP_ASYNC
#define USE_CP_ASYNC 0
#endif
#ifndef STAGES
#define STAGES 1
#endif
#ifndef LDSM
#define LDSM 0
#endif
#ifndef SPLITK
#define SPLITK 1
#endif

#define TC_BN 128         // the tensor-core block tile's columns
#define WS_ELEMS (1 << 20)  // split-K workspace: int32 partial sums, M * N at most
#define CNT_ELEMS (1 << 14) // split-K arrival counters: output tiles at most

#if THREADS % 32 != 0 || THREADS < 64 || THREADS > 1024
#error "THREADS must be a multiple of 32 in [64, 1024]"
#endif
#if VEC != 1 && VEC != 16
#error "VEC must be 1 or 16"
#endif
#if TM < 1 || TM > 32
#error "TM must be in [1, 32]"
#endif
#if BK % 32 != 0 || PAD % 16 != 0
#error "BK must be a multiple of 32 and PAD of 16 (16-byte shared rows)"
#endif
#if TC && !TILED
#error "TC needs TILED (the tensor-core path stages its tiles through shared memory)"
#endif
#if LDSM && !TC
#error "LDSM needs TC (ldmatrix loads tensor-core fragments)"
#endif
#if USE_CP_ASYNC && (!TILED || STAGES < 2)
#error "USE_CP_ASYNC needs TILED and STAGES >= 2"
#endif
#if !USE_CP_ASYNC && STAGES != 1
#error "STAGES > 1 needs USE_CP_ASYNC"
#endif
#if SPLITK < 1
#error "SPLITK must be >= 1"
#endif

#define LDS_ROW (BK + PAD)  // bytes per shared row

#if TC
#define WARPS (THREADS / 32)
#define WM_WARPS (BM == 16 ? 1 : 2)          // warps along M
#define WN_WARPS (WARPS / WM_WARPS)          // warps along N
#define WTM (BM / WM_WARPS)                  // warp tile rows
#define WTN (TC_BN / WN_WARPS)               // warp tile columns
#if WARPS % WM_WARPS != 0 || WTM % 16 != 0 || WTN % 8 != 0 || WTN < 8
#error "the tensor-core tile needs whole 16 x 8 fragments per warp"
#endif
#define TILE_ROWS_A BM
#define TILE_ROWS_W TC_BN
#elif TILED
#define TILE_ROWS_A TM
#define TILE_ROWS_W THREADS
#endif

#if TILED
#define STAGE_BYTES ((TILE_ROWS_A + TILE_ROWS_W) * LDS_ROW)
#define SMEM_BYTES (STAGES * STAGE_BYTES)
#endif

// ---- epilogue: scales, fp16, and split-K's reduction -------------------------------------

__device__ __forceinline__ __half scaled(int acc, float a, float w) {
    return __float2half_rn((float)acc * a * w);
}

#if SPLITK > 1
__device__ int g_ws[WS_ELEMS];          // zero at load; every last block leaves it zero
__device__ unsigned g_cnt[CNT_ELEMS];   // per output tile: blocks arrived (reset by the last)

// Whether this block is the last of the SPLITK blocks of its output tile (the same answer in
// every thread); its partial sums (atomicAdd into g_ws) are visible to the last one.
__device__ __forceinline__ bool split_k_last() {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned tile = blockIdx.y * gridDim.x + blockIdx.x;
        last = atomicAdd(&g_cnt[tile], 1u) == SPLITK - 1;
        if (last) g_cnt[tile] = 0;  // ready for the next call (stream-ordered)
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}
#endif

// ---- cp.async, ldmatrix, mma -------------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// CB bytes (4 or 16) from global to shared; zeros where !valid (src must still be mapped).
template <int CB>
__device__ __forceinline__ void copy_chunk(void* dst, const void* src, bool valid) {
#if USE_CP_ASYNC
    const int n = valid ? CB : 0;  // src-size 0: the CB bytes are zero-filled
    if constexpr (CB == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                     "l"(src), "r"(n) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)),
                     "l"(src), "r"(n) : "memory");
#else
    if constexpr (CB == 16)
        *reinterpret_cast<int4*>(dst) =
            valid ? *reinterpret_cast<const int4*>(src) : make_int4(0, 0, 0, 0);
    else
        *reinterpret_cast<int*>(dst) = valid ? *reinterpret_cast<const int*>(src) : 0;
#endif
}

#if USE_CP_ASYNC
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N_PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N_PENDING) : "memory");
}
#endif

#if TC
__device__ __forceinline__ void mma_s8(int (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#if LDSM
__device__ __forceinline__ void ldsm_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                        const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t& r0, uint32_t& r1, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r0), "=r"(r1) : "r"(smem_addr(p)));
}
#endif
#endif

// ---- baseline and thread_coarsening: CUDA cores straight from global memory -------------

#if !TILED
__global__ void __launch_bounds__(THREADS)
    w8a8_direct(const int8_t* __restrict__ A, const float* __restrict__ sa,
                const int8_t* __restrict__ W, const float* __restrict__ sw,
                __half* __restrict__ y, int M, int N, int K) {
    const int n = blockIdx.x * THREADS + threadIdx.x;
    const int m0 = blockIdx.y * TM;
    const int kper = K / SPLITK, k0 = blockIdx.z * kper;
    const int8_t* w = W + (size_t)(n < N ? n : N - 1) * K + k0;  // past N: never stored
    const int8_t* a[TM];
#pragma unroll
    for (int r = 0; r < TM; ++r) a[r] = A + (size_t)(m0 + r < M ? m0 + r : M - 1) * K + k0;
    int acc[TM];
#pragma unroll
    for (int r = 0; r < TM; ++r) acc[r] = 0;
#if VEC == 16
    for (int k = 0; k < kper; k += 16) {
        const int4 wv = *reinterpret_cast<const int4*>(w + k);
#pragma unroll
        for (int r = 0; r < TM; ++r) {
            const int4 av = *reinterpret_cast<const int4*>(a[r] + k);
            acc[r] = __dp4a(av.x, wv.x, acc[r]);
            acc[r] = __dp4a(av.y, wv.y, acc[r]);
            acc[r] = __dp4a(av.z, wv.z, acc[r]);
            acc[r] = __dp4a(av.w, wv.w, acc[r]);
        }
    }
#else
    for (int k = 0; k < kper; ++k) {
        const int wk = w[k];
#pragma unroll
        for (int r = 0; r < TM; ++r) acc[r] += (int)a[r][k] * wk;
    }
#endif
#if SPLITK > 1
#pragma unroll
    for (int r = 0; r < TM; ++r)
        if (m0 + r < M && n < N) atomicAdd(&g_ws[(size_t)(m0 + r) * N + n], acc[r]);
    if (!split_k_last()) return;
#pragma unroll
    for (int r = 0; r < TM; ++r)
        if (m0 + r < M && n < N) acc[r] = atomicExch(&g_ws[(size_t)(m0 + r) * N + n], 0);
#endif
#pragma unroll
    for (int r = 0; r < TM; ++r)
        if (m0 + r < M && n < N)
            y[(size_t)(m0 + r) * N + n] = scaled(acc[r], sa[m0 + r], sw[n]);
}
#endif

// ---- the tiled paths: CUDA cores (TILED) or tensor cores (TC) ------------------------------

#if TILED
// Stage slot s <- k tile kt of this block's A rows [m0, m0 + TILE_ROWS_A) and W rows
// [n0, n0 + TILE_ROWS_W), CB-byte words, coalesced (consecutive threads, consecutive words
// of a row). Rows past M (A) or N (W) are zero-filled.
template <int CB>
__device__ __forceinline__ void load_tile(int8_t* smem, int s, int kt, const int8_t* A,
                                          const int8_t* W, int M, int N, int K, int m0, int n0,
                                          int k0) {
    constexpr int CPR = BK / CB;  // chunks per row
    int8_t* As = smem + s * STAGE_BYTES;
    int8_t* Ws = As + TILE_ROWS_A * LDS_ROW;
    const int kb = k0 + kt * BK;
    for (int i = threadIdx.x; i < TILE_ROWS_A * CPR; i += THREADS) {
        const int r = i / CPR, c = (i % CPR) * CB;
        const int m = m0 + r;
        copy_chunk<CB>(As + r * LDS_ROW + c, A + (size_t)(m < M ? m : M - 1) * K + kb + c, m < M);
    }
    for (int i = threadIdx.x; i < TILE_ROWS_W * CPR; i += THREADS) {
        const int r = i / CPR, c = (i % CPR) * CB;
        const int n = n0 + r;
        copy_chunk<CB>(Ws + r * LDS_ROW + c, W + (size_t)(n < N ? n : N - 1) * K + kb + c, n < N);
    }
}

#if TC
#define CHUNK 16  // the tensor-core path always copies 16-byte words
#else
#define CHUNK (VEC == 16 ? 16 : 4)
#endif

struct Acc {
#if TC
    int c[WTM / 16][WTN / 8][4];  // [mi][ni][fragment register]
#else
    int c[TM];
#endif
};

// One k tile from stage slot s into the accumulators.
__device__ __forceinline__ void compute_tile(const int8_t* smem, int s, Acc& acc) {
    const int8_t* As = smem + s * STAGE_BYTES;
    const int8_t* Ws = As + TILE_ROWS_A * LDS_ROW;
#if TC
    constexpr int MI = WTM / 16, NI = WTN / 8;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wr = (warp / WN_WARPS) * WTM, wc = (warp % WN_WARPS) * WTN;
#if !LDSM
    const int g = lane >> 2, t = lane & 3;  // groupID, threadID_in_group (PTX ISA)
#endif
#pragma unroll
    for (int ks = 0; ks < BK; ks += 32) {
        uint32_t af[MI][4], bf[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            const int r0 = wr + mi * 16;
#if LDSM
            // lanes 0-7: rows 0-7 k 0-15 (a0), 8-15: rows 8-15 k 0-15 (a1), 16-23: rows 0-7
            // k 16-31 (a2), 24-31: rows 8-15 k 16-31 (a3)
            ldsm_x4(af[mi][0], af[mi][1], af[mi][2], af[mi][3],
                    As + (r0 + (lane & 15)) * LDS_ROW + ks + (lane >> 4) * 16);
#else
            // PTX ISA, mma.m16n8k32 .s8 A fragment: a0 row g, k 4t..4t+3; a1 row g + 8;
            // a2, a3 the same rows at k + 16
            const int8_t* p = As + (r0 + g) * LDS_ROW + ks + 4 * t;
            af[mi][0] = *reinterpret_cast<const uint32_t*>(p);
            af[mi][1] = *reinterpret_cast<const uint32_t*>(p + 8 * LDS_ROW);
            af[mi][2] = *reinterpret_cast<const uint32_t*>(p + 16);
            af[mi][3] = *reinterpret_cast<const uint32_t*>(p + 8 * LDS_ROW + 16);
#endif
        }
#if LDSM
#pragma unroll
        for (int ni = 0; ni + 1 < NI; ni += 2) {
            // lanes 0-7: n 0-7 k 0-15 (b0 of ni), 8-15: n 0-7 k 16-31 (b1 of ni), 16-23 and
            // 24-31: the same for ni + 1
            ldsm_x4(bf[ni][0], bf[ni][1], bf[ni + 1][0], bf[ni + 1][1],
                    Ws + (wc + ni * 8 + (lane >> 4) * 8 + (lane & 7)) * LDS_ROW + ks +
                        ((lane >> 3) & 1) * 16);
        }
        if constexpr (NI % 2 == 1) {  // lanes 0-15 give the addresses
            ldsm_x2(bf[NI - 1][0], bf[NI - 1][1],
                    Ws + (wc + (NI - 1) * 8 + (lane & 7)) * LDS_ROW + ks + ((lane >> 3) & 1) * 16);
        }
#else
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
            // B fragment (W's row n is B's column): b0 column g, k 4t..4t+3; b1 at k + 16
            const int8_t* p = Ws + (wc + ni * 8 + g) * LDS_ROW + ks + 4 * t;
            bf[ni][0] = *reinterpret_cast<const uint32_t*>(p);
            bf[ni][1] = *reinterpret_cast<const uint32_t*>(p + 16);
        }
#endif
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) mma_s8(acc.c[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
    }
#else
    const int8_t* w = Ws + threadIdx.x * LDS_ROW;  // this thread's column n
#if VEC == 16
#pragma unroll 1  // 16 rows x 4 dp4a a step is ILP enough; unrolled, ptxas spills
    for (int k = 0; k < BK; k += 16) {
        const int4 wv = *reinterpret_cast<const int4*>(w + k);
#pragma unroll
        for (int r = 0; r < TM; ++r) {
            const int4 av = *reinterpret_cast<const int4*>(As + r * LDS_ROW + k);  // broadcast
            acc.c[r] = __dp4a(av.x, wv.x, acc.c[r]);
            acc.c[r] = __dp4a(av.y, wv.y, acc.c[r]);
            acc.c[r] = __dp4a(av.z, wv.z, acc.c[r]);
            acc.c[r] = __dp4a(av.w, wv.w, acc.c[r]);
        }
    }
#else
#pragma unroll 4
    for (int k = 0; k < BK; ++k) {
        const int wk = w[k];
#pragma unroll
        for (int r = 0; r < TM; ++r) acc.c[r] += (int)As[r * LDS_ROW + k] * wk;  // broadcast
    }
#endif
#endif
}

__global__ void __launch_bounds__(THREADS)
    w8a8_tiled(const int8_t* __restrict__ A, const float* __restrict__ sa,
               const int8_t* __restrict__ W, const float* __restrict__ sw,
               __half* __restrict__ y, int M, int N, int K) {
    extern __shared__ __align__(16) int8_t smem[];
    const int m0 = blockIdx.y * TILE_ROWS_A, n0 = blockIdx.x * TILE_ROWS_W;
    const int kper = K / SPLITK, k0 = blockIdx.z * kper;
    const int KT = kper / BK;
    Acc acc;
#if TC
#pragma unroll
    for (int mi = 0; mi < WTM / 16; ++mi)
#pragma unroll
        for (int ni = 0; ni < WTN / 8; ++ni)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc.c[mi][ni][j] = 0;
#else
#pragma unroll
    for (int r = 0; r < TM; ++r) acc.c[r] = 0;
#endif

#if USE_CP_ASYNC
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile<CHUNK>(smem, s, s, A, W, M, N, K, m0, n0, k0);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt have landed
        __syncthreads();              // everyone's have; everyone is done with tile kt - 1
        const int nt = kt + STAGES - 1;
        if (nt < KT) load_tile<CHUNK>(smem, nt % STAGES, nt, A, W, M, N, K, m0, n0, k0);
        cp_async_commit();            // possibly empty: keeps the group count uniform
        compute_tile(smem, kt % STAGES, acc);
    }
    cp_async_wait<0>();
#else
    for (int kt = 0; kt < KT; ++kt) {
        __syncthreads();  // everyone is done with the previous tile
        load_tile<CHUNK>(smem, 0, kt, A, W, M, N, K, m0, n0, k0);
        __syncthreads();
        compute_tile(smem, 0, acc);
    }
#endif

#if TC
    // accumulator fragment: c0, c1 row g, columns 2t, 2t + 1; c2, c3 row g + 8
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3;
    const int rb = m0 + (warp / WN_WARPS) * WTM + g, cb = n0 + (warp % WN_WARPS) * WTN + 2 * t;
#if SPLITK > 1
#pragma unroll
    for (int mi = 0; mi < WTM / 16; ++mi)
#pragma unroll
        for (int ni = 0; ni < WTN / 8; ++ni)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int m = rb + mi * 16 + (j >> 1) * 8, n = cb + ni * 8 + (j & 1);
                if (m < M) atomicAdd(&g_ws[(size_t)m * N + n], acc.c[mi][ni][j]);
            }
    if (!split_k_last()) return;
#pragma unroll
    for (int mi = 0; mi < WTM / 16; ++mi)
#pragma unroll
        for (int ni = 0; ni < WTN / 8; ++ni)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int m = rb + mi * 16 + (j >> 1) * 8, n = cb + ni * 8 + (j & 1);
                if (m < M) acc.c[mi][ni][j] = atomicExch(&g_ws[(size_t)m * N + n], 0);
            }
#endif
#pragma unroll
    for (int mi = 0; mi < WTM / 16; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = rb + mi * 16 + h * 8;
            if (m >= M) continue;
            const float a = sa[m];
#pragma unroll
            for (int ni = 0; ni < WTN / 8; ++ni) {
                const int n = cb + ni * 8;  // even: a 4-byte aligned half2
                *reinterpret_cast<__half2*>(y + (size_t)m * N + n) =
                    __halves2half2(scaled(acc.c[mi][ni][2 * h], a, sw[n]),
                                   scaled(acc.c[mi][ni][2 * h + 1], a, sw[n + 1]));
            }
        }
#else
    const int n = n0 + threadIdx.x;
#if SPLITK > 1
#pragma unroll
    for (int r = 0; r < TM; ++r)
        if (m0 + r < M && n < N) atomicAdd(&g_ws[(size_t)(m0 + r) * N + n], acc.c[r]);
    if (!split_k_last()) return;
#pragma unroll
    for (int r = 0; r < TM; ++r)
        if (m0 + r < M && n < N) acc.c[r] = atomicExch(&g_ws[(size_t)(m0 + r) * N + n], 0);
#endif
#pragma unroll
    for (int r = 0; r < TM; ++r)
        if (m0 + r < M && n < N)
            y[(size_t)(m0 + r) * N + n] = scaled(acc.c[r], sa[m0 + r], sw[n]);
#endif
}
#endif

// ---- host --------------------------------------------------------------------------------

extern "C" void solve(const int8_t* A, const float* sa, const int8_t* W, const float* sw, half* y,
                      int M, int N, int K) {
    if (M < 1 || N < 1 || K < 1) return;
#if TILED
    const int rows = TILE_ROWS_A, cols = TILE_ROWS_W, kstep = BK * SPLITK;
#else
    const int rows = TM, cols = THREADS, kstep = (VEC == 16 ? 16 : 1) * SPLITK;
#endif
    const dim3 grid((unsigned)((N + cols - 1) / cols), (unsigned)((M + rows - 1) / rows), SPLITK);
    if (K % kstep != 0 || (TC && N % TC_BN != 0)) {
        fprintf(stderr, "w8a8_gemm.cu: this build needs K %% %d == 0%s (K = %d, N = %d)\n",
                kstep, TC ? " and N % 128 == 0" : "", K, N);
        return;
    }
    if (SPLITK > 1 && ((long long)M * N > WS_ELEMS || (long long)grid.x * grid.y > CNT_ELEMS)) {
        fprintf(stderr, "w8a8_gemm.cu: split-K's workspace holds M * N <= %d and %d tiles "
                "(M = %d, N = %d)\n", WS_ELEMS, CNT_ELEMS, M, N);
        return;
    }
#if TILED
    static int smem_ok = -1;  // once per process: the opt-in above 48 KB, and the device's limit
    if (smem_ok < 0) {
        int dev = 0, limit = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        smem_ok = SMEM_BYTES <= limit &&
                  cudaFuncSetAttribute(w8a8_tiled, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       SMEM_BYTES) == cudaSuccess;
        if (!smem_ok)
            fprintf(stderr, "w8a8_gemm.cu: this build needs %d bytes of shared memory per block, "
                    "more than this device's %d\n", (int)SMEM_BYTES, limit);
    }
    if (!smem_ok) return;
    w8a8_tiled<<<grid, THREADS, SMEM_BYTES, 0>>>(A, sa, W, sw, reinterpret_cast<__half*>(y), M,
                                                  N, K);
#else
    w8a8_direct<<<grid, THREADS, 0, 0>>>(A, sa, W, sw, reinterpret_cast<__half*>(y), M, N, K);
#endif
}
