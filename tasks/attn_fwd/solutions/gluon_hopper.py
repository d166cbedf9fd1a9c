"""Gluon attention-forward expert for Hopper (sm_90a); with CAUSAL = True the attn_fwd_causal expert.

Q, K, V are viewed as 2-D [rows, D] tensors (rows = batch x heads x S) and read with TMA in tiles whose width is
the head dim padded to a power of two (DP; TMA zero-fills columns past D). One CTA (two warpgroups) owns BM query
rows of one head: the Q tile is loaded once; K and V tiles go through a two-slot ring, the next pair prefetched
by TMA while the current one is used. Scores come from a wgmma with both operands in shared memory; the online
softmax runs in the exp2 domain in registers; P (bf16, in registers) is the A operand of the second wgmma with V
from shared memory. Keys past S (which on the 2-D view belong to the next head) and, for the causal variant,
keys after the query are masked out. O and LSE are written with masked stores (rows past S are not ours).

Never run on a GPU: built for sm_90a and its SASS census checked only (see tasks/attn_fwd/NOTES_gluon.md).
"""

import math

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma
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
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    kv_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(kv_bar.index(i), count=1)

    end_n = S
    if IS_CAUSAL:
        end_n = gl.minimum(S, start_m + BM)
    n_blocks = gl.cdiv(end_n, BN)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    mbarrier.expect(kv_bar.index(0), kv_bytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row, 0], kv_bar.index(0), k_ring.index(0))
    tma.async_copy_global_to_shared(v_desc, [kv_row, 0], kv_bar.index(0), v_ring.index(0))

    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, DP, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows = start_m + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))

    m_i = gl.full([BM], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BM, DP], gl.float32, o_layout)
    mbarrier.wait(q_bar, 0)

    for j in range(n_blocks):
        slot = j % 2
        # Prefetch the next K/V pair into the other slot (its previous user, block j-1, is finished).
        nxt = j + 1
        ok = nxt < n_blocks
        mbarrier.expect(kv_bar.index(1 - slot), kv_bytes, pred=ok)
        tma.async_copy_global_to_shared(k_desc, [kv_row + nxt * BN, 0], kv_bar.index(1 - slot),
                                        k_ring.index(1 - slot), pred=ok)
        tma.async_copy_global_to_shared(v_desc, [kv_row + nxt * BN, 0], kv_bar.index(1 - slot),
                                        v_ring.index(1 - slot), pred=ok)
        mbarrier.wait(kv_bar.index(slot), (j // 2) & 1)

        s = warpgroup_mma(q_smem, k_ring.index(slot).permute((1, 0)), gl.zeros([BM, BN], gl.float32, s_layout),
                          use_acc=False)
        s = s * qk_scale
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
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)
        acc = warpgroup_mma(p_op, v_ring.index(slot), acc)

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(kv_bar.index(i))

    # LSE in natural log: scores were scaled by log2(e).
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
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
