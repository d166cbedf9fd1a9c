"""Gluon attention-backward expert for Hopper (sm_90a); with CAUSAL = True the attn_bwd_causal expert.

Given dO and the forward's Q, K, V, O, LSE (natural log of the scaled scores), write dQ, dK, dV:
  P = exp(scale Q K^T - LSE) (recomputed)   dV = P^T dO   dP = dO V^T   dS = P * (dP - Delta)
  Delta = rowsum(dO * O)                    dK = scale dS^T Q            dQ = scale dS K
with scale = 1/sqrt(D), GQA kv head = h // (H // HKV), any S >= 1, D in {64, 96, 128}.

Design (FlashAttention-2's split, as tasks/attn_bwd/solutions/triton.py, in three launches, no atomics):
* `_delta_kernel`: Delta = rowsum(dO * O) in fp32 over the flat [B*H*S, D] rows, plain loads.
* `_dkdv_kernel`: one CTA (8 warps = two warpgroups, 64 keys each) per (key block of 128, batch x kv head).
  K and V stay in shared memory; dK and dV accumulate in registers (the wgmma accumulator layout) while the CTA
  walks every query block (64 rows) of every one of the G query heads of its kv head, so the GQA sum is done in
  one CTA's registers, in a fixed order: deterministic. Per query block, keys as rows:
  S^T = K Q^T and dP^T = V dO^T are issued back to back as async wgmma (both operands in shared memory, Q and
  dO through their transposed views); P^T = exp2(S^T * scale*log2e - LSE*log2e) is computed as soon as S^T is
  done; dV += P^T dO is issued (P^T from registers as the A operand) while dP^T finishes; then dS^T and
  dK += dS^T Q. dK is scaled once at the end.
* `_dq_kernel`: one CTA (8 warps, 128 query rows) per (query block, batch x head): Q and dO stay in shared
  memory, K and V stream through a ring; S = Q K^T and dP = dO V^T async, P, dS, dQ += dS K (dS from registers).
* Loads: TMA (tensor descriptors over the 2-D [rows, D] views, box DP wide: D padded to 64 or 128, columns past
  D zero-filled, adding nothing to any dot) into a two-slot ring with one mbarrier per slot: the tile of step
  i + 1 is requested at the start of step i, so it lands while step i computes (a double-buffered K-loop).
  The slot written at step i + 1 was last read by step i - 1's wgmmas: every warpgroup waited them out
  (warpgroup_mma_wait(0)) and a CTA barrier ends each step, so no warpgroup can still be reading it.
* Tails, on the 2-D view (rows past S belong to the next head, or are TMA zeros past the tensor): query rows
  past S get LSE = +inf and Delta = 0, so their P and dS are exactly 0 and they add nothing to dK, dV; key rows
  past S are rows of the dK/dV accumulators the masked store drops; in the dQ pass a key block that reaches past
  S (or past the block's first row, causal) is masked (P = 0 there). Causal: the dK/dV pass starts at the query
  block of its first key (earlier queries see none of them) and masks j <= i on the diagonal band only (query
  blocks starting before the key block's end); the dQ pass stops after the block's last row and runs the longest
  CTAs first.
* Stores: plain masked stores from the accumulator layout (a tail tile must not write the next head's rows).

TRITON_INTERPRET=1 does not run this file: gluon.jit always builds a GluonJITFunction (triton 3.6) and with no
GPU the launch fails ('0 active drivers'). The CPU model of its algorithm is
tasks/attn_bwd/verify/attn_bwd_gluon_emulate.py. NEVER RUN ON A GPU (tasks/attn_bwd/NOTES_gluon.md): built for
sm_90a and its SASS census checked only; no figure of its speed exists.
"""

import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

