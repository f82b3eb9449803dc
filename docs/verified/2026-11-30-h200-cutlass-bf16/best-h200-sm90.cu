// kopt best candidate 2d426e461aaddc1b of run 20261201-000252-730a55
// kopt: the candidate's -D defines, written into the source
#define CLUSTER_M 2
#define CLUSTER_N 1
#define ESCHED 2
#define KSCHED 2
#define STAGES 0
#define TILE_K 64
#define TILE_M 128
#define TILE_N 256
// sweep.yaml's derived quantities: wgs=2 acc=128 stage_bytes=49152 epi_bytes=32768

// gemm_cutlass.cu -- C = A @ B in bf16 with fp32 accumulation, row-major: A [M, K],
// B [K, N], C [M, N], built from CUTLASS 3.x collectives for Hopper (sm_90a: TMA loads,
// wgmma, warp-specialized pipelines, thread-block clusters). The headers come from the
// `nvidia-cutlass` package (sweep.yaml: include_dirs "pkg:cutlass_library/source/include").
//
// The kernel is cutlass::gemm::kernel::GemmUniversal over the sm_90 CollectiveBuilder's
// mainloop and epilogue, run through cutlass::gemm::device::GemmUniversalAdapter.
// In CUTLASS's terms A is M x K K-major (RowMajor), B is N x K N-major (B [K, N] row-major
// is CUTLASS's RowMajor B), C/D M x N RowMajor. D = 1.0 * A B; C is not read (ElementC
// void: no source load, no source shared memory).
//
// Knobs (-D defines, each with a default; sweep.yaml's params, its restrictions keep the
// combinations CUTLASS accepts):
//   TILE_M, TILE_N, TILE_K   the CTA tile (TileShape), elements.
//   CLUSTER_M, CLUSTER_N     the thread-block cluster (ClusterShape): 2 along M shares B
//                            tiles between the cluster's CTAs by TMA multicast, along N A.
//   STAGES                   mainloop pipeline stages; 0: StageCountAutoCarveout (as many
//                            as fit in shared memory beside the epilogue's).
//   KSCHED                   kernel (mainloop) schedule: 0 KernelScheduleAuto,
//                            1 KernelTmaWarpSpecialized (one consumer warp group per tile),
//                            2 KernelTmaWarpSpecializedCooperative (two consumer warp
//                            groups split the tile along M: TILE_M a multiple of 128),
//                            3 KernelTmaWarpSpecializedPingpong (two consumer warp groups on
//                            alternate tiles, one's MMA overlapping the other's epilogue).
//   ESCHED                   epilogue schedule: 0 EpilogueScheduleAuto (NoSmemWarpSpecialized;
//                            the only one KernelScheduleAuto takes), 1 TmaWarpSpecialized
//                            (with kernel schedules 1 and 3), 2 TmaWarpSpecializedCooperative
//                            (with 2).
// The tile scheduler is the persistent one (a grid of at most one CTA per SM, tiles walked
// in a raster), its SM count queried once per process.
//
// solve() checks CUTLASS's can_implement (TMA needs 16-byte aligned rows: K % 8 == 0 and
// N % 8 == 0) and otherwise writes nothing and says why on stderr. The initialized kernel
// (its TMA descriptors) is kept for the last (A, B, C, M, N, K) so that a repeated call
// only launches; a workspace, if the configuration needs one, is stream-ordered memory
// freed after the launch.
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
#ifndef TILE_K
#define TILE_K 64
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1
#endif
#ifndef CLUSTER_N
#define CLUSTER_N 1
#endif
#ifndef STAGES
#define STAGES 0
#endif
#ifndef KSCHED
#define KSCHED 0
#endif
#ifndef ESCHED
#define ESCHED 0
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED) && defined(__CUDA_ARCH__)
#error "gemm_cutlass needs the sm_90a target (wgmma, setmaxnreg): kopt builds it for sm_90a on sm_90 devices (sweep.yaml: needs_sm90a)"
#endif
#endif

using namespace cute;

