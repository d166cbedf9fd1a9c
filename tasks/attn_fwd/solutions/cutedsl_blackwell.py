# Compiled for sm_100a only; never run (no Blackwell GPU here). See NOTES_cutedsl_blackwell.md
"""Expert Blackwell (sm_100a) attention forward in CuTe DSL for xlang's `attn_fwd` (CAUSAL = False) and
`attn_fwd_causal` (this same file with CAUSAL = True: that task's solution_variant).

O[b,h] = softmax(scale * Q[b,h] K[b,kv]^T) V[b,kv] (bf16), LSE[b,h] = logsumexp of the scaled scores (fp32,
natural log), kv = h // (H // HKV), scale = 1/sqrt(D), any S >= 1, D in {64, 96, 128}.

Design, top-down
  * One CTA per (128-row query block, batch x query head); grid (ceil(S/128), B*H). Causal CTAs take the
    query blocks last-first so the longest ones start first.
  * Tensors are viewed per head, [B*heads, S, D], and handed to TMA as (S, D, B*heads) (Q, K, O) or
    (D, S, B*heads) (V, read MN-major): a tail tile is zero-filled on load and clipped on store at the
    head's own S, never touching the next head. The tile is DP = 64 (D = 64) or 128 (D = 96, 128)
    columns wide; at D = 96 columns 96..127 load as zeros (they add nothing to Q.K^T and give zero O
    columns) and the O pieces past D are never stored.
  * Tensor memory (512 columns x 128 lanes; query row r of the tile is TMEM lane r):
        S0 | S1     columns   0..127, 128..255  fp32 scores of two key blocks in flight
        O           columns 256..256+DP-1       fp32 output accumulator
        P0 | P1     columns 384..447, 448..511  bf16 probabilities (two per 32-bit column)
  * Warp roles (192 threads, no register reallocation needed at this size):
      - warp 5, loader: TMA of the Q tile once, then per key block a K tile and a V tile into two
        STAGES-deep smem rings (full barrier = TMA bytes, empty barrier = tcgen05.commit).
      - warp 4, MMA issuer (the whole warp calls cute.gemm, warp-uniform; the compiler elects the one
        thread that issues tcgen05.mma, kind::f16, M = 128):
            S[j] = Q K[j]^T   (SS: both operands from smem, K-major)      -> TMEM S buffer j % 2
            O   += P[j] V[j]  (TS: P from TMEM, V from smem, MN-major)    -> TMEM O
        in the order S0, S1, then per block j: O += P[j] V[j], S[j+2]. So the tensor core computes
        PV of block j and QK of block j+2 while the softmax warps work on block j+1.
      - warps 0-3, softmax + correction + epilogue: thread t owns query row t (TMEM lane t), so
        row max and row sum need no shuffles. Per key block j:
            wait S[j]; tcgen05.ld the 128 scores of the row; release the S buffer;
            mask (last key block only: keys >= S, causal: keys > row);
            m_new = max(m, rowmax * scale * log2 e); alpha = 2^(m - m_new);
            p = 2^(s * scale * log2 e - m_new); l = l * alpha + sum p;
            wait until PV of block j-1 is done, then O *= alpha in TMEM (tcgen05.ld/st, skipped
            when alpha == 1 for the whole warp, which is exact);
            tcgen05.st P (bf16) into P buffer j % 2; signal the MMA warp.
        Epilogue: wait for the last PV; O / l -> bf16 -> swizzled smem in 32-column pieces ->
        TMA store (clipped at S); LSE = (m + log2 l) * ln 2 for rows < S.
  * Hand-offs, all mbarrier pipelines from cutlass.pipeline:
        q, k, v   PipelineTmaUmma  (loader -> MMA; MMA releases a slot with tcgen05.commit)
        s         PipelineUmmaAsync, 2 stages (MMA commit -> softmax; softmax frees the S buffer)
        p         PipelineAsyncUmma, 2 stages (softmax -> MMA; the commit after PV frees the P buffer)
        o         PipelineUmmaAsync, 1 stage  (commit after PV -> softmax may rescale / read O)
    Every wait that precedes tcgen05 work is followed by tcgen05.fence::after_thread_sync, every
    hand-off of tcgen05 work is preceded by tcgen05.wait::ld/st and tcgen05.fence::before_thread_sync.
  * Causal: BM == BN, so query block m reads key blocks 0..m (blocks above the diagonal are never
    loaded) and only block m needs the mask. Every processed block leaves each row at least one live
    key, so the running max is always finite.
  * One compile per (D, CAUSAL); B*heads and S are dynamic, H, HKV and scale*log2 e are arguments.
"""

