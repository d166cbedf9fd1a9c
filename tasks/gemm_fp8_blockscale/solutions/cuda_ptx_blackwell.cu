// Expert Blackwell kernel (sm_100a) for the xlang `gemm_fp8_blockscale` task, DeepGEMM's 1d2d block scales:
//   C[m, n] = sum_k (A[m, k] * SA[m, k / 128]) * (B[n, k] * SB[n / 128, k / 128]),  C bf16, fp32 accumulation.
// A [M, K], B [N, K] fp8 e4m3 (K contiguous), SA [M, K/128], SB [ceil(N/128), K/128] fp32 row-major.
//
// STATUS: compiled for sm_100a and its SASS census checked (UTCQMMA = tcgen05_f8f6f4, UTMALDG); NEVER RUN: no
// Blackwell GPU exists in this workplace. Its tile / K-block loop, TMEM buffer choice, promotion and scale indexing
// are re-enacted on CPU by tasks/gemm_fp8_blockscale/verify/cuda_ptx_blackwell_model.py, which calls the xl_rule_*
// functions below (the same constexpr functions the kernel inlines). Unverified until a B200 run says so.
//
// Why kind::f8f6f4 and not a block-scaled kind: the 1d2d scales are fp32, one per 128 elements of K, not the 8-bit
// per-32 / per-16 scale factors the .block_scale kinds read from TMEM (arch_docs/b200/contracts.md section 14). So, as
// on Hopper (solutions/cuda_ptx_hopper.cu), every 128-wide K block gets a fresh fp32 partial from the tensor core and
// the CUDA cores add partial * SA[row, kb] * SB[n_block, kb] into a register accumulator (the "promotion").
//
// Design (the bf16 tcgen05 expert, tasks/gemm/solutions/cuda_ptx_blackwell.cu, with a promotion stage)
// ----------------------------------------------------------------------------------------------------
// * One CTA per 128 x 128 output tile (grouped tile order), K step 128 = one scale block = one 128-byte swizzled row
//   of e4m3; a ring of STAGES shared-memory slots (A box 16 KiB, B box 16 KiB). BN = 128 = the scale block of B, so
//   a tile reads one row of SB: SB[tn, kb].
// * 192 threads, roles by warp:
//     warp 4, lane 0: TMA producer of the A and B boxes (zero fill past M and N: no tail code in the main loop).
//     warp 5, lane 0: MMA issuer. Per K block kb: wait for the slot's "full" barrier and for TMEM buffer
//       p = kb % 2 to be "free" (promoted), then four tcgen05.mma.cta_group::1.kind::f8f6f4 (M 128, N 128, K 32,
//       e4m3 x e4m3 -> f32) into columns 128 p .. 128 p + 127, the first with enable-input-d = 0 (a fresh partial),
//       then tcgen05.commit to the slot's "empty" barrier and to buffer p's "ready" barrier.
//     warps 0-3 (128 threads, thread t = TMEM lane t = tile row t): promotion and epilogue. Per K block: wait for
//       buffer p's "ready", tcgen05.ld.32x32b.x32 four times (the row's 128 fp32 partials), then
//       acc[n] += partial[n] * (SA[row, kb] * SB[tn, kb]), then tcgen05.fence::before_thread_sync and an arrival on
//       buffer p's "free" barrier (count 128). Two buffers: the MMAs of K block kb + 1 run while kb is promoted.
//       The scales of K block kb are loaded before the wait (their latency hides behind it); rows past M use 0.
//       After the last K block: bf16, stores clipped at M and N (N % 16 == 0: an 8-column group is never split).
// * TMEM: warp 0 allocates 256 columns (two 128-column fp32 partials) and frees them at the end.
//
// Encodings (PTX ISA 9.7.16.4.1 Shared memory descriptor, 9.7.16.4.2 Instruction descriptor, kind::f8f6f4 row):
//   A / B smem descriptor: as the bf16 expert (128-byte swizzle, K-major, SBO 1024 B, version bit 46); a K step of
//     32 e4m3 elements is 32 bytes, +2 in the >>4 start field.
//   instruction descriptor: bits 4-5 D format (1 = f32); 7-9 A format, 10-12 B format (0 = E4M3 for kind::f8f6f4);
//     15/16 K-major (0); 17-22 N >> 3; 24-28 M >> 4; everything else 0 (dense, no saturation, no negation).
//
// Left for speed (none of it measured): a persistent grid with the epilogue of one tile overlapping the next tile's
// MMAs; BN = 256 (two SB rows per tile) or 2-CTA MMAs (cta_group::2) for more reuse of each A / B byte; TMA stores of C
// through shared memory; the promotion's 128 FMAs per row and K block are CUDA-core work the MMA of a 128-block
// (4 x 128x128x32) may not hide at large K, which is why DeepGEMM spreads it over more threads.
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace fp8bw {

constexpr int BM = 128, BN = 128, BK = 128, STAGES = 4, THREADS = 192;
constexpr int MMA_K = 32;                          // K of one tcgen05.mma kind::f8f6f4
constexpr int SCALE_BLOCK = 128;                   // the task's scale block (1 x 128 of A, 128 x 128 of B)
constexpr int A_BYTES = BM * BK;                   // 16 KiB (e4m3: one byte per element)
constexpr int B_BYTES = BN * BK;                   // 16 KiB
constexpr int BUFFERS = 2;                         // TMEM partials: MMAs of kb + 1 while kb is promoted
constexpr int TMEM_COLS = BUFFERS * BN;            // 256: a power of two, as tcgen05.alloc requires
constexpr int PRODUCER_WARP = 4, MMA_WARP = 5;     // warps 0-3: promotion + epilogue (TMEM lanes 32 w .. 32 w + 31)
constexpr int SMEM_BYTES = STAGES * (A_BYTES + B_BYTES) + 1024 + 256;

static_assert(BK == SCALE_BLOCK && BN == SCALE_BLOCK, "one K step = one scale block; one SB row per tile");

// ---------------------------------------------------------------- the rules (the CPU model calls these too)
// TMEM column (relative to the allocation) of the partial of K block kb.
__host__ __device__ constexpr uint32_t partial_column(int kb) { return static_cast<uint32_t>((kb % BUFFERS) * BN); }
// enable-input-d of MMA j (0..3) of a K block: only the first starts a fresh partial.
__host__ __device__ constexpr uint32_t accumulate_flag(int j) { return j > 0 ? 1u : 0u; }
// Shared-descriptor start-field offset of MMA j inside the K block's boxes (32 bytes per 32 e4m3 elements, >> 4).
__host__ __device__ constexpr uint64_t k_step_offset(int j) { return static_cast<uint64_t>((j * MMA_K) >> 4); }
// Element offsets into SA / SB (row-major, K/128 scales per row) of the scales of tile row `row` (absolute) and of
// tile column block tn, K block kb.
__host__ __device__ constexpr long long sa_index(int row, int kb, int kblocks) {
  return static_cast<long long>(row) * kblocks + kb;
}
__host__ __device__ constexpr long long sb_index(int tn, int kb, int kblocks) {
  return static_cast<long long>(tn * BN / SCALE_BLOCK) * kblocks + kb;
}
constexpr uint32_t IDESC = (1u << 4)                                   // D = f32
                           | (0u << 7) | (0u << 10)                    // A, B = E4M3
                           | (static_cast<uint32_t>(BN >> 3) << 17)    // N / 8
                           | (static_cast<uint32_t>(BM >> 4) << 24);   // M / 16

// ---------------------------------------------------------------- PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
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
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tmem_alloc(uint32_t* slot, uint32_t cols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(smem_addr(slot)),
               "r"(cols) : "memory");
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void tmem_free(uint32_t base, uint32_t cols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(base), "r"(cols) : "memory");
}
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

