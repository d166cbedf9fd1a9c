// NEVER RUN ON A GPU: no Blackwell GPU exists in this workplace. Compiled for sm_100a and its SASS census
// checked (UTCHMMA, UTMALDG, LDTM); index arithmetic checked by a CPU model
// (tasks/attn_bwd/verify/attn_bwd_cuda_ptx_blackwell_emulate.py). See tasks/attn_bwd/NOTES_cuda_ptx_blackwell.md.
//
// Expert Blackwell (sm_100a) attention backward for the xlang `attn_bwd` / `attn_bwd_causal` tasks, with
// tcgen05.mma (accumulators in Tensor Memory) and TMA tile loads. attn_bwd_causal uses this same file with
// XL_CAUSAL set to 1 (its Task.solution_variant).
//
// Given dO and the forward's Q, K, V, O, LSE (natural log of the scaled scores), scale = 1/sqrt(D),
// kv head = h / (H / HKV):
//   P  = exp(scale Q K^T - LSE)        recomputed per tile, never stored to global memory
//   dV = P^T dO                        dP = dO V^T
//   Delta = rowsum(dO * O)             dS = P * (dP - Delta)
//   dQ = scale dS K                    dK = scale dS^T Q
// dK and dV of a kv head sum the G = H / HKV query heads that share it.
//
// Design (FlashAttention-2's backward split, as the Hopper expert cuda_ptx_hopper.cu; no atomics)
// ------
// Three launches on the caller's stream:
//  1. attn_bwd_delta_kernel: Delta[b,h,i] = sum_d dO*O in fp32 into a stream-ordered scratch buffer
//     (cudaMallocAsync / cudaFreeAsync). One warp per row. (Plain CUDA, as in the Hopper expert.)
//  2. attn_bwd_dkdv_kernel: one CTA per (128-key block, b*HKV + kv), 128 threads = 4 warps. Thread t owns
//     key t of the block = TMEM lane t (warp w may only access lanes 32w..32w+31 [PTX ISA 9.7.16.8.1]).
//     K and V (128 rows) stay in shared memory; dV and dK accumulate in TMEM (fp32). The CTA walks every
//     64-row query block of every query head of the GQA group (the group sum happens in TMEM). Per step,
//     in the transposed orientation (keys = MMA rows M = 128):
//         S^T  = K Q^T     tcgen05.mma M128 N64, A = K, B = Q, both K-major SW128 from smem -> TMEM [0,64)
//         dP^T = V dO^T    same, A = V, B = dO                                          -> TMEM [64,128)
//         thread t: 2 x tcgen05.ld of its row of each; P^T = exp2(S^T*scale*log2e - LSE*log2e) (masked),
//         dS^T = P^T (dP^T - Delta); both rounded to bf16 and written by the thread to its row of two
//         K-major SW128 smem tiles [128 keys x 64 queries] (the A operands below).
//         dV  += P^T dO    M128 N=DP, K = 64 queries; A = P^T (smem, K-major), B = dO MN-major -> TMEM dV
//         dK  += dS^T Q    same with A = dS^T, B = Q                                        -> TMEM dK
//     dK is scaled by 1/sqrt(D) once, in the epilogue (TMEM -> registers -> guarded bf16 stores).
//  3. attn_bwd_dq_kernel: one CTA per (128-query block, b*H), 128 threads, thread t = query row t = TMEM
//     lane t. Q and dO (128 rows) stay put, LSE/Delta of the thread's row in registers; it walks 64-key
//     blocks of K and V:  S = Q K^T, dP = dO V^T (M128 N64, K-major), P, dS -> smem (bf16, K-major),
//     dQ += dS K (A = dS smem K-major, B = K tile MN-major), dQ in TMEM, scaled in the epilogue.
//
// Synchronisation (both compute kernels, the same simple scheme; no warp specialisation):
//   thread 0 issues every TMA and every tcgen05.mma; all 128 threads do the softmax-like math.
//   Per step it (streamed tiles double-buffered in slots it&1, TMA of step it+1 in flight during step it):
//     thread 0: wait full[it&1] -> fence::after -> 2 x (DP/16) MMAs (S, dP) -> tcgen05.commit -> mma_bar
//     all:      wait mma_bar (phase it) -> fence::after_thread_sync -> tcgen05.ld S, dP -> wait::ld
//               (the commit tracks ALL earlier MMAs of thread 0 [9.7.16.12.1], so this wait also means the
//               previous step's dV/dK (dQ) MMAs finished reading the P/dS smem tiles and their Q/dO slot)
//     thread 0: TMA of step it+1 into slot (it+1)&1 (its last reader, step it-1, has completed)
//     all:      math; st.shared P/dS (bf16); fence.proxy.async.shared::cta (generic-proxy writes made
//               visible to the async proxy that tcgen05.mma reads shared memory through);
//               tcgen05.fence::before_thread_sync; __syncthreads
//     thread 0: fence::after_thread_sync -> 2 x 4 MMAs (dV, dK) or 4 (dQ) into the TMEM accumulators.
//   After the loop thread 0 commits once more (phase `steps`); everyone waits for it before the epilogue.
//
// Head dim: templated on the padded width DP (64 or 128); D = 96 runs with DP = 128. Tiles are DP/64
// column chunks of 64 bf16 (one 128-byte swizzle row), each its own TMA box {64, rows, 1}; for D = 96 the
// second chunk's box covers columns 64..127 of a tensor whose inner extent is 96: TMA zero-fills 96..127
// (no effect on any dot product; those output columns are zeros and never stored).
// Tails: tensor maps are 3-D [B*heads, S, D], so a box past row S of one head is zero-filled (never the
// next head's rows). Query rows >= S: LSE taken as +inf (P = 0) and Delta 0. Key rows >= S: masked (P = 0).
// Stores are guarded (row < S, column < D).
// Causal (key j visible to query i iff j <= i): the dK/dV CTA of keys [n0, n0+128) starts at query block
// n0/64; the dQ CTA of rows [m0, m0+128) stops after key m0+127; the per-element mask is applied in every
// block (simple, not fast). dQ CTAs run longest-first.
//
// PTX ISA sections (9.0 numbering) the layouts rest on (the same facts as the forward expert
// tasks/attn_fwd/solutions/cuda_ptx_blackwell.cu, re-derived here for the shapes of this kernel):
//   9.7.16.4.1  shared memory descriptor: start>>4 (0-13), LBO>>4 (16-29), SBO>>4 (32-45), fixed 0b001 at
//               46-48, base offset 49-51 (0: every tile 1024-B aligned), LBO mode 52 (0), swizzle 61-63
//               (2 = 128-Byte).
//   9.7.16.3    canonical layouts. K-major SW128 ((8,m),(T,2k)):((8T,SBO),(1,T)): SBO = 1024 B (next 8 rows
//               of 128 B), LBO unused (1); K step of 16 bf16 = +32 B on the start address inside the
//               swizzled 128-B row, next 64 columns = next chunk. MN-major SW128
//               ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)): LBO = bytes between 64-element N blocks (our next
//               64-column chunk of the tile), SBO = 1024 B (next 8 K rows); K step of 16 rows = +2048 B.
//   9.7.16.4.2  instruction descriptor kind::f16: D f32 (bit 4), A bf16 (7-9 = 1), B bf16 (10-12 = 1),
//               transpose A (15) = 0, transpose B (16) = 0 K-major / 1 MN-major, N>>3 at 17-22, M>>4 at 24-28.
//   9.7.16.10.5 layout D, M = 128, cta_group::1: row i <-> TMEM lane i, column j <-> column base + j.
//   9.7.16.8.3  tcgen05.ld .32x32b.xN: thread l of warp w reads TMEM lane 32w + l, N consecutive columns.
//   9.7.16.7.1  tcgen05.alloc / relinquish_alloc_permit / dealloc (one whole warp, power of two >= 32 cols).
//   9.7.16.12.1 tcgen05.commit.mbarrier::arrive::one: one arrival once all prior async tcgen05 ops of the
//               issuing thread have completed.
//   9.7.16.6.4  canonical sync: commit -> mbarrier wait -> fence::after_thread_sync -> ld;
//               ld -> wait::ld -> fence::before_thread_sync -> bar.sync -> fence::after_thread_sync -> mma.
#ifndef XL_CAUSAL
#define XL_CAUSAL 0
#endif