import math

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cuda.bindings import driver as cuda_driver
from cutlass._mlir.dialects import nvvm
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

CAUSAL = False

BM = 128                        # query rows per CTA = MMA M = TMEM lanes
BN = 128                        # keys per block
SOFTMAX_WARPS = 4               # warps 0..3: warp w reads and writes TMEM lanes 32w..32w+31
MMA_WARP, LOAD_WARP = 4, 5
THREADS = 32 * 6
SOFTMAX_THREADS = 32 * SOFTMAX_WARPS
TMEM_COLS = 512
S_COL = 0                       # S buffer i at columns S_COL + BN * i
O_COL = 256
P_COL = 384                     # P buffer i at columns P_COL + (BN / 2) * i
EPI_N = 32                      # epilogue / correction piece width (columns)
AB = cutlass.BFloat16
ACC = cutlass.Float32
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
TMEM_BARRIER_ID = 1             # softmax warps + MMA warp wait for the TMEM address
EPI_BARRIER_ID = 2              # the 4 softmax warps


def _tile_config(D):
    """Padded head dim and K/V ring depth (smem: Q + STAGES x (K + V) + O, all DP wide)."""
    dp = 64 if D <= 64 else 128
    stages = 3 if dp == 64 else 2   # dp 128: 32 + 2 x 2 x 32 + 32 = 192 KiB; dp 64: 16 + 3 x 2 x 16 + 16 = 128 KiB
    return dp, stages


@cute.jit
def _fence_after_sync():
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.AFTER_THREAD_SYNC)


@cute.jit
def _fence_before_sync():
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.BEFORE_THREAD_SYNC)


# The two MMA helpers are plain Python, traced inline into the kernel. They return the tiled MMA
# because setting its ACCUMULATE field makes a new value: the kernel rebinds its variable to the
# result, so the DSL threads it through the surrounding dynamic loops.
def _issue_qk(mma, s_ptr, s_layout, fQ, fK, slot):
    """S = Q K^T over the head dim, 16 columns per tcgen05.mma (the first one overwrites S)."""
    acc = cute.make_tensor(s_ptr, s_layout)
    mma.set(tcgen05.Field.ACCUMULATE, False)
    for kb in range(cute.size(fQ, mode=[2])):
        cute.gemm(mma, acc, fQ[(None, None, kb, 0)], fK[(None, None, kb, slot)], acc)
        mma.set(tcgen05.Field.ACCUMULATE, True)
    return mma


