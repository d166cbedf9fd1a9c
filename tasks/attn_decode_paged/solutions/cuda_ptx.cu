// Never run on a GPU (written 2026-12-02 in a session without device time); see ../NOTES_cuda_ptx.md.
//
// Expert paged GQA decode for xlang's `attn_decode_paged` (split-KV, "flash decoding"), written for Hopper (sm_90a)
// and the same kernel for Blackwell: the file is cuda_ptx.cu, which Task.solution_path takes for every generation
// that has no cuda_ptx_<generation>.cu. It uses only mma.sync, ldmatrix and cp.async (valid on sm_90a and sm_100a)
// and asks the device for its SM count and occupancy; built for sm_100a it shows the task's required cp_async, and
// it has never run on a Blackwell GPU either (../NOTES_cuda_ptx_blackwell.md).
//
//   out[b, h, :] = softmax_t(scale * q[b, h, :] . K_b[t, kvh, :]) V_b[t, kvh, :],  kvh = h / G, G = H / HKV,
//   token t of sequence b in slot t % P of page block_table[b, t / P] of k_cache / v_cache [NP, P, HKV, D].
//
// Design
// ------
// * Two kernels. decode_split: one CTA per (sequence b, kv head kvh, split of b's tokens) computes the G query
//   heads of kvh over the split's tokens: its output normalised by its own sum, and its log2-sum-exp. decode_combine
//   merges the splits of each (b, h) weighted by exp2(lse_s - max). With one split, decode_split writes out itself.
//   The split count comes from the longest possible sequence (MAXP * P; the lengths live on the device and are not
//   copied back): splits past a shorter sequence's end exit at once, and the combine reads only ceil(len / chunk).
// * Gathers: a tile of BN tokens x D of K and of V per stage, two stages (double-buffered). Each thread copies 16
//   bytes per (token, 16-byte chunk) with cp.async.cg.shared.global, the source address taken from the block table
//   (64-bit, page * P + slot); tokens past the split's end use src-size 0, which zero-fills the 16 bytes and reads
//   nothing, so no slot the sequence does not own (NaN, +-2^100) and no padding entry of the table is ever touched.
//   The table entries of tile j+3 are loaded into registers while tile j is computed, so an issue never waits on
//   its table load. Shared rows are XOR-swizzled (chunk ^ row % 8) so the ldmatrix reads below are conflict-free.
// * Tensor cores, mma.sync.aligned.m16n8k16 bf16 -> f32 (not wgmma, not FMA): the A rows are the G <= 8 query heads
//   of the group (rows G..15 zero, never stored), so every K and V element is read from shared memory once for all
//   G heads. At most half of the MMA rows do work; decode does G FLOP per byte of KV against the H200's ridge of
//   about 206 (arch_docs/h100/params.md, "decode is memory-bound"), so the tensor pipe's slack is large, and
//   mma.sync + ldmatrix spends fewer issue slots than fp32 FMA on unpacked bf16 (which would also need a
//   cross-lane reduction per token). wgmma's 64 rows per instruction would be 87% or more padding.
//   Per warp (16 tokens of the tile): S[16 heads x 16 tokens] = Q K^T as 2 n8 tiles over D/16 k-steps (B operand
//   from K rows by ldmatrix.x4); P = exp2(S - m) packed to bf16 is directly the A fragment of P V (FA2's register
//   reuse); O[16 x D] += P V over D/8 n8 tiles (B operand by ldmatrix.x4.trans from V rows).
// * Online softmax per warp in the exp2 domain (scores times scale * log2 e), running max m and sum l per head; the
//   BN/16 warps' (m, l, O) are merged through shared memory at the end of the split.
// * Head dims: D 64 and 128 with BN = 64 tokens (4 warps), D 256 with BN = 32 (2 warps) so two stages fit in 64 KiB.
//   Page sizes 1, 16, 64 (powers of two: shift and mask); any length, 1 included.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace pdec {

constexpr float LOG2E = 1.4426950408889634f;
constexpr int MAX_SPLITS = 64;

