// Not yet run on a GPU (written 2026-11-29 without device time); see NOTES_cuda_ptx.md
//
// Expert Hopper (sm_90a) attention forward for the xlang `attn_fwd` / `attn_fwd_causal` tasks,
// FlashAttention-3 style. attn_fwd_causal uses this same file with XL_CAUSAL set to 1 (its Task.solution_variant).
//
//   O[b,h,i,:] = softmax_j(scale * Q[b,h,i,:] . K[b,kvh,j,:]) V[b,kvh,j,:],  kvh = h / (H / HKV)
//   LSE[b,h,i] = natural-log sum_j exp(scale * Q.K)
//
// Design
// ------
// * Grid (query tiles of BM = 128 rows, B*H). One CTA = 3 warpgroups (384 threads):
//     WG0  producer: gives registers away (setmaxnreg.dec); one thread loads the Q tile once and then
//          streams K and V tiles (BN = 128 keys) by TMA into a ring of STAGES slots. K and V of a slot
//          have separate full/empty mbarriers because K is released earlier than V.
//     WG1, WG2  consumers (setmaxnreg.inc): each owns 64 query rows. Per key block j:
//          S_j = Q K_j^T   (wgmma m64n128k16, A = Q and B = K from 128B-swizzled smem, both K-major)
//          O  += P_{j-1} V_{j-1}  (wgmma m64n{DP}k16, A = P from registers, B = V from smem, MN-major)
//          Both are issued back to back; the softmax of S_j runs while the P.V wgmma is in flight.
// * Head dim: the kernel is templated on the padded width DP (64 or 128); D = 96 runs with DP = 128.
//   Every tile is stored as DP/64 column chunks of 64 bf16 (= one 128-byte swizzle row): each chunk is
//   its own TMA box {64, rows, 1}. For D = 96 the second chunk's box covers columns 64..127 of a tensor
//   whose inner extent is 96, so TMA zero-fills columns 96..127 (no effect on Q.K^T; those O columns
//   are computed as zeros and never stored).
// * Tails: tensor maps are 3-D [B*heads, S, D], so a box past row S of one head is zero-filled (never
//   the next head's rows). Keys >= S are masked to -inf in the last key block; O/LSE stores are
//   guarded by row < S and column < D.
// * Causal: query tile m only visits key blocks 0..m (BM == BN); only the last (diagonal) block is
//   masked (key > row). Tiles are issued longest-first.
// * Softmax in the exp2 domain: scores are scaled by scale*log2(e) inside one FMA with the max
//   subtraction; LSE = (m + log2 l) * ln 2.
#ifndef XL_CAUSAL
#define XL_CAUSAL 0
#endif

#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hattn {

constexpr int BM = 128;              // query rows per CTA (2 consumer warpgroups x 64)
constexpr int BN = 128;              // keys per block
constexpr int THREADS = 384;
constexpr int CHUNK_Q = BM * 128;    // bytes of one 64-column chunk of the Q tile (16 KiB)
constexpr int CHUNK_KV = BN * 128;   // bytes of one 64-column chunk of a K or V tile (16 KiB)

