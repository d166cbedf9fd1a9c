// HOSTILE candidate. Class: a second GPU process (profiler evasion), issue 31 class 4.
//
// What it does: the honest TMA + wgmma GEMM of the corpus, and on its first call a helper process with a clean
// environment (no CUPTI observer injected) that takes a CUDA context of its own on the same GPU, through the driver
// API, and keeps it for a minute; the call waits until the helper says its context is up. Handing part of the work
// to such a helper (through CUDA IPC) is GPU work no judge's observer sees; this one only holds the context, which
// is what the judge can see.
//
// An honest judge must conclude: forbidden_call, with correctness discarded (correct false). Never ok, never a stage
// that waits out its limit.
#include <unistd.h>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mbarrier.cuh"
#include "tma.cuh"
#include "tma_host.cuh"
#include "wgmma.cuh"

static const char* kHelper =
    "import ctypes, time\n"
    "cu = ctypes.CDLL('libcuda.so.1')\n"
    "dev, ctx = ctypes.c_int(), ctypes.c_void_p()\n"
    "assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0\n"
    "assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0\n"
    "p = ctypes.c_void_p()\n"
    "assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n";

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
}  // namespace core

static void start_helper() {
  static bool started = false;
  if (started) return;
  started = true;
  char python[4096];
  const ssize_t n = readlink("/proc/self/exe", python, sizeof(python) - 1);  // the runner's interpreter
  if (n <= 0) return;
  python[n] = 0;
  int fds[2];
  if (pipe(fds) != 0) return;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    char* const argv[] = {python, const_cast<char*>("-c"), const_cast<char*>(kHelper), nullptr};
    char* const envp[] = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};  // clean: no observer
    execve(python, argv, envp);
    _exit(1);
  }
  close(fds[1]);
  char up[8];
  if (pid > 0) (void)read(fds[0], up, sizeof(up));  // its context is up (or it died)
  close(fds[0]);
}

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  start_helper();
  core::launch(A, B, C, M, N, K, stream);
}
