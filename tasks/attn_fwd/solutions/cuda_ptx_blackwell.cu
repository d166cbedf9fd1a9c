// NOT RUN ON A GPU: no Blackwell GPU exists in this workplace. Compiled for sm_100a and its SASS census
// checked (UTCHMMA, UTMALDG, LDTM/STTM); index arithmetic checked by a CPU model
// (tasks/attn_fwd/verify/attn_fwd_cuda_ptx_blackwell_emulate.py). See tasks/attn_fwd/NOTES_cuda_ptx_blackwell.md.
//
// Expert Blackwell (sm_100a) attention forward for the xlang `attn_fwd` / `attn_fwd_causal` tasks,
// FlashAttention-4 style roles with tcgen05 + tensor memory (TMEM). attn_fwd_causal uses this same file
// with XL_CAUSAL set to 1 (its Task.solution_variant).
//
//   O[b,h,i,:] = softmax_j(scale * Q[b,h,i,:] . K[b,kvh,j,:]) V[b,kvh,j,:],  kvh = h / (H / HKV)
//   LSE[b,h,i] = natural-log sum_j exp(scale * Q.K)
//
// Design
// ------
// * Grid (query tiles of BM = 128 rows, B*H); one CTA per SM (it takes all 512 TMEM columns and more
//   than half of shared memory). 192 threads = 6 warps with fixed roles:
//     warps 0-3  softmax + O correction + epilogue. Thread t of these 128 owns query row t of the tile,
//                which is TMEM lane t (warp w may only touch lanes 32w..32w+31: PTX ISA 9.7.16.8.1).
//     warp 4     TMA producer (lane 0): Q once, then K_j / V_j tiles into two rings of ST slots.
//     warp 5     TMEM allocator (whole warp) and MMA issuer (lane 0, single-thread tcgen05.mma).
// * TMEM (512 columns x 128 lanes, fp32 cells): S buffers at columns 0 and 128 (S_j uses buffer j&1),
//   O at columns 256 .. 256+DP. P_j (bf16) is written over the first 64 columns of S_j's buffer, two
//   bf16 per 32-bit cell (low half = even key), and is the A operand of O += P V read from TMEM.
// * Per key block j (BN = 128 keys), the MMA thread issues
//     S_j = Q K_j^T      M=128 N=128, K=DP in DP/16 steps; A = Q, B = K from 128B-swizzled smem, K-major
//     O  += P_{j-1} V_{j-1}  M=128 N=DP, K=128 in 8 steps; A = P from TMEM, B = V from smem, MN-major
//   and tcgen05.commit's to mbarriers tell the other roles when TMEM/smem may be read or reused.
// * Softmax (exp2 domain, scores scaled by scale*log2(e)): with a lazy rescale, a row's running max m
//   only moves when the new block's max exceeds it by more than 8 (so P <= 2^8 in bf16, harmless);
//   when any row of a warp moved, that warp reads its 32 O rows from TMEM, multiplies by
//   alpha = 2^(m_old - m_new) and writes them back, after PV_{j-1} completed and before P_j is handed
//   to the MMA thread (which orders PV_j after the correction).
// * Head dim: templated on the padded width DP (64 or 128); D = 96 runs with DP = 128. Tiles are DP/64
//   column chunks of 64 bf16 (= one 128-byte swizzle row), each its own TMA box {64, 128, 1}; for D = 96
//   the second chunk's box covers columns 64..127 of a tensor whose inner extent is 96, so TMA zero-fills
//   columns 96..127 (no effect on Q.K^T; those O columns come out as zeros and are never stored).
// * Tails: tensor maps are 3-D [B*heads, S, D], so a box past row S of one head is zero-filled (never
//   the next head's rows). Keys >= S are masked to -inf in the last key block; O/LSE stores are guarded
//   by row < S and column < D.
// * Causal: query tile m visits key blocks 0..m only (BM == BN); the last visited block is the diagonal
//   one and is the only masked one (key > row). Tiles are issued longest-first.
//
// PTX ISA sections (9.0 numbering) each layout decision rests on:
//   9.7.16.4.1  shared memory descriptor: start>>4 (0-13), LBO>>4 (16-29), SBO>>4 (32-45), fixed 0b001
//               at 46-48 (the "version" bits absent from the Hopper wgmma descriptor), base offset 49-51
//               (0: tiles 1024-B aligned), LBO mode 52 (0 = relative), swizzle 61-63 (2 = 128-Byte).
//   9.7.16.3    canonical layouts: K-major SW128 ((8,m),(T,2k)):((8T,SBO),(1,T)): SBO = 1024 B (8 rows
//               of 128 B), LBO unused (1). MN-major SW128 ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)):
//               LBO = bytes between 64-element MN blocks (our next 64-column chunk: 16 KiB),
//               SBO = bytes between 8-row K groups (1024 B).
//   9.7.16.4.2  instruction descriptor kind::f16: D f32 (bit 4), A/B bf16 (bits 7, 10), transpose A/B
//               (bits 15/16: 0 = K-major; V is "transposed" = N-major, bit 16 = 1), N>>3 at 17-22,
//               M>>4 at 24-28.
//   9.7.16.10.2 / 9.7.16.10.5.4  A in TMEM is row-major (K-major); M = 128 cta_group::1 = layout D:
//               row i <-> TMEM lane i, D column j <-> TMEM column base + j.
//   9.7.16.10.9.1 tcgen05.mma syntax, both forms: [d], a-desc, b-desc, idesc, p and [d], [a-tmem], ...
//   9.7.16.7.1  tcgen05.alloc / relinquish_alloc_permit / dealloc (whole warp, power-of-two columns).
//   9.7.16.12.1 tcgen05.commit.mbarrier::arrive::one: one arrival when all prior MMAs of the thread finish.
//   9.7.16.8.3/4/5 tcgen05.ld/st .32x32b.xN (lane l <-> TMEM lane base+l, N consecutive columns),
//               tcgen05.wait::ld / ::st.
//   9.7.16.6.4  canonical sync patterns: commit -> mbarrier wait -> fence::after_thread_sync -> ld;
//               st -> wait::st -> fence::before_thread_sync -> arrive -> wait -> fence::after -> mma.
#ifndef XL_CAUSAL
#define XL_CAUSAL 0
#endif

