// w4a16_gemv v2 -- int4-weight x fp16-activation GEMV / skinny GEMM on tensor cores
// (mma.sync m16n8k16, fp16 operands, fp32 accumulation), for the same contract as
// ../w4a16_gemv.cu:
//   y[m][n] = sum_k x[m][k] * (q[n][k] - 8) * scales[n][k / 128]
// qweight int32 [N, K/8] (word j of row n: nibble e, bits 4e..4e+3, is q[n][8j + e]);
// scales fp16 [N, K/128]; x fp16 [M, K]; y fp16 [M, N]. Same solve() signature, same launch
// parameter (THREADS, -D, a power of two in [64, 512]); no other define is read.
//
// Design (written from iteration 1's evidence, ../versions/v2.md):
// - Swap AB: the weight tile is the mma's A operand (16 output channels n x 16 k), the
//   activations the B operand (16 k x 8 activation rows: M = 1 pads to 8 with zero lanes,
//   M = 16 is two n8 tiles), D = W x^T in fp32. Each dequantized weight is used by one
//   mma for every activation row at once (M = 16: 16 rows per weight, no re-dequantization).
// - Dequantization without int->float instructions (the magic-number trick of
//   FasterTransformer / Marlin): (w & 0x000f000f) | 0x64006400 is the half2 (1024 + q_e,
//   1024 + q_e+4); minus 1032 gives q - 8 exactly; the odd nibbles (bits 4..7, 20..23) come
//   out as 1024 + 16 q and fma(h, 1/16, -72) gives q - 8 exactly. One shift, 4 LOP3, 2 HADD2,
//   2 HFMA2 per 8 weights. The pairs it yields, (k0, k4), (k1, k5), (k2, k6), (k3, k7) of each
//   word, are not the mma's (k, k+1) pairs: the k order inside a step does not matter to the
//   sum, so the activations are permuted to match instead (PRMT 0x5410 / 0x7632 of x's
//   half2 words), once per step and activation tile, shared by every weight row.
// - Exact weights, fp32 sums: a warp step is one scale group (128 k) of 16 rows; its 8 mmas
//   accumulate into a zeroed fp32 fragment, which is then scaled by the group's fp32 scale
//   per row and added to the running fp32 sums. No product or partial is rounded to fp16;
//   y is rounded once.
// - Parallelism: a block owns 16 rows (32 for M > 8, each x fragment reused by two row
//   tiles) and all of K; its THREADS / 32 warps split the K / 128 groups (split-K inside the
//   block), each warp loading U groups at once (U = 4 at M <= 8: 8 x 16-byte loads per lane
//   in flight, 4 KB per warp). The fp32 partial fragments are summed across the warps in
//   shared memory (one barrier). No atomics, no workspace, one launch; deterministic.
// - Cache policy: weights (read once) are loaded with ld.global.nc.L1::no_allocate (+ an
//   L2 256-byte prefetch hint), so L1 keeps x, which every block on an SM re-reads
//   (128 KB at M = 16); x and scales through the read-only path (__ldg).
//
// Bytes moved (the sweep's `bytes`: weights + scales + x + y) and an ESTIMATE of the kernel
// time on one H200 (4.8 TB/s peak DRAM; ~85% of peak sustained and ~1 us of DRAM ramp-up
// assumed; not measured; kopt's timed interval adds the launch on top, and its smallest
// measured kernels on this H200 take ~5 us: rmsnorm_residual at one row 0.0049 ms):
//   M = 1,  N = 4096:   8,667,136 B -> ~2 us + ~1 us  (iteration 1's best: 14.0 us, 617 GB/s)
//   M = 1,  N = 11008: 23,279,104 B -> ~5.7 us + ~1 us (iteration 1's best: 18.7 us, 1242 GB/s;
//                                     75% of peak, 3.6 TB/s, is 6.47 us for these bytes)
//   M = 16, N = 4096:   8,912,896 B of DRAM; x (128 KB) re-read by each of 128 blocks through
//                       L1/L2: ~3-5 us (iteration 1's best: 48.3 us)
//   M = 16, N = 11008: 23,732,224 B; ~7-10 us (iteration 1's best: 111.9 us)
// Instruction budget: the sm_90 SASS of the M <= 8 kernel's main loop is 546 instructions for
// 4 groups (~136 warp instructions per 1 KB step; per lane and step: 2 LDG.128 of weights,
// 2 scale loads, 4 LDG.128 of x (lanes g < M), 8 SHF + 32 LOP3 + 16 HADD2 + 16 HFMA2 for the
// 8 words, 16 PRMT, 8 HMMA.16816.F32, 4 FFMA, addressing): ~2.9 us of issue over
// 132 SMs at N = 11008 (4 per clock per SM, 1.98 GHz), under the DRAM time. ptxas (THREADS
// 64/128/256, sm_90): 69 registers (M <= 8 kernel), 129-131 (M > 8), no spills. Needs sm_80+
// (mma.sync m16n8k16, ld.global.nc.L1::no_allocate.L2::256B).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#ifndef THREADS
#define THREADS 128
#endif

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 64 || THREADS > 512
#error "THREADS must be a power of two in [64, 512]"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "w4a16 v2 needs sm_80 or newer (mma.sync m16n8k16)"
#endif