using ElementA = cutlass::bfloat16_t;
using ElementB = cutlass::bfloat16_t;
using ElementD = cutlass::bfloat16_t;
using ElementAcc = float;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::RowMajor;
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlign = 16 / sizeof(cutlass::bfloat16_t);  // 16-byte TMA rows

using TileShape = Shape<Int<TILE_M>, Int<TILE_N>, Int<TILE_K>>;
using ClusterShape = Shape<Int<CLUSTER_M>, Int<CLUSTER_N>, _1>;

#if KSCHED == 0
using KernelSchedule = cutlass::gemm::collective::KernelScheduleAuto;
#elif KSCHED == 1
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
#elif KSCHED == 2
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
#elif KSCHED == 3
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
#else
#error "KSCHED must be 0 (auto), 1 (warp-specialized), 2 (cooperative) or 3 (ping-pong)"
#endif

#if ESCHED == 0
using EpilogueSchedule = cutlass::epilogue::collective::EpilogueScheduleAuto;
#elif ESCHED == 1
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#elif ESCHED == 2
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#else
#error "ESCHED must be 0 (auto), 1 (TmaWarpSpecialized) or 2 (TmaWarpSpecializedCooperative)"
#endif

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc,
    void, LayoutD, kAlign, ElementD, LayoutD, kAlign, EpilogueSchedule>::CollectiveOp;

#if STAGES == 0
using Stages = cutlass::gemm::collective::StageCountAutoCarveout<
    static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>;
#else
using Stages = cutlass::gemm::collective::StageCount<STAGES>;
#endif

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlign, ElementB,
    LayoutB, kAlign, ElementAcc, TileShape, ClusterShape, Stages,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
    cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

extern "C" void solve(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                      int M, int N, int K) {
  static Gemm gemm;
  static int sm_count = 0;
  static const void* key[3] = {nullptr, nullptr, nullptr};
  static int key_dims[3] = {0, 0, 0};
  if (sm_count == 0) {
    sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(0);
  }
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  auto a = reinterpret_cast<const ElementA*>(A);
  auto b = reinterpret_cast<const ElementB*>(B);
  auto d = reinterpret_cast<ElementD*>(C);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {a, cutlass::make_cute_packed_stride(StrideA{}, make_shape(M, K, 1)),
       b, cutlass::make_cute_packed_stride(StrideB{}, make_shape(N, K, 1))},
      {{1.0f, 0.0f}, nullptr, cutlass::make_cute_packed_stride(StrideC{}, make_shape(M, N, 1)),
       d, cutlass::make_cute_packed_stride(StrideD{}, make_shape(M, N, 1))},
      cutlass::KernelHardwareInfo{0, sm_count}};
  bool same = key[0] == A && key[1] == B && key[2] == C && key_dims[0] == M &&
              key_dims[1] == N && key_dims[2] == K;
  size_t ws_bytes = Gemm::get_workspace_size(args);
  if (!same || ws_bytes > 0) {
    cutlass::Status st = gemm.can_implement(args);
    if (st != cutlass::Status::kSuccess) {
      fprintf(stderr, "gemm_cutlass: CUTLASS cannot run M=%d N=%d K=%d with this "
              "configuration: %s\n", M, N, K, cutlassGetStatusString(st));
      key[0] = nullptr;
      return;
    }
    void* ws = nullptr;
    if (ws_bytes > 0 && cudaMallocAsync(&ws, ws_bytes, 0) != cudaSuccess) {
      fprintf(stderr, "gemm_cutlass: no device memory for a %zu-byte workspace\n", ws_bytes);
      key[0] = nullptr;
      return;
    }
    st = gemm.initialize(args, ws);
    if (st != cutlass::Status::kSuccess) {
      fprintf(stderr, "gemm_cutlass: initialize failed: %s\n", cutlassGetStatusString(st));
      if (ws) cudaFreeAsync(ws, 0);
      key[0] = nullptr;
      return;
    }
    key[0] = A; key[1] = B; key[2] = C;
    key_dims[0] = M; key_dims[1] = N; key_dims[2] = K;
    gemm.run();
    if (ws) cudaFreeAsync(ws, 0);
    return;
  }
  gemm.run();
}
