// Expert Blackwell GEMM (sm_100a) for the xlang `gemm` task:  C[M,N] = A[M,K] . B[N,K]^T,
// bf16 in / bf16 out, fp32 accumulation, all row-major.
//
// STATUS: compiled for sm_100a and its SASS census checked (UTCHMMA, UTMALDG, LDTM); it has NOT been
// run: no Blackwell GPU was available. Treat it as unverified until a B200 run says otherwise.
//
// Design, top-down
// ----------------
// * One CTA per 128 x 256 output tile (grouped tile order for L2 reuse), K step 64 (one 128-byte
//   swizzled row of bf16), a ring of 4 shared-memory slots (48 KiB each).
// * 128 threads, roles by warp:
//     warp 0, lane 0: TMA producer. Waits for a free slot, arms its "full" mbarrier with the bytes
//       of both boxes, issues the A box (64 x 128) and the B box (64 x 256). TMA zero-fills parts of
//       a box outside the matrix, so M, N and K tails need no special code.
//     warp 1, lane 0: MMA issuer. Waits for a full slot, issues four tcgen05.mma (kind::f16,
//       M=128, N=256, K=16 each) reading both operands from shared memory through descriptors and
//       accumulating in tensor memory (TMEM), then tcgen05.commit to the slot's "empty" mbarrier:
//       the slot is released when those MMAs have finished reading it. After the last K block, a
//       commit to the "done" barrier signals the epilogue.
//     all 4 warps: epilogue. Warp w owns TMEM lanes 32w..32w+31 = tile rows 32w..32w+31; it reads
//       32 fp32 columns at a time with tcgen05.ld.32x32b.x32, converts to bf16 and stores 64 bytes
//       of its row, clipped to row < M and col < N (N % 8 == 0: 8-column groups are never split).
// * TMEM: warp 0 allocates 256 columns (128 lanes x 256 fp32 = the accumulator) before the
//   pipeline starts and frees them at the end.
//
// Descriptor encodings (PTX ISA, tcgen05 "Shared memory descriptor" and "Instruction descriptor"):
//   smem descriptor: bits 0-13 start >> 4; 16-29 leading byte offset >> 4 (unused for swizzled
//   K-major, 1); 32-45 stride byte offset >> 4 (8 rows x 128 B = 1024 B -> 64); bits 46-48 = 0b001
//   (fixed for tcgen05); 49-51 base offset (0: slots are 1024-byte aligned); 52 LBO mode (0);
//   61-63 swizzle mode (2 = 128-byte swizzle). A K step of 16 bf16 adds 32 bytes to the start.
//   instruction descriptor (kind::f16): bits 4-5 D format (1 = f32); 7-9 A format (1 = bf16);
//   10-12 B format (1 = bf16); 13/14 negate (0); 15/16 A/B major (0 = K-major); 17-22 N >> 3;
//   24-28 M >> 4; everything else 0 (dense, no saturation, no shift).
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace bgemm {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, THREADS = 128;
constexpr int A_BYTES = BM * BK * 2;   // 16 KiB
constexpr int B_BYTES = BN * BK * 2;   // 32 KiB
constexpr int TMEM_COLS = BN;          // fp32 accumulator: one column per output column
constexpr int SMEM_BYTES = STAGES * (A_BYTES + B_BYTES) + 1024 + 256;

constexpr uint32_t IDESC = (1u << 4)                                   // D = f32
                           | (1u << 7) | (1u << 10)                    // A, B = bf16
                           | (static_cast<uint32_t>(BN >> 3) << 17)    // N / 8
                           | (static_cast<uint32_t>(BM >> 4) << 24);   // M / 16

// ---------------------------------------------------------------- PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(a), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// Tensor memory management (whole warp).
__device__ __forceinline__ void tmem_alloc(uint32_t* slot, uint32_t cols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(smem_addr(slot)),
               "r"(cols) : "memory");
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tmem_free(uint32_t base, uint32_t cols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(base), "r"(cols) : "memory");
}
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
  return (static_cast<uint64_t>(smem_addr(tile) & 0x3FFFF) >> 4)  // start address
         | (1ull << 16)                                            // LBO (unused here)
         | (64ull << 32)                                           // SBO = 1024 B
         | (1ull << 46)                                            // tcgen05 descriptor version
         | (2ull << 61);                                           // 128-byte swizzle
}

// D[tmem] (+)= A[smem] . B[smem]^T, one thread issues it.
__device__ __forceinline__ void mma_bf16(uint32_t d_tmem, uint64_t da, uint64_t db, uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n"
      ::"r"(d_tmem), "l"(da), "l"(db), "r"(IDESC), "r"(accumulate) : "memory");
}
// The barrier gets one arrival once every MMA this thread issued so far has completed.
__device__ __forceinline__ void mma_commit(uint64_t* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
               ::"r"(smem_addr(bar)) : "memory");
}