#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace battn {

constexpr int BM = 128;                  // query rows per CTA = TMEM lanes = MMA M
constexpr int BN = 128;                  // keys per block = N of S = K of P.V
constexpr int THREADS = 192;             // warps 0-3 softmax, 4 producer, 5 MMA
constexpr int PRODUCER_WARP = 4, MMA_WARP = 5;
constexpr int CHUNK = 128 * 128;         // bytes of one 64-column chunk of a 128-row tile (16 KiB)
constexpr int TMEM_COLS = 512;           // S0 [0,128), S1 [128,256), O [256, 256+DP)
constexpr int TMEM_O = 256;
constexpr float RESCALE_THRESHOLD = 8.0f;   // log2 units: P <= 2^8 between rescales

template <int DP>
struct Cfg {
  static constexpr int CH = DP / 64;               // 64-column chunks per row
  static constexpr int TILE_BYTES = CH * CHUNK;    // a Q, K or V tile (128 rows x DP)
  static constexpr int STAGES = DP == 128 ? 3 : 4;
  static constexpr int NBAR = 4 * STAGES + 1 + 2 + 2 + 1;   // k/v full/empty, q, s_full[2], p_full[2], pv_done
  static constexpr int SMEM = TILE_BYTES * (1 + 2 * STAGES) + NBAR * 8 + 16 /*tmem slot*/ + 1024 /*align*/;
  // Shared memory above half the SM's 228 KB keeps a second CTA (which would wait in tcgen05.alloc) away.
  static_assert(SMEM <= 232448 && SMEM > 116 * 1024, "shared memory");
};