template <int DP>
struct Cfg {
  static constexpr int CH = DP / 64;                   // 64-column chunks per row
  static constexpr int Q_BYTES = CH * CHUNK_Q;
  static constexpr int KV_BYTES = CH * CHUNK_KV;       // one K (or V) tile
  static constexpr int STAGES = DP == 128 ? 2 : 4;
  static constexpr int BAR_BYTES = (4 * STAGES + 1) * 8;
  static constexpr int SMEM = Q_BYTES + 2 * STAGES * KV_BYTES + BAR_BYTES + 1024 /*alignment slack*/;
};
static_assert(Cfg<128>::SMEM <= 232448 && Cfg<64>::SMEM <= 232448, "shared memory");

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
template <int R> __device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R> __device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Compiler-only pin: reads/writes of these registers may not move across this point (orders them
// after a preceding wgmma.wait_group, which itself does not name the registers).
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
//   bits 0-13 start >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset (0: every tile starts on a
//   1024-byte boundary), 62-63 layout (1 = 128-byte swizzle).
// K-major, 128B swizzle (Q and K: rows of 64 bf16 = 128 B, 8-row groups 1024 B apart): SBO = 1024, LBO
//   unused (1). Advancing K by 16 elements inside the 128-byte row = +32 B on the start address.
__device__ __forceinline__ uint64_t desc_kmajor(uint32_t saddr) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// MN-major, 128B swizzle (V: key rows of 64 bf16 = 128 B, N = head-dim contiguous). Canonical layout
//   ((64 n, n-blocks), (8 k, k-groups)) : ((1 elem, LBO), (128 B, SBO)): LBO = distance between
//   64-column blocks of N (the next column chunk of the V tile, CHUNK_KV), SBO = distance between
//   8-key groups = 1024 B. Advancing K (keys) by 16 = +2048 B (stays on a 1024-B boundary).
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t saddr) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(CHUNK_KV >> 4) << 16) |
         (64ull << 32) | (1ull << 62);
}

// D[64 x 128] (+)= A[64 x 16] * B[128 x 16]^T; A and B from shared memory, both K-major.
// accumulate == 0: D = A*B (old D ignored).
template <int ACC>
__device__ __forceinline__ void wgmma_ss_m64n128(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "n"(ACC));
}

// D[64 x 64] += A[64 x 16] * B[16 x 64]; A from registers (4 x bf16x2 per thread), B from shared
// memory in MN-major (N contiguous) layout: imm-trans-b = 1.
__device__ __forceinline__ void wgmma_rs_m64n64_tb(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                                   uint32_t a3, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "n"(1));
}

// D[64 x 128] += A[64 x 16] * B[16 x 128]; A from registers (4 x bf16x2 per thread), B from shared
// memory in MN-major (N contiguous) layout: imm-trans-b = 1.
__device__ __forceinline__ void wgmma_rs_m64n128_tb(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                                   uint32_t a3, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "n"(1));
}

// O += P V over one BN-key block. P (the bf16 probabilities of 64 rows x BN keys) is in registers in the
// register-A fragment order: k-step kk uses p[4kk .. 4kk+3] (see the mapping note in the kernel).
template <int DP>
__device__ __forceinline__ void issue_pv(float (&o)[DP / 2], const uint32_t (&p)[BN / 4], uint32_t v_addr) {
  const uint64_t d0 = desc_mnmajor(v_addr);
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    const uint64_t db = d0 + static_cast<uint64_t>((kk * 16 * 128) >> 4);   // 16 key rows further
    if constexpr (DP == 128)
      wgmma_rs_m64n128_tb(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], db);
    else
      wgmma_rs_m64n64_tb(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], db);
  }
}

// S = Q_c K^T for this warpgroup's 64 query rows (q_addr already offset to them) and one K tile.
template <int DP>
__device__ __forceinline__ void issue_qk(float (&s)[BN / 2], uint32_t q_addr, uint32_t k_addr) {
  const uint64_t dq = desc_kmajor(q_addr), dk = desc_kmajor(k_addr);
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk) {
    // chunk kk/4 of the tile, then 32 B per 16 columns inside the swizzled 128-byte row
    const uint64_t da = dq + static_cast<uint64_t>(((kk / 4) * CHUNK_Q + (kk % 4) * 32) >> 4);
    const uint64_t db = dk + static_cast<uint64_t>(((kk / 4) * CHUNK_KV + (kk % 4) * 32) >> 4);
    if (kk == 0)
      wgmma_ss_m64n128<0>(s, da, db);
    else
      wgmma_ss_m64n128<1>(s, da, db);
  }
}