// Lane l of the warp receives 32 consecutive fp32 columns of TMEM lane (lane(taddr) + l).
__device__ __forceinline__ void tmem_load_32cols(uint32_t taddr, uint32_t (&v)[32]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
      : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7]),
        "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]), "=r"(v[15]),
        "=r"(v[16]), "=r"(v[17]), "=r"(v[18]), "=r"(v[19]), "=r"(v[20]), "=r"(v[21]), "=r"(v[22]), "=r"(v[23]),
        "=r"(v[24]), "=r"(v[25]), "=r"(v[26]), "=r"(v[27]), "=r"(v[28]), "=r"(v[29]), "=r"(v[30]), "=r"(v[31])
      : "r"(taddr)
      : "memory");
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ uint32_t pack_bf16(uint32_t lo, uint32_t hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(__uint_as_float(lo), __uint_as_float(hi));
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------- the kernel
__global__ void __launch_bounds__(THREADS, 1)
gemm_tma_tcgen05(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                 __nv_bfloat16* __restrict__ C, int M, int N, int K, int group_m) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* slot_a = smem;
  uint8_t* slot_b = smem + STAGES * A_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + STAGES * (A_BYTES + B_BYTES));
  uint64_t* empty = full + STAGES;
  uint64_t* done = empty + STAGES;
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(done + 1);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  // Grouped tile order: GROUP_M row-tiles per column band, row index fastest.
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int per_group = group_m * tiles_n;
  const int g = blockIdx.x / per_group, first_m = g * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int r = blockIdx.x - g * per_group;
  const int tm = first_m + r % rows, tn = r / rows;
  const int kblocks = (K + BK - 1) / BK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);   // producer's arrive.expect_tx (+ TMA bytes)
      mbar_init(&empty[s], 1);  // one tcgen05.commit
    }
    mbar_init(done, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (warp == 0) tmem_alloc(tmem_slot, TMEM_COLS);
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem = *tmem_slot;   // lane 0, first allocated column

  if (warp == 0 && lane == 0) {
    // ---------------- TMA producer
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      const uint32_t phase = (kb / STAGES) & 1;
      mbar_wait(&empty[s], phase ^ 1);                       // fresh barrier: passes at once
      mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);    // full boxes, zero-fill included
      tma_load_2d(slot_a + s * A_BYTES, &map_a, &full[s], kb * BK, tm * BM);
      tma_load_2d(slot_b + s * B_BYTES, &map_b, &full[s], kb * BK, tn * BN);
    }
  } else if (warp == 1 && lane == 0) {
    // ---------------- MMA issuer
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      mbar_wait(&full[s], (kb / STAGES) & 1);
      tc_fence_after();
      const uint64_t da = smem_desc(slot_a + s * A_BYTES);
      const uint64_t db = smem_desc(slot_b + s * B_BYTES);
#pragma unroll
      for (int k = 0; k < BK / 16; ++k) mma_bf16(tmem, da + 2 * k, db + 2 * k, (kb > 0 || k > 0) ? 1u : 0u);
      mma_commit(&empty[s]);   // slot s is free once these MMAs have read it
    }
    mma_commit(done);          // the accumulator is complete
  }

  // ---------------- epilogue (all four warps)
  mbar_wait(done, 0);
  __syncwarp();
  tc_fence_after();
  const int row = tm * BM + warp * 32 + lane;
  const uint32_t lane_base = tmem + (static_cast<uint32_t>(warp * 32) << 16);
#pragma unroll 1
  for (int cb = 0; cb < BN / 32; ++cb) {
    uint32_t v[32];
    tmem_load_32cols(lane_base + cb * 32, v);   // warp-collective: every lane takes part
    const int col0 = tn * BN + cb * 32;
    if (row < M) {
      uint4* dst = reinterpret_cast<uint4*>(C + static_cast<size_t>(row) * N + col0);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if (col0 + 8 * q < N) {
          dst[q] = make_uint4(pack_bf16(v[8 * q + 0], v[8 * q + 1]), pack_bf16(v[8 * q + 2], v[8 * q + 3]),
                              pack_bf16(v[8 * q + 4], v[8 * q + 5]), pack_bf16(v[8 * q + 6], v[8 * q + 7]));
        }
      }
    }
  }

  tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    tc_fence_after();
    tmem_free(tmem, TMEM_COLS);
  }
}

// ---------------------------------------------------------------- host side
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static EncodeTiled encode_fn() {
  static EncodeTiled fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
            cudaSuccess && q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}

// Row-major [rows, K] bf16 matrix; box = box_rows x 64 (128 bytes), 128-byte swizzle, zero fill.
static bool make_map(CUtensorMap* map, const void* base, int rows, int K, int box_rows) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(K) * 2};
  cuuint32_t box[2] = {BK, static_cast<cuuint32_t>(box_rows)};
  cuuint32_t elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace bgemm

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  using namespace bgemm;
  CUtensorMap ma, mb;
  if (!make_map(&ma, A, M, K, BM) || !make_map(&mb, B, N, K, BN)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(gemm_tma_tcgen05, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    configured = true;
  }
  const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  gemm_tma_tcgen05<<<tiles, THREADS, SMEM_BYTES, stream>>>(ma, mb, C, M, N, K, 8);
}
