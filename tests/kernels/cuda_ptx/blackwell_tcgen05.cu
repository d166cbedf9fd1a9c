// Template test (sm_100a): TMEM alloc / relinquish, tcgen05.mma kind::f16 with an
// instruction descriptor and smem descriptors, tcgen05.commit to an mbarrier,
// tcgen05.ld / st (32x32b), fences, dealloc.
// Expected SASS: UTCHMMA, UTCBAR, LDTM, STTM, UTCATOMSWS.
// Build: nvcc -gencode=arch=compute_100a,code=sm_100a -I arch_docs/b200/templates -cubin
#include <cuda_bf16.h>
#include "tcgen05.cuh"
#include "mbarrier.cuh"
#include "fence.cuh"

__global__ void __launch_bounds__(128) tcgen05_probe(const __nv_bfloat16* a,
                                                     const __nv_bfloat16* b, float* out) {
  // 128x64 A and 64x64 B tiles, K-major with the 128B swizzle layout
  __shared__ alignas(1024) __nv_bfloat16 sA[128 * 64];
  __shared__ alignas(1024) __nv_bfloat16 sB[64 * 64];
  __shared__ alignas(8) uint64_t done;
  __shared__ uint32_t tmem_base_slot;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  for (int i = tid; i < 128 * 64; i += 128) sA[i] = a[i];
  for (int i = tid; i < 64 * 64; i += 128) sB[i] = b[i];
  if (warp == 0) {
    xl::tmem_alloc<64>(&tmem_base_slot);
    xl::tmem_relinquish_alloc_permit();
  }
  if (tid == 0) {
    xl::mbar_init(&done, 1);
    xl::mbar_fence_init();
  }
  xl::fence_proxy_async_smem();  // generic smem writes -> tcgen05.mma reads
  xl::tcgen05_fence_before();
  __syncthreads();
  xl::tcgen05_fence_after();
  const uint32_t tmem = tmem_base_slot;

  if (tid == 0) {
    constexpr uint32_t idesc = xl::umma_idesc_bf16_f32<128, 64>();
    const uint64_t da = xl::umma_desc_kmajor_sw128(sA);
    const uint64_t db = xl::umma_desc_kmajor_sw128(sB);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      xl::tcgen05_mma_f16(tmem, xl::umma_desc_advance(da, 32 * k),
                          xl::umma_desc_advance(db, 32 * k), idesc, k > 0);
    xl::tcgen05_commit(&done);
  }
  xl::mbar_wait(&done, 0);
  __syncwarp();
  xl::tcgen05_fence_after();

  // warp w reads TMEM lanes 32w..32w+31 (= rows of D), 32 columns at a time
  uint32_t r[32];
  for (int c = 0; c < 64; c += 32) {
    xl::tmem_ld_32x32b_x32(xl::tmem_addr(tmem, 32 * warp, c), r);
    xl::tcgen05_wait_ld();
#pragma unroll
    for (int j = 0; j < 32; ++j) out[(32 * warp + lane) * 64 + c + j] = __uint_as_float(r[j]);
  }
  // write something back with tcgen05.st (round trip through TMEM)
  uint32_t w[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j] = __float_as_uint(float(tid + j));
  xl::tmem_st_32x32b_x8(xl::tmem_addr(tmem, 32 * warp, 0), w);
  xl::tcgen05_wait_st();
  uint32_t back[8];
  xl::tmem_ld_32x32b_x8(xl::tmem_addr(tmem, 32 * warp, 0), back);
  xl::tcgen05_wait_ld();
#pragma unroll
  for (int j = 0; j < 8; ++j) out[128 * 64 + tid * 8 + j] = __uint_as_float(back[j]);

  xl::tcgen05_fence_before();
  __syncthreads();
  if (warp == 0) {
    xl::tcgen05_fence_after();
    xl::tmem_dealloc<64>(tmem);
  }
}