#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace bbwd {

constexpr int THREADS = 128;          // 4 warps = the 128 TMEM lanes
constexpr int BIG = 128;              // rows of the resident tiles (keys in dK/dV, queries in dQ) = MMA M
constexpr int SMALL = 64;             // rows of the streamed tiles = N of S/dP = K of the accumulating MMAs
constexpr int BIG_CHUNK = BIG * 128;  // bytes of one 64-column chunk of a resident tile (16 KiB)
constexpr int SMALL_CHUNK = SMALL * 128;   // bytes of one 64-column chunk of a streamed tile (8 KiB)
constexpr int OP_BYTES = BIG * 128;   // a bf16 [128 x 64] operand tile written by the threads (P^T, dS^T, dS)
constexpr float LOG2E = 1.4426950408889634f;

// TMEM columns: S (or S^T) at [0,64), dP at [64,128), then the fp32 accumulators.
constexpr int TM_S = 0, TM_DP = 64, TM_ACC = 128;

// Shared memory decides how many CTAs share an SM (228 KiB per SM, 1 KiB reserved per CTA). Each CTA's
// tcgen05.alloc must fit in the SM's 512 TMEM columns next to the others' (a CTA that does not fit would
// wait inside tcgen05.alloc until another one deallocates), so a kernel taking `cols` columns asks for
// enough shared memory that at most 512 / cols CTAs are co-resident.
constexpr int SM_SMEM = 233472, CTA_RESERVED = 1024;
constexpr int ctas_per_sm(int smem) { return SM_SMEM / (smem + CTA_RESERVED); }
constexpr int tmem_safe_smem(int smem, int cols) {
  return ctas_per_sm(smem) * cols <= 512 ? smem : SM_SMEM / (512 / cols + 1) - CTA_RESERVED + 16;
}

