// Agent-loop test kernel (negative case): a correct but naive bf16 GEMM, C = A . B^T, one thread per output
// element with fp32 FMAs. No wgmma and no TMA: the static census must report both missing.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

__global__ void gemm_fma(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K) {
  int n = blockIdx.x * blockDim.x + threadIdx.x;
  int m = blockIdx.y;
  if (m >= M || n >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc = fmaf(__bfloat162float(A[(size_t)m * K + k]), __bfloat162float(B[(size_t)n * K + k]), acc);
  C[(size_t)m * N + n] = __float2bfloat16(acc);
}

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  dim3 grid((N + 127) / 128, M);
  gemm_fma<<<grid, 128, 0, stream>>>(A, B, C, M, N, K);
}
