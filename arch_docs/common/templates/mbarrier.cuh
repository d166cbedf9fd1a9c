// xlang arch_docs: mbarrier wrappers (PTX ISA section "Parallel Synchronization and
// Communication Instructions: mbarrier"). sm_90+ for the expect_tx / try_wait forms.
// SASS family: SYNCS.EXCH.64 (init), SYNCS.ARRIVE.TRANS64* (arrive / expect_tx),
// SYNCS.PHASECHK.TRANS64.TRYWAIT (try_wait).
// The barrier is one 8-byte word in __shared__ memory, 8-byte aligned.
#pragma once
#include <cstdint>
#include "ptx_common.cuh"

namespace xl {

// Set the expected arrival count for every phase. One thread only, before any use.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(arrivals) : "memory");
}

// Make initialised barriers visible to other threads / the async proxy (TMA,
// tcgen05.commit). Issue after the init(s), then synchronise the block.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Return the barrier word to an un-initialised state (before reusing the memory).
__device__ __forceinline__ void mbar_inval(uint64_t* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" :: "r"(smem_u32(bar)) : "memory");
}

// One arrival (release semantics at CTA scope by default). Returns the opaque
// phase token, which callers usually ignore.
__device__ __forceinline__ uint64_t mbar_arrive(uint64_t* bar) {
  uint64_t token;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];"
               : "=l"(token) : "r"(smem_u32(bar)) : "memory");
  return token;
}

// One arrival AND raise the pending transaction count of the current phase by
// `bytes`. The phase can only complete when arrivals reach the init count and the
// async copies have delivered exactly `bytes` bytes (complete_tx).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// Raise the pending transaction count without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
               :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// Non-blocking-ish test: true once the phase with the given parity (0 or 1) has
// completed. The hardware may suspend the thread for a while before answering.
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred P1;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, P1;\n\t}"
      : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0;
}

// Spin until the phase with `parity` has completed. Phase k of a barrier has
// parity k & 1; the first phase after init is parity 0.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---- cluster forms (multicast TMA, CTA pairs; PTX mbarrier, mapa, barrier.cluster) ----------
// Arrive on the barrier at the same smem offset in CTA `cta_rank` of this cluster (e.g. a
// consumer in CTA 1 freeing a stage that CTA 0's producer refills by multicast). Release at
// cluster scope, so this thread's earlier writes are visible to the remote waiter.
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, uint32_t cta_rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(bar)), "r"(cta_rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
}

// try_wait with acquire at CLUSTER scope: use it when the arrivals come from other CTAs of the
// cluster (remote arrives, multicast commits), so their writes are visible after the wait.
__device__ __forceinline__ bool mbar_try_wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred P1;\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, P1;\n\t}"
      : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
  return done != 0;
}

__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait_cluster(bar, parity)) {
  }
}

}  // namespace xl