template <int D>
struct Cfg {
  static constexpr int BN = D <= 128 ? 64 : 32;        // tokens per tile
  static constexpr int WARPS = BN / 16;                 // each warp: 16 tokens of the tile
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int CHUNKS = D / 8;                  // 16-byte chunks per token row
  static constexpr int ROWS_PER_PASS = THREADS / CHUNKS;
  static constexpr int PASSES = BN / ROWS_PER_PASS;     // copies per thread per tile (of K, and of V)
  static constexpr int TILE_BYTES = BN * D * 2;         // one K (or V) tile
  static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
  static constexpr int SMEM = 2 * STAGE_BYTES;          // two stages
  static constexpr int RED_BYTES = WARPS * 8 * (D + 2) * 4;  // the warps' O, m, l at the end
  static_assert(THREADS % CHUNKS == 0 && BN % ROWS_PER_PASS == 0, "copy layout");
  static_assert(RED_BYTES <= SMEM, "the merge reuses the stages");
};

// ---------------------------------------------------------------- PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, bypassing L1 [PTX ISA: cp.async]. src_bytes 0: the 16 bytes are zero-filled and
// nothing is read.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8 and receives, in register i,
// row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of matrix i (.trans: column l / 4, rows 2 (l % 4), +1)
// [PTX ISA: ldmatrix].
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// C[16 x 8] += A[16 x 16] B[16 x 8], bf16 in, f32 accumulate [PTX ISA: mma.sync m16n8k16 fragments]:
// with g = lane / 4, q = lane % 4: a0 = A(g, 2q..2q+1), a1 = A(g+8, 2q..), a2 = A(g, 2q+8..), a3 = A(g+8, 2q+8..);
// b0 = B(2q..2q+1, g), b1 = B(2q+8..2q+9, g); c0, c1 = C(g, 2q..2q+1), c2, c3 = C(g+8, 2q..2q+1).
// Here rows 8..15 are padding heads: a1 = a3 = 0 (an immediate) and the C rows 8..15 are zero in, thrown away
// out (write-only dummies, dead at once, so they hold no register across the loop: half of O's registers).
__device__ __forceinline__ void mma_16816(float (&c)[2], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  float dead2, dead3;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %6, %5, %6}, {%7, %8}, "
      "{%0, %1, %9, %9};"
      : "+f"(c[0]), "+f"(c[1]), "=f"(dead2), "=f"(dead3)
      : "r"(a0), "r"(a2), "r"(0u), "r"(b0), "r"(b1), "f"(0.f));
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
// Byte offset of (row, 16-byte chunk) in a [rows x D] bf16 tile with the XOR swizzle.
template <int D>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * D * 2 + ((chunk ^ (row & 7)) << 4));
}

