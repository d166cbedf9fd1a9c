// Expert Hopper (sm_90a) attention backward for the xlang `attn_bwd` / `attn_bwd_causal` tasks.
// attn_bwd_causal uses this same file with XL_CAUSAL set to 1 (its Task.solution_variant).
//
// H200 figures (full verdicts of `xlang compare`, reports/h200-reference) and the history of this file are in
// tasks/attn_bwd/NOTES_cuda_ptx.md; CPU model: tasks/attn_bwd/verify/attn_bwd_cuda_ptx_fused_emulate.py.
// Instruction selection in the fused kernel (from a SASS comparison with tasks/attn_bwd/solutions/cutedsl_hopper.py,
// tasks/attn_bwd/drafts/README.md "v5"), each behind a switch below (all default 1; a copy with `#define XL_xxx 0`
// prepended A/B-tests one): SASS per 64-query step of the consumer main loop (nvcc 13.0, sm_90a) 582 -> 410 at
// D=128 (375 executed by a step without masking), 515 -> 382 at D=64; causal D=128 688 -> 479 (380).
//
//   P  = exp(scale Q K^T - LSE)   dV = P^T dO   dP = dO V^T   Delta = rowsum(dO * O)
//   dS = P * (dP - Delta)         dQ = scale dS K               dK = scale dS^T Q
// kv head = h / (H / HKV); dK, dV of a kv head sum its G = H / HKV query heads.
//
// Pipeline (FlashAttention-3's backward structure, own implementation): 5 matmuls per tile, not 7
// -------------------------------------------------------------------------------------------------
//  1. attn_bwd_prep_kernel: Delta = rowsum(dO * O) in fp32 (DP/8 threads per row, 16-byte loads) into
//     stream-ordered scratch, and the fp32 dQ accumulator scratch zeroed, in one pass.
//  2. attn_bwd_fused_kernel<DP, CAUSAL>: grid (ceil(S/128), B*HKV), 384 threads = 3 warpgroups.
//     * WG0 = producer (setmaxnreg.dec 24). Warp 0 loads K, V of the CTA's 128 keys once, then streams, for
//       step it = (query head it / per_head, 64-row query block m_lo + it % per_head), the Q and dO tiles
//       (TMA, lane 0) and the block's LSE*log2e / Delta (plain loads by the 32 lanes, 2 rows each) into a
//       ring of ST slots. Warps 1..3 of WG0 have nothing to do and exit.
//     * WG1, WG2 = consumers (setmaxnreg.inc 240), WG c owning keys n0 + 64c .. +63. Per step, in the
//       transposed orientation (keys = wgmma rows):
//         S^T = K_c Q^T, dP^T = V_c dO^T          (ss wgmma m64n64k16, K-major, 2 commit groups)
//         P^T = exp2(S^T scale log2e - LSE log2e), masked; dS^T = P^T (dP^T - Delta)      (fp32)
//         dS^T -> bf16 -> shared dS buffer it&1 ([128 keys][64 queries], 128B swizzle, 4 stmatrix.x4;
//         XL_STSM 0: 16 st.shared.b32)
//         dV += P^T dO, dK += dS^T Q              (rs wgmma m64n{DP}k16, B MN-major; group G1)
//         -- named barrier 1 (256 consumer threads): both halves of dS are in shared memory --
//         dQ_c = dS K[:, cols of c]               (ss wgmma m64n{DP/2}k16 over all 128 keys, A = dS MN-major
//                                                  (imm-trans-a), B = K MN-major (imm-trans-b); group G2)
//         wait G1 -> release the Q/dO/LSE/Delta slot (empty mbarrier, one arrive per warp)
//         wait G2 -> dQ_c (fp32, 64 x DP/2) -> shared staging in "thread order" (float4 v*128 + t)
//         -- named barrier 2+c (the 128 threads of WG c) -- one thread issues a bulk reduce-add
//         (cp.reduce.async.bulk .add.f32, 128*DP bytes) of the staging buffer into the fp32 dQ scratch,
//         whose layout is the same thread order per (head, query block, half): one contiguous block.
//     dK, dV stay in registers over all steps (GQA sum included) and are stored once (dK scaled).
//  3. attn_bwd_dq_convert_kernel: dQ = scale * scratch, un-permuted to [B, H, S, D] bf16 (float4 reads; quad
//     shuffles so that each lane stores 16 bytes).
//
// Barrier protocol (why it is race-free)
//  * full[s] (count 32: the 32 producer lanes; lane 0's arrival carries expect_tx of the Q + dO bytes) and
//    empty[s] (count 8: lane 0 of each consumer warp), s = it % ST, phase parity (it / ST) & 1. The producer
//    waits empty[s] with parity ((it / ST) & 1) ^ 1 (the fresh barrier's "previous" phase passes at once),
//    so it is at most ST steps ahead; LSE/Delta are published by the lanes' own arrivals (release) and read
//    by consumers after their full wait (acquire). A consumer warp arrives on empty[s] only after wgmma
//    G1 (the last reader of Q/dO of the slot) has completed and after its LSE/Delta reads.
//  * dS buffers: dS(it) is written by both WGs, fence.proxy.async (generic writes -> wgmma async-proxy
//    reads), then named barrier 1; only then is G2 issued. A WG writes dS(it+2) into the same buffer only
//    after barrier 1 of step it+1, which the other WG reaches only after waiting its G2 of step it: two
//    buffers plus one barrier per step suffice.
//  * dQ staging (one buffer per WG): written after G2 completes, fence.proxy.async, WG barrier, then the
//    bulk reduce. Its issuing thread waits cp.async.bulk.wait_group.read 0 before it enters barrier 1 of the
//    next step, and the other threads of the WG write the staging buffer again only after that barrier.
//    At the end it waits wait_group 0 before the CTA exits.
// Why bulk reduce-add and not red.global.add.f32 per element: per step a CTA adds 64 x DP fp32 (32 KiB at
// D = 128); as per-element (or v2) reds that is 4096 L2 atomic ops per step per CTA issued from the
// consumer warps (LSU issue + address registers in the hot loop) and L2 atomic-op throughput would bound
// the kernel; one bulk op per WG per step moves whole 128-byte lines through the TMA unit with no consumer
// work beyond 8 st.shared.v4 (FA3 makes the same choice). Both are order-nondeterministic in the last fp32
// bits (the key blocks of one query block arrive in any order); the sum is fp32 over <= G * S/128 terms,
// far inside atol = rtol = 1e-2 after the bf16 rounding of the output.
//
// Head dim: DP = 64 (D = 64) or 128 (D = 96, 128). Tiles are DP/64 chunks of 64 columns (one 128-byte swizzle
// row each, its own TMA box {64, rows, 1}); for D = 96 TMA zero-fills columns 96..127 (no effect on any dot
// product; those output columns are never stored). Tails: maps are 3-D [B*heads, S, D] so boxes past row S
// are zero-filled per head; query rows >= S get LSE = +inf (P = 0) and Delta = 0, so dS = 0 there; keys >= S
// are masked in the blocks that hold them. The dQ scratch covers ceil(S/64)*64 rows; the convert kernel
// and the dK/dV epilogue store only row < S, column < D.
// Causal (key j visible to query i iff j <= i): the CTA of keys [n0, n0+128) starts at query block n0/64;
// blocks straddling the diagonal apply the per-element mask; blockIdx.x = 0 (the most steps) starts first.
#ifndef XL_CAUSAL
#define XL_CAUSAL 0
#endif
// Instruction-selection switches (all default 1; prepend `#define XL_xxx 0` to a copy to A/B one of them):
#ifndef XL_UNIFORM_WG
#define XL_UNIFORM_WG 1     // warpgroup index through __shfl_sync: descriptors live in uniform registers
#endif
#ifndef XL_STEP_COUNTERS
#define XL_STEP_COUNTERS 1  // (head, block, slot, parity) of a step by counters, not it / per_head, it % ST
#endif
#ifndef XL_LDS64
#define XL_LDS64 1          // LSE2 / Delta pairs as 64-bit shared loads (16 LDS.64 instead of 32 LDS)
#endif
#ifndef XL_EARLY_LDS
#define XL_EARLY_LDS 1      // LSE2 read before the S^T wait, Delta before the dP^T wait (latency under wgmma)
#endif
#ifndef XL_MASK_BRANCH
#define XL_MASK_BRANCH 1    // exp2 loop, then the mask in a uniform branch: the dP^T wait stays after the exp2s
#endif
#ifndef XL_STSM
#define XL_STSM 1           // dS^T into shared memory by 4 stmatrix.x4 instead of 16 st.shared.b32
#endif

