// sgemm.cu -- C = A @ B, float32, row-major: A [M, K], B [K, N], C [M, N].
// FP32 FMA on CUDA cores, or tensor cores with about fp32 accuracy: 3xTF32 (TC) or
// bf16x3 (MP).
//
// Thread block: BX x BY threads (dim3(BX, BY)); each thread computes a
// TM x TN patch of C, so a block computes a BM x BN tile, BM = BY*TM,
// BN = BX*TN. Thread (tx, ty) owns rows ty + i*BY and columns tx + j*BX of
// the tile (strided: coalesced C stores, conflict-free shared reads), or
// 4-wide chunks of them on the float4 path.
//
// Baseline (no defines): the naive kernel, BX = BY = 16, TM = TN = 1: one
// thread per C element, A and B read straight from global memory (L1/L2
// catch the reuse), any M, N, K.
//
// Tuning knobs (all -D defines, each with a default below):
//   BX, BY        threads per block in x (columns) and y (rows).
//   TM, TN        compute.thread_coarsening (register tiling): TM x TN
//                 outputs per thread in registers, TM + TN operand loads per
//                 TM*TN FMAs.
//   TILED, BK     memory.tiling_smem: A and B tiles of BK columns/rows are
//                 staged in shared memory (A transposed, As[BK][BM + PAD], so
//                 the inner loop reads consecutive rows), one __syncthreads()
//                 pair per K step. The tiled paths need M % BM == 0,
//                 N % BN == 0 and K % BK == 0 (no bounds checks): solve()
//                 refuses other sizes, writes nothing and says so on stderr.
//   VEC           memory.vectorized_access (implies TILED): float4 (LDG.128)
//                 global loads of both tiles, and, when TM % 4 == 0 and
//                 TN % 4 == 0, float4 shared reads of the fragments and
//                 float4 C stores. Needs K % 4 == 0 and N % 4 == 0. Stacked on
//                 memory.multi_stage_pipeline (row-major A tiles), the A
//                 fragments are read as float4 along K: 4 k-steps per LDS.128.
//   PAD           memory.bank_conflict (implies TILED): pads each row of the
//                 transposed A tile by PAD floats. Unpadded, the transposing
//                 store puts a warp's BK columns of one row in one bank (up to
//                 BK-way conflicts when BM is a multiple of 32); PAD=4 keeps
//                 rows 16-byte aligned, PAD=1 spreads BK=32 fully.
//   USE_CP_ASYNC, STAGES
//                 memory.multi_stage_pipeline (implies TILED, sm_80+): a ring
//                 of STAGES shared-memory buffers filled with 16-byte
//                 cp.async.cg (A kept row-major, As[BM][BK + 4]: cp.async
//                 copies contiguous bytes and cannot transpose), waited with
//                 cp.async.wait_group so the loads of tile k+STAGES-1 overlap
//                 the FMAs of tile k. Below sm_80 the copies are synchronous.
//   TC            compute.tensor_core (implies the cp.async path, sm_80+):
//                 3xTF32 on tensor cores (wmma m16n16k8): each operand is split
//                 into a TF32 high part and a TF32 remainder, and
//                 C += Ahi*Blo + Alo*Bhi + Ahi*Bhi in fp32 accumulators keeps
//                 about fp32 accuracy (the small*small term, ~2^-22 relative, is
//                 dropped); CUTLASS calls this OpMultiplyAddFastF32. The block's
//                 warps form a WM_WARPS x WN_WARPS grid (WN_WARPS = 2 for an even
//                 warp count) over the BM x BN tile, BM = max(BY*TM, 16*WM_WARPS)
//                 and BN likewise, each warp a grid of 16x16 fragments: one
//                 fragment per warp without thread_coarsening, TM/TN-sized warp
//                 tiles with it (BM, BN multiples of 16 x the warps along them:
//                 the sweep's restriction).
//   MP            compute.mixed_precision (implies the cp.async path, sm_80+):
//                 bf16x3 on tensor cores (wmma m16n16k16, fp32 accumulate): after
//                 each fp32 tile lands, the block splits it once into bf16 high and
//                 low parts (|x - hi - lo| <= 2^-18 |x|) in shared memory, and each
//                 warp accumulates Ahi*Blo + Alo*Bhi + Ahi*Bhi: about 16 mantissa
//                 bits per operand (~1e-5 relative per product, within the sweep's
//                 rtol 1e-3), half the tensor-core instructions of 3xTF32 per K.
//                 Same warp grid and BM x BN tile as TC; needs BK % 16 == 0. Its
//                 shared memory (the fp32 ring plus the split tile, see MP_SMEM) is
//                 dynamic: solve() raises the block's limit past 48 KB.
//   MIN_BLOCKS    memory.register_pressure: __launch_bounds__(BX*BY, MIN_BLOCKS)
//                 caps registers at 65536 / (MIN_BLOCKS * BX*BY) per thread so
//                 that MIN_BLOCKS blocks fit on an SM (more warps to hide
//                 latency; spills when the cap is below what the tile needs).
// Every kernel has __launch_bounds__(BX*BY, MIN_BLOCKS) (MIN_BLOCKS default 1)
// so ptxas never allocates more registers than a block can get.
#include <cuda_runtime.h>
#include <cstdio>
#if TC || MP
#include <mma.h>
#endif
#if MP
#include <cuda_bf16.h>
#endif

