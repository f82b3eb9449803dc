// gate_up_silu v2 -- tensor-core (mma.sync m16n8k16 bf16, fp32 accumulate) decode GEMM with the
// weights streamed straight from DRAM into B fragments, fused with SiLU(gate) * up.
// Same contract as gate_up_silu.cu: solve(x [M, K] bf16, Wg [N, K] bf16, Wu [N, K] bf16,
// y [M, N] bf16, M, N, K), y = bf16(SiLU(x Wg^T) * (x Wu^T)), fp32 accumulation. THREADS (the
// sweep's launch param) is the block size; no other define is read. Needs K % 8 == 0 (16-byte
// aligned rows) and sm_80+ (mma.sync .bf16).
//
// Design:
//   - A warp owns one n-tile: 8 rows of Wg and the same 8 rows of Wu, over the whole of K
//     (11008 / 8 = 1376 warps' worth of work, about 10.4 warps per SM on 132 SMs: every byte of
//     the weights in flight at once, no split-K and no cross-warp reduction). The tiles are
//     dealt round-robin over the blocks first, so every SM gets 10 or 11 of them.
//   - W fragments without shared memory: W is [N, K] row-major, which is the "col" layout of
//     B = W^T for mma.m16n8k16.row.col. Lane (g = lane / 4, t = lane % 4) loads one 16-byte
//     pack, W[n0 + g][32c + 8t .. 32c + 8t + 8), per matrix per 32-wide k chunk c (streaming:
//     ld.global.nc.L1::no_allocate.L2::256B); its 4 registers are the B fragments of two MMAs.
//     The k order inside a chunk is permuted (MMA 0 takes k = 8t + {0,1} as its rows 2t, 2t+1
//     and 8t + {2,3} as 2t+8, 2t+9; MMA 1 takes 8t + 4..7): a permutation of the reduction
//     index, applied to A identically, leaves the product unchanged.
//   - Software pipeline: a batch is UNROLL = 4 chunks (8 loads of 16 bytes a lane); a warp
//     walks its (tile, batch) sequence issuing the next batch's loads, in a branch of their
//     own, before the MMAs of the current one, so 8-16 loads (128-256 B a lane) are always in
//     flight (ptxas, CUDA 13.0, otherwise placed each load next to its first use). Two
//     accumulator sets per matrix (even and odd chunks) halve the MMA dependency chains.
//     ~120-128 registers a thread, no spills at 128-512 threads (sm_90 and sm_87).
//   - x (M <= 16 rows, 8-128 KB) is staged once per block in shared memory as
//     [chunk][row][t] 16-byte packs, so that lane (g, t) reads x[g][32c + 8t ..] and
//     x[g + 8][32c + 8t ..] as one conflict-free 16-byte shared load each: the A fragments with
//     the same permutation. Rows >= M are zeros (M = 1 and 4 run the same MMAs; at M <= 8 the
//     upper half is a constant zero). The first batch's W lines are prefetched into L2 before
//     the staging, so it hides behind them. Persistent grid: the blocks resident at
//     once (occupancy query).
//   - Epilogue in registers: the C fragments of the gate and up tiles hold the same (m, n)
//     pairs in the same lanes, so y = bf16(g / (1 + expf(-g)) * u) is written straight from
//     them (bf16x2 stores when N is even).
//   - M > 16 is handled as 16-row slabs (correct, each slab re-reads W); K too long for x to
//     fit in shared memory reads x through L1 instead.
//
// Expected: 4 * N * K = 180 MB of weights per call at 11008 x 4096 (x: <= 128 KB, y: <= 352 KB);
// at 3.6-4.2 TB/s of the H200's 4.8 TB/s peak, 43-50 us for M = 1 and M = 16 alike (the MMAs:
// 1.4 GFLOP at M = 16 padded, a few % of the tensor cores' mma.sync rate). At M = 16 one
// block per SM holds the 128 KB of x, so THREADS = 512 (16 warps, 10-11 busy) is the config
// expected to stream fastest (at 128 threads only 4 warps per SM stream). Not measured on a GPU
// yet.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