// Instruction descriptors, kind::f16 [PTX ISA 9.7.16.4.2].
__host__ __device__ constexpr uint32_t idesc_bf16(int M, int N, int b_mn_major) {
  return (1u << 4) | (1u << 7) | (1u << 10) | (static_cast<uint32_t>(b_mn_major) << 16) |
         (static_cast<uint32_t>(N >> 3) << 17) | (static_cast<uint32_t>(M >> 4) << 24);
}
constexpr uint32_t IDESC_S = idesc_bf16(BM, BN, 0);   // Q (K-major) x K (K-major)
static_assert(IDESC_S == 0x08200490u, "S idesc");

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
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
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

// Shared-memory matrix descriptors [PTX ISA 9.7.16.4.1, canonical layouts 9.7.16.3].
// K-major, 128-byte swizzle: SBO = 1024 B, LBO unused (1). Tiles start on 1024-B boundaries.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t saddr) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 46) | (2ull << 61);
}
// MN-major, 128-byte swizzle (V: key rows of 64 bf16 = 128 B, head-dim contiguous): LBO = distance
// between 64-column blocks of N (the tile's next column chunk, 16 KiB), SBO = between 8-key groups.
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t saddr) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(CHUNK >> 4) << 16) |
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
// D[tmem] (+)= A[tmem] . B[smem]; A is row-major in TMEM (lane = row, 2 bf16 per 32-bit column).
__device__ __forceinline__ void mma_ts(uint32_t d_tmem, uint32_t a_tmem, uint64_t db, uint32_t idesc, uint32_t acc) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n}\n"
      ::"r"(d_tmem), "r"(a_tmem), "l"(db), "r"(idesc), "r"(acc) : "memory");
}
// `bar` gets one arrival once every MMA this thread issued so far has completed.
__device__ __forceinline__ void mma_commit(uint64_t* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
               ::"r"(smem_addr(bar)) : "memory");
}