// ---------------------------------------------------------------- split kernel
template <int D>
__global__ void __launch_bounds__(Cfg<D>::THREADS)
decode_split(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
             const __nv_bfloat16* __restrict__ v_cache, const int* __restrict__ block_table,
             const int* __restrict__ seq_lens, __nv_bfloat16* __restrict__ out, float* __restrict__ o_part,
             float* __restrict__ lse_part, int H, int HKV, int MAXP, int log2_p, int chunk, int nsplit,
             float qk_scale) {
  using C = Cfg<D>;
  constexpr int BN = C::BN, PASSES = C::PASSES;
  extern __shared__ __align__(128) uint8_t smem[];

  const int split = blockIdx.x % nsplit;
  const int kvh = (blockIdx.x / nsplit) % HKV;
  const int b = blockIdx.x / (nsplit * HKV);
  const int n = seq_lens[b];
  const int start = split * chunk;
  if (start >= n) return;                   // nothing of this sequence here; the combine does not read it
  const int end = min(start + chunk, n);
  const int ntiles = (end - start + BN - 1) / BN;
  const int G = H / HKV;
  const int P1 = (1 << log2_p) - 1;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, qd = lane & 3;

  // ---- gathers: this thread copies chunk `my_chunk` of tile rows my_row0 + p * ROWS_PER_PASS
  const int my_chunk = tid % C::CHUNKS, my_row0 = tid / C::CHUNKS;
  const int* table_row = block_table + static_cast<size_t>(b) * MAXP;
  int page[PASSES];                         // table entries of the next tile to issue (-1: past the end)
  auto load_pages = [&](int tile_start) {
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
      const int t = tile_start + my_row0 + p * C::ROWS_PER_PASS;
      page[p] = t < end ? __ldg(table_row + (t >> log2_p)) : -1;
    }
  };
  const uint32_t smem0 = smem_addr(smem);
  auto issue = [&](int stage, int tile_start) {
    const uint32_t sk = smem0 + stage * C::STAGE_BYTES, sv = sk + C::TILE_BYTES;
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
      const int row = my_row0 + p * C::ROWS_PER_PASS;
      const int t = tile_start + row;
      const uint32_t dst = swz<D>(row, my_chunk);
      if (page[p] >= 0) {
        const size_t slot = (static_cast<size_t>(page[p]) << log2_p) + (t & P1);
        const size_t off = (slot * HKV + kvh) * D + my_chunk * 8;
        cp_async16(sk + dst, k_cache + off, 16);
        cp_async16(sv + dst, v_cache + off, 16);
      } else {
        cp_async16(sk + dst, k_cache, 0);   // zero fill, no read
        cp_async16(sv + dst, v_cache, 0);
      }
    }
  };

  load_pages(start);
  issue(0, start);
  cp_async_commit();
  load_pages(start + BN);
  if (ntiles > 1) issue(1, start + BN);
  cp_async_commit();
  load_pages(start + 2 * BN);

  // ---- Q as A fragments: row g = head kvh * G + g (zero for g >= G), k-step ks covers dims 16 ks .. 16 ks + 15
  uint32_t qa[D / 16][2];
  {
    const uint32_t* qrow = reinterpret_cast<const uint32_t*>(q + (static_cast<size_t>(b) * H + kvh * G + g) * D);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      qa[ks][0] = g < G ? qrow[(16 * ks + 2 * qd) / 2] : 0u;
      qa[ks][1] = g < G ? qrow[(16 * ks + 8 + 2 * qd) / 2] : 0u;
    }
  }

  float o[D / 8][2];                        // O(head g, columns 8 dt + 2 qd, +1)
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = 0.f;
  float m = -INFINITY, l = 0.f;             // head g's running max (log2 domain) and this lane's part of the sum

  // ldmatrix row addresses of this lane inside a tile (matrix mi = lane / 8, its row lane % 8):
  // K (q.k B operand): mi = 0..3 -> tokens +0/+0/+8/+8, chunk 2 ks + 0/1/0/1
  // V (p.v B operand, .trans): mi = 0..3 -> tokens +0/+8/+0/+8, chunk 2 dp + 0/0/1/1
  const int mi = lane >> 3, r8 = lane & 7;
  const int k_row = 16 * warp + 8 * (mi >> 1) + r8, k_chunk = mi & 1;
  const int v_row = 16 * warp + 8 * (mi & 1) + r8, v_chunk = mi >> 1;

  for (int j = 0; j < ntiles; ++j) {
    cp_async_wait<1>();                     // tile j's group is complete (one younger group may be in flight)
    __syncthreads();
    const int stage = j & 1;
    const uint32_t sk = smem0 + stage * C::STAGE_BYTES, sv = sk + C::TILE_BYTES;
    const int tile_start = start + j * BN;

    float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t kb[4];
      ldsm_x4(kb, sk + swz<D>(k_row, 2 * ks + k_chunk));
      mma_16816(s[0], qa[ks][0], qa[ks][1], kb[0], kb[1]);
      mma_16816(s[1], qa[ks][0], qa[ks][1], kb[2], kb[3]);
    }

    // online softmax of head g over this warp's 16 tokens; s[nt][e] is token 16 warp + 8 nt + 2 qd + e
    const int t0 = tile_start + 16 * warp + 2 * qd;
    float x[2][2], mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        x[nt][e] = t0 + 8 * nt + e < end ? s[nt][e] * qk_scale : -INFINITY;
        mx = fmaxf(mx, x[nt][e]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));   // the 4 lanes of a quad hold the same head
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float ms = m_new == -INFINITY ? 0.f : m_new;      // no token yet: exp2(-inf - 0) = 0, not NaN
    const float alpha = ex2(m - ms);
    m = m_new;
    float p[2][2], sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        p[nt][e] = ex2(x[nt][e] - ms);
        sum += p[nt][e];
      }
    l = l * alpha + sum;
    // P as the A fragment of P V (k = the warp's 16 tokens): a0 = (g, tokens 2qd, +1), a2 = (g, tokens 8 + 2qd, +1)
    const uint32_t pa0 = pack_bf16(p[0][0], p[0][1]), pa2 = pack_bf16(p[1][0], p[1][1]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      ldsm_x4_trans(vb, sv + swz<D>(v_row, 2 * dp + v_chunk));
      o[2 * dp][0] *= alpha;
      o[2 * dp][1] *= alpha;
      o[2 * dp + 1][0] *= alpha;
      o[2 * dp + 1][1] *= alpha;
      mma_16816(o[2 * dp], pa0, pa2, vb[0], vb[1]);
      mma_16816(o[2 * dp + 1], pa0, pa2, vb[2], vb[3]);
    }

    __syncthreads();                        // every warp is done with this stage before it is refilled
    if (j + 2 < ntiles) issue(stage, tile_start + 2 * BN);
    cp_async_commit();                      // (an empty group when nothing was issued: the count stays uniform)
    load_pages(tile_start + 3 * BN);
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- merge the warps: O (rows g < 8, columns 8 dt + 2 qd + e), m and l through shared memory
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* red_o = reinterpret_cast<float*>(smem);          // [WARPS][8][D]
  float* red_m = red_o + C::WARPS * 8 * D;                // [WARPS][8]
  float* red_l = red_m + C::WARPS * 8;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    red_o[(warp * 8 + g) * D + 8 * dt + 2 * qd] = o[dt][0];
    red_o[(warp * 8 + g) * D + 8 * dt + 2 * qd + 1] = o[dt][1];
  }
  if (qd == 0) {
    red_m[warp * 8 + g] = m;
    red_l[warp * 8 + g] = l;
  }
  __syncthreads();
  for (int idx = tid; idx < G * D; idx += C::THREADS) {
    const int hg = idx / D, d = idx - hg * D;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::WARPS; ++w) mm = fmaxf(mm, red_m[w * 8 + hg]);
    // warp 0's first token is the split's first token, so mm is finite
    float ll = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < C::WARPS; ++w) {
      const float wt = ex2(red_m[w * 8 + hg] - mm);
      ll += red_l[w * 8 + hg] * wt;
      acc += red_o[(w * 8 + hg) * D + d] * wt;
    }
    const size_t row = static_cast<size_t>(b) * H + kvh * G + hg;   // (b, h) of this head
    if (nsplit == 1) {
      out[row * D + d] = __float2bfloat16_rn(acc / ll);
    } else {
      o_part[(row * nsplit + split) * D + d] = acc / ll;
      if (d == 0) lse_part[row * nsplit + split] = mm + log2f(ll);
    }
  }
}

