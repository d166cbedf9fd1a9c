// gemm_tile_blackwell.cu -- xlang reference candidate for B200 (sm_100a).
//
//   C[M,N] = A[M,K] . B[N,K]^T      row-major, bf16 in/out, fp32 accumulation
//   extern "C" void xlang_entry(A, B, C, M, N, K, stream)   (C allocated by caller)
//
// Built ONLY from the arch_docs/b200/templates wrappers: TMA (2D tiled loads,
// SWIZZLE_128B) completing on mbarriers; tcgen05.mma kind::f16 (M=128, N=128,
// K=16 per instruction) with the fp32 accumulator in tensor memory; tcgen05.commit
// to mbarriers; tcgen05.ld (32x32b.x32) for the epilogue. 2-stage pipeline,
// 128x128 output tile per CTA, BK = 64, 128 threads. Thread 0 issues both the TMA
// copies and the MMAs; all 4 warps drain TMEM (warp w owns TMEM lanes 32w..32w+31
// = tile rows 32w..32w+31).
//
// Size requirements: designed for M, N multiples of 128 and K a multiple of 64;
// other sizes with K % 8 == 0 and 16-byte aligned A/B are handled by TMA zero-fill
// and guarded stores. NOT yet run on Blackwell hardware (compiled and SASS-checked
// only).
//
// Build: nvcc -gencode=arch=compute_100a,code=sm_100a -I arch_docs/b200/templates ...
#include <cstdio>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "tcgen05.cuh"
#include "tma.cuh"
#include "tma_host.cuh"
#include "mbarrier.cuh"

namespace {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 64;
constexpr int STAGES = 2;
constexpr int THREADS = 128;
constexpr int TMEM_COLS = 128;  // fp32 accumulator: one column per output column
constexpr int A_TILE_BYTES = BM * BK * 2;
constexpr int B_TILE_BYTES = BN * BK * 2;
constexpr int STAGE_BYTES = A_TILE_BYTES + B_TILE_BYTES;
// tiles + 1024 B alignment slack + barriers (full[2], freed[2], done) + TMEM slot
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 1024 + 128;

__global__ void __launch_bounds__(THREADS, 1)
    xlang_gemm_blackwell(const __grid_constant__ CUtensorMap tmA,
                         const __grid_constant__ CUtensorMap tmB,
                         __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = xl::smem_u32(smem_raw);
  uint8_t* smem = smem_raw + ((1024u - (raw_addr & 1023u)) & 1023u);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + STAGES * STAGE_BYTES);
  uint64_t* freed = full + STAGES;  // MMAs reading the stage have completed
  uint64_t* done = freed + STAGES;  // all MMAs of the tile have completed
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(done + 1);

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int m0 = blockIdx.y * BM;
  const int n0 = blockIdx.x * BN;
  const int ktiles = (K + BK - 1) / BK;

  if (warp == 0) {  // whole warp: allocation is warp-collective
    xl::tmem_alloc<TMEM_COLS>(tmem_slot);
    xl::tmem_relinquish_alloc_permit();
  }
  if (tid == 32) {
    xl::tma_prefetch_desc(&tmA);
    xl::tma_prefetch_desc(&tmB);
    for (int s = 0; s < STAGES; ++s) {
      xl::mbar_init(&full[s], 1);
      xl::mbar_init(&freed[s], 1);
    }
    xl::mbar_init(done, 1);
    xl::mbar_fence_init();
  }
  xl::tcgen05_fence_before();
  __syncthreads();
  xl::tcgen05_fence_after();
  const uint32_t tmem_d = *tmem_slot;  // lane 0, first allocated column

