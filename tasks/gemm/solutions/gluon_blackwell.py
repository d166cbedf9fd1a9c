"""Gluon GEMM expert for Blackwell (sm_100a): C = A @ B.T, bf16 in and out, fp32 accumulation in tensor memory.

One CTA per 128x256 tile of C. A STAGES-deep ring of shared-memory slots is filled by TMA ("loaded" mbarrier per
slot); each fifth-generation MMA (tcgen05.mma, issued by one thread, accumulator in tensor memory) signals the
slot's "freed" mbarrier when it has finished reading it, and that slot is then refilled. After the last MMA a
tcgen05.commit signals one barrier; the accumulator is read out of tensor memory (tcgen05.ld), converted to bf16
and stored through shared memory with TMA (clipped at the matrix edge).

Never run on a GPU: built for sm_100a and its SASS census checked only (see tasks/gemm/NOTES_gluon.md).
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.blackwell import (TensorMemoryLayout, allocate_tensor_memory,
                                                                 fence_async_shared, get_tmem_reg_layout, mbarrier,
                                                                 tcgen05_commit, tcgen05_mma, tma)
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
    freed = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    done = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(loaded.index(s), count=1)
        mbarrier.init(freed.index(s), count=1)
    mbarrier.init(done, count=1)

    tmem_layout: gl.constexpr = TensorMemoryLayout(block=(BM, BN), col_stride=1)
    acc_tmem = allocate_tensor_memory(gl.float32, [BM, BN], tmem_layout)

    n_k = gl.cdiv(K, BK)
    for i in gl.static_range(STAGES - 1):
        ok = i < n_k
        mbarrier.expect(loaded.index(i), tile_bytes, pred=ok)
        tma.async_copy_global_to_shared(a_desc, [off_m, i * BK], loaded.index(i), a_ring.index(i), pred=ok)
        tma.async_copy_global_to_shared(b_desc, [off_n, i * BK], loaded.index(i), b_ring.index(i), pred=ok)

    for k in range(n_k):
        slot = k % STAGES
        mbarrier.wait(loaded.index(slot), (k // STAGES) & 1)
        # B is stored [N, K]: the MMA reads the transposed view of its tile. use_acc=False zeroes the first time.
        tcgen05_mma(a_ring.index(slot), b_ring.index(slot).permute((1, 0)), acc_tmem, use_acc=k > 0,
                    mbarriers=[freed.index(slot)])
        # Refill the slot the previous MMA read, once that MMA has signalled it (its ((k-1)//STAGES)-th signal).
        nxt = k + STAGES - 1
        refill = nxt % STAGES
        ok = nxt < n_k
        mbarrier.wait(freed.index(refill), ((k - 1) // STAGES) & 1, pred=ok & (k > 0))
        mbarrier.expect(loaded.index(refill), tile_bytes, pred=ok)
        tma.async_copy_global_to_shared(a_desc, [off_m, nxt * BK], loaded.index(refill), a_ring.index(refill),
                                        pred=ok)
        tma.async_copy_global_to_shared(b_desc, [off_n, nxt * BK], loaded.index(refill), b_ring.index(refill),
                                        pred=ok)

    tcgen05_commit(done)  # arrives when every MMA issued so far has completed
    mbarrier.wait(done, 0)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(loaded.index(s))
        mbarrier.invalidate(freed.index(s))
    mbarrier.invalidate(done)

    acc = acc_tmem.load(get_tmem_reg_layout(gl.float32, [BM, BN], tmem_layout, num_warps))
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