template <int DP>
struct CfgKV {                        // dK/dV kernel
  static constexpr int CH = DP / 64;
  static constexpr int BIG_BYTES = CH * BIG_CHUNK;
  static constexpr int SMALL_BYTES = CH * SMALL_CHUNK;
  static constexpr int OFF_V = BIG_BYTES;                       // K at 0
  static constexpr int OFF_Q = 2 * BIG_BYTES;                   // 2 slots
  static constexpr int OFF_DO = OFF_Q + 2 * SMALL_BYTES;        // 2 slots
  static constexpr int OFF_P = OFF_DO + 2 * SMALL_BYTES;        // P^T operand
  static constexpr int OFF_DS = OFF_P + OP_BYTES;               // dS^T operand
  static constexpr int OFF_LSE = OFF_DS + OP_BYTES;             // [2][64] LSE*log2e
  static constexpr int OFF_DELTA = OFF_LSE + 2 * SMALL * 4;     // [2][64]
  static constexpr int OFF_BAR = OFF_DELTA + 2 * SMALL * 4;     // kv_full, full[2], mma_bar, tmem slot
  static constexpr int SMEM = tmem_safe_smem(OFF_BAR + 4 * 8 + 16 + 1024 /*alignment slack*/, DP == 128 ? 512 : 256);
  static constexpr int TMEM_COLS = DP == 128 ? 512 : 256;       // 128 + dV DP + dK DP, power of two
  static_assert(TM_ACC + 2 * DP <= TMEM_COLS, "tmem");
  static_assert(ctas_per_sm(SMEM) * TMEM_COLS <= 512, "co-resident CTAs must fit in TMEM together");
};
template <int DP>
struct CfgQ {                         // dQ kernel
  static constexpr int CH = DP / 64;
  static constexpr int BIG_BYTES = CH * BIG_CHUNK;
  static constexpr int SMALL_BYTES = CH * SMALL_CHUNK;
  static constexpr int OFF_DO = BIG_BYTES;                      // Q at 0
  static constexpr int OFF_K = 2 * BIG_BYTES;                   // 2 slots
  static constexpr int OFF_V = OFF_K + 2 * SMALL_BYTES;         // 2 slots
  static constexpr int OFF_DS = OFF_V + 2 * SMALL_BYTES;        // dS operand
  static constexpr int OFF_BAR = OFF_DS + OP_BYTES;             // q_full, full[2], mma_bar, tmem slot
  static constexpr int SMEM = tmem_safe_smem(OFF_BAR + 4 * 8 + 16 + 1024, 256);
  static constexpr int TMEM_COLS = 256;                         // 128 + dQ DP
  static_assert(TM_ACC + DP <= TMEM_COLS, "tmem");
  static_assert(ctas_per_sm(SMEM) * TMEM_COLS <= 512, "co-resident CTAs must fit in TMEM together");
};
static_assert(CfgKV<128>::SMEM <= 232448 && CfgQ<128>::SMEM <= 232448, "shared memory");

// Instruction descriptor, kind::f16 [PTX ISA 9.7.16.4.2]: bf16 x bf16 -> f32, A K-major.
__host__ __device__ constexpr uint32_t idesc_bf16(int M, int N, int b_mn_major) {
  return (1u << 4) | (1u << 7) | (1u << 10) | (static_cast<uint32_t>(b_mn_major) << 16) |
         (static_cast<uint32_t>(N >> 3) << 17) | (static_cast<uint32_t>(M >> 4) << 24);
}
constexpr uint32_t IDESC_SP = idesc_bf16(BIG, SMALL, 0);   // S / dP: M128 N64, both K-major
static_assert(IDESC_SP == 0x08100490u, "S idesc");

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
// 3-D TMA load (coordinates innermost first: column, row, head) completing on `bar`.
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
// All CH column chunks of one tile: chunk ch lands at dst + ch * chunk_bytes.
template <int CH>
__device__ __forceinline__ void tma_tile(uint32_t dst, int chunk_bytes, const CUtensorMap* map, uint64_t* bar,
                                         int row, int head) {
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) tma_load_3d(dst + ch * chunk_bytes, map, bar, 64 * ch, row, head);
}