#define GROUP 128              // weights per scale = k per warp step
#define WARPS (THREADS / 32)   // warps per block, splitting K

// 16 bytes of weights, read once: not allocated in L1 (L1 keeps x), 256-byte L2 prefetch.
__device__ __forceinline__ uint4 ld_weights(const uint32_t* p) {
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

// (w & mask) | 0x64006400 (1024.0 in both halves) as one LOP3: written in C, the compiler
// emits an AND and an OR (a LOP3 takes one immediate), so the constants go in as registers.
__device__ __forceinline__ uint32_t and_or(uint32_t w, uint32_t mask) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "r"(mask), "r"(0x64006400u));
    return r;  // 0xEA: (a & b) | c
}

// The 8 int4 codes of word w as 4 half2 of q - 8 (exact):
//   p[0] = (q0, q4), p[1] = (q1, q5), p[2] = (q2, q6), p[3] = (q3, q7)   (low half first)
__device__ __forceinline__ void dequant8(uint32_t w, uint32_t (&p)[4]) {
    const uint32_t w2 = w >> 8;
    p[0] = and_or(w, 0x000f000fu);   // 1024 + q0,      1024 + q4
    p[1] = and_or(w, 0x00f000f0u);   // 1024 + 16 q1,   1024 + 16 q5
    p[2] = and_or(w2, 0x000f000fu);  // 1024 + q2,      1024 + q6
    p[3] = and_or(w2, 0x00f000f0u);  // 1024 + 16 q3,   1024 + 16 q7
    // - 1032 (0x6408)                 -> q - 8
    asm("sub.f16x2 %0, %0, %1;" : "+r"(p[0]) : "r"(0x64086408u));
    asm("sub.f16x2 %0, %0, %1;" : "+r"(p[2]) : "r"(0x64086408u));
    // * 1/16 (0x2C00) - 72 (0xD480)   -> 64 + q - 72 = q - 8
    asm("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(p[1]) : "r"(0x2c002c00u), "r"(0xd480d480u));
    asm("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(p[3]) : "r"(0x2c002c00u), "r"(0xd480d480u));
}

// d += A (16x16, row) * B (16x8, col), fp16 operands, fp32 accumulators.
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One warp step: scale group s (k = 128 s .. 128 s + 127) of RT row tiles x MT activation
// tiles. Lane (g = lane / 4, t = lane % 4) holds, per row tile, the 16 bytes of rows g and
// g + 8 at words 16 s + 4 t .. + 3, i.e. k = 128 s + 32 t + 8 c + e (word c, nibble e), and
// loads x[m][128 s + 32 t .. + 31] for its activation rows m = 8 mt + g (zeros past M).
//
// mma i = 2 c + h (c: word, h: half of it) takes, per lane,
//   A: a0 = P_2h(row g), a1 = P_2h(row g+8), a2 = P_2h+1(row g), a3 = P_2h+1(row g+8)
//   (the fragment's columns 2t, 2t+1 | 2t+8, 2t+9), so column 2t is k-offset 8c+2h, 2t+1 is
//   8c+2h+4, 2t+8 is 8c+2h+1, 2t+9 is 8c+2h+5, for every lane of the same t;
//   B: b0 = (x[8c+2h], x[8c+2h+4]), b1 = (x[8c+2h+1], x[8c+2h+5]) (rows 2t, 2t+1 | 2t+8,
//   2t+9 of the fragment, column g = activation row), the same k.
template <int MT, int RT>
__device__ __forceinline__ void warp_step(const uint4 (&wv)[RT][2], const float (&sc)[RT][2],
                                          const __half* const (&xp)[MT],
                                          const bool (&xok)[MT], int s,
                                          float (&acc)[RT][MT][4]) {
    uint32_t b[MT][8][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        uint4 xv[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            xv[c] = xok[mt] ? __ldg(reinterpret_cast<const uint4*>(xp[mt] + (long long)s * GROUP)
                                    + c)
                            : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {  // word c: halves (x0,x1) (x2,x3) (x4,x5) (x6,x7)
            b[mt][2 * c][0] = __byte_perm(xv[c].x, xv[c].z, 0x5410);      // (x0, x4)
            b[mt][2 * c][1] = __byte_perm(xv[c].x, xv[c].z, 0x7632);      // (x1, x5)
            b[mt][2 * c + 1][0] = __byte_perm(xv[c].y, xv[c].w, 0x5410);  // (x2, x6)
            b[mt][2 * c + 1][1] = __byte_perm(xv[c].y, xv[c].w, 0x7632);  // (x3, x7)
        }
    }
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
        float d[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) d[mt][e] = 0.0f;
        const uint32_t w0[4] = {wv[rt][0].x, wv[rt][0].y, wv[rt][0].z, wv[rt][0].w};
        const uint32_t w8[4] = {wv[rt][1].x, wv[rt][1].y, wv[rt][1].z, wv[rt][1].w};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            uint32_t pg[4], ph[4];  // row g, row g + 8
            dequant8(w0[c], pg);
            dequant8(w8[c], ph);
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    mma16816(d[mt], pg[2 * h], ph[2 * h], pg[2 * h + 1], ph[2 * h + 1],
                             b[mt][2 * c + h][0], b[mt][2 * c + h][1]);
        }
        // d: (row g, act 2t), (row g, act 2t+1), (row g+8, act 2t), (row g+8, act 2t+1)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            acc[rt][mt][0] = fmaf(sc[rt][0], d[mt][0], acc[rt][mt][0]);
            acc[rt][mt][1] = fmaf(sc[rt][0], d[mt][1], acc[rt][mt][1]);
            acc[rt][mt][2] = fmaf(sc[rt][1], d[mt][2], acc[rt][mt][2]);
            acc[rt][mt][3] = fmaf(sc[rt][1], d[mt][3], acc[rt][mt][3]);
        }
    }
}

