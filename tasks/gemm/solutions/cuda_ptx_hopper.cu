// Expert Hopper GEMM (sm_90a) for the xlang `gemm` task:  C[M,N] = A[M,K] . B[N,K]^T,
// bf16 in / bf16 out, fp32 accumulation, all row-major.
//
// Design, top-down
// ----------------
// * Persistent grid: one CTA per SM; each CTA walks output tiles tile = blockIdx.x, +gridDim.x, ...
//   in a grouped order (GROUP_M row-tiles share each column-tile) so the CTAs running at the same
//   time touch a compact band of A and B, which stays in L2.
// * Output tile 128 x 256, K step 64 (64 bf16 = 128 bytes: one 128-byte-swizzled row).
// * Three warpgroups (384 threads), specialised:
//     WG0  producer: one thread issues TMA loads (A box 64x128, B box 64x256) into a ring of
//          STAGES shared-memory slots; each slot has a "full" mbarrier (TMA transaction bytes) and
//          an "empty" mbarrier (released by the consumers). It gives registers away (setmaxnreg.dec).
//     WG1, WG2  consumers: each owns 64 rows x 256 columns of the tile (128 fp32 accumulators per
//          thread) and issues wgmma.m64n256k16 straight from the swizzled shared tiles. They take
//          registers (setmaxnreg.inc). One wgmma batch stays in flight: a slot is released only
//          after the *next* batch has been issued and the previous one retired (wait_group 1).
// * Tails: TMA zero-fills any part of a box outside [M or N) x [K), so partial tiles and a K tail
//   just multiply zeros; the epilogue clips stores to row < M and col < N (N % 8 == 0, so the
//   column pairs a thread writes are never split by the edge).
// * Epilogue: accumulators -> bf16 pairs -> global, straight from registers. While the consumers
//   store, the producer is already filling slots for the CTA's next tile.
//   Default (TMA_EPI): each consumer writes its 64 x 256 bf16 block into a private shared buffer laid
//   out as four 64 x 64 boxes with the 128-byte swizzle (so the 8 rows a warp writes per instruction
//   hit distinct banks), then one thread issues four TMA stores, which clip at M and N. The stores
//   drain while the warpgroup already runs the next tile's main loop; the buffer is reused only
//   after the store has finished reading it. The plain path (direct 4-byte global stores from
//   registers) is kept for comparison: it was 9% behind cuBLAS at the default shape (NOTES.md).
//
// * Optional (CLUSTER = 2, off by default): two CTAs on vertically adjacent tiles form a cluster; each
//   loads half of the shared B tile and multicasts it to both, and a slot is released to a producer
//   only when the consumers of both CTAs are done with it. Correct, but measured slower (NOTES.md, v3).
//
// All PTX used is wrapped in small helpers below; nothing comes from outside headers, so the
// kernel does not depend on the project's template headers.
#include <cstdint>
#include <cstdio>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace hgemm {

constexpr int BM = 128, BN = 256, BK = 64;
constexpr int CONSUMERS = 2;                       // consumer warpgroups, 64 rows each
constexpr int THREADS = 128 * (CONSUMERS + 1);
constexpr int A_BYTES = BM * BK * 2;               // 16 KiB per slot
constexpr int B_BYTES = BN * BK * 2;               // 32 KiB per slot
constexpr int C_BYTES = 64 * BN * 2;               // one consumer's 64 x 256 bf16 output staging
// Shared memory: the slot ring, then (TMA-store epilogue) one staging buffer per consumer, then barriers.
__host__ __device__ constexpr int smem_bytes(int stages, bool tma_epi) {
  return stages * (A_BYTES + B_BYTES) + (tma_epi ? CONSUMERS * C_BYTES : 0) + 1024 /*align slack*/ + 256;
}

// ---------------------------------------------------------------- PTX helpers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Arm the barrier for one phase: one arrival (this thread) plus `bytes` of TMA transactions.
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
// 2-D TMA store of one box from shared memory (rows/columns outside the tensor are not written).
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(src)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until this thread's committed bulk stores have finished reading shared memory.
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// Make this thread's ordinary shared-memory writes visible to the async proxy (TMA store).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Barrier over one warpgroup (named barrier `id`, 128 threads).
__device__ __forceinline__ void wg_barrier(int id) { asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- clusters (CLUSTER = 2: two CTAs on neighbouring row-tiles share, via multicast, the B tile)
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// Arrive on the barrier at the same shared-memory offset in CTA `cta` of the cluster (self included).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 ra;\n"
      "mapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n"
      ::"r"(smem_addr(bar)), "r"(cta) : "memory");
}
// Wait with cluster-scope acquire: the arrivals may come from the other CTA's consumers.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done) : "r"(a), "r"(parity) : "memory");
  } while (!done);
}
// TMA load whose box lands at the same offset in every CTA of `mask`, each CTA's barrier at `bar`'s
// offset receiving the transaction bytes.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                                      int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
        "h"(mask)
      : "memory");
}

