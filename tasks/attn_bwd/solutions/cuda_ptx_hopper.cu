// NEVER run on a GPU (written 2026-11-30 without device time); see tasks/attn_bwd/NOTES_cuda_ptx.md
//
// Expert Hopper (sm_90a) attention backward for the xlang `attn_bwd` / `attn_bwd_causal` tasks.
// attn_bwd_causal uses this same file with XL_CAUSAL set to 1 (its Task.solution_variant).
//
// Given dO and the forward's Q, K, V, O, LSE (natural log of the scaled scores), with scale = 1/sqrt(D) and
// kv head = h / (H / HKV):
//   P  = exp(scale Q K^T - LSE)        recomputed per tile, never stored
//   dV = P^T dO                        dP = dO V^T
//   Delta = rowsum(dO * O)             dS = P * (dP - Delta)
//   dQ = scale dS K                    dK = scale dS^T Q
// dK and dV of a kv head sum the G = H / HKV query heads that share it.
//
// Design (FlashAttention-2's backward split, as the Triton expert of this task; no atomics)
// ------
// Three launches on the caller's stream:
//  1. attn_bwd_delta_kernel: Delta[b,h,i] = sum_d dO*O in fp32 into a stream-ordered scratch buffer
//     (cudaMallocAsync / cudaFreeAsync on the stream, from the device's default pool). One warp per row.
//  2. attn_bwd_dkdv_kernel: one CTA per (128-key block, b*HKV + kv). Two warpgroups, each owning 64 keys.
//     K and V of the block are loaded once and stay in shared memory with the fp32 dK, dV accumulators in
//     registers; the CTA walks every 64-row query block of every query head of the GQA group (so the
//     group sum happens in registers). Per query block, in the transposed orientation (keys = wgmma rows M):
//         S^T  = K Q^T     wgmma m64n64k16, A = K, B = Q, both K-major from smem (128B swizzle)
//         dP^T = V dO^T    same shape, A = V, B = dO
//         P^T  = exp2(S^T * scale*log2e - LSE*log2e);   dS^T = P^T * (dP^T - Delta)
//         dV  += P^T dO    wgmma m64n{DP}k16, A = P^T from registers (bf16), B = dO MN-major (imm-trans-b)
//         dK  += dS^T Q    same, A = dS^T from registers, B = Q MN-major
//     dK is scaled once at the end. Q/dO tiles are double-buffered: thread 0 issues the TMA of block it+1
//     before the CTA computes block it; a __syncthreads at the end of each block frees its slot. LSE and
//     Delta of a query block (64 floats each) are staged in shared memory by 64 threads, with the same
//     double buffering, while the previous block's dV/dK wgmmas run.
//  3. attn_bwd_dq_kernel: one CTA per (128-query block, b*H + h), two warpgroups of 64 query rows. Q, dO,
//     LSE and Delta of its rows stay put; it walks 64-key blocks of K and V (double-buffered TMA):
//         S = Q K^T, dP = dO V^T (wgmma m64n64k16, all K-major), P, dS, dQ += dS K (A = dS from
//         registers, B = K MN-major). dQ scaled at the end.
//  Every matmul is a wgmma with fp32 accumulation; bf16 only for the P / dS operands (as FA2/FA3) and
//  the outputs.
// Why this shape: it is the Triton expert's algorithm (correct on the H200) written with the forward
// cuda_ptx expert's building blocks, which ran correctly on the H200 the first time: the same TMA maps,
// the same 128B-swizzled 64-column chunks, the same K-major and MN-major descriptors and the same
// accumulator -> register-A repacking. No warp specialisation: a straightforward first version, one
// issuing thread and one barrier per block (performance work comes after the first correct run).
//
// Head dim: templated on the padded width DP (64 or 128); D = 96 runs with DP = 128. Tiles are stored as
// DP/64 chunks of 64 columns (one 128-byte swizzle row each, its own TMA box {64, rows, 1}). For D = 96 the
// second chunk's box covers columns 64..127 of a tensor whose inner extent is 96: TMA zero-fills 96..127,
// which add nothing to any dot product; those output columns are computed as zeros and never stored.
// Tails: tensor maps are 3-D [B*heads, S, D], so a box past row S of one head is zero-filled (never the
// next head's rows).
//   - Query rows >= S: their LSE is taken as +inf (P = 0 exactly) and Delta as 0, so they add nothing.
//   - Key rows >= S: zero K rows give S = 0 and P = exp(-LSE) != 0, so the blocks that contain keys >= S
//     mask them (P = 0); in the dK/dV kernel they are only dropped accumulator rows anyway.
//   - Stores are plain guarded bf16x2 stores from registers (row < S, column < D).
// Causal (key j visible to query i iff j <= i): the dK/dV CTA of keys [n0, n0+128) starts at query block
// n0/64 (earlier query blocks see none of its keys); the dQ CTA of rows [m0, m0+128) stops after key
// m0+127. Only blocks that straddle the diagonal apply the per-element mask. dQ CTAs run longest-first.
#ifndef XL_CAUSAL
#define XL_CAUSAL 0
#endif

