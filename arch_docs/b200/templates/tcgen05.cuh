// xlang arch_docs, Blackwell (sm_100a): 5th-generation tensor core (tcgen05) wrappers.
// Source: PTX ISA, chapter "TensorCore 5th Generation Family Instructions" (PTX 8.6+; anchors
// #tcgen05-*). Shape rules also agree with CUTLASS include/cute/arch/mma_sm100_umma.hpp (commit
// 7107b0553) and the CuTe DSL 4.8.1 MmaF16BF16Op docstring. Needs:
//   nvcc -gencode=arch=compute_100a,code=sm_100a
// Wrapped: tcgen05.alloc / dealloc / relinquish_alloc_permit (cta_group::1 and ::2), tcgen05.fence,
// the smem and instruction descriptors, tcgen05.mma kind::f16 (A from smem or from TMEM, one CTA or a
// CTA pair), tcgen05.commit (plain and multicast), tcgen05.ld / st (32x32b, 16x128b, 16x256b,
// .pack::16b / .unpack::16b), tcgen05.wait.
// The SASS each wrapper compiles to is the table "SASS spellings" in params.md; that table and the
// shape rules asserted below are checked by tests/test_arch_docs_claims.py (CPU only). Nothing here
// has run on a B200.
#pragma once
#include <cstdint>
#include "ptx_common.cuh"

namespace xl {

// ---- tensor memory (TMEM) addressing ------------------------------------------------
// 128 lanes x 512 columns of 32-bit cells per SM. An address is (lane << 16) | column.
// tcgen05.alloc returns the base (lane 0, first allocated column).
__device__ __forceinline__ uint32_t tmem_addr(uint32_t base, uint32_t lane, uint32_t col) {
  return base + (lane << 16) + col;
}

// ---- allocation (one whole warp executes each of these) --------------------------------
// PTX #tcgen05-instructions-tcgen05-alloc-dealloc-relinquish-alloc-permit:
//  * nCols is a power of two, 32 <= nCols <= 512 (asserted below);
//  * the column count must not INCREASE between two allocations of one CTA (allocate the
//    largest block first);
//  * alloc blocks until the columns are free; all CTAs on the SM share the 512 columns;
//  * the address is written to *smem_result by an async store: read it only after
//    tcgen05_fence_before(); __syncthreads(); tcgen05_fence_after();
//  * every tcgen05 instruction of a kernel uses the same CTA_GROUP (ptxas rejects a mix).
// CTA_GROUP = 2: one warp in EACH CTA of the pair runs it; both get the same columns.
template <int NCOLS>
__host__ __device__ constexpr bool tmem_ncols_ok() {
  return NCOLS >= 32 && NCOLS <= 512 && (NCOLS & (NCOLS - 1)) == 0;
}

template <int NCOLS, int CTA_GROUP = 1>
__device__ __forceinline__ void tmem_alloc(uint32_t* smem_result) {
  static_assert(tmem_ncols_ok<NCOLS>(), "tcgen05.alloc: nCols must be a power of two in 32..512");
  static_assert(CTA_GROUP == 1 || CTA_GROUP == 2, "cta_group is 1 or 2");
  if constexpr (CTA_GROUP == 1)
    asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                 :: "r"(smem_u32(smem_result)), "n"(NCOLS) : "memory");
  else
    asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;"
                 :: "r"(smem_u32(smem_result)), "n"(NCOLS) : "memory");
}

// Promise that this CTA will not allocate again, so that a blocked alloc of another CTA on the
// SM can be served. No alloc may follow it in this CTA.
template <int CTA_GROUP = 1>
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
  static_assert(CTA_GROUP == 1 || CTA_GROUP == 2, "cta_group is 1 or 2");
  if constexpr (CTA_GROUP == 1)
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
  else
    asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
}

// Free what tmem_alloc returned (same base and NCOLS). Mandatory before the CTA exits, after
// every tcgen05 operation on those columns has completed:
//   tcgen05_fence_before(); __syncthreads(); (allocating warp) tcgen05_fence_after(); dealloc.
template <int NCOLS, int CTA_GROUP = 1>
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr) {
  static_assert(tmem_ncols_ok<NCOLS>(), "tcgen05.dealloc: nCols must be a power of two in 32..512");
  static_assert(CTA_GROUP == 1 || CTA_GROUP == 2, "cta_group is 1 or 2");
  if constexpr (CTA_GROUP == 1)
    asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;"
                 :: "r"(taddr), "n"(NCOLS) : "memory");
  else
    asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;"
                 :: "r"(taddr), "n"(NCOLS) : "memory");
}

