// xlang arch_docs: proxy fences (PTX ISA "membar / fence", proxy kinds).
// SASS: FENCE.VIEW.ASYNC.S for the shared::cta form.
#pragma once

namespace xl {

// Order this thread's generic-proxy accesses to shared memory against later
// async-proxy accesses (TMA store reading smem, wgmma/tcgen05 reading smem), and
// earlier async-proxy writes against later generic accesses. Pair it with a
// thread barrier when other threads produced the data.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Same, for all state spaces (global included).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async;" ::: "memory");
}

}  // namespace xl