#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hbwd2 {

constexpr int THREADS = 384;          // WG0 producer, WG1 + WG2 consumers
constexpr int BN = 128;               // keys per CTA (64 per consumer warpgroup)
constexpr int BM = 64;                // query rows per step
constexpr float LOG2E = 1.4426950408889634f;

template <int DP>
struct Cfg {
  static constexpr int CH = DP / 64;
  static constexpr int ST = DP == 128 ? 2 : 3;           // Q/dO/LSE/Delta ring depth
  static constexpr int CHUNK_KEY = BN * 128;             // 16 KiB: one 64-column chunk of the K or V tile
  static constexpr int CHUNK_ROW = BM * 128;             // 8 KiB: one chunk of a Q or dO tile
  static constexpr int KEY_BYTES = CH * CHUNK_KEY;
  static constexpr int ROW_BYTES = CH * CHUNK_ROW;
  static constexpr int DS_BYTES = BN * BM * 2;           // 16 KiB: dS^T bf16 [128 keys][64 queries]
  static constexpr int DQ_HALF = 128 * (DP / 4) * 4;     // one WG's dQ staging: 64 rows x DP/2 fp32
  static constexpr int OFF_V = KEY_BYTES;
  static constexpr int OFF_Q = 2 * KEY_BYTES;
  static constexpr int OFF_DO = OFF_Q + ST * ROW_BYTES;
  static constexpr int OFF_DS = OFF_DO + ST * ROW_BYTES;
  static constexpr int OFF_DQ = OFF_DS + 2 * DS_BYTES;
  static constexpr int OFF_LSE = OFF_DQ + 2 * DQ_HALF;
  static constexpr int OFF_DELTA = OFF_LSE + ST * BM * 4;
  static constexpr int OFF_BAR = OFF_DELTA + ST * BM * 4;
  static constexpr int SMEM = OFF_BAR + (1 + 2 * ST) * 8 + 1024 /*alignment slack*/;
};
static_assert(Cfg<128>::SMEM <= 232448 && Cfg<64>::SMEM <= 232448, "shared memory");
static_assert(Cfg<128>::OFF_DS % 1024 == 0 && Cfg<64>::OFF_DS % 1024 == 0, "swizzled tiles 1024-aligned");

// ---------------------------------------------------------------- PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// One arrival by this thread plus `bytes` of expected TMA transactions on the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Spin until the phase with parity `parity` has completed.
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
// 3-D TMA tile load (coordinates innermost first: column, row, head) completing on `bar`.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// All DP/64 column chunks of one tile: chunk ch lands at dst + ch * chunk_bytes.
template <int CH>
__device__ __forceinline__ void tma_tile(uint32_t dst, int chunk_bytes, const CUtensorMap* map, uint64_t* bar,
                                         int row, int head) {
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) tma_load_3d(dst + ch * chunk_bytes, map, bar, 64 * ch, row, head);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Compiler-only pin: reads/writes of these registers may not move across this point (orders them after
// a preceding wgmma.wait_group, which itself does not name the registers).
template <int N> __device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);   // .x (low 16 bits) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