// Tensor memory management: one whole warp executes each.
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
// Generic-proxy shared-memory writes (st.shared of P / dS) -> visible to the async proxy (tcgen05.mma).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Shared-memory matrix descriptors [PTX ISA 9.7.16.4.1, canonical layouts 9.7.16.3].
// K-major, 128-byte swizzle: SBO = 1024 B, LBO unused (1). Tiles start on 1024-B boundaries.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t saddr) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 46) | (2ull << 61);
}
// MN-major, 128-byte swizzle: LBO = distance between 64-column (N) chunks of the tile, SBO = 1024 B
// between 8-row (K) groups.
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t saddr, uint32_t chunk_bytes) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(chunk_bytes >> 4) << 16) |
         (64ull << 32) | (1ull << 46) | (2ull << 61);
}

// D[tmem] (+)= A[smem] . B[smem]; a single thread issues it.
__device__ __forceinline__ void mma_ss(uint32_t d_tmem, uint64_t da, uint64_t db, uint32_t idesc, uint32_t acc) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n"
      ::"r"(d_tmem), "l"(da), "l"(db), "r"(idesc), "r"(acc) : "memory");
}
// `bar` gets one arrival once every tcgen05 op this thread issued so far has completed.
__device__ __forceinline__ void mma_commit(uint64_t* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
               ::"r"(smem_addr(bar)) : "memory");
}

// Warp-collective: lane l reads 32 consecutive 32-bit columns of TMEM lane (lane(taddr) + l).
__device__ __forceinline__ void tmem_ld32(uint32_t taddr, uint32_t (&v)[32]) {
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
}
__device__ __forceinline__ void tmem_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }

// The 64 fp32 columns [col, col+64) of this thread's TMEM lane (the warp's lanes start at t_lane).
__device__ __forceinline__ void tmem_row64(uint32_t t_lane, int col, float (&x)[64]) {
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    uint32_t v[32];
    tmem_ld32(t_lane + col + 32 * c, v);
    tmem_wait_ld();
#pragma unroll
    for (int i = 0; i < 32; ++i) x[32 * c + i] = __uint_as_float(v[i]);
  }
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

// Row r of a [128 x 64] bf16 K-major SW128 operand tile (1024-B aligned), written by the thread that owns
// the row: 128 bytes = 8 16-byte chunks; logical chunk c sits at physical chunk c ^ (r % 8) (the 128-byte
// swizzle: address bits 4-6 ^= bits 7-9, which for a 1024-aligned tile are r % 8).
__device__ __forceinline__ void store_op_row(uint8_t* tile, int r, const float (&x)[64]) {
  uint8_t* row = tile + r * 128;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const float* f = x + 8 * c;
    *reinterpret_cast<uint4*>(row + ((c ^ (r & 7)) << 4)) =
        make_uint4(pack_bf16(f[0], f[1]), pack_bf16(f[2], f[3]), pack_bf16(f[4], f[5]), pack_bf16(f[6], f[7]));
  }
}

// C[128 x 64] (tmem) = A B^T over the padded head dim: A = a resident 128-row tile (chunks BIG_CHUNK
// apart), B = a streamed 64-row tile (chunks SMALL_CHUNK apart); both K-major. DP/16 MMAs.
template <int DP>
__device__ __forceinline__ void issue_abt(uint32_t c_tmem, uint32_t a_addr, uint32_t b_addr) {
  const uint64_t da0 = desc_kmajor(a_addr), db0 = desc_kmajor(b_addr);
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk) {
    // chunk kk/4 of the tile, then 32 B per 16 columns inside the swizzled 128-byte row
    const uint64_t da = da0 + static_cast<uint64_t>(((kk / 4) * BIG_CHUNK + (kk % 4) * 32) >> 4);
    const uint64_t db = db0 + static_cast<uint64_t>(((kk / 4) * SMALL_CHUNK + (kk % 4) * 32) >> 4);
    mma_ss(c_tmem, da, db, IDESC_SP, kk > 0 ? 1u : 0u);
  }
}
// acc[128 x DP] (tmem) (+)= A[128 x 64] T: A = a thread-written operand tile (K-major, 64 columns = one
// swizzle row), T = a streamed 64-row tile read MN-major (its rows are K, its columns N; chunks
// SMALL_CHUNK apart = LBO). 4 MMAs of K = 16: +32 B in A's row, +2048 B (16 rows) in T.
template <int DP>
__device__ __forceinline__ void issue_at(uint32_t acc_tmem, uint32_t a_addr, uint32_t t_addr, bool accumulate) {
  constexpr uint32_t IDESC = idesc_bf16(BIG, DP, 1);
  const uint64_t da0 = desc_kmajor(a_addr), dt0 = desc_mnmajor(t_addr, SMALL_CHUNK);
#pragma unroll
  for (int kk = 0; kk < SMALL / 16; ++kk)
    mma_ss(acc_tmem, da0 + static_cast<uint64_t>((kk * 32) >> 4), dt0 + static_cast<uint64_t>((kk * 2048) >> 4),
           IDESC, (accumulate || kk > 0) ? 1u : 0u);
}