#ifndef BX
#define BX 16
#endif
#ifndef BY
#define BY 16
#endif
#ifndef TM
#define TM 1
#endif
#ifndef TN
#define TN 1
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef PAD
#define PAD 0
#endif
#ifndef USE_CP_ASYNC
#define USE_CP_ASYNC 0
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef MP
#define MP 0
#endif
#if (TC || MP) && !USE_CP_ASYNC
#undef USE_CP_ASYNC
#define USE_CP_ASYNC 1
#endif
#if TC && MP
#error "TC and MP are two realizations of the compute axis: at most one"
#endif
#ifndef TILED
#if VEC > 1 || PAD > 0 || USE_CP_ASYNC
#define TILED 1
#else
#define TILED 0
#endif
#endif
#ifndef BK
#define BK 8
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef TC
#define TC 0
#endif

#define NTHREADS (BX * BY)
#if TC || MP  // at least one 16x16 fragment per warp (the warp grid is below)
#define WN_WARPS ((NTHREADS / 32) % 2 == 0 ? 2 : 1)   // warps along N
#define WM_WARPS ((NTHREADS / 32) / WN_WARPS)          // warps along M
#define BM (BY * TM > 16 * WM_WARPS ? BY * TM : 16 * WM_WARPS)
#define BN (BX * TN > 16 * WN_WARPS ? BX * TN : 16 * WN_WARPS)
#else
#define BM (BY * TM)
#define BN (BX * TN)
#endif

#if NTHREADS > 1024
#error "BX * BY must be at most 1024"
#endif
#if VEC != 1 && VEC != 4
#error "VEC must be 1 or 4"
#endif
#if USE_CP_ASYNC && (STAGES < 2 || BK % 4 != 0 || BN % 4 != 0)
#error "cp.async needs STAGES >= 2 and 16-byte rows (BK % 4 == 0, BN % 4 == 0)"
#endif
#if TC || MP
#define FM (BM / WM_WARPS / 16)               // 16x16 fragments per warp along M
#define FN (BN / WN_WARPS / 16)               // ... along N
#if NTHREADS % 32 != 0 || BK % (MP ? 16 : 8) != 0 || BM % (16 * WM_WARPS) != 0 || BN % (16 * WN_WARPS) != 0
#error "TC/MP need whole warps, BK % 8 == 0 (MP: % 16) and 16x16 fragments per warp (see the header)"
#endif
#endif
#if VEC == 4 && (BK % 4 != 0 || BN % 4 != 0)
#error "VEC=4 needs BK % 4 == 0 and BN % 4 == 0"
#endif

