"""Gluon attention-backward expert for Blackwell (sm_100a); with CAUSAL = True the attn_bwd_causal expert.

Same math and the same three launches as the Hopper expert (gluon_hopper.py: its docstring has the formulas, the
tail and causal rules), with fifth-generation MMAs into tensor memory:
* `_delta_kernel`: Delta = rowsum(dO * O) in fp32.
* `_dkdv_kernel`: one CTA (8 warps) per (key block of 128, batch x kv head); K, V stay in shared memory; Q and dO
  of each query block (64 rows) of each of the G query heads of the group stream through a two-slot TMA ring
  (one mbarrier per slot; step i + 1 requested at the start of step i). Per step: S^T = K Q^T and
  dP^T = V dO^T by tcgen05.mma into tensor memory (one commit after both); P^T and dS^T computed in registers
  (tcgen05.ld), written to shared memory as bf16; dV += P^T dO and dK += dS^T Q by tcgen05.mma accumulating in
  tensor memory over the whole walk (so the GQA sum is one CTA's, in a fixed order: deterministic). The step's
  last commit is waited before the next step reuses S^T / P^T / dS^T and before its ring slot is refilled.
  Tensor memory: S^T 64 + dP^T 64 + dV DP + dK DP columns (<= 384 of 512).
* `_dq_kernel`: one CTA (8 warps, 128 query rows) per (query block, batch x head); Q, dO stay, K, V stream
  (64 keys per step); S and dP into tensor memory, dS to shared memory, dQ += dS K in tensor memory.
* Stores: masked stores from the tensor-memory register layout (2-D views: a tail tile must not write the next
  head's rows).

Never run on a GPU (no B200 is lent): built for sm_100a and its SASS census checked only; the CPU model of its
algorithm is tasks/attn_bwd/verify/attn_bwd_gluon_emulate.py (tasks/attn_bwd/NOTES_gluon.md).
"""

import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.blackwell import (TensorMemoryLayout, allocate_tensor_memory,
                                                                 fence_async_shared, get_tmem_reg_layout, mbarrier,
                                                                 tcgen05_mma, tma)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

CAUSAL = False
DKDV_BM, DKDV_BN = 64, 128  # dK/dV pass: query rows per step, keys per CTA (the MMA's M = 128)
DQ_BM, DQ_BN = 128, 64  # dQ pass: query rows per CTA, keys per step
NUM_WARPS = 8
DELTA_ROWS = 64
LOG2E = 1.4426950408889634


@gluon.jit
def _delta_kernel(O, dO, Delta, n_rows, D, BR: gl.constexpr, DP: gl.constexpr, num_warps: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    rows = gl.program_id(0) * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, DP, layout=gl.SliceLayout(0, layout))
    mask = gl.expand_dims(rows < n_rows, 1) & gl.expand_dims(cols < D, 0)
    offs = gl.expand_dims(rows.to(gl.int64), 1) * D + gl.expand_dims(cols, 0)
    o = gl.load(O + offs, mask=mask, other=0.0).to(gl.float32)
    do = gl.load(dO + offs, mask=mask, other=0.0).to(gl.float32)
    gl.store(Delta + rows, gl.sum(o * do, 1), mask=rows < n_rows)


@gluon.jit
def _store_rows(ptr, tile, row0, n_valid, D, layout: gl.constexpr):
    # Rows row0 .. row0 + n_valid - 1 of a [rows, D] tensor; columns past D and rows past n_valid are not ours.
    R: gl.constexpr = tile.shape[0]
    C: gl.constexpr = tile.shape[1]
    r = gl.arange(0, R, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, C, layout=gl.SliceLayout(0, layout))
    offs = (row0.to(gl.int64) + gl.expand_dims(r, 1)) * D + gl.expand_dims(c, 0)
    mask = gl.expand_dims(r < n_valid, 1) & gl.expand_dims(c < D, 0)
    gl.store(ptr + offs, tile.to(gl.bfloat16), mask=mask)


