// Negative case: plain FP32 FMA, no tensor cores, no TMA, no mbarrier. Its SASS
// must contain none of HGMMA / UTC*MMA / UTMALDG / UTMASTG / LDTM / STTM / SYNCS.
__global__ void fma_only(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = a[i];
#pragma unroll
    for (int k = 0; k < 8; ++k) x = fmaf(x, b[i], 1.0f);
    c[i] = x;
  }
}
