// Template test (sm_90a): setmaxnreg dec in the producer warpgroup, inc in the
// two consumer warpgroups (384 threads). Expected SASS: USETMAXREG.
#include "setmaxnreg.cuh"
#include "ptx_common.cuh"

__global__ void __launch_bounds__(384, 1) setmaxnreg_probe(const float* in, float* out) {
  const int wg = xl::warpgroup_id();
  if (wg == 0) {
    xl::setmaxnreg_dec<40>();
    out[threadIdx.x] = in[threadIdx.x];
  } else {
    xl::setmaxnreg_inc<232>();
    float v = in[threadIdx.x];
#pragma unroll
    for (int i = 0; i < 16; ++i) v = fmaf(v, 1.0001f, 0.5f);
    out[threadIdx.x] = v;
  }
}
