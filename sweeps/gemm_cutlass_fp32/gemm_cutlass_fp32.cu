// gemm_cutlass_fp32.cu -- C = A @ B in float32 with about fp32 accuracy on tensor cores,
// row-major A [M, K], B [K, N], C [M, N]. Two paths, chosen at build time:
//
// BF16X3 undefined (the baseline): CUTLASS's 3xTF32 ("fast accurate fp32",
//   cutlass::arch::OpMultiplyAddFastF32). Each operand is split into a TF32 big part and a TF32
//   remainder and the three products big*big + big*small + small*big are accumulated in fp32
//   (CUTLASS example 27). CUTLASS 4.2 has no sm_90 (wgmma) collective for it, so this is the
//   CUTLASS 2.x device::Gemm for Sm80 (mma.sync m16n8k8 TF32, cp.async multistage pipeline,
//   all warps load and compute), which runs on sm_90 as built for it.
// BF16X3=1 (sweep.yaml's memory.async_copy and compute.warp_specialization realizations; needs
//   sm_90a): bf16x3 on Hopper's wgmma through a CUTLASS 3.x collective. Each fp32 operand is
//   split into a bf16 big part and a bf16 remainder (a = ab + as + O(2^-16 |a|)); one bf16 GEMM
//   over K' = 3K multiplies A' = [as | ab | ab] (M x 3K) by B' = [bb ; bs ; bb] (3K x N), which
//   sums as*bb + ab*bs + ab*bb in fp32 (small terms first; as*bs, ~2^-16 of a product, is
//   dropped). The split is two elementwise kernels into device scratch (cudaMalloc) of
//   6K(M + N) bytes, kept per process and regrown for a larger problem (split_operands).
//   The mainloop:
//     BF16X3 alone (memory.async_copy's TMA form): KernelTma: TMA loads into a shared-memory
//       ring; the one warp group both waits on the ring's mbarriers and issues wgmma;
//     with WS=1 (compute.warp_specialization): a producer warp (TMA + mbarrier) feeds
//       consumer warp groups, WSCHED 1 KernelTmaWarpSpecialized (one consumer warp group),
//       2 ...Cooperative (two split each tile along M), 3 ...Pingpong (two on alternate
//       tiles); setmaxnreg moves registers from the producer to the consumers.
//   The epilogue is CUTLASS's default for the schedule (TMA store for 1-3).
//
// Knobs of the Sm80 path (-D defines, each with a default; sweep.yaml's restrictions keep
// the legal ones):
//   TB_M, TB_N, TB_K   threadblock tile (GemmShape), elements.
//   WARP_M, WARP_N     warp tile (its K is TB_K); TB / WARP gives the block's warps.
//   STAGES             cp.async pipeline stages (shared memory: STAGES x (TB_M + TB_N) x
//                      TB_K x 4 bytes; device::Gemm raises the block's limit past 48 KB).
//   SWIZZLE            GemmIdentityThreadblockSwizzle<SWIZZLE>: block raster (L2 reuse).
// Knobs of the BF16X3 path: TILE_M, TILE_N (CTA tile; TILE_K is 64 bf16 = one 128-byte
// swizzled row), CLUSTER_M (thread-block cluster along M: TMA multicast of B), WS, WSCHED.
// solve() checks can_implement (16-byte aligned rows: K % 4 == 0 and N % 4 == 0 on the Sm80
// path, K % 8 and N % 4 on the BF16X3 one), else writes nothing and says why on stderr.
#include <cstdio>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"

#if defined(BF16X3) && BF16X3
#include <cuda_bf16.h>

#include "cute/tensor.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#ifndef TILE_M
#define TILE_M 128
#endif
#ifndef TILE_N
#define TILE_N 128
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1
#endif
#if defined(WS) && WS
#ifndef WSCHED
#define WSCHED 2
#endif
#define KSCHED WSCHED
#else
#define KSCHED 0
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED) && defined(__CUDA_ARCH__)
#error "gemm_cutlass_fp32's BF16X3 path needs the sm_90a target (wgmma): kopt builds it for sm_90a (sweep.yaml: the realizations' needs_sm90a)"
#endif
#endif

using namespace cute;
using ElementAB = cutlass::bfloat16_t;
using RowMajor = cutlass::layout::RowMajor;
constexpr int kAlignAB = 16 / sizeof(ElementAB);  // 16-byte TMA rows
constexpr int kAlignD = 16 / sizeof(float);
using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, _64>;
using ClusterShape = Shape<Int<CLUSTER_M>, _1, _1>;