// Epilogue: this thread's row of a [128 x DP] fp32 TMEM accumulator, times `mul`, as bf16 into out_row
// (columns < D; nothing when !row_ok). Every warp executes the loads (warp-collective).
template <int DP>
__device__ __forceinline__ void store_acc_row(uint32_t t_lane, int col0, bool row_ok, __nv_bfloat16* out_row, int D,
                                              float mul) {
#pragma unroll 1
  for (int c = 0; c < DP / 32; ++c) {
    if (32 * c >= D) break;                           // D = 96: the zero-filled chunk is never read
    uint32_t v[32];
    tmem_ld32(t_lane + col0 + 32 * c, v);
    tmem_wait_ld();
    if (row_ok) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int col = 32 * c + 8 * q;
        if (col < D) {                                // D % 8 == 0: groups of 8 never split
          const float* f = reinterpret_cast<const float*>(&v[8 * q]);
          *reinterpret_cast<uint4*>(out_row + col) =
              make_uint4(pack_bf16(f[0] * mul, f[1] * mul), pack_bf16(f[2] * mul, f[3] * mul),
                         pack_bf16(f[4] * mul, f[5] * mul), pack_bf16(f[6] * mul, f[7] * mul));
        }
      }
    }
  }
}

// ---------------------------------------------------------------- kernel 1: Delta = rowsum(dO * O)
__global__ void __launch_bounds__(256) attn_bwd_delta_kernel(const __nv_bfloat16* __restrict__ dO,
                                                             const __nv_bfloat16* __restrict__ O,
                                                             float* __restrict__ Delta, long long rows, int D) {
  const long long row = static_cast<long long>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(dO + row * D);
  const __nv_bfloat162* o = reinterpret_cast<const __nv_bfloat162*>(O + row * D);
  float sum = 0.f;
  for (int c = lane; c < D / 2; c += 32) {   // D is even
    const float2 x = __bfloat1622float2(a[c]), y = __bfloat1622float2(o[c]);
    sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (lane == 0) Delta[row] = sum;
}

// ---------------------------------------------------------------- kernel 2: dK, dV
// Grid (ceil(S/128), B*HKV). Thread t owns key n0 + t (TMEM lane t).
template <int DP, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
attn_bwd_dkdv_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
                     const float* __restrict__ LSE, const float* __restrict__ Delta, __nv_bfloat16* __restrict__ dK,
                     __nv_bfloat16* __restrict__ dV, int H, int HKV, int S, int D, float scale, float scale_log2) {
  using C = CfgKV<DP>;
  constexpr int TM_DV = TM_ACC, TM_DK = TM_ACC + DP;
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles must start on a 1024-byte boundary (descriptor base offset stays 0).
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t s0 = smem_addr(smem);
  float* lse_s = reinterpret_cast<float*>(smem + C::OFF_LSE);       // [2][64], LSE * log2(e), +inf past S
  float* delta_s = reinterpret_cast<float*>(smem + C::OFF_DELTA);   // [2][64], 0 past S
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + C::OFF_BAR);
  uint64_t* full = kv_full + 1;                                       // [2]: Q + dO of a slot
  uint64_t* mma_bar = kv_full + 3;                                    // phase it: S^T/dP^T of step it done
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(kv_full + 4);

  const int n0 = blockIdx.x * BIG;
  const int bkv = blockIdx.y;                    // b * HKV + kv: row of the [B*HKV, S, D] maps
  const int b = bkv / HKV, kv = bkv - b * HKV;
  const int G = H / HKV;
  const int nqb = (S + SMALL - 1) / SMALL;
  const int m_lo = CAUSAL ? n0 / SMALL : 0;      // earlier query blocks see none of these keys
  const int per_head = nqb - m_lo;
  const int steps = G * per_head;                // step it: query head it / per_head, block m_lo + it % per_head

  const int tid = threadIdx.x, warp = tid / 32;
  auto load_tiles = [&](int it) {                // thread 0: Q and dO of step it into slot it & 1
    const int slot = it & 1;
    const int bh = b * H + kv * G + it / per_head;
    const int m = m_lo + it % per_head;
    mbar_arrive_expect_tx(&full[slot], 2 * C::SMALL_BYTES);   // full boxes count, zero fill included
    tma_tile<C::CH>(s0 + C::OFF_Q + slot * C::SMALL_BYTES, SMALL_CHUNK, &map_q, &full[slot], m * SMALL, bh);
    tma_tile<C::CH>(s0 + C::OFF_DO + slot * C::SMALL_BYTES, SMALL_CHUNK, &map_do, &full[slot], m * SMALL, bh);
  };
  auto stage_rows = [&](int it) {                // threads < 64: LSE*log2(e), Delta of step it into slot it & 1
    const int slot = it & 1;
    const int bh = b * H + kv * G + it / per_head;
    const int m = m_lo + it % per_head;
    if (tid < SMALL) {
      const int row = m * SMALL + tid;
      const size_t at = static_cast<size_t>(bh) * S + row;
      lse_s[slot * SMALL + tid] = row < S ? LSE[at] * LOG2E : INFINITY;
      delta_s[slot * SMALL + tid] = row < S ? Delta[at] : 0.f;
    }
  };

  if (tid == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    tma_prefetch_map(&map_do);
    mbar_init(kv_full, 1);
    mbar_init(&full[0], 1);
    mbar_init(&full[1], 1);
    mbar_init(mma_bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();                                  // warp 0 reconverges after thread 0's branch
  if (warp == 0) tmem_alloc(tmem_slot, C::TMEM_COLS);
  stage_rows(0);
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem = *tmem_slot;
  const uint32_t t_lane = tmem + (static_cast<uint32_t>(warp * 32) << 16);   // this warp's 32 lanes
  if (tid == 0) {
    mbar_arrive_expect_tx(kv_full, 2 * C::BIG_BYTES);
    tma_tile<C::CH>(s0, BIG_CHUNK, &map_k, kv_full, n0, bkv);
    tma_tile<C::CH>(s0 + C::OFF_V, BIG_CHUNK, &map_v, kv_full, n0, bkv);
    load_tiles(0);
    mbar_wait(kv_full, 0);
  }
  const int key = n0 + tid;

  for (int it = 0; it < steps; ++it) {
    const int slot = it & 1;
    const int m = m_lo + it % per_head;
    const uint32_t q_tile = s0 + C::OFF_Q + slot * C::SMALL_BYTES;
    const uint32_t do_tile = s0 + C::OFF_DO + slot * C::SMALL_BYTES;
    if (tid == 0) {
      mbar_wait(&full[slot], (it >> 1) & 1);
      tc_fence_after();
      issue_abt<DP>(tmem + TM_S, s0, q_tile);               // S^T = K Q^T
      issue_abt<DP>(tmem + TM_DP, s0 + C::OFF_V, do_tile);  // dP^T = V dO^T
      mma_commit(mma_bar);
    }
    mbar_wait(mma_bar, it & 1);   // S^T, dP^T of step it and every earlier MMA (dV/dK of it-1) complete
    if (tid == 0 && it + 1 < steps) load_tiles(it + 1);   // slot (it+1)&1: its readers (step it-1) are done
    __syncwarp();                 // lanes leave the spin / branch apart; tcgen05.ld is .sync.aligned
    tc_fence_after();

    const float* lse2 = lse_s + slot * SMALL;
    const float* dlt = delta_s + slot * SMALL;
    float p[64], ds[64];
    tmem_row64(t_lane, TM_S, p);
    tmem_row64(t_lane, TM_DP, ds);
#pragma unroll
    for (int c = 0; c < 64; ++c) {                           // c = query row of the block
      const int q = m * SMALL + c;
      float pc = ex2(fmaf(p[c], scale_log2, -lse2[c]));     // rows >= S: lse2 = +inf -> 0
      if (key >= S || (CAUSAL && key > q)) pc = 0.f;
      p[c] = pc;
      ds[c] = pc * (ds[c] - dlt[c]);
    }
    store_op_row(smem + C::OFF_P, tid, p);                  // P^T (bf16): A of dV += P^T dO
    store_op_row(smem + C::OFF_DS, tid, ds);                // dS^T (bf16): A of dK += dS^T Q
    if (it + 1 < steps) stage_rows(it + 1);                 // slot (it+1)&1 was last read in step it-1
    fence_proxy_async();
    tc_fence_before();
    __syncthreads();
    if (tid == 0) {
      tc_fence_after();
      issue_at<DP>(tmem + TM_DV, s0 + C::OFF_P, do_tile, it > 0);    // dV += P^T dO
      issue_at<DP>(tmem + TM_DK, s0 + C::OFF_DS, q_tile, it > 0);    // dK += dS^T Q
    }
  }
  if (tid == 0) mma_commit(mma_bar);                        // phase `steps`: the last dV/dK done
  mbar_wait(mma_bar, steps & 1);
  __syncwarp();
  tc_fence_after();

  // Epilogue: TMEM -> registers -> bf16 stores, nothing past key S or column D.
  const size_t at = (static_cast<size_t>(bkv) * S + key) * D;
  store_acc_row<DP>(t_lane, TM_DK, key < S, dK + at, D, scale);
  store_acc_row<DP>(t_lane, TM_DV, key < S, dV + at, D, 1.f);

  tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    tc_fence_after();
    tmem_free(tmem, C::TMEM_COLS);
  }
}