template <int DP, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
attn_fwd_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                const __grid_constant__ CUtensorMap map_v, __nv_bfloat16* __restrict__ O, float* __restrict__ LSE,
                int H, int HKV, int S, int D, float scale_log2) {
  using C = Cfg<DP>;
  constexpr int ST = C::STAGES;
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles must start on a 1024-byte boundary (base-offset field stays 0).
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* sq = smem;                                   // Q tile: CH chunks of 128 rows x 128 B
  uint8_t* sk = sq + C::Q_BYTES;                        // ST K tiles
  uint8_t* sv = sk + ST * C::KV_BYTES;                  // ST V tiles
  uint64_t* full_k = reinterpret_cast<uint64_t*>(sv + ST * C::KV_BYTES);
  uint64_t* full_v = full_k + ST;
  uint64_t* empty_k = full_v + ST;
  uint64_t* empty_v = empty_k + ST;
  uint64_t* q_full = empty_v + ST;

  const int mt = CAUSAL ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int bh = blockIdx.y;                            // b * H + h
  const int b = bh / H, h = bh - b * H;
  const int kvh = b * HKV + h / (H / HKV);              // row of the [B*HKV, S, D] K/V maps
  const int nkb_all = (S + BN - 1) / BN;
  const int nkb = CAUSAL ? min(nkb_all, ((mt + 1) * BM + BN - 1) / BN) : nkb_all;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    for (int s = 0; s < ST; ++s) {
      mbar_init(&full_k[s], 1);        // producer's arrive.expect_tx
      mbar_init(&full_v[s], 1);
      mbar_init(&empty_k[s], 8);       // lane 0 of each of the 8 consumer warps
      mbar_init(&empty_v[s], 8);
    }
    mbar_init(q_full, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ------------------------------------------------ producer
    regs_dec<40>();
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(q_full, C::Q_BYTES);
#pragma unroll
      for (int ch = 0; ch < C::CH; ++ch) tma_load_3d(sq + ch * CHUNK_Q, &map_q, q_full, 64 * ch, mt * BM, bh);
      for (int j = 0; j < nkb; ++j) {
        const int s = j % ST;
        const uint32_t ph = (j / ST) & 1;
        // Full boxes are always counted, zero-filled parts included.
        mbar_wait(&empty_k[s], ph ^ 1);                 // first round: fresh barrier, passes at once
        mbar_arrive_expect_tx(&full_k[s], C::KV_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sk + s * C::KV_BYTES + ch * CHUNK_KV, &map_k, &full_k[s], 64 * ch, j * BN, kvh);
        mbar_wait(&empty_v[s], ph ^ 1);
        mbar_arrive_expect_tx(&full_v[s], C::KV_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sv + s * C::KV_BYTES + ch * CHUNK_KV, &map_v, &full_v[s], 64 * ch, j * BN, kvh);
      }
    }
  } else {
    // ------------------------------------------------ consumers
    regs_inc<232>();
    const int c = wg - 1;                               // which 64-row half of the Q tile
    const int t = threadIdx.x & 127;
    const int warp = t >> 5, lane = t & 31;
    const int g = lane >> 2, qd = lane & 3;
    // Accumulator fragment [PTX ISA: wgmma Register Fragments, m64nNk16 D]: register i of this thread
    // holds row 16*warp + g + 8*((i/2)%2), column 8*(i/4) + 2*qd + (i%2). Rows r0 (i%4 < 2), r0+8.
    const int r0 = mt * BM + c * 64 + warp * 16 + g;    // global query row

    float sacc[BN / 2];        // S, then P in fp32, for this thread's 2 rows x 32 keys
    float oacc[DP / 2];        // O accumulator, 2 rows x DP/4 columns
    uint32_t pf[BN / 4];       // P in bf16 pairs = register-A fragments of the P.V wgmma
#pragma unroll
    for (int i = 0; i < DP / 2; ++i) oacc[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY;   // running row max, already times scale*log2(e)
    float l0 = 0.f, l1 = 0.f;               // this thread's part of the running row sum

    const uint32_t q_addr = smem_addr(sq) + c * 64 * 128;   // this warpgroup's 64 rows: +8 KiB per chunk
    const uint32_t k_addr0 = smem_addr(sk), v_addr0 = smem_addr(sv);

    // Online softmax of the S block in sacc (block index j). On return sacc holds P = exp2(S*c - m_new)
    // (fp32); alpha = exp2(m_old - m_new) per row for the O rescale.
    auto softmax = [&](int j, bool masked, float& alpha0, float& alpha1) {
      if (masked) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
          const int key = j * BN + 8 * (i / 4) + 2 * qd + (i % 2);
          const int row = r0 + 8 * ((i / 2) % 2);
          if (key >= S || (CAUSAL && key > row)) sacc[i] = -INFINITY;
        }
      }
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int i = 0; i < BN / 2; i += 4) {
        mx0 = fmaxf(mx0, fmaxf(sacc[i], sacc[i + 1]));
        mx1 = fmaxf(mx1, fmaxf(sacc[i + 2], sacc[i + 3]));
      }
      // The 4 threads of a quad (lanes 4g..4g+3) hold the same two rows.
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float mn0 = fmaxf(m0, mx0 * scale_log2), mn1 = fmaxf(m1, mx1 * scale_log2);
      // A row with no visible key so far keeps m = -inf; subtract 0 then so that exp2 gives 0, not NaN.
      const float ms0 = mn0 == -INFINITY ? 0.f : mn0, ms1 = mn1 == -INFINITY ? 0.f : mn1;
      alpha0 = ex2(m0 - ms0);
      alpha1 = ex2(m1 - ms1);
      m0 = mn0;
      m1 = mn1;
      float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
      for (int i = 0; i < BN / 2; i += 4) {
        sacc[i] = ex2(fmaf(sacc[i], scale_log2, -ms0));
        sacc[i + 1] = ex2(fmaf(sacc[i + 1], scale_log2, -ms0));
        sacc[i + 2] = ex2(fmaf(sacc[i + 2], scale_log2, -ms1));
        sacc[i + 3] = ex2(fmaf(sacc[i + 3], scale_log2, -ms1));
        sum0 += sacc[i] + sacc[i + 1];
        sum1 += sacc[i + 2] + sacc[i + 3];
      }
      l0 = l0 * alpha0 + sum0;
      l1 = l1 * alpha1 + sum1;
    };
    // S accumulator -> register-A fragments of P.V. For k-step kk (keys 16kk..16kk+15) the A fragment is
    // [PTX ISA: wgmma Register Fragments, m64nNk16 A]: a0 = (row g, k 2qd,2qd+1), a1 = (row g+8, same k),
    // a2 = (row g, k 2qd+8, +9), a3 = (row g+8, k 2qd+8, +9). The accumulator registers 8kk+{0,1} hold
    // (row g, key 16kk+2qd+{0,1}), 8kk+{2,3} (row g+8, same keys), 8kk+{4,5} (row g, key 16kk+8+2qd+{0,1}),
    // 8kk+{6,7} (row g+8, those keys). So a_r of step kk = pack(s[8kk+2r], s[8kk+2r+1]) = pf[4kk+r],
    // i.e. pf[n] = pack(s[2n], s[2n+1]).
    auto pack_p = [&]() {
#pragma unroll
      for (int n = 0; n < BN / 4; ++n) pf[n] = pack_bf16(sacc[2 * n], sacc[2 * n + 1]);
    };

    mbar_wait(q_full, 0);

    // ---- key block 0: S only
    mbar_wait(&full_k[0], 0);
    wgmma_fence();
    issue_qk<DP>(sacc, q_addr, k_addr0);
    wgmma_commit();
    wgmma_wait<0>();
    pin(sacc);
    if (lane == 0) mbar_arrive(&empty_k[0]);
    {
      float a0, a1;
      softmax(0, nkb == 1, a0, a1);
    }
    pack_p();

    // ---- key blocks 1 .. nkb-1: S_j and O += P_{j-1} V_{j-1} in flight together
    for (int j = 1; j < nkb; ++j) {
      const int sj = j % ST, sp = (j - 1) % ST;
      mbar_wait(&full_k[sj], (j / ST) & 1);
      wgmma_fence();
      issue_qk<DP>(sacc, q_addr, k_addr0 + sj * C::KV_BYTES);
      wgmma_commit();
      mbar_wait(&full_v[sp], ((j - 1) / ST) & 1);
      wgmma_fence();                                    // ptxas would insert this one itself (C7519)
      issue_pv<DP>(oacc, pf, v_addr0 + sp * C::KV_BYTES);
      wgmma_commit();
      wgmma_wait<1>();                                  // S_j done (P.V may still run)
      pin(sacc);
      if (lane == 0) mbar_arrive(&empty_k[sj]);
      float a0, a1;
      softmax(j, j == nkb - 1, a0, a1);
      wgmma_wait<0>();                                  // P_{j-1} V_{j-1} done
      pin(oacc);
      if (lane == 0) mbar_arrive(&empty_v[sp]);
#pragma unroll
      for (int i = 0; i < DP / 2; i += 4) {
        oacc[i] *= a0;
        oacc[i + 1] *= a0;
        oacc[i + 2] *= a1;
        oacc[i + 3] *= a1;
      }
      pack_p();
    }

    // ---- last P.V
    {
      const int sp = (nkb - 1) % ST;
      mbar_wait(&full_v[sp], ((nkb - 1) / ST) & 1);
      wgmma_fence();
      issue_pv<DP>(oacc, pf, v_addr0 + sp * C::KV_BYTES);
      wgmma_commit();
      wgmma_wait<0>();
      pin(oacc);
      if (lane == 0) mbar_arrive(&empty_v[sp]);
    }

    // ---- epilogue: O / l in bf16, LSE in natural log; nothing past row S or column D is written
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const size_t head = static_cast<size_t>(bh) * S;
    __nv_bfloat16* o0 = O + (head + r0) * D;
    __nv_bfloat16* o1 = o0 + 8 * static_cast<size_t>(D);
    const bool ok0 = r0 < S, ok1 = r0 + 8 < S;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int col = 8 * n + 2 * qd;
      if (col < D) {   // D is even, so a column pair is never split by the edge
        if (ok0)
          *reinterpret_cast<__nv_bfloat162*>(o0 + col) = __floats2bfloat162_rn(oacc[4 * n] * inv0, oacc[4 * n + 1] * inv0);
        if (ok1)
          *reinterpret_cast<__nv_bfloat162*>(o1 + col) =
              __floats2bfloat162_rn(oacc[4 * n + 2] * inv1, oacc[4 * n + 3] * inv1);
      }
    }
    if (qd == 0) {
      constexpr float LN2 = 0.6931471805599453f;
      if (ok0) LSE[head + r0] = (m0 + __log2f(l0)) * LN2;
      if (ok1) LSE[head + r0 + 8] = (m1 + __log2f(l1)) * LN2;
    }
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
static void launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V, __nv_bfloat16* O,
                   float* LSE, int B, int H, int HKV, int S, int D, cudaStream_t stream) {
  constexpr bool causal = XL_CAUSAL != 0;
  auto kernel = attn_fwd_kernel<DP, causal>;
  constexpr int bytes = Cfg<DP>::SMEM;
  static bool attr_set = false;
  if (!attr_set) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    attr_set = true;
  }
  CUtensorMap mq, mk, mv;
  if (!make_map(&mq, Q, B * H, S, D, BM) || !make_map(&mk, K, B * HKV, S, D, BN) ||
      !make_map(&mv, V, B * HKV, S, D, BN)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(D));
  dim3 grid((S + BM - 1) / BM, B * H);
  kernel<<<grid, THREADS, bytes, stream>>>(mq, mk, mv, O, LSE, H, HKV, S, D, scale_log2);
}

}  // namespace hattn

extern "C" void xlang_entry(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                            __nv_bfloat16* O, float* LSE, int B, int H, int HKV, int S, int D, cudaStream_t stream) {
  if (D <= 64)
    hattn::launch<64>(Q, K, V, O, LSE, B, H, HKV, S, D, stream);
  else
    hattn::launch<128>(Q, K, V, O, LSE, B, H, HKV, S, D, stream);
}
