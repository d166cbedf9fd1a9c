// Expert Blackwell NVFP4 GEMM (sm_100a) for the xlang `gemm_nvfp4` task:
//   C[M,N] (bf16) = sum_k a(m,k) SA[m,k/16] * b(n,k) SB[n,k/16], fp32 accumulation; A [M,K/2] and B [N,K/2] hold two
//   e2m1 codes per byte along K (element 2j in the low nibble), SA [M,K/16] and SB [N,K/16] are e4m3 scales.
//
// STATUS: compiled for sm_100a and its SASS census checked; NEVER RUN: no Blackwell GPU exists in this workplace.
// Its scale handling is re-enacted on CPU by tasks/gemm_nvfp4/verify/cuda_ptx_blackwell_model.py, which calls the
// xl_rule_* functions below (the same functions the kernel uses). Treat it as unverified until a B200 run says so.
//
// Design: the MXFP8 expert (tasks/gemm_mxfp8/solutions/cuda_ptx_blackwell.cu) with fp4 operands and 16-wide blocks
// ---------------------------------------------------------------------------------------------------------------
// * One CTA per 128 x 128 output tile, K step 128 elements = 64 bytes of packed codes per row, 8 slots of
//   A box 8 KiB + B box 8 KiB + 2 KiB of scale chunks.
// * Operands: tcgen05.mma kind::mxf4nvf4 reads A and B from shared memory packed two 4-bit elements per byte with no
//   padding (PTX ISA 9.7.16.10.4.6, "Packing format used for matrix A and B by .kind::mxf4 and .kind::mxf4nvf4 in
//   Shared Memory"), so the task's bytes go to shared memory unchanged: TMA boxes of 128 rows x 64 bytes with the
//   64-byte swizzle, K-major, the descriptor's SBO 512 B (8 rows x 64 B). Element 2j in the low nibble is Triton's
//   documented tl.dot_scaled packing, which Triton also hands to this MMA straight from TMA
//   (tasks/gemm_nvfp4/solutions/triton_blackwell.py); the PTX ISA section's figure is not quoted here. One MMA
//   takes K = 64 (32 bytes: the descriptor start + 2 per MMA), two per K step.
// * Scales (PTX ISA 9.7.16.10.7 Block Scaling, Table "Valid combinations of scale_vectorsize": .scale_vec::4X with
//   .kind::mxf4nvf4, ue4m3, M x 4 scales of A and 4 x N of B per MMA, one per 16 elements of K). A K step needs 8
//   bytes per row (two MMAs x 4); a row of SA is K/16 bytes, a multiple of 8 but not of 16 for every allowed K, so
//   TMA cannot fetch them: scale warps 4-7 (K steps kb = warp - 4 mod 4) do. Lane l loads the 8 bytes of step kb
//   of tile rows l + 32 j (j < 4; e4m3 1.0 = 0x38 past M or N: those A / B rows are zero), as two 32-bit words, word
//   c holding MMA c's four scales, and stores word c at word 4 l + j of chunk c (chunks: SFA MMA 0, SFA MMA 1,
//   SFB MMA 0, SFB MMA 1, 512 bytes each). Row m, entry e of MMA c then sits at byte 16 (m % 32) + 4 (m / 32) + e
//   of chunk c: the layout CUTLASS's make_smem_layout_sfa gives NVFP4 (512 bytes per 64-wide K block; the CPU
//   model checks it against the DSL at trace time), 32 rows of 16 bytes for tcgen05.cp.32x128b.warpx4.
// * MMA issuer (warp 1, lane 0): per K step four tcgen05.cp (each chunk to its own 4 TMEM columns, per slot: the
//   copy never overwrites scales an earlier MMA still reads), two tcgen05.mma.cta_group::1.kind::mxf4nvf4
//   .block_scale.scale_vec::4X whose scale operands are their chunks' columns (scale-factor id 0: the MMA takes all
//   4 bytes of the 32-bit column), then tcgen05.commit to the slot's empty barrier.
// * TMA producer (warp 0, lane 0) and epilogue (warps 0-3) as the MXFP8 expert.
// * TMEM: 256 columns (accumulator 0..127, scales 128 + 16 s .. 128 + 16 s + 15 for slot s).
//
// Instruction descriptor (PTX ISA 9.7.16.4.2, the table for .kind::mxf4 / .kind::mxf4nvf4): bits 4-5 B scale id (0),
// 7-9 A type (1 = E2M1), 10-12 B type (1 = E2M1), 15/16 K-major (0), 17-22 N >> 3, 23 scale type (0 = UE4M3),
// 24-28 M >> 4, 29-30 A scale id (0), 31 K size (0: dense K = 64). 0x08200480 for M = N = 128: the same constant
// Triton 3.6 emits for its NVFP4 dot (its PTX; tests/test_nvfp4_task.py decodes it).
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace nvgemm {

constexpr int BM = 128, BN = 128, BK = 128, STAGES = 8, THREADS = 256;
constexpr int SF_VEC = 16;                        // elements per NVFP4 scale block
constexpr int MMA_K = 64;                         // K of one tcgen05.mma kind::mxf4nvf4
constexpr int MMAS = BK / MMA_K;                  // 2 per K step, one scale chunk per operand each
constexpr int ROW_BYTES = BK / 2;                 // 64 bytes of packed codes per row and K step
constexpr int A_BYTES = BM * ROW_BYTES;           // 8 KiB
constexpr int B_BYTES = BN * ROW_BYTES;           // 8 KiB
constexpr int CHUNK_BYTES = 512;                  // one operand's scales of one MMA: 128 rows x 4 bytes
constexpr int SF_BYTES = 2 * MMAS * CHUNK_BYTES;  // SFA chunks, then SFB chunks
constexpr int ACC_COLS = BN;
constexpr int TMEM_COLS = 256;
constexpr int SMEM_BYTES = STAGES * (A_BYTES + B_BYTES + SF_BYTES) + 1024 + 256;
constexpr uint8_t SCALE_ONE = 0x38;               // e4m3 1.0, for rows past M or N

static_assert(ACC_COLS + 4 * 2 * MMAS * STAGES <= TMEM_COLS, "scale columns do not fit the allocation");
static_assert(BK / SF_VEC == 4 * MMAS, "a 32-bit scale word per row and MMA");

// ---------------------------------------------------------------- the scale rules (the CPU model calls these too)
__host__ __device__ constexpr int scale_row(int lane, int j) { return lane + 32 * j; }
__host__ __device__ constexpr int scale_word(int lane, int j) { return 4 * lane + j; }
// TMEM column (relative to the allocation) of slot s's chunk for MMA c of SFA (operand 0) or SFB (operand 1).
__host__ __device__ constexpr uint32_t scale_column(int s, int operand, int c) {
  return ACC_COLS + 4 * 2 * MMAS * s + 4 * MMAS * operand + 4 * c;
}
__host__ __device__ constexpr uint32_t scale_operand(uint32_t tmem_base, int s, int operand, int c) {
  return tmem_base + scale_column(s, operand, c);   // scale-factor id 0 (bits 30-31)
}
constexpr uint32_t IDESC = (1u << 7) | (1u << 10)                      // A, B = E2M1
                           | (static_cast<uint32_t>(BN >> 3) << 17)    // N / 8
                           | (0u << 23)                                // scale type UE4M3
                           | (static_cast<uint32_t>(BM >> 4) << 24);   // M / 16
static_assert(IDESC == 0x08200480u, "the descriptor Triton emits for the same MMA");
__host__ __device__ constexpr uint32_t idesc_for(uint32_t sfa, uint32_t sfb) {
  return IDESC | ((sfa >> 30) << 29) | ((sfb >> 30) << 4);
}
__host__ __device__ constexpr uint64_t chunk_desc(uint32_t addr) {
  return (static_cast<uint64_t>(addr & 0x3FFFF) >> 4) | (1ull << 16) | (8ull << 32) | (1ull << 46);
}

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
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
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

// K-major, 64-byte swizzle (code 4 in bits 61-63), SBO 512 B = 8 rows x 64 B, LBO unused.
__device__ __forceinline__ uint64_t smem_desc_sw64(const void* tile) {
  return (static_cast<uint64_t>(smem_addr(tile) & 0x3FFFF) >> 4) | (1ull << 16) | (32ull << 32) | (1ull << 46)
         | (4ull << 61);
}
__device__ __forceinline__ void copy_scales(uint32_t taddr, uint64_t desc) {
  asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;" ::"r"(taddr), "l"(desc) : "memory");
}
__device__ __forceinline__ void mma_nvf4(uint32_t d_tmem, uint64_t da, uint64_t db, uint32_t sfa, uint32_t sfb,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X [%0], %1, %2, %3, [%4], [%5], p;\n}\n"
      ::"r"(d_tmem), "l"(da), "l"(db), "r"(idesc_for(sfa, sfb)), "r"(sfa), "r"(sfb), "r"(accumulate) : "memory");
}
__device__ __forceinline__ void mma_commit(uint64_t* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
               ::"r"(smem_addr(bar)) : "memory");
}
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

