// xlang arch_docs, Blackwell (sm_100a): 5th-generation tensor core (tcgen05) wrappers.
// PTX ISA section "TensorCore 5th Generation Family Instructions" (PTX 8.6+):
// tcgen05.alloc / dealloc / relinquish_alloc_permit, tcgen05.mma (kind::f16),
// tcgen05.commit, tcgen05.ld / st / wait, tcgen05.fence, plus the shared-memory
// and instruction descriptor formats. Needs:
//   nvcc -gencode=arch=compute_100a,code=sm_100a
// SASS: UTCATOMSWS (alloc / dealloc / relinquish), UTCHMMA (mma kind::f16),
// UTCBAR (commit), LDTM (ld), STTM (st), FENCE.VIEW.ASYNC.T (tcgen05 fences).
// Only cta_group::1 (one CTA owns the MMA) is wrapped here; 2-CTA pairs are
// described in contracts.md.
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
// Allocate `ncols` columns (power of two, 32..512) on all 128 lanes; the base
// address is written to *smem_result (a __shared__ uint32_t). Blocks while not
// enough columns are free. Read the result only after
// tcgen05_fence_before(); __syncthreads(); tcgen05_fence_after();
__device__ __forceinline__ void tmem_alloc(uint32_t* smem_result, uint32_t ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
               :: "r"(smem_u32(smem_result)), "r"(ncols) : "memory");
}

// Promise that this CTA will not allocate again (lets other CTAs' alloc proceed).
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}

// Free what tmem_alloc returned (same base and ncols). Mandatory before the CTA
// exits, after every tcgen05 operation on those columns has completed.
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;"
               :: "r"(taddr), "r"(ncols) : "memory");
}

// ---- ordering of tcgen05 operations around thread synchronisation -------------------
// before_thread_sync: issue after this thread's tcgen05 ops and before the
// barrier / mbarrier arrive that tells other threads about them.
// after_thread_sync: issue after the barrier / mbarrier wait and before this
// thread's dependent tcgen05 ops (mma, ld, st, dealloc).
__device__ __forceinline__ void tcgen05_fence_before() {
  asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
__device__ __forceinline__ void tcgen05_fence_after() {
  asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// ---- shared-memory matrix descriptor (64-bit, tcgen05 form) -------------------------
// bits  0-13 start address >> 4          bits 16-29 LBO >> 4
// bits 32-45 SBO >> 4                    bits 46-48 fixed 0b001 (descriptor version)
// bits 49-51 base offset                 bit  52    LBO mode (0 = relative offset)
// bits 61-63 swizzle: 0 none, 1 128B with 32B atom, 2 128B, 4 64B, 6 32B
// NOTE: differs from the Hopper wgmma descriptor (2-bit swizzle at 62-63, no
// version bits): never reuse one for the other.
enum class UmmaSwizzle : uint32_t { None = 0, B128_Atom32 = 1, B128 = 2, B64 = 4, B32 = 6 };

__device__ __forceinline__ uint64_t umma_desc(const void* smem_tile, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes, UmmaSwizzle swz) {
  const uint64_t addr = smem_u32(smem_tile);
  uint64_t desc = (addr >> 4) & 0x3FFFull;
  desc |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32;
  desc |= 1ull << 46;
  desc |= static_cast<uint64_t>(swz) << 61;
  return desc;
}

// K-major bf16 tile written by TMA with SWIZZLE_128B and a 64-element inner box:
// SBO = 1024 B (8 rows x 128 B), LBO unused (encoded 1). Tile 1024-byte aligned.
__device__ __forceinline__ uint64_t umma_desc_kmajor_sw128(const void* smem_tile) {
  return umma_desc(smem_tile, 16, 1024, UmmaSwizzle::B128);
}

// Advance the start address by `bytes` (multiple of 16): +32 B per K=16 bf16 step.
__device__ __forceinline__ uint64_t umma_desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

// ---- instruction descriptor (32-bit) for kind::f16 --------------------------------------
// bits 0-1 sparsity selector, 2 sparse, 3 saturate (0 here)
// bits 4-5 D type (0 f16, 1 f32)        bits 7-9 A type (0 f16, 1 bf16)
// bits 10-12 B type (0 f16, 1 bf16)      bit 13 / 14 negate A / B
// bit 15 A major (0 K-major, 1 M-major)  bit 16 B major (0 K-major, 1 N-major)
// bits 17-22 N >> 3                      bits 24-28 M >> 4
// bits 30-31 max shift (.ws only, 0)
// Shapes for cta_group::1: M = 64 (N = 8..256 step 8) or M = 128 (N = 16..256 step 16).
__host__ __device__ constexpr uint32_t umma_idesc_bf16_f32(int M, int N, int a_mn_major = 0,
                                                           int b_mn_major = 0) {
  return (1u << 4) | (1u << 7) | (1u << 10) | (static_cast<uint32_t>(a_mn_major) << 15) |
         (static_cast<uint32_t>(b_mn_major) << 16) |
         (static_cast<uint32_t>(N >> 3) << 17) | (static_cast<uint32_t>(M >> 4) << 24);
}

// ---- MMA --------------------------------------------------------------------------------
// D[tmem] (+)= A[smem] * B[smem]^T-per-descriptor, bf16/f16 in, per idesc. Issued by
// ONE thread; asynchronous. accumulate == 0 overwrites D (first K step).
// K per instruction = 16 for kind::f16.
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

// Make `bar` receive one arrival when ALL tcgen05.mma (and tcgen05.cp) previously
// issued by this thread have completed (their smem reads and TMEM writes are done).
// Issued by the same single thread that issued the MMAs. Waiters then run
// tcgen05_fence_after() before tcgen05.ld (PTX ISA 9.7.16.6.4.4 pattern; no
// extra before_thread_sync fence is needed between mma and commit).
__device__ __forceinline__ void tcgen05_commit(uint64_t* bar) {
  asm volatile(
      "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
      :: "r"(smem_u32(bar)) : "memory");
}

// ---- TMEM <-> registers --------------------------------------------------------------------
// A warp may only touch TMEM lanes 32*(warp_id % 4) .. 32*(warp_id % 4) + 31.
__device__ __forceinline__ void tcgen05_wait_ld() {
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tcgen05_wait_st() {
  asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
}

// Warp-collective: lane l of the calling warp receives TMEM lane (lane(taddr) + l),
// columns col(taddr) .. col(taddr)+7, one 32-bit word each. Follow with
// tcgen05_wait_ld() before using r.
__device__ __forceinline__ void tmem_ld_32x32b_x8(uint32_t taddr, uint32_t (&r)[8]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x8.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, [%8];"
      :
        "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
      : "r"(taddr)
      : "memory");
}

// Inverse of tmem_ld_32x32b_x8. Follow with tcgen05_wait_st() before a thread
// sync that publishes the data to tcgen05.mma.
__device__ __forceinline__ void tmem_st_32x32b_x8(uint32_t taddr, const uint32_t (&r)[8]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], "
      "{%1, %2, %3, %4, %5, %6, %7, %8};"
      :: "r"(taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7])
      : "memory");
}

