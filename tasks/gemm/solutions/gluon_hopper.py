"""Gluon GEMM expert for Hopper (sm_90a), v2: C = A @ B.T, bf16 in and out, fp32 accumulation.

Persistent, warp-specialised, cooperative (the CUTLASS "cooperative" schedule written in Gluon):

* Grid: one CTA per SM (132 on an H200), each walking output tiles tile = pid, pid + #CTAs, ... in a grouped
  order (GROUP_M row-tiles per column band), so the CTAs running at one time share A and B tiles in L2.
* Tile BLOCK_M x BLOCK_N = 128x256, BLOCK_K = 64. Three partitions (gl.warp_specialize):
  - producer, 1 warp (few registers): for every (tile, k-block) it waits until ring slot s is empty, then
    issues the TMA loads of the A [128, 64] and B [256, 64] blocks into slot s, completing on ready[s];
  - two consumer warpgroups (the default partition and a 4-warp worker, 240 registers each): warpgroup w owns
    rows [64 w, 64 w + 64) of the tile, a 64x256 fp32 accumulator (128 registers a thread). It waits on
    ready[s], issues its wgmma asynchronously (A rows sliced from the slot, B through a transposed view), and
    keeps one wgmma in flight: after warpgroup_mma_wait(1) the previous k-block's wgmma has retired, so that
    slot is released by an arrive on empty[s]. empty[s] counts one arrival per consumer warpgroup, so the
    producer refills a slot only when both halves are done with it.
  - epilogue, in each consumer warpgroup: the accumulator is cut along N into EPI_SPLIT sub-tiles, each
    converted to bf16, written to a shared staging buffer (C_BUFS of them, used in turn) and stored by TMA.
    The store is not waited for: before a buffer is rewritten, tma.store_wait(C_BUFS - 1) lets the newest
    store still run. Meanwhile the producer is already loading the next tile's first k-blocks.
* Barrier phases: one running counter `it` over all (tile, k-block) pairs of the CTA, the same sequence in
  every partition; slot s = it % STAGES, round r = it // STAGES. Consumers wait ready[s] for parity r & 1; the
  producer waits empty[s] for parity (r & 1) ^ 1 -- a fresh mbarrier counts its "previous" phase (parity 1)
  as complete, so round 0 does not block. Each slot's use gets exactly one expect (producer) and one arrive
  per consumer warpgroup.
* Tails: TMA zero-fills loads past the matrix edge (the expect byte count is still the full box) and clips
  stores, so any M and N, K multiples of 8, work; epilogue sub-tiles wholly past M or N are not stored.
* Synchronisation inside a consumer warpgroup: mbarrier.arrive is issued by one thread; Triton's membar pass
  puts a bar.sync of the warpgroup (named barrier, 128 threads) before it, so all four warps have passed
  their warpgroup_mma_wait. Registers: setmaxnreg gives each consumer warpgroup 240 and the producer's 24.

Shared memory: STAGES x 48 KiB ring + 2 x C_BUFS x 64 x (256 / EPI_SPLIT) x 2 B staging (224 KiB as set).
On the H200 (benchmarks/expert_probe.py, 2026-11-30): correct at the default shape and at M=1000,N=520,K=264;
714 TFLOP/s vs cuBLAS 708 (do_bench) at 8192x7168x5120. This ring depth and staging (STAGES 3, one 64x256
buffer per warpgroup) measured as fast as STAGES 4 with four 64x64 sub-tiles in two buffers (703 vs 700).
"""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# Tuning knobs (the variant files change only these).
BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64  # BLOCK_M = 64 x CONSUMERS; BLOCK_N <= 256 (one wgmma N)
STAGES = 3  # TMA ring depth
GROUP_M = 8  # row-tiles per band of the grouped tile order
CONSUMERS = 2  # consumer warpgroups; each owns BLOCK_M // CONSUMERS rows of the tile (64: one wgmma M)
EPI_SPLIT = 1  # epilogue sub-tiles along N per warpgroup (power of 2)
C_BUFS = 1  # staging buffers per warpgroup for the epilogue (stores in flight: C_BUFS - 1 while writing)
PRODUCER_REGS = 24  # registers per thread of the producer warp's warpgroup
CONSUMER_REGS = 240  # registers per thread of each consumer warpgroup


@gluon.jit
def _tile_coords(tile, tiles_m, tiles_n, GROUP_M: gl.constexpr):
    # Grouped order: GROUP_M row-tiles form a band walked column by column (row index fastest).
    per_group = GROUP_M * tiles_n
    group = tile // per_group
    first_m = group * GROUP_M
    rows = gl.minimum(tiles_m - first_m, GROUP_M)
    r = tile % per_group
    return first_m + r % rows, r // rows


@gluon.jit
def _producer(a_desc, b_desc, a_ring, b_ring, ready, empty, M, N, K, GROUP_M: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = a_ring.shape[0]
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    tiles_m = gl.cdiv(M, BM)
    tiles_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
        tm, tn = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tm * BM
        off_n = tn * BN
        for kb in range(n_k):
            s = it % STAGES
            # Slot free? (round 0 passes at once: a fresh barrier's parity-1 phase counts as complete.)
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kb * BK], ready.index(s), a_ring.index(s))
            tma.async_copy_global_to_shared(b_desc, [off_n, kb * BK], ready.index(s), b_ring.index(s))
            it += 1