// wgmma shared-memory matrix descriptors [PTX ISA: Matrix Descriptor Format]:
//   bits 0-13 start >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset (0: every 64-column chunk starts
//   on a 1024-byte boundary), 62-63 layout (1 = 128-byte swizzle).
// K-major, 128B swizzle (rows of 64 bf16 = 128 B, 8-row groups 1024 B apart): SBO = 1024, LBO unused (1).
//   Advancing K by 16 elements inside the 128-byte row = +32 B on the start address; the next 64 columns
//   are the next chunk.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t saddr) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// MN-major, 128B swizzle (the same smem tile read with its rows as the K dimension and its 64-column chunks
//   as N): canonical layout ((64 n, n-blocks), (8 k, k-groups)) : ((1 elem, LBO), (128 B, SBO)). LBO = the
//   distance between 64-column chunks (chunk_bytes), SBO = 1024 (8 rows). Advancing K (rows) by 16 = +2048 B.
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t saddr, uint32_t chunk_bytes) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(chunk_bytes >> 4) << 16) |
         (64ull << 32) | (1ull << 62);
}

#define XL_F8(d, i)                                                                                      \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])

// D[64 x 64] (+)= A[64 x 16] * B[64 x 16]^T; A and B from shared memory, both K-major (trans flags 0).
// ACC == 0: D = A*B (the old D is ignored).
template <int ACC>
__device__ __forceinline__ void wgmma_ss_m64n64(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : XL_F8(d, 0), XL_F8(d, 8), XL_F8(d, 16), XL_F8(d, 24)
      : "l"(da), "l"(db), "n"(ACC));
}

// D[64 x 64] += A[64 x 16] * B[16 x 64]; A from registers (4 x bf16x2 per thread), B from shared memory
// in MN-major layout (imm-trans-b = 1).
__device__ __forceinline__ void wgmma_rs_m64n64(float (&d)[32], const uint32_t* a, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : XL_F8(d, 0), XL_F8(d, 8), XL_F8(d, 16), XL_F8(d, 24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}

// D[64 x 128] += A[64 x 16] * B[16 x 128]; A from registers, B from shared memory MN-major.
__device__ __forceinline__ void wgmma_rs_m64n128(float (&d)[64], const uint32_t* a, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : XL_F8(d, 0), XL_F8(d, 8), XL_F8(d, 16), XL_F8(d, 24), XL_F8(d, 32), XL_F8(d, 40), XL_F8(d, 48),
        XL_F8(d, 56)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}
#undef XL_F8

// C[64 x 64] = A B^T over the padded head dim: A = 64 rows of one tile (a_addr already offset to them,
// chunks a_chunk bytes apart), B = 64 rows of another (chunks b_chunk apart); both K-major. DP/16 wgmmas.
template <int DP>
__device__ __forceinline__ void issue_abt(float (&c)[32], uint32_t a_addr, int a_chunk, uint32_t b_addr,
                                          int b_chunk) {
  const uint64_t da0 = desc_kmajor(a_addr), db0 = desc_kmajor(b_addr);
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk) {
    // chunk kk/4 of the tile, then 32 B per 16 columns inside the swizzled 128-byte row
    const uint64_t da = da0 + static_cast<uint64_t>(((kk / 4) * a_chunk + (kk % 4) * 32) >> 4);
    const uint64_t db = db0 + static_cast<uint64_t>(((kk / 4) * b_chunk + (kk % 4) * 32) >> 4);
    if (kk == 0)
      wgmma_ss_m64n64<0>(c, da, db);
    else
      wgmma_ss_m64n64<1>(c, da, db);
  }
}

// acc[64 x DP] += A[64 x 64] T where A is in registers (af[16]: the register-A fragments of the 4 k-steps,
// k-step kk uses af[4kk .. 4kk+3]) and T is 64 rows of a smem tile (t_addr, chunks t_chunk apart) read
// MN-major: its rows are the K dimension, its columns N. 4 wgmmas.
template <int DP>
__device__ __forceinline__ void issue_at(float (&acc)[DP / 2], const uint32_t (&af)[16], uint32_t t_addr,
                                         int t_chunk) {
  const uint64_t d0 = desc_mnmajor(t_addr, t_chunk);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t db = d0 + static_cast<uint64_t>((kk * 16 * 128) >> 4);   // 16 rows further
    if constexpr (DP == 128)
      wgmma_rs_m64n128(acc, &af[4 * kk], db);
    else
      wgmma_rs_m64n64(acc, &af[4 * kk], db);
  }
}

// Fragment maps [PTX ISA: wgmma Register Fragments, m64nNk16].
// Accumulator: register i of thread t (warp w = t/32 of the warpgroup, g = (t%32)/4, q = t%4) holds
//   row 16w + g + 8((i/2)%2), column 8(i/4) + 2q + (i%2).
// Register A of one k-step: a0 = (row g, k 2q,2q+1), a1 = (row g+8, same k), a2 = (row g, k 2q+8,+9),
//   a3 = (row g+8, k 2q+8,+9) (rows offset by 16w). For a 64 x 64 accumulator c seen as 4 k-steps of 16
//   columns: a_r of step kk = pack(c[8kk+2r], c[8kk+2r+1]), i.e. af[n] = pack(c[2n], c[2n+1]).
__device__ __forceinline__ void pack_a(uint32_t (&af)[16], const float (&c)[32]) {
#pragma unroll
  for (int n = 0; n < 16; ++n) af[n] = pack_bf16(c[2 * n], c[2 * n + 1]);
}