// ---- ordering of tcgen05 operations around thread synchronisation -------------------
// before_thread_sync: after this thread's tcgen05 ops, before the barrier / mbarrier arrive
// that tells other threads about them. after_thread_sync: after the barrier / mbarrier wait,
// before this thread's dependent tcgen05 ops (mma, ld, st, dealloc). They order the
// instructions; ptxas emits NO SASS instruction for either (params.md, checked).
__device__ __forceinline__ void tcgen05_fence_before() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
__device__ __forceinline__ void tcgen05_fence_after() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// ---- shared-memory matrix descriptor (64-bit, tcgen05 form) -------------------------
// PTX #tcgen05-shared-memory-descriptor; CUTLASS include/cute/arch/mma_sm100_desc.hpp.
// bits  0-13 start address >> 4          bits 16-29 LBO >> 4
// bits 32-45 SBO >> 4                    bits 46-48 fixed 0b001 (descriptor version)
// bits 49-51 base offset                 bit  52    LBO mode (0 = relative offset)
// bits 61-63 swizzle: 0 none, 1 128B with 32B atom, 2 128B, 4 64B, 6 32B
// Relation to the Hopper wgmma descriptor (CUTLASS mma_sm90_desc.hpp): the Hopper 2-bit swizzle
// code at bits 62-63 is bit-identical to these codes (1<<62 == 2<<61 = 128B, 2<<62 == 4<<61 =
// 64B, 3<<62 == 6<<61 = 32B). The differences are the version bit 46 (must be set here) and the
// extra value 1 (128B with 32-byte atoms, no Hopper equivalent). Writing the Hopper VALUE 1 into
// bits 61-63 selects 128B_BASE32B, not 128B: use the enum.
enum class UmmaSwizzle : uint32_t { None = 0, B128_Atom32 = 1, B128 = 2, B64 = 4, B32 = 6 };

// The bits from a shared-window address (constexpr, so tests/test_arch_docs_descriptors.py can
// rebuild it from the table in contracts.md §6 and static_assert the two agree).
__host__ __device__ constexpr uint64_t umma_desc_bits(uint32_t smem_addr, uint32_t lbo_bytes,
                                                      uint32_t sbo_bytes, UmmaSwizzle swz) {
  return ((static_cast<uint64_t>(smem_addr) >> 4) & 0x3FFFull) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32) |
         (1ull << 46) |
         (static_cast<uint64_t>(swz) << 61);
}

__device__ __forceinline__ uint64_t umma_desc(const void* smem_tile, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes, UmmaSwizzle swz) {
  return umma_desc_bits(smem_u32(smem_tile), lbo_bytes, sbo_bytes, swz);
}

// K-major bf16 tile written by TMA with SWIZZLE_128B and a 64-element inner box:
// SBO = 1024 B (8 rows x 128 B), LBO unused ("assumed 1" in PTX; we encode 16 B = 1).
// Tile 1024-byte aligned. For a CTA pair, both CTAs must place the tile at the SAME smem
// offset: one descriptor (issued in one CTA) addresses both CTAs' copies.
__device__ __forceinline__ uint64_t umma_desc_kmajor_sw128(const void* smem_tile) {
  return umma_desc(smem_tile, 16, 1024, UmmaSwizzle::B128);
}

// Advance the start address by `bytes` (multiple of 16): +32 B per K=16 bf16 step.
__device__ __forceinline__ uint64_t umma_desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

