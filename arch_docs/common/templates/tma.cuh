// xlang arch_docs: TMA (tensor memory accelerator) device wrappers.
// PTX ISA: "cp.async.bulk.tensor", "cp.async.bulk.commit_group",
// "cp.async.bulk.wait_group", "prefetch.tensormap". sm_90+.
// SASS family: UTMALDG.2D / UTMALDG.3D (loads), UTMASTG.2D (store),
// UTMACMDFLUSH / DEPBAR for the bulk-group commit / wait, UTMAPF (prefetch).
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

// Hint the descriptor into cache (optional; one thread).
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