// Fragment width: 4 = float4 shared reads and C stores, else 1. The
// transposed-A path needs 16-byte aligned rows of As (BM + PAD); the cp.async
// path (row-major As, rows of BK + 4 floats) reads A fragments 4 k-steps wide.
#if VEC == 4 && TM % 4 == 0 && TN % 4 == 0 && (USE_CP_ASYNC || (BM + PAD) % 4 == 0)
#define W 4
#else
#define W 1
#endif

// Row (col) inside the block tile of the thread's i-th (j-th) fragment element.
__device__ __forceinline__ int frag_row(int ty, int i) {
    return W == 4 ? (i / 4) * (BY * 4) + ty * 4 + (i % 4) : i * BY + ty;
}
__device__ __forceinline__ int frag_col(int tx, int j) {
    return W == 4 ? (j / 4) * (BX * 4) + tx * 4 + (j % 4) : j * BX + tx;
}

#if !TILED
// ---------------------------------------------------------------- naive ----
__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS) sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int M, int N, int K) {
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k = 0; k < K; ++k) {
        float a[TM], b[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = row0 + i * BY + ty;
            a[i] = r < M ? A[(size_t)r * K + k] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + j * BX + tx;
            b[j] = c < N ? B[(size_t)k * N + c] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + i * BY + ty;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = col0 + j * BX + tx;
            if (r < M && c < N) C[(size_t)r * N + c] = acc[i][j];
        }
    }
}

#else
// ---------------------------------------------------------- tiled paths ----
// acc += As_tile * Bs_tile over BK. As element (k, m) is As[k*AK + m*AR];
// Bs element (k, n) is Bs[k*BN + n].
template <int AK, int AR>
__device__ __forceinline__ void mma_tile(const float* __restrict__ As, const float* __restrict__ Bs, int ty, int tx,
                                         float (&acc)[TM][TN]) {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
        float a[TM], b[TN];
#if W == 4
        static_assert(AR == 1, "float4 fragment reads need m-contiguous A tiles (see mma_tile_k4)");
#pragma unroll
        for (int i = 0; i < TM; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(As + kk * AK + frag_row(ty, i));
            a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
        }
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const float4 v = *reinterpret_cast<const float4*>(Bs + kk * BN + frag_col(tx, j));
            b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
        }
#else
#pragma unroll
        for (int i = 0; i < TM; ++i) a[i] = As[kk * AK + frag_row(ty, i) * AR];
#pragma unroll
        for (int j = 0; j < TN; ++j) b[j] = Bs[kk * BN + frag_col(tx, j)];
#endif
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

#if W == 4
// acc += As_tile * Bs_tile over BK with row-major A (As[m * AS_LD + k], the
// cp.async path): one float4 per A row gives 4 k-steps, so TM + TN LDS.128
// feed 4 * TM * TN FMAs (TM + TN scalar loads per TM * TN FMAs otherwise).
template <int AR>
__device__ __forceinline__ void mma_tile_k4(const float* __restrict__ As, const float* __restrict__ Bs, int ty, int tx,
                                            float (&acc)[TM][TN]) {
    static_assert(AR % 4 == 0 && BK % 4 == 0, "float4 A reads need 16-byte rows");
#pragma unroll
    for (int kk = 0; kk < BK; kk += 4) {
        float4 a4[TM];
#pragma unroll
        for (int i = 0; i < TM; ++i) a4[i] = *reinterpret_cast<const float4*>(As + frag_row(ty, i) * AR + kk);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            float b[TN];
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(Bs + (kk + q) * BN + frag_col(tx, j));
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const float a = q == 0 ? a4[i].x : q == 1 ? a4[i].y : q == 2 ? a4[i].z : a4[i].w;
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a, b[j], acc[i][j]);
            }
        }
    }
}
#endif

__device__ __forceinline__ void store_c(float* __restrict__ C, int N, int row0, int col0, int ty, int tx,
                                        const float (&acc)[TM][TN]) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float* crow = C + (size_t)(row0 + frag_row(ty, i)) * N + col0;