#if KSCHED == 0
using KernelSchedule = cutlass::gemm::KernelTma;
using EpilogueSchedule = cutlass::epilogue::collective::EpilogueScheduleAuto;
using TileScheduler = void;
#elif KSCHED == 1
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
using TileScheduler = void;
#elif KSCHED == 2
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
using TileScheduler = cutlass::gemm::PersistentScheduler;
#elif KSCHED == 3
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
using TileScheduler = cutlass::gemm::PersistentScheduler;
#else
#error "WSCHED must be 1 (warp-specialized), 2 (cooperative) or 3 (ping-pong)"
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor, kAlignD,
    float, RowMajor, kAlignD, EpilogueSchedule>::CollectiveOp;
using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, RowMajor, kAlignAB,
    ElementAB, RowMajor, kAlignAB, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;
using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, TileScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

// X [rows, cols] fp32 row-major -> bf16 big (b) and remainder (s) parts, 4 elements a thread
// step. a_side: Y row r is [s | b | b] (3 cols long); else Y rows r, rows + r, 2 rows + r
// hold b, s, b (Y is 3 rows x cols). cols % 4 == 0.
__global__ void split_operand(const float* __restrict__ X, __nv_bfloat16* __restrict__ Y,
                              long rows, int cols, bool a_side) {
  long n4 = rows * cols / 4;
  for (long v = blockIdx.x * (long)blockDim.x + threadIdx.x; v < n4;
       v += (long)gridDim.x * blockDim.x) {
    float4 x = reinterpret_cast<const float4*>(X)[v];
    float xs[4] = {x.x, x.y, x.z, x.w};
    __nv_bfloat16 b[4], r[4];
    for (int j = 0; j < 4; ++j) {
      b[j] = __float2bfloat16_rn(xs[j]);
      r[j] = __float2bfloat16_rn(xs[j] - __bfloat162float(b[j]));
    }
    long row = v * 4 / cols, col = v * 4 % cols;
    long o0, o1, o2;  // element offsets of the 3 copies: (part for A, part for B)
    if (a_side) {
      o0 = row * 3 * cols + col; o1 = o0 + cols; o2 = o1 + cols;  // s, b, b
    } else {
      o0 = row * cols + col; o1 = o0 + rows * cols; o2 = o1 + rows * cols;  // b, s, b
    }
    const __nv_bfloat16* p0 = a_side ? r : b;
    const __nv_bfloat16* p1 = a_side ? b : r;
    uint2 w0, w1, w2;
    __nv_bfloat162 t;
    t = __halves2bfloat162(p0[0], p0[1]); w0.x = *reinterpret_cast<unsigned*>(&t);
    t = __halves2bfloat162(p0[2], p0[3]); w0.y = *reinterpret_cast<unsigned*>(&t);
    t = __halves2bfloat162(p1[0], p1[1]); w1.x = *reinterpret_cast<unsigned*>(&t);
    t = __halves2bfloat162(p1[2], p1[3]); w1.y = *reinterpret_cast<unsigned*>(&t);
    t = __halves2bfloat162(b[0], b[1]); w2.x = *reinterpret_cast<unsigned*>(&t);
    t = __halves2bfloat162(b[2], b[3]); w2.y = *reinterpret_cast<unsigned*>(&t);
    *reinterpret_cast<uint2*>(Y + o0) = w0;
    *reinterpret_cast<uint2*>(Y + o1) = w1;
    *reinterpret_cast<uint2*>(Y + o2) = w2;
  }
}