// ---- shape rules, kind::f16 (K = 16 per instruction) ----------------------------------
// PTX "Matrix Shape" table (Table 39 in PTX 9.x), dense kind::f16:
//   cta_group::1: M = 64 or 128, N = 8..256 in steps of 8
//   cta_group::2: M = 128 or 256 (across the pair), N = 16..256 in steps of 16
// With A in TMEM (the ".ts" form) CUTLASS 7107b0553 asserts more (mma_sm100_umma.hpp
// SM100_MMA_F16BF16_TS: N % 16 at M = 128; SM100_MMA_F16BF16_2x1SM_TS: N % 32, N >= 32), and A
// must be K-major. We assert the CUTLASS rule for TMEM-A because it is the stricter one; PTX
// Table 39 does not list a separate TS row (unverified whether hardware needs it).
// M and N live only in the instruction descriptor (a run-time value), so ptxas cannot reject
// a bad shape: these static_asserts are the only compile-time check.
__host__ __device__ constexpr bool umma_f16_shape_ok(int cta_group, int M, int N, bool a_tmem) {
  if (cta_group == 1) {
    if (M != 64 && M != 128) return false;
    if (a_tmem && M == 128) return N >= 16 && N <= 256 && N % 16 == 0;
    return N >= 8 && N <= 256 && N % 8 == 0;
  }
  if (cta_group == 2) {
    if (M != 128 && M != 256) return false;
    if (a_tmem) return N >= 32 && N <= 256 && N % 32 == 0;
    return N >= 16 && N <= 256 && N % 16 == 0;
  }
  return false;
}

// ---- instruction descriptor (32-bit) for kind::f16 --------------------------------------
// PTX #tcgen05-instruction-descriptor; CUTLASS mma_sm100_desc.hpp InstrDescriptor.
// bits 0-1 sparsity selector, 2 sparse, 3 saturate (0 here)
// bits 4-5 D type (0 f16, 1 f32)        bits 7-9 A type (0 f16, 1 bf16)
// bits 10-12 B type (0 f16, 1 bf16)      bit 13 / 14 negate A / B
// bit 15 A major (0 K-major, 1 M-major)  bit 16 B major (0 K-major, 1 N-major)
// bits 17-22 N >> 3                      bit 23 reserved
// bits 24-28 M >> 4                      bit 29 reserved; bits 30-31 max shift (.ws only, 0)
// For a CTA pair, M is the pair's M (128 or 256).
// Example: umma_idesc_bf16_f32<128, 128>() == 0x08200490.
template <int M, int N, int CTA_GROUP = 1, bool A_TMEM = false, int A_MN_MAJOR = 0,
          int B_MN_MAJOR = 0>
__host__ __device__ constexpr uint32_t umma_idesc_bf16_f32() {
  static_assert(umma_f16_shape_ok(CTA_GROUP, M, N, A_TMEM),
                "kind::f16 shape: cta_group::1 M in {64,128}, N 8..256 step 8 (A in TMEM at M=128: "
                "step 16); cta_group::2 M in {128,256}, N 16..256 step 16 (A in TMEM: step 32)");
  static_assert(!(A_TMEM && A_MN_MAJOR), "A from TMEM is always K-major");
  static_assert(A_MN_MAJOR == 0 || A_MN_MAJOR == 1, "major flag is 0 or 1");
  static_assert(B_MN_MAJOR == 0 || B_MN_MAJOR == 1, "major flag is 0 or 1");
  return (1u << 4) | (1u << 7) | (1u << 10) | (static_cast<uint32_t>(A_MN_MAJOR) << 15) |
         (static_cast<uint32_t>(B_MN_MAJOR) << 16) | (static_cast<uint32_t>(N >> 3) << 17) |
         (static_cast<uint32_t>(M >> 4) << 24);
}

// ---- MMA --------------------------------------------------------------------------------
// D[tmem] (+)= A * B, bf16/f16 in, per idesc. Asynchronous; K = 16 per instruction.
// Issued by ONE thread (PTX #tcgen05-issue-granularity). In SASS, ptxas wraps it in a loop that
// issues once per ACTIVE thread (ELECT ... BRA.U.ANY, seen with nvcc 13.0): 32 lanes calling it
// means 32 MMAs. Guard with one lane (if (lane == 0) / elect_one_sync()).
// accumulate == 0 overwrites D (first K step of every tile: TMEM starts undefined).
__device__ __forceinline__ void tcgen05_mma_f16(uint32_t d_tmem, uint64_t desc_a,
                                                uint64_t desc_b, uint32_t idesc,
                                                uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred PA;\n\t"
      "setp.ne.b32 PA, %4, 0;\n\t"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, PA;\n\t}"
      :: "r"(d_tmem), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate)
      : "memory");
}