#if W == 4
#pragma unroll
        for (int j = 0; j < TN; j += 4)
            *reinterpret_cast<float4*>(crow + frag_col(tx, j)) =
                make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
#else
#pragma unroll
        for (int j = 0; j < TN; ++j) crow[frag_col(tx, j)] = acc[i][j];
#endif
    }
}

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

#if !USE_CP_ASYNC
// Shared-memory tiling, one buffer, A stored transposed (As[k][m]).
#define AS_LD (BM + PAD)

__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS) sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[BK * AS_LD];
    __shared__ __align__(16) float Bs[BK * BN];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BX + tx;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const float* Ablk = A + (size_t)row0 * K;
    const float* Bblk = B + col0;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
#if VEC == 4
        // A tile BM x BK: float4 along K, scattered into the transposed As.
        constexpr int A_CHUNKS = BM * BK / 4;
#pragma unroll
        for (int it = 0; it < CEIL_DIV(A_CHUNKS, NTHREADS); ++it) {
            const int e = tid + it * NTHREADS;
            if (A_CHUNKS % NTHREADS == 0 || e < A_CHUNKS) {
                const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
                const float4 v = *reinterpret_cast<const float4*>(Ablk + (size_t)r * K + k0 + c);
                As[(c + 0) * AS_LD + r] = v.x;
                As[(c + 1) * AS_LD + r] = v.y;
                As[(c + 2) * AS_LD + r] = v.z;
                As[(c + 3) * AS_LD + r] = v.w;
            }
        }
        // B tile BK x BN: float4 rows, stored as is.
        constexpr int B_CHUNKS = BK * BN / 4;
#pragma unroll
        for (int it = 0; it < CEIL_DIV(B_CHUNKS, NTHREADS); ++it) {
            const int e = tid + it * NTHREADS;
            if (B_CHUNKS % NTHREADS == 0 || e < B_CHUNKS) {
                const int r = e / (BN / 4), c = (e % (BN / 4)) * 4;
                *reinterpret_cast<float4*>(Bs + r * BN + c) =
                    *reinterpret_cast<const float4*>(Bblk + (size_t)(k0 + r) * N + c);
            }
        }
#else
        // A tile: consecutive threads walk K (coalesced), store transposed.
#pragma unroll
        for (int it = 0; it < CEIL_DIV(BM * BK, NTHREADS); ++it) {
            const int e = tid + it * NTHREADS;
            if ((BM * BK) % NTHREADS == 0 || e < BM * BK) {
                const int r = e / BK, c = e % BK;
                As[c * AS_LD + r] = Ablk[(size_t)r * K + k0 + c];
            }
        }
#pragma unroll
        for (int it = 0; it < CEIL_DIV(BK * BN, NTHREADS); ++it) {
            const int e = tid + it * NTHREADS;
            if ((BK * BN) % NTHREADS == 0 || e < BK * BN) {
                const int r = e / BN, c = e % BN;
                Bs[r * BN + c] = Bblk[(size_t)(k0 + r) * N + c];
            }
        }
#endif
        __syncthreads();
        mma_tile<AS_LD, 1>(As, Bs, ty, tx, acc);
        __syncthreads();
    }
    store_c(C, N, row0, col0, ty, tx, acc);
}

#else  // USE_CP_ASYNC
// Multi-stage cp.async pipeline. As[s][m][k] row-major (+4 floats per row:
// keeps 16-byte alignment and spreads the rows over the banks).
#define AS_LD (BK + 4)
// B tile rows: BN floats, padded by 8 under TC. A wmma tf32 B-fragment load (row-major)
// has each LDS touch 4 k-rows x 8 n-columns; with rows a multiple of 32 floats apart those
// fall in 8 banks (4-way conflicts), with BN + 8 in 32 distinct banks. Keeps the 16-byte
// (cp.async) and 32-byte (wmma) alignment.
#if TC
#define BS_LD (BN + 8)
#else
#define BS_LD BN
#endif

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#else
    *reinterpret_cast<float4*>(smem) = *reinterpret_cast<const float4*>(gmem);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N_PENDING>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N_PENDING) : "memory");