// Warp-collective: lane l moves 32 consecutive 32-bit columns of TMEM lane (lane(taddr) + l).
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
__device__ __forceinline__ void tmem_st32(uint32_t taddr, const uint32_t (&v)[32]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], "
      "{%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, "
      "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};"
      ::"r"(taddr),
        "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]), "r"(v[4]), "r"(v[5]), "r"(v[6]), "r"(v[7]),
        "r"(v[8]), "r"(v[9]), "r"(v[10]), "r"(v[11]), "r"(v[12]), "r"(v[13]), "r"(v[14]), "r"(v[15]),
        "r"(v[16]), "r"(v[17]), "r"(v[18]), "r"(v[19]), "r"(v[20]), "r"(v[21]), "r"(v[22]), "r"(v[23]),
        "r"(v[24]), "r"(v[25]), "r"(v[26]), "r"(v[27]), "r"(v[28]), "r"(v[29]), "r"(v[30]), "r"(v[31])
      : "memory");
}
__device__ __forceinline__ void tmem_wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tmem_wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);   // .x (low 16 bits) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---------------------------------------------------------------- the kernel
template <int DP, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
attn_fwd_tcgen05(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                 const __grid_constant__ CUtensorMap map_v, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                 int H, int HKV, int S, int D, float scale_log2) {
  using C = Cfg<DP>;
  constexpr int ST = C::STAGES;
  constexpr uint32_t IDESC_O = idesc_bf16(BM, DP, 1);   // P (K-major, TMEM) x V (N-major, smem)

  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles must start on a 1024-byte boundary (descriptor base offset stays 0).
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* sq = smem;                                   // Q tile: CH chunks of 128 rows x 128 B
  uint8_t* sk = sq + C::TILE_BYTES;                     // ST K tiles
  uint8_t* sv = sk + ST * C::TILE_BYTES;                // ST V tiles
  uint64_t* k_full = reinterpret_cast<uint64_t*>(sv + ST * C::TILE_BYTES);
  uint64_t* k_empty = k_full + ST;
  uint64_t* v_full = k_empty + ST;
  uint64_t* v_empty = v_full + ST;
  uint64_t* q_full = v_empty + ST;
  uint64_t* s_full = q_full + 1;                        // [2]: S_j in TMEM buffer j&1 is complete
  uint64_t* p_full = s_full + 2;                        // [2]: P_j written (and O corrected), 128 arrivals
  uint64_t* pv_done = p_full + 2;                       // phase i completes when PV_i has completed
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(pv_done + 1);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int mt = CAUSAL ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int bh = blockIdx.y;                            // b * H + h
  const int b = bh / H, h = bh - b * H;
  const int kvh = b * HKV + h / (H / HKV);              // row of the [B*HKV, S, D] K/V maps
  const int nkb_all = (S + BN - 1) / BN;
  const int nkb = CAUSAL ? min(nkb_all, mt + 1) : nkb_all;   // BM == BN: the diagonal block is block mt

  if (threadIdx.x == PRODUCER_WARP * 32) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    for (int s = 0; s < ST; ++s) {
      mbar_init(&k_full[s], 1);     // producer's arrive.expect_tx (+ TMA bytes)
      mbar_init(&k_empty[s], 1);    // one tcgen05.commit after S_j
      mbar_init(&v_full[s], 1);
      mbar_init(&v_empty[s], 1);    // one tcgen05.commit after PV_j
    }
    mbar_init(q_full, 1);
    mbar_init(&s_full[0], 1);
    mbar_init(&s_full[1], 1);
    mbar_init(&p_full[0], 128);     // every softmax thread
    mbar_init(&p_full[1], 128);
    mbar_init(pv_done, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (warp == MMA_WARP) tmem_alloc(tmem_slot, TMEM_COLS);
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem = *tmem_slot;                     // lane 0, first allocated column

  if (warp == PRODUCER_WARP) {
    // ------------------------------------------------ TMA producer
    if (lane == 0) {
      mbar_arrive_expect_tx(q_full, C::TILE_BYTES);
#pragma unroll
      for (int ch = 0; ch < C::CH; ++ch) tma_load_3d(sq + ch * CHUNK, &map_q, q_full, 64 * ch, mt * BM, bh);
      for (int j = 0; j < nkb; ++j) {
        const int s = j % ST;
        const uint32_t ph = (j / ST) & 1;
        // Full boxes are always counted, zero-filled parts included.
        mbar_wait(&k_empty[s], ph ^ 1);                 // first round: fresh barrier, passes at once
        mbar_arrive_expect_tx(&k_full[s], C::TILE_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sk + s * C::TILE_BYTES + ch * CHUNK, &map_k, &k_full[s], 64 * ch, j * BN, kvh);
        mbar_wait(&v_empty[s], ph ^ 1);
        mbar_arrive_expect_tx(&v_full[s], C::TILE_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sv + s * C::TILE_BYTES + ch * CHUNK, &map_v, &v_full[s], 64 * ch, j * BN, kvh);
      }
    }
  } else if (warp == MMA_WARP) {
    // ------------------------------------------------ MMA issuer (one thread)
    if (lane == 0) {
      const uint32_t q_addr = smem_addr(sq), k_addr0 = smem_addr(sk), v_addr0 = smem_addr(sv);
      // O += P_i V_i: A = P_i from the first 64 columns of S buffer i&1, B = V slot i%ST.
      auto issue_pv = [&](int i) {
        const int pb = i & 1, vs = i % ST;
        mbar_wait(&p_full[pb], (i >> 1) & 1);           // P_i written, O corrected
        mbar_wait(&v_full[vs], (i / ST) & 1);
        tc_fence_after();
        const uint64_t dv = desc_mnmajor(v_addr0 + vs * C::TILE_BYTES);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)            // 16 keys = 8 TMEM columns of P = 2048 B of V
          mma_ts(tmem + TMEM_O, tmem + pb * BN + kk * 8, dv + static_cast<uint64_t>((kk * 2048) >> 4), IDESC_O,
                 (i > 0 || kk > 0) ? 1u : 0u);
        mma_commit(&v_empty[vs]);                       // V slot free once these MMAs have read it
        mma_commit(pv_done);                            // O holds blocks 0..i
      };

      mbar_wait(q_full, 0);
      for (int j = 0; j < nkb; ++j) {
        const int sb = j & 1, ks = j % ST;
        // S buffer sb was last read (as P_{j-2}) by PV_{j-2}: wait for it before overwriting.
        if (j >= 2) mbar_wait(pv_done, (j - 2) & 1);
        mbar_wait(&k_full[ks], (j / ST) & 1);
        tc_fence_after();
        const uint64_t dq = desc_kmajor(q_addr), dk = desc_kmajor(k_addr0 + ks * C::TILE_BYTES);
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
          // chunk kk/4 of the tile, then 32 B per 16 columns inside the swizzled 128-byte row
          const uint64_t off = static_cast<uint64_t>(((kk / 4) * CHUNK + (kk % 4) * 32) >> 4);
          mma_ss(tmem + sb * BN, dq + off, dk + off, IDESC_S, kk > 0 ? 1u : 0u);
        }
        mma_commit(&k_empty[ks]);                       // K slot free
        mma_commit(&s_full[sb]);                        // S_j ready for the softmax warps
        if (j >= 1) issue_pv(j - 1);
      }
      issue_pv(nkb - 1);
    }
  } else {
    // ------------------------------------------------ softmax / correction / epilogue (warps 0-3)
    const int r = threadIdx.x;                          // tile row = TMEM lane
    const int row = mt * BM + r;                        // query row in the head
    const uint32_t t_lane = tmem + (static_cast<uint32_t>(warp * 32) << 16);
    float m = -INFINITY;                                // running max used for P (scaled, log2 units)
    float l = 0.f;                                      // running row sum of P (relative to m)

    for (int j = 0; j < nkb; ++j) {
      const int sb = j & 1;
      mbar_wait(&s_full[sb], (j >> 1) & 1);
      __syncwarp();                                     // lanes leave the spin apart; ld/st are .aligned
      tc_fence_after();
      float s[BN];
#pragma unroll
      for (int c = 0; c < BN / 32; ++c) {
        uint32_t v[32];
        tmem_ld32(t_lane + sb * BN + 32 * c, v);
        tmem_wait_ld();
#pragma unroll
        for (int i = 0; i < 32; ++i) s[32 * c + i] = __uint_as_float(v[i]);
      }
      if (j == nkb - 1) {                               // tail block (and, causal, the diagonal block)
        // key = j*BN + c is masked when key >= S or (causal) key > row, i.e. when c >= lim.
        const int lim = (CAUSAL ? min(S, row + 1) : S) - j * BN;
#pragma unroll
        for (int c = 0; c < BN; ++c)
          if (c >= lim) s[c] = -INFINITY;
      }
      float mx = s[0];
#pragma unroll
      for (int c = 1; c < BN; ++c) mx = fmaxf(mx, s[c]);
      mx *= scale_log2;
      // Lazy rescale: move m only when the block max exceeds it by more than the threshold.
      const float m_new = (mx > m + RESCALE_THRESHOLD) ? mx : m;   // m = -inf: always moves (mx finite)
      const float ms = m_new == -INFINITY ? 0.f : m_new;           // a fully masked row gives 0, not NaN
      const float alpha = ex2(m - ms);                             // 1 when m did not move; 0 from -inf
      float sum = 0.f;
      // P_j over the first 64 columns of S buffer sb: keys 2i, 2i+1 in column i (low half = even key).
      // Every S value of the row is already in registers, so overwriting S columns is safe.
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t p[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const float p0 = ex2(fmaf(s[64 * half + 2 * i], scale_log2, -ms));
          const float p1 = ex2(fmaf(s[64 * half + 2 * i + 1], scale_log2, -ms));
          sum += p0 + p1;
          p[i] = pack_bf16(p0, p1);
        }
        tmem_st32(t_lane + sb * BN + 32 * half, p);
      }
      l = l * alpha + sum;
      if (j >= 1) {
        // O holds blocks 0..j-1 only once PV_{j-1} completed; correct it before PV_j (ordered by p_full).
        mbar_wait(pv_done, (j - 1) & 1);
        __syncwarp();
        tc_fence_after();
        if (__any_sync(0xffffffffu, m_new > m)) {       // warp-uniform: ld/st are warp-collective
#pragma unroll 1
          for (int c = 0; c < DP / 32; ++c) {
            uint32_t v[32];
            tmem_ld32(t_lane + TMEM_O + 32 * c, v);
            tmem_wait_ld();
#pragma unroll
            for (int i = 0; i < 32; ++i) v[i] = __float_as_uint(__uint_as_float(v[i]) * alpha);
            tmem_st32(t_lane + TMEM_O + 32 * c, v);
          }
        }
      }
      m = m_new;
      tmem_wait_st();
      tc_fence_before();
      mbar_arrive(&p_full[sb]);
    }

    // ---- epilogue: O / l in bf16, LSE in natural log; nothing past row S or column D is written
    mbar_wait(pv_done, (nkb - 1) & 1);
    __syncwarp();
    tc_fence_after();
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const bool row_ok = row < S;
    __nv_bfloat16* orow = O + (static_cast<size_t>(bh) * S + row) * D;
