"""Gluon attention-forward expert for Blackwell (sm_100a); with CAUSAL = True the attn_fwd_causal expert.

Same data path as the Hopper expert (2-D [rows, D] views read by TMA in tiles DP wide, DP the head dim padded to a
power of two; a two-slot K/V ring prefetched one block ahead), with fifth-generation MMAs: S = Q K^T is computed by
tcgen05.mma into tensor memory, read into registers (tcgen05.ld) for the exp2-domain online softmax; P is written
to shared memory as bf16 and a second tcgen05.mma computes P V into another tensor-memory buffer, which is read
back and folded into the running output in registers. Each MMA signals an mbarrier that the CTA waits on.
O and LSE are written with masked stores (on the 2-D view, rows past S belong to the next head).

Never run on a GPU: built for sm_100a and its SASS census checked only (see tasks/attn_fwd/NOTES_gluon.md).
"""

import math

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.blackwell import (TensorMemoryLayout, allocate_tensor_memory,
                                                                 fence_async_shared, get_tmem_reg_layout, mbarrier,
                                                                 tcgen05_mma, tma)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

CAUSAL = False
BLOCK_M, BLOCK_N = 128, 128
NUM_WARPS = 8


@gluon.jit
def _attn_fwd_kernel(q_desc, k_desc, v_desc, O, LSE, H, HKV, S, D, qk_scale,
                     IS_CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = q_desc.block_type.shape[0]
    DP: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    start_m = gl.program_id(0) * BM
    bh = gl.program_id(1)
    kvh = (bh // H) * HKV + (bh % H) // (H // HKV)
    q_row = bh * S + start_m
    kv_row = kvh * S

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [BM, DP], q_desc.layout)
    k_ring = gl.allocate_shared_memory(k_desc.dtype, [2, BN, DP], k_desc.layout)
    v_ring = gl.allocate_shared_memory(v_desc.dtype, [2, BN, DP], v_desc.layout)
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [BM, BN], gl.NVMMASharedLayout.get_default_for([BM, BN],
                                                                                                  gl.bfloat16))
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mma_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(mma_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(kv_bar.index(i), count=1)

    s_tmem_layout: gl.constexpr = TensorMemoryLayout(block=(BM, BN), col_stride=1)
    o_tmem_layout: gl.constexpr = TensorMemoryLayout(block=(BM, DP), col_stride=1)
    s_tmem = allocate_tensor_memory(gl.float32, [BM, BN], s_tmem_layout)
    pv_tmem = allocate_tensor_memory(gl.float32, [BM, DP], o_tmem_layout)
    s_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, [BM, BN], s_tmem_layout, num_warps)
    o_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, [BM, DP], o_tmem_layout, num_warps)

    end_n = S
    if IS_CAUSAL:
        end_n = gl.minimum(S, start_m + BM)
    n_blocks = gl.cdiv(end_n, BN)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    mbarrier.expect(kv_bar.index(0), kv_bytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row, 0], kv_bar.index(0), k_ring.index(0))
    tma.async_copy_global_to_shared(v_desc, [kv_row, 0], kv_bar.index(0), v_ring.index(0))

    rows = start_m + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    m_i = gl.full([BM], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BM, DP], gl.float32, o_layout)
    mbarrier.wait(q_bar, 0)

    mma_phase = 0
    for j in range(n_blocks):
        slot = j % 2
        nxt = j + 1
        ok = nxt < n_blocks
        mbarrier.expect(kv_bar.index(1 - slot), kv_bytes, pred=ok)
        tma.async_copy_global_to_shared(k_desc, [kv_row + nxt * BN, 0], kv_bar.index(1 - slot),
                                        k_ring.index(1 - slot), pred=ok)
        tma.async_copy_global_to_shared(v_desc, [kv_row + nxt * BN, 0], kv_bar.index(1 - slot),
                                        v_ring.index(1 - slot), pred=ok)
        mbarrier.wait(kv_bar.index(slot), (j // 2) & 1)

        tcgen05_mma(q_smem, k_ring.index(slot).permute((1, 0)), s_tmem, use_acc=False, mbarriers=[mma_bar])
        mbarrier.wait(mma_bar, mma_phase)
        mma_phase ^= 1
        s = s_tmem.load(s_layout) * qk_scale
        cols = j * BN + cols0
        keep = gl.expand_dims(cols < S, 0)
        if IS_CAUSAL:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
        s = gl.where(keep, s, float("-inf"))

        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s - gl.expand_dims(m_new, 1))
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new

        p_smem.store(p.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()  # every warp's part of P is in shared memory before the MMA is issued
        tcgen05_mma(p_smem, v_ring.index(slot), pv_tmem, use_acc=False, mbarriers=[mma_bar])
        mbarrier.wait(mma_bar, mma_phase)
        mma_phase ^= 1
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1) + pv_tmem.load(o_layout)

    mbarrier.invalidate(q_bar)
    mbarrier.invalidate(mma_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(kv_bar.index(i))

    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453  # scores were scaled by log2(e)
    gl.store(LSE + bh.to(gl.int64) * S + rows, lse, mask=rows < S)
    out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    o_rows = start_m + gl.arange(0, BM, layout=gl.SliceLayout(1, o_layout))
    o_cols = gl.arange(0, DP, layout=gl.SliceLayout(0, o_layout))
    offs = (bh.to(gl.int64) * S + gl.expand_dims(o_rows, 1)) * D + gl.expand_dims(o_cols, 0)
    mask = gl.expand_dims(o_rows < S, 1) & gl.expand_dims(o_cols < D, 0)
    gl.store(O + offs, out.to(gl.bfloat16), mask=mask)


def _descriptor(t, rows, block):
    flat = t.view(rows, t.shape[-1])
    return TensorDescriptor.from_tensor(flat, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))


def xlang_entry(Q, K, V, O, LSE, B, H, HKV, S, D):
    DP = 64 if D <= 64 else 128
    q_desc = _descriptor(Q, B * H * S, [BLOCK_M, DP])
    k_desc = _descriptor(K, B * HKV * S, [BLOCK_N, DP])
    v_desc = _descriptor(V, B * HKV * S, [BLOCK_N, DP])
    qk_scale = (1.0 / math.sqrt(D)) * 1.4426950408889634
    grid = ((S + BLOCK_M - 1) // BLOCK_M, B * H)
    _attn_fwd_kernel[grid](q_desc, k_desc, v_desc, O, LSE, H, HKV, S, D, qk_scale,
                           IS_CAUSAL=CAUSAL, num_warps=NUM_WARPS)