#endif
}

__device__ __forceinline__ void load_tile_async(float* __restrict__ As, float* __restrict__ Bs,
                                                const float* __restrict__ Ablk, const float* __restrict__ Bblk,
                                                int N, int K, int k0, int tid) {
    constexpr int A_CHUNKS = BM * BK / 4;
#pragma unroll
    for (int it = 0; it < CEIL_DIV(A_CHUNKS, NTHREADS); ++it) {
        const int e = tid + it * NTHREADS;
        if (A_CHUNKS % NTHREADS == 0 || e < A_CHUNKS) {
            const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
            cp_async16(As + r * AS_LD + c, Ablk + (size_t)r * K + k0 + c);
        }
    }
    constexpr int B_CHUNKS = BK * BN / 4;
#pragma unroll
    for (int it = 0; it < CEIL_DIV(B_CHUNKS, NTHREADS); ++it) {
        const int e = tid + it * NTHREADS;
        if (B_CHUNKS % NTHREADS == 0 || e < B_CHUNKS) {
            const int r = e / (BN / 4), c = (e % (BN / 4)) * 4;
            cp_async16(Bs + r * BS_LD + c, Bblk + (size_t)(k0 + r) * N + c);
        }
    }
}

#if TC || MP
namespace wmma = nvcuda::wmma;

// acc[i][j] += a_lo[i] * b_hi[j] + a_hi[i] * b_lo[j] + a_hi[i] * b_hi[j] (3xTF32 / bf16x3): each
// product over all FM x FN accumulators in turn (FM * FN independent mma chains), the small
// terms first and the large one last.
template <typename FragC_, typename FragA_, typename FragB_>
__device__ __forceinline__ void mma_split3(FragC_ (&acc)[FM][FN], const FragA_ (&a_hi)[FM], const FragA_ (&a_lo)[FM],
                                           const FragB_ (&b_hi)[FN], const FragB_ (&b_lo)[FN]) {
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a_lo[i], b_hi[j], acc[i][j]);
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a_hi[i], b_lo[j], acc[i][j]);
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a_hi[i], b_hi[j], acc[i][j]);
}

// The warp's FM x FN accumulator fragments to C (row-major, N columns) at (r0, c0).
template <typename FragC_>
__device__ __forceinline__ void store_frags(float* __restrict__ C, int N, int r0, int c0, const FragC_ (&acc)[FM][FN]) {
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
            wmma::store_matrix_sync(C + (size_t)(r0 + 16 * i) * N + c0 + 16 * j, acc[i][j], N, wmma::mem_row_major);
}
#endif

#if TC
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

// x = hi + lo with both TF32: hi keeps the top 10 mantissa bits, lo the next ones.
template <typename Frag>
__device__ __forceinline__ void split_tf32(const Frag& x, Frag& hi, Frag& lo) {
#pragma unroll
    for (int t = 0; t < x.num_elements; ++t) {
        const float h = wmma::__float_to_tf32(x.x[t]);
        hi.x[t] = h;
        lo.x[t] = wmma::__float_to_tf32(x.x[t] - h);
    }
}

// acc (this warp's FM x FN fragments at rows wm0.., cols wn0..) += As_tile * Bs_tile, 3xTF32.
// As row-major [BM][AS_LD], Bs row-major [BK][BS_LD]; fragment pointers are 32-byte aligned.
// All fragments are loaded and split first, then the three products (mma_split3).
__device__ __forceinline__ void mma_tile_tc(const float* __restrict__ As, const float* __restrict__ Bs, int wm0,
                                            int wn0, FragC (&acc)[FM][FN]) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
        FragA a_hi[FM], a_lo[FM];
        FragB b_hi[FN], b_lo[FN];