// ---------------------------------------------------------------- kernel 1: Delta = rowsum(dO * O), dQ scratch = 0
// One pass over memory for both jobs (a separate cudaMemsetAsync of the 0.4 GB scratch plus a Delta kernel of
// 4-byte loads took 0.089 + 0.154 ms on the H200; cuDNN's dot_do_o kernel, which also zeroes its dQ
// accumulator, 0.195 ms). A row is read by DP/8 threads with 16-byte loads (8 bf16 each: D % 8 == 0, which the
// TMA maps' 16-byte row strides require anyway); block b zeroes its own contiguous share of the scratch with
// float4 stores, issued between the loads and the arithmetic.
template <int DP>
__global__ void __launch_bounds__(256) attn_bwd_prep_kernel(const __nv_bfloat16* __restrict__ dO,
                                                            const __nv_bfloat16* __restrict__ O,
                                                            float* __restrict__ Delta, long long rows, int D,
                                                            float4* __restrict__ acc, long long n4) {
  constexpr int TPR = DP / 8;    // threads per row: 16 (D = 96, 128) or 8 (D = 64); divides 32
  constexpr int RPB = 256 / TPR;  // rows per block
  const long long row = static_cast<long long>(blockIdx.x) * RPB + threadIdx.x / TPR;
  const int part = threadIdx.x % TPR;
  const bool active = row < rows && part < D / 8;
  uint4 x = make_uint4(0u, 0u, 0u, 0u), y = x;
  if (active) {
    x = reinterpret_cast<const uint4*>(dO + row * D)[part];
    y = reinterpret_cast<const uint4*>(O + row * D)[part];
  }
  const long long per = (n4 + gridDim.x - 1) / gridDim.x;
  const long long z0 = static_cast<long long>(blockIdx.x) * per;
  const long long z1 = z0 + per < n4 ? z0 + per : n4;
  for (long long i = z0 + threadIdx.x; i < z1; i += 256) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* o = reinterpret_cast<const __nv_bfloat162*>(&y);
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 u = __bfloat1622float2(a[k]), w = __bfloat1622float2(o[k]);
    sum = fmaf(u.x, w.x, fmaf(u.y, w.y, sum));
  }
#pragma unroll
  for (int m = TPR / 2; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);  // within a row's lanes
  if (row < rows && part == 0) Delta[row] = sum;
}

// ---------------------------------------------------------------- v2 helpers (warp specialisation, dQ path)
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
template <int R> __device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
// Generic-proxy shared-memory writes -> visible to async-proxy readers (wgmma operands, bulk copies).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Named barrier `id` over `count` threads (multiples of 32); barrier 0 is __syncthreads.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
// Four 8x8 b16 matrices: lanes 8k..8k+7 give the row addresses of matrix k, register k of each lane holds
// (row lane/4, columns 2(lane%4), +1) of matrix k [PTX ISA: stmatrix].
__device__ __forceinline__ void stsm_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ void st_shared_v4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
// gmem[0 .. bytes) += smem[0 .. bytes) (fp32), asynchronous, tracked by the issuing thread's bulk groups.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, uint32_t saddr, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(gmem), "r"(saddr),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

#define XL_F8(d, i)                                                                                      \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
// D[64 x 64] (+)= A[64 x 16] * B[16 x 64]; both from shared memory, both MN-major (imm-trans-a = imm-trans-b = 1).
template <int ACC>
__device__ __forceinline__ void wgmma_ss_tt_m64n64(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 1, 1;\n}\n"
      : XL_F8(d, 0), XL_F8(d, 8), XL_F8(d, 16), XL_F8(d, 24)
      : "l"(da), "l"(db), "n"(ACC));
}
// D[64 x 32] (+)= A[64 x 16] * B[16 x 32]; both MN-major from shared memory.
template <int ACC>
__device__ __forceinline__ void wgmma_ss_tt_m64n32(float (&d)[16], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 1, 1;\n}\n"
      : XL_F8(d, 0), XL_F8(d, 8)
      : "l"(da), "l"(db), "n"(ACC));
}
#undef XL_F8

// dQ_c[64 queries x DP/2] = dS[64 queries x 128 keys] K[128 keys x (DP/2 columns of half c)].
// A = the dS^T buffer ([key][query], 128-byte rows) read MN-major: element (m = query, k = key) at
// (k/8)*1024 + (k%8)*128 + 2m (swizzled); 16 keys further = +2048 B. B = the K tile read MN-major (rows =
// keys = K dimension): kb_addr is the start of this half's columns (DP = 128: chunk c; DP = 64: +64 B inside
// the 128-byte swizzle row, bits 7-9 of the start stay 0 so the base-offset field stays 0). N <= 64, so
// the LBO (distance between 64-wide N blocks) is never used. 8 wgmmas, the first with scale-d 0.
template <int DP>
__device__ __forceinline__ void issue_dq(float (&acc)[DP / 4], uint32_t ds_addr, uint32_t kb_addr) {
  const uint64_t da0 = desc_mnmajor(ds_addr, 8192), db0 = desc_mnmajor(kb_addr, 8192);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    const uint64_t off = static_cast<uint64_t>((kk * 16 * 128) >> 4);
    if constexpr (DP == 128) {
      if (kk == 0) wgmma_ss_tt_m64n64<0>(acc, da0 + off, db0 + off);
      else wgmma_ss_tt_m64n64<1>(acc, da0 + off, db0 + off);
    } else {
      if (kk == 0) wgmma_ss_tt_m64n32<0>(acc, da0 + off, db0 + off);
      else wgmma_ss_tt_m64n32<1>(acc, da0 + off, db0 + off);
    }
  }
}

