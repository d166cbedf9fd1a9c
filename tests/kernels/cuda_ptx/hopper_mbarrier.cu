// Template test (sm_90a): mbarrier init / fence_init / arrive / arrive_expect_tx /
// expect_tx / try_wait.parity, used as a two-phase producer/consumer handshake.
// Expected SASS: SYNCS.EXCH.64 (init), SYNCS.ARRIVE.TRANS64*, SYNCS.PHASECHK.TRANS64.TRYWAIT.
#include "mbarrier.cuh"

__global__ void mbarrier_probe(int* out) {
  __shared__ alignas(8) uint64_t full;
  __shared__ alignas(8) uint64_t empty;
  __shared__ int slot;
  if (threadIdx.x == 0) {
    xl::mbar_init(&full, 1);
    xl::mbar_init(&empty, blockDim.x - 32);
    xl::mbar_fence_init();
  }
  __syncthreads();
  const bool producer = threadIdx.x < 32;
  int acc = 0;
  for (int it = 0; it < 4; ++it) {
    const uint32_t parity = it & 1;
    if (producer) {
      if (threadIdx.x == 0) {
        if (it > 0) xl::mbar_wait(&empty, parity ^ 1);  // consumers freed the slot
        slot = it * 7;
        // zero-byte transaction count exercises expect_tx; arrive completes the phase
        xl::mbar_expect_tx(&full, 0);
        xl::mbar_arrive(&full);
      }
    } else {
      xl::mbar_wait(&full, parity);
      acc += slot;
      xl::mbar_arrive(&empty);
    }
  }
  if (threadIdx.x == 0) {
    xl::mbar_wait(&empty, 1);
    // tx-count form on a fresh phase of `full` (no bytes pending: completes at once)
    xl::mbar_arrive_expect_tx(&full, 0);
    while (!xl::mbar_try_wait(&full, 0)) {
    }
    xl::mbar_inval(&full);
  }
  out[threadIdx.x] = acc;
}