@gluon.jit
def _dkdv_kernel(q_desc, k_desc, v_desc, do_desc, dK, dV, LSE, Delta, H, HKV, S, D, qk_scale, scale,
                 IS_CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = q_desc.block_type.shape[0]
    DP: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    ring_bytes: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes

    start_n = gl.program_id(0) * BN
    bkv = gl.program_id(1)
    group = H // HKV
    head0 = (bkv // HKV) * H + (bkv % HKV) * group  # first query head (b * H + h) of this kv head's group
    first_m = 0
    if IS_CAUSAL:
        first_m = start_n  # BN is a multiple of BM: earlier query blocks see none of these keys
    n_q = gl.cdiv(S - first_m, BM)
    n_steps = group * n_q

    k_smem = gl.allocate_shared_memory(k_desc.dtype, [BN, DP], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [BN, DP], v_desc.layout)
    q_ring = gl.allocate_shared_memory(q_desc.dtype, [2, BM, DP], q_desc.layout)
    do_ring = gl.allocate_shared_memory(do_desc.dtype, [2, BM, DP], do_desc.layout)
    op_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, BM], gl.bfloat16)
    pt_smem = gl.allocate_shared_memory(gl.bfloat16, [BN, BM], op_smem_layout)
    dst_smem = gl.allocate_shared_memory(gl.bfloat16, [BN, BM], op_smem_layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ring_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mma_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    mbarrier.init(mma_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(ring_bar.index(i), count=1)

    st_tmem_layout: gl.constexpr = TensorMemoryLayout(block=(BN, BM), col_stride=1)
    acc_tmem_layout: gl.constexpr = TensorMemoryLayout(block=(BN, DP), col_stride=1)
    st_tmem = allocate_tensor_memory(gl.float32, [BN, BM], st_tmem_layout)
    dpt_tmem = allocate_tensor_memory(gl.float32, [BN, BM], st_tmem_layout)
    dv_tmem = allocate_tensor_memory(gl.float32, [BN, DP], acc_tmem_layout)
    dk_tmem = allocate_tensor_memory(gl.float32, [BN, DP], acc_tmem_layout)
    st_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, [BN, BM], st_tmem_layout, num_warps)
    acc_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, [BN, DP], acc_tmem_layout, num_warps)

    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [bkv * S + start_n, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [bkv * S + start_n, 0], kv_bar, v_smem)
    mbarrier.expect(ring_bar.index(0), ring_bytes)
    tma.async_copy_global_to_shared(q_desc, [head0 * S + first_m, 0], ring_bar.index(0), q_ring.index(0))
    tma.async_copy_global_to_shared(do_desc, [head0 * S + first_m, 0], ring_bar.index(0), do_ring.index(0))

    offs_n = start_n + gl.arange(0, BN, layout=gl.SliceLayout(1, st_layout))
    cols = gl.arange(0, BM, layout=gl.SliceLayout(0, st_layout))
    mbarrier.wait(kv_bar, 0)

    mma_phase = 0
    for it in range(n_steps):
        slot = it % 2
        # Request step it + 1 into the other slot; its last readers (step it - 1's MMAs) were waited on.
        nxt = it + 1
        ok = nxt < n_steps
        row_n = (head0 + nxt // n_q) * S + first_m + (nxt % n_q) * BM
        mbarrier.expect(ring_bar.index(1 - slot), ring_bytes, pred=ok)
        tma.async_copy_global_to_shared(q_desc, [row_n, 0], ring_bar.index(1 - slot), q_ring.index(1 - slot), pred=ok)
        tma.async_copy_global_to_shared(do_desc, [row_n, 0], ring_bar.index(1 - slot), do_ring.index(1 - slot),
                                        pred=ok)

        bh = head0 + it // n_q
        offs_m = first_m + (it % n_q) * BM + cols
        in_seq = offs_m < S
        # +inf LSE past S: P is exactly 0 there (those rows are the next head's or TMA zeros).
        lse2 = gl.load(LSE + bh.to(gl.int64) * S + offs_m, mask=in_seq, other=float("inf")) * 1.4426950408889634
        delta = gl.load(Delta + bh.to(gl.int64) * S + offs_m, mask=in_seq, other=0.0)

        mbarrier.wait(ring_bar.index(slot), (it // 2) & 1)
        q_smem = q_ring.index(slot)
        do_smem = do_ring.index(slot)
        tcgen05_mma(k_smem, q_smem.permute((1, 0)), st_tmem, use_acc=False)
        tcgen05_mma(v_smem, do_smem.permute((1, 0)), dpt_tmem, use_acc=False, mbarriers=[mma_bar])
        mbarrier.wait(mma_bar, mma_phase)
        mma_phase ^= 1

        p_t = gl.exp2(st_tmem.load(st_layout) * qk_scale - gl.expand_dims(lse2, 0))
        if IS_CAUSAL:
            if first_m + (it % n_q) * BM < start_n + BN:  # the diagonal band; later query blocks see every key
                p_t = gl.where(gl.expand_dims(offs_m, 0) >= gl.expand_dims(offs_n, 1), p_t, 0.0)
        pt_smem.store(p_t.to(gl.bfloat16))
        ds_t = p_t * (dpt_tmem.load(st_layout) - gl.expand_dims(delta, 0))
        dst_smem.store(ds_t.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()  # every warp's part of P^T, dS^T is in shared memory (and S^T, dP^T read) first

        tcgen05_mma(pt_smem, do_smem, dv_tmem, use_acc=it > 0)
        tcgen05_mma(dst_smem, q_smem, dk_tmem, use_acc=it > 0, mbarriers=[mma_bar])
        mbarrier.wait(mma_bar, mma_phase)
        mma_phase ^= 1

    mbarrier.invalidate(kv_bar)
    mbarrier.invalidate(mma_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(ring_bar.index(i))
    _store_rows(dK, dk_tmem.load(acc_layout) * scale, bkv * S + start_n, S - start_n, D, acc_layout)
    _store_rows(dV, dv_tmem.load(acc_layout), bkv * S + start_n, S - start_n, D, acc_layout)


@gluon.jit
def _dq_kernel(q_desc, k_desc, v_desc, do_desc, dQ, LSE, Delta, H, HKV, S, D, qk_scale, scale,
               IS_CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = q_desc.block_type.shape[0]
    DP: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    ring_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes

    pid_m = gl.program_id(0)
    if IS_CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m  # longest CTAs first
    start_m = pid_m * BM
    bh = gl.program_id(1)
    kv_row = ((bh // H) * HKV + (bh % H) // (H // HKV)) * S
    end_n = S
    mask_from = S  # key blocks reaching past this key need a mask
    if IS_CAUSAL:
        end_n = gl.minimum(S, start_m + BM)
        mask_from = gl.minimum(S, start_m)
    n_blocks = gl.cdiv(end_n, BN)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [BM, DP], q_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, [BM, DP], do_desc.layout)
    k_ring = gl.allocate_shared_memory(k_desc.dtype, [2, BN, DP], k_desc.layout)
    v_ring = gl.allocate_shared_memory(v_desc.dtype, [2, BN, DP], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(gl.bfloat16, [BM, BN], gl.NVMMASharedLayout.get_default_for([BM, BN],
                                                                                                   gl.bfloat16))
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ring_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mma_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(mma_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(ring_bar.index(i), count=1)

    s_tmem_layout: gl.constexpr = TensorMemoryLayout(block=(BM, BN), col_stride=1)
    acc_tmem_layout: gl.constexpr = TensorMemoryLayout(block=(BM, DP), col_stride=1)
    s_tmem = allocate_tensor_memory(gl.float32, [BM, BN], s_tmem_layout)
    dp_tmem = allocate_tensor_memory(gl.float32, [BM, BN], s_tmem_layout)
    dq_tmem = allocate_tensor_memory(gl.float32, [BM, DP], acc_tmem_layout)
    s_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, [BM, BN], s_tmem_layout, num_warps)
    acc_layout: gl.constexpr = get_tmem_reg_layout(gl.float32, [BM, DP], acc_tmem_layout, num_warps)

    mbarrier.expect(q_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [bh * S + start_m, 0], q_bar, q_smem)
    tma.async_copy_global_to_shared(do_desc, [bh * S + start_m, 0], q_bar, do_smem)
    mbarrier.expect(ring_bar.index(0), ring_bytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row, 0], ring_bar.index(0), k_ring.index(0))
    tma.async_copy_global_to_shared(v_desc, [kv_row, 0], ring_bar.index(0), v_ring.index(0))

    offs_m = start_m + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    in_seq = offs_m < S
    lse2 = gl.load(LSE + bh.to(gl.int64) * S + offs_m, mask=in_seq, other=float("inf")) * 1.4426950408889634
    delta = gl.load(Delta + bh.to(gl.int64) * S + offs_m, mask=in_seq, other=0.0)
    cols0 = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    mbarrier.wait(q_bar, 0)

    mma_phase = 0
    for j in range(n_blocks):
        slot = j % 2
        ok = j + 1 < n_blocks
        mbarrier.expect(ring_bar.index(1 - slot), ring_bytes, pred=ok)
        tma.async_copy_global_to_shared(k_desc, [kv_row + (j + 1) * BN, 0], ring_bar.index(1 - slot),
                                        k_ring.index(1 - slot), pred=ok)
        tma.async_copy_global_to_shared(v_desc, [kv_row + (j + 1) * BN, 0], ring_bar.index(1 - slot),
                                        v_ring.index(1 - slot), pred=ok)
        mbarrier.wait(ring_bar.index(slot), (j // 2) & 1)
        k_smem = k_ring.index(slot)
        tcgen05_mma(q_smem, k_smem.permute((1, 0)), s_tmem, use_acc=False)
        tcgen05_mma(do_smem, v_ring.index(slot).permute((1, 0)), dp_tmem, use_acc=False, mbarriers=[mma_bar])
        mbarrier.wait(mma_bar, mma_phase)
        mma_phase ^= 1

        p = gl.exp2(s_tmem.load(s_layout) * qk_scale - gl.expand_dims(lse2, 1))
        if (j + 1) * BN > mask_from:
            cols = j * BN + cols0
            keep = gl.expand_dims(cols < S, 0)
            if IS_CAUSAL:
                keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(offs_m, 1))
            p = gl.where(keep, p, 0.0)
        ds = p * (dp_tmem.load(s_layout) - gl.expand_dims(delta, 1))
        ds_smem.store(ds.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()  # every warp's part of dS is in shared memory (and S, dP read) first

        tcgen05_mma(ds_smem, k_smem, dq_tmem, use_acc=j > 0, mbarriers=[mma_bar])
        mbarrier.wait(mma_bar, mma_phase)
        mma_phase ^= 1

    mbarrier.invalidate(q_bar)
    mbarrier.invalidate(mma_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(ring_bar.index(i))
    _store_rows(dQ, dq_tmem.load(acc_layout) * scale, bh * S + start_m, S - start_m, D, acc_layout)


def _descriptor(t, rows, block):
    flat = t.view(rows, t.shape[-1])
    return TensorDescriptor.from_tensor(flat, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))


def _cdiv(a, b):
    return (a + b - 1) // b


def xlang_entry(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D):
    DP = 64 if D <= 64 else 128
    scale = 1.0 / math.sqrt(D)
    qk_scale = scale * LOG2E
    q_rows, kv_rows = B * H * S, B * HKV * S
    Delta = torch.empty((B, H, S), dtype=torch.float32, device=Q.device)
    _delta_kernel[(_cdiv(q_rows, DELTA_ROWS),)](O, dO, Delta, q_rows, D, BR=DELTA_ROWS, DP=DP, num_warps=4)

    q_desc = _descriptor(Q, q_rows, [DKDV_BM, DP])
    do_desc = _descriptor(dO, q_rows, [DKDV_BM, DP])
    k_desc = _descriptor(K, kv_rows, [DKDV_BN, DP])
    v_desc = _descriptor(V, kv_rows, [DKDV_BN, DP])
    _dkdv_kernel[(_cdiv(S, DKDV_BN), B * HKV)](q_desc, k_desc, v_desc, do_desc, dK, dV, LSE, Delta, H, HKV, S, D,
                                               qk_scale, scale, IS_CAUSAL=CAUSAL, num_warps=NUM_WARPS)

    q_desc = _descriptor(Q, q_rows, [DQ_BM, DP])
    do_desc = _descriptor(dO, q_rows, [DQ_BM, DP])
    k_desc = _descriptor(K, kv_rows, [DQ_BN, DP])
    v_desc = _descriptor(V, kv_rows, [DQ_BN, DP])
    _dq_kernel[(_cdiv(S, DQ_BM), B * H)](q_desc, k_desc, v_desc, do_desc, dQ, LSE, Delta, H, HKV, S, D, qk_scale,
                                         scale, IS_CAUSAL=CAUSAL, num_warps=NUM_WARPS)