// ---------------------------------------------------------------- kernel 2: fused dK, dV, dQ
// Grid (ceil(S/128), B*HKV), 384 threads. See the top of the file for the pipeline and barrier protocol.
template <int DP, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
attn_bwd_fused_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
                      const float* __restrict__ LSE, const float* __restrict__ Delta, float* __restrict__ dq_acc,
                      __nv_bfloat16* __restrict__ dK, __nv_bfloat16* __restrict__ dV, int H, int HKV, int S, int D,
                      float scale, float scale_log2) {
  using C = Cfg<DP>;
  constexpr int ST = C::ST;
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles must start on a 1024-byte boundary (descriptor base-offset field stays 0).
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t s0 = smem_addr(smem);
  float* lse_s = reinterpret_cast<float*>(smem + C::OFF_LSE);       // [ST][64], LSE * log2(e), +inf past S
  float* delta_s = reinterpret_cast<float*>(smem + C::OFF_DELTA);   // [ST][64], 0 past S
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + C::OFF_BAR);
  uint64_t* full = kv_full + 1;                                       // [ST]
  uint64_t* empty = full + ST;                                        // [ST]

  const int n0 = blockIdx.x * BN;
  const int bkv = blockIdx.y;                    // b * HKV + kv: row of the [B*HKV, S, D] maps
  const int b = bkv / HKV, kv = bkv - b * HKV;
  const int G = H / HKV;
  const int nqb = (S + BM - 1) / BM;
  const int m_lo = CAUSAL ? n0 / BM : 0;         // earlier query blocks see none of these keys
  const int per_head = nqb - m_lo;
  const int steps = G * per_head;                // step it: query head kv*G + it / per_head, block m_lo + it % per_head
  const int tid = threadIdx.x;
#if XL_UNIFORM_WG
  // Same value as tid / 128; read from lane 0 so that ptxas knows it is warp-uniform and keeps the smem
  // descriptors derived from it (k_rows, v_rows, kb_half) in uniform registers (XL_UNIFORM_WG 0: built in
  // vector registers, with 2 x R2UR + a 64-bit IADD3/IMAD.X pair + 2 IMAD.MOV per HGMMA).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0);
#else
  const int wg = tid / 128;
