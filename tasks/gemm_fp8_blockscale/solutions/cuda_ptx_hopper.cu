// Expert Hopper kernel (sm_90a) for the xlang `gemm_fp8_blockscale` task, DeepGEMM's 1d2d block scales:
//   C[m, n] = sum_k (A[m, k] * SA[m, k / 128]) * (B[n, k] * SB[n / 128, k / 128]),  C bf16, fp32 accumulation.
// A [M, K], B [N, K] fp8 e4m3 (K contiguous), SA [M, K/128], SB [ceil(N/128), K/128] fp32 row-major.
//
// NEVER RUN ON A GPU (no device this session): it builds for sm_90a and its SASS has QGMMA and UTMALDG
// (tests/test_fp8_experts.py); run-time correctness, memcheck and speed are unmeasured.
//
// Design, top-down
// ----------------
// * One CTA per 128 x 128 output tile (a persistent grid with FP8GEMM_PERSISTENT, below), grouped order (GROUP_M
//   row tiles per column band).
// * K steps of 128 = one scale block; 128 fp8 = 128 bytes, one 128-byte-swizzled row, so the shared tiles and the
//   wgmma descriptors are laid out exactly as the bf16 GEMM's 64-wide K steps (tasks/gemm/solutions).
// * Three warpgroups: WG0 is the producer (one thread issues the TMA loads of A and B boxes, 128 rows x 128 bytes,
//   into a ring of STAGES slots, each with a "full" mbarrier armed with the transaction bytes and an "empty" one the
//   consumers release); WG1 and WG2 each own 64 rows of the tile.
// * A consumer, per K block: four wgmma.m64n128k32.f32.e4m3.e4m3 (PTX ISA, wgmma.mma_async with .e4m3 operands;
//   both operands K-major in shared memory, the only layout fp8 wgmma takes) into a fresh fp32 partial sum, wait
//   for them, release the slot, then acc += partial * SA[row, kb] * SB[n_block, kb] on the CUDA cores. Promoting
//   every 128-long partial sum this way is what the scales need, and it bounds the run of the tensor core's own fp8
//   accumulation (DeepGEMM promotes at the same interval).
// * Tails: TMA zero-fills box parts outside [M or N) x [K); rows past M read SA as 0; the epilogue stores bf16 pairs
//   straight from registers, clipped to row < M and col < N (N % 16 == 0: a pair never straddles the edge).
//
// Compile-time switch FP8GEMM_PERSISTENT (default 0: the kernel the H200 judged at 0.829x cuBLASLt, harness 7):
// 1 launches min(#tiles, #SMs) CTAs that walk the tiles in the same grouped order, the producer's ring running on
// across tiles, so the next tile's first TMA loads fly during this tile's last K blocks and epilogue instead of
// after a new CTA's start (one CTA per SM: 128 KiB of ring, 384 threads x 168 registers). FP8GEMM_SCALES_AHEAD
// (default: as FP8GEMM_PERSISTENT) loads each K block's scales one block ahead, before the wait for its operands
// (in the default ptxas hoists them only between the wgmmas of the same block: their L2 latency then overlaps
// three of its four wgmmas). FP8GEMM_STAGES sets the ring's depth (default 4; 6 x 32 KiB still fits the 227 KiB a
// block may use). benchmarks/fp8_blockscale_sweep.py on the H200 (2026-12-04, do_bench back to back, x cuBLASLt at
// 4096 x 4096 x 7168, each checked by the task's rule at four shapes whose M is 4096): persistent with 6 stages
// 0.735x, 5 stages 0.724x, persistent alone 0.718x, scales ahead alone 0.708x, this default 0.695x; geomean over it
// and three DeepSeek-V3 shapes 0.762x vs 0.702x. The defaults stay the judged kernel: no full verdict (drawn shapes
// with M tails, memcheck) has run the persistent variant; the device time ran out first.
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace fp8gemm {

constexpr int BM = 128, BN = 128, BK = 128;        // BK: the scale block, 128 fp8 = 128 bytes
#ifndef FP8GEMM_PERSISTENT
#define FP8GEMM_PERSISTENT 0
#endif
#ifndef FP8GEMM_STAGES
#define FP8GEMM_STAGES 4
#endif
#ifndef FP8GEMM_SCALES_AHEAD
#define FP8GEMM_SCALES_AHEAD FP8GEMM_PERSISTENT
#endif
constexpr bool PERSISTENT = FP8GEMM_PERSISTENT != 0;
constexpr bool SCALES_AHEAD = FP8GEMM_SCALES_AHEAD != 0;
constexpr int STAGES = FP8GEMM_STAGES;
constexpr int CONSUMERS = 2;                       // consumer warpgroups, 64 rows each
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int GROUP_M = 8;
constexpr int A_BYTES = BM * BK;                   // 16 KiB per slot
constexpr int B_BYTES = BN * BK;                   // 16 KiB per slot
constexpr int SMEM_BYTES = STAGES * (A_BYTES + B_BYTES) + 1024 /*alignment slack*/ + 2 * STAGES * 8;

// ---------------------------------------------------------------- PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// One arrival (this thread) plus `bytes` of TMA transactions complete the barrier's phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
// Block until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(a), "r"(parity) : "memory");
  } while (!done);
}
// 2-D TMA load of one box into shared memory, completing on `bar` (coordinates innermost first).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
template <int REGS> __device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }

// wgmma shared-memory descriptor of a K-major tile TMA wrote with the 128-byte swizzle (rows of 128 bytes):
// start address >> 4 (bits 0-13), leading byte offset 1 (unused by swizzled K-major layouts), stride byte offset
// 1024 B >> 4 = 64 (8 rows x 128 B, bits 32-45), layout 1 = 128-byte swizzle (bits 62-63). A k32 step of fp8 is 32
// bytes into the row: +2 in the start-address field.
__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
  return (static_cast<uint64_t>(smem_addr(tile) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// Keep the compiler from moving accumulator registers across the asynchronous wgmma.
__device__ __forceinline__ void fence_regs(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64x128, fp32, registers) (+)= A(64x32, e4m3, smem) * B(128x32, e4m3, smem)^T; accumulate == 0 overwrites D.
// Register i of lane l of warp w (in its warpgroup): row 16w + l/4 + 8*((i/2)%2), column 8*(i/4) + 2*(l%4) + (i%2)
// (PTX ISA, wgmma "Register Fragments", the m64nNk32 accumulator D: the same as for k16).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(accumulate));
}

// ---------------------------------------------------------------- the kernel
// Tile t in the grouped order: GROUP_M row tiles per column band, the row index fastest.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (t / per_group) * GROUP_M;
  const int rows_in_group = min(tiles_m - first_m, GROUP_M);
  tm = first_m + (t % per_group) % rows_in_group;
  tn = (t % per_group) / rows_in_group;
}