#pragma unroll 1
    for (int c = 0; c < DP / 32; ++c) {
      if (32 * c >= D) break;                           // D = 96: the zero-filled chunk is never read
      uint32_t v[32];
      tmem_ld32(t_lane + TMEM_O + 32 * c, v);
      tmem_wait_ld();
      if (row_ok) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int col = 32 * c + 8 * q;
          if (col < D) {                                // D % 8 == 0: 8-column groups are never split
            const float* f = reinterpret_cast<const float*>(&v[8 * q]);
            *reinterpret_cast<uint4*>(orow + col) =
                make_uint4(pack_bf16(f[0] * inv, f[1] * inv), pack_bf16(f[2] * inv, f[3] * inv),
                           pack_bf16(f[4] * inv, f[5] * inv), pack_bf16(f[6] * inv, f[7] * inv));
          }
        }
      }
    }
    if (row_ok) {
      constexpr float LN2 = 0.6931471805599453f;
      LSE[static_cast<size_t>(bh) * S + row] = (m + __log2f(l)) * LN2;
    }
  }

  // ---- teardown: every tcgen05 op has completed (the softmax warps saw the last PV's commit)
  tc_fence_before();
  __syncthreads();
  if (warp == MMA_WARP) {
    __syncwarp();
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
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  }
  return fn;
}

