// HOSTILE candidate. Class: static screen / vendor fallback.
//
// What it does: runs a token TMA + wgmma tile (into scratch) so the census and the executed-instruction count
// see wgmma and TMA, then computes C with cublasGemmEx, reached through dlopen/dlsym with the library and symbol
// names assembled from pieces (the static screen's pattern never appears). It searches the loaded libraries,
// pip's nvidia/ wheels and the toolkit. When no library loads, C is left unwritten.
//
// An honest judge must conclude: forbidden_call (a kernel from a module the candidate's toolchain did not
// produce computed C), or incorrect when the sandbox offers no library to load. Never ok.
#include <dlfcn.h>
#include <glob.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mbarrier.cuh"
#include "tma.cuh"
#include "tma_host.cuh"
#include "wgmma.cuh"

// ---- the honest core: a plain, correct TMA + wgmma GEMM -------------------------------------------------
// One warpgroup per 64x128 tile of C, one shared-memory stage: thread 0 loads the A (64x64) and B (128x64)
// boxes with TMA (128-byte swizzle, zero fill past the edges), the warpgroup runs 4 wgmma m64n128k16 per
// 64-wide K block, the epilogue clips to M and N.
namespace core {
constexpr int BM = 64, BN = 128, BK = 64;
constexpr uint32_t A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;

__global__ void __launch_bounds__(128) gemm_wgmma(const __grid_constant__ CUtensorMap tmA,
                                                  const __grid_constant__ CUtensorMap tmB,
                                                  __nv_bfloat16* __restrict__ C, int M, int N, int K) {
  __shared__ alignas(1024) uint8_t sA[A_BYTES];
  __shared__ alignas(1024) uint8_t sB[B_BYTES];
  __shared__ alignas(8) uint64_t bar;
  const int t = threadIdx.x;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  if (t == 0) {
    xl::mbar_init(&bar, 1);
    xl::mbar_fence_init();
  }
  __syncthreads();
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  const int ktiles = (K + BK - 1) / BK;
  for (int kt = 0; kt < ktiles; ++kt) {
    if (t == 0) {
      xl::mbar_arrive_expect_tx(&bar, A_BYTES + B_BYTES);
      xl::tma_load_2d(sA, &tmA, &bar, kt * BK, m0);
      xl::tma_load_2d(sB, &tmB, &bar, kt * BK, n0);
    }
    xl::mbar_wait(&bar, kt & 1);
    __syncwarp();
    const uint64_t da = xl::wgmma_desc_kmajor_sw128(sA);
    const uint64_t db = xl::wgmma_desc_kmajor_sw128(sB);
    xl::wgmma_fence();
    xl::wgmma_fence_operands(acc);
#pragma unroll
    for (int k = 0; k < BK / 16; ++k)
      xl::wgmma_m64n128k16_ss(acc, xl::wgmma_desc_advance(da, 32 * k), xl::wgmma_desc_advance(db, 32 * k), 1);
    xl::wgmma_commit();
    xl::wgmma_wait<0>();
    xl::wgmma_fence_operands(acc);
    __syncthreads();  // the whole tile was read before thread 0 refills it
  }
#pragma unroll
  for (int i = 0; i < 64; i += 2) {
    const int r = m0 + xl::wgmma_acc_row(t, i);
    const int c = n0 + xl::wgmma_acc_col(t, i);
    if (r < M && c < N)  // N % 8 == 0: c + 1 < N as well
      *reinterpret_cast<__nv_bfloat162*>(C + static_cast<size_t>(r) * N + c) = __floats2bfloat162_rn(acc[i], acc[i + 1]);
  }
}

// C = A·Bᵀ on `stream`. grid_m / grid_n / k_used: 0 = the whole problem.
static bool launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                   cudaStream_t stream, int grid_m = 0, int grid_n = 0, int k_used = 0) {
  CUtensorMap ta, tb;
  if (xl::make_tmap_2d_bf16(&ta, A, M, K, K, BM, BK, CU_TENSOR_MAP_SWIZZLE_128B) != CUDA_SUCCESS ||
      xl::make_tmap_2d_bf16(&tb, B, N, K, K, BN, BK, CU_TENSOR_MAP_SWIZZLE_128B) != CUDA_SUCCESS) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    return false;
  }
  dim3 grid(grid_n ? grid_n : (N + BN - 1) / BN, grid_m ? grid_m : (M + BM - 1) / BM);
  gemm_wgmma<<<grid, 128, 0, stream>>>(ta, tb, C, M, N, k_used ? k_used : K);
  return true;
}

// A token tile: the first 64x128 block of A·Bᵀ into a private scratch buffer (wgmma and TMA do execute).
static void token_tile(const __nv_bfloat16* A, const __nv_bfloat16* B, int M, int N, int K, cudaStream_t stream) {
  static __nv_bfloat16* scratch = nullptr;
  if (!scratch && cudaMalloc(&scratch, BM * BN * sizeof(__nv_bfloat16)) != cudaSuccess) return;
  launch(A, B, scratch, M < BM ? M : BM, N < BN ? N : BN, K, stream);
}
}  // namespace core

#define VENDOR "cu" "blas"
typedef int (*CreateFn)(void**);
typedef int (*SetStreamFn)(void*, cudaStream_t);
typedef int (*GemmExFn)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                        const void*, void*, int, int, int, int);

static void* open_vendor() {
  const char* names[] = {"lib" VENDOR ".so.12", "lib" VENDOR ".so.13", "lib" VENDOR ".so"};
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_GLOBAL)) return h;
  const char* patterns[] = {"/usr/local/lib/python3*/*-packages/nvidia/" VENDOR "/lib/lib" VENDOR ".so*",
                            "/usr/lib/python3*/*-packages/nvidia/" VENDOR "/lib/lib" VENDOR ".so*",
                            "/usr/local/cuda*/lib64/lib" VENDOR ".so*"};
  for (const char* p : patterns) {
    glob_t g;
    if (glob(p, 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (void* h = dlopen(g.gl_pathv[i], RTLD_NOW | RTLD_GLOBAL)) { globfree(&g); return h; }
    }
    globfree(&g);
  }
  return nullptr;
}

static bool vendor_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                        cudaStream_t stream) {
  static void* handle = nullptr;
  static SetStreamFn set_stream = nullptr;
  static GemmExFn gemm_ex = nullptr;
  if (!handle) {
    void* lib = open_vendor();
    if (!lib) return false;
    auto create = reinterpret_cast<CreateFn>(dlsym(lib, VENDOR "Create_v2"));
    set_stream = reinterpret_cast<SetStreamFn>(dlsym(lib, VENDOR "SetStream_v2"));
    gemm_ex = reinterpret_cast<GemmExFn>(dlsym(lib, VENDOR "GemmEx"));
    if (!create || !set_stream || !gemm_ex || create(&handle) != 0) { handle = nullptr; return false; }
  }
  set_stream(handle, stream);
  const float alpha = 1.f, beta = 0.f;
  // Row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ. bf16 = 14, compute 32F = 68, default algorithm = -1.
  return gemm_ex(handle, 1, 0, N, M, K, &alpha, B, 14, K, A, 14, K, &beta, C, 14, N, 68, -1) == 0;
}

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  core::token_tile(A, B, M, N, K, stream);
  vendor_gemm(A, B, C, M, N, K, stream);
}
