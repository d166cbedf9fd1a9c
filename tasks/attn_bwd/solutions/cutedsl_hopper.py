# NEVER run on a GPU (written 2026-11-30 without device time); see tasks/attn_bwd/NOTES_cutedsl.md
"""Expert Hopper (sm_90a) attention backward in CuTe DSL for xlang's `attn_bwd` (CAUSAL = False) and
`attn_bwd_causal` (this same file with CAUSAL = True: that task's solution_variant).

Given dO and the forward's Q, K, V, O, LSE (natural log of the scaled scores), with scale = 1/sqrt(D) and
kv head = h // (H // HKV):
    P  = exp(scale Q K^T - LSE)      recomputed per tile, never stored
    dV = P^T dO                      dP = dO V^T
    Delta = rowsum(dO * O)           dS = P * (dP - Delta)
    dQ = scale dS K                  dK = scale dS^T Q
dK and dV of a kv head sum the G = H // HKV query heads that share it. Any S >= 1, D in {64, 96, 128}.

Design, top-down (FlashAttention-2's backward split, as the Triton and cuda_ptx experts of this task; no atomics)
  * Three launches on the caller's stream, from one compiled host function:
      1. `_delta_kernel`: Delta[bh, i] = sum_d dO * O in fp32 (one warp per row) into a [B*H, S] fp32
         scratch tensor that the entry point allocates with torch on the inputs' device.
      2. `_dkdv_kernel`: one CTA per (128-key block, b*HKV + kv). K and V of the block are loaded once;
         the fp32 dK, dV accumulators stay in registers while the CTA walks every 64-row query block of
         every query head of the GQA group (step it: head it // per_head, block m_lo + it % per_head), so
         the group sum happens in registers. Per step, transposed orientation (keys are the wgmma rows):
             S^T  = K Q^T     wgmma 64x64x16 SS, K and Q K-major
             dP^T = V dO^T    wgmma 64x64x16 SS, V and dO K-major
             P^T  = exp2(S^T * scale*log2e - LSE*log2e)   masked where needed;  dS^T = P^T (dP^T - Delta)
             dV  += P^T dO    wgmma 64xDPx16 RS: A = P^T (bf16) from registers, B = dO read MN-major
             dK  += dS^T Q    wgmma 64xDPx16 RS: A = dS^T from registers, B = Q read MN-major
         dK is scaled by `scale` in the epilogue.
      3. `_dq_kernel`: one CTA per (128-query block, b*H + h). Q and dO stay in shared memory, LSE and Delta
         of the thread's two rows in registers; it walks the 64-key blocks of K and V:
             S = Q K^T, dP = dO V^T (SS, K-major), P, dS, dQ += dS K (RS: B = K read MN-major).
  * Both compute kernels use the forward expert's warp specialisation (tasks/attn_fwd/solutions/
    cutedsl_hopper.py, correct on its first H200 run), 384 threads: warpgroup 0 is the producer (one warp
    issues every TMA load: the tiles that stay, through a one-slot PipelineTmaAsync, and the streamed tiles
    through a STAGES-deep PipelineTmaAsync ring, two tiles per slot on one barrier); warpgroups 1 and 2
    are the consumers, 64 rows of the CTA's 128 each. Inside a consumer the steps run in order (wgmma
    groups are waited on at once: no intra-warpgroup overlap in this first version).
  * One shared-memory tile serves both operand majors: a 64-row tile [rows, DP] loaded K-major (the B of
    S^T = K Q^T) is, byte for byte, the MN-major B operand [DP, rows] of dK += dS^T Q (the two layouts
    CuTe builds are ((8,8),(64,c),(1,st)):((64,512),(1,4096),(0,st)) and its mode transpose, the same
    128B swizzle), so the MN-major view is the same swizzled pointer with the transposed layout.
  * The accumulator fragment of a 64 x 64 S^T tile, in its flat register order, is the register-A operand
    of the four k-blocks of the following RS wgmma (as in the forward's P V), so P^T / dS^T are the fp32
    accumulators converted to bf16 and re-viewed as ((2,2,2),1,4): no shuffles.
  * Tensors are viewed per head as [B*heads, S, D] and handed to TMA as (S, D, B*heads): the sequence bound
    is per head, so tail tiles load zero rows and the TMA stores of dQ, dK, dV (registers -> bf16 ->
    stmatrix -> swizzled smem -> TMA) are clipped at S and at D. DP = 64 (D = 64) or 128 (D = 96, 128):
    for D = 96 the columns 96..127 load as zeros (nothing added to any dot product) and are not stored.
  * Masks: the dK/dV kernel zeroes P^T where key >= S, query >= S or (causal) key > query, only in steps
    whose block can hold such a pair (LSE / Delta are read at a clamped row, so a query row >= S would
    otherwise get a finite P). The dQ kernel zeroes P where key >= S or (causal) key > query, only in
    blocks that need it; its rows >= S are never stored (each dQ row depends on its own row only).
    Causal: the dK/dV CTA of keys [n0, n0+128) starts at query block n0/64; the dQ CTA of rows
    [m0, m0+128) stops after key m0+127; dQ CTAs run last block first.
  * One compile per (DP, CAUSAL); B*heads and S are dynamic, H, HKV and the scales are runtime arguments.
"""

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
import torch
from cuda.bindings import driver as cuda_driver
from cutlass.cute.nvgpu import cpasync, warp, warpgroup
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

