// xlang arch_docs: TMA (tensor memory accelerator) device wrappers.
// PTX ISA: "cp.async.bulk.tensor", "cp.async.bulk.commit_group",
// "cp.async.bulk.wait_group", "prefetch.tensormap". sm_90+.
// SASS (nvcc 13.0, checked by tests/test_arch_docs_claims.py; table in params.md): UTMALDG.2D ..
// UTMALDG.5D (loads; .MULTICAST and, on sm_100a, .2CTA forms), UTMASTG.2D (store), UTMAREDG.2D
// (cp.reduce.async.bulk.tensor, the reduce-store), UTMACMDFLUSH
// (bulk-group commit), UTMACCTL.PF (prefetch.tensormap: the DESCRIPTOR prefetch). UTMAPF.L2.*
// is a different instruction, cp.async.bulk.prefetch.tensor (prefetch of DATA into L2), which is
// not wrapped here.
//
// The tensor map (CUtensorMap, 128 bytes, 64-byte aligned) is built on the host
// (tma_host.cuh) and passed BY VALUE as a `const __grid_constant__ CUtensorMap`
// kernel parameter; take its address inside the kernel and pass the pointer here.
// Coordinates are element indices, innermost dimension first (c0 = column).
#pragma once
#include <cstdint>
#include <cuda.h>  // CUtensorMap type only; no driver library is linked
#include "ptx_common.cuh"

namespace xl {

__device__ __forceinline__ uint64_t tmap_ptr(const CUtensorMap* map) {
  return reinterpret_cast<uint64_t>(map);
}

// Hint the descriptor into cache (optional; one thread). SASS: UTMACCTL.PF.
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" :: "l"(tmap_ptr(map)) : "memory");
}

// Global -> shared, one box. Completion: `bytes of the box` are signalled to
// `bar` as complete_tx; the caller must have registered them with
// mbar_arrive_expect_tx / mbar_expect_tx for the same phase. One thread issues.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map,
                                            uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];"
      :: "r"(smem_u32(smem_dst)), "l"(tmap_ptr(map)), "r"(c0), "r"(c1),
         "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map,
                                            uint64_t* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];"
      :: "r"(smem_u32(smem_dst)), "l"(tmap_ptr(map)), "r"(c0), "r"(c1), "r"(c2),
         "r"(smem_u32(bar))
      : "memory");
}

// 4D / 5D boxes (e.g. [B, H, S, D] tensors without flattening); same rules as 2D, coordinates
// innermost first. PTX cp.async.bulk.tensor: .dim = .1d .. .5d.
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map,
                                            uint64_t* bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];"
      :: "r"(smem_u32(smem_dst)), "l"(tmap_ptr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
         "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void tma_load_5d(void* smem_dst, const CUtensorMap* map,
                                            uint64_t* bar, int c0, int c1, int c2, int c3,
                                            int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
      :: "r"(smem_u32(smem_dst)), "l"(tmap_ptr(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
         "r"(c4), "r"(smem_u32(bar))
      : "memory");
}

// L2 cache policies for the .L2::cache_hint forms (PTX "createpolicy"): a 64-bit policy value
// made at run time. evict_last keeps data that other CTAs will read again (a GEMM operand tile
// shared along M or N); evict_first streams data read once.
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

// tma_load_2d with an L2 cache hint (PTX cp.async.bulk.tensor, .level::cache_hint = .L2::cache_hint;
// the policy is the last operand). A hint only: results are the same with or without it.
__device__ __forceinline__ void tma_load_2d_hint(void* smem_dst, const CUtensorMap* map,
                                                 uint64_t* bar, int c0, int c1, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%2, %3}], [%4], %5;"
      :: "r"(smem_u32(smem_dst)), "l"(tmap_ptr(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)),
         "l"(policy)
      : "memory");
}

// ---- cluster forms (launch with a cluster; PTX cp.async.bulk.tensor, .multicast::cluster and
// .cta_group::2; CUTLASS include/cute/arch/copy_sm90_tma.hpp and copy_sm100_tma.hpp) ----------
// Multicast: ONE thread in ONE CTA issues it; the box lands at the same smem offset in every CTA
// whose bit is set in cta_mask (bit i = %cluster_ctarank i) and each of those CTAs' barrier at
// the same offset receives complete_tx for the bytes IT received. So every receiving CTA must
// arm its own barrier with expect_tx for the full box, and must not reuse the stage until all
// consumers in all receiving CTAs released it (e.g. tcgen05_commit_multicast to the issuer).
// Typical split: a cluster of 2 along N shares the A tile: each CTA loads half of A's rows and
// multicasts to both, so each CTA's full barrier expects the whole A tile + its own B tile.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map,
                                                      uint64_t* bar, int c0, int c1,
                                                      uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
      :: "r"(smem_u32(smem_dst)), "l"(tmap_ptr(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)),
         "h"(cta_mask)
      : "memory");
}

// CTA-pair load (sm_100a only: ptxas rejects .cta_group on sm_90a; kernels whose tcgen05 ops are cta_group::2). Each CTA of the pair
// loads ITS half into its own smem, but the completion goes to the barrier of the EVEN CTA of
// the pair: the barrier's shared::cluster address with bit 24 cleared (& 0xFEFFFFFF, CUTLASS
// Sm100MmaPeerBitMask) -- applied here. So the even CTA's expect_tx counts the bytes of BOTH
// CTAs (CUTLASS sm100_mma_warpspecialized.hpp TmaTransactionBytes = pair size x per-CTA bytes),
// and only the even CTA's MMA thread waits on it.
__device__ __forceinline__ void tma_load_2d_pair(void* smem_dst, const CUtensorMap* map,
                                                 uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.tile"
      ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      :: "r"(smem_u32(smem_dst)), "l"(tmap_ptr(map)), "r"(c0), "r"(c1),
         "r"(smem_u32(bar) & 0xFEFFFFFFu)
      : "memory");
}

// Shared -> global, one box. Before issuing: every thread that wrote the smem
// tile runs fence_proxy_async_smem(), then a block/named barrier, then ONE thread
// issues the store, commits the bulk group and waits on it before the smem tile
// is overwritten (wait_read) or before the kernel relies on global visibility.
// Out-of-range parts of the box are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src,
                                             int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
      :: "l"(tmap_ptr(map)), "r"(c0), "r"(c1), "r"(smem_u32(smem_src))
      : "memory");
}

// Shared -> global reduction, one box: global[box] += smem tile (element-wise, in the L2; PTX
// "cp.reduce.async.bulk.tensor", .redOp = .add / .min / .max / .inc / .dec / .and / .or / .xor;
// .add on bf16 / f16 / f32 among others). Same proxy fence, barrier, commit and wait rules as
// tma_store_2d; the additions of different CTAs to the same element are atomic, in no fixed
// order (so fp32 sums are not bit-reproducible run to run). Use: split-K GEMM partial sums,
// attention-backward dQ accumulation.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, const void* smem_src,
                                                  int c0, int c1) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
      :: "l"(tmap_ptr(map)), "r"(c0), "r"(c1), "r"(smem_u32(smem_src))
      : "memory");
}

// Close the current group of bulk stores issued by this thread.
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Wait until at most N committed groups are still READING their smem source
// (the smem may then be reused; global writes may still be in flight).
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// Wait until at most N committed groups are incomplete (writes performed).
template <int N>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

}  // namespace xl