__global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_1d2d_wgmma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const float* __restrict__ SA, const float* __restrict__ SB, __nv_bfloat16* __restrict__ C,
                    int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles need a 1024-byte aligned shared-memory address.
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* slot_a = smem;
  uint8_t* slot_b = smem + STAGES * A_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + STAGES * (A_BYTES + B_BYTES));
  uint64_t* empty = full + STAGES;

  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int n_tiles = tiles_m * tiles_n;
  const int kblocks = K / BK;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&map_a);
    tma_prefetch_map(&map_b);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);               // the producer's arrive.expect_tx
      mbar_init(&empty[s], CONSUMERS * 4);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // The CTA's tiles: blockIdx.x alone (one tile per CTA), or every gridDim.x-th when PERSISTENT. `it` counts the
  // ring's uses over all of them, so slot and phase run on from one tile to the next.
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    // ---------------- producer
    regs_dec<40>();
    if (threadIdx.x == 0) {
      int it = 0;
      for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, tm, tn);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);  // first pass: a fresh barrier, returns at once
          mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);  // whole boxes, zero fill included
          tma_load_2d(slot_a + s * A_BYTES, &map_a, &full[s], kb * BK, tm * BM);
          tma_load_2d(slot_b + s * B_BYTES, &map_b, &full[s], kb * BK, tn * BN);
        }
      }
    }
    return;
  }

  // ---------------- consumers
  regs_inc<232>();
  const int c = wg - 1;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
  float acc[64], part[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) part[i] = 0.f;
  int it = 0;
  for (int t = blockIdx.x; t < n_tiles; t += gridDim.x) {
    int tm, tn;
    tile_coords(t, tiles_m, tiles_n, tm, tn);
    // This thread's two rows of the tile (accumulator registers i with (i/2)%2 == 0, and == 1).
    const int row0 = tm * BM + c * 64 + 16 * warp + lane / 4, row1 = row0 + 8;
    const float* sa0 = SA + static_cast<int64_t>(min(row0, M - 1)) * kblocks;
    const float* sa1 = SA + static_cast<int64_t>(min(row1, M - 1)) * kblocks;
    const float* sb = SB + static_cast<int64_t>(tn) * kblocks;  // BN == 128: one row block of SB per tile
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    // SCALES_AHEAD: block kb's scales, loaded during block kb - 1 (rows past M read row M - 1: A is zero there and
    // the epilogue never stores them).
    float next_a0 = 0.f, next_a1 = 0.f, next_b = 0.f;
    if (SCALES_AHEAD) next_a0 = sa0[0], next_a1 = sa1[0], next_b = sb[0];

    for (int kb = 0; kb < kblocks; ++kb, ++it) {
      float scale0 = 0.f, scale1 = 0.f;
      if (SCALES_AHEAD) {
        scale0 = next_a0 * next_b, scale1 = next_a1 * next_b;
        const int ahead = min(kb + 1, kblocks - 1);
        next_a0 = sa0[ahead], next_a1 = sa1[ahead], next_b = sb[ahead];
      }
      const int s = it % STAGES;
      mbar_wait(&full[s], (it / STAGES) & 1);
      const uint64_t da = smem_desc(slot_a + s * A_BYTES + c * 64 * BK);
      const uint64_t db = smem_desc(slot_b + s * B_BYTES);
      fence_regs(part);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BK / 32; ++k) wgmma_m64n128k32_e4m3(part, da + 2 * k, db + 2 * k, k > 0 ? 1 : 0);
      wgmma_commit();
      wgmma_wait_all();
      fence_regs(part);
      if (lane == 0) mbar_arrive(&empty[s]);  // this warp is done reading the slot
      if (!SCALES_AHEAD) {
        const float s_b = sb[kb];
        scale0 = (row0 < M ? sa0[kb] : 0.f) * s_b, scale1 = (row1 < M ? sa1[kb] : 0.f) * s_b;
      }
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] += part[i] * (((i / 2) % 2) ? scale1 : scale0);
    }

    // Epilogue: bf16 pairs from registers, clipped to the matrix (the stores need no wait: the next tile's
    // K blocks start behind them).
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
      const int row = ((i / 2) % 2) ? row1 : row0;
      const int col = tn * BN + 8 * (i / 4) + 2 * (lane % 4);
      if (row < M && col < N)
        *reinterpret_cast<__nv_bfloat162*>(C + static_cast<int64_t>(row) * N + col) =
            __floats2bfloat162_rn(acc[i], acc[i + 1]);
    }
  }
}

// ---------------------------------------------------------------- host side
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled through the runtime's driver entry point (libcuda is not linked).
static EncodeTiled encode_fn() {
  static EncodeTiled fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}

// Row-major [rows, K] fp8 matrix (bytes), boxes of 128 rows x 128 bytes, 128-byte swizzle, zero fill outside.
static bool make_map(CUtensorMap* map, const void* base, int rows, int K) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(K)};
  cuuint32_t box[2] = {BK, 128};
  cuuint32_t elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace fp8gemm

extern "C" void xlang_entry(const __nv_fp8_e4m3* A, const float* SA, const __nv_fp8_e4m3* B, const float* SB,
                            __nv_bfloat16* C, int M, int N, int K, cudaStream_t stream) {
  using namespace fp8gemm;
  CUtensorMap ma, mb;
  if (!make_map(&ma, A, M, K) || !make_map(&mb, B, N, K)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(gemm_fp8_1d2d_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    configured = true;
  }
  const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  static int sms = 0;  // PERSISTENT: one CTA per SM (the device of the first call)
  if (PERSISTENT && sms == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1) sms = 132;
  }
  const int grid = PERSISTENT ? min(tiles, sms) : tiles;
  gemm_fp8_1d2d_wgmma<<<grid, THREADS, SMEM_BYTES, stream>>>(ma, mb, SA, SB, C, M, N, K);
}