#endif

  if (tid == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    tma_prefetch_map(&map_do);
    mbar_init(kv_full, 1);
    for (int s = 0; s < ST; ++s) {
      mbar_init(&full[s], 32);                   // the 32 producer lanes (lane 0's carries expect_tx)
      mbar_init(&empty[s], 8);                   // lane 0 of each of the 8 consumer warps
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();                               // the only CTA-wide barrier

  if (wg == 0) {
    // ------------------------------------------------ producer
    regs_dec<24>();
    if (tid < 32) {
      const int lane = tid;
      if (lane == 0) {
        mbar_arrive_expect_tx(kv_full, 2 * C::KEY_BYTES);   // full boxes count, zero-filled parts included
        tma_tile<C::CH>(s0, C::CHUNK_KEY, &map_k, kv_full, n0, bkv);
        tma_tile<C::CH>(s0 + C::OFF_V, C::CHUNK_KEY, &map_v, kv_full, n0, bkv);
      }
#if XL_STEP_COUNTERS
      int s = 0, bh = b * H + kv * G, m = m_lo;
      uint32_t ph = 0;
      for (int it = 0; it < steps; ++it) {
#else
      for (int it = 0; it < steps; ++it) {
        const int s = it % ST;
        const uint32_t ph = (it / ST) & 1;
        const int bh = b * H + kv * G + it / per_head;
        const int m = m_lo + it % per_head;
#endif
        mbar_wait(&empty[s], ph ^ 1);            // slot s free (first round: passes at once)
        // LSE*log2e and Delta of rows m*64 + lane and + 32 (+inf / 0 past S: P = 0, dS = 0 there).
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int r = lane + 32 * h2;
          const int row = m * BM + r;
          const size_t at = static_cast<size_t>(bh) * S + row;
          lse_s[s * BM + r] = row < S ? LSE[at] * LOG2E : INFINITY;
          delta_s[s * BM + r] = row < S ? Delta[at] : 0.f;
        }
        if (lane == 0) {
          mbar_arrive_expect_tx(&full[s], 2 * C::ROW_BYTES);   // this lane's arrival + the TMA bytes
          tma_tile<C::CH>(s0 + C::OFF_Q + s * C::ROW_BYTES, C::CHUNK_ROW, &map_q, &full[s], m * BM, bh);
          tma_tile<C::CH>(s0 + C::OFF_DO + s * C::ROW_BYTES, C::CHUNK_ROW, &map_do, &full[s], m * BM, bh);
        } else {
          mbar_arrive(&full[s]);                 // release: this lane's LSE/Delta writes
        }
#if XL_STEP_COUNTERS
        if (++s == ST) { s = 0; ph ^= 1; }
        if (++m == nqb) { m = m_lo; ++bh; }      // nqb = m_lo + per_head
#endif
      }
    }
    return;
  }

  // -------------------------------------------------- consumers
  regs_inc<240>();
  const int cw = wg - 1;                          // which 64 keys of the CTA
  const int t = tid & 127;
  const int warp = t >> 5, lane = t & 31;
  const int g8 = lane >> 2, qd = lane & 3;
  const int key0 = n0 + cw * 64 + warp * 16 + g8; // key of accumulator rows with (i/2)%2 == 0; +8 otherwise
  const uint32_t k_rows = s0 + cw * 64 * 128;     // this WG's 64 rows of the K tile (+8 KiB in each chunk)
  const uint32_t v_rows = s0 + C::OFF_V + cw * 64 * 128;
  // B of dQ: the K tile's columns of this WG's half (DP = 128: chunk cw; DP = 64: columns 32cw.. of chunk 0).
  const uint32_t kb_half = s0 + (DP == 128 ? cw * C::CHUNK_KEY : cw * 64);
  // This thread's 16 rows of dS^T: key row 64cw + 16warp + g8 (+8 for odd n), 128 B per row.
#if XL_STSM
  // stmatrix call i stores matrices n = 4i + k (k = lane / 8; lanes 8k..8k+7 give row lane % 8 of it): key row
  // 64cw + 16warp + 8(k%2) + lane%8, 16-byte unit n/2 = 2i + k/2 swizzled by the row's bits 0-2 (= lane % 8).
  // The row start is 128-byte aligned, so row + ((2i + k/2) ^ r) * 16 = (row + ((k/2) ^ r) * 16) ^ 32i.
  const uint32_t ds_row = static_cast<uint32_t>(C::OFF_DS + (cw * 64 + warp * 16 + 8 * ((lane >> 3) & 1) +
                                                             (lane & 7)) * 128 +
                                                (((lane >> 4) ^ (lane & 7)) << 4));
#else
  const uint32_t ds_row = static_cast<uint32_t>(C::OFF_DS + (cw * 64 + warp * 16 + g8) * 128 + 4 * qd);
#endif
  const uint32_t dq_stage = s0 + C::OFF_DQ + cw * C::DQ_HALF;

  float dk[DP / 2], dv[DP / 2];                   // this thread's 2 keys x DP/4 columns of dK, dV
#pragma unroll
  for (int i = 0; i < DP / 2; ++i) dk[i] = dv[i] = 0.f;

  mbar_wait(kv_full, 0);
#if XL_STEP_COUNTERS
  int s = 0, bh = b * H + kv * G, m = m_lo;
  uint32_t ph = 0;
  for (int it = 0; it < steps; ++it) {
#else
  for (int it = 0; it < steps; ++it) {
    const int s = it % ST;
    const uint32_t ph = (it / ST) & 1;
    const int bh = b * H + kv * G + it / per_head;
    const int m = m_lo + it % per_head;
#endif
    const uint32_t q_tile = s0 + C::OFF_Q + s * C::ROW_BYTES;
    const uint32_t do_tile = s0 + C::OFF_DO + s * C::ROW_BYTES;
    const float* lse2 = lse_s + s * BM;
    const float* dlt = delta_s + s * BM;
    mbar_wait(&full[s], ph);

    float sc[32], dp[32];                         // S^T then P^T; dP^T then dS^T (2 keys x 16 query columns)
    wgmma_fence();
    issue_abt<DP>(sc, k_rows, C::CHUNK_KEY, q_tile, C::CHUNK_ROW);
    wgmma_commit();
    issue_abt<DP>(dp, v_rows, C::CHUNK_KEY, do_tile, C::CHUNK_ROW);
    wgmma_commit();
#if XL_LDS64
    // LSE2 of this thread's 16 query columns 8j + 2qd, +1 (j = 0..7): 8 aligned pairs.
    float2 lsev[8];
#if XL_EARLY_LDS
#pragma unroll
    for (int j = 0; j < 8; ++j) lsev[j] = *reinterpret_cast<const float2*>(lse2 + 8 * j + 2 * qd);
#endif
#endif
    wgmma_wait<1>();                              // S^T done (dP^T may still run)
    pin(sc);
#if XL_LDS64 && !XL_EARLY_LDS
#pragma unroll
    for (int j = 0; j < 8; ++j) lsev[j] = *reinterpret_cast<const float2*>(lse2 + 8 * j + 2 * qd);
#endif
    // Mask where the block holds keys >= S or straddles the causal diagonal (some key > some query).
    const bool masked = (n0 + cw * 64 + 64 > S) || (CAUSAL && m * BM < n0 + cw * 64 + 64);
#if XL_MASK_BRANCH
    // All 32 exp2 first, then the mask in its own warp-uniform branch. The branch ends the basic block, so
    // ptxas can no longer hoist the dP^T wait (WARPGROUP.DEPBAR 0) above the exp2s (XL_MASK_BRANCH 0, one block:
    // 6 of 32 MUFU.EX2 before the wait; cutedsl and this: 32).
#pragma unroll
    for (int i = 0; i < 32; ++i) {
#if XL_LDS64
      const float l2 = (i % 2) ? lsev[i / 4].y : lsev[i / 4].x;
#else
      const float l2 = lse2[8 * (i / 4) + 2 * qd + (i % 2)];
#endif
      sc[i] = ex2(fmaf(sc[i], scale_log2, -l2));
    }
    if (masked) {
      asm volatile("" ::: "memory");              // keeps the block a real (not if-converted) branch
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int key = key0 + 8 * ((i / 2) % 2);
        const int qrow = m * BM + 8 * (i / 4) + 2 * qd + (i % 2);
        if (key >= S || (CAUSAL && key > qrow)) sc[i] = 0.f;
      }
    }
#else
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int col = 8 * (i / 4) + 2 * qd + (i % 2);   // query row of the block
#if XL_LDS64
      const float l2 = (i % 2) ? lsev[i / 4].y : lsev[i / 4].x;
#else
      const float l2 = lse2[col];
#endif
      float p = ex2(fmaf(sc[i], scale_log2, -l2));
      if (masked) {
        const int key = key0 + 8 * ((i / 2) % 2);
        const int qrow = m * BM + col;
        if (key >= S || (CAUSAL && key > qrow)) p = 0.f;
      }
      sc[i] = p;
    }
#endif
    pin(sc);                                      // keep the exp2s ahead of the dP^T wait (overlap)
    uint32_t pf[16], dsf[16];
    pack_a(pf, sc);                               // P^T (bf16) = A of dV += P^T dO
#if XL_LDS64
    float2 dlv[8];
#if XL_EARLY_LDS
#pragma unroll
    for (int j = 0; j < 8; ++j) dlv[j] = *reinterpret_cast<const float2*>(dlt + 8 * j + 2 * qd);
#endif
#endif
    wgmma_wait<0>();                              // dP^T done
    pin(dp);
#if XL_LDS64
#if !XL_EARLY_LDS
#pragma unroll
    for (int j = 0; j < 8; ++j) dlv[j] = *reinterpret_cast<const float2*>(dlt + 8 * j + 2 * qd);
#endif
#pragma unroll
    for (int i = 0; i < 32; ++i) dp[i] = sc[i] * (dp[i] - ((i % 2) ? dlv[i / 4].y : dlv[i / 4].x));
#else
#pragma unroll
    for (int i = 0; i < 32; ++i) dp[i] = sc[i] * (dp[i] - dlt[8 * (i / 4) + 2 * qd + (i % 2)]);
#endif
    pack_a(dsf, dp);                              // dS^T (bf16) = A of dK += dS^T Q
    // dS^T into buffer it&1: dsf[n] = (key row +8(n%2), query columns 8(n/2) + 2qd, +1); 16-byte unit n/2 of
    // the row, swizzled by the row's bits 0-2 (= g8).
    const uint32_t ds_buf = s0 + ds_row + (it & 1) * C::DS_BYTES;
#if XL_STSM
    // s0 is 1024-aligned and DS_BYTES a multiple of 1024, so the row start stays 128-byte aligned in ds_buf.
#pragma unroll
    for (int i = 0; i < 4; ++i)
      stsm_x4(ds_buf ^ (32u * i), dsf[4 * i], dsf[4 * i + 1], dsf[4 * i + 2], dsf[4 * i + 3]);
#else
#pragma unroll
    for (int n = 0; n < 16; ++n) st_shared_b32(ds_buf + (n % 2) * 8 * 128 + (((n / 2) ^ g8) << 4), dsf[n]);
#endif
    fence_proxy_async();
    wgmma_fence();
    issue_at<DP>(dv, pf, do_tile, C::CHUNK_ROW);
    issue_at<DP>(dk, dsf, q_tile, C::CHUNK_ROW);
    wgmma_commit();                               // G1
    if (t == 0) bulk_wait_read0();                // last step's dQ staging has been read (see the protocol)
    named_bar_sync(1, 256);                       // dS(it) of both WGs is in shared memory
    float dq[DP / 4];
    wgmma_fence();
    issue_dq<DP>(dq, s0 + C::OFF_DS + (it & 1) * C::DS_BYTES, kb_half);
    wgmma_commit();                               // G2
    wgmma_wait<1>();                              // G1 done: Q, dO of slot s no longer read
    pin(dv);
    pin(dk);
    if (lane == 0) mbar_arrive(&empty[s]);
    wgmma_wait<0>();                              // G2 done
    pin(dq);
#pragma unroll
    for (int v = 0; v < DP / 16; ++v)
      st_shared_v4(dq_stage + (v * 128 + t) * 16, dq[4 * v], dq[4 * v + 1], dq[4 * v + 2], dq[4 * v + 3]);
    fence_proxy_async();
    named_bar_sync(2 + cw, 128);                  // the WG's staging buffer is complete
    if (t == 0)
      bulk_reduce_add_f32(dq_acc + ((static_cast<size_t>(bh) * nqb + m) * 2 + cw) * (32 * DP), dq_stage,
                          C::DQ_HALF);
#if XL_STEP_COUNTERS
    if (++s == ST) { s = 0; ph ^= 1; }
    if (++m == nqb) { m = m_lo; ++bh; }
#endif
  }
  if (t == 0) bulk_wait0();                       // the staging buffer must outlive the last reduce

  // Epilogue: bf16 stores straight from registers, nothing past key S or column D.
  const size_t base = static_cast<size_t>(bkv) * S;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key0 + 8 * half;
    if (key >= S) continue;
    __nv_bfloat16* pk = dK + (base + key) * D;
    __nv_bfloat16* pv = dV + (base + key) * D;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int col = 8 * n + 2 * qd;
      if (col < D) {   // D is even, so a column pair is never split by the edge
        const int i = 4 * n + 2 * half;
        *reinterpret_cast<__nv_bfloat162*>(pk + col) = __floats2bfloat162_rn(dk[i] * scale, dk[i + 1] * scale);
        *reinterpret_cast<__nv_bfloat162*>(pv + col) = __floats2bfloat162_rn(dv[i], dv[i + 1]);
      }
    }
  }
}

