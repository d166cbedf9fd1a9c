// xlang arch_docs, Hopper: per-warpgroup register reallocation.
// PTX ISA "setmaxnreg" (PTX 8.0, sm_90a). SASS: USETMAXREG.
// R must be a multiple of 8 in [24, 256]. Every warp of the warpgroup executes the
// same call (.sync.aligned). inc blocks until enough registers were released by
// other warpgroups' dec. Typical split with 3 warpgroups (384 threads) at
// 168 regs/thread budget: producer dec<40>, two consumers inc<232>.
#pragma once

namespace xl {

template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: 24..256, multiple of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R));
}

template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: 24..256, multiple of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R));
}

}  // namespace xl
