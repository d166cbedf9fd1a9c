// Template test (sm_90a): TMA 2D load, 3D load and 2D store with mbarrier completion,
// plus host-side tensor-map creation (tma_host.cuh, no -lcuda needed).
// Expected SASS: UTMALDG (2D and 3D), UTMASTG, SYNCS.* .
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -I arch_docs/h100/templates -cubin
#include <cuda_bf16.h>
#include "tma.cuh"
#include "tma_host.cuh"
#include "mbarrier.cuh"
#include "fence.cuh"

// 64x64 bf16 box via a 2D map, a 4x16x64 box via a 3D map, then the 2D tile is
// stored back (doubled) through an output 2D map.
__global__ void tma_probe(const __grid_constant__ CUtensorMap in2d,
                          const __grid_constant__ CUtensorMap in3d,
                          const __grid_constant__ CUtensorMap out2d, float* sink) {
  __shared__ alignas(1024) __nv_bfloat16 tile[64 * 64];
  __shared__ alignas(1024) __nv_bfloat16 cube[4 * 16 * 64];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    xl::tma_prefetch_desc(&in2d);
    xl::mbar_init(&bar, 1);
    xl::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    xl::mbar_arrive_expect_tx(&bar, sizeof(tile) + sizeof(cube));
    xl::tma_load_2d(tile, &in2d, &bar, 64 * blockIdx.x, 0);
    xl::tma_load_3d(cube, &in3d, &bar, 0, 0, 4 * blockIdx.x);
  }
  xl::mbar_wait(&bar, 0);
  float s = 0.f;
  for (int i = threadIdx.x; i < 4 * 16 * 64; i += blockDim.x) s += __bfloat162float(cube[i]);
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x)
    tile[i] = __float2bfloat16(2.f * __bfloat162float(tile[i]));
  xl::fence_proxy_async_smem();  // generic writes -> TMA store reads
  __syncthreads();
  if (threadIdx.x == 0) {
    xl::tma_store_2d(&out2d, tile, 64 * blockIdx.x, 0);
    xl::tma_store_commit();
    xl::tma_store_wait_read<0>();
    xl::tma_store_wait<0>();
  }
}

// Host side: shows the map construction; not executed by the CPU test.
extern "C" int tma_probe_launch(const __nv_bfloat16* in, const __nv_bfloat16* vol,
                                __nv_bfloat16* out, float* sink, int cols, cudaStream_t st) {
  CUtensorMap m_in, m_vol, m_out;
  if (xl::make_tmap_2d_bf16(&m_in, in, 64, cols, cols, 64, 64, CU_TENSOR_MAP_SWIZZLE_NONE) !=
      CUDA_SUCCESS)
    return 1;
  if (xl::make_tmap_3d_bf16(&m_vol, vol, 64, 16, 64, 4, 16, 64, CU_TENSOR_MAP_SWIZZLE_128B) !=
      CUDA_SUCCESS)
    return 2;
  if (xl::make_tmap_2d_bf16(&m_out, out, 64, cols, cols, 64, 64, CU_TENSOR_MAP_SWIZZLE_NONE) !=
      CUDA_SUCCESS)
    return 3;
  tma_probe<<<cols / 64, 128, 0, st>>>(m_in, m_vol, m_out, sink);
  return cudaGetLastError() == cudaSuccess ? 0 : 4;
}
