# Not yet run on a GPU (written 2026-11-29 without device time); see NOTES_cutedsl.md
"""Expert Hopper (sm_90a) attention forward in CuTe DSL for xlang's `attn_fwd` (CAUSAL = False) and
`attn_fwd_causal` (this same file with CAUSAL = True: that task's solution_variant).

O[b,h] = softmax(scale * Q[b,h] K[b,kv]^T) V[b,kv] (bf16), LSE[b,h] = logsumexp of the scaled scores (fp32,
natural log), kv = h // (H // HKV), scale = 1/sqrt(D), any S >= 1, D in {64, 96, 128}.

Design, top-down
  * One CTA per (128-row query block, batch x query head); grid (ceil(S/128), B*H). Causal CTAs take the
    query blocks last-first so the longest ones start first.
  * Every tensor is viewed per head as 3-D, [B*heads, S, D], and handed to TMA as (S, D, B*heads): the
    sequence bound is per head, so a tail tile is zero-filled on load and clipped on store and never
    touches the next head. The tile is DP = 64 (D = 64) or 128 (D = 96, 128) columns wide: for D = 96 the
    columns 96..127 load as zeros (nothing added to Q.K^T, zero O columns) and the O store is clipped at D.
  * Warp specialisation, 3 warpgroups (384 threads):
      - warpgroup 0, the producer, gives registers back (setmaxnreg) and one warp issues the TMA loads:
        the Q tile once (its own one-slot mbarrier pipeline), then per key block a K tile and a V tile
        into two STAGES-deep rings, each slot with a "full" (TMA byte count) and an "empty" mbarrier.
      - warpgroups 1 and 2, the consumers, own 64 query rows each. Per key block:
          S = Q K^T     wgmma 64 x 128 x 16 from shared memory (K-major Q and K), fp32 in registers;
          mask          only on the last key block (keys >= S; causal: keys > query row);
          softmax       online, in fp32 registers, exp2 domain (scores times scale*log2 e), running row
                        max m and partial row sum l (the 4 threads of a quad share a row: max is
                        reduced with two butterfly shuffles per block, the sum only once at the end);
          O += P V      wgmma 64 x DP x 16 with P as the A operand straight from registers (bf16; the
                        accumulator fragment of S is already laid out as the A fragment of P.V) and
                        V from shared memory read MN-major (V is [keys, D] with D contiguous).
        The two consumer warpgroups interleave on the tensor cores (one's softmax hides behind the
        other's wgmma); within one warpgroup the steps run in order.
  * Epilogue: O / l -> bf16 -> stmatrix into a swizzled 128 x DP shared tile -> proxy fence -> named
    barrier of the 256 consumer threads -> one warp stores it with TMA (clipped at S and D). LSE =
    (m + log2 l) * ln 2, written by one thread of each quad for rows < S.
  * Causal: key blocks above the diagonal are never loaded (BM == BN, so query block m reads key
    blocks 0..m and only block m needs the mask).
  * One compile per head-dim class (DP) and causality; B, H, S are dynamic (H, HKV, scale are arguments).
"""

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cuda.bindings import driver as cuda_driver
from cutlass.cute.nvgpu import cpasync, warp, warpgroup
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

CAUSAL = False

BM = 128                        # query rows per CTA (2 consumer warpgroups x 64)
BN = 128                        # keys per block
WG_THREADS = 128
THREADS = 3 * WG_THREADS
CONSUMER_THREADS = 2 * WG_THREADS
PRODUCER_REGS, CONSUMER_REGS = 40, 232
AB = cutlass.BFloat16
ACC = cutlass.Float32
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
EPI_BARRIER_ID = 1              # named barrier 0 is __syncthreads


def _tile_config(D):
    """Padded head dim and ring depth (shared memory: Q + STAGES x (K + V) + O tiles)."""
    dp = 64 if D <= 64 else 128
    stages = 3 if dp == 64 else 2   # dp 128: 32 + 2 x 64 + 32 = 192 KiB; dp 64: 16 + 3 x 32 + 16 = 128 KiB
    return dp, stages