// ---------------------------------------------------------------- kernel 3: dQ scratch -> bf16
// Scratch block (bh, m, c) = 128 threads x DP/16 float4 in thread order: float4 v*128 + t holds accumulator
// registers 4v..4v+3 of thread t = (row r, columns cc, cc+1) and (row r+8, same columns), with
// r = 16(t/32) + (t%32)/4 and cc = c*DP/2 + 8v + 2(t%4). A thread reads the float4s v and v+1 of its t (even v;
// each warp reads 512 contiguous bytes twice). The 4 lanes of a quad (t%4 = 0..3) then hold 8 consecutive
// columns of rows r and r+8 for v and for v+1, and trade them so that each lane stores 16 bytes: lane q stores
// row r + 8(q&1), columns 8(v + q/2) .. +7, so two lanes fill each 32-byte sector (the 4-byte stores this
// replaces left every sector half written; 0.190 ms on the H200 against cuDNN's 0.155 for the same job).
template <int DP>
__global__ void __launch_bounds__(256) attn_bwd_dq_convert_kernel(const float4* __restrict__ acc,
                                                                  __nv_bfloat16* __restrict__ dQ,
                                                                  long long npairs, int S, int D, int nqb,
                                                                  float scale) {
  // npairs = (B*H*nqb) x 2 halves x DP/32 pairs x 128 threads, a multiple of 256: no thread of a block leaves
  // early, so every quad is whole at the shuffles.
  const long long p = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  if (p >= npairs) return;
  const long long bhm = p / (8 * DP);
  const int rem = static_cast<int>(p - bhm * (8 * DP));
  const int c = rem / (4 * DP), r2 = rem - c * (4 * DP);
  const int v = 2 * (r2 / 128), t = r2 % 128;  // t % 32 is the lane: every term above t is a multiple of 128
  const long long at = bhm * (16 * DP) + c * (8 * DP) + v * 128 + t;
  const float4 x = acc[at], y = acc[at + 128];
  // mine[k]: what lane q' = k of the quad stores, from this lane's two columns (k&1: row r+8; k>>1: v+1)
  const uint32_t mine[4] = {pack_bf16(x.x * scale, x.y * scale), pack_bf16(x.z * scale, x.w * scale),
                            pack_bf16(y.x * scale, y.y * scale), pack_bf16(y.z * scale, y.w * scale)};
  const int q = t & 3, quad = threadIdx.x & 28;
  uint32_t out[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // Round j: lane q receives from lane s = (q + j) & 3 that lane's columns for q (s sends mine[(s - j) & 3]).
    const int want = (q - j) & 3, from = (q + j) & 3;
    const uint32_t send = want == 0 ? mine[0] : want == 1 ? mine[1] : want == 2 ? mine[2] : mine[3];
    const uint32_t got = j == 0 ? send : __shfl_sync(0xffffffffu, send, quad | from);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (from == k) out[k] = got;  // out[s] = lane s's two columns: the 8 columns in order
  }
  const int bh_row = static_cast<int>(bhm % nqb) * BM + 16 * (t / 32) + (t % 32) / 4 + 8 * (q & 1);
  const int col = c * (DP / 2) + 8 * (v + (q >> 1));
  if (bh_row < S && col < D)  // col and D are multiples of 8: the 8 columns are all inside D
    *reinterpret_cast<uint4*>(dQ + (bhm / nqb * S + bh_row) * static_cast<long long>(D) + col) =
        make_uint4(out[0], out[1], out[2], out[3]);
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
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}