#pragma unroll
        for (int i = 0; i < FM; ++i) {
            FragA a;
            wmma::load_matrix_sync(a, As + (wm0 + 16 * i) * AS_LD + kk, AS_LD);
            split_tf32(a, a_hi[i], a_lo[i]);
        }
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            FragB b;
            wmma::load_matrix_sync(b, Bs + kk * BS_LD + wn0 + 16 * j, BS_LD);
            split_tf32(b, b_hi[j], b_lo[j]);
        }
        mma_split3(acc, a_hi, a_lo, b_hi, b_lo);
    }
}
#endif

#if MP
typedef __nv_bfloat16 bf16;
using FragA16 = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB16 = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC16 = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
#define AH_LD (BK + 8)   // bf16 rows of the split A tile (a multiple of 8 elements: wmma ldm)
#define BH_LD (BN + 8)   // ... of the split B tile
// dynamic shared memory, bytes: the fp32 cp.async ring, then A hi, A lo, B hi, B lo (bf16)
#define MP_SMEM (STAGES * (BM * AS_LD + BK * BN) * 4 + 2 * (BM * AH_LD + BK * BH_LD) * 2)

// rows x cols fp32 (row stride src_ld) -> bf16 hi and lo (row stride dst_ld), 2 floats a step.
template <int ROWS, int COLS>
__device__ __forceinline__ void split_bf16(const float* __restrict__ src, int src_ld, bf16* __restrict__ hi,
                                           bf16* __restrict__ lo, int dst_ld, int tid) {
    constexpr int PAIRS = ROWS * COLS / 2;
#pragma unroll
    for (int it = 0; it < CEIL_DIV(PAIRS, NTHREADS); ++it) {
        const int e = tid + it * NTHREADS;
        if (PAIRS % NTHREADS == 0 || e < PAIRS) {
            const int r = e / (COLS / 2), c = (e % (COLS / 2)) * 2;
            const float2 x = *reinterpret_cast<const float2*>(src + r * src_ld + c);
            const __nv_bfloat162 h = __floats2bfloat162_rn(x.x, x.y);
            const __nv_bfloat162 l = __floats2bfloat162_rn(x.x - __low2float(h), x.y - __high2float(h));
            *reinterpret_cast<__nv_bfloat162*>(hi + r * dst_ld + c) = h;
            *reinterpret_cast<__nv_bfloat162*>(lo + r * dst_ld + c) = l;
        }
    }
}

__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS) sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char smem[];
    float* As = reinterpret_cast<float*>(smem);                  // [STAGES][BM][AS_LD]
    float* Bs = As + STAGES * BM * AS_LD;                         // [STAGES][BK][BN]
    bf16* Ah = reinterpret_cast<bf16*>(Bs + STAGES * BK * BN);   // [BM][AH_LD]
    bf16* Al = Ah + BM * AH_LD;
    bf16* Bh = Al + BM * AH_LD;                                   // [BK][BH_LD]
    bf16* Bl = Bh + BK * BH_LD;
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BX + tx;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const float* Ablk = A + (size_t)row0 * K;
    const float* Bblk = B + col0;
    const int KT = K / BK;
    const int warp = tid / 32;
    const int wm0 = (warp / WN_WARPS) * (BM / WM_WARPS), wn0 = (warp % WN_WARPS) * (BN / WN_WARPS);
    FragC16 acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile_async(As + s * BM * AS_LD, Bs + s * BK * BN, Ablk, Bblk, N, K, s * BK, tid);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies)
        __syncthreads();              // ... everyone's; the split tile and stage (kt-1) % STAGES are free
        const int next = kt + STAGES - 1;
        if (next < KT)
            load_tile_async(As + (next % STAGES) * BM * AS_LD, Bs + (next % STAGES) * BK * BN, Ablk, Bblk, N, K,
                            next * BK, tid);
        cp_async_commit();
        split_bf16<BM, BK>(As + (kt % STAGES) * BM * AS_LD, AS_LD, Ah, Al, AH_LD, tid);
        split_bf16<BK, BN>(Bs + (kt % STAGES) * BK * BN, BN, Bh, Bl, BH_LD, tid);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            FragA16 a_hi[FM], a_lo[FM];
            FragB16 b_hi[FN], b_lo[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i) {
                wmma::load_matrix_sync(a_hi[i], Ah + (wm0 + 16 * i) * AH_LD + kk, AH_LD);
                wmma::load_matrix_sync(a_lo[i], Al + (wm0 + 16 * i) * AH_LD + kk, AH_LD);
            }
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                wmma::load_matrix_sync(b_hi[j], Bh + kk * BH_LD + wn0 + 16 * j, BH_LD);
                wmma::load_matrix_sync(b_lo[j], Bl + kk * BH_LD + wn0 + 16 * j, BH_LD);
            }
            mma_split3(acc, a_hi, a_lo, b_hi, b_lo);
        }
    }
    store_frags(C, N, row0 + wm0, col0 + wn0, acc);
}

