// Never run on a GPU (written 2026-12-02 without device time); see ../NOTES_cuda_ptx.md.
//
// Expert Hopper (sm_90a) causal prefill over a ragged batch for xlang's `attn_prefill_ragged`: the attn_fwd
// cuda_ptx expert (tasks/attn_fwd/solutions/cuda_ptx_hopper.cu, `ok` on the H200 there) adapted to packed
// sequences and to D = 256.
//
//   out[s+i, h, :] = softmax_{j <= i}(scale * q[s+i, h, :] . k[s+j, kvh, :]) v[s+j, kvh, :],  kvh = h / (H / HKV),
//   for sequence b at rows s = cu_seqlens[b] .. cu_seqlens[b+1] - 1 of q [T, H, D], k / v [T, HKV, D], out [T, H, D].
//
// Design (what differs from attn_fwd)
// ------
// * Grid (ceil(T / BM) + B, H): at least sum_b ceil(n_b / BM) tiles. A CTA walks cu_seqlens (B loads, no host copy:
//   cu_seqlens changes from call to call) to find its sequence b and query tile; CTAs past the last tile return at
//   once. Within a sequence the tiles run last-first (the longest causal rows first).
// * TMA over the packed tensors: 3-D maps [T, heads, D] (innermost first: D, heads, T), boxes {64, 1, rows}: one
//   head's rows, 128 B per row, the same shared layout as attn_fwd's. A box that runs past the sequence's end holds
//   the next sequence's rows (or TMA's zero fill past T): such keys are masked for every row of the sequence by the
//   causal mask (key > row), and query rows past the end are computed and never stored.
// * Key blocks: query tile mt visits blocks 0 .. ceil(min(n, (mt+1) BM) / BN) - 1; a block is masked (key > row,
//   key >= n) when it reaches past the tile's first row or past n, the others run unmasked.
// * Head dims: D 128 as attn_fwd (BN = 128, 2 stages: 160 KiB of shared memory). D 256: Q tile 64 KiB and BN = 64
//   (K and V tiles of 32 KiB, 2 stages: 192 KiB); S = Q K^T by wgmma m64n64k16 (16 k-steps), O += P V as two
//   m64n128k16 halves of the 256 columns (O: 128 fp32 registers per consumer thread, within setmaxnreg 232).
// * Everything else as attn_fwd: WG0 producer (setmaxnreg.dec, one thread issues TMA into the K / V ring with
//   full / empty mbarriers), WG1 and WG2 consumers of 64 query rows each (setmaxnreg.inc), S_j and P_{j-1} V_{j-1}
//   in flight together, online softmax in the exp2 domain, epilogue straight from registers (bf16x2 stores of the
//   rows < n; no TMA store, which would write the next sequence's rows).
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace rpre {

constexpr int BM = 128;              // query rows per CTA (2 consumer warpgroups x 64)
constexpr int THREADS = 384;
constexpr int CHUNK_Q = BM * 128;    // bytes of one 64-column chunk of the Q tile (16 KiB)

template <int DP>
struct Cfg {
  static constexpr int BN = DP == 256 ? 64 : 128;     // keys per block
  static constexpr int CH = DP / 64;                   // 64-column chunks per row
  static constexpr int CHUNK_KV = BN * 128;            // bytes of one 64-column chunk of a K or V tile
  static constexpr int Q_BYTES = CH * CHUNK_Q;
  static constexpr int KV_BYTES = CH * CHUNK_KV;       // one K (or V) tile
  static constexpr int STAGES = 2;
  static constexpr int BAR_BYTES = (4 * STAGES + 1) * 8;
  static constexpr int SMEM = Q_BYTES + 2 * STAGES * KV_BYTES + BAR_BYTES + 1024 /*alignment slack*/;
};
static_assert(Cfg<128>::SMEM <= 232448 && Cfg<256>::SMEM <= 232448, "shared memory");

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
// MN-major, 128B swizzle (V: key rows of 64 bf16 = 128 B, N = head-dim contiguous): LBO = distance between
//   64-column blocks of N (the next column chunk of the V tile, chunk_bytes), SBO = distance between 8-key
//   groups = 1024 B. Advancing K (keys) by 16 = +2048 B (stays on a 1024-B boundary).
__device__ __forceinline__ uint64_t desc_mnmajor(uint32_t saddr, uint32_t chunk_bytes) {
  return (static_cast<uint64_t>(saddr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(chunk_bytes >> 4) << 16) |
         (64ull << 32) | (1ull << 62);
}

// D[64 x 64] (+)= A[64 x 16] * B[64 x 16]^T; A and B from shared memory, both K-major (S for BN = 64).
template <int ACC>
__device__ __forceinline__ void wgmma_ss_m64n64(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "n"(ACC));
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
// register-A fragment order: k-step kk uses p[4kk .. 4kk+3] (see the mapping note in the kernel). Each wgmma
// covers 128 columns of O (two 64-column chunks of the V tile, LBO apart); D 256 takes two, on o[0..63] and
// o[64..127] (register i of o is column 8 (i / 4) + 2 qd + (i % 2) throughout, so the halves are contiguous).
template <int DP>
__device__ __forceinline__ void issue_pv(float (&o)[DP / 2], const uint32_t (&p)[Cfg<DP>::BN / 4], uint32_t v_addr) {
  using C = Cfg<DP>;
#pragma unroll
  for (int half = 0; half < DP / 128; ++half) {
    const uint64_t d0 = desc_mnmajor(v_addr + half * 2 * C::CHUNK_KV, C::CHUNK_KV);
    float(&oh)[64] = *reinterpret_cast<float(*)[64]>(&o[64 * half]);
#pragma unroll
    for (int kk = 0; kk < C::BN / 16; ++kk) {
      const uint64_t db = d0 + static_cast<uint64_t>((kk * 16 * 128) >> 4);   // 16 key rows further
      wgmma_rs_m64n128_tb(oh, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3], db);
    }
  }
}

// S = Q_c K^T for this warpgroup's 64 query rows (q_addr already offset to them) and one K tile of BN keys.
template <int DP>
__device__ __forceinline__ void issue_qk(float (&s)[Cfg<DP>::BN / 2], uint32_t q_addr, uint32_t k_addr) {
  using C = Cfg<DP>;
  const uint64_t dq = desc_kmajor(q_addr), dk = desc_kmajor(k_addr);
#pragma unroll
  for (int kk = 0; kk < DP / 16; ++kk) {
    // chunk kk/4 of the tile, then 32 B per 16 columns inside the swizzled 128-byte row
    const uint64_t da = dq + static_cast<uint64_t>(((kk / 4) * CHUNK_Q + (kk % 4) * 32) >> 4);
    const uint64_t db = dk + static_cast<uint64_t>(((kk / 4) * C::CHUNK_KV + (kk % 4) * 32) >> 4);
    if constexpr (C::BN == 128) {
      if (kk == 0) wgmma_ss_m64n128<0>(s, da, db); else wgmma_ss_m64n128<1>(s, da, db);
    } else {
      if (kk == 0) wgmma_ss_m64n64<0>(s, da, db); else wgmma_ss_m64n64<1>(s, da, db);
    }
  }
}

template <int DP>
__global__ void __launch_bounds__(THREADS, 1)
prefill_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
               const __grid_constant__ CUtensorMap map_v, const int* __restrict__ cu_seqlens,
               __nv_bfloat16* __restrict__ out, int B, int H, int HKV, int D, float scale_log2) {
  using C = Cfg<DP>;
  constexpr int ST = C::STAGES, BN = C::BN;

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
  if (mt < 0) return;                                   // past the last tile (the grid is an upper bound)

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

  const int h = blockIdx.y;
  const int kvh = h / (H / HKV);
  const int nkb = (min(n, (mt + 1) * BM) + BN - 1) / BN;   // key blocks up to the tile's last row (causal)
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
      for (int ch = 0; ch < C::CH; ++ch)
        tma_load_3d(sq + ch * CHUNK_Q, &map_q, q_full, 64 * ch, h, seq_start + mt * BM);
      for (int j = 0; j < nkb; ++j) {
        const int s = j % ST;
        const uint32_t ph = (j / ST) & 1;
        // Full boxes are always counted, zero-filled parts included.
        mbar_wait(&empty_k[s], ph ^ 1);                 // first round: fresh barrier, passes at once
        mbar_arrive_expect_tx(&full_k[s], C::KV_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sk + s * C::KV_BYTES + ch * C::CHUNK_KV, &map_k, &full_k[s], 64 * ch, kvh, seq_start + j * BN);
        mbar_wait(&empty_v[s], ph ^ 1);
        mbar_arrive_expect_tx(&full_v[s], C::KV_BYTES);
#pragma unroll
        for (int ch = 0; ch < C::CH; ++ch)
          tma_load_3d(sv + s * C::KV_BYTES + ch * C::CHUNK_KV, &map_v, &full_v[s], 64 * ch, kvh, seq_start + j * BN);
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
    const int r0 = mt * BM + c * 64 + warp * 16 + g;    // query row within the sequence

    float sacc[BN / 2];        // S, then P in fp32, for this thread's 2 rows x BN/4 keys
    float oacc[DP / 2];        // O accumulator, 2 rows x DP/4 columns
    uint32_t pf[BN / 4];       // P in bf16 pairs = register-A fragments of the P.V wgmma
#pragma unroll
    for (int i = 0; i < DP / 2; ++i) oacc[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY;   // running row max, already times scale*log2(e)
    float l0 = 0.f, l1 = 0.f;               // this thread's part of the running row sum

    const uint32_t q_addr = smem_addr(sq) + c * 64 * 128;   // this warpgroup's 64 rows: +8 KiB per chunk
    const uint32_t k_addr0 = smem_addr(sk), v_addr0 = smem_addr(sv);

    // Block j needs the mask when it reaches past the tile's first row (causal) or past the sequence's end.
    auto needs_mask = [&](int j) { return j * BN + BN - 1 > mt * BM || j * BN + BN > n; };
    // Online softmax of the S block in sacc (block index j). On return sacc holds P = exp2(S*c - m_new)
    // (fp32); alpha = exp2(m_old - m_new) per row for the O rescale.
    auto softmax = [&](int j, bool masked, float& alpha0, float& alpha1) {
      if (masked) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
          const int key = j * BN + 8 * (i / 4) + 2 * qd + (i % 2);
          const int row = r0 + 8 * ((i / 2) % 2);
          if (key >= n || key > row) sacc[i] = -INFINITY;
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
    // S accumulator -> register-A fragments of P.V: pf[n] = pack(s[2n], s[2n+1]) (attn_fwd's mapping note: the
    // accumulator registers 8kk..8kk+7 are the A fragment a0..a3 of k-step kk, for any BN).
    auto pack_p = [&]() {
#pragma unroll
      for (int i = 0; i < BN / 4; ++i) pf[i] = pack_bf16(sacc[2 * i], sacc[2 * i + 1]);
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
      softmax(0, needs_mask(0), a0, a1);
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
      softmax(j, needs_mask(j), a0, a1);
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

    // ---- epilogue: O / l in bf16; only the sequence's rows (r < n) and columns < D are written
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const size_t row_stride = static_cast<size_t>(H) * D;
    __nv_bfloat16* o0 = out + (static_cast<size_t>(seq_start) + r0) * row_stride + static_cast<size_t>(h) * D;
    __nv_bfloat16* o1 = o0 + 8 * row_stride;
    const bool ok0 = r0 < n, ok1 = r0 + 8 < n;
#pragma unroll
    for (int i = 0; i < DP / 8; ++i) {
      const int col = 8 * i + 2 * qd;
      if (col < D) {   // D is even, so a column pair is never split by the edge
        if (ok0)
          *reinterpret_cast<__nv_bfloat162*>(o0 + col) = __floats2bfloat162_rn(oacc[4 * i] * inv0, oacc[4 * i + 1] * inv0);
        if (ok1)
          *reinterpret_cast<__nv_bfloat162*>(o1 + col) =
              __floats2bfloat162_rn(oacc[4 * i + 2] * inv1, oacc[4 * i + 3] * inv1);
      }
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
                   __nv_bfloat16* out, int B, int T, int H, int HKV, int D, cudaStream_t stream) {
  using C = Cfg<DP>;
  auto kernel = prefill_kernel<DP>;
  static bool attr_set = false;
  if (!attr_set) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
    attr_set = true;
  }
  CUtensorMap mq, mk, mv;
  if (!make_map(&mq, q, T, H, D, BM) || !make_map(&mk, k, T, HKV, D, C::BN) || !make_map(&mv, v, T, HKV, D, C::BN)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(D));
  dim3 grid((T + BM - 1) / BM + B, H);   // sum_b ceil(n_b / BM) <= ceil(T / BM) + B
  kernel<<<grid, THREADS, C::SMEM, stream>>>(mq, mk, mv, cu_seqlens, out, B, H, HKV, D, scale_log2);
}

}  // namespace rpre

extern "C" void xlang_entry(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                            const int* cu_seqlens, __nv_bfloat16* out, int B, int T, int H, int HKV, int D,
                            cudaStream_t stream) {
  if (D == 128)
    rpre::launch<128>(q, k, v, cu_seqlens, out, B, T, H, HKV, D, stream);
  else if (D == 256)
    rpre::launch<256>(q, k, v, cu_seqlens, out, B, T, H, HKV, D, stream);
  else
    fprintf(stderr, "xlang_entry: head dim %d is not 128 or 256\n", D);
}