// ---------------------------------------------------------------- kernel 3: dQ
// Grid (ceil(S/128), B*H). Thread t owns query row m0 + t (TMEM lane t).
template <int DP, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
attn_bwd_dq_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                   const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
                   const float* __restrict__ LSE, const float* __restrict__ Delta, __nv_bfloat16* __restrict__ dQ,
                   int H, int HKV, int S, int D, float scale, float scale_log2) {
  using C = CfgQ<DP>;
  constexpr int TM_DQ = TM_ACC;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t s0 = smem_addr(smem);
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + C::OFF_BAR);
  uint64_t* full = q_full + 1;                     // [2]: K + V of a slot
  uint64_t* mma_bar = q_full + 3;
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(q_full + 4);

  const int mt = CAUSAL ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int m0 = mt * BIG;
  const int bh = blockIdx.y;                       // b * H + h
  const int b = bh / H, h = bh - b * H;
  const int kvh = b * HKV + h / (H / HKV);
  const int kend = CAUSAL ? min(S, m0 + BIG) : S;  // keys past the last row of the tile are invisible
  const int nkb = (kend + SMALL - 1) / SMALL;

  const int tid = threadIdx.x, warp = tid / 32;
  auto load_block = [&](int j) {                   // thread 0: K and V of key block j into slot j & 1
    const int slot = j & 1;
    mbar_arrive_expect_tx(&full[slot], 2 * C::SMALL_BYTES);
    tma_tile<C::CH>(s0 + C::OFF_K + slot * C::SMALL_BYTES, SMALL_CHUNK, &map_k, &full[slot], j * SMALL, kvh);
    tma_tile<C::CH>(s0 + C::OFF_V + slot * C::SMALL_BYTES, SMALL_CHUNK, &map_v, &full[slot], j * SMALL, kvh);
  };
  if (tid == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    tma_prefetch_map(&map_do);
    mbar_init(q_full, 1);
    mbar_init(&full[0], 1);
    mbar_init(&full[1], 1);
    mbar_init(mma_bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();                                  // warp 0 reconverges after thread 0's branch
  if (warp == 0) tmem_alloc(tmem_slot, C::TMEM_COLS);
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem = *tmem_slot;
  const uint32_t t_lane = tmem + (static_cast<uint32_t>(warp * 32) << 16);
  if (tid == 0) {
    mbar_arrive_expect_tx(q_full, 2 * C::BIG_BYTES);
    tma_tile<C::CH>(s0, BIG_CHUNK, &map_q, q_full, m0, bh);
    tma_tile<C::CH>(s0 + C::OFF_DO, BIG_CHUNK, &map_do, q_full, m0, bh);
    load_block(0);
    mbar_wait(q_full, 0);
  }
  const int row = m0 + tid;
  const size_t head = static_cast<size_t>(bh) * S;
  // Rows past S: LSE +inf gives P = 0, so they contribute nothing (and are not stored).
  const float lse2 = row < S ? LSE[head + row] * LOG2E : INFINITY;
  const float dlt = row < S ? Delta[head + row] : 0.f;

  for (int j = 0; j < nkb; ++j) {
    const int slot = j & 1;
    const uint32_t k_tile = s0 + C::OFF_K + slot * C::SMALL_BYTES;
    const uint32_t v_tile = s0 + C::OFF_V + slot * C::SMALL_BYTES;
    if (tid == 0) {
      mbar_wait(&full[slot], (j >> 1) & 1);
      tc_fence_after();
      issue_abt<DP>(tmem + TM_S, s0, k_tile);               // S = Q K^T
      issue_abt<DP>(tmem + TM_DP, s0 + C::OFF_DO, v_tile);  // dP = dO V^T
      mma_commit(mma_bar);
    }
    mbar_wait(mma_bar, j & 1);
    if (tid == 0 && j + 1 < nkb) load_block(j + 1);        // slot (j+1)&1: its readers (block j-1) are done
    __syncwarp();
    tc_fence_after();

    float p[64], ds[64];
    tmem_row64(t_lane, TM_S, p);
    tmem_row64(t_lane, TM_DP, ds);
#pragma unroll
    for (int c = 0; c < 64; ++c) {                           // c = key of the block
      const int key = j * SMALL + c;
      float pc = ex2(fmaf(p[c], scale_log2, -lse2));
      if (key >= S || (CAUSAL && key > row)) pc = 0.f;
      ds[c] = pc * (ds[c] - dlt);
    }
    store_op_row(smem + C::OFF_DS, tid, ds);                // dS (bf16): A of dQ += dS K
    fence_proxy_async();
    tc_fence_before();
    __syncthreads();
    if (tid == 0) {
      tc_fence_after();
      issue_at<DP>(tmem + TM_DQ, s0 + C::OFF_DS, k_tile, j > 0);   // dQ += dS K
    }
  }
  if (tid == 0) mma_commit(mma_bar);                        // phase nkb: the last dQ MMAs done
  mbar_wait(mma_bar, nkb & 1);
  __syncwarp();
  tc_fence_after();

  store_acc_row<DP>(t_lane, TM_DQ, row < S, dQ + (head + row) * D, D, scale);

  tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    tc_fence_after();
    tmem_free(tmem, C::TMEM_COLS);
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
  auto kv_kernel = attn_bwd_dkdv_kernel<DP, causal>;
  auto q_kernel = attn_bwd_dq_kernel<DP, causal>;
  constexpr int kv_bytes = CfgKV<DP>::SMEM, q_bytes = CfgQ<DP>::SMEM;
  static bool attr_set = false;
  if (!attr_set) {
    cudaFuncSetAttribute(kv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kv_bytes);
    cudaFuncSetAttribute(q_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, q_bytes);
    attr_set = true;
  }
  // Resident tiles are 128-row boxes, streamed ones 64-row boxes (dK/dV: K, V resident, Q, dO streamed;
  // dQ: Q, dO resident, K, V streamed).
  CUtensorMap q64, do64, k128, v128, q128, do128, k64, v64;
  if (!make_map(&q64, Q, B * H, S, D, SMALL) || !make_map(&do64, dO, B * H, S, D, SMALL) ||
      !make_map(&k128, K, B * HKV, S, D, BIG) || !make_map(&v128, V, B * HKV, S, D, BIG) ||
      !make_map(&q128, Q, B * H, S, D, BIG) || !make_map(&do128, dO, B * H, S, D, BIG) ||
      !make_map(&k64, K, B * HKV, S, D, SMALL) || !make_map(&v64, V, B * HKV, S, D, SMALL)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  const long long rows = static_cast<long long>(B) * H * S;
  float* delta = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&delta), rows * sizeof(float), stream) != cudaSuccess) {
    fprintf(stderr, "xlang_entry: cudaMallocAsync failed\n");
    return;
  }
  const float scale = 1.f / sqrtf(static_cast<float>(D));
  const float scale_log2 = scale * LOG2E;
  attn_bwd_delta_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(dO, O, delta, rows, D);
  kv_kernel<<<dim3((S + BIG - 1) / BIG, B * HKV), THREADS, kv_bytes, stream>>>(
      q64, k128, v128, do64, LSE, delta, dK, dV, H, HKV, S, D, scale, scale_log2);
  q_kernel<<<dim3((S + BIG - 1) / BIG, B * H), THREADS, q_bytes, stream>>>(
      q128, k64, v64, do128, LSE, delta, dQ, H, HKV, S, D, scale, scale_log2);
  cudaFreeAsync(delta, stream);
}

}  // namespace bbwd

extern "C" void xlang_entry(const __nv_bfloat16* dO, const __nv_bfloat16* Q, const __nv_bfloat16* K,
                            const __nv_bfloat16* V, const __nv_bfloat16* O, const float* LSE, __nv_bfloat16* dQ,
                            __nv_bfloat16* dK, __nv_bfloat16* dV, int B, int H, int HKV, int S, int D,
                            cudaStream_t stream) {
  if (D <= 64)
    bbwd::launch<64>(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, stream);
  else
    bbwd::launch<128>(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, stream);
}