@cute.jit
def _quad_max(x: cutlass.Float32) -> cutlass.Float32:
    # the 4 threads of a quad (lanes 4g..4g+3) hold the same two rows of an accumulator fragment
    x = cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=1))
    return cute.arch.fmax(x, cute.arch.shuffle_sync_bfly(x, offset=2))


@cute.jit
def _quad_sum(x: cutlass.Float32) -> cutlass.Float32:
    x = x + cute.arch.shuffle_sync_bfly(x, offset=1)
    return x + cute.arch.shuffle_sync_bfly(x, offset=2)


@cute.kernel
def _attn_kernel(
    mma_qk: cute.TiledMma,
    mma_pv: cute.TiledMma,
    tma_q: cute.CopyAtom,
    tQ: cute.Tensor,
    tma_k: cute.CopyAtom,
    tK: cute.Tensor,
    tma_v: cute.CopyAtom,
    tV: cute.Tensor,
    tma_o: cute.CopyAtom,
    tO: cute.Tensor,
    mLSE: cute.Tensor,
    q_lay: cute.ComposedLayout,
    k_lay: cute.ComposedLayout,
    v_lay: cute.ComposedLayout,
    o_lay: cute.ComposedLayout,
    seqlen: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale_log2: cutlass.Float32,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    wg = warp_id // 4
    blk_x, bh, _ = cute.arch.block_idx()
    n_qblk, _, _ = cute.arch.grid_dim()

    # ------------------------------------------------------------------ which tile this CTA owns
    m_blk = blk_x
    if cutlass.const_expr(causal):
        m_blk = n_qblk - 1 - blk_x          # longest causal rows first
    b = bh // heads
    h = bh - b * heads
    kv_row = b * kv_heads + h // (heads // kv_heads)   # GQA
    n_blocks = (seqlen + BN - 1) // BN
    if cutlass.const_expr(causal):
        n_blocks = cutlass.min(n_blocks, m_blk + 1)    # BM == BN: key blocks 0..m_blk

    if warp_id == 0:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cpasync.prefetch_descriptor(tma_o)

    # ------------------------------------------------------------------ shared memory and mbarrier rings
    smem = cutlass.utils.SmemAllocator()
    bar_q = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_k = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    bar_v = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    sQ = smem.allocate_tensor(AB, q_lay.outer, byte_alignment=1024, swizzle=q_lay.inner)   # (BM, dp, 1)
    sK = smem.allocate_tensor(AB, k_lay.outer, byte_alignment=1024, swizzle=k_lay.inner)   # (BN, dp, stages)
    sV = smem.allocate_tensor(AB, v_lay.outer, byte_alignment=1024, swizzle=v_lay.inner)   # (dp, BN, stages)
    sO = smem.allocate_tensor(AB, o_lay.outer, byte_alignment=1024, swizzle=o_lay.inner)   # (BM, dp, 1)

    q_bytes = cute.size_in_bytes(AB, cute.slice_(q_lay, (None, None, 0)))
    kv_bytes = cute.size_in_bytes(AB, cute.slice_(k_lay, (None, None, 0)))
    producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS // 32)
    q_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=1, producer_group=producer, consumer_group=consumers, tx_count=q_bytes, barrier_storage=bar_q
    )
    k_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=stages, producer_group=producer, consumer_group=consumers, tx_count=kv_bytes,
        barrier_storage=bar_k,
    )
    v_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=stages, producer_group=producer, consumer_group=consumers, tx_count=kv_bytes,
        barrier_storage=bar_v,
    )

    # ------------------------------------------------------------------ this head's tiles in global memory
    gQ = cute.local_tile(tQ[(None, None, bh)], (BM, dp), (None, 0))       # (BM, dp, m_tiles)
    gK = cute.local_tile(tK[(None, None, kv_row)], (BN, dp), (None, 0))   # (BN, dp, n_tiles)
    gV = cute.local_tile(tV[(None, None, kv_row)], (dp, BN), (0, None))   # (dp, BN, n_tiles)
    gO = cute.local_tile(tO[(None, None, bh)], (BM, dp), (None, 0))       # (BM, dp, m_tiles)

    if wg == 0:
        # ============================================================== producer warpgroup
        cute.arch.setmaxregister_decrease(PRODUCER_REGS)
        if warp_id == 0:
            q_dst, q_src = cpasync.tma_partition(
                tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
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
            k_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
            v_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
            for n in cutlass.range(n_blocks, unroll=1):
                k_pipe.producer_acquire(k_put)
                cute.copy(tma_k, k_src[(None, n)], k_dst[(None, k_put.index)],
                          tma_bar_ptr=k_pipe.producer_get_barrier(k_put))
                k_put.advance()
                v_pipe.producer_acquire(v_put)
                cute.copy(tma_v, v_src[(None, n)], v_dst[(None, v_put.index)],
                          tma_bar_ptr=v_pipe.producer_get_barrier(v_put))
                v_put.advance()
            k_pipe.producer_tail(k_put)
            v_pipe.producer_tail(v_put)
    else:
        # ============================================================== consumer warpgroups
        cute.arch.setmaxregister_increase(CONSUMER_REGS)
        ctid = tidx - WG_THREADS                     # 0..255; warpgroup wg-1 owns tile rows 64(wg-1)..+63

        # S = Q K^T: shared-memory descriptors for this warpgroup's wgmma (.., MMA_M|N, MMA_K, stage)
        wg_qk = mma_qk.get_slice((wg - 1) * WG_THREADS)
        fQ = mma_qk.make_fragment_A(wg_qk.partition_A(sQ))
        fK = mma_qk.make_fragment_B(wg_qk.partition_B(sK))
        acc_s = cute.make_rmem_tensor(wg_qk.partition_C(cute.make_identity_tensor((BM, BN))).shape, ACC)
        # (row, col) inside the 128 x BN tile of each of this thread's S registers, for the masks and LSE
        coord_s = mma_qk.get_slice(ctid).partition_C(cute.make_identity_tensor((BM, BN)))
        qk_kblocks = cute.size(fQ, mode=[2])

        # O += P V: P from registers, V from shared memory (MN-major)
        wg_pv = mma_pv.get_slice((wg - 1) * WG_THREADS)
        fV = mma_pv.make_fragment_B(wg_pv.partition_B(sV))
        acc_o = cute.make_rmem_tensor(wg_pv.partition_C(cute.make_identity_tensor((BM, dp))).shape, ACC)
        pv_kblocks = cute.size(fV, mode=[2])

        # Register fragments. The wgmma accumulator of a 64 x N tile holds, per thread, the flat values
        #   i = c + 2 r + 4 v   (c: column pair 0/1, r: row 0/+8, v: group of 8 columns),
        # and the register A operand of a 64 x 16 k-slice holds i = c + 2 r + 4 h (h: k half 0/+8).
        # So the flat S values 8 kb .. 8 kb + 7 are exactly the A fragment of k-block kb of P.V:
        # P is S converted to bf16 and re-viewed as ((2, 2, 2), 1, BN / 16), no data movement.
        n_s = cute.size(acc_s)
        n_o = cute.size(acc_o)
        p_bf16 = cute.make_rmem_tensor(acc_s.shape, AB)
        frag_p = cute.make_tensor(p_bf16.iterator, cute.make_layout(((2, 2, 2), 1, BN // 16)))
        row_max = cute.make_rmem_tensor((2,), ACC)
        row_sum = cute.make_rmem_tensor((2,), ACC)
        alpha = cute.make_rmem_tensor((2,), ACC)

        row_max.fill(-math.inf)
        row_sum.fill(0.0)
        acc_o.fill(0.0)
        mma_qk.set(warpgroup.Field.ACCUMULATE, True)
        mma_pv.set(warpgroup.Field.ACCUMULATE, True)
        q_row0 = m_blk * BM

        q_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        k_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        v_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        q_pipe.consumer_wait(q_get)

        for n in cutlass.range(n_blocks, unroll=1):
            # ---------------- S = Q K^T
            acc_s.fill(0.0)
            k_pipe.consumer_wait(k_get)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(qk_kblocks):
                cute.gemm(mma_qk, acc_s, fQ[(None, None, kb, 0)], fK[(None, None, kb, k_get.index)], acc_s)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            k_pipe.consumer_release(k_get)
            k_get.advance()

            # ---------------- mask (last key block only: the tail, and the causal diagonal)
            if n == n_blocks - 1:
                key0 = n * BN
                for i in cutlass.range_constexpr(n_s):
                    key = key0 + coord_s[i][1]
                    dead = key >= seqlen
                    if cutlass.const_expr(causal):
                        dead = dead | (key > q_row0 + coord_s[i][0])
                    if dead:
                        acc_s[i] = -math.inf

            # ---------------- online softmax (exp2 domain)
            for r in cutlass.range_constexpr(2):
                mx = acc_s[2 * r]
                for i in cutlass.range_constexpr(n_s):
                    if cutlass.const_expr((i // 2) % 2 == r and i != 2 * r):
                        mx = cute.arch.fmax(mx, acc_s[i])
                mx = _quad_max(mx)
                m_new = cute.arch.fmax(row_max[r], mx * scale_log2)
                alpha[r] = cute.arch.exp2(row_max[r] - m_new)
                row_max[r] = m_new
            psum0 = cutlass.Float32(0.0)
            psum1 = cutlass.Float32(0.0)
            for i in cutlass.range_constexpr(n_s):
                r = (i // 2) % 2
                p = cute.arch.exp2(acc_s[i] * scale_log2 - row_max[r])
                acc_s[i] = p
                if cutlass.const_expr(r == 0):
                    psum0 = psum0 + p
                else:
                    psum1 = psum1 + p
            row_sum[0] = row_sum[0] * alpha[0] + psum0
            row_sum[1] = row_sum[1] * alpha[1] + psum1
            for i in cutlass.range_constexpr(n_o):
                acc_o[i] = acc_o[i] * alpha[(i // 2) % 2]
            p_bf16.store(acc_s.load().to(AB))

            # ---------------- O += P V
            v_pipe.consumer_wait(v_get)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(pv_kblocks):
                cute.gemm(mma_pv, acc_o, frag_p[(None, None, kb)], fV[(None, None, kb, v_get.index)], acc_o)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            v_pipe.consumer_release(v_get)
            v_get.advance()

        # ---------------- normalise, LSE
        lane = tidx % 32
        for r in cutlass.range_constexpr(2):
            total = _quad_sum(row_sum[r])
            row_sum[r] = total
            alpha[r] = cutlass.Float32(1.0) / total
            row = q_row0 + coord_s[2 * r][0]
            if lane % 4 == 0:
                if row < seqlen:
                    mLSE[(bh, row)] = (row_max[r] + cute.math.log2(total)) * LN2
        for i in cutlass.range_constexpr(n_o):
            acc_o[i] = acc_o[i] * alpha[(i // 2) % 2]

        # ---------------- epilogue: registers -> bf16 -> smem (stmatrix) -> TMA store
        r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, AB, ACC)
        stm_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), AB)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm_atom, mma_pv))
        thr_r2s = r2s.get_slice(ctid)
        sO_tile = sO[(None, None, 0)]
        # The stmatrix source fragment walks this thread's values in the accumulator's flat order
        # (8 values per 16 x 16 stmatrix block, then 16-column steps, then 64-column swizzle atoms),
        # so the fp32 accumulator is re-viewed in that shape and converted in one go.
        piece_shape = cute.shape(thr_r2s.partition_S(sO_tile))
        o_bf16 = cute.make_rmem_tensor(piece_shape, AB)
        o_bf16.store(cute.make_tensor(acc_o.iterator, cute.make_layout(piece_shape)).load().to(AB))
        cute.copy(r2s, o_bf16, thr_r2s.partition_D(sO_tile))
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=EPI_BARRIER_ID, number_of_threads=CONSUMER_THREADS)
        if warp_id == 4:
            o_src, o_dst = cpasync.tma_partition(
                tma_o, 0, cute.make_layout(1), cute.group_modes(sO, 0, 2), cute.group_modes(gO, 0, 2)
            )
            cute.copy(tma_o, o_src[(None, 0)], o_dst[(None, m_blk)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


def _per_head(t, seq_mode, feat_mode):
    """(B*heads, S, D) -> the TMA view (S, D, B*heads) [or (D, S, B*heads) for V read MN-major]."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[seq_mode, feat_mode, 0]))


@cute.jit
def _attn_host(
    q: cute.Tensor,
    k: cute.Tensor,
    v: cute.Tensor,
    o: cute.Tensor,
    lse: cute.Tensor,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale_log2: cutlass.Float32,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
    stream: cuda_driver.CUstream,
):
    # S = Q K^T: M = query rows, N = keys, K = head dim; both operands K-major (D contiguous).
    mma_qk = sm90_utils.make_trivial_tiled_mma(
        AB, AB, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K, ACC, (2, 1, 1), tiler_mn=(64, BN)
    )
    # O = P V: M = query rows, N = head dim, K = keys; A (P) from registers, B (V) MN-major.
    mma_pv = sm90_utils.make_trivial_tiled_mma(
        AB, AB, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN, ACC, (2, 1, 1), tiler_mn=(64, dp),
        a_source=warpgroup.OperandSource.RMEM,
    )
    q_lay = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, dp), AB, 1)
    k_lay = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, dp), AB, stages)
    v_lay = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BM, dp, BN), AB, stages)
    o_lay = sm90_utils.make_smem_layout_epi(AB, LayoutEnum.ROW_MAJOR, (BM, dp), 1)

    g2s = cpasync.CopyBulkTensorTileG2SOp()
    tma_q, tQ = cpasync.make_tiled_tma_atom(g2s, _per_head(q, 1, 2), cute.slice_(q_lay, (None, None, 0)), (BM, dp))
    tma_k, tK = cpasync.make_tiled_tma_atom(g2s, _per_head(k, 1, 2), cute.slice_(k_lay, (None, None, 0)), (BN, dp))
    tma_v, tV = cpasync.make_tiled_tma_atom(g2s, _per_head(v, 2, 1), cute.slice_(v_lay, (None, None, 0)), (dp, BN))
    tma_o, tO = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileS2GOp(), _per_head(o, 1, 2), cute.slice_(o_lay, (None, None, 0)), (BM, dp)
    )
    seqlen = cute.size(q, mode=[1])
    n_qblk = (seqlen + BM - 1) // BM
    n_bh = cute.size(q, mode=[0])
    _attn_kernel(
        mma_qk, mma_pv, tma_q, tQ, tma_k, tK, tma_v, tV, tma_o, tO, lse, q_lay, k_lay, v_lay, o_lay,
        seqlen, heads, kv_heads, scale_log2, dp, stages, causal,
    ).launch(grid=(n_qblk, n_bh, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream)


def _wrap(t):
    # [rows, S, D] or [rows, S]: rows and S dynamic, D static (16-byte multiple, as TMA needs)
    order = tuple(range(t.dim()))
    return (
        from_dlpack(t, assumed_align=16)
        .mark_compact_shape_dynamic(mode=1, stride_order=order)
        .mark_compact_shape_dynamic(mode=0, stride_order=order)
    )


_compiled = {}


def xlang_entry(Q, K, V, O, LSE, B, H, HKV, S, D):
    dp, stages = _tile_config(D)
    q = _wrap(Q.view(B * H, S, D))
    k = _wrap(K.view(B * HKV, S, D))
    v = _wrap(V.view(B * HKV, S, D))
    o = _wrap(O.view(B * H, S, D))
    lse = _wrap(LSE.view(B * H, S))
    scale_log2 = cutlass.Float32(LOG2E / math.sqrt(D))
    key = (D, CAUSAL)
    fn = _compiled.get(key)
    if fn is None:
        fn = cute.compile(
            _attn_host, q, k, v, o, lse, cutlass.Int32(H), cutlass.Int32(HKV), scale_log2, dp, stages, CAUSAL,
            make_fake_stream(),
        )
        _compiled[key] = fn
    stream = None
    if Q.is_cuda:
        import torch

        stream = cuda_driver.CUstream(torch.cuda.current_stream(Q.device).cuda_stream)
    fn(q, k, v, o, lse, cutlass.Int32(H), cutlass.Int32(HKV), scale_log2, stream)