// One scale warp's chunks (one per MMA) for `rows` rows (M or N) of a row-major [rows, K/16] scale matrix.
__device__ __forceinline__ void stage_scales(uint8_t* chunks, const uint8_t* __restrict__ scales, int row0, int rows,
                                             int row_bytes, int kb, int lane) {
  uint2 w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int row = row0 + scale_row(lane, j);
    w[j] = row < rows ? __ldg(reinterpret_cast<const uint2*>(scales + static_cast<size_t>(row) * row_bytes) + kb)
                      : make_uint2(SCALE_ONE * 0x01010101u, SCALE_ONE * 0x01010101u);
  }
  static_assert(scale_word(0, 1) == scale_word(0, 0) + 1 && scale_word(0, 3) == scale_word(0, 0) + 3,
                "the v4 store assumes a lane's four words are consecutive");
  const uint32_t at = smem_addr(chunks + 4 * scale_word(lane, 0));
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(w[0].x), "r"(w[1].x), "r"(w[2].x),
               "r"(w[3].x) : "memory");                                    // chunk of MMA 0: bytes 0-3 of the step
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(at + CHUNK_BYTES), "r"(w[0].y), "r"(w[1].y),
               "r"(w[2].y), "r"(w[3].y) : "memory");                       // chunk of MMA 1: bytes 4-7
}