// A from TMEM ("ts" form), B from shared memory. The A tile is M rows (= TMEM lanes) x 16 K
// elements per instruction; with 16-bit A two elements share one 32-bit column, so one K=16
// step reads 8 columns: advance a_tmem by 8 columns per step. A must be K-major; the idesc must
// come from umma_idesc_bf16_f32<M, N, 1, true>(). Attention keeps P (bf16) in TMEM this way.
// The TMEM A data must be complete before the issue: writers run tcgen05_wait_st(),
// tcgen05_fence_before(), arrive; the issuer waits, then tcgen05_fence_after().
__device__ __forceinline__ void tcgen05_mma_f16_ts(uint32_t d_tmem, uint32_t a_tmem,
                                                   uint64_t desc_b, uint32_t idesc,
                                                   uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred PA;\n\t"
      "setp.ne.b32 PA, %4, 0;\n\t"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, PA;\n\t}"
      :: "r"(d_tmem), "r"(a_tmem), "l"(desc_b), "r"(idesc), "r"(accumulate)
      : "memory");
}

// CTA pair (cta_group::2): one thread of the pair issues (conventionally in the even CTA).
// It computes an M = 128 or 256 tile: each CTA holds M/2 rows of A and half of B's N columns at
// the SAME smem offsets, and receives its M/2 rows of D in its own TMEM at the same column.
// The idesc is umma_idesc_bf16_f32<M, N, 2>() with the PAIR's M and full N.
__device__ __forceinline__ void tcgen05_mma_f16_pair(uint32_t d_tmem, uint64_t desc_a,
                                                     uint64_t desc_b, uint32_t idesc,
                                                     uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred PA;\n\t"
      "setp.ne.b32 PA, %4, 0;\n\t"
      "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, PA;\n\t}"
      :: "r"(d_tmem), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate)
      : "memory");
}

__device__ __forceinline__ void tcgen05_mma_f16_ts_pair(uint32_t d_tmem, uint32_t a_tmem,
                                                        uint64_t desc_b, uint32_t idesc,
                                                        uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred PA;\n\t"
      "setp.ne.b32 PA, %4, 0;\n\t"
      "tcgen05.mma.cta_group::2.kind::f16 [%0], [%1], %2, %3, PA;\n\t}"
      :: "r"(d_tmem), "r"(a_tmem), "l"(desc_b), "r"(idesc), "r"(accumulate)
      : "memory");
}

// ---- completion --------------------------------------------------------------------------
// `bar` receives ONE arrival when all tcgen05.mma / tcgen05.cp previously issued BY THIS THREAD
// have completed (PTX #tcgen-async-sync-operations-commit). Issue it from the thread that issued
// the MMAs: a lane that issued none arrives at once, so a whole warp committing to a count-1
// barrier can complete the phase before the MMAs finish. Waiters then run tcgen05_fence_after()
// before tcgen05.ld (PTX canonical pattern "commit -> wait -> fence::after_thread_sync").
__device__ __forceinline__ void tcgen05_commit(uint64_t* bar) {
  asm volatile(
      "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
      :: "r"(smem_u32(bar)) : "memory");
}

// Same, but the arrival goes to the barrier at the same smem offset in every CTA of the cluster
// whose bit is set in cta_mask (bit i = CTA rank i). Use it to free a smem stage that a
// multicast TMA filled in several CTAs.
__device__ __forceinline__ void tcgen05_commit_multicast(uint64_t* bar, uint16_t cta_mask) {
  asm volatile(
      "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
      " [%0], %1;"
      :: "r"(smem_u32(bar)), "h"(cta_mask) : "memory");
}

// Pair form (kernel uses cta_group::2 throughout). With mask 0b11 << (rank & ~1) both CTAs of
// the pair are signalled, e.g. "accumulator ready" for both epilogues.
__device__ __forceinline__ void tcgen05_commit_pair_multicast(uint64_t* bar, uint16_t cta_mask) {
  asm volatile(
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
      " [%0], %1;"
      :: "r"(smem_u32(bar)), "h"(cta_mask) : "memory");
}

