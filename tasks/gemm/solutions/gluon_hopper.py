"""Gluon GEMM expert for Hopper (sm_90a): C = A @ B.T, bf16 in and out, fp32 accumulation.

One CTA per 128x256 tile of C, two warpgroups (8 warps). A STAGES-deep ring of shared-memory slots is filled
by TMA (completion counted on one mbarrier per slot) while warpgroup MMAs (wgmma) consume it asynchronously:
one MMA stays in flight, and the slot the previous MMA read is refilled as soon as that MMA has retired.
The epilogue converts the fp32 accumulator to bf16 and writes it back through shared memory with a TMA store
(TMA clips the tile at the matrix edge, so any M and N, K multiple of 8, work).

Never run on a GPU: built for sm_90a and its SASS census checked only (see tasks/gemm/NOTES_gluon.md).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64
STAGES = 3
NUM_WARPS = 8


@gluon.jit
def _gemm_kernel(a_desc, b_desc, c_desc, K, STAGES: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    tile_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN

    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BN, BK], b_desc.layout)
    loaded = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(loaded.index(s), count=1)

    n_k = gl.cdiv(K, BK)
    # Fill all but one slot before the first MMA.
    for i in gl.static_range(STAGES - 1):
        ok = i < n_k
        mbarrier.expect(loaded.index(i), tile_bytes, pred=ok)
        tma.async_copy_global_to_shared(a_desc, [off_m, i * BK], loaded.index(i), a_ring.index(i), pred=ok)
        tma.async_copy_global_to_shared(b_desc, [off_n, i * BK], loaded.index(i), b_ring.index(i), pred=ok)

    # Accumulator: one wgmma instruction shape m16 x n(BN) x k16 per warp, warps stacked along M.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    for k in range(n_k):
        slot = k % STAGES
        mbarrier.wait(loaded.index(slot), (k // STAGES) & 1)
        # B is stored [N, K]: the MMA reads the transposed view of its tile (no data movement).
        acc = warpgroup_mma(a_ring.index(slot), b_ring.index(slot).permute((1, 0)), acc, is_async=True)
        # Keep this MMA in flight; the one before it has now retired, so its slot can be refilled.
        acc, _, _ = warpgroup_mma_wait(num_outstanding=1, deps=(acc, a_ring.index(slot), b_ring.index(slot)))
        nxt = k + STAGES - 1
        refill = nxt % STAGES
        ok = nxt < n_k
        mbarrier.expect(loaded.index(refill), tile_bytes, pred=ok)
        tma.async_copy_global_to_shared(a_desc, [off_m, nxt * BK], loaded.index(refill), a_ring.index(refill),
                                        pred=ok)
        tma.async_copy_global_to_shared(b_desc, [off_n, nxt * BK], loaded.index(refill), b_ring.index(refill),
                                        pred=ok)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(loaded.index(s))

    c_tile = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
    c_tile.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_tile)
    tma.store_wait(pendings=0)


def _descriptor(t, block):
    return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))


def _cdiv(a, b):
    return (a + b - 1) // b


def xlang_entry(A, B, C, M, N, K):
    a_desc = _descriptor(A, [BLOCK_M, BLOCK_K])
    b_desc = _descriptor(B, [BLOCK_N, BLOCK_K])
    c_desc = _descriptor(C, [BLOCK_M, BLOCK_N])
    grid = (_cdiv(M, BLOCK_M), _cdiv(N, BLOCK_N))
    _gemm_kernel[grid](a_desc, b_desc, c_desc, K, STAGES=STAGES, num_warps=NUM_WARPS)