// ---------------------------------------------------------------- combine kernel: one CTA per (b, h)
__global__ void __launch_bounds__(128)
decode_combine(const float* __restrict__ o_part, const float* __restrict__ lse_part, const int* __restrict__ seq_lens,
               __nv_bfloat16* __restrict__ out, int H, int D, int nsplit, int chunk) {
  __shared__ float weight[MAX_SPLITS];
  __shared__ float total;
  const size_t bh = blockIdx.x;
  const int b = static_cast<int>(bh / H);
  const int used = (seq_lens[b] + chunk - 1) / chunk;     // splits that own tokens (the others wrote nothing)
  if (threadIdx.x == 0) {
    float mx = -INFINITY;
    for (int s = 0; s < used; ++s) mx = fmaxf(mx, lse_part[bh * nsplit + s]);
    float sum = 0.f;
    for (int s = 0; s < used; ++s) {
      weight[s] = ex2(lse_part[bh * nsplit + s] - mx);
      sum += weight[s];
    }
    total = sum;
  }
  __syncthreads();
  const float inv = 1.f / total;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < used; ++s) acc += weight[s] * o_part[(bh * nsplit + s) * D + d];
    out[bh * D + d] = __float2bfloat16_rn(acc * inv);
  }
}

// ---------------------------------------------------------------- host side
struct Plan {
  int nsplit, chunk;
};