// [heads, S, D] bf16 viewed as a 3-D tensor (innermost first: D, S, heads); box {64, 128, 1} with the
// 128-byte swizzle (64 bf16 = exactly one swizzle row). Out-of-bounds elements are zero-filled, per head.
static bool make_map(CUtensorMap* map, const void* base, int heads, int S, int D) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[3] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(S), static_cast<cuuint64_t>(heads)};
  cuuint64_t strides[2] = {static_cast<cuuint64_t>(D) * 2, static_cast<cuuint64_t>(S) * D * 2};
  cuuint32_t box[3] = {64, 128, 1};
  cuuint32_t elem[3] = {1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int DP>
static void launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O,
                   float* LSE, int B, int H, int HKV, int S, int D, cudaStream_t stream) {
  constexpr bool causal = XL_CAUSAL != 0;
  auto kernel = attn_fwd_tcgen05<DP, causal>;
  constexpr int bytes = Cfg<DP>::SMEM;
  static bool attr_set = false;
  if (!attr_set) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    attr_set = true;
  }
  CUtensorMap mq, mk, mv;
  if (!make_map(&mq, Q, B * H, S, D) || !make_map(&mk, K, B * HKV, S, D) || !make_map(&mv, V, B * HKV, S, D)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(D));
  dim3 grid((S + BM - 1) / BM, B * H);
  kernel<<<grid, THREADS, bytes, stream>>>(mq, mk, mv, O, LSE, H, HKV, S, D, scale_log2);
}

}  // namespace battn

extern "C" void xlang_entry(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                            __nv_bfloat16* O, float* LSE, int B, int H, int HKV, int S, int D, cudaStream_t stream) {
  if (D <= 64)
    battn::launch<64>(Q, K, V, O, LSE, B, H, HKV, S, D, stream);
  else
    battn::launch<128>(Q, K, V, O, LSE, B, H, HKV, S, D, stream);
}