__device__ __forceinline__ uint64_t smem_desc_sw128(const void* tile) {
  return (static_cast<uint64_t>(smem_addr(tile) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 46)
         | (2ull << 61);
}
// D[tmem] (+)= A . B^T for one 32-wide K step of e4m3 operands, f32 accumulation; one thread issues it.
__device__ __forceinline__ void mma_f8(uint32_t d_tmem, uint64_t da, uint64_t db, uint32_t accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n}\n"
      ::"r"(d_tmem), "l"(da), "l"(db), "r"(IDESC), "r"(accumulate) : "memory");
}
__device__ __forceinline__ void mma_commit(uint64_t* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
               ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void tmem_load_32cols(uint32_t taddr, uint32_t (&v)[32]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
      : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7]),
        "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]), "=r"(v[15]),
        "=r"(v[16]), "=r"(v[17]), "=r"(v[18]), "=r"(v[19]), "=r"(v[20]), "=r"(v[21]), "=r"(v[22]), "=r"(v[23]),
        "=r"(v[24]), "=r"(v[25]), "=r"(v[26]), "=r"(v[27]), "=r"(v[28]), "=r"(v[29]), "=r"(v[30]), "=r"(v[31])
      : "r"(taddr)
      : "memory");
  asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------- the kernel
__global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_1d2d_tcgen05(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const float* __restrict__ SA, const float* __restrict__ SB, __nv_bfloat16* __restrict__ C,
                      int M, int N, int K, int group_m) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* slot_a = smem;
  uint8_t* slot_b = smem + STAGES * A_BYTES;
  uint64_t* full = reinterpret_cast<uint64_t*>(slot_b + STAGES * B_BYTES);
  uint64_t* empty = full + STAGES;
  uint64_t* ready = empty + STAGES;     // [BUFFERS]: the partial in TMEM buffer p is complete
  uint64_t* freed = ready + BUFFERS;    // [BUFFERS]: the promotion threads have read buffer p
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(freed + BUFFERS);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int per_group = group_m * tiles_n;
  const int g = blockIdx.x / per_group, first_m = g * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int r = blockIdx.x - g * per_group;
  const int tm = first_m + r % rows, tn = r / rows;
  const int kblocks = K / BK;   // K % 128 == 0 (task contract)

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);   // producer's arrive.expect_tx (+ the TMA bytes)
      mbar_init(&empty[s], 1);  // one tcgen05.commit
    }
    for (int p = 0; p < BUFFERS; ++p) {
      mbar_init(&ready[p], 1);        // one tcgen05.commit
      mbar_init(&freed[p], BM);       // the 128 promotion threads
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (warp == 0) tmem_alloc(tmem_slot, TMEM_COLS);
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem = *tmem_slot;

  if (warp == PRODUCER_WARP && lane == 0) {
    // ---------------- TMA producer
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES;
      mbar_wait(&empty[s], ((kb / STAGES) & 1) ^ 1);
      mbar_arrive_expect_tx(&full[s], A_BYTES + B_BYTES);
      tma_load_2d(slot_a + s * A_BYTES, &map_a, &full[s], kb * BK, tm * BM);
      tma_load_2d(slot_b + s * B_BYTES, &map_b, &full[s], kb * BK, tn * BN);
    }
  } else if (warp == MMA_WARP && lane == 0) {
    // ---------------- MMA issuer
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % STAGES, p = kb % BUFFERS;
      mbar_wait(&freed[p], ((kb / BUFFERS) & 1) ^ 1);   // buffer p promoted (K block kb - 2)
      mbar_wait(&full[s], (kb / STAGES) & 1);
      tc_fence_after();
      const uint64_t da = smem_desc_sw128(slot_a + s * A_BYTES);
      const uint64_t db = smem_desc_sw128(slot_b + s * B_BYTES);
#pragma unroll
      for (int j = 0; j < BK / MMA_K; ++j)
        mma_f8(tmem + partial_column(kb), da + k_step_offset(j), db + k_step_offset(j), accumulate_flag(j));
      mma_commit(&empty[s]);   // the slot is free once these MMAs have read it
      mma_commit(&ready[p]);   // ... and the partial is complete
    }
  } else if (warp < 4) {
    // ---------------- promotion and epilogue: thread t holds tile row t (TMEM lane t)
    const int row = tm * BM + threadIdx.x;
    const uint32_t lane_base = tmem + (static_cast<uint32_t>(warp * 32) << 16);
    float acc[BN];
#pragma unroll
    for (int n = 0; n < BN; ++n) acc[n] = 0.f;
#pragma unroll 1
    for (int kb = 0; kb < kblocks; ++kb) {
      const int p = kb % BUFFERS;
      const float scale = (row < M ? __ldg(SA + sa_index(row, kb, kblocks)) : 0.f)
                          * __ldg(SB + sb_index(tn, kb, kblocks));
      mbar_wait(&ready[p], (kb / BUFFERS) & 1);
      __syncwarp();
      tc_fence_after();
#pragma unroll
      for (int cb = 0; cb < BN / 32; ++cb) {
        uint32_t v[32];
        tmem_load_32cols(lane_base + partial_column(kb) + cb * 32, v);
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[cb * 32 + i] = fmaf(__uint_as_float(v[i]), scale, acc[cb * 32 + i]);
      }
      tc_fence_before();
      mbar_arrive(&freed[p]);
    }
    if (row < M) {
      uint4* dst = reinterpret_cast<uint4*>(C + static_cast<size_t>(row) * N + tn * BN);
#pragma unroll
      for (int q = 0; q < BN / 8; ++q) {
        if (tn * BN + 8 * q < N) {   // N % 16 == 0: an 8-column group is never split
          dst[q] = make_uint4(pack_bf16(acc[8 * q + 0], acc[8 * q + 1]), pack_bf16(acc[8 * q + 2], acc[8 * q + 3]),
                              pack_bf16(acc[8 * q + 4], acc[8 * q + 5]), pack_bf16(acc[8 * q + 6], acc[8 * q + 7]));
        }
      }
    }
  }

  tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    tc_fence_after();
    tmem_free(tmem, TMEM_COLS);
  }
}

