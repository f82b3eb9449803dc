// rmsnorm_residual.cu -- RMSNorm with the residual add fused (vLLM's fused_add_rms_norm), bf16
// in and out, fp32 accumulation. Per row r of [ROWS, H]:
//   s              = bf16(x[r] + residual[r])        (the new residual stream)
//   residual[r]    = s                               (in/out: updated in place)
//   out[r]         = bf16(s * w / sqrt(mean(s^2) + eps))
// The variance is taken over the rounded sums s, as the unfused PyTorch code (add in bf16, then
// rms_norm) and vLLM's kernel do; the product s * inv * w is rounded once.
//
// Baseline (no defines): one block of THREADS threads per row, two passes. Pass 1: a strided,
// coalesced loop of scalar bf16 loads computes s, stores it to residual and accumulates s^2 in
// fp32; a shared-memory tree reduction (one __syncthreads() per level) gives the sum. Pass 2
// reads s back from residual (global memory, written by the same thread) and the weight, and
// writes out.
//
// Tuning knobs (all -D defines, each with a default below):
//   THREADS     threads per block (launch config), a power of two in [32, 1024].
//   USE_SHUFFLE compute.warp_reduction and latency.warp_shuffle_sync (the same edit):
//               __shfl_xor_sync butterflies, one shared slot per warp, two barriers per
//               reduction instead of log2(THREADS).
//   VEC         memory.vectorized_access: VEC = 8 moves 16-byte packs of 8 bf16 (LDG.128 /
//               STG.128). Needs H % 8 == 0 (every row 16-byte aligned); other H take the
//               scalar path at run time.
//   SMEM_ROW    memory.tiling_smem: pass 1 keeps the row's sums s in dynamic shared memory
//               (2 * H bytes per row) and pass 2 reads them from there instead of reading
//               residual back from global memory (L2): 2 bytes per element less traffic.
//   UNROLL      compute.ilp_unroll: each loop step issues the loads of UNROLL packs before
//               using any of them (UNROLL independent loads in flight per thread).
//   WARP_ROW    latency.reduce_sync_count: one warp per row (THREADS / 32 rows per block),
//               reduced with warp shuffles only: no block barrier at all. Many small rows
//               suit it; one decode row leaves the other warps of the GPU idle.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#ifndef THREADS
#define THREADS 256
#endif
#ifndef USE_SHUFFLE
#define USE_SHUFFLE 0
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef SMEM_ROW
#define SMEM_ROW 0
#endif
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef WARP_ROW
#define WARP_ROW 0
#endif

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif
#if VEC != 1 && VEC != 8
#error "VEC must be 1 or 8"
#endif
#if UNROLL < 1 || UNROLL > 8
#error "UNROLL must be in [1, 8]"
#endif

typedef __nv_bfloat16 bf16;

// V bf16 values moved as one access (V = 8: 16 bytes).
template <int V>
struct alignas(2 * V) Pack {
    bf16 e[V];
};

#if WARP_ROW
#define ROW_THREADS 32                // one warp per row
#define ROWS_PER_BLOCK (THREADS / 32)
#else
#define ROW_THREADS THREADS
#define ROWS_PER_BLOCK 1
#endif

