// xlang arch_docs: small helpers shared by the other wrappers.
// Shared by Hopper (sm_90a) and Blackwell (sm_100a): ptx_common.cuh, mbarrier.cuh,
// fence.cuh, tma.cuh and tma_host.cuh live once, in arch_docs/common/templates, which is on
// the include path of both architectures' builds.
// Build: nvcc -gencode=arch=compute_90a,code=sm_90a -I arch_docs/h100/templates -I arch_docs/common/templates ...
//    or: nvcc -gencode=arch=compute_100a,code=sm_100a -I arch_docs/b200/templates -I arch_docs/common/templates ...
#pragma once
#include <cstdint>

namespace xl {

// 32-bit shared-window address of a pointer into __shared__ memory. Every PTX
// instruction below that names a shared-memory operand takes this form ("r").
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Thread index inside its warp / warpgroup (a warpgroup is 4 consecutive warps,
// whose first warp index is a multiple of 4).
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
__device__ __forceinline__ int warp_id() { return threadIdx.x >> 5; }
__device__ __forceinline__ int warpgroup_id() { return threadIdx.x >> 7; }

// elect.sync (PTX ISA 8.0, sm_90+): exactly one active lane of the warp gets
// true. All 32 lanes must execute it (membermask = full warp).
__device__ __forceinline__ bool elect_one_sync() {
  uint32_t chosen = 0;
  asm volatile(
      "{\n\t.reg .pred P1;\n\t.reg .b32 LEADER;\n\t"
      "elect.sync LEADER|P1, 0xffffffff;\n\t"
      "selp.u32 %0, 1, 0, P1;\n\t}"
      : "=r"(chosen));
  return chosen != 0;
}

// ---- clusters (sm_90+; PTX special registers %cluster_ctarank, barrier.cluster) -------------
// Rank of this CTA in its cluster (0 .. cluster size - 1). CTA pairs for cta_group::2 are ranks
// 2i and 2i+1; the multicast masks of TMA and tcgen05.commit use these ranks as bit numbers.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// All threads of all CTAs of the cluster. Use it after mbarrier init (so peers never arrive on
// an uninitialised barrier) and before exit (so no CTA leaves while a peer may still write its
// shared memory or barriers).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::: "memory");
}

}  // namespace xl