// ---------------------------------------------------------------- the kernel
__global__ void __launch_bounds__(THREADS, 1)
nvfp4_gemm_tcgen05(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const uint8_t* __restrict__ SA, const uint8_t* __restrict__ SB, __nv_bfloat16* __restrict__ C,
                   int M, int N, int K, int group_m) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* slot_a = smem;
  uint8_t* slot_b = smem + STAGES * A_BYTES;
  uint8_t* slot_sf = slot_b + STAGES * B_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(slot_sf + STAGES * SF_BYTES);
  uint64_t* empty = full + STAGES;
  uint64_t* done = empty + STAGES;
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(done + 1);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int per_group = group_m * tiles_n;
  const int g = blockIdx.x / per_group, first_m = g * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int r = blockIdx.x - g * per_group;
  const int tm = first_m + r % rows, tn = r / rows;
  const int kblocks = K / BK;          // K % 128 == 0 (task contract)
  const int sf_row_bytes = K / SF_VEC;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1 + 32);   // producer's arrive.expect_tx (+ TMA bytes), 32 scale lanes
      mbar_init(&empty[s], 1);
    }
    mbar_init(done, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (warp == 0) tmem_alloc(tmem_slot, TMEM_COLS);
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem = *tmem_slot;

  if (warp == 0 && lane == 0) {
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      mbar_wait(&empty[s], ((kb / STAGES) & 1) ^ 1);
      mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
      tma_load_2d(slot_a + s * A_BYTES, &map_a, &full[s], kb * ROW_BYTES, tm * BM);
      tma_load_2d(slot_b + s * B_BYTES, &map_b, &full[s], kb * ROW_BYTES, tn * BN);
    }
  } else if (warp >= 4) {
    for (int kb = warp - 4; kb < kblocks; kb += 4) {
      const int s = kb % STAGES;
      mbar_wait(&empty[s], ((kb / STAGES) & 1) ^ 1);
      uint8_t* chunks = slot_sf + s * SF_BYTES;
      stage_scales(chunks, SA, tm * BM, M, sf_row_bytes, kb, lane);
      stage_scales(chunks + MMAS * CHUNK_BYTES, SB, tn * BN, N, sf_row_bytes, kb, lane);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      mbar_arrive(&full[s]);
    }
  } else if (warp == 1 && lane == 0) {
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      mbar_wait(&full[s], (kb / STAGES) & 1);
      tc_fence_after();
      const uint8_t* chunks = slot_sf + s * SF_BYTES;
#pragma unroll
      for (int operand = 0; operand < 2; ++operand)
#pragma unroll
        for (int c = 0; c < MMAS; ++c)
          copy_scales(tmem + scale_column(s, operand, c),
                      chunk_desc(smem_addr(chunks + (operand * MMAS + c) * CHUNK_BYTES)));
      const uint64_t da = smem_desc_sw64(slot_a + s * A_BYTES);
      const uint64_t db = smem_desc_sw64(slot_b + s * B_BYTES);
#pragma unroll
      for (int c = 0; c < MMAS; ++c)   // 64 elements = 32 bytes per MMA: + 2 in the descriptor's start field
        mma_nvf4(tmem, da + 2 * c, db + 2 * c, scale_operand(tmem, s, 0, c), scale_operand(tmem, s, 1, c),
                 (kb > 0 || c > 0) ? 1u : 0u);
      mma_commit(&empty[s]);
    }
    mma_commit(done);
  }

  if (warp < 4) {
    mbar_wait(done, 0);
    __syncwarp();
    tc_fence_after();
    const int row = tm * BM + warp * 32 + lane;
    const uint32_t lane_base = tmem + (static_cast<uint32_t>(warp * 32) << 16);
#pragma unroll 1
    for (int cb = 0; cb < BN / 32; ++cb) {
      uint32_t v[32];
      tmem_load_32cols(lane_base + cb * 32, v);
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

// Row-major [rows, K/2] bytes of packed codes; box = 128 rows x 64 bytes, 64-byte swizzle, zero fill.
static bool make_map(CUtensorMap* map, const void* base, int rows, int K) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(K / 2), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(K / 2)};
  cuuint32_t box[2] = {ROW_BYTES, 128};
  cuuint32_t elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace nvgemm

// The scale rules, exported for the CPU model (tasks/gemm_nvfp4/verify/cuda_ptx_blackwell_model.py).
extern "C" int xl_rule_scale_row(int lane, int j) { return nvgemm::scale_row(lane, j); }
extern "C" int xl_rule_scale_word(int lane, int j) { return nvgemm::scale_word(lane, j); }
extern "C" uint32_t xl_rule_scale_operand(uint32_t tmem, int s, int operand, int c) {
  return nvgemm::scale_operand(tmem, s, operand, c);
}
extern "C" uint32_t xl_rule_idesc(uint32_t sfa, uint32_t sfb) { return nvgemm::idesc_for(sfa, sfb); }
extern "C" uint64_t xl_rule_chunk_desc(uint32_t addr) { return nvgemm::chunk_desc(addr); }
// 0 BM, 1 BN, 2 BK, 3 STAGES, 4 MMA_K, 5 CHUNK_BYTES, 6 ACC_COLS, 7 TMEM_COLS, 8 scale chunks per operand and K step
extern "C" int xl_rule_const(int which) {
  const int v[] = {nvgemm::BM, nvgemm::BN, nvgemm::BK, nvgemm::STAGES, nvgemm::MMA_K, nvgemm::CHUNK_BYTES,
                   nvgemm::ACC_COLS, nvgemm::TMEM_COLS, nvgemm::MMAS};
  return which >= 0 && which < 9 ? v[which] : -1;
}

extern "C" void xlang_entry(const uint8_t* A, const __nv_fp8_e4m3* SA, const uint8_t* B, const __nv_fp8_e4m3* SB,
                            __nv_bfloat16* C, int M, int N, int K, cudaStream_t stream) {
  using namespace nvgemm;
  CUtensorMap ma, mb;
  if (!make_map(&ma, A, M, K) || !make_map(&mb, B, N, K)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(nvfp4_gemm_tcgen05, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    configured = true;
  }
  const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  nvfp4_gemm_tcgen05<<<tiles, THREADS, SMEM_BYTES, stream>>>(ma, mb, reinterpret_cast<const uint8_t*>(SA),
                                                             reinterpret_cast<const uint8_t*>(SB), C, M, N, K, 8);
}