CAUSAL = False

KV_BN = 128                     # dK/dV kernel: keys per CTA (2 consumer warpgroups x 64)
KV_BM = 64                      # dK/dV kernel: query rows per step
Q_BM = 128                      # dQ kernel: query rows per CTA (2 consumer warpgroups x 64)
Q_BN = 64                       # dQ kernel: keys per step
WG_THREADS = 128
THREADS = 3 * WG_THREADS
CONSUMER_THREADS = 2 * WG_THREADS
PRODUCER_REGS, CONSUMER_REGS = 24, 240
DELTA_ROWS = 8                  # delta kernel: rows per CTA (one warp each)
AB = cutlass.BFloat16
ACC = cutlass.Float32
LOG2E = 1.4426950408889634
EPI_BARRIER_ID = 1              # named barrier 0 is __syncthreads


def _tile_config(D):
    """Padded head dim and ring depth. Shared memory at DP = 128: dK/dV K + V (64 KiB) + 2 x (Q + dO) (64 KiB)
    + dK, dV epilogue tiles (64 KiB) = 192 KiB; dQ Q + dO (64) + 2 x (K + V) (64) + dQ tile (32) = 160 KiB."""
    dp = 64 if D <= 64 else 128
    stages = 3 if dp == 64 else 2
    return dp, stages


def _store_acc(mma, acc, s_tile, ctid):
    """This consumer thread's fp32 accumulator of a (128 x DP) tile -> bf16 -> stmatrix into the swizzled
    epilogue tile (the forward's epilogue). The stmatrix source fragment walks the accumulator's flat order."""
    r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, AB, ACC)
    stm_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), AB)
    r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm_atom, mma))
    thr_r2s = r2s.get_slice(ctid)
    piece_shape = cute.shape(thr_r2s.partition_S(s_tile))
    piece = cute.make_rmem_tensor(piece_shape, AB)
    piece.store(cute.make_tensor(acc.iterator, cute.make_layout(piece_shape)).load().to(AB))
    cute.copy(r2s, piece, thr_r2s.partition_D(s_tile))