// ---- TMEM <-> registers --------------------------------------------------------------------
// All ld/st are warp-collective (.sync.aligned: no divergence, __syncwarp() after divergent
// code). A warp may only touch TMEM lanes 32*(warp_id % 4) .. 32*(warp_id % 4) + 31.
// Registers of an ld are undefined until tcgen05_wait_ld(); an st is complete (e.g. for an MMA
// reading it) after tcgen05_wait_st(). SASS: wait::st is FENCE.VIEW.ASYNC.T; wait::ld emits no
// instruction (a register dependency).
__device__ __forceinline__ void tcgen05_wait_ld() {
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tcgen05_wait_st() {
  asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
}

// Register lists for the asm strings below (the address operand follows the list).
#define XL_R4 "{%0, %1, %2, %3}"
#define XL_R8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define XL_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define XL_R32                                                                               \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define XL_O4(r) "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
#define XL_O8(r) XL_O4(r), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
#define XL_O16(r)                                                                            \
  XL_O8(r), "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]),         \
      "=r"(r[14]), "=r"(r[15])
#define XL_O32(r)                                                                            \
  XL_O16(r), "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]),      \
      "=r"(r[22]), "=r"(r[23]), "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), \
      "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
#define XL_I8(r) "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7])
#define XL_I16(r)                                                                            \
  XL_I8(r), "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]),   \
      "r"(r[15])
#define XL_I32(r)                                                                            \
  XL_I16(r), "r"(r[16]), "r"(r[17]), "r"(r[18]), "r"(r[19]), "r"(r[20]), "r"(r[21]), "r"(r[22]), \
      "r"(r[23]), "r"(r[24]), "r"(r[25]), "r"(r[26]), "r"(r[27]), "r"(r[28]), "r"(r[29]),        \
      "r"(r[30]), "r"(r[31])

// Repetition limits (PTX #tcgen05-instructions-tcgen05-ld, Table 49; ptxas rejects more, see
// params.md): 32x32b .x1...x128, 16x64b .x1...x128, 16x128b .x1...x64, 16x256b .x1...x32,
// 16x32bx2 .x1...x128. Registers per thread: 32x32b.xN -> N, 16x128b.xN -> 2N, 16x256b.xN -> 4N.

// .32x32b.xN: lane l of the warp <- TMEM lane lane(taddr) + l, columns col(taddr) .. +N-1.
__device__ __forceinline__ void tmem_ld_32x32b_x8(uint32_t taddr, uint32_t (&r)[8]) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 " XL_R8 ", [%8];"
               : XL_O8(r) : "r"(taddr) : "memory");
}
__device__ __forceinline__ void tmem_ld_32x32b_x16(uint32_t taddr, uint32_t (&r)[16]) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x16.b32 " XL_R16 ", [%16];"
               : XL_O16(r) : "r"(taddr) : "memory");
}
__device__ __forceinline__ void tmem_ld_32x32b_x32(uint32_t taddr, uint32_t (&r)[32]) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.b32 " XL_R32 ", [%32];"
               : XL_O32(r) : "r"(taddr) : "memory");
}

// Inverse of the loads; follow with tcgen05_wait_st() before a thread sync that publishes the
// data to tcgen05.mma.
__device__ __forceinline__ void tmem_st_32x32b_x8(uint32_t taddr, const uint32_t (&r)[8]) {
  asm volatile("tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], "
               "{%1, %2, %3, %4, %5, %6, %7, %8};"
               :: "r"(taddr), XL_I8(r) : "memory");
}
__device__ __forceinline__ void tmem_st_32x32b_x16(uint32_t taddr, const uint32_t (&r)[16]) {
  asm volatile("tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], "
               "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16};"
               :: "r"(taddr), XL_I16(r) : "memory");
}
__device__ __forceinline__ void tmem_st_32x32b_x32(uint32_t taddr, const uint32_t (&r)[32]) {
  asm volatile("tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], "
               "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
               "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};"
               :: "r"(taddr), XL_I32(r) : "memory");
}

