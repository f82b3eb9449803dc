// softmax.cu -- row-wise softmax of a float32 [ROWS, COLS] matrix:
// out[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r).
//
// Baseline (no defines): one block of THREADS = 256 threads per row and
// three passes over the row: (1) max, (2) sum of exp(x - max), (3) write
// exp(x - max) / sum. Each pass is a strided loop (coalesced) followed by a
// shared-memory tree reduction with a __syncthreads() per level. expf is the
// accurate libdevice exp.
//
// Tuning knobs (all -D defines, each with a default below):
//   THREADS       threads per block, a power of two (launch config).
//   USE_SHUFFLE   compute.warp_reduction and latency.warp_shuffle_sync (the
//                 same edit): __shfl_xor_sync butterfly inside each warp, one
//                 shared slot per warp, a second butterfly over the warp
//                 results; two barriers per reduction instead of log2(THREADS).
//   ONLINE        memory.kernel_fusion: online softmax. One pass keeps a
//                 running (max, sum) per thread, rescaling the sum when the
//                 max grows; the (max, sum) pairs are merged across the block
//                 the same way. Two passes over the row instead of three.
//   VEC           memory.vectorized_access: VEC=4 moves float4s (LDG.128 /
//                 STG.128). Needs COLS % 4 == 0 so that every row starts
//                 16-byte aligned; other COLS take the scalar path at run time.
//   FAST_EXP      compute.fast_math: __expf (ex2.approx with a prescale)
//                 instead of expf; a few ulp, well inside the tolerance.
//   LAUNCH_BOUNDS, MIN_BLOCKS
//                 compute.launch_config: __launch_bounds__(THREADS, MIN_BLOCKS)
//                 so ptxas caps registers for MIN_BLOCKS resident blocks/SM
//                 (the baseline only declares __launch_bounds__(THREADS)).
#include <cuda_runtime.h>
#include <cfloat>

#ifndef THREADS
#define THREADS 256
#endif
#ifndef USE_SHUFFLE
#define USE_SHUFFLE 0
#endif
#ifndef ONLINE
#define ONLINE 0
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef FAST_EXP
#define FAST_EXP 0
#endif
#ifndef LAUNCH_BOUNDS
#define LAUNCH_BOUNDS 0
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif

#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif
#if VEC != 1 && VEC != 4
#error "VEC must be 1 or 4"
#endif

#if LAUNCH_BOUNDS
#define KERNEL_BOUNDS __launch_bounds__(THREADS, MIN_BLOCKS)
#else
#define KERNEL_BOUNDS __launch_bounds__(THREADS)
#endif

__device__ __forceinline__ float EXP(float v) {
#if FAST_EXP
    return __expf(v);
#else
    return expf(v);
#endif
}

struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Reduce v over the block with op; every thread gets the result. Ends with a
// barrier so the shared buffer can be reused by the next call.
template <typename Op>
__device__ __forceinline__ float block_allreduce(float v, Op op) {
#if USE_SHUFFLE
    __shared__ float warp_vals[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    if (THREADS == 32) return v;
    if (lane == 0) warp_vals[warp] = v;
    __syncthreads();
    v = warp_vals[lane % (THREADS / 32)];  // every warp reduces the warp results
#pragma unroll
    for (int off = THREADS / 64; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
    __syncthreads();
    return v;
#else
    __shared__ float sm[THREADS];
    sm[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sm[threadIdx.x] = op(sm[threadIdx.x], sm[threadIdx.x + s]);
        __syncthreads();
    }
    v = sm[0];
    __syncthreads();
    return v;
#endif
}

#if ONLINE
// Merge the running softmax state (m2, s2) into (m, s).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mn = fmaxf(m, m2);
    s = s * EXP(m - mn) + s2 * EXP(m2 - mn);
    m = mn;
}

// (max, sum) over the block; every thread gets the result.
__device__ __forceinline__ void block_allreduce_state(float& m, float& s) {
#if USE_SHUFFLE
    __shared__ float wm[THREADS / 32], ws[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        merge(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
    if (THREADS == 32) return;
    if (lane == 0) { wm[warp] = m; ws[warp] = s; }
    __syncthreads();
    m = wm[lane % (THREADS / 32)];
    s = ws[lane % (THREADS / 32)];
#pragma unroll
    for (int off = THREADS / 64; off > 0; off >>= 1)
        merge(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
    __syncthreads();
#else
    __shared__ float sm_m[THREADS], sm_s[THREADS];
    sm_m[threadIdx.x] = m;
    sm_s[threadIdx.x] = s;
    __syncthreads();
#pragma unroll
    for (int st = THREADS / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) {
            float mm = sm_m[threadIdx.x], ss = sm_s[threadIdx.x];
            merge(mm, ss, sm_m[threadIdx.x + st], sm_s[threadIdx.x + st]);
            sm_m[threadIdx.x] = mm;
            sm_s[threadIdx.x] = ss;
        }
        __syncthreads();
    }
    m = sm_m[0];
    s = sm_s[0];
    __syncthreads();
#endif
}
#endif  // ONLINE

// One row per block. V = floats per access (4: float4, 1: scalar).
template <int V>
__device__ __forceinline__ void softmax_row(const float* __restrict__ xr, float* __restrict__ orow, int COLS) {
    const float* xv = xr;
    float* ov = orow;
    const int nvec = COLS / V;  // accesses per row

#if ONLINE
    // Pass 1 (fused): running max and rescaled sum.
    float m = -FLT_MAX, s = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += THREADS) {
        if constexpr (V == 4) {
            const float4 v = reinterpret_cast<const float4*>(xv)[i];
            const float mv = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
            if (mv > m) { s *= EXP(m - mv); m = mv; }
            s += (EXP(v.x - m) + EXP(v.y - m)) + (EXP(v.z - m) + EXP(v.w - m));
        } else {
            const float v = reinterpret_cast<const float*>(xv)[i];
            if (v > m) { s = s * EXP(m - v) + 1.0f; m = v; }
            else       { s += EXP(v - m); }
        }
    }
    block_allreduce_state(m, s);
#else
    // Pass 1: max.
    float m = -FLT_MAX;
    for (int i = threadIdx.x; i < nvec; i += THREADS) {
        if constexpr (V == 4) {
            const float4 v = reinterpret_cast<const float4*>(xv)[i];
            m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
        } else {
            m = fmaxf(m, reinterpret_cast<const float*>(xv)[i]);
        }
    }
    m = block_allreduce(m, MaxOp());
    // Pass 2: sum of exp(x - max).
    float s = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += THREADS) {
        if constexpr (V == 4) {
            const float4 v = reinterpret_cast<const float4*>(xv)[i];
            s += (EXP(v.x - m) + EXP(v.y - m)) + (EXP(v.z - m) + EXP(v.w - m));
        } else {
            s += EXP(reinterpret_cast<const float*>(xv)[i] - m);
        }
    }
    s = block_allreduce(s, SumOp());
#endif

    // Last pass: normalize.
    const float inv = 1.0f / s;
    for (int i = threadIdx.x; i < nvec; i += THREADS) {
        if constexpr (V == 4) {
            const float4 v = reinterpret_cast<const float4*>(xv)[i];
            reinterpret_cast<float4*>(ov)[i] =
                make_float4(EXP(v.x - m) * inv, EXP(v.y - m) * inv, EXP(v.z - m) * inv, EXP(v.w - m) * inv);
        } else {
            reinterpret_cast<float*>(ov)[i] = EXP(reinterpret_cast<const float*>(xv)[i] - m) * inv;
        }
    }
}

__global__ void KERNEL_BOUNDS softmax_kernel(const float* __restrict__ x, float* __restrict__ out, int ROWS,
                                             int COLS) {
    const size_t row = blockIdx.x;
    const float* xr = x + row * (size_t)COLS;
    float* orow = out + row * (size_t)COLS;
#if VEC == 4
    if (COLS % 4 == 0) {  // uniform over the grid: rows are 16-byte aligned
        softmax_row<4>(xr, orow, COLS);
        return;
    }
#endif
    softmax_row<1>(xr, orow, COLS);
}

extern "C" void solve(const float* x, float* out, int ROWS, int COLS) {
    if (ROWS <= 0 || COLS <= 0) return;
    softmax_kernel<<<ROWS, THREADS, 0, 0>>>(x, out, ROWS, COLS);
}