// ---------------------------------------------------------------- host side
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static EncodeTiled encode_fn() {
  static EncodeTiled fn = nullptr;
  if (!fn) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
            cudaSuccess && q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}

// Row-major [rows, K] e4m3 bytes; box = 128 rows x 128 bytes, 128-byte swizzle, zero fill past the matrix.
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

}  // namespace fp8bw

// The rules, exported for the CPU model (tasks/gemm_fp8_blockscale/verify/cuda_ptx_blackwell_model.py); the kernel
// never calls these, it inlines the same constexpr functions.
extern "C" uint32_t xl_rule_partial_column(int kb) { return fp8bw::partial_column(kb); }
extern "C" uint32_t xl_rule_accumulate_flag(int j) { return fp8bw::accumulate_flag(j); }
extern "C" uint64_t xl_rule_k_step_offset(int j) { return fp8bw::k_step_offset(j); }
extern "C" long long xl_rule_sa_index(int row, int kb, int kblocks) { return fp8bw::sa_index(row, kb, kblocks); }
extern "C" long long xl_rule_sb_index(int tn, int kb, int kblocks) { return fp8bw::sb_index(tn, kb, kblocks); }
extern "C" uint32_t xl_rule_idesc() { return fp8bw::IDESC; }
// 0 BM, 1 BN, 2 BK, 3 STAGES, 4 MMA_K, 5 BUFFERS, 6 TMEM_COLS
extern "C" int xl_rule_const(int which) {
  const int v[] = {fp8bw::BM, fp8bw::BN, fp8bw::BK, fp8bw::STAGES, fp8bw::MMA_K, fp8bw::BUFFERS, fp8bw::TMEM_COLS};
  return which >= 0 && which < 7 ? v[which] : -1;
}

extern "C" void xlang_entry(const __nv_fp8_e4m3* A, const float* SA, const __nv_fp8_e4m3* B, const float* SB,
                            __nv_bfloat16* C, int M, int N, int K, cudaStream_t stream) {
  using namespace fp8bw;
  CUtensorMap ma, mb;
  if (!make_map(&ma, A, M, K) || !make_map(&mb, B, N, K)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(gemm_fp8_1d2d_tcgen05, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    configured = true;
  }
  const int tiles = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  gemm_fp8_1d2d_tcgen05<<<tiles, THREADS, SMEM_BYTES, stream>>>(ma, mb, SA, SB, C, M, N, K, 8);
}