def _issue_pv(mma, acc, fP, fV, slot, accumulate):
    """O (+)= P V over the BN keys, 16 keys per tcgen05.mma; block 0 overwrites O (TMEM starts undefined)."""
    mma.set(tcgen05.Field.ACCUMULATE, accumulate)
    for kb in range(cute.size(fP, mode=[2])):
        cute.gemm(mma, acc, fP[(None, None, kb)], fV[(None, None, kb, slot)], acc)
        mma.set(tcgen05.Field.ACCUMULATE, True)
    return mma


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
    p_lay: cute.ComposedLayout,
    o_lay: cute.ComposedLayout,
    seqlen: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale_log2: cutlass.Float32,
    head_dim: cutlass.Constexpr,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
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

    if warp_id == LOAD_WARP:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cpasync.prefetch_descriptor(tma_o)

    # ------------------------------------------------------------------ shared memory, barriers
    smem = cutlass.utils.SmemAllocator()
    bar_q = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_k = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    bar_v = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    bar_s = smem.allocate_array(cutlass.Int64, 2 * 2, byte_alignment=8)
    bar_p = smem.allocate_array(cutlass.Int64, 2 * 2, byte_alignment=8)
    bar_o = smem.allocate_array(cutlass.Int64, 2 * 1, byte_alignment=8)
    tmem_slot = smem.allocate_array(cutlass.Int32, 1, byte_alignment=8)
    sQ = smem.allocate_tensor(AB, q_lay.outer, byte_alignment=1024, swizzle=q_lay.inner)
    sK = smem.allocate_tensor(AB, k_lay.outer, byte_alignment=1024, swizzle=k_lay.inner)
    sV = smem.allocate_tensor(AB, v_lay.outer, byte_alignment=1024, swizzle=v_lay.inner)
    sO = smem.allocate_tensor(AB, o_lay.outer, byte_alignment=1024, swizzle=o_lay.inner)

    one = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    softmax_group = pipeline.CooperativeGroup(pipeline.Agent.Thread, SOFTMAX_THREADS)
    q_pipe = pipeline.PipelineTmaUmma.create(
        num_stages=1, producer_group=one, consumer_group=one,
        tx_count=cute.size_in_bytes(AB, cute.select(q_lay, mode=[0, 1, 2])), barrier_storage=bar_q,
    )
    k_pipe = pipeline.PipelineTmaUmma.create(
        num_stages=stages, producer_group=one, consumer_group=one,
        tx_count=cute.size_in_bytes(AB, cute.select(k_lay, mode=[0, 1, 2])), barrier_storage=bar_k,
    )
    v_pipe = pipeline.PipelineTmaUmma.create(
        num_stages=stages, producer_group=one, consumer_group=one,
        tx_count=cute.size_in_bytes(AB, cute.select(v_lay, mode=[0, 1, 2])), barrier_storage=bar_v,
    )
    s_pipe = pipeline.PipelineUmmaAsync.create(
        num_stages=2, producer_group=one, consumer_group=softmax_group, barrier_storage=bar_s
    )
    p_pipe = pipeline.PipelineAsyncUmma.create(
        num_stages=2, producer_group=softmax_group, consumer_group=one, barrier_storage=bar_p
    )
    o_pipe = pipeline.PipelineUmmaAsync.create(
        num_stages=1, producer_group=one, consumer_group=softmax_group, barrier_storage=bar_o
    )
    tmem_sync = pipeline.NamedBarrier(barrier_id=TMEM_BARRIER_ID, num_threads=SOFTMAX_THREADS + 32)
    epi_sync = pipeline.NamedBarrier(barrier_id=EPI_BARRIER_ID, num_threads=SOFTMAX_THREADS)
    tmem = cutlass.memory.TmemAllocator(tmem_slot, barrier_for_retrieve=tmem_sync, allocator_warp_id=0)

    # ------------------------------------------------------------------ MMA views (1-CTA MMA: slice 0)
    qk = mma_qk.get_slice(0)
    pv = mma_pv.get_slice(0)
    s_layout = qk.make_fragment_C(qk.partition_shape_C((BM, BN))).layout       # ((128,128),1,1) fp32
    o_layout = pv.make_fragment_C(pv.partition_shape_C((BM, dp))).layout       # ((128,dp),1,1) fp32

    if warp_id == LOAD_WARP:
        # ============================================================== TMA loader
        gQ = cute.local_tile(tQ[(None, None, bh)], (BM, dp), (None, 0))          # (BM, dp, m_tiles)
        gK = cute.local_tile(tK[(None, None, kv_row)], (BN, dp), (None, 0))      # (BN, dp, n_tiles)
        gV = cute.local_tile(tV[(None, None, kv_row)], (dp, BN), (0, None))      # (dp, BN, n_tiles)
        q_dst, q_src = cpasync.tma_partition(
            tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 3), cute.group_modes(qk.partition_A(gQ), 0, 3)
        )
        k_dst, k_src = cpasync.tma_partition(
            tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 3), cute.group_modes(qk.partition_B(gK), 0, 3)
        )
        v_dst, v_src = cpasync.tma_partition(
            tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 3), cute.group_modes(pv.partition_B(gV), 0, 3)
        )
        q_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        q_pipe.producer_acquire(q_put)
        cute.copy(tma_q, q_src[(None, m_blk)], q_dst[(None, 0)], tma_bar_ptr=q_pipe.producer_get_barrier(q_put))
        k_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
        v_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
        for n in cutlass.range(n_blocks, unroll=1):
            k_pipe.producer_acquire(k_put)
            cute.copy(tma_k, k_src[(None, n)], k_dst[(None, k_put.index)], tma_bar_ptr=k_pipe.producer_get_barrier(k_put))
            k_put.advance()
            v_pipe.producer_acquire(v_put)
            cute.copy(tma_v, v_src[(None, n)], v_dst[(None, v_put.index)], tma_bar_ptr=v_pipe.producer_get_barrier(v_put))
            v_put.advance()
        k_pipe.producer_tail(k_put)
        v_pipe.producer_tail(v_put)

    if warp_id == MMA_WARP:
        # ============================================================== tcgen05 issuer
        fQ = qk.make_fragment_A(sQ)        # smem descriptors (MMA, MMA_M, MMA_K, 1)
        fK = qk.make_fragment_B(sK)        # (MMA, MMA_N, MMA_K, stages)
        fV = pv.make_fragment_B(sV)        # (MMA, MMA_N = dp, MMA_K = keys, stages)
        tmem.wait_for_alloc()
        _fence_after_sync()
        tmem_ptr = tmem.retrieve_ptr(ACC)
        tO_acc = cute.make_tensor(tmem_ptr + O_COL, o_layout)
        # P as the TMEM A operand of O += P V: the (BM, BN) bf16 tile, K-major, two values per column
        p_frag = pv.make_fragment_A(cute.make_tensor(tmem_ptr, p_lay.outer))[(None, None, None, 0)].layout

        q_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        k_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        v_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        s_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 2)
        p_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 2)
        o_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        q_pipe.consumer_wait(q_get)

        # The softmax warps wait for "O updated" once per key block before touching O; block 0 has no
        # earlier PV, so the first hand-off is a commit with no MMA outstanding (it arrives at once).
        o_pipe.producer_acquire(o_put)
        o_pipe.producer_commit(o_put)
        o_put.advance()

        # S[0], S[1]; then per block j: O += P[j] V[j], S[j+2]; then the last two PVs
        for j in cutlass.range(cutlass.min(n_blocks, 2), unroll=1):
            s_pipe.producer_acquire(s_put)
            k_pipe.consumer_wait(k_get)
            _fence_after_sync()
            mma_qk = _issue_qk(mma_qk, tmem_ptr + S_COL + BN * s_put.index, s_layout, fQ, fK, k_get.index)
            k_pipe.consumer_release(k_get)      # tcgen05.commit -> K slot empty
            k_get.advance()
            s_pipe.producer_commit(s_put)       # tcgen05.commit -> S buffer full
            s_put.advance()
        for j in cutlass.range(n_blocks, unroll=1):
            p_pipe.consumer_wait(p_get)         # P[j] in TMEM and O rescaled for block j
            v_pipe.consumer_wait(v_get)
            o_pipe.producer_acquire(o_put)
            _fence_after_sync()
            fP = cute.make_tensor(cute.recast_ptr(tmem_ptr + P_COL + (BN // 2) * p_get.index, dtype=AB), p_frag)
            mma_pv = _issue_pv(mma_pv, tO_acc, fP, fV, v_get.index, j > 0)
            v_pipe.consumer_release(v_get)      # V slot empty
            v_get.advance()
            p_pipe.consumer_release(p_get)      # P buffer free
            p_get.advance()
            o_pipe.producer_commit(o_put)       # O updated for block j
            o_put.advance()
            # S[j+2] goes to the buffer the softmax warps released after reading S[j]. Written as a loop
            # of 0 or 1 trips (empty for the last two blocks, which have no block j+2) so that pipeline
            # states never advance under a data-dependent `if` (the DSL cannot carry them out of it).
            for jj in cutlass.range(j + 2, cutlass.min(n_blocks, j + 3), unroll=1):
                s_pipe.producer_acquire(s_put)
                k_pipe.consumer_wait(k_get)
                _fence_after_sync()
                mma_qk = _issue_qk(mma_qk, tmem_ptr + S_COL + BN * s_put.index, s_layout, fQ, fK, k_get.index)
                k_pipe.consumer_release(k_get)
                k_get.advance()
                s_pipe.producer_commit(s_put)
                s_put.advance()
        s_pipe.producer_tail(s_put)
        o_pipe.producer_tail(o_put)

    if warp_id < SOFTMAX_WARPS:
        # ============================================================== softmax, correction, epilogue
        tmem.allocate(TMEM_COLS)                     # warp 0 allocates all 512 columns
        _fence_before_sync()
        tmem.wait_for_alloc()
        _fence_after_sync()
        tmem_ptr = tmem.retrieve_ptr(ACC)

        # S buffer -> registers: 32x32b.x32, 4 copies over the 128 columns; thread t gets row t
        s_proto = cute.make_tensor(tmem_ptr + S_COL, s_layout)
        ld_s = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), ACC), s_proto)
        thr_ld_s = ld_s.get_slice(tidx)
        coord_s = thr_ld_s.partition_D(qk.partition_C(cute.make_identity_tensor((BM, BN))))   # (row, key) per value
        r_s = cute.make_rmem_tensor(coord_s.shape, ACC)
        row = coord_s[0][0]                          # = tidx: tile row = TMEM lane; the columns are static
        n_s = cute.size(r_s)

        # registers -> P buffer: the bf16 row packed two per 32-bit column, i.e. the first BN/2 fp32
        # columns of an S-shaped tile, written with 32x32b.x32 stores
        p_view = cute.composition(s_layout, cute.make_layout((BM, BN // 2)))
        st_p = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition.x32), ACC),
            cute.make_tensor(tmem_ptr + P_COL, p_view),
        )
        thr_st_p = st_p.get_slice(tidx)
        r_p32 = cute.make_rmem_tensor(thr_st_p.partition_S(cute.make_identity_tensor((BM, BN // 2))).shape, ACC)
        r_p = cute.make_tensor(cute.recast_ptr(r_p32.iterator, dtype=AB), r_s.layout)   # bf16 view, row order

        # O in 32-column pieces (correction and epilogue): 32x32b.x32 loads and stores, thread t = row t
        o_acc = cute.make_tensor(tmem_ptr + O_COL, o_layout)
        o_pieces = cute.flat_divide(o_acc[((None, None), 0, 0)], (BM, EPI_N))           # (BM, EPI_N, 1, pieces)
        ld_o = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), ACC), o_pieces[(None, None, 0, 0)]
        )
        st_o = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition.x32), ACC), o_pieces[(None, None, 0, 0)]
        )
        thr_ld_o = ld_o.get_slice(tidx)
        thr_st_o = st_o.get_slice(tidx)
        t_ld_o = thr_ld_o.partition_S(o_pieces)      # (T2R, T2R_M, T2R_N, 1, pieces)
        t_st_o = thr_st_o.partition_D(o_pieces)
        o_piece_coords = cute.flat_divide(cute.make_identity_tensor((BM, dp)), (BM, EPI_N))
        r_o = cute.make_rmem_tensor(thr_ld_o.partition_D(o_piece_coords)[(None, None, None, 0, 0)].shape, ACC)
        pieces = dp // EPI_N

        s_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 2)
        p_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 2)
        o_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        q_row0 = m_blk * BM
        row_max = cutlass.Float32(-math.inf)        # running max, already times scale*log2 e
        row_sum = cutlass.Float32(0.0)

        for j in cutlass.range(n_blocks, unroll=1):
            # ---------------- scores of block j
            s_pipe.consumer_wait(s_get)
            _fence_after_sync()
            cute.copy(ld_s, thr_ld_s.partition_S(cute.make_tensor(tmem_ptr + S_COL + BN * s_get.index, s_layout)), r_s)
            cute.arch.fence_view_async_tmem_load()   # tcgen05.wait::ld
            _fence_before_sync()
            s_pipe.consumer_release(s_get)          # the MMA warp may compute S[j+2] here
            s_get.advance()

            # ---------------- mask (last key block only: the tail, and the causal diagonal). Column c of
            # this row is live when c < limit; one select per value (a branch per value would make the
            # DSL yield the whole row from every branch).
            if j == n_blocks - 1:
                limit = seqlen - j * BN
                if cutlass.const_expr(causal):
                    limit = cutlass.min(limit, q_row0 + row - j * BN + 1)
                for i in cutlass.range_constexpr(n_s):
                    r_s[i] = cutlass.Float32(cutlass.select_(coord_s[i][1] < limit, r_s[i], -math.inf))

            # ---------------- online softmax, exp2 domain, one row per thread
            mx = r_s[0]
            for i in cutlass.range_constexpr(1, n_s):
                mx = cute.arch.fmax(mx, r_s[i])
            m_new = cute.arch.fmax(row_max, mx * scale_log2)
            alpha = cute.arch.exp2(row_max - m_new)
            row_max = m_new
            psum = cutlass.Float32(0.0)
            for i in cutlass.range_constexpr(n_s):
                p = cute.arch.exp2(r_s[i] * scale_log2 - m_new)
                r_s[i] = p
                psum = psum + p
            row_sum = row_sum * alpha + psum
            r_p.store(r_s.load().to(AB))

            # ---------------- correction: O *= alpha once the PV of block j-1 is done (for block 0 the
            # MMA warp's first "O updated" is an empty commit; O is overwritten by PV 0, not rescaled)
            o_pipe.consumer_wait(o_get)
            _fence_after_sync()
            if (j > 0) & (not cute.arch.vote_all_sync(alpha == cutlass.Float32(1.0))):
                for c in cutlass.range_constexpr(pieces):
                    cute.copy(ld_o, t_ld_o[(None, None, None, 0, c)], r_o)
                    cute.arch.fence_view_async_tmem_load()
                    for i in cutlass.range_constexpr(cute.size(r_o)):
                        r_o[i] = r_o[i] * alpha
                    cute.copy(st_o, r_o, t_st_o[(None, None, None, 0, c)])
            o_pipe.consumer_release(o_get)
            o_get.advance()

            # ---------------- P -> TMEM, hand it to the MMA warp
            p_pipe.producer_acquire(p_put)          # the PV that read this P buffer is done
            _fence_after_sync()
            cute.copy(st_p, r_p32, thr_st_p.partition_D(
                cute.make_tensor(tmem_ptr + P_COL + (BN // 2) * p_put.index, p_view)))
            cute.arch.fence_view_async_tmem_store()  # tcgen05.wait::st (P and the rescaled O)
            _fence_before_sync()
            p_pipe.producer_commit(p_put)
            p_put.advance()

        # ---------------- LSE and 1 / l
        o_pipe.consumer_wait(o_get)                 # last PV done: O final in TMEM
        _fence_after_sync()
        inv_l = cutlass.Float32(1.0) / row_sum

        # ---------------- epilogue: TMEM -> registers -> bf16 -> swizzled smem -> TMA store
        r2s = cute.make_tiled_copy_D(sm100_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, AB, ACC, ld_o), ld_o)
        s_dst = r2s.get_slice(tidx).partition_D(sO)  # (R2S, R2S_M, R2S_N, pieces)
        r_out = cute.make_rmem_tensor(r_o.shape, AB)
        r_src = r2s.retile(r_out)
        for c in cutlass.range_constexpr(pieces):
            if cutlass.const_expr(c * EPI_N < head_dim):
                cute.copy(ld_o, t_ld_o[(None, None, None, 0, c)], r_o)
                cute.arch.fence_view_async_tmem_load()
                for i in cutlass.range_constexpr(cute.size(r_o)):
                    r_o[i] = r_o[i] * inv_l
                r_out.store(r_o.load().to(AB))
                cute.copy(r2s, r_src, s_dst[(None, None, None, c)])
        o_pipe.consumer_release(o_get)
        # LSE after the last warp-collective TMEM load, so that this divergent store precedes no tcgen05.ld
        if q_row0 + row < seqlen:
            mLSE[(bh, q_row0 + row)] = (row_max + cute.math.log2(row_sum)) * LN2
        cute.arch.fence_proxy("async.shared", space="cta")
        _fence_before_sync()
        epi_sync.arrive_and_wait()
        if warp_id == 0:
            gO = cute.local_tile(tO[(None, None, bh)], (BM, EPI_N), (m_blk, None))    # (BM, EPI_N, pieces)
            o_src, o_dst = cpasync.tma_partition(
                tma_o, 0, cute.make_layout(1), cute.group_modes(sO, 0, 2), cute.group_modes(gO, 0, 2)
            )
            for c in cutlass.range_constexpr(pieces):
                if cutlass.const_expr(c * EPI_N < head_dim):
                    cute.copy(tma_o, o_src[(None, c)], o_dst[(None, c)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)
            # every tcgen05 op of the CTA has completed (last PV waited, TMEM loads waited before the barrier)
            _fence_after_sync()
            tmem.relinquish_alloc_permit()
            tmem.free(tmem_ptr)
        p_pipe.producer_tail(p_put)


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
    head_dim = cute.size(q, mode=[2])        # static
    # S = Q K^T: M = query rows, N = keys, K = head dim; both operands K-major (D contiguous).
    mma_qk = sm100_utils.make_trivial_tiled_mma(
        AB, AB, OperandMajorMode.K, OperandMajorMode.K, ACC, tcgen05.CtaGroup.ONE, (BM, BN)
    )
    # O = P V: M = query rows, N = head dim, K = keys; A (P) from TMEM, B (V) MN-major (D contiguous).
    mma_pv = sm100_utils.make_trivial_tiled_mma(
        AB, AB, OperandMajorMode.K, OperandMajorMode.MN, ACC, tcgen05.CtaGroup.ONE, (BM, dp),
        tcgen05.OperandSource.TMEM,
    )
    qk_tiler = (BM, BN, dp)
    pv_tiler = (BM, dp, BN)
    q_lay = sm100_utils.make_smem_layout_a(mma_qk, qk_tiler, AB, 1)
    k_lay = sm100_utils.make_smem_layout_b(mma_qk, qk_tiler, AB, stages)
    v_lay = sm100_utils.make_smem_layout_b(mma_pv, pv_tiler, AB, stages)
    p_lay = sm100_utils.make_smem_layout_a(mma_pv, pv_tiler, AB, 1)      # only its shape is used (TMEM A)
    o_lay = sm100_utils.make_smem_layout_epi(AB, LayoutEnum.ROW_MAJOR, (BM, EPI_N), dp // EPI_N)

    load = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    tma_q, tQ = cute.nvgpu.make_tiled_tma_atom_A(
        load, _per_head(q, 1, 2), cute.select(q_lay, mode=[0, 1, 2]), qk_tiler, mma_qk
    )
    tma_k, tK = cute.nvgpu.make_tiled_tma_atom_B(
        load, _per_head(k, 1, 2), cute.select(k_lay, mode=[0, 1, 2]), qk_tiler, mma_qk
    )
    tma_v, tV = cute.nvgpu.make_tiled_tma_atom_B(
        load, _per_head(v, 2, 1), cute.select(v_lay, mode=[0, 1, 2]), pv_tiler, mma_pv
    )
    tma_o, tO = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileS2GOp(), _per_head(o, 1, 2), cute.slice_(o_lay, (None, None, 0)), (BM, EPI_N)
    )
    seqlen = cute.size(q, mode=[1])
    n_qblk = (seqlen + BM - 1) // BM
    n_bh = cute.size(q, mode=[0])
    _attn_kernel(
        mma_qk, mma_pv, tma_q, tQ, tma_k, tK, tma_v, tV, tma_o, tO, lse, q_lay, k_lay, v_lay, p_lay, o_lay,
        seqlen, heads, kv_heads, scale_log2, head_dim, dp, stages, causal,
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
