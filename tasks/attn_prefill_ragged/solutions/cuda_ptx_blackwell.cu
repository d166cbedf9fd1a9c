// NOT RUN ON A GPU: no Blackwell GPU exists in this workplace (written 2026-12-02 in a session without device
// time). Compiled for sm_100a and its SASS census checked (UTCHMMA, UTMALDG, LDTM/STTM); its tile walk, masks and
// TMEM accumulation order checked by a CPU model (../verify/prefill_cuda_ptx_blackwell_emulate.py). See
// ../NOTES_cuda_ptx_blackwell.md.
//
// Expert Blackwell (sm_100a) causal prefill over a ragged batch for xlang's `attn_prefill_ragged`: the attn_fwd
// tcgen05 expert (tasks/attn_fwd/solutions/cuda_ptx_blackwell.cu, itself never run) over cu_seqlens, as the Hopper
// prefill expert (cuda_ptx_hopper.cu here) is the attn_fwd wgmma one over cu_seqlens.
//
//   out[s+i, h, :] = softmax_{j <= i}(scale * q[s+i, h, :] . k[s+j, kvh, :]) v[s+j, kvh, :],  kvh = h / (H / HKV),
//   for sequence b at rows s = cu_seqlens[b] .. cu_seqlens[b+1] - 1 of q [T, H, D], k / v [T, HKV, D], out [T, H, D].
//
// Design (what differs from attn_fwd's Blackwell expert)
// ------
// * Grid (ceil(T / BM) + B, H): at least sum_b ceil(n_b / BM) tiles. Every thread walks cu_seqlens (B loads; no
//   host copy: cu_seqlens changes from call to call) to its sequence b and query tile mt, the sequence's last tile
//   first; CTAs past the last tile return before any barrier or TMEM allocation.
// * TMA over the packed tensors: 3-D maps [T, heads, D] (innermost first: D, heads, T), boxes {64, 1, rows}: one
//   head's rows, 128 B each, so the 128B-swizzled shared layout and the descriptors are attn_fwd's. A box that runs
//   past the sequence's end holds the next sequence's rows (TMA zero-fills only past T): those keys are masked for
//   every row of the sequence (key >= n), and those query rows are computed and never stored.
// * Masks: tile mt visits key blocks 0 .. ceil(min(n, (mt+1) BM) / BN) - 1; a block is masked (key j BN + c is
//   dropped when c >= min(n, row + 1) - j BN) when it reaches past the tile's first row or past n. With BN = BM
//   (D 128) that is the last block only, as in attn_fwd; with BN = 64 (D 256) the last two.
// * The output is stored from registers (16-byte stores) for rows < n only: a TMA store would write the next
//   sequence's rows. No LSE (the contract has none).
// * Head dims 128 and 256 (the contract's). TMEM: S_j in buffer j&1 at columns [0, BN) / [BN, 2 BN), O at
//   [256, 256 + D) of the 512 allocated columns. D 256 with BN = 128 would fill TMEM exactly (2 x 128 + 256) but
//   not shared memory (Q 64 KiB + a K and a V tile of 64 KiB each per stage), so D 256 takes BN = 64: S = Q K^T as
//   16 x M128 N64 K16, O += P V as 4 x M128 N256 K16 (one instruction per 16 keys covers all 256 columns: V's four
//   64-column chunks LBO = 8 KiB apart), 2 stages: 64 + 2 x (32 + 32) = 192 KiB. D 128 is attn_fwd's configuration
//   (BN 128, 3 stages, 224 KiB). Either way above half of the SM's shared memory: one CTA per SM, so a second CTA
//   never waits in tcgen05.alloc.
// * Roles, barriers, the lazy rescale (threshold 8 in log2 units) and the O correction are attn_fwd's unchanged:
//   warps 0-3 softmax / correction / epilogue (thread t = query row t = TMEM lane t), warp 4 the TMA producer,
//   warp 5 the TMEM allocator and the single MMA-issuing thread (see attn_fwd's notes for the barrier table).
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace bpre {

constexpr int BM = 128;                  // query rows per CTA = TMEM lanes = MMA M
constexpr int THREADS = 192;             // warps 0-3 softmax, 4 producer, 5 MMA
constexpr int PRODUCER_WARP = 4, MMA_WARP = 5;
constexpr int CHUNK_Q = BM * 128;        // bytes of one 64-column chunk of the Q tile (16 KiB)
constexpr int TMEM_COLS = 512;           // S0 [0, BN), S1 [BN, 2 BN), O [256, 256 + DP)
constexpr int TMEM_O = 256;
constexpr float RESCALE_THRESHOLD = 8.0f;   // log2 units: P <= 2^8 between rescales

template <int DP>
struct Cfg {
  static constexpr int BN = DP == 256 ? 64 : 128;     // keys per block = N of S = K of P.V
  static constexpr int CH = DP / 64;                   // 64-column chunks per row
  static constexpr int CHUNK_KV = BN * 128;            // bytes of one 64-column chunk of a K or V tile
  static constexpr int Q_BYTES = CH * CHUNK_Q;
  static constexpr int KV_BYTES = CH * CHUNK_KV;       // one K (or V) tile
  static constexpr int STAGES = DP == 256 ? 2 : 3;
  static constexpr int NBAR = 4 * STAGES + 1 + 2 + 2 + 1;   // k/v full/empty, q, s_full[2], p_full[2], pv_done
  static constexpr int SMEM = Q_BYTES + 2 * STAGES * KV_BYTES + NBAR * 8 + 16 /*tmem slot*/ + 1024 /*align*/;
  // Shared memory above half the SM's 228 KB keeps a second CTA (which would wait in tcgen05.alloc) away.
  static_assert(SMEM <= 232448 && SMEM > 116 * 1024, "shared memory");
  static_assert(2 * BN <= TMEM_O && TMEM_O + DP <= TMEM_COLS, "TMEM columns");
};

// Instruction descriptors, kind::f16 [PTX ISA 9.7.16.4.2].
__host__ __device__ constexpr uint32_t idesc_bf16(int M, int N, int b_mn_major) {
  return (1u << 4) | (1u << 7) | (1u << 10) | (static_cast<uint32_t>(b_mn_major) << 16) |
         (static_cast<uint32_t>(N >> 3) << 17) | (static_cast<uint32_t>(M >> 4) << 24);
}
static_assert(idesc_bf16(BM, 128, 0) == 0x08200490u && idesc_bf16(BM, 128, 1) == 0x08210490u, "D 128 idescs");
static_assert(idesc_bf16(BM, 64, 0) == 0x08100490u && idesc_bf16(BM, 256, 1) == 0x08410490u, "D 256 idescs");

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
// between 64-column blocks of N (the tile's next column chunk, chunk_bytes), SBO = between 8-key groups.
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
template <int DP>
__global__ void __launch_bounds__(THREADS, 1)
prefill_tcgen05(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                const __grid_constant__ CUtensorMap map_v, const int* __restrict__ cu_seqlens,
                __nv_bfloat16* __restrict__ out, int B, int H, int HKV, float scale_log2) {
  using C = Cfg<DP>;
  constexpr int ST = C::STAGES, BN = C::BN;
  constexpr uint32_t IDESC_S = idesc_bf16(BM, BN, 0);   // Q (K-major) x K (K-major)
  constexpr uint32_t IDESC_O = idesc_bf16(BM, DP, 1);   // P (K-major, TMEM) x V (N-major, smem)

  // ---- which sequence and query tile: walk cu_seqlens (every thread; B cached loads)
  int b = 0, mt = -1, seq_start = 0, n = 0;
  {
    int x = blockIdx.x;
    for (; b < B; ++b) {
      seq_start = cu_seqlens[b];
      n = cu_seqlens[b + 1] - seq_start;
      const int tiles = (n + BM - 1) / BM;
      if (x < tiles) {
        mt = tiles - 1 - x;                             // the sequence's last (longest) tile first
        break;
      }
      x -= tiles;
    }
  }
  if (mt < 0) return;                                   // past the last tile: before any barrier or TMEM alloc

  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles must start on a 1024-byte boundary (descriptor base offset stays 0).
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* sq = smem;                                   // Q tile: CH chunks of 128 rows x 128 B
  uint8_t* sk = sq + C::Q_BYTES;                        // ST K tiles
  uint8_t* sv = sk + ST * C::KV_BYTES;                  // ST V tiles
  uint64_t* k_full = reinterpret_cast<uint64_t*>(sv + ST * C::KV_BYTES);
  uint64_t* k_empty = k_full + ST;
  uint64_t* v_full = k_empty + ST;
  uint64_t* v_empty = v_full + ST;
  uint64_t* q_full = v_empty + ST;
  uint64_t* s_full = q_full + 1;                        // [2]: S_j in TMEM buffer j&1 is complete
  uint64_t* p_full = s_full + 2;                        // [2]: P_j written (and O corrected), 128 arrivals
  uint64_t* pv_done = p_full + 2;                       // phase i completes when PV_i has completed
  uint32_t* tmem_slot = reinterpret_cast<uint32_t*>(pv_done + 1);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y;
  const int kvh = h / (H / HKV);
  const int nkb = (min(n, (mt + 1) * BM) + BN - 1) / BN;   // key blocks up to the tile's last row (causal)

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
      mbar_arrive_expect_tx(q_full, C::Q_BYTES);
#pragma unroll
      for (int ch = 0; ch < C::CH; ++ch)
        tma_load_3d(sq + ch * CHUNK_Q, &map_q, q_full, 64 * ch, h, seq_start + mt * BM);
      for (int j = 0; j < nkb; ++j) {
        const int s = j % ST;
        const uint32_t ph = (j / ST) & 1;
        // Full boxes are always counted, zero-filled parts included.
        mbar_wait(&k_empty[s], ph ^ 1);                 // first round: fresh barrier, passes at once
        mbar_arrive_expect_tx(&k_full[s], C::KV_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sk + s * C::KV_BYTES + ch * C::CHUNK_KV, &map_k, &k_full[s], 64 * ch, kvh, seq_start + j * BN);
        mbar_wait(&v_empty[s], ph ^ 1);
        mbar_arrive_expect_tx(&v_full[s], C::KV_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sv + s * C::KV_BYTES + ch * C::CHUNK_KV, &map_v, &v_full[s], 64 * ch, kvh, seq_start + j * BN);
      }
    }
  } else if (warp == MMA_WARP) {
    // ------------------------------------------------ MMA issuer (one thread)
    if (lane == 0) {
      const uint32_t q_addr = smem_addr(sq), k_addr0 = smem_addr(sk), v_addr0 = smem_addr(sv);
      // O += P_i V_i: A = P_i from the first BN/2 columns of S buffer i&1, B = V slot i%ST.
      auto issue_pv = [&](int i) {
        const int pb = i & 1, vs = i % ST;
        mbar_wait(&p_full[pb], (i >> 1) & 1);           // P_i written, O corrected
        mbar_wait(&v_full[vs], (i / ST) & 1);
        tc_fence_after();
        const uint64_t dv = desc_mnmajor(v_addr0 + vs * C::KV_BYTES, C::CHUNK_KV);
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
        const uint64_t dq = desc_kmajor(q_addr), dk = desc_kmajor(k_addr0 + ks * C::KV_BYTES);
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
          // chunk kk/4 of the tile, then 32 B per 16 columns inside the swizzled 128-byte row
          const uint64_t offq = static_cast<uint64_t>(((kk / 4) * CHUNK_Q + (kk % 4) * 32) >> 4);
          const uint64_t offk = static_cast<uint64_t>(((kk / 4) * C::CHUNK_KV + (kk % 4) * 32) >> 4);
          mma_ss(tmem + sb * BN, dq + offq, dk + offk, IDESC_S, kk > 0 ? 1u : 0u);
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
    const int row = mt * BM + r;                        // query row within the sequence
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
      // Blocks that reach past the tile's first row (causal) or past the sequence's end (CTA-uniform test):
      // key j*BN + c is masked when key > row or key >= n, i.e. when c >= lim.
      if (j * BN + BN - 1 > mt * BM || j * BN + BN > n) {
        const int lim = min(n, row + 1) - j * BN;
#pragma unroll
        for (int c = 0; c < BN; ++c)
          if (c >= lim) s[c] = -INFINITY;
      }
      float mx = s[0];
#pragma unroll
      for (int c = 1; c < BN; ++c) mx = fmaxf(mx, s[c]);
      mx *= scale_log2;
      // Lazy rescale: move m only when the block max exceeds it by more than the threshold.
      const float m_new = (mx > m + RESCALE_THRESHOLD) ? mx : m;   // m = -inf: moves once mx is finite
      const float ms = m_new == -INFINITY ? 0.f : m_new;           // a fully masked row gives 0, not NaN
      const float alpha = ex2(m - ms);                             // 1 when m did not move; 0 from -inf
      float sum = 0.f;
      // P_j over the first BN/2 columns of S buffer sb: keys 2i, 2i+1 in column i (low half = even key).
      // Every S value of the row is already in registers, so overwriting S columns is safe.
#pragma unroll
      for (int part = 0; part < BN / 64; ++part) {
        uint32_t p[32];
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const float p0 = ex2(fmaf(s[64 * part + 2 * i], scale_log2, -ms));
          const float p1 = ex2(fmaf(s[64 * part + 2 * i + 1], scale_log2, -ms));
          sum += p0 + p1;
          p[i] = pack_bf16(p0, p1);
        }
        tmem_st32(t_lane + sb * BN + 32 * part, p);
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

    // ---- epilogue: O / l in bf16, only the sequence's rows (row < n); D == DP
    mbar_wait(pv_done, (nkb - 1) & 1);
    __syncwarp();
    tc_fence_after();
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const bool row_ok = row < n;
    __nv_bfloat16* orow = out + (static_cast<size_t>(seq_start + row) * H + h) * DP;
#pragma unroll 1
    for (int c = 0; c < DP / 32; ++c) {
      uint32_t v[32];
      tmem_ld32(t_lane + TMEM_O + 32 * c, v);           // warp-collective: every lane loads, stores are guarded
      tmem_wait_ld();
      if (row_ok) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float* f = reinterpret_cast<const float*>(&v[8 * q]);
          *reinterpret_cast<uint4*>(orow + 32 * c + 8 * q) =
              make_uint4(pack_bf16(f[0] * inv, f[1] * inv), pack_bf16(f[2] * inv, f[3] * inv),
                         pack_bf16(f[4] * inv, f[5] * inv), pack_bf16(f[6] * inv, f[7] * inv));
        }
      }
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

// Packed [T, heads, D] bf16 as a 3-D tensor (innermost first: D, heads, T); box {64, 1, rows}: 64 columns (one
// 128-byte swizzle row) of one head over `rows` tokens. Rows past T are zero-filled.
static bool make_map(CUtensorMap* map, const void* base, int T, int heads, int D, int box_rows) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[3] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(T)};
  cuuint64_t strides[2] = {static_cast<cuuint64_t>(D) * 2, static_cast<cuuint64_t>(heads) * D * 2};
  cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(box_rows)};
  cuuint32_t elem[3] = {1, 1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int DP>
static void launch(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* cu_seqlens,
                   __nv_bfloat16* out, int B, int T, int H, int HKV, cudaStream_t stream) {
  using C = Cfg<DP>;
  auto kernel = prefill_tcgen05<DP>;
  static bool attr_set = false;
  if (!attr_set) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    attr_set = true;
  }
  CUtensorMap mq, mk, mv;
  if (!make_map(&mq, q, T, H, DP, BM) || !make_map(&mk, k, T, HKV, DP, C::BN) ||
      !make_map(&mv, v, T, HKV, DP, C::BN)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(DP));
  dim3 grid((T + BM - 1) / BM + B, H);   // sum_b ceil(n_b / BM) <= ceil(T / BM) + B
  kernel<<<grid, THREADS, C::SMEM, stream>>>(mq, mk, mv, cu_seqlens, out, B, H, HKV, scale_log2);
}

}  // namespace bpre

extern "C" void xlang_entry(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                            const int* cu_seqlens, __nv_bfloat16* out, int B, int T, int H, int HKV, int D,
                            cudaStream_t stream) {
  if (D == 128)
    bpre::launch<128>(q, k, v, cu_seqlens, out, B, T, H, HKV, stream);
  else if (D == 256)
    bpre::launch<256>(q, k, v, cu_seqlens, out, B, T, H, HKV, stream);
  else
    fprintf(stderr, "xlang_entry: head dim %d is not 128 or 256\n", D);
}