#ifndef THREADS
#define THREADS 256
#endif

#define MT 16        // rows of x per MMA (m16n8k16); M <= 16 per launch
#define UNROLL 4     // 32-wide k chunks per batch: 2 * UNROLL 16-byte W loads, 2 batches in flight
#define WARPS (THREADS / 32)

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 64 || THREADS > 512
#error "THREADS must be a power of two in [64, 512]"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "mma.sync m16n8k16 with bf16 needs sm_80 or newer"
#endif

typedef __nv_bfloat16 bf16;

// A 16-byte pack of a weight row: read once, so not allocated in L1; 256-byte L2 prefetch.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// d += A (16 x 16, row) * B (16 x 8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2,
                                         unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The two MMAs of one 32-wide k chunk: xl = x[g][32c + 8t ..], xh = x[g + 8][32c + 8t ..],
// w = W[n0 + g][32c + 8t ..] (8 bf16 each).
__device__ __forceinline__ void chunk_mma(float (&d)[4], const uint4 xl, const uint4 xh,
                                          const uint4 w) {
    mma_bf16(d, xl.x, xh.x, xl.y, xh.y, w.x, w.y);  // k = 32c + 8t + {0,1} | {2,3}
    mma_bf16(d, xl.z, xh.z, xl.w, xh.w, w.z, w.w);  // k = 32c + 8t + {4,5} | {6,7}
}

// The A fragments of chunk c: xl = x[g][32c + 8t ..], xh = x[g + 8][32c + 8t ..] (zeros for
// rows >= M; XSM: from the staged [chunk][row][t] copy, zeros past K there).
template <bool HI, bool XSM>
__device__ __forceinline__ void a_frags(uint4& xl, uint4& xh, const uint4* xs, const uint4* xg,
                                        int M, int np, int g, int t, int c, bool in) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    if constexpr (XSM) {
        xl = g < M ? xs[(c * M + g) * 4 + t] : zero;
        xh = HI && g + 8 < M ? xs[(c * M + g + 8) * 4 + t] : zero;
    } else {
        xl = g < M && in ? __ldg(xg + (size_t)g * np + 4 * c + t) : zero;
        xh = HI && g + 8 < M && in ? __ldg(xg + (size_t)(g + 8) * np + 4 * c + t) : zero;
    }
}

// One batch of a warp's W loads: U chunks of the gate and the up row, from chunk c.
template <int U>
__device__ __forceinline__ void load_batch(uint4 (&bg)[U], uint4 (&bu)[U], const uint4* wg,
                                           const uint4* wu, int c) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        bg[u] = ld_stream(wg + 4 * (c + u));
        bu[u] = ld_stream(wu + 4 * (c + u));
    }
}

// The lane's rows of tile `tile` (its lane's t-th pack of row n0 + g; rows past N re-read the
// last one, never stored).
__device__ __forceinline__ void tile_rows(const uint4*& wg, const uint4*& wu, const bf16* Wg,
                                          const bf16* Wu, int tile, int g, int t, int N, int K) {
    const int row = min(tile * 8 + g, N - 1);
    wg = reinterpret_cast<const uint4*>(Wg + (size_t)row * K) + t;
    wu = reinterpret_cast<const uint4*>(Wu + (size_t)row * K) + t;
}