// [heads, S, D] bf16 viewed as a 3-D tensor (innermost first: D, S, heads); box {64, rows, 1} with the
// 128-byte swizzle (64 bf16 = exactly one swizzle row). Out-of-bounds elements are zero-filled, per head.
static bool make_map(CUtensorMap* map, const void* base, int heads, int S, int D, int box_rows) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[3] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(S), static_cast<cuuint64_t>(heads)};
  cuuint64_t strides[2] = {static_cast<cuuint64_t>(D) * 2, static_cast<cuuint64_t>(S) * D * 2};
  cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1};
  cuuint32_t elem[3] = {1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int DP>
static void launch(const __nv_bfloat16* dO, const __nv_bfloat16* Q, const __nv_bfloat16* K,
                   const __nv_bfloat16* V, const __nv_bfloat16* O, const float* LSE, __nv_bfloat16* dQ,
                   __nv_bfloat16* dK, __nv_bfloat16* dV, int B, int H, int HKV, int S, int D, cudaStream_t stream) {
  constexpr bool causal = XL_CAUSAL != 0;
  auto kernel = attn_bwd_fused_kernel<DP, causal>;
  constexpr int bytes = Cfg<DP>::SMEM;
  static bool attr_set = false;
  if (!attr_set) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    // The scratch (Delta + the fp32 dQ accumulator, ~0.4 GB at the default shape) comes from the default
    // pool each call; keep freed pool memory mapped instead of trimming it at every synchronisation.
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
      cuuint64_t keep = ~0ull;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    }
    attr_set = true;
  }
  CUtensorMap q64, do64, k128, v128;
  if (!make_map(&q64, Q, B * H, S, D, BM) || !make_map(&do64, dO, B * H, S, D, BM) ||
      !make_map(&k128, K, B * HKV, S, D, BN) || !make_map(&v128, V, B * HKV, S, D, BN)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  const long long rows = static_cast<long long>(B) * H * S;
  const int nqb = (S + BM - 1) / BM;
  const long long delta_bytes = (rows * 4 + 255) / 256 * 256;
  const long long acc_floats = static_cast<long long>(B) * H * nqb * BM * DP;
  char* scratch = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&scratch), delta_bytes + acc_floats * 4, stream) != cudaSuccess) {
    fprintf(stderr, "xlang_entry: cudaMallocAsync failed\n");
    return;
  }
  float* delta = reinterpret_cast<float*>(scratch);
  float* dq_acc = reinterpret_cast<float*>(scratch + delta_bytes);
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  const float scale_log2 = scale * LOG2E;
  const long long n4 = acc_floats / 4;
  constexpr int prep_rows = 256 / (DP / 8);
  attn_bwd_prep_kernel<DP><<<static_cast<unsigned>((rows + prep_rows - 1) / prep_rows), 256, 0, stream>>>(
      dO, O, delta, rows, D, reinterpret_cast<float4*>(dq_acc), n4);
  kernel<<<dim3((S + BN - 1) / BN, B * HKV), THREADS, bytes, stream>>>(q64, k128, v128, do64, LSE, delta, dq_acc,
                                                                       dK, dV, H, HKV, S, D, scale, scale_log2);
  attn_bwd_dq_convert_kernel<DP><<<static_cast<unsigned>(n4 / 2 / 256), 256, 0, stream>>>(
      reinterpret_cast<const float4*>(dq_acc), dQ, n4 / 2, S, D, nqb, scale);
  cudaFreeAsync(scratch, stream);
}

}  // namespace hbwd2

extern "C" void xlang_entry(const __nv_bfloat16* dO, const __nv_bfloat16* Q, const __nv_bfloat16* K,
                            const __nv_bfloat16* V, const __nv_bfloat16* O, const float* LSE, __nv_bfloat16* dQ,
                            __nv_bfloat16* dK, __nv_bfloat16* dV, int B, int H, int HKV, int S, int D,
                            cudaStream_t stream) {
  if (D <= 64)
    hbwd2::launch<64>(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, stream);
  else
    hbwd2::launch<128>(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, stream);
}
