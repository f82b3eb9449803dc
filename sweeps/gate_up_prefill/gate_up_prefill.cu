// gate_up_prefill.cu -- a Llama MLP's gate and up projections with SiLU(gate) * up at prefill,
// bf16 in and out, fp32 accumulation: x [M, K], Wg and Wu [N, K] (row-major, nn.Linear's
// layout), y [M, N] = SiLU(x Wg^T) * (x Wu^T). Built from CUTLASS 3.x collectives for Hopper
// (sm_90a: TMA, wgmma, warp-specialized pipelines, thread-block clusters); the headers come
// from the `nvidia-cutlass` package (sweep.yaml: include_dirs "pkg:cutlass_library/...").
//
// The baseline is the unfused code a user would write with a GEMM library: two GEMMs (the
// same CUTLASS kernel, gate into y, up into a scratch [M, N] bf16 buffer, stream-ordered
// memory freed after the call) and an elementwise kernel y = SiLU(y) * up (fp32 math, one
// rounding to bf16). Three launches, and y and the scratch each written and re-read once:
// 4 x M x N x 2 bytes beyond the GEMMs' own traffic. versions/v2.cu fuses the product into
// the up GEMM's epilogue.
//
// In CUTLASS's terms A = x is M x K K-major (RowMajor); B = W [N, K] row-major is the K x N
// ColumnMajor B (K-major, the "TN" GEMM wgmma reads without a transpose); D = y M x N
// RowMajor. D = 1.0 * A B; C is not read (ElementC void).
//
// Knobs (-D defines, each with a default; sweep.yaml's params, its restrictions keep the
// combinations CUTLASS accepts):
//   TILE_M, TILE_N           the CTA tile (TileShape; TILE_K 64), elements.
//   CLUSTER_M, CLUSTER_N     the thread-block cluster (ClusterShape): 2 along M shares the
//                            weight tiles between the cluster's CTAs by TMA multicast, along N
//                            the activation tiles.
//   KSCHED                   kernel (mainloop) schedule, each with its TMA epilogue:
//                            1 KernelTmaWarpSpecialized (one consumer warp group per tile),
//                            2 KernelTmaWarpSpecializedCooperative (two consumer warp groups
//                            split the tile along M: TILE_M a multiple of 128),
//                            3 KernelTmaWarpSpecializedPingpong (two consumer warp groups on
//                            alternate tiles, one's MMA overlapping the other's epilogue).
// Mainloop stages: as many as fit in shared memory beside the epilogue's
// (StageCountAutoCarveout). The tile scheduler is the persistent one (at most one CTA per SM,
// tiles walked in a raster), the SM count queried once per process.
//
// solve() checks CUTLASS's can_implement (TMA needs 16-byte aligned rows: K % 8 == 0 and
// N % 8 == 0) and otherwise writes nothing and says why on stderr. The initialized GEMMs
// (their TMA descriptors) are kept for the last pointers and sizes, so that a repeated call
// with the same buffers only launches.
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
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
#ifndef CLUSTER_N
#define CLUSTER_N 1
#endif
#ifndef KSCHED
#define KSCHED 2
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED) && defined(__CUDA_ARCH__)
#error "gate_up_prefill needs the sm_90a target (wgmma, setmaxnreg): kopt builds it for sm_90a on sm_90 devices (sweep.yaml: needs_sm90a)"
#endif
#endif

using namespace cute;

using Element = cutlass::bfloat16_t;
using ElementAcc = float;
using LayoutA = cutlass::layout::RowMajor;     // x [M, K]
using LayoutB = cutlass::layout::ColumnMajor;  // W [N, K] row-major = K x N column-major
using LayoutD = cutlass::layout::RowMajor;     // y [M, N]
constexpr int kAlign = 16 / sizeof(Element);   // 16-byte TMA rows

using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, _64>;
using ClusterShape = Shape<Int<CLUSTER_M>, Int<CLUSTER_N>, _1>;

#if KSCHED == 1
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#elif KSCHED == 2
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#elif KSCHED == 3
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#else
#error "KSCHED must be 1 (warp-specialized), 2 (cooperative) or 3 (ping-pong)"
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc,
    void, LayoutD, kAlign, Element, LayoutD, kAlign, EpilogueSchedule>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlign, Element,
    LayoutB, kAlign, ElementAcc, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
    cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