// Splits: enough CTAs for two waves of the occupancy the split kernel reaches, each split at least 4 tiles long
// (so that the fp32 partials stay small against the KV they summarise: 2 G D 4 bytes per split against 4 D bytes
// per token), at most MAX_SPLITS. A heuristic in place of tuning (unmeasured: no GPU in the session that wrote it).
template <int D>
static Plan plan(int B, int HKV, int tokens) {
  using C = Cfg<D>;
  static int sms = 0, per_sm = 0;
  if (sms == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_split<D>, C::THREADS, C::SMEM);
    if (per_sm < 1) per_sm = 1;
  }
  const int units = B * HKV;
  const int want = (2 * sms * per_sm + units - 1) / units;
  const int most = (tokens + 4 * C::BN - 1) / (4 * C::BN);
  int nsplit = std::max(1, std::min(std::min(want, most), MAX_SPLITS));
  const int per = (tokens + nsplit - 1) / nsplit;
  const int chunk = (per + C::BN - 1) / C::BN * C::BN;
  nsplit = (tokens + chunk - 1) / chunk;
  return {nsplit, chunk};
}

template <int D>
static void launch(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                   const int* block_table, const int* seq_lens, __nv_bfloat16* out, int B, int H, int HKV, int P,
                   int MAXP, cudaStream_t stream) {
  using C = Cfg<D>;
  static bool attr_set = false;
  if (!attr_set) {
    cudaFuncSetAttribute(decode_split<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    attr_set = true;
  }
  const int log2_p = P == 1 ? 0 : P == 16 ? 4 : 6;
  const Plan pl = plan<D>(B, HKV, MAXP * P);
  const float qk_scale = LOG2E / sqrtf(static_cast<float>(D));
  float* scratch = nullptr;
  float* lse_part = nullptr;
  if (pl.nsplit > 1) {
    const size_t partials = static_cast<size_t>(B) * H * pl.nsplit;
    if (cudaMallocAsync(reinterpret_cast<void**>(&scratch), partials * (D + 1) * sizeof(float), stream) !=
        cudaSuccess) {
      fprintf(stderr, "xlang_entry: cudaMallocAsync failed\n");
      return;
    }
    lse_part = scratch + partials * D;
  }
  const unsigned grid = static_cast<unsigned>(B) * HKV * pl.nsplit;
  decode_split<D><<<grid, C::THREADS, C::SMEM, stream>>>(q, k_cache, v_cache, block_table, seq_lens, out, scratch,
                                                         lse_part, H, HKV, MAXP, log2_p, pl.chunk, pl.nsplit,
                                                         qk_scale);
  if (pl.nsplit > 1) {
    decode_combine<<<static_cast<unsigned>(B) * H, 128, 0, stream>>>(scratch, lse_part, seq_lens, out, H, D,
                                                                      pl.nsplit, pl.chunk);
    cudaFreeAsync(scratch, stream);
  }
}

}  // namespace pdec

extern "C" void xlang_entry(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                            const int* block_table, const int* seq_lens, __nv_bfloat16* out, int B, int H, int HKV,
                            int D, int P, int MAXP, int NP, cudaStream_t stream) {
  (void)NP;
  if (D == 64)
    pdec::launch<64>(q, k_cache, v_cache, block_table, seq_lens, out, B, H, HKV, P, MAXP, stream);
  else if (D == 128)
    pdec::launch<128>(q, k_cache, v_cache, block_table, seq_lens, out, B, H, HKV, P, MAXP, stream);
  else if (D == 256)
    pdec::launch<256>(q, k_cache, v_cache, block_table, seq_lens, out, B, H, HKV, P, MAXP, stream);
  else
    fprintf(stderr, "xlang_entry: head dim %d is not one of 64, 128, 256\n", D);
}