// The end of a tile: the chunks past the last whole batch (from c0; the last maybe partial),
// then y = bf16(SiLU(g) * u) from the C fragments (element i at row g + 8 * (i >> 1), column
// n0 + 2t + (i & 1), for the gate and the up tile alike), accumulators cleared.
template <bool HI, bool XSM>
__device__ __forceinline__ void finish_tile(float (&cg)[2][4], float (&cu)[2][4], const uint4* wg,
                                            const uint4* wu, const uint4* xs, const uint4* xg,
                                            bf16* y, int M, int N, int np, int nch, int c0,
                                            int n0, int g, int t) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int c = c0; c < nch; ++c) {
        const bool in = 4 * c + t < np;  // this lane's 8 k values exist
        const uint4 bgc = in ? ld_stream(wg + 4 * c) : zero;
        const uint4 buc = in ? ld_stream(wu + 4 * c) : zero;
        uint4 xl, xh;
        a_frags<HI, XSM>(xl, xh, xs, xg, M, np, g, t, c, in);
        chunk_mma(cg[0], xl, xh, bgc);
        chunk_mma(cu[0], xl, xh, buc);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = g + 8 * h;
        const int n = n0 + 2 * t;
        float out[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float gv = cg[0][2 * h + e] + cg[1][2 * h + e];
            const float uv = cu[0][2 * h + e] + cu[1][2 * h + e];
            out[e] = gv / (1.0f + expf(-gv)) * uv;
        }
        if (m < M) {
            bf16* yp = y + (size_t)m * N + n;
            if ((N & 1) == 0 && n + 1 < N) {  // a 4-byte aligned pair
                *reinterpret_cast<__nv_bfloat162*>(yp) = __floats2bfloat162_rn(out[0], out[1]);
            } else {
                if (n < N) yp[0] = __float2bfloat16(out[0]);
                if (n + 1 < N) yp[1] = __float2bfloat16(out[1]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) cg[0][i] = cg[1][i] = cu[0][i] = cu[1][i] = 0.0f;
}

// HI: M > 8 (the A fragments' rows g + 8 are live); XSM: x staged in shared memory.
template <bool HI, bool XSM>
__global__ void __launch_bounds__(THREADS)
    gate_up_mma_kernel(const bf16* __restrict__ x, const bf16* __restrict__ Wg,
                       const bf16* __restrict__ Wu, bf16* __restrict__ y, int M, int N, int K) {
    // chunks per batch; half where x comes through L1 (its A fragments need more registers:
    // 4 chunks spilled there at 512 threads)
    constexpr int U = XSM ? UNROLL : UNROLL / 2;
    extern __shared__ uint4 xs[];  // [chunk][row < M][t < 4] 16-byte packs of x
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int np = K >> 3;           // 16-byte packs per row
    const int nch = (K + 31) >> 5;   // 32-wide k chunks (the last may be partial)
    const int full = (K >> 5) / U;   // whole batches per tile
    const int tiles = (N + 7) >> 3;
    const int stride = gridDim.x * WARPS;
    int tile = warp * gridDim.x + blockIdx.x;  // tiles dealt over the blocks first

    // the first batch's lines of this warp's first tile, into L2 while x is staged
    if (tile < tiles && full > 0 && t == 0) {
        const int row = min(tile * 8 + g, N - 1);
#pragma unroll
        for (int u = 0; u < U; u += 2) {  // two chunks: 128 bytes of a row, one line
            prefetch_l2(Wg + (size_t)row * K + 32 * u);
            prefetch_l2(Wu + (size_t)row * K + 32 * u);
        }
    }
    const uint4* xg = reinterpret_cast<const uint4*>(x);
    if constexpr (XSM) {
        for (int i = threadIdx.x; i < nch * M * 4; i += THREADS) {
            const int tt = i & 3, r = (i >> 2) % M, c = (i >> 2) / M, j = 4 * c + tt;
            xs[i] = j < np ? __ldg(xg + (size_t)r * np + j) : make_uint4(0, 0, 0, 0);
        }
        __syncthreads();
    }

    float cg[2][4] = {}, cu[2][4] = {};  // two accumulator sets per matrix: even, odd chunks
    if (tile < tiles && full > 0) {
        // Software pipeline over the warp's (tile, batch) sequence: the next batch's loads are
        // issued (in a block of their own) before this batch's MMAs, across tiles too, so 1-2
        // batches (8-16 x 16 bytes a lane) are always in flight; ptxas otherwise places loads
        // next to their first use.
        const uint4 *wg, *wu;
        tile_rows(wg, wu, Wg, Wu, tile, g, t, N, K);
        int it = 0;
        uint4 cbg[U], cbu[U];
        load_batch<U>(cbg, cbu, wg, wu, 0);
        for (;;) {
            int tile2 = tile, it2 = it + 1;
            const uint4 *wg2 = wg, *wu2 = wu;
            if (it2 == full) {
                it2 = 0;
                tile2 += stride;
                tile_rows(wg2, wu2, Wg, Wu, tile2, g, t, N, K);
            }
            const bool more = tile2 < tiles;
            uint4 nbg[U], nbu[U];
            if (more) load_batch<U>(nbg, nbu, wg2, wu2, it2 * U);
            const int c = it * U;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                uint4 xl, xh;
                a_frags<HI, XSM>(xl, xh, xs, xg, M, np, g, t, c + u, true);
                chunk_mma(cg[u & 1], xl, xh, cbg[u]);
                chunk_mma(cu[u & 1], xl, xh, cbu[u]);
            }
            if (it == full - 1)
                finish_tile<HI, XSM>(cg, cu, wg, wu, xs, xg, y, M, N, np, nch, full * U,
                                     tile * 8, g, t);
            if (!more) break;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                cbg[u] = nbg[u];
                cbu[u] = nbu[u];
            }
            wg = wg2;
            wu = wu2;
            tile = tile2;
            it = it2;
        }
    } else {
        for (; tile < tiles; tile += stride) {  // K shorter than one batch (32 * U)
            const uint4 *wg, *wu;
            tile_rows(wg, wu, Wg, Wu, tile, g, t, N, K);
            finish_tile<HI, XSM>(cg, cu, wg, wu, xs, xg, y, M, N, np, nch, 0, tile * 8, g, t);
        }
    }
}