// Sum of v over the ROW_THREADS threads of a row; every thread of the row gets the result.
__device__ __forceinline__ float row_allreduce_sum(float v) {
#if WARP_ROW
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
#elif USE_SHUFFLE
    __shared__ float warp_sums[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (THREADS == 32) return v;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = warp_sums[lane % (THREADS / 32)];  // every warp reduces the warp sums
#pragma unroll
    for (int off = THREADS / 64; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
#else
    __shared__ float sm[THREADS];
    sm[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sm[threadIdx.x] += sm[threadIdx.x + s];
        __syncthreads();
    }
    return sm[0];
#endif
}

// One row: x, res, out point at its first element, t is the thread's index in the row.
template <int V>
__device__ __forceinline__ void norm_row(const bf16* __restrict__ x, bf16* __restrict__ res,
                                         const bf16* __restrict__ w, bf16* __restrict__ out,
                                         Pack<V>* __restrict__ srow, float eps, int H, int t) {
    const Pack<V>* xv = reinterpret_cast<const Pack<V>*>(x);
    Pack<V>* rv = reinterpret_cast<Pack<V>*>(res);
    const Pack<V>* wv = reinterpret_cast<const Pack<V>*>(w);
    Pack<V>* ov = reinterpret_cast<Pack<V>*>(out);
    const int n = H / V;  // packs per row
    (void)srow;

    // Pass 1: s = x + residual, stored; sum of s^2.
    float ss = 0.0f;
    for (int i0 = t; i0 < n; i0 += ROW_THREADS * UNROLL) {
        Pack<V> xa[UNROLL], ra[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + u * ROW_THREADS;
            if (i < n) {
                xa[u] = xv[i];
                ra[u] = rv[i];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + u * ROW_THREADS;
            if (i < n) {
                Pack<V> s;
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    s.e[e] = __float2bfloat16(__bfloat162float(xa[u].e[e]) +
                                              __bfloat162float(ra[u].e[e]));
                    const float f = __bfloat162float(s.e[e]);
                    ss += f * f;
                }
                rv[i] = s;
#if SMEM_ROW
                srow[i] = s;
#endif
            }
        }
    }
    const float inv = 1.0f / sqrtf(row_allreduce_sum(ss) / (float)H + eps);

    // Pass 2: out = s * inv * w (the thread reads back only the packs it wrote).
    for (int i0 = t; i0 < n; i0 += ROW_THREADS * UNROLL) {
        Pack<V> sa[UNROLL], wa[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + u * ROW_THREADS;
            if (i < n) {
#if SMEM_ROW
                sa[u] = srow[i];
#else
                sa[u] = rv[i];
#endif
                wa[u] = wv[i];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int i = i0 + u * ROW_THREADS;
            if (i < n) {
                Pack<V> o;
#pragma unroll
                for (int e = 0; e < V; ++e)
                    o.e[e] = __float2bfloat16(__bfloat162float(sa[u].e[e]) * inv *
                                              __bfloat162float(wa[u].e[e]));
                ov[i] = o;
            }
        }
    }
}

template <int V>
__global__ void __launch_bounds__(THREADS)
    rmsnorm_residual_kernel(const bf16* __restrict__ x, bf16* __restrict__ residual,
                            const bf16* __restrict__ weight, bf16* __restrict__ out, float eps,
                            int ROWS, int H) {
#if SMEM_ROW
    extern __shared__ __align__(16) unsigned char smem_raw[];
#endif
#if WARP_ROW
    const int sub = threadIdx.x >> 5, t = threadIdx.x & 31;
#else
    const int sub = 0, t = threadIdx.x;
#endif
    const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + sub;
    if (row >= ROWS) return;  // WARP_ROW only: a whole warp leaves, no block barrier follows
    Pack<V>* srow = nullptr;
#if SMEM_ROW
    srow = reinterpret_cast<Pack<V>*>(smem_raw) + (size_t)sub * (H / V);
#endif
    const size_t off = (size_t)row * H;
    norm_row<V>(x + off, residual + off, weight, out + off, srow, eps, H, t);
}

template <int V>
static void launch(const bf16* x, bf16* residual, const bf16* weight, bf16* out, float eps,
                   int ROWS, int H) {
    const unsigned grid = (unsigned)((ROWS + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    size_t smem = 0;
#if SMEM_ROW
    smem = (size_t)ROWS_PER_BLOCK * H * sizeof(bf16);
    static size_t opted = 48 * 1024;  // dynamic shared memory above 48 KB must be opted into
    if (smem > opted) {
        cudaFuncSetAttribute(rmsnorm_residual_kernel<V>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        opted = smem;
    }
#endif
    rmsnorm_residual_kernel<V><<<grid, THREADS, smem, 0>>>(x, residual, weight, out, eps, ROWS,
                                                            H);
}

extern "C" void solve(const __nv_bfloat16* x, __nv_bfloat16* residual,
                      const __nv_bfloat16* weight, __nv_bfloat16* out, float eps, int ROWS,
                      int H) {
    if (ROWS <= 0 || H <= 0) return;
#if VEC == 8
    if (H % 8 == 0) {  // every row starts 16-byte aligned (torch's allocations are)
        launch<8>(x, residual, weight, out, eps, ROWS, H);
        return;
    }
#endif
    launch<1>(x, residual, weight, out, eps, ROWS, H);
}