// Warp-collective: lane l of the calling warp receives TMEM lane (lane(taddr) + l),
// columns col(taddr) .. col(taddr)+15, one 32-bit word each. Follow with
// tcgen05_wait_ld() before using r.
__device__ __forceinline__ void tmem_ld_32x32b_x16(uint32_t taddr, uint32_t (&r)[16]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x16.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, [%16];"
      :
        "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
        "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15])
      : "r"(taddr)
      : "memory");
}

// Inverse of tmem_ld_32x32b_x16. Follow with tcgen05_wait_st() before a thread
// sync that publishes the data to tcgen05.mma.
__device__ __forceinline__ void tmem_st_32x32b_x16(uint32_t taddr, const uint32_t (&r)[16]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], "
      "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16};"
      :: "r"(taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
        "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]), "r"(r[15])
      : "memory");
}

// Warp-collective: lane l of the calling warp receives TMEM lane (lane(taddr) + l),
// columns col(taddr) .. col(taddr)+31, one 32-bit word each. Follow with
// tcgen05_wait_ld() before using r.
__device__ __forceinline__ void tmem_ld_32x32b_x32(uint32_t taddr, uint32_t (&r)[32]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
      :
        "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
        "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]),
        "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]),
        "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
      : "r"(taddr)
      : "memory");
}

// Inverse of tmem_ld_32x32b_x32. Follow with tcgen05_wait_st() before a thread
// sync that publishes the data to tcgen05.mma.
__device__ __forceinline__ void tmem_st_32x32b_x32(uint32_t taddr, const uint32_t (&r)[32]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], "
      "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
      "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};"
      :: "r"(taddr),
        "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]), "r"(r[4]), "r"(r[5]), "r"(r[6]), "r"(r[7]),
        "r"(r[8]), "r"(r[9]), "r"(r[10]), "r"(r[11]), "r"(r[12]), "r"(r[13]), "r"(r[14]), "r"(r[15]),
        "r"(r[16]), "r"(r[17]), "r"(r[18]), "r"(r[19]), "r"(r[20]), "r"(r[21]), "r"(r[22]), "r"(r[23]),
        "r"(r[24]), "r"(r[25]), "r"(r[26]), "r"(r[27]), "r"(r[28]), "r"(r[29]), "r"(r[30]), "r"(r[31])
      : "memory");
}

}  // namespace xl