@gluon.jit
def _split_n(x, PARTS: gl.constexpr):
    # Cut [R, N] into PARTS [R, N / PARTS] pieces along N, in order (halving repeatedly; no data movement:
    # the high bits of the column index are register bits of the wgmma accumulator layout).
    xs = (x,)
    for _ in gl.static_range(PARTS.bit_length() - 1):
        nxt = ()
        for j in gl.static_range(len(xs)):
            y = xs[j]
            nxt += y.reshape(y.shape[0], 2, y.shape[1] // 2).permute(0, 2, 1).split()
        xs = nxt
    return xs


@gluon.jit
def _consumer(
    a_desc, b_desc, c_desc, a_ring, b_ring, ready, empty, c_smem, M, N, K, GROUP_M: gl.constexpr, WG: gl.constexpr
):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    ROWS: gl.constexpr = c_desc.block_type.shape[0]  # this warpgroup's rows of the tile
    EPI_N: gl.constexpr = c_desc.block_type.shape[1]
    EPI_SPLIT: gl.constexpr = BN // EPI_N
    STAGES: gl.constexpr = a_ring.shape[0]
    C_BUFS: gl.constexpr = c_smem.shape[0] // 2  # per warpgroup (two consumer warpgroups)
    # One warpgroup: wgmma m64 x n(BN) x k16, the four warps stacked along M.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    tiles_m = gl.cdiv(M, BM)
    tiles_n = gl.cdiv(N, BN)
    n_k = gl.cdiv(K, BK)
    it = 0
    n_store = 0
    for tile in range(gl.program_id(0), tiles_m * tiles_n, gl.num_programs(0)):
        tm, tn = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        off_m = tm * BM + WG * ROWS
        off_n = tn * BN
        acc = gl.zeros([ROWS, BN], gl.float32, acc_layout)
        for kb in range(n_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            a = a_ring.index(s).slice(WG * ROWS, ROWS)
            b = b_ring.index(s).permute((1, 0))  # B is stored [N, K]: the MMA reads the transposed view
            acc = warpgroup_mma(a, b, acc, is_async=True)
            # One wgmma stays in flight; the previous one has retired, so its slot goes back to the producer
            # (at kb == 0 that slot was already released at the end of the previous tile).
            acc, _, _ = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a, b))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kb > 0)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))

        # Epilogue: bf16 sub-tiles through shared memory, TMA stores left in flight.
        parts = _split_n(acc, EPI_SPLIT)
        for i in gl.static_range(EPI_SPLIT):
            # Sub-tiles wholly past the matrix edge are skipped (and not counted: the buffer rotation below
            # must see only stores actually issued).
            if (off_m < M) & (off_n + i * EPI_N < N):
                out = parts[i].to(c_desc.dtype)
                buf = c_smem.index(WG * C_BUFS + n_store % C_BUFS)
                # The store that last read `buf` was issued C_BUFS stores ago: wait only for that one.
                tma.store_wait(pendings=C_BUFS - 1)
                buf.store(out)
                fence_async_shared()
                tma.async_copy_shared_to_global(c_desc, [off_m, off_n + i * EPI_N], buf)
                n_store += 1
    tma.store_wait(pendings=0)


@gluon.jit
def _gemm_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    STAGES: gl.constexpr,
    GROUP_M: gl.constexpr,
    CONSUMERS: gl.constexpr,
    EPI_SPLIT: gl.constexpr,
    C_BUFS: gl.constexpr,
    PRODUCER_REGS: gl.constexpr,
    CONSUMER_REGS: gl.constexpr,
):
    gl.static_assert(CONSUMERS == 2, "two consumer warpgroups: the default partition and one worker")
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [CONSUMERS * C_BUFS] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)  # the producer's expect; the bytes complete it
        mbarrier.init(empty.index(s), count=CONSUMERS)  # one arrival per consumer warpgroup
    fence_async_shared()  # barrier inits visible to the async proxy before any TMA uses them

    gl.warp_specialize(
        [
            (_consumer, (a_desc, b_desc, c_desc, a_ring, b_ring, ready, empty, c_smem, M, N, K, GROUP_M, 0)),
            (_consumer, (a_desc, b_desc, c_desc, a_ring, b_ring, ready, empty, c_smem, M, N, K, GROUP_M, 1)),
            (_producer, (a_desc, b_desc, a_ring, b_ring, ready, empty, M, N, K, GROUP_M)),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )


def _descriptor(t, block):
    return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))


_SMS = {}


def _sm_count(device):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SMS:
        _SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SMS[idx]


def xlang_entry(A, B, C, M, N, K):
    rows = BLOCK_M // CONSUMERS
    a_desc = _descriptor(A, [BLOCK_M, BLOCK_K])
    b_desc = _descriptor(B, [BLOCK_N, BLOCK_K])
    c_desc = _descriptor(C, [rows, BLOCK_N // EPI_SPLIT])
    tiles = ((M + BLOCK_M - 1) // BLOCK_M) * ((N + BLOCK_N - 1) // BLOCK_N)
    grid = (min(_sm_count(A.device), tiles),)
    _gemm_kernel[grid](
        a_desc,
        b_desc,
        c_desc,
        M,
        N,
        K,
        STAGES=STAGES,
        GROUP_M=GROUP_M,
        CONSUMERS=CONSUMERS,
        EPI_SPLIT=EPI_SPLIT,
        C_BUFS=C_BUFS,
        PRODUCER_REGS=PRODUCER_REGS,
        CONSUMER_REGS=CONSUMER_REGS,
        num_warps=4,
    )