#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hbwd {

constexpr int THREADS = 256;          // two warpgroups, both compute
constexpr int BN_KV = 128;            // dK/dV kernel: keys per CTA (64 per warpgroup)
constexpr int BM_KV = 64;             // dK/dV kernel: query rows per step
constexpr int BM_Q = 128;             // dQ kernel: query rows per CTA (64 per warpgroup)
constexpr int BN_Q = 64;              // dQ kernel: keys per step
constexpr float LOG2E = 1.4426950408889634f;

// One 64-column chunk of a tile of R rows is R x 128 bytes.
template <int DP>
struct CfgKV {                                          // dK/dV kernel shared memory
  static constexpr int CH = DP / 64;
  static constexpr int CHUNK_KEY = BN_KV * 128;          // 16 KiB: one chunk of the K or V tile
  static constexpr int CHUNK_ROW = BM_KV * 128;          // 8 KiB: one chunk of a Q or dO tile
  static constexpr int KEY_BYTES = CH * CHUNK_KEY;
  static constexpr int ROW_BYTES = CH * CHUNK_ROW;
  // K, V, then 2 slots x (Q, dO), then 2 slots x 64 LSE*log2e, 2 x 64 Delta, then 3 mbarriers.
  static constexpr int OFF_V = KEY_BYTES;
  static constexpr int OFF_Q = 2 * KEY_BYTES;
  static constexpr int OFF_DO = OFF_Q + 2 * ROW_BYTES;
  static constexpr int OFF_LSE = OFF_DO + 2 * ROW_BYTES;
  static constexpr int OFF_DELTA = OFF_LSE + 2 * BM_KV * 4;
  static constexpr int OFF_BAR = OFF_DELTA + 2 * BM_KV * 4;
  static constexpr int SMEM = OFF_BAR + 3 * 8 + 1024 /*alignment slack*/;
};
template <int DP>
struct CfgQ {                                           // dQ kernel shared memory
  static constexpr int CH = DP / 64;
  static constexpr int CHUNK_ROW = BM_Q * 128;           // 16 KiB: one chunk of the Q or dO tile
  static constexpr int CHUNK_KEY = BN_Q * 128;           // 8 KiB: one chunk of a K or V tile
  static constexpr int ROW_BYTES = CH * CHUNK_ROW;
  static constexpr int KEY_BYTES = CH * CHUNK_KEY;
  // Q, dO, then 2 slots x (K, V), then 3 mbarriers.
  static constexpr int OFF_DO = ROW_BYTES;
  static constexpr int OFF_K = 2 * ROW_BYTES;
  static constexpr int OFF_V = OFF_K + 2 * KEY_BYTES;
  static constexpr int OFF_BAR = OFF_V + 2 * KEY_BYTES;
  static constexpr int SMEM = OFF_BAR + 3 * 8 + 1024;
};
static_assert(CfgKV<128>::SMEM <= 232448 && CfgQ<128>::SMEM <= 232448, "shared memory");

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
// Grid (ceil(S/128), B*HKV). Warpgroup wg owns keys n0 + 64wg .. +63 (rows of its accumulators).
template <int DP, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
attn_bwd_dkdv_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                     const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
                     const float* __restrict__ LSE, const float* __restrict__ Delta, __nv_bfloat16* __restrict__ dK,
                     __nv_bfloat16* __restrict__ dV, int H, int HKV, int S, int D, float scale, float scale_log2) {
  using C = CfgKV<DP>;
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles must start on a 1024-byte boundary (descriptor base-offset field stays 0).
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t s0 = smem_addr(smem);
  float* lse_s = reinterpret_cast<float*>(smem + C::OFF_LSE);       // [2][64], LSE * log2(e), +inf past S
  float* delta_s = reinterpret_cast<float*>(smem + C::OFF_DELTA);   // [2][64], 0 past S
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(smem + C::OFF_BAR);
  uint64_t* full = kv_full + 1;                                       // [2]: Q + dO of a slot

  const int n0 = blockIdx.x * BN_KV;
  const int bkv = blockIdx.y;                    // b * HKV + kv: row of the [B*HKV, S, D] maps
  const int b = bkv / HKV, kv = bkv - b * HKV;
  const int G = H / HKV;
  const int nqb = (S + BM_KV - 1) / BM_KV;
  const int m_lo = CAUSAL ? n0 / BM_KV : 0;      // earlier query blocks see none of these keys
  const int per_head = nqb - m_lo;
  const int steps = G * per_head;                // step it: query head g = it / per_head, block m_lo + it % per_head

  const int tid = threadIdx.x;
  // Step it uses slot it & 1: Q and dO by TMA (thread 0), LSE*log2(e) and Delta of its 64 rows (threads < 64).
  auto load_tiles = [&](int it) {
    const int slot = it & 1;
    const int bh = b * H + kv * G + it / per_head;
    const int m = m_lo + it % per_head;
    mbar_arrive_expect_tx(&full[slot], 2 * C::ROW_BYTES);
    tma_tile<C::CH>(s0 + C::OFF_Q + slot * C::ROW_BYTES, C::CHUNK_ROW, &map_q, &full[slot], m * BM_KV, bh);
    tma_tile<C::CH>(s0 + C::OFF_DO + slot * C::ROW_BYTES, C::CHUNK_ROW, &map_do, &full[slot], m * BM_KV, bh);
  };
  auto stage_rows = [&](int it) {
    const int slot = it & 1;
    const int bh = b * H + kv * G + it / per_head;
    const int m = m_lo + it % per_head;
    if (tid < BM_KV) {
      const int row = m * BM_KV + tid;
      const size_t at = static_cast<size_t>(bh) * S + row;
      lse_s[slot * BM_KV + tid] = row < S ? LSE[at] * LOG2E : INFINITY;
      delta_s[slot * BM_KV + tid] = row < S ? Delta[at] : 0.f;
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
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0) {
    mbar_arrive_expect_tx(kv_full, 2 * C::KEY_BYTES);   // full boxes count, zero-filled parts included
    tma_tile<C::CH>(s0, C::CHUNK_KEY, &map_k, kv_full, n0, bkv);
    tma_tile<C::CH>(s0 + C::OFF_V, C::CHUNK_KEY, &map_v, kv_full, n0, bkv);
    load_tiles(0);
  }
  stage_rows(0);
  __syncthreads();                                 // LSE/Delta of step 0 visible

  const int wg = tid / 128, t = tid & 127;
  const int warp = t >> 5, lane = t & 31;
  const int g8 = lane >> 2, qd = lane & 3;
  const int key0 = n0 + wg * 64 + warp * 16 + g8; // key of accumulator rows with (i/2)%2 == 0; +8 otherwise
  const uint32_t k_rows = s0 + wg * 64 * 128;      // this warpgroup's 64 rows of the K tile (+8 KiB in each chunk)
  const uint32_t v_rows = s0 + C::OFF_V + wg * 64 * 128;

  float dk[DP / 2], dv[DP / 2];                    // this thread's 2 keys x DP/4 columns of dK, dV
#pragma unroll
  for (int i = 0; i < DP / 2; ++i) dk[i] = dv[i] = 0.f;

  mbar_wait(kv_full, 0);
  for (int it = 0; it < steps; ++it) {
    const int slot = it & 1;
    // Slot (it+1) & 1 was freed by the barrier that ended step it-1: prefetch step it+1 into it now.
    if (tid == 0 && it + 1 < steps) load_tiles(it + 1);
    const int m = m_lo + it % per_head;
    const uint32_t q_tile = s0 + C::OFF_Q + slot * C::ROW_BYTES;
    const uint32_t do_tile = s0 + C::OFF_DO + slot * C::ROW_BYTES;
    const float* lse2 = lse_s + slot * BM_KV;
    const float* dlt = delta_s + slot * BM_KV;
    mbar_wait(&full[slot], (it >> 1) & 1);

    float s[32], dp[32];                           // S^T then P^T; dP^T (2 keys x 16 query columns)
    wgmma_fence();
    issue_abt<DP>(s, k_rows, C::CHUNK_KEY, q_tile, C::CHUNK_ROW);
    wgmma_commit();
    issue_abt<DP>(dp, v_rows, C::CHUNK_KEY, do_tile, C::CHUNK_ROW);
    wgmma_commit();
    wgmma_wait<1>();                               // S^T done (dP^T may still run)
    pin(s);
    // Mask where the block holds keys >= S or straddles the causal diagonal (some key > some query).
    const bool masked = (n0 + wg * 64 + 64 > S) || (CAUSAL && m * BM_KV < n0 + wg * 64 + 64);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int col = 8 * (i / 4) + 2 * qd + (i % 2);   // query row of the block
      float p = ex2(fmaf(s[i], scale_log2, -lse2[col]));
      if (masked) {
        const int key = key0 + 8 * ((i / 2) % 2);
        const int qrow = m * BM_KV + col;
        if (key >= S || (CAUSAL && key > qrow)) p = 0.f;
      }
      s[i] = p;
    }
    uint32_t pf[16], dsf[16];
    pack_a(pf, s);                                  // P^T (bf16) = A of dV += P^T dO
    wgmma_wait<0>();                                // dP^T done
    pin(dp);
#pragma unroll
    for (int i = 0; i < 32; ++i) dp[i] = s[i] * (dp[i] - dlt[8 * (i / 4) + 2 * qd + (i % 2)]);
    pack_a(dsf, dp);                                // dS^T (bf16) = A of dK += dS^T Q
    wgmma_fence();
    issue_at<DP>(dv, pf, do_tile, C::CHUNK_ROW);
    issue_at<DP>(dk, dsf, q_tile, C::CHUNK_ROW);
    wgmma_commit();
    if (it + 1 < steps) stage_rows(it + 1);        // global loads while the wgmmas run (other slot)
    wgmma_wait<0>();
    pin(dv);
    pin(dk);
    __syncthreads();                               // every warpgroup is done with slot it & 1; rows staged
  }

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

// ---------------------------------------------------------------- kernel 3: dQ
// Grid (ceil(S/128), B*H). Warpgroup wg owns query rows m0 + 64wg .. +63.
template <int DP, bool CAUSAL>
__global__ void __launch_bounds__(THREADS, 1)
attn_bwd_dq_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                   const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_do,
                   const float* __restrict__ LSE, const float* __restrict__ Delta, __nv_bfloat16* __restrict__ dQ,
                   int H, int HKV, int S, int D, float scale, float scale_log2) {
  using C = CfgQ<DP>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const uint32_t s0 = smem_addr(smem);
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + C::OFF_BAR);
  uint64_t* full = q_full + 1;                     // [2]: K + V of a slot

  const int mt = CAUSAL ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int m0 = mt * BM_Q;
  const int bh = blockIdx.y;                       // b * H + h
  const int b = bh / H, h = bh - b * H;
  const int kvh = b * HKV + h / (H / HKV);
  const int kend = CAUSAL ? min(S, m0 + BM_Q) : S; // keys past the last row of the tile are invisible
  const int nkb = (kend + BN_Q - 1) / BN_Q;

  const int tid = threadIdx.x;
  auto issue_block = [&](int j) {                  // K and V of key block j into slot j & 1 (thread 0)
    const int slot = j & 1;
    mbar_arrive_expect_tx(&full[slot], 2 * C::KEY_BYTES);
    tma_tile<C::CH>(s0 + C::OFF_K + slot * C::KEY_BYTES, C::CHUNK_KEY, &map_k, &full[slot], j * BN_Q, kvh);
    tma_tile<C::CH>(s0 + C::OFF_V + slot * C::KEY_BYTES, C::CHUNK_KEY, &map_v, &full[slot], j * BN_Q, kvh);
  };
  if (tid == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    tma_prefetch_map(&map_do);
    mbar_init(q_full, 1);
    mbar_init(&full[0], 1);
    mbar_init(&full[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (tid == 0) {
    mbar_arrive_expect_tx(q_full, 2 * C::ROW_BYTES);
    tma_tile<C::CH>(s0, C::CHUNK_ROW, &map_q, q_full, m0, bh);
    tma_tile<C::CH>(s0 + C::OFF_DO, C::CHUNK_ROW, &map_do, q_full, m0, bh);
    issue_block(0);
  }

  const int wg = tid / 128, t = tid & 127;
  const int warp = t >> 5, lane = t & 31;
  const int g8 = lane >> 2, qd = lane & 3;
  const int r0 = m0 + wg * 64 + warp * 16 + g8;    // query row of accumulator rows with (i/2)%2 == 0; r0+8 else
  const size_t head = static_cast<size_t>(bh) * S;
  // Rows past S: LSE +inf gives P = 0, so they contribute nothing (and are not stored).
  const float lse2_0 = r0 < S ? LSE[head + r0] * LOG2E : INFINITY;
  const float lse2_1 = r0 + 8 < S ? LSE[head + r0 + 8] * LOG2E : INFINITY;
  const float dl0 = r0 < S ? Delta[head + r0] : 0.f;
  const float dl1 = r0 + 8 < S ? Delta[head + r0 + 8] : 0.f;
  const uint32_t q_rows = s0 + wg * 64 * 128;      // this warpgroup's 64 rows (+8 KiB in each 16 KiB chunk)
  const uint32_t do_rows = s0 + C::OFF_DO + wg * 64 * 128;

  float dq[DP / 2];
#pragma unroll
  for (int i = 0; i < DP / 2; ++i) dq[i] = 0.f;

  mbar_wait(q_full, 0);
  for (int j = 0; j < nkb; ++j) {
    const int slot = j & 1;
    if (tid == 0 && j + 1 < nkb) issue_block(j + 1);   // slot freed by the barrier ending block j-1
    const uint32_t k_tile = s0 + C::OFF_K + slot * C::KEY_BYTES;
    const uint32_t v_tile = s0 + C::OFF_V + slot * C::KEY_BYTES;
    mbar_wait(&full[slot], (j >> 1) & 1);

    float s[32], dp[32];                           // S then P; dP (2 rows x 16 keys)
    wgmma_fence();
    issue_abt<DP>(s, q_rows, C::CHUNK_ROW, k_tile, C::CHUNK_KEY);
    wgmma_commit();
    issue_abt<DP>(dp, do_rows, C::CHUNK_ROW, v_tile, C::CHUNK_KEY);
    wgmma_commit();
    wgmma_wait<1>();
    pin(s);
    // Mask where the block holds keys >= S or keys above the diagonal of some row of this warpgroup.
    const int k0 = j * BN_Q;
    const bool masked = (k0 + BN_Q > S) || (CAUSAL && k0 + BN_Q - 1 > m0 + wg * 64);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const bool hi = (i / 2) % 2;
      float p = ex2(fmaf(s[i], scale_log2, -(hi ? lse2_1 : lse2_0)));
      if (masked) {
        const int key = k0 + 8 * (i / 4) + 2 * qd + (i % 2);
        const int row = r0 + 8 * hi;
        if (key >= S || (CAUSAL && key > row)) p = 0.f;
      }
      s[i] = p;
    }
    wgmma_wait<0>();
    pin(dp);
#pragma unroll
    for (int i = 0; i < 32; ++i) dp[i] = s[i] * (dp[i] - (((i / 2) % 2) ? dl1 : dl0));
    uint32_t dsf[16];
    pack_a(dsf, dp);                                // dS (bf16) = A of dQ += dS K
    wgmma_fence();
    issue_at<DP>(dq, dsf, k_tile, C::CHUNK_KEY);
    wgmma_commit();
    wgmma_wait<0>();
    pin(dq);
    __syncthreads();                               // both warpgroups are done with slot j & 1
  }

  __nv_bfloat16* o0 = dQ + (head + r0) * D;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (r0 + 8 * half >= S) continue;
    __nv_bfloat16* o = o0 + 8 * half * static_cast<size_t>(D);
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int col = 8 * n + 2 * qd;
      const int i = 4 * n + 2 * half;
      if (col < D) *reinterpret_cast<__nv_bfloat162*>(o + col) = __floats2bfloat162_rn(dq[i] * scale, dq[i + 1] * scale);
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
  // Tensor maps: Q/dO as row tiles of the kernel that keeps them (dQ: 128 rows) or streams them (dK/dV:
  // 64 rows); K/V likewise (dK/dV: 128 keys, dQ: 64 keys).
  CUtensorMap q64, do64, k128, v128, q128, do128, k64, v64;
  if (!make_map(&q64, Q, B * H, S, D, BM_KV) || !make_map(&do64, dO, B * H, S, D, BM_KV) ||
      !make_map(&k128, K, B * HKV, S, D, BN_KV) || !make_map(&v128, V, B * HKV, S, D, BN_KV) ||
      !make_map(&q128, Q, B * H, S, D, BM_Q) || !make_map(&do128, dO, B * H, S, D, BM_Q) ||
      !make_map(&k64, K, B * HKV, S, D, BN_Q) || !make_map(&v64, V, B * HKV, S, D, BN_Q)) {
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
  kv_kernel<<<dim3((S + BN_KV - 1) / BN_KV, B * HKV), THREADS, kv_bytes, stream>>>(
      q64, k128, v128, do64, LSE, delta, dK, dV, H, HKV, S, D, scale, scale_log2);
  q_kernel<<<dim3((S + BM_Q - 1) / BM_Q, B * H), THREADS, q_bytes, stream>>>(
      q128, k64, v64, do128, LSE, delta, dQ, H, HKV, S, D, scale, scale_log2);
  cudaFreeAsync(delta, stream);
}

}  // namespace hbwd

extern "C" void xlang_entry(const __nv_bfloat16* dO, const __nv_bfloat16* Q, const __nv_bfloat16* K,
                            const __nv_bfloat16* V, const __nv_bfloat16* O, const float* LSE, __nv_bfloat16* dQ,
                            __nv_bfloat16* dK, __nv_bfloat16* dV, int B, int H, int HKV, int S, int D,
                            cudaStream_t stream) {
  if (D <= 64)
    hbwd::launch<64>(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, stream);
  else
    hbwd::launch<128>(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D, stream);
}