// A' [M, 3K] and B' [3K, N] in bf16: scratch kept for the process, regrown when too small
static bool split_operands(const float* A, const float* B, int M, int N, int K,
                           __nv_bfloat16** Ap, __nv_bfloat16** Bp, bool* moved) {
  static __nv_bfloat16* buf = nullptr;
  static size_t have = 0;
  size_t a_elems = (size_t)M * 3 * K, need = (a_elems + (size_t)3 * K * N) * sizeof(__nv_bfloat16);
  *moved = false;
  if (need > have) {
    if (buf) cudaFree(buf);
    buf = nullptr; have = 0; *moved = true;
    if (cudaMalloc(&buf, need) != cudaSuccess) {
      fprintf(stderr, "gemm_cutlass_fp32: no device memory for %zu bytes of bf16x3 operands\n",
              need);
      return false;
    }
    have = need;
  }
  *Ap = buf;
  *Bp = buf + a_elems;
  int threads = 256, blocks = 132 * 16;
  split_operand<<<blocks, threads>>>(A, *Ap, M, K, true);
  split_operand<<<blocks, threads>>>(B, *Bp, K, N, false);
  return true;
}

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
  static Gemm gemm;
  static int sm_count = 0;
  static const void* key_c = nullptr;
  static int key_dims[3] = {0, 0, 0};
  if (K % 8 != 0 || N % 4 != 0) {
    fprintf(stderr, "gemm_cutlass_fp32 (SM90): needs K %% 8 == 0 and N %% 4 == 0 (16-byte TMA "
            "rows), got N=%d K=%d\n", N, K);
    return;
  }
  if (sm_count == 0) sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
  __nv_bfloat16 *Ap, *Bp;
  bool moved;
  if (!split_operands(A, B, M, N, K, &Ap, &Bp, &moved)) return;
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  int K3 = 3 * K;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K3, 1},
      {reinterpret_cast<const ElementAB*>(Ap),
       cutlass::make_cute_packed_stride(StrideA{}, make_shape(M, K3, 1)),
       reinterpret_cast<const ElementAB*>(Bp),
       cutlass::make_cute_packed_stride(StrideB{}, make_shape(N, K3, 1))},
      {{1.0f, 0.0f}, nullptr, cutlass::make_cute_packed_stride(StrideC{}, make_shape(M, N, 1)),
       C, cutlass::make_cute_packed_stride(StrideD{}, make_shape(M, N, 1))},
      cutlass::KernelHardwareInfo{0, sm_count}};
  bool same = !moved && key_c == C && key_dims[0] == M && key_dims[1] == N && key_dims[2] == K;
  size_t ws_bytes = Gemm::get_workspace_size(args);
  if (same && ws_bytes == 0) {
    gemm.run();
    return;
  }
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    fprintf(stderr, "gemm_cutlass_fp32 (SM90): CUTLASS cannot run M=%d N=%d K'=%d with this "
            "configuration: %s\n", M, N, K3, cutlassGetStatusString(st));
    key_c = nullptr;
    return;
  }
  void* ws = nullptr;
  if (ws_bytes > 0 && cudaMallocAsync(&ws, ws_bytes, 0) != cudaSuccess) {
    fprintf(stderr, "gemm_cutlass_fp32 (SM90): no device memory for a %zu-byte workspace\n",
            ws_bytes);
    key_c = nullptr;
    return;
  }
  st = gemm.initialize(args, ws);
  if (st != cutlass::Status::kSuccess) {
    fprintf(stderr, "gemm_cutlass_fp32 (SM90): initialize failed: %s\n",
            cutlassGetStatusString(st));
    key_c = nullptr;
  } else {
    key_c = C; key_dims[0] = M; key_dims[1] = N; key_dims[2] = K;
    gemm.run();
  }
  if (ws) cudaFreeAsync(ws, 0);
}

#else  // the Sm80 3xTF32 path
#include "cutlass/gemm/device/gemm.h"

#ifndef TB_M
#define TB_M 128
#endif
#ifndef TB_N
#define TB_N 128
#endif
#ifndef TB_K
#define TB_K 16
#endif
#ifndef WARP_M
#define WARP_M 64
#endif
#ifndef WARP_N
#define WARP_N 64
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef SWIZZLE
#define SWIZZLE 1
#endif

using Layout = cutlass::layout::RowMajor;
using Epilogue = cutlass::epilogue::thread::LinearCombination<float, 4, float, float>;
using Gemm = cutlass::gemm::device::Gemm<
    float, Layout, float, Layout, float, Layout, float, cutlass::arch::OpClassTensorOp,
    cutlass::arch::Sm80, cutlass::gemm::GemmShape<TB_M, TB_N, TB_K>,
    cutlass::gemm::GemmShape<WARP_M, WARP_N, TB_K>, cutlass::gemm::GemmShape<16, 8, 8>,
    Epilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<SWIZZLE>, STAGES, 4,
    4, false, cutlass::arch::OpMultiplyAddFastF32>;

extern "C" void solve(const float* A, const float* B, float* C, int M, int N, int K) {
  static Gemm gemm;
  typename Gemm::Arguments args{{M, N, K}, {A, K}, {B, N}, {C, N}, {C, N}, {1.0f, 0.0f}, 1};
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) {
    fprintf(stderr, "gemm_cutlass_fp32: CUTLASS cannot run M=%d N=%d K=%d with this "
            "configuration: %s\n", M, N, K, cutlassGetStatusString(st));
    return;
  }
  st = gemm.initialize(args, nullptr);
  if (st != cutlass::Status::kSuccess) {
    fprintf(stderr, "gemm_cutlass_fp32: initialize failed: %s\n", cutlassGetStatusString(st));
    return;
  }
  gemm.run();
}
#endif  // BF16X3
