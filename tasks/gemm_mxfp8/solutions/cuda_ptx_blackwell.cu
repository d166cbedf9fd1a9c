// Expert Blackwell MXFP8 GEMM (sm_100a) for the xlang `gemm_mxfp8` task:
//   C[M,N] (bf16) = sum_k A[m,k] 2**(SA[m,k/32]-127) * B[n,k] 2**(SB[n,k/32]-127), fp32 accumulation,
//   A [M,K] and B [N,K] e4m3 (K contiguous), SA [M,K/32] and SB [N,K/32] UE8M0 bytes, row-major.
//
// STATUS: compiled for sm_100a and its SASS census checked; NEVER RUN: no Blackwell GPU exists in this workplace.
// Its scale handling is re-enacted on CPU by tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py, which calls the
// xl_rule_* functions below (the same functions the kernel uses). Treat it as unverified until a B200 run says so.
//
// Design (the bf16 tcgen05 expert, tasks/gemm/solutions/cuda_ptx_blackwell.cu, made block-scaled)
// ----------------------------------------------------------------------------------------------
// * One CTA per 128 x 128 output tile (grouped tile order), K step 128 (one 128-byte swizzled row of e4m3 = four
//   MXFP8 scale blocks), a ring of 6 shared-memory slots: A box 16 KiB, B box 16 KiB, and a 1 KiB pair of scale
//   chunks (512 bytes for the tile's 128 rows of A, 512 for its 128 rows of B).
// * 256 threads, roles by warp:
//     warp 0, lane 0: TMA producer of the A and B boxes (zero fill past M, N: no tail code).
//     warps 4-7: scale warps. The scales cannot come by TMA: one K step needs 4 bytes per row (TMA's inner box is
//       16 bytes at least) and a row of SA is K/32 bytes, not a multiple of 16 for every allowed K. Warp 4 + g fills
//       K steps kb = g (mod 4): lane l loads the 32-bit word kb (the K step's 4 scale bytes, little-endian: block
//       kb*4+b at byte b) of tile rows l + 32 j, j < 4 (byte 127 = 2**0 for rows past M or N: their A / B rows are
//       zero), and stores the four words at words 4 l .. 4 l + 3 of the chunk (one st.shared.v4). That makes row m,
//       block b land at chunk byte 16 (m % 32) + 4 (m / 32) + b: 32 rows of 16 bytes, the shape tcgen05.cp
//       .32x128b.warpx4 copies into tensor memory (PTX ISA 9.7.16.8.x tcgen05.cp: 32 lanes x 128 bits, .warpx4
//       duplicating them into the four 32-lane quarters, which block scaling requires: "Scale factors for A and B
//       matrices need to be duplicated to all 32 lane partitions of tensor memory", 9.7.16.10.7 Block Scaling).
//       Every lane then runs fence.proxy.async.shared::cta (the copy reads through the async proxy) and arrives
//       on the slot's full barrier (count 1 + 32: the producer's expect_tx arrival and the 32 lanes).
//     warp 1, lane 0: MMA issuer. Waits for a full slot, issues two tcgen05.cp (SFA chunk -> TMEM columns
//       128 + 8 s .. +3, SFB chunk -> 132 + 8 s .. +3: per-slot columns, so a copy never overwrites scales that
//       MMAs of an earlier K step still read; the PTX ISA's tcgen05 pipeline orders cp before a later mma of the
//       same thread, not the reverse), then four tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X
//       (M 128, N 128, K 32: one scale block each), the MMA for K block b reading byte b of the scale columns
//       (scale-factor id b in the instruction descriptor), then tcgen05.commit to the slot's empty barrier
//       (tracks the copies and MMAs). After the last K step a commit to "done".
//     warps 0-3: epilogue, as the bf16 expert: tcgen05.ld.32x32b.x32, bf16, stores clipped at M and N.
// * TMEM: warp 0 allocates 256 columns (accumulator 0..127, scales 128..175).
//
// Encodings (PTX ISA 9.7.16.4.1 Shared memory descriptor, 9.7.16.4.2 Instruction descriptor, the table for the
// block-scaled kinds):
//   A / B smem descriptor: as the bf16 expert (128-byte swizzle, K-major, SBO 1024 B); a K step of 32 e4m3 elements
//     adds 32 bytes (+2 in the >>4 start field).
//   scale-chunk descriptor (tcgen05.cp source): no swizzle, LBO 16 B (unused: one 16-byte core-matrix column),
//     SBO 128 B (8 rows x 16 B between 8-row core matrices), version bit 46.
//   instruction descriptor (kind::mxf8f6f4): bits 4-5 B scale-factor id, 7-9 A type (0 = E4M3), 10-12 B type
//     (0 = E4M3), 15/16 K-major (0), 17-22 N >> 3, 23 scale type (1 = UE8M0), 24-28 M >> 4, 29-30 A scale-factor id.
//   scale operand address: TMEM column of the scale, with the scale-factor id also in bits 30-31, the form
//     CUTLASS's CuTe DSL emits for the same MMA (the PTX of tasks/gemm_mxfp8/solutions/cutedsl_blackwell.py: its
//     MMA for K block b passes [sfa + (b << 30)] and puts the same b in bits 29-30 / 4-5 of the descriptor).
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace mxgemm {

constexpr int BM = 128, BN = 128, BK = 128, STAGES = 6, THREADS = 256;
constexpr int SF_VEC = 32;                        // elements per MXFP8 scale block
constexpr int MMA_K = 32;                         // K of one tcgen05.mma kind::mxf8f6f4
constexpr int A_BYTES = BM * BK;                  // 16 KiB (e4m3: one byte per element)
constexpr int B_BYTES = BN * BK;                  // 16 KiB
constexpr int CHUNK_BYTES = 512;                  // one operand's scales of one K step: 128 rows x 4 bytes
constexpr int SF_BYTES = 2 * CHUNK_BYTES;         // SFA chunk, then SFB chunk
constexpr int ACC_COLS = BN;                      // fp32 accumulator: one TMEM column per output column
constexpr int TMEM_COLS = 256;                    // a power of two >= ACC_COLS + 8 * STAGES
constexpr int SMEM_BYTES = STAGES * (A_BYTES + B_BYTES + SF_BYTES) + 1024 + 256;
constexpr uint8_t SCALE_ONE = 127;                // UE8M0 2**0, for rows past M or N

static_assert(ACC_COLS + 8 * STAGES <= TMEM_COLS, "scale columns do not fit the allocation");

// ---------------------------------------------------------------- the scale rules (the CPU model calls these too)
// Scale warp lane `lane`, word j < 4: the tile row it loads (row-major SA / SB), and the chunk word it stores to.
__host__ __device__ constexpr int scale_row(int lane, int j) { return lane + 32 * j; }
__host__ __device__ constexpr int scale_word(int lane, int j) { return 4 * lane + j; }
// TMEM column (relative to the allocation) of slot s's SFA (operand 0) or SFB (operand 1) scale columns.
__host__ __device__ constexpr uint32_t scale_column(int s, int operand) { return ACC_COLS + 8 * s + 4 * operand; }
// The scale operand of the MMA for K block b (0..3) of a K step: the column with the scale-factor id in bits 30-31.
__host__ __device__ constexpr uint32_t scale_operand(uint32_t tmem_base, int s, int operand, int b) {
  return (tmem_base + scale_column(s, operand)) | (static_cast<uint32_t>(b) << 30);
}
constexpr uint32_t IDESC_BASE = (0u << 7) | (0u << 10)                      // A, B = E4M3
                                | (static_cast<uint32_t>(BN >> 3) << 17)    // N / 8
                                | (1u << 23)                                // scale type UE8M0
                                | (static_cast<uint32_t>(BM >> 4) << 24);   // M / 16
// The instruction descriptor of an MMA whose scale operands are sfa, sfb (their ids into bits 29-30 and 4-5).
__host__ __device__ constexpr uint32_t idesc_for(uint32_t sfa, uint32_t sfb) {
  return IDESC_BASE | ((sfa >> 30) << 29) | ((sfb >> 30) << 4);
}
// tcgen05.cp source descriptor of a scale chunk at shared address `addr`.
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

__device__ __forceinline__ uint64_t smem_desc_sw128(const void* tile) {
  return (static_cast<uint64_t>(smem_addr(tile) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 46)
         | (2ull << 61);
}
// 32 TMEM lanes x 128 bits from the chunk, duplicated into all four lane quarters (one thread issues it).
__device__ __forceinline__ void copy_scales(uint32_t taddr, uint64_t desc) {
  asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;" ::"r"(taddr), "l"(desc) : "memory");
}
// D[tmem] (+)= (A * scale_A) . (B * scale_B)^T for one 32-wide K block, one thread issues it.
__device__ __forceinline__ void mma_mxf8(uint32_t d_tmem, uint64_t da, uint64_t db, uint32_t sfa, uint32_t sfb,
                                         uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %6, 0;\n"
      "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X [%0], %1, %2, %3, [%4], [%5], p;\n}\n"
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

// One scale warp's chunk for `rows` rows (M or N) of a row-major scale matrix with `words` 32-bit words per row.
__device__ __forceinline__ void stage_scales(uint8_t* chunk, const uint8_t* __restrict__ scales, int row0, int rows,
                                             int words, int kb, int lane) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int row = row0 + scale_row(lane, j);
    w[j] = row < rows ? __ldg(reinterpret_cast<const uint32_t*>(scales) + static_cast<size_t>(row) * words + kb)
                      : SCALE_ONE * 0x01010101u;
  }
  static_assert(scale_word(0, 1) == scale_word(0, 0) + 1 && scale_word(0, 3) == scale_word(0, 0) + 3,
                "the v4 store assumes a lane's four words are consecutive");
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(smem_addr(chunk + 4 * scale_word(lane, 0))),
               "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
}

// ---------------------------------------------------------------- the kernel
__global__ void __launch_bounds__(THREADS, 1)
mxfp8_gemm_tcgen05(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
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
  const int words = K / (4 * SF_VEC);  // 32-bit scale words per row of SA / SB

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1 + 32);   // producer's arrive.expect_tx (+ TMA bytes), 32 scale lanes
      mbar_init(&empty[s], 1);       // one tcgen05.commit
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
    // ---------------- TMA producer (A, B)
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      mbar_wait(&empty[s], ((kb / STAGES) & 1) ^ 1);
      mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
      tma_load_2d(slot_a + s * A_BYTES, &map_a, &full[s], kb * BK, tm * BM);
      tma_load_2d(slot_b + s * B_BYTES, &map_b, &full[s], kb * BK, tn * BN);
    }
  } else if (warp >= 4) {
    // ---------------- scale warps: K steps kb = warp - 4 (mod 4)
    for (int kb = warp - 4; kb < kblocks; kb += 4) {
      const int s = kb % STAGES;
      mbar_wait(&empty[s], ((kb / STAGES) & 1) ^ 1);
      uint8_t* chunk = slot_sf + s * SF_BYTES;
      stage_scales(chunk, SA, tm * BM, M, words, kb, lane);
      stage_scales(chunk + CHUNK_BYTES, SB, tn * BN, N, words, kb, lane);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // generic-proxy stores -> tcgen05.cp
      mbar_arrive(&full[s]);
    }
  } else if (warp == 1 && lane == 0) {
    // ---------------- MMA issuer
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      mbar_wait(&full[s], (kb / STAGES) & 1);
      tc_fence_after();
      const uint8_t* chunk = slot_sf + s * SF_BYTES;
      copy_scales(tmem + scale_column(s, 0), chunk_desc(smem_addr(chunk)));
      copy_scales(tmem + scale_column(s, 1), chunk_desc(smem_addr(chunk + CHUNK_BYTES)));
      const uint64_t da = smem_desc_sw128(slot_a + s * A_BYTES);
      const uint64_t db = smem_desc_sw128(slot_b + s * B_BYTES);
#pragma unroll
      for (int b = 0; b < BK / MMA_K; ++b)
        mma_mxf8(tmem, da + 2 * b, db + 2 * b, scale_operand(tmem, s, 0, b), scale_operand(tmem, s, 1, b),
                 (kb > 0 || b > 0) ? 1u : 0u);
      mma_commit(&empty[s]);   // slot s (boxes and scale chunks) is free once these copies and MMAs are done
    }
    mma_commit(done);
  }

  if (warp < 4) {
    // ---------------- epilogue (warps 0-3: TMEM lanes 32 w .. 32 w + 31)
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
          if (col0 + 8 * q < N) {   // N % 16 == 0: an 8-column group is never split
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

// Row-major [rows, K] e4m3 bytes; box = 128 rows x 128 bytes, 128-byte swizzle, zero fill past the matrix.
static bool make_map(CUtensorMap* map, const void* base, int rows, int K) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(K)};
  cuuint32_t box[2] = {BK, 128};
  cuuint32_t elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace mxgemm

// The scale rules, exported for the CPU model (tasks/gemm_mxfp8/verify/cuda_ptx_blackwell_model.py); the kernel
// never calls these, it inlines the same constexpr functions.
extern "C" int xl_rule_scale_row(int lane, int j) { return mxgemm::scale_row(lane, j); }
extern "C" int xl_rule_scale_word(int lane, int j) { return mxgemm::scale_word(lane, j); }
extern "C" uint32_t xl_rule_scale_operand(uint32_t tmem, int s, int operand, int b) {
  return mxgemm::scale_operand(tmem, s, operand, b);
}
extern "C" uint32_t xl_rule_idesc(uint32_t sfa, uint32_t sfb) { return mxgemm::idesc_for(sfa, sfb); }
extern "C" uint64_t xl_rule_chunk_desc(uint32_t addr) { return mxgemm::chunk_desc(addr); }
// 0 BM, 1 BN, 2 BK, 3 STAGES, 4 MMA_K, 5 CHUNK_BYTES, 6 ACC_COLS, 7 TMEM_COLS, 8 scale chunks per operand and K step
extern "C" int xl_rule_const(int which) {
  const int v[] = {mxgemm::BM, mxgemm::BN, mxgemm::BK, mxgemm::STAGES, mxgemm::MMA_K, mxgemm::CHUNK_BYTES,
                   mxgemm::ACC_COLS, mxgemm::TMEM_COLS, 1};
  return which >= 0 && which < 9 ? v[which] : -1;
}

extern "C" void xlang_entry(const __nv_fp8_e4m3* A, const uint8_t* SA, const __nv_fp8_e4m3* B, const uint8_t* SB,
                            __nv_bfloat16* C, int M, int N, int K, cudaStream_t stream) {
  using namespace mxgemm;
  CUtensorMap ma, mb;
  if (!make_map(&ma, A, M, K) || !make_map(&mb, B, N, K)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(mxfp8_gemm_tcgen05, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    configured = true;
  }
  const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  mxfp8_gemm_tcgen05<<<tiles, THREADS, SMEM_BYTES, stream>>>(ma, mb, SA, SB, C, M, N, K, 8);
}