#else  // !MP
__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS) sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(32) float As[STAGES][BM * AS_LD];
    __shared__ __align__(32) float Bs[STAGES][BK * BS_LD];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BX + tx;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const float* Ablk = A + (size_t)row0 * K;
    const float* Bblk = B + col0;
    const int KT = K / BK;

#if TC
    const int warp = tid / 32;
    const int wm0 = (warp / WN_WARPS) * (BM / WM_WARPS), wn0 = (warp % WN_WARPS) * (BN / WN_WARPS);
    FragC acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
#else
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
#endif

    // Prologue: tiles 0 .. STAGES-2 in flight, one commit group each.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile_async(As[s], Bs[s], Ablk, Bblk, N, K, s * BK, tid);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's copies)
        __syncthreads();              // ... and everyone's; stage (kt-1) % STAGES is free
        const int next = kt + STAGES - 1;
        if (next < KT) load_tile_async(As[next % STAGES], Bs[next % STAGES], Ablk, Bblk, N, K, next * BK, tid);
        cp_async_commit();            // possibly empty: keeps the group count uniform
#if TC
        mma_tile_tc(As[kt % STAGES], Bs[kt % STAGES], wm0, wn0, acc);
#elif W == 4
        mma_tile_k4<AS_LD>(As[kt % STAGES], Bs[kt % STAGES], ty, tx, acc);
#else
        mma_tile<1, AS_LD>(As[kt % STAGES], Bs[kt % STAGES], ty, tx, acc);
#endif
    }
#if TC
    store_frags(C, N, row0 + wm0, col0 + wn0, acc);
#else
    store_c(C, N, row0, col0, ty, tx, acc);
#endif
}
#endif  // MP
#endif  // USE_CP_ASYNC
#endif  // TILED

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
#if TILED
    if (M % BM != 0 || N % BN != 0 || K % BK != 0) {  // whole tiles only: C stays unwritten
        fprintf(stderr, "sgemm.cu: this build needs M %% %d == 0, N %% %d == 0, K %% %d == 0 "
                        "(got M=%d N=%d K=%d)\n", BM, BN, BK, M, N, K);
        return;
    }
#endif
    const dim3 block(BX, BY);
    const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
#if MP
    // opt the kernel into more than 48 KB of dynamic shared memory, once per device (the
    // attribute is per device; the harness calls solve from one thread). The sweep's limit
    // is sm_90's 227 KB: a smaller device refuses larger tiles here, by name
    static int opted_in = -1;
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev != opted_in) {
        const cudaError_t e =
            cudaFuncSetAttribute(sgemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MP_SMEM);
        if (e != cudaSuccess) {
            fprintf(stderr, "sgemm.cu: bf16x3 needs %d bytes of shared memory per block, more "
                            "than device %d allows (%s)\n", (int)MP_SMEM, dev, cudaGetErrorString(e));
            return;
        }
        opted_in = dev;
    }
    sgemm_kernel<<<grid, block, MP_SMEM, 0>>>(A, B, C, M, N, K);
#else
    sgemm_kernel<<<grid, block, 0, 0>>>(A, B, C, M, N, K);
#endif
}