  if (tid == 0) {
    constexpr uint32_t idesc = xl::umma_idesc_bf16_f32<BM, BN>();
    for (int s = 0; s < STAGES && s < ktiles; ++s) {
      uint8_t* sa = smem + s * STAGE_BYTES;
      xl::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
      xl::tma_load_2d(sa, &tmA, &full[s], s * BK, m0);
      xl::tma_load_2d(sa + A_TILE_BYTES, &tmB, &full[s], s * BK, n0);
    }
    for (int kt = 0; kt < ktiles; ++kt) {
      const int s = kt % STAGES;
      const uint32_t parity = (kt / STAGES) & 1;
      uint8_t* sa = smem + s * STAGE_BYTES;
      uint8_t* sb = sa + A_TILE_BYTES;
      xl::mbar_wait(&full[s], parity);
      xl::tcgen05_fence_after();
      const uint64_t da = xl::umma_desc_kmajor_sw128(sa);
      const uint64_t db = xl::umma_desc_kmajor_sw128(sb);
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) {
        xl::tcgen05_mma_f16(tmem_d, xl::umma_desc_advance(da, 32 * k),
                            xl::umma_desc_advance(db, 32 * k), idesc,
                            (kt > 0 || k > 0) ? 1u : 0u);
      }
      xl::tcgen05_commit(&freed[s]);  // arrives when these MMAs stop reading stage s
      if (kt + STAGES < ktiles) {
        xl::mbar_wait(&freed[s], parity);
        xl::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
        xl::tma_load_2d(sa, &tmA, &full[s], (kt + STAGES) * BK, m0);
        xl::tma_load_2d(sb, &tmB, &full[s], (kt + STAGES) * BK, n0);
      }
    }
    xl::tcgen05_commit(done);  // tracks every MMA issued above
  }

  // Epilogue: wait for the accumulator, then TMEM -> registers -> global.
  xl::mbar_wait(done, 0);
  __syncwarp();
  xl::tcgen05_fence_after();

  const int r = m0 + 32 * warp + lane;  // TMEM lane == tile row
  for (int c0 = 0; c0 < BN; c0 += 32) {
    uint32_t v[32];
    xl::tmem_ld_32x32b_x32(xl::tmem_addr(tmem_d, 32 * warp, c0), v);
    xl::tcgen05_wait_ld();
    if (r < M) {
      __nv_bfloat16* dst = C + static_cast<size_t>(r) * N + n0 + c0;
      const int valid = N - (n0 + c0);
      if (valid >= 32 && (N % 8 == 0)) {
#pragma unroll
        for (int j = 0; j < 32; j += 8) {
          uint4 pack;
          __nv_bfloat162 h0 = __floats2bfloat162_rn(__uint_as_float(v[j + 0]), __uint_as_float(v[j + 1]));
          __nv_bfloat162 h1 = __floats2bfloat162_rn(__uint_as_float(v[j + 2]), __uint_as_float(v[j + 3]));
          __nv_bfloat162 h2 = __floats2bfloat162_rn(__uint_as_float(v[j + 4]), __uint_as_float(v[j + 5]));
          __nv_bfloat162 h3 = __floats2bfloat162_rn(__uint_as_float(v[j + 6]), __uint_as_float(v[j + 7]));
          pack.x = *reinterpret_cast<uint32_t*>(&h0);
          pack.y = *reinterpret_cast<uint32_t*>(&h1);
          pack.z = *reinterpret_cast<uint32_t*>(&h2);
          pack.w = *reinterpret_cast<uint32_t*>(&h3);
          *reinterpret_cast<uint4*>(dst + j) = pack;
        }
      } else {
#pragma unroll
        for (int j = 0; j < 32; ++j)
          if (j < valid) dst[j] = __float2bfloat16_rn(__uint_as_float(v[j]));
      }
    }
  }

  xl::tcgen05_fence_before();
  __syncthreads();
  if (warp == 0) {
    xl::tcgen05_fence_after();
    xl::tmem_dealloc<TMEM_COLS>(tmem_d);
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
  CUtensorMap tmA, tmB;
  CUresult ea = xl::make_tmap_2d_bf16(&tmA, A, M, K, K, BM, BK, CU_TENSOR_MAP_SWIZZLE_128B);
  CUresult eb = xl::make_tmap_2d_bf16(&tmB, B, N, K, K, BN, BK, CU_TENSOR_MAP_SWIZZLE_128B);
  if (ea != CUDA_SUCCESS || eb != CUDA_SUCCESS) {
    fprintf(stderr, "gemm_tile_blackwell: cuTensorMapEncodeTiled failed (A: %d, B: %d); "
                    "K must be a multiple of 8 and A/B 16-byte aligned\n",
            static_cast<int>(ea), static_cast<int>(eb));
    return;
  }
  cudaFuncSetAttribute(xlang_gemm_blackwell, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       SMEM_BYTES);
  dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
  xlang_gemm_blackwell<<<grid, THREADS, SMEM_BYTES, stream>>>(tmA, tmB, C, M, N, K);
}