// y = SiLU(g) * u elementwise, n elements, 8 bf16 (16 bytes) per thread where aligned
__global__ void silu_mul(__nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ u,
                         long long n) {
  const long long i = 8 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
  if (i + 8 <= n) {
    uint4 gv = *reinterpret_cast<const uint4*>(y + i);
    const uint4 uv = *reinterpret_cast<const uint4*>(u + i);
    __nv_bfloat16* g8 = reinterpret_cast<__nv_bfloat16*>(&gv);
    const __nv_bfloat16* u8 = reinterpret_cast<const __nv_bfloat16*>(&uv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float g = __bfloat162float(g8[e]);
      g8[e] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * __bfloat162float(u8[e]));
    }
    *reinterpret_cast<uint4*>(y + i) = gv;
  } else {
    for (long long j = i; j < n; ++j) {
      const float g = __bfloat162float(y[j]);
      y[j] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * __bfloat162float(u[j]));
    }
  }
}

// One GEMM D = A B^T (B: [N, K] row-major), initialized for the last (A, B, D, M, N, K).
struct Projection {
  Gemm gemm;
  const void* key[3] = {nullptr, nullptr, nullptr};
  int dims[3] = {0, 0, 0};

  // false (and a line on stderr) when CUTLASS cannot run it
  bool run(const Element* a, const Element* b, Element* d, int M, int N, int K, int sms) {
    using StrideA = typename Gemm::GemmKernel::StrideA;
    using StrideB = typename Gemm::GemmKernel::StrideB;
    using StrideC = typename Gemm::GemmKernel::StrideC;
    using StrideD = typename Gemm::GemmKernel::StrideD;
    const bool same = key[0] == a && key[1] == b && key[2] == d && dims[0] == M &&
                      dims[1] == N && dims[2] == K;
    if (same) return gemm.run() == cutlass::Status::kSuccess;
    typename Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {M, N, K, 1},
        {a, cutlass::make_cute_packed_stride(StrideA{}, make_shape(M, K, 1)),
         b, cutlass::make_cute_packed_stride(StrideB{}, make_shape(N, K, 1))},
        {{1.0f, 0.0f}, nullptr, cutlass::make_cute_packed_stride(StrideC{}, make_shape(M, N, 1)),
         d, cutlass::make_cute_packed_stride(StrideD{}, make_shape(M, N, 1))},
        cutlass::KernelHardwareInfo{0, sms}};
    key[0] = nullptr;
    cutlass::Status st = gemm.can_implement(args);
    if (st == cutlass::Status::kSuccess && Gemm::get_workspace_size(args) > 0)
      st = cutlass::Status::kErrorWorkspaceNull;  // the persistent data-parallel GEMM needs none
    if (st == cutlass::Status::kSuccess) st = gemm.initialize(args, nullptr);
    if (st != cutlass::Status::kSuccess) {
      fprintf(stderr, "gate_up_prefill: CUTLASS cannot run M=%d N=%d K=%d with this "
              "configuration: %s\n", M, N, K, cutlassGetStatusString(st));
      return false;
    }
    key[0] = a; key[1] = b; key[2] = d;
    dims[0] = M; dims[1] = N; dims[2] = K;
    return gemm.run() == cutlass::Status::kSuccess;
  }
};

extern "C" void solve(const __nv_bfloat16* x, const __nv_bfloat16* Wg, const __nv_bfloat16* Wu,
                      __nv_bfloat16* y, int M, int N, int K) {
  static Projection gate, up;
  static int sms = 0;
  if (sms == 0) sms = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
  const long long n = (long long)M * N;
  void* scratch = nullptr;
  if (cudaMallocAsync(&scratch, n * sizeof(Element), 0) != cudaSuccess) {
    fprintf(stderr, "gate_up_prefill: no device memory for the %lld-byte up projection\n",
            n * (long long)sizeof(Element));
    return;
  }
  auto a = reinterpret_cast<const Element*>(x);
  auto u = reinterpret_cast<Element*>(scratch);
  if (gate.run(a, reinterpret_cast<const Element*>(Wg), reinterpret_cast<Element*>(y), M, N,
               K, sms) &&
      up.run(a, reinterpret_cast<const Element*>(Wu), u, M, N, K, sms)) {
    const long long threads = (n + 7) / 8;
    silu_mul<<<(unsigned)((threads + 255) / 256), 256, 0, 0>>>(
        y, reinterpret_cast<const __nv_bfloat16*>(scratch), n);
  }
  cudaFreeAsync(scratch, 0);
}