CAUSAL = False
DKDV_BM, DKDV_BN = 64, 128  # dK/dV pass: query rows per step, keys per CTA (two warpgroups x 64 keys)
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
    st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, BM, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, DP, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)

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
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ring_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(ring_bar.index(i), count=1)

    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [bkv * S + start_n, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [bkv * S + start_n, 0], kv_bar, v_smem)
    mbarrier.expect(ring_bar.index(0), ring_bytes)
    tma.async_copy_global_to_shared(q_desc, [head0 * S + first_m, 0], ring_bar.index(0), q_ring.index(0))
    tma.async_copy_global_to_shared(do_desc, [head0 * S + first_m, 0], ring_bar.index(0), do_ring.index(0))

    offs_n = start_n + gl.arange(0, BN, layout=gl.SliceLayout(1, st_layout))
    cols = gl.arange(0, BM, layout=gl.SliceLayout(0, st_layout))
    dk = gl.zeros([BN, DP], gl.float32, acc_layout)
    dv = gl.zeros([BN, DP], gl.float32, acc_layout)
    mbarrier.wait(kv_bar, 0)

    for it in range(n_steps):
        slot = it % 2
        # Request step it + 1 (query head group index g, query block) into the other slot.
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
        zero = gl.zeros([BN, BM], gl.float32, st_layout)
        st_tok = warpgroup_mma(k_smem, q_smem.permute((1, 0)), zero, use_acc=False, is_async=True)
        dpt_tok = warpgroup_mma(v_smem, do_smem.permute((1, 0)), zero, use_acc=False, is_async=True)
        s_t = warpgroup_mma_wait(1, deps=[st_tok])  # S^T done; dP^T may still run
        p_t = gl.exp2(s_t * qk_scale - gl.expand_dims(lse2, 0))
        if IS_CAUSAL:
            if first_m + (it % n_q) * BM < start_n + BN:  # the diagonal band; later query blocks see every key
                p_t = gl.where(gl.expand_dims(offs_m, 0) >= gl.expand_dims(offs_n, 1), p_t, 0.0)
        p_op = gl.convert_layout(p_t.to(gl.bfloat16), op_layout)
        dv_tok = warpgroup_mma(p_op, do_smem, dv, is_async=True)
        dp_t = warpgroup_mma_wait(1, deps=[dpt_tok])  # dP^T done; dV may still run
        ds_t = p_t * (dp_t - gl.expand_dims(delta, 0))
        ds_op = gl.convert_layout(ds_t.to(gl.bfloat16), op_layout)
        dk_tok = warpgroup_mma(ds_op, q_smem, dk, is_async=True)
        dv, dk, _, _ = warpgroup_mma_wait(0, deps=[dv_tok, dk_tok, p_op, ds_op])
        gl.thread_barrier()  # both warpgroups are done with this slot before step it + 1 refills it

    mbarrier.invalidate(kv_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(ring_bar.index(i))
    _store_rows(dK, dk * scale, bkv * S + start_n, S - start_n, D, acc_layout)
    _store_rows(dV, dv, bkv * S + start_n, S - start_n, D, acc_layout)


@gluon.jit
def _dq_kernel(q_desc, k_desc, v_desc, do_desc, dQ, LSE, Delta, H, HKV, S, D, qk_scale, scale,
               IS_CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = q_desc.block_type.shape[0]
    DP: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    ring_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BN, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, DP, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)

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
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ring_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(2):
        mbarrier.init(ring_bar.index(i), count=1)

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
    dq = gl.zeros([BM, DP], gl.float32, acc_layout)
    mbarrier.wait(q_bar, 0)

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
        zero = gl.zeros([BM, BN], gl.float32, s_layout)
        s_tok = warpgroup_mma(q_smem, k_smem.permute((1, 0)), zero, use_acc=False, is_async=True)
        dp_tok = warpgroup_mma(do_smem, v_ring.index(slot).permute((1, 0)), zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(1, deps=[s_tok])
        p = gl.exp2(s * qk_scale - gl.expand_dims(lse2, 1))
        if (j + 1) * BN > mask_from:
            cols = j * BN + cols0
            keep = gl.expand_dims(cols < S, 0)
            if IS_CAUSAL:
                keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(offs_m, 1))
            p = gl.where(keep, p, 0.0)
        dp = warpgroup_mma_wait(0, deps=[dp_tok])
        ds = p * (dp - gl.expand_dims(delta, 1))
        ds_op = gl.convert_layout(ds.to(gl.bfloat16), op_layout)
        dq_tok = warpgroup_mma(ds_op, k_smem, dq, is_async=True)
        dq, _ = warpgroup_mma_wait(0, deps=[dq_tok, ds_op])
        gl.thread_barrier()  # both warpgroups are done with this slot before step j + 1 refills it

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(2):
        mbarrier.invalidate(ring_bar.index(i))
    _store_rows(dQ, dq * scale, bh * S + start_m, S - start_m, D, acc_layout)


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
    _dkdv_kernel[(_cdiv(S, DKDV_BN), B * HKV)](q_desc, k_desc, v_desc, do_desc, dK, dV, LSE, Delta, H, HKV, S,
                                                    D, qk_scale, scale, IS_CAUSAL=CAUSAL, num_warps=NUM_WARPS)

    q_desc = _descriptor(Q, q_rows, [DQ_BM, DP])
    do_desc = _descriptor(dO, q_rows, [DQ_BM, DP])
    k_desc = _descriptor(K, kv_rows, [DQ_BN, DP])
    v_desc = _descriptor(V, kv_rows, [DQ_BN, DP])
    _dq_kernel[(_cdiv(S, DQ_BM), B * H)](q_desc, k_desc, v_desc, do_desc, dQ, LSE, Delta, H, HKV, S, D,
                                              qk_scale, scale, IS_CAUSAL=CAUSAL, num_warps=NUM_WARPS)