// .pack::16b on ld packs the 16-bit values of two adjacent TMEM columns into one 32-bit register,
// so .32x32b.x32.pack::16b reads 64 columns into 32 registers; .unpack::16b on st is the inverse
// (PTX tcgen05.ld / tcgen05.st, ".pack::16b" / ".unpack::16b"; ptxas rejects .pack on st and
// .unpack on ld, see params.md). Which half holds the lower column: read the PTX text before
// relying on it (not checked here).
// NOTE for the TS MMA: it reads 16-bit A as TWO values per 32-bit cell (PTX "Matrix fragments",
// A in TMEM; the Blackwell attention experts, tasks/attn_fwd/NOTES_cuda_ptx_blackwell.md item 7,
// and Triton's sm_100 lowering agree). Registers that already hold bf16x2 pairs (low half = lower
// K, as cvt.rn.bf16x2.f32 builds them) are written with a plain 32x32b st.
__device__ __forceinline__ void tmem_ld_32x32b_x32_pack16(uint32_t taddr, uint32_t (&r)[32]) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.pack::16b.b32 " XL_R32 ", [%32];"
               : XL_O32(r) : "r"(taddr) : "memory");
}
__device__ __forceinline__ void tmem_st_32x32b_x32_unpack16(uint32_t taddr,
                                                            const uint32_t (&r)[32]) {
  asm volatile("tcgen05.st.sync.aligned.32x32b.x32.unpack::16b.b32 [%0], "
               "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
               "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};"
               :: "r"(taddr), XL_I32(r) : "memory");
}

// .16x256b.xN (N = 1, 2, 4, 8 wrapped; PTX maximum .x32): the warp reads 16 TMEM lanes starting at
// lane(taddr) x 256 bits (8 columns) per repetition, 4 registers per thread per repetition. Which
// thread gets which (lane, column): the PTX figure "Matrix fragment for .16x256b" (not restated
// here; only the spelling, the register count and the SASS were checked).
template <int N>
__device__ __forceinline__ void tmem_ld_16x256b(uint32_t taddr, uint32_t (&r)[4 * N]) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8,
                "16x256b: wrapped for .x1/.x2/.x4/.x8 (PTX maximum .x32)");
  if constexpr (N == 1)
    asm volatile("tcgen05.ld.sync.aligned.16x256b.x1.b32 " XL_R4 ", [%4];"
                 : XL_O4(r) : "r"(taddr) : "memory");
  else if constexpr (N == 2)
    asm volatile("tcgen05.ld.sync.aligned.16x256b.x2.b32 " XL_R8 ", [%8];"
                 : XL_O8(r) : "r"(taddr) : "memory");
  else if constexpr (N == 4)
    asm volatile("tcgen05.ld.sync.aligned.16x256b.x4.b32 " XL_R16 ", [%16];"
                 : XL_O16(r) : "r"(taddr) : "memory");
  else
    asm volatile("tcgen05.ld.sync.aligned.16x256b.x8.b32 " XL_R32 ", [%32];"
                 : XL_O32(r) : "r"(taddr) : "memory");
}

// .16x128b.xN (N = 2, 4, 8, 16 wrapped; PTX maximum .x64): 16 lanes x 128 bits (4 columns) per
// repetition, 2 registers per thread per repetition.
template <int N>
__device__ __forceinline__ void tmem_ld_16x128b(uint32_t taddr, uint32_t (&r)[2 * N]) {
  static_assert(N == 2 || N == 4 || N == 8 || N == 16,
                "16x128b: wrapped for .x2/.x4/.x8/.x16 (PTX maximum .x64)");
  if constexpr (N == 2)
    asm volatile("tcgen05.ld.sync.aligned.16x128b.x2.b32 " XL_R4 ", [%4];"
                 : XL_O4(r) : "r"(taddr) : "memory");
  else if constexpr (N == 4)
    asm volatile("tcgen05.ld.sync.aligned.16x128b.x4.b32 " XL_R8 ", [%8];"
                 : XL_O8(r) : "r"(taddr) : "memory");
  else if constexpr (N == 8)
    asm volatile("tcgen05.ld.sync.aligned.16x128b.x8.b32 " XL_R16 ", [%16];"
                 : XL_O16(r) : "r"(taddr) : "memory");
  else
    asm volatile("tcgen05.ld.sync.aligned.16x128b.x16.b32 " XL_R32 ", [%32];"
                 : XL_O32(r) : "r"(taddr) : "memory");
}

#undef XL_R4
#undef XL_R8
#undef XL_R16
#undef XL_R32
#undef XL_O4
#undef XL_O8
#undef XL_O16
#undef XL_O32
#undef XL_I8
#undef XL_I16
#undef XL_I32

}  // namespace xl
