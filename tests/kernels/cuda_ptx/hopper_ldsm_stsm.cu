// Template test (sm_90a): ldmatrix x4 (+trans) and stmatrix x4 (+trans) round trip
// through shared memory. Expected SASS: LDSM, STSM.
#include <cstdint>
#include "ldsm_stsm.cuh"

__global__ void ldsm_stsm_probe(const uint16_t* in, uint16_t* out) {
  __shared__ alignas(128) uint16_t src[16 * 16];
  __shared__ alignas(128) uint16_t dst[16 * 16];
  const int lane = threadIdx.x & 31;
  for (int i = lane; i < 256; i += 32) src[i] = in[i];
  __syncwarp();
  // lanes 0-15 address rows 0-15 at column 0, lanes 16-31 the same rows at column 8
  const int row = lane & 15, col = (lane >> 4) * 8;
  uint32_t r[4], rt[4];
  xl::ldmatrix_x4(r, &src[row * 16 + col]);
  xl::ldmatrix_x4_trans(rt, &src[row * 16 + col]);
  xl::stmatrix_x4(&dst[row * 16 + col], r);
  __syncwarp();
  for (int i = lane; i < 256; i += 32) out[i] = dst[i];
  __syncwarp();
  xl::stmatrix_x4_trans(&dst[row * 16 + col], rt);
  __syncwarp();
  for (int i = lane; i < 256; i += 32) out[256 + i] = dst[i];
}
