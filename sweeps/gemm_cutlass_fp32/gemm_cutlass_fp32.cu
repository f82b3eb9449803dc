// gemm_cutlass_fp32.cu -- C = A @ B in float32 with about fp32 accuracy on tensor cores:
// CUTLASS's 3xTF32 ("fast accurate fp32", cutlass::arch::OpMultiplyAddFastF32), row-major
// A [M, K], B [K, N], C [M, N]. Each operand is split into a TF32 big part and a TF32
// remainder and the three products big*big + big*small + small*big are accumulated in fp32
// (CUTLASS example 27). CUTLASS 4.2 has no sm_90 (wgmma) collective for it, so this is the
// CUTLASS 2.x device::Gemm for Sm80 (mma.sync m16n8k8 TF32, cp.async multistage pipeline),
// which runs on sm_90 as built for it. The headers come from the `nvidia-cutlass` package
// (sweep.yaml: include_dirs "pkg:cutlass_library/source/include").
//
// Knobs (-D defines, each with a default; sweep.yaml's restrictions keep the legal ones):
//   TB_M, TB_N, TB_K   threadblock tile (GemmShape), elements.
//   WARP_M, WARP_N     warp tile (its K is TB_K); TB / WARP gives the block's warps.
//   STAGES             cp.async pipeline stages (shared memory: STAGES x (TB_M + TB_N) x
//                      TB_K x 4 bytes; device::Gemm raises the block's limit past 48 KB).
//   SWIZZLE            GemmIdentityThreadblockSwizzle<SWIZZLE>: block raster (L2 reuse).
// solve() checks can_implement (16-byte aligned rows: K % 4 == 0 and N % 4 == 0), else
// writes nothing and says why on stderr. There is no workspace (no split-K).
#include <cstdio>
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
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