// MT activation tiles of 8 rows (M <= 8 * MT; rows past M are zero lanes), RT row tiles of
// 16 output channels per block. Block b owns channels 16 RT b .. 16 RT b + 16 RT - 1.
template <int MT, int RT>
__global__ void __launch_bounds__(THREADS)
    w4a16_mma_kernel(const uint32_t* __restrict__ qw, const __half* __restrict__ scales,
                     const __half* __restrict__ x, __half* __restrict__ y, int M, int N, int K) {
    // groups loaded at once per warp (THREADS = 512 caps ptxas at 128 registers: U = 1 there
    // keeps the M > 8 kernel from spilling)
    constexpr int U = MT * RT == 1 ? 4 : (THREADS >= 512 ? 1 : 2);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int nw = K / 8, G = K / GROUP;  // words, scale groups per row
    const int n0 = blockIdx.x * (16 * RT);

    const uint32_t* wp[RT][2];  // this lane's 16-byte column of rows g, g + 8 (clamped)
    const __half* sp[RT][2];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = min(n0 + 16 * rt + g + 8 * h, N - 1);  // past N: loaded, never stored
            wp[rt][h] = qw + (long long)n * nw + 4 * t;
            sp[rt][h] = scales + (long long)n * G;
        }
    const __half* xp[MT];
    bool xok[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int m = 8 * mt + g;
        xok[mt] = m < M;
        xp[mt] = x + (long long)(xok[mt] ? m : 0) * K + 32 * t;
    }

    float acc[RT][MT][4];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[rt][mt][e] = 0.0f;

    // this warp's share of the K / 128 groups (contiguous; split-K over the block's warps)
    const int s_end = (int)((long long)G * (warp + 1) / WARPS);
    int s = (int)((long long)G * warp / WARPS);
    for (; s + U <= s_end; s += U) {
        uint4 wv[U][RT][2];
        float sc[U][RT][2];
#pragma unroll
        for (int u = 0; u < U; ++u)  // every load of the U groups issued before any math
#pragma unroll
            for (int rt = 0; rt < RT; ++rt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    wv[u][rt][h] = ld_weights(wp[rt][h] + 16 * (s + u));
                    sc[u][rt][h] = __half2float(__ldg(sp[rt][h] + s + u));
                }
#pragma unroll
        for (int u = 0; u < U; ++u) warp_step<MT, RT>(wv[u], sc[u], xp, xok, s + u, acc);
    }
    for (; s < s_end; ++s) {  // the rest (K / 128 not a multiple of U * WARPS)
        uint4 wv[RT][2];
        float sc[RT][2];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                wv[rt][h] = ld_weights(wp[rt][h] + 16 * s);
                sc[rt][h] = __half2float(__ldg(sp[rt][h] + s));
            }
        warp_step<MT, RT>(wv, sc, xp, xok, s, acc);
    }

    // split-K reduction: the warps' fp32 fragments summed in shared memory
    constexpr int V = RT * MT * 4;  // fragment values per lane
    __shared__ float red[WARPS][V][32];
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e) red[warp][(rt * MT + mt) * 4 + e][lane] = acc[rt][mt][e];
    __syncthreads();
    for (int i = threadIdx.x; i < V * 32; i += THREADS) {
        const int j = i >> 5, ln = i & 31;
        const int e = j & 3, mt = (j >> 2) % MT, rt = (j >> 2) / MT;
        const int n = n0 + 16 * rt + (ln >> 2) + 8 * (e >> 1);
        const int m = 8 * mt + 2 * (ln & 3) + (e & 1);
        if (n >= N || m >= M) continue;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) sum += red[w][j][ln];
        y[(long long)m * N + n] = __float2half_rn(sum);
    }
}

template <int MT, int RT>
static void launch(const uint32_t* qw, const __half* scales, const __half* x, __half* y, int M,
                   int N, int K) {
    const unsigned blocks = (unsigned)((N + 16 * RT - 1) / (16 * RT));
    w4a16_mma_kernel<MT, RT><<<blocks, THREADS, 0, 0>>>(qw, scales, x, y, M, N, K);
}

extern "C" void solve(const int32_t* qweight, const half* scales, const half* x, half* y, int M,
                      int N, int K) {
    if (M < 1 || N < 1 || K < GROUP || K % GROUP != 0) return;  // outside the sweep's sizes
    const uint32_t* qw = reinterpret_cast<const uint32_t*>(qweight);
    // activation rows in chunks of 16 (the sweep's M: 1, 4, 16 -> one launch)
    for (int m0 = 0; m0 < M; m0 += 16) {
        const int mc = M - m0 < 16 ? M - m0 : 16;
        const half* xc = x + (long long)m0 * K;
        half* yc = y + (long long)m0 * N;
        if (mc <= 8)
            launch<1, 1>(qw, scales, xc, yc, mc, N, K);
        else
            launch<2, 2>(qw, scales, xc, yc, mc, N, K);
    }
}
