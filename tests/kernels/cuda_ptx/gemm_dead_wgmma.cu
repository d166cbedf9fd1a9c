// gemm_dead_wgmma.cu -- NEGATIVE test for runtime verification (sm_90a).
//
//   C[M,N] = A[M,K] . B[N,K]^T      row-major, bf16 in/out, fp32 accumulation
//   extern "C" void xlang_entry(A, B, C, M, N, K, stream)
//
// xlang_entry is CORRECT for any M, N, K > 0 but computes with plain FP32 FMA in a
// shared-memory tiled kernel: no tensor cores, no TMA. The file ALSO contains
// `dead_wgmma_tma_kernel`, built from the Hopper templates (TMA load + mbarrier +
// wgmma), which is compiled into the cubin (so a static SASS census sees HGMMA,
// UTMALDG, SYNCS.*) but is NEVER launched. A runtime census (ncu per-opcode
// executed counts) must report zero HGMMA / UTMALDG for this candidate.
//
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -I arch_docs/h100/templates ...
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "wgmma.cuh"
#include "tma.cuh"
#include "mbarrier.cuh"

// ---- dead code: present in the binary, never launched -------------------------------
__global__ void __launch_bounds__(128) dead_wgmma_tma_kernel(const __grid_constant__ CUtensorMap tmA,
                                                             const __grid_constant__ CUtensorMap tmB,
                                                             float* out) {
  __shared__ alignas(1024) uint8_t sA[64 * 128];
  __shared__ alignas(1024) uint8_t sB[128 * 128];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    xl::mbar_init(&bar, 1);
    xl::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    xl::mbar_arrive_expect_tx(&bar, sizeof(sA) + sizeof(sB));
    xl::tma_load_2d(sA, &tmA, &bar, 0, 64 * blockIdx.x);
    xl::tma_load_2d(sB, &tmB, &bar, 0, 0);
  }
  xl::mbar_wait(&bar, 0);
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  const uint64_t da = xl::wgmma_desc_kmajor_sw128(sA);
  const uint64_t db = xl::wgmma_desc_kmajor_sw128(sB);
  xl::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k)
    xl::wgmma_m64n128k16_ss(acc, xl::wgmma_desc_advance(da, 32 * k),
                            xl::wgmma_desc_advance(db, 32 * k), 1);
  xl::wgmma_commit();
  xl::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 64; ++i) out[(blockIdx.x * 128 + threadIdx.x) * 64 + i] = acc[i];
}

// ---- the live path: plain FMA tiled GEMM ----------------------------------------------
namespace {
constexpr int T = 32;  // 32x32 output tile, 32x8 threads, 4 outputs per thread

__global__ void __launch_bounds__(256) fma_gemm(const __nv_bfloat16* __restrict__ A,
                                                const __nv_bfloat16* __restrict__ B,
                                                __nv_bfloat16* __restrict__ C, int M, int N,
                                                int K) {
  __shared__ float sA[T][T + 1];  // [m][k]
  __shared__ float sB[T][T + 1];  // [n][k]
  const int tx = threadIdx.x;  // 0..31 -> column n
  const int ty = threadIdx.y;  // 0..7  -> rows ty, ty+8, ty+16, ty+24
  const int m0 = blockIdx.y * T, n0 = blockIdx.x * T;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = 0; k0 < K; k0 += T) {
    for (int r = ty; r < T; r += 8) {
      const int gm = m0 + r, gn = n0 + r, gk = k0 + tx;
      sA[r][tx] = (gm < M && gk < K) ? __bfloat162float(A[static_cast<size_t>(gm) * K + gk]) : 0.f;
      sB[r][tx] = (gn < N && gk < K) ? __bfloat162float(B[static_cast<size_t>(gn) * K + gk]) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < T; ++kk) {
      const float b = sB[tx][kk];
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[j] = fmaf(sA[ty + 8 * j][kk], b, acc[j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int gm = m0 + ty + 8 * j, gn = n0 + tx;
    if (gm < M && gn < N) C[static_cast<size_t>(gm) * N + gn] = __float2bfloat16_rn(acc[j]);
  }
}
}  // namespace

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C,
                            int M, int N, int K, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    cudaMemsetAsync(C, 0, static_cast<size_t>(M) * N * sizeof(__nv_bfloat16), stream);
    return;
  }
  dim3 block(T, 8);
  dim3 grid((N + T - 1) / T, (M + T - 1) / T);
  fma_gemm<<<grid, block, 0, stream>>>(A, B, C, M, N, K);
}