template <bool HI, bool XSM>
static void launch(const bf16* x, const bf16* Wg, const bf16* Wu, bf16* y, int M, int N, int K,
                   size_t smem) {
    static int sms = 0, per_sm = 0;
    static size_t for_smem = (size_t)-1;  // the dynamic shared memory the figures are for
    if (sms == 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    }
    if (for_smem != smem) {
        if (smem > 48 * 1024)
            cudaFuncSetAttribute(gate_up_mma_kernel<HI, XSM>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gate_up_mma_kernel<HI, XSM>,
                                                      THREADS, smem);
        if (per_sm < 1) per_sm = 1;
        for_smem = smem;
    }
    // every resident block (tiles are dealt over the blocks first: at 11008 x 4096 each SM gets
    // 10-11 busy warps whatever THREADS is), no more blocks than tiles
    const int tiles = (N + 7) / 8;
    long long blocks = (long long)sms * per_sm;
    if (blocks > tiles) blocks = tiles;
    gate_up_mma_kernel<HI, XSM><<<(unsigned)blocks, THREADS, smem, 0>>>(x, Wg, Wu, y, M, N, K);
}

// One slab of M <= 16 rows of x.
static void slab(const bf16* x, const bf16* Wg, const bf16* Wu, bf16* y, int M, int N, int K) {
    static int optin = -1;  // the largest dynamic shared memory a block may have
    if (optin < 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    }
    const size_t smem = (size_t)((K + 31) / 32) * M * 64;  // [chunk][row][4] 16-byte packs
    const bool xsm = smem <= (size_t)optin;
    if (M > 8) {
        if (xsm) launch<true, true>(x, Wg, Wu, y, M, N, K, smem);
        else launch<true, false>(x, Wg, Wu, y, M, N, K, 0);
    } else {
        if (xsm) launch<false, true>(x, Wg, Wu, y, M, N, K, smem);
        else launch<false, false>(x, Wg, Wu, y, M, N, K, 0);
    }
}

extern "C" void solve(const __nv_bfloat16* x, const __nv_bfloat16* Wg, const __nv_bfloat16* Wu,
                      __nv_bfloat16* y, int M, int N, int K) {
    if (M < 1 || N < 1 || K < 8 || K % 8 != 0) return;  // 16-byte aligned rows (restrictions)
    for (int m0 = 0; m0 < M; m0 += MT) {
        const int rows = M - m0 < MT ? M - m0 : MT;
        slab(x + (size_t)m0 * K, Wg, Wu, y + (size_t)m0 * N, rows, N, K);
    }
}