# ---------------------------------------------------------------------------------------------------- Delta
@cute.kernel
def _delta_kernel(mO: cute.Tensor, mdO: cute.Tensor, mDelta: cute.Tensor, seqlen: cutlass.Int32,
                  d: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    blk, bh, _ = cute.arch.block_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    lane = tidx % 32
    row = blk * DELTA_ROWS + warp_id
    if row < seqlen:
        acc = cutlass.Float32(0.0)
        for c in cutlass.range_constexpr(d // 32):     # D in {64, 96, 128}: a multiple of 32
            col = c * 32 + lane
            acc = acc + mO[(bh, row, col)].to(ACC) * mdO[(bh, row, col)].to(ACC)
        for off in cutlass.range_constexpr(5):
            acc = acc + cute.arch.shuffle_sync_bfly(acc, offset=16 >> off)
        if lane == 0:
            mDelta[(bh, row)] = acc


# ---------------------------------------------------------------------------------------------------- dK, dV
@cute.kernel
def _dkdv_kernel(
    mma_s: cute.TiledMma,        # S^T = K Q^T and dP^T = V dO^T: 128 keys x 64 query rows, K = DP
    mma_acc: cute.TiledMma,      # dV += P^T dO, dK += dS^T Q: 128 keys x DP, K = 64 query rows, A in registers
    tma_q: cute.CopyAtom, tQ: cute.Tensor,
    tma_do: cute.CopyAtom, tdO: cute.Tensor,
    tma_k: cute.CopyAtom, tK: cute.Tensor,
    tma_v: cute.CopyAtom, tV: cute.Tensor,
    tma_dk: cute.CopyAtom, tdK: cute.Tensor,
    tma_dv: cute.CopyAtom, tdV: cute.Tensor,
    mLSE: cute.Tensor,
    mDelta: cute.Tensor,
    key_lay: cute.ComposedLayout,    # (128, DP, 1) K-major (A operand)
    row_lay: cute.ComposedLayout,    # (64, DP, stages) K-major (B operand)
    row_lay_t: cute.ComposedLayout,  # (DP, 64, stages) MN-major (B operand): the same bytes
    epi_lay: cute.ComposedLayout,    # (128, DP, 1)
    seqlen: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale: cutlass.Float32,
    scale_log2: cutlass.Float32,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    wg = warp_id // 4
    n_blk, bkv, _ = cute.arch.block_idx()

    b = bkv // kv_heads
    kv = bkv - b * kv_heads
    group = heads // kv_heads
    n0 = n_blk * KV_BN
    n_qblk = (seqlen + KV_BM - 1) // KV_BM
    m_lo = 0
    if cutlass.const_expr(causal):
        m_lo = n0 // KV_BM                       # earlier query blocks see none of these keys
    per_head = n_qblk - m_lo
    steps = group * per_head

    if warp_id == 0:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_do)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cpasync.prefetch_descriptor(tma_dk)
        cpasync.prefetch_descriptor(tma_dv)

    smem = cutlass.utils.SmemAllocator()
    bar_kv = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_row = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    sK = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)    # (128, dp, 1)
    sV = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)
    sQ = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)    # (64, dp, st)
    sdO = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)
    sdK = smem.allocate_tensor(AB, epi_lay.outer, byte_alignment=1024, swizzle=epi_lay.inner)   # (128, dp, 1)
    sdV = smem.allocate_tensor(AB, epi_lay.outer, byte_alignment=1024, swizzle=epi_lay.inner)
    # The MN-major views (dp, 64, st) of the Q and dO slots: same swizzled pointer, transposed layout.
    sQt = cute.make_tensor(sQ.iterator, row_lay_t.outer)
    sdOt = cute.make_tensor(sdO.iterator, row_lay_t.outer)

    key_bytes = cute.size_in_bytes(AB, cute.slice_(key_lay, (None, None, 0)))
    row_bytes = cute.size_in_bytes(AB, cute.slice_(row_lay, (None, None, 0)))
    producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS // 32)
    kv_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=1, producer_group=producer, consumer_group=consumers, tx_count=2 * key_bytes,
        barrier_storage=bar_kv,
    )
    row_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=stages, producer_group=producer, consumer_group=consumers, tx_count=2 * row_bytes,
        barrier_storage=bar_row,
    )

    if wg == 0:
        # ================================================================== producer warpgroup
        cute.arch.setmaxregister_decrease(PRODUCER_REGS)
        if warp_id == 0:
            gK = cute.local_tile(tK[(None, None, bkv)], (KV_BN, dp), (None, 0))     # (128, dp, n_tiles)
            gV = cute.local_tile(tV[(None, None, bkv)], (KV_BN, dp), (None, 0))
            k_dst, k_src = cpasync.tma_partition(
                tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2)
            )
            v_dst, v_src = cpasync.tma_partition(
                tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2)
            )
            kv_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            kv_pipe.producer_acquire(kv_put)
            cute.copy(tma_k, k_src[(None, n_blk)], k_dst[(None, 0)], tma_bar_ptr=kv_pipe.producer_get_barrier(kv_put))
            cute.copy(tma_v, v_src[(None, n_blk)], v_dst[(None, 0)], tma_bar_ptr=kv_pipe.producer_get_barrier(kv_put))

            row_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
            for it in cutlass.range(steps, unroll=1):
                g = it // per_head
                m = m_lo + (it - g * per_head)
                bh = b * heads + kv * group + g
                gQ = cute.local_tile(tQ[(None, None, bh)], (KV_BM, dp), (None, 0))    # (64, dp, m_tiles)
                gdO = cute.local_tile(tdO[(None, None, bh)], (KV_BM, dp), (None, 0))
                q_dst, q_src = cpasync.tma_partition(
                    tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
                )
                do_dst, do_src = cpasync.tma_partition(
                    tma_do, 0, cute.make_layout(1), cute.group_modes(sdO, 0, 2), cute.group_modes(gdO, 0, 2)
                )
                row_pipe.producer_acquire(row_put)
                cute.copy(tma_q, q_src[(None, m)], q_dst[(None, row_put.index)],
                          tma_bar_ptr=row_pipe.producer_get_barrier(row_put))
                cute.copy(tma_do, do_src[(None, m)], do_dst[(None, row_put.index)],
                          tma_bar_ptr=row_pipe.producer_get_barrier(row_put))
                row_put.advance()
            row_pipe.producer_tail(row_put)
    else:
        # ================================================================== consumer warpgroups
        cute.arch.setmaxregister_increase(CONSUMER_REGS)
        ctid = tidx - WG_THREADS                 # 0..255; warpgroup wg-1 owns keys n0 + 64(wg-1) .. +63

        thr_s = mma_s.get_slice((wg - 1) * WG_THREADS)
        fK = mma_s.make_fragment_A(thr_s.partition_A(sK))          # (.., MMA_M, MMA_K, 1)
        fV = mma_s.make_fragment_A(thr_s.partition_A(sV))
        fQ = mma_s.make_fragment_B(thr_s.partition_B(sQ))          # (.., MMA_N, MMA_K, stages)
        fdO = mma_s.make_fragment_B(thr_s.partition_B(sdO))
        acc_s = cute.make_rmem_tensor(thr_s.partition_C(cute.make_identity_tensor((KV_BN, KV_BM))).shape, ACC)
        acc_dp = cute.make_rmem_tensor(acc_s.shape, ACC)
        # (key, query) inside the 128 x 64 tile of each of this thread's S^T registers
        coord_s = mma_s.get_slice(ctid).partition_C(cute.make_identity_tensor((KV_BN, KV_BM)))
        s_kblocks = cute.size(fK, mode=[2])

        thr_a = mma_acc.get_slice((wg - 1) * WG_THREADS)
        fQt = mma_acc.make_fragment_B(thr_a.partition_B(sQt))       # (.., MMA_N, 4 k-blocks, stages)
        fdOt = mma_acc.make_fragment_B(thr_a.partition_B(sdOt))
        acc_dk = cute.make_rmem_tensor(thr_a.partition_C(cute.make_identity_tensor((KV_BN, dp))).shape, ACC)
        acc_dv = cute.make_rmem_tensor(acc_dk.shape, ACC)
        a_kblocks = cute.size(fQt, mode=[2])

        # Accumulator flat index i = c + 2 r + 4 v (c column pair, r row +8, v 8-column group): the query
        # column depends on (c, v) only, so 2 * (KV_BM / 8) LSE / Delta values per thread, j = c + 2 v.
        n_s = cute.size(acc_s)
        n_cols = n_s // 2
        lse2 = cute.make_rmem_tensor((n_cols,), ACC)
        dlt = cute.make_rmem_tensor((n_cols,), ACC)
        p_bf16 = cute.make_rmem_tensor(acc_s.shape, AB)
        ds_bf16 = cute.make_rmem_tensor(acc_s.shape, AB)
        frag_p = cute.make_tensor(p_bf16.iterator, cute.make_layout(((2, 2, 2), 1, KV_BM // 16)))
        frag_ds = cute.make_tensor(ds_bf16.iterator, cute.make_layout(((2, 2, 2), 1, KV_BM // 16)))

        acc_dk.fill(0.0)
        acc_dv.fill(0.0)
        mma_s.set(warpgroup.Field.ACCUMULATE, True)
        mma_acc.set(warpgroup.Field.ACCUMULATE, True)

        kv_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        row_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        kv_pipe.consumer_wait(kv_get)

        for it in cutlass.range(steps, unroll=1):
            g = it // per_head
            m = m_lo + (it - g * per_head)
            bh = b * heads + kv * group + g
            q0 = m * KV_BM
            # LSE * log2(e) and Delta of this thread's query columns (row clamped to S - 1: columns >= S
            # are masked below, so the clamped values only keep the arithmetic finite).
            for j in cutlass.range_constexpr(n_cols):
                qrow = cutlass.min(q0 + coord_s[(j % 2) + 4 * (j // 2)][1], seqlen - 1)
                lse2[j] = mLSE[(bh, qrow)] * LOG2E
                dlt[j] = mDelta[(bh, qrow)]

            # ---------------- S^T = K Q^T, dP^T = V dO^T
            row_pipe.consumer_wait(row_get)
            slot = row_get.index
            acc_s.fill(0.0)
            acc_dp.fill(0.0)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(s_kblocks):
                cute.gemm(mma_s, acc_s, fK[(None, None, kb, 0)], fQ[(None, None, kb, slot)], acc_s)
            for kb in cutlass.range_constexpr(s_kblocks):
                cute.gemm(mma_s, acc_dp, fV[(None, None, kb, 0)], fdO[(None, None, kb, slot)], acc_dp)
            warpgroup.commit_group()
            warpgroup.wait_group(0)

            # ---------------- P^T, masked only where the step can hold a dead (key, query) pair
            for i in cutlass.range_constexpr(n_s):
                j = (i % 2) + 2 * (i // 4)
                acc_s[i] = cute.arch.exp2(acc_s[i] * scale_log2 - lse2[j])
            needs_mask = (n0 + KV_BN > seqlen) | (q0 + KV_BM > seqlen)
            if cutlass.const_expr(causal):
                needs_mask = needs_mask | (q0 < n0 + KV_BN)
            if needs_mask:
                for i in cutlass.range_constexpr(n_s):
                    key = n0 + coord_s[i][0]
                    qrow = q0 + coord_s[i][1]
                    dead = (key >= seqlen) | (qrow >= seqlen)
                    if cutlass.const_expr(causal):
                        dead = dead | (key > qrow)
                    if dead:
                        acc_s[i] = 0.0
            p_bf16.store(acc_s.load().to(AB))
            # ---------------- dS^T = P^T (dP^T - Delta)
            for i in cutlass.range_constexpr(n_s):
                acc_dp[i] = acc_s[i] * (acc_dp[i] - dlt[(i % 2) + 2 * (i // 4)])
            ds_bf16.store(acc_dp.load().to(AB))

            # ---------------- dV += P^T dO, dK += dS^T Q (A from registers, B MN-major views)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(a_kblocks):
                cute.gemm(mma_acc, acc_dv, frag_p[(None, None, kb)], fdOt[(None, None, kb, slot)], acc_dv)
            for kb in cutlass.range_constexpr(a_kblocks):
                cute.gemm(mma_acc, acc_dk, frag_ds[(None, None, kb)], fQt[(None, None, kb, slot)], acc_dk)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            row_pipe.consumer_release(row_get)
            row_get.advance()

        # ---------------- epilogue: dK * scale, dV -> bf16 -> smem (stmatrix) -> TMA store (clipped)
        for i in cutlass.range_constexpr(cute.size(acc_dk)):
            acc_dk[i] = acc_dk[i] * scale
        _store_acc(mma_acc, acc_dk, sdK[(None, None, 0)], ctid)
        _store_acc(mma_acc, acc_dv, sdV[(None, None, 0)], ctid)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=EPI_BARRIER_ID, number_of_threads=CONSUMER_THREADS)
        if warp_id == 4:
            gdK = cute.local_tile(tdK[(None, None, bkv)], (KV_BN, dp), (None, 0))
            gdV = cute.local_tile(tdV[(None, None, bkv)], (KV_BN, dp), (None, 0))
            dk_src, dk_dst = cpasync.tma_partition(
                tma_dk, 0, cute.make_layout(1), cute.group_modes(sdK, 0, 2), cute.group_modes(gdK, 0, 2)
            )
            dv_src, dv_dst = cpasync.tma_partition(
                tma_dv, 0, cute.make_layout(1), cute.group_modes(sdV, 0, 2), cute.group_modes(gdV, 0, 2)
            )
            cute.copy(tma_dk, dk_src[(None, 0)], dk_dst[(None, n_blk)])
            cute.copy(tma_dv, dv_src[(None, 0)], dv_dst[(None, n_blk)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


# ---------------------------------------------------------------------------------------------------- dQ
@cute.kernel
def _dq_kernel(
    mma_s: cute.TiledMma,        # S = Q K^T and dP = dO V^T: 128 query rows x 64 keys, K = DP
    mma_acc: cute.TiledMma,      # dQ += dS K: 128 query rows x DP, K = 64 keys, A in registers
    tma_q: cute.CopyAtom, tQ: cute.Tensor,
    tma_do: cute.CopyAtom, tdO: cute.Tensor,
    tma_k: cute.CopyAtom, tK: cute.Tensor,
    tma_v: cute.CopyAtom, tV: cute.Tensor,
    tma_dq: cute.CopyAtom, tdQ: cute.Tensor,
    mLSE: cute.Tensor,
    mDelta: cute.Tensor,
    row_lay: cute.ComposedLayout,    # (128, DP, 1) K-major (A operand)
    key_lay: cute.ComposedLayout,    # (64, DP, stages) K-major (B operand)
    key_lay_t: cute.ComposedLayout,  # (DP, 64, stages) MN-major (B operand): the same bytes
    epi_lay: cute.ComposedLayout,    # (128, DP, 1)
    seqlen: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale: cutlass.Float32,
    scale_log2: cutlass.Float32,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    wg = warp_id // 4
    blk_x, bh, _ = cute.arch.block_idx()
    n_mblk, _, _ = cute.arch.grid_dim()

    m_blk = blk_x
    if cutlass.const_expr(causal):
        m_blk = n_mblk - 1 - blk_x               # longest causal rows first
    m0 = m_blk * Q_BM
    b = bh // heads
    h = bh - b * heads
    kv_row = b * kv_heads + h // (heads // kv_heads)
    kend = seqlen
    if cutlass.const_expr(causal):
        kend = cutlass.min(seqlen, m0 + Q_BM)    # keys past the tile's last row are invisible
    n_kblk = (kend + Q_BN - 1) // Q_BN

    if warp_id == 0:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_do)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cpasync.prefetch_descriptor(tma_dq)

    smem = cutlass.utils.SmemAllocator()
    bar_q = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_kv = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    sQ = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)    # (128, dp, 1)
    sdO = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)
    sK = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)    # (64, dp, st)
    sV = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)
    sdQ = smem.allocate_tensor(AB, epi_lay.outer, byte_alignment=1024, swizzle=epi_lay.inner)   # (128, dp, 1)
    sKt = cute.make_tensor(sK.iterator, key_lay_t.outer)                                        # (dp, 64, st)

    row_bytes = cute.size_in_bytes(AB, cute.slice_(row_lay, (None, None, 0)))
    key_bytes = cute.size_in_bytes(AB, cute.slice_(key_lay, (None, None, 0)))
    producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS // 32)
    q_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=1, producer_group=producer, consumer_group=consumers, tx_count=2 * row_bytes,
        barrier_storage=bar_q,
    )
    kv_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=stages, producer_group=producer, consumer_group=consumers, tx_count=2 * key_bytes,
        barrier_storage=bar_kv,
    )

    if wg == 0:
        # ================================================================== producer warpgroup
        cute.arch.setmaxregister_decrease(PRODUCER_REGS)
        if warp_id == 0:
            gQ = cute.local_tile(tQ[(None, None, bh)], (Q_BM, dp), (None, 0))          # (128, dp, m_tiles)
            gdO = cute.local_tile(tdO[(None, None, bh)], (Q_BM, dp), (None, 0))
            gK = cute.local_tile(tK[(None, None, kv_row)], (Q_BN, dp), (None, 0))      # (64, dp, n_tiles)
            gV = cute.local_tile(tV[(None, None, kv_row)], (Q_BN, dp), (None, 0))
            q_dst, q_src = cpasync.tma_partition(
                tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
            )
            do_dst, do_src = cpasync.tma_partition(
                tma_do, 0, cute.make_layout(1), cute.group_modes(sdO, 0, 2), cute.group_modes(gdO, 0, 2)
            )
            k_dst, k_src = cpasync.tma_partition(
                tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gK, 0, 2)
            )
            v_dst, v_src = cpasync.tma_partition(
                tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gV, 0, 2)
            )
            q_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
            q_pipe.producer_acquire(q_put)
            cute.copy(tma_q, q_src[(None, m_blk)], q_dst[(None, 0)], tma_bar_ptr=q_pipe.producer_get_barrier(q_put))
            cute.copy(tma_do, do_src[(None, m_blk)], do_dst[(None, 0)],
                      tma_bar_ptr=q_pipe.producer_get_barrier(q_put))
            kv_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
            for n in cutlass.range(n_kblk, unroll=1):
                kv_pipe.producer_acquire(kv_put)
                cute.copy(tma_k, k_src[(None, n)], k_dst[(None, kv_put.index)],
                          tma_bar_ptr=kv_pipe.producer_get_barrier(kv_put))
                cute.copy(tma_v, v_src[(None, n)], v_dst[(None, kv_put.index)],
                          tma_bar_ptr=kv_pipe.producer_get_barrier(kv_put))
                kv_put.advance()
            kv_pipe.producer_tail(kv_put)
    else:
        # ================================================================== consumer warpgroups
        cute.arch.setmaxregister_increase(CONSUMER_REGS)
        ctid = tidx - WG_THREADS                 # 0..255; warpgroup wg-1 owns rows m0 + 64(wg-1) .. +63

        thr_s = mma_s.get_slice((wg - 1) * WG_THREADS)
        fQ = mma_s.make_fragment_A(thr_s.partition_A(sQ))          # (.., MMA_M, MMA_K, 1)
        fdO = mma_s.make_fragment_A(thr_s.partition_A(sdO))
        fK = mma_s.make_fragment_B(thr_s.partition_B(sK))          # (.., MMA_N, MMA_K, stages)
        fV = mma_s.make_fragment_B(thr_s.partition_B(sV))
        acc_s = cute.make_rmem_tensor(thr_s.partition_C(cute.make_identity_tensor((Q_BM, Q_BN))).shape, ACC)
        acc_dp = cute.make_rmem_tensor(acc_s.shape, ACC)
        # (query row, key) inside the 128 x 64 tile of each of this thread's S registers
        coord_s = mma_s.get_slice(ctid).partition_C(cute.make_identity_tensor((Q_BM, Q_BN)))
        s_kblocks = cute.size(fQ, mode=[2])

        thr_a = mma_acc.get_slice((wg - 1) * WG_THREADS)
        fKt = mma_acc.make_fragment_B(thr_a.partition_B(sKt))       # (.., MMA_N, 4 k-blocks, stages)
        acc_dq = cute.make_rmem_tensor(thr_a.partition_C(cute.make_identity_tensor((Q_BM, dp))).shape, ACC)
        a_kblocks = cute.size(fKt, mode=[2])

        n_s = cute.size(acc_s)
        ds_bf16 = cute.make_rmem_tensor(acc_s.shape, AB)
        frag_ds = cute.make_tensor(ds_bf16.iterator, cute.make_layout(((2, 2, 2), 1, Q_BN // 16)))
        # LSE * log2(e) and Delta of this thread's two rows (flat i with (i // 2) % 2 == r is row r); rows
        # >= S read row S - 1 (finite values; those dQ rows are never stored).
        lse2 = cute.make_rmem_tensor((2,), ACC)
        dlt = cute.make_rmem_tensor((2,), ACC)
        for r in cutlass.range_constexpr(2):
            qrow = cutlass.min(m0 + coord_s[2 * r][0], seqlen - 1)
            lse2[r] = mLSE[(bh, qrow)] * LOG2E
            dlt[r] = mDelta[(bh, qrow)]

        acc_dq.fill(0.0)
        mma_s.set(warpgroup.Field.ACCUMULATE, True)
        mma_acc.set(warpgroup.Field.ACCUMULATE, True)

        q_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        kv_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        q_pipe.consumer_wait(q_get)

        for n in cutlass.range(n_kblk, unroll=1):
            k0 = n * Q_BN
            # ---------------- S = Q K^T, dP = dO V^T
            kv_pipe.consumer_wait(kv_get)
            slot = kv_get.index
            acc_s.fill(0.0)
            acc_dp.fill(0.0)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(s_kblocks):
                cute.gemm(mma_s, acc_s, fQ[(None, None, kb, 0)], fK[(None, None, kb, slot)], acc_s)
            for kb in cutlass.range_constexpr(s_kblocks):
                cute.gemm(mma_s, acc_dp, fdO[(None, None, kb, 0)], fV[(None, None, kb, slot)], acc_dp)
            warpgroup.commit_group()
            warpgroup.wait_group(0)

            # ---------------- P (masked where the block holds keys >= S or above the diagonal), dS
            for i in cutlass.range_constexpr(n_s):
                acc_s[i] = cute.arch.exp2(acc_s[i] * scale_log2 - lse2[(i // 2) % 2])
            needs_mask = k0 + Q_BN > seqlen
            if cutlass.const_expr(causal):
                needs_mask = needs_mask | (k0 + Q_BN > m0)
            if needs_mask:
                for i in cutlass.range_constexpr(n_s):
                    key = k0 + coord_s[i][1]
                    dead = key >= seqlen
                    if cutlass.const_expr(causal):
                        dead = dead | (key > m0 + coord_s[i][0])
                    if dead:
                        acc_s[i] = 0.0
            for i in cutlass.range_constexpr(n_s):
                acc_dp[i] = acc_s[i] * (acc_dp[i] - dlt[(i // 2) % 2])
            ds_bf16.store(acc_dp.load().to(AB))

            # ---------------- dQ += dS K (A from registers, B = the K slot read MN-major)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(a_kblocks):
                cute.gemm(mma_acc, acc_dq, frag_ds[(None, None, kb)], fKt[(None, None, kb, slot)], acc_dq)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            kv_pipe.consumer_release(kv_get)
            kv_get.advance()

        # ---------------- epilogue: dQ * scale -> bf16 -> smem (stmatrix) -> TMA store (clipped)
        for i in cutlass.range_constexpr(cute.size(acc_dq)):
            acc_dq[i] = acc_dq[i] * scale
        _store_acc(mma_acc, acc_dq, sdQ[(None, None, 0)], ctid)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=EPI_BARRIER_ID, number_of_threads=CONSUMER_THREADS)
        if warp_id == 4:
            gdQ = cute.local_tile(tdQ[(None, None, bh)], (Q_BM, dp), (None, 0))
            dq_src, dq_dst = cpasync.tma_partition(
                tma_dq, 0, cute.make_layout(1), cute.group_modes(sdQ, 0, 2), cute.group_modes(gdQ, 0, 2)
            )
            cute.copy(tma_dq, dq_src[(None, 0)], dq_dst[(None, m_blk)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


# ---------------------------------------------------------------------------------------------------- host
def _per_head(t):
    """(B*heads, S, D) -> the TMA view (S, D, B*heads)."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[1, 2, 0]))


@cute.jit
def _bwd_host(
    do: cute.Tensor,
    q: cute.Tensor,
    k: cute.Tensor,
    v: cute.Tensor,
    o: cute.Tensor,
    lse: cute.Tensor,
    delta: cute.Tensor,
    dq: cute.Tensor,
    dk: cute.Tensor,
    dv: cute.Tensor,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale: cutlass.Float32,
    scale_log2: cutlass.Float32,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
    stream: cuda_driver.CUstream,
):
    K_MAJ, MN_MAJ = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
    # C = A B^T over the head dim (both K-major): 128 rows (2 warpgroups x 64) x 64 columns.
    mma_s = sm90_utils.make_trivial_tiled_mma(AB, AB, K_MAJ, K_MAJ, ACC, (2, 1, 1), tiler_mn=(64, 64))
    # acc += A T: 128 rows x DP, A (P^T, dS^T or dS) from registers, T a 64-row tile read MN-major.
    mma_acc = sm90_utils.make_trivial_tiled_mma(
        AB, AB, K_MAJ, MN_MAJ, ACC, (2, 1, 1), tiler_mn=(64, dp), a_source=warpgroup.OperandSource.RMEM
    )
    # Shared tiles: 128-row tiles as the A operand, 64-row tiles as the B operand (K-major), and the
    # 64-row tiles' MN-major view (same bytes, modes transposed), epilogue tiles of 128 x DP.
    lay128 = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (128, 64, dp), AB, 1)
    lay64 = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (128, 64, dp), AB, stages)
    lay64_t = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (128, dp, 64), AB, stages)
    epi = sm90_utils.make_smem_layout_epi(AB, LayoutEnum.ROW_MAJOR, (128, dp), 1)
    t128 = cute.slice_(lay128, (None, None, 0))
    t64 = cute.slice_(lay64, (None, None, 0))
    t_epi = cute.slice_(epi, (None, None, 0))

    g2s = cpasync.CopyBulkTensorTileG2SOp()
    s2g = cpasync.CopyBulkTensorTileS2GOp()
    tv = {name: _per_head(t) for name, t in (("q", q), ("do", do), ("k", k), ("v", v),
                                              ("dq", dq), ("dk", dk), ("dv", dv))}
    # dK/dV kernel: K, V 128-row tiles; Q, dO 64-row tiles
    tma_k128, tK128 = cpasync.make_tiled_tma_atom(g2s, tv["k"], t128, (128, dp))
    tma_v128, tV128 = cpasync.make_tiled_tma_atom(g2s, tv["v"], t128, (128, dp))
    tma_q64, tQ64 = cpasync.make_tiled_tma_atom(g2s, tv["q"], t64, (64, dp))
    tma_do64, tdO64 = cpasync.make_tiled_tma_atom(g2s, tv["do"], t64, (64, dp))
    tma_dk, tdK = cpasync.make_tiled_tma_atom(s2g, tv["dk"], t_epi, (128, dp))
    tma_dv, tdV = cpasync.make_tiled_tma_atom(s2g, tv["dv"], t_epi, (128, dp))
    # dQ kernel: Q, dO 128-row tiles; K, V 64-row tiles
    tma_q128, tQ128 = cpasync.make_tiled_tma_atom(g2s, tv["q"], t128, (128, dp))
    tma_do128, tdO128 = cpasync.make_tiled_tma_atom(g2s, tv["do"], t128, (128, dp))
    tma_k64, tK64 = cpasync.make_tiled_tma_atom(g2s, tv["k"], t64, (64, dp))
    tma_v64, tV64 = cpasync.make_tiled_tma_atom(g2s, tv["v"], t64, (64, dp))
    tma_dq, tdQ = cpasync.make_tiled_tma_atom(s2g, tv["dq"], t_epi, (128, dp))

    seqlen = cute.size(q, mode=[1])
    n_bh = cute.size(q, mode=[0])
    n_bkv = cute.size(k, mode=[0])

    _delta_kernel(o, do, delta, seqlen, cute.size(q, mode=[2])).launch(
        grid=((seqlen + DELTA_ROWS - 1) // DELTA_ROWS, n_bh, 1), block=(DELTA_ROWS * 32, 1, 1), stream=stream
    )
    _dkdv_kernel(
        mma_s, mma_acc, tma_q64, tQ64, tma_do64, tdO64, tma_k128, tK128, tma_v128, tV128, tma_dk, tdK,
        tma_dv, tdV, lse, delta, lay128, lay64, lay64_t, epi, seqlen, heads, kv_heads, scale, scale_log2,
        dp, stages, causal,
    ).launch(grid=((seqlen + KV_BN - 1) // KV_BN, n_bkv, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1,
             stream=stream)
    _dq_kernel(
        mma_s, mma_acc, tma_q128, tQ128, tma_do128, tdO128, tma_k64, tK64, tma_v64, tV64, tma_dq, tdQ,
        lse, delta, lay128, lay64, lay64_t, epi, seqlen, heads, kv_heads, scale, scale_log2,
        dp, stages, causal,
    ).launch(grid=((seqlen + Q_BM - 1) // Q_BM, n_bh, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1,
             stream=stream)


def _wrap(t):
    # [rows, S, D] or [rows, S]: rows and S dynamic, D static (16-byte multiple, as TMA needs)
    order = tuple(range(t.dim()))
    return (
        from_dlpack(t, assumed_align=16)
        .mark_compact_shape_dynamic(mode=1, stride_order=order)
        .mark_compact_shape_dynamic(mode=0, stride_order=order)
    )


_compiled = {}


def xlang_entry(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D):
    dp, stages = _tile_config(D)
    delta = torch.empty((B * H, S), dtype=torch.float32, device=Q.device)   # Delta scratch
    rows = B * H
    kv_rows = B * HKV
    args = (
        _wrap(dO.view(rows, S, D)), _wrap(Q.view(rows, S, D)), _wrap(K.view(kv_rows, S, D)),
        _wrap(V.view(kv_rows, S, D)), _wrap(O.view(rows, S, D)), _wrap(LSE.view(rows, S)), _wrap(delta),
        _wrap(dQ.view(rows, S, D)), _wrap(dK.view(kv_rows, S, D)), _wrap(dV.view(kv_rows, S, D)),
    )
    scale = 1.0 / math.sqrt(D)
    runtime = (cutlass.Int32(H), cutlass.Int32(HKV), cutlass.Float32(scale), cutlass.Float32(scale * LOG2E))
    key = (D, CAUSAL)
    fn = _compiled.get(key)
    if fn is None:
        fn = cute.compile(_bwd_host, *args, *runtime, dp, stages, CAUSAL, make_fake_stream())
        _compiled[key] = fn
    stream = None
    if Q.is_cuda:
        stream = cuda_driver.CUstream(torch.cuda.current_stream(Q.device).cuda_stream)
    fn(*args, *runtime, stream)
