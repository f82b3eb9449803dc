// sgemm_kt.cu -- C = A @ B, float32, row-major: A [M, K], B [K, N], C [M, N].
// Kernel mode (sweep.yaml `launch:`): kopt builds this file with NVRTC and
// launches sgemm_kernel itself; there is no host code.
//
// Kernel Tuner's classic matrix-multiply scheme and parameter names
// (Volkov's "better performance at lower occupancy" tiling):
//   block_size_x, block_size_y  threads per block in x (columns) and y (rows).
//   tile_size_x, tile_size_y    outputs per thread along x and y: thread (tx, ty)
//                               owns rows ty + i*block_size_y (i < tile_size_y) and
//                               columns tx + j*block_size_x (j < tile_size_x) of the
//                               block's BM x BN tile, BM = block_size_y * tile_size_y,
//                               BN = block_size_x * tile_size_x (strided: coalesced
//                               loads and stores).
//   K is walked in steps of BK = block_size_x; the sweep requires
//   block_size_x == block_size_y * tile_size_y (= BM), so that each thread loads
//   tile_size_y elements of the A tile (BM x BK) and tile_size_y * tile_size_x
//   of the B tile (BK x BN) per step.
//   use_padding                 1: one float of padding per shared-memory row.
//   read_only                   1: global loads through the read-only data cache (__ldg).
// Both tiles live in dynamic shared memory (the sweep's launch.smem_bytes):
// 4 * (BM * (BK + use_padding) + BK * (BN + use_padding)) bytes.
// Full tiles only: M % BM == 0, N % BN == 0, K % BK == 0 (sweep restrictions).
// Float accumulation with fmaf, no tensor cores, like sweeps/sgemm.

#ifndef block_size_x
#define block_size_x 16
#endif
#ifndef block_size_y
#define block_size_y 16
#endif
#ifndef tile_size_x
#define tile_size_x 1
#endif
#ifndef tile_size_y
#define tile_size_y 1
#endif
#ifndef use_padding
#define use_padding 0
#endif
#ifndef read_only
#define read_only 0
#endif

#define BM (block_size_y * tile_size_y)
#define BN (block_size_x * tile_size_x)
#define BK block_size_x
#define SA_LD (BK + use_padding)
#define SB_LD (BN + use_padding)

#if BM != BK
#error "sgemm_kt needs block_size_x == block_size_y * tile_size_y"
#endif

#if read_only
#define LOAD(p) __ldg(p)
#else
#define LOAD(p) (*(p))
#endif

__global__ void __launch_bounds__(block_size_x * block_size_y)
sgemm_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    extern __shared__ float smem[];
    float* sA = smem;                 // [BM][SA_LD]: A rows row0.., columns k0..k0+BK
    float* sB = smem + BM * SA_LD;    // [BK][SB_LD]: B rows k0.., columns col0..col0+BN
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    float sum[tile_size_y][tile_size_x];
#pragma unroll
    for (int i = 0; i < tile_size_y; ++i)
#pragma unroll
        for (int j = 0; j < tile_size_x; ++j) sum[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int i = 0; i < tile_size_y; ++i) {
            const int r = ty + i * block_size_y;  // A tile row, and B tile row (BK == BM)
            sA[r * SA_LD + tx] = LOAD(A + (size_t)(row0 + r) * K + k0 + tx);
#pragma unroll
            for (int j = 0; j < tile_size_x; ++j) {
                const int c = tx + j * block_size_x;
                sB[r * SB_LD + c] = LOAD(B + (size_t)(k0 + r) * N + col0 + c);
            }
        }
        __syncthreads();
#pragma unroll
        for (int kb = 0; kb < BK; ++kb) {
#pragma unroll
            for (int i = 0; i < tile_size_y; ++i) {
                const float a = sA[(ty + i * block_size_y) * SA_LD + kb];
#pragma unroll
                for (int j = 0; j < tile_size_x; ++j)
                    sum[i][j] = fmaf(a, sB[kb * SB_LD + tx + j * block_size_x], sum[i][j]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < tile_size_y; ++i) {
        float* crow = C + (size_t)(row0 + ty + i * block_size_y) * N + col0;
#pragma unroll
        for (int j = 0; j < tile_size_x; ++j) crow[tx + j * block_size_x] = sum[i][j];
    }
}