template <int REGS> __device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS> __device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// wgmma shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle:
//   bits  0-13  start address >> 4
//   bits 16-29  leading byte offset >> 4 (not used by swizzled K-major layouts; 1 by convention)
//   bits 32-45  stride byte offset >> 4: distance between 8-row groups = 8 rows x 128 B = 1024 B
//   bits 62-63  layout: 1 = 128-byte swizzle
// The slot base is 1024-byte aligned, so the base-offset field (bits 49-51) stays 0. Stepping K by
// 16 elements inside the 128-byte row adds 32 bytes to the start address (2 in the encoded field):
// the hardware applies the swizzle to the full address, which is how TMA laid the data out.
__device__ __forceinline__ uint64_t smem_desc(const void* tile) {
  return (static_cast<uint64_t>(smem_addr(tile) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// Keep the compiler from moving accumulator registers across the asynchronous wgmma.
__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D(64x256, fp32, registers) (+)= A(64x16, smem) * B(256x16, smem)^T; accumulate == 0 overwrites D.
// Register i of a thread (lane l of warp w in the warpgroup) holds row 16w + l/4 + 8*((i/2)%2),
// column 8*(i/4) + 2*(l%4) + (i%2).
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(accumulate));
}

// ---------------------------------------------------------------- the kernel
// Tile t -> (tile_m, tile_n): groups of GROUP_M row-tiles; inside a group the row index moves fastest.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int group_m, int& tm, int& tn) {
  const int per_group = group_m * tiles_n;
  const int g = t / per_group;
  const int first_m = g * group_m;
  const int rows = min(tiles_m - first_m, group_m);
  const int r = t - g * per_group;
  tm = first_m + r % rows;
  tn = r / rows;
}

