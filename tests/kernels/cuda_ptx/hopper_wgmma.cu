// Template test (sm_90a): wgmma fence / mma_async (smem-smem and register-A) /
// commit_group / wait_group, with descriptors from wgmma.cuh.
// Expected SASS: HGMMA (WARPGROUP.ARRIVE, WARPGROUP.DEPBAR).
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -I arch_docs/h100/templates -cubin
#include <cuda_bf16.h>
#include "wgmma.cuh"
#include "ldsm_stsm.cuh"
#include "fence.cuh"

__global__ void __launch_bounds__(128) wgmma_probe(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                   float* out) {
  __shared__ alignas(1024) __nv_bfloat16 sA[64 * 64];
  __shared__ alignas(1024) __nv_bfloat16 sB[128 * 64];
  const int t = threadIdx.x;
  for (int i = t; i < 64 * 64; i += 128) sA[i] = a[i];
  for (int i = t; i < 128 * 64; i += 128) sB[i] = b[i];
  // generic-proxy writes -> async-proxy (wgmma) reads
  xl::fence_proxy_async_smem();
  __syncthreads();

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  const uint64_t da = xl::wgmma_desc_kmajor_sw128(sA);
  const uint64_t db = xl::wgmma_desc_kmajor_sw128(sB);
  xl::wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k)
    xl::wgmma_m64n128k16_ss(acc, xl::wgmma_desc_advance(da, 32 * k),
                            xl::wgmma_desc_advance(db, 32 * k), k);
  xl::wgmma_commit();
  xl::wgmma_wait<0>();

  // Register-A variant: A fragment taken from smem with ldmatrix (16x16 per warp).
  float acc2[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc2[i] = 0.f;
  uint32_t afrag[4];
  const int lane = t & 31, warp = t >> 5;
  xl::ldmatrix_x4(afrag, &sA[(warp * 16 + (lane & 15)) * 64 + (lane >> 4) * 8]);
  xl::wgmma_fence();
  xl::wgmma_m64n64k16_rs(acc2, afrag, db, 1);
  xl::wgmma_commit();
  xl::wgmma_wait<0>();

#pragma unroll
  for (int i = 0; i < 64; ++i) out[t * 96 + i] = acc[i];
#pragma unroll
  for (int i = 0; i < 32; ++i) out[t * 96 + 64 + i] = acc2[i];
}