template <int STAGES, bool TMA_EPI, int CLUSTER>
__global__ void __launch_bounds__(THREADS, 1)
gemm_tma_wgmma_ws(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                  const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ C, int M, int N,
                  int K, int group_m) {
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled tiles need 1024-byte alignment of the shared-memory address.
  uint8_t* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint8_t* slot_a = smem;                              // STAGES x 16 KiB
  uint8_t* slot_b = smem + STAGES * A_BYTES;           // STAGES x 32 KiB
  uint8_t* stage_c = smem + STAGES * (A_BYTES + B_BYTES);  // CONSUMERS x 32 KiB (TMA_EPI only)
  uint64_t* full = reinterpret_cast<uint64_t*>(stage_c + (TMA_EPI ? CONSUMERS * C_BYTES : 0));
  uint64_t* empty = full + STAGES;

  const int wg = threadIdx.x / 128;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  // Work units: a cluster takes CLUSTER vertically adjacent tiles (same column-tile) at a time.
  const int units_m = (tiles_m + CLUSTER - 1) / CLUSTER;
  const int units = units_m * tiles_n;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0;
  const int first_unit = blockIdx.x / CLUSTER, unit_step = gridDim.x / CLUSTER;
  const int kblocks = (K + BK - 1) / BK;

  if (threadIdx.x == 0) {
    tma_prefetch_map(&map_a);
    tma_prefetch_map(&map_b);
    if (TMA_EPI) tma_prefetch_map(&map_c);
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);                 // the producer's arrive.expect_tx
      mbar_init(&empty[s], CLUSTER * CONSUMERS * 4);  // lane 0 of each consumer warp, every CTA
    }
    // Make the initialised barriers visible to the async (TMA) proxy and the other threads.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (CLUSTER > 1)
    cluster_sync();  // the peer's barriers exist before any multicast or remote arrive
  else
    __syncthreads();

  if (wg == 0) {
    // ---------------- producer warpgroup
    regs_dec<40>();
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int u = first_unit; u < units; u += unit_step) {
        int um, tn;
        tile_coords(u, units_m, tiles_n, group_m, um, tn);
        const int tm = um * CLUSTER + rank;    // may lie past M (odd tile count): zero-filled, not stored
        for (int kb = 0; kb < kblocks; ++kb) {
          // The slot is free only when the consumers of every CTA it is multicast to released it.
          mbar_wait_cluster(&empty[stage], phase ^ 1);   // first pass: fresh barrier, returns at once
          mbar_arrive_expect_tx(&full[stage], A_BYTES + B_BYTES);  // full boxes, zero-fill included
          tma_load_2d(slot_a + stage * A_BYTES, &map_a, &full[stage], kb * BK, tm * BM);
          if (CLUSTER == 1) {
            tma_load_2d(slot_b + stage * B_BYTES, &map_b, &full[stage], kb * BK, tn * BN);
          } else {
            // This CTA fetches 1/CLUSTER of the B tile and multicasts it to the whole cluster.
            constexpr int part = B_BYTES / CLUSTER;
            tma_load_2d_multicast(slot_b + stage * B_BYTES + rank * part, &map_b, &full[stage], kb * BK,
                                  tn * BN + rank * (BN / CLUSTER), static_cast<uint16_t>((1u << CLUSTER) - 1));
          }
          if (++stage == STAGES) { stage = 0; phase ^= 1; }
        }
      }
    }
  } else {
    // ---------------- consumer warpgroups
    regs_inc<232>();
    const int c = wg - 1;                      // which 64-row half of the tile
    const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
    float acc[128];
    // Releasing a slot: tell every CTA whose producer writes into it (all of the cluster).
    auto release = [](uint64_t* bar) {
      if (CLUSTER == 1) {
        mbar_arrive(bar);
      } else {
#pragma unroll
        for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(bar, r);
      }
    };
    int stage = 0;
    uint32_t phase = 0;
    for (int u = first_unit; u < units; u += unit_step) {
      int um, tn;
      tile_coords(u, units_m, tiles_n, group_m, um, tn);
      const int tm = um * CLUSTER + rank;
      int prev = -1;
      for (int kb = 0; kb < kblocks; ++kb) {
        mbar_wait(&full[stage], phase);
        const uint64_t da = smem_desc(slot_a + stage * A_BYTES + c * 64 * BK * 2);
        const uint64_t db = smem_desc(slot_b + stage * B_BYTES);
        fence_acc(acc);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BK / 16; ++k)
          wgmma_m64n256k16(acc, da + 2 * k, db + 2 * k, (kb > 0 || k > 0) ? 1 : 0);
        wgmma_commit();
        fence_acc(acc);
        wgmma_wait<1>();                       // the batch before this one has retired
        if (prev >= 0 && lane == 0) release(&empty[prev]);
        prev = stage;
        if (++stage == STAGES) { stage = 0; phase ^= 1; }
      }
      wgmma_wait<0>();
      fence_acc(acc);
      if (lane == 0) release(&empty[prev]);

      if (TMA_EPI) {
        // Epilogue through shared memory and TMA stores.
        uint8_t* buf = stage_c + c * C_BYTES;
        const uint32_t buf_addr = smem_addr(buf);
        if (threadIdx.x % 128 == 0) bulk_wait_read();   // the previous tile's stores left the buffer
        wg_barrier(1 + c);
        const int r0 = warp * 16 + lane / 4;             // row inside this consumer's 64-row block
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          // Column block j/8 (64 columns = one 128-byte row), 16-byte chunk j%8 of that row,
          // swizzled: chunk ^ (row % 8). Bytes inside the chunk: 4 * (lane % 4).
          const uint32_t box = buf_addr + (j / 8) * (64 * 128);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = r0 + 8 * h;
            const uint32_t addr = box + r * 128 + (((j % 8) ^ (r % 8)) << 4) + 4 * (lane % 4);
            __nv_bfloat162 v = __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            st_shared_u32(addr, *reinterpret_cast<uint32_t*>(&v));
          }
        }
        fence_async_smem();
        wg_barrier(1 + c);
        if (threadIdx.x % 128 == 0) {
#pragma unroll
          for (int b = 0; b < BN / 64; ++b) {
            const int col = tn * BN + 64 * b;
            if (col < N && tm * BM + c * 64 < M) tma_store_2d(&map_c, buf + b * (64 * 128), col, tm * BM + c * 64);
          }
          bulk_commit();
        }
      } else {
        // Epilogue straight from registers: clip to the matrix and store bf16 pairs.
        const int row0 = tm * BM + c * 64 + warp * 16 + lane / 4;
        const int col0 = tn * BN + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int col = col0 + 8 * j;
          if (col < N) {
            if (row0 < M)
              *reinterpret_cast<__nv_bfloat162*>(C + static_cast<size_t>(row0) * N + col) =
                  __floats2bfloat162_rn(acc[4 * j + 0], acc[4 * j + 1]);
            if (row0 + 8 < M)
              *reinterpret_cast<__nv_bfloat162*>(C + static_cast<size_t>(row0 + 8) * N + col) =
                  __floats2bfloat162_rn(acc[4 * j + 2], acc[4 * j + 3]);
          }
        }
      }
    }
    // Shared memory must outlive the stores reading it.
    if (TMA_EPI && threadIdx.x % 128 == 0) bulk_wait_all();
  }
  // No CTA may leave while its peer can still multicast into it or arrive on its barriers.
  if (CLUSTER > 1) cluster_sync();
}

// ---------------------------------------------------------------- host side
typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link-time libcuda needed).
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

// Row-major [rows, K] bf16 matrix, box of box_rows x 64, 128-byte swizzle, zero fill out of bounds.
// (Also used for C [M, N] with 64 x 64 store boxes.)
static bool make_map(CUtensorMap* map, const void* base, int rows, int K, int box_rows) {
  EncodeTiled fn = encode_fn();
  if (!fn) return false;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(K) * 2};
  cuuint32_t box[2] = {BK, static_cast<cuuint32_t>(box_rows)};
  cuuint32_t elem[2] = {1, 1};
  return fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem,
            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Tuning knobs (the benchmark sweeps them; 0 = the heuristic's choice).
static int g_group_m = 0, g_ctas = 0, g_plain_epi = 0, g_resident = 0;

// Launch a persistent grid: as many CTAs (whole clusters) as can be resident at once, at most one per unit.
template <int STAGES, bool TMA_EPI, int CLUSTER>
static void launch(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                   int group_m, int max_ctas, cudaStream_t stream) {
  constexpr int bytes = smem_bytes(STAGES, TMA_EPI);
  auto kernel = gemm_tma_wgmma_ws<STAGES, TMA_EPI, CLUSTER>;
  CUtensorMap ma, mb, mc;
  if (!make_map(&ma, A, M, K, BM) || !make_map(&mb, B, N, K, BN / CLUSTER) || !make_map(&mc, C, M, N, 64)) {
    fprintf(stderr, "xlang_entry: cuTensorMapEncodeTiled failed\n");
    return;
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CLUSTER;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  static int resident = 0;  // CTAs of this configuration that fit on the GPU at once
  if (!resident) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    int dev = 0, sms = 0, clusters = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cfg.gridDim = dim3(sms / CLUSTER * CLUSTER);
    if (CLUSTER > 1 && cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0)
      resident = clusters * CLUSTER;
    else
      resident = sms / CLUSTER * CLUSTER;
  }
  const int units = ((M + BM * CLUSTER - 1) / (BM * CLUSTER)) * ((N + BN - 1) / BN);
  g_resident = resident;
  int ctas = min(units * CLUSTER, max_ctas > 0 ? max_ctas : resident);
  ctas = max(CLUSTER, ctas / CLUSTER * CLUSTER);
  cfg.gridDim = dim3(ctas);
  cudaLaunchKernelEx(&cfg, kernel, ma, mb, mc, C, M, N, K, group_m);
}

}  // namespace hgemm

// Benchmark hook: group_m (in cluster units), CTA count, plain epilogue (4 stages, no cluster),
// cluster size (1 or 2); 0 = the default.
static int g_cluster = 0;
extern "C" void xlang_gemm_hopper_tune(int group_m, int ctas, int plain_epi, int cluster) {
  g_cluster = cluster;
  hgemm::g_plain_epi = plain_epi;
  hgemm::g_group_m = group_m;
  hgemm::g_ctas = ctas;
}

extern "C" void xlang_entry(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                            cudaStream_t stream) {
  using namespace hgemm;
  // Default: no cluster. The two-CTA multicast path is correct but measured 0.68x of the plain one
  // (NOTES.md, v3); it stays selectable for the benchmark until that is understood.
  const int cluster = g_cluster ? g_cluster : 1;
  const int group_m = g_group_m > 0 ? g_group_m : (cluster == 2 ? 4 : 8);
  if (g_plain_epi)
    launch<4, false, 1>(A, B, C, M, N, K, group_m, g_ctas, stream);
  else if (cluster == 2)
    launch<3, true, 2>(A, B, C, M, N, K, group_m, g_ctas, stream);
  else
    launch<3, true, 1>(A, B, C, M, N, K, group_m, g_ctas, stream);
}

// Benchmark hook: the resident-CTA count the last launch used for its persistent grid.
extern "C" int xlang_gemm_hopper_resident() { return hgemm::g_resident; }
