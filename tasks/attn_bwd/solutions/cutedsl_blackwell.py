# Compiled for sm_100a only; NEVER run (no Blackwell GPU here). See tasks/attn_bwd/NOTES_cutedsl_blackwell.md
"""Expert Blackwell (sm_100a) attention backward in CuTe DSL for xlang's `attn_bwd` (CAUSAL = False) and
`attn_bwd_causal` (this same file with CAUSAL = True: that task's solution_variant).

Given dO and the forward's Q, K, V, O, LSE (natural log of the scaled scores), with scale = 1/sqrt(D) and
kv head = h // (H // HKV):
    P  = exp(scale Q K^T - LSE)      recomputed per tile, never stored
    dV = P^T dO                      dP = dO V^T
    Delta = rowsum(dO * O)           dS = P * (dP - Delta)
    dQ = scale dS K                  dK = scale dS^T Q
dK and dV of a kv head sum the G = H // HKV query heads that share it. Any S >= 1, D in {64, 96, 128}.

Design, top-down (FlashAttention-2's backward split, as the Hopper CuTe DSL and the cuda_ptx experts; no atomics)
  * Three launches on the caller's stream from one compiled host function:
      1. `_delta_kernel`: Delta[bh, i] = sum_d dO * O in fp32 (one warp per row) into a [B*H, S] fp32 scratch.
      2. `_dkdv_kernel`: one CTA per (128-key block, b*HKV + kv); key n0 + t is TMEM lane t. K and V stay in
         shared memory; the CTA walks every 64-row query block of every query head of its GQA group (step it:
         head it // per_head, block m_lo + it % per_head), so the group sum accumulates in TMEM:
             S^T  = K Q^T, dP^T = V dO^T    tcgen05.mma SS, M 128 (keys) x N 64 (queries), K = DP
             P^T  = exp2(S^T scale log2e - LSE log2e) (masked);  dS^T = P^T (dP^T - Delta)  -> bf16 -> TMEM
             dV  += P^T dO, dK += dS^T Q     tcgen05.mma TS: A = P^T / dS^T from TMEM, B = dO / Q read MN-major
      3. `_dq_kernel`: one CTA per (128-query block, b*H + h); query row m0 + t is TMEM lane t. Q and dO stay in
         shared memory; it walks the 64-key blocks of K and V:
             S = Q K^T, dP = dO V^T (SS);  P, dS -> bf16 -> TMEM;  dQ += dS K (TS, B = K read MN-major)
  * Warp roles in both compute kernels (192 threads, the forward expert's split):
      - warp 5, loader: TMA of the tiles that stay (one-slot PipelineTmaUmma, both tiles on one barrier), then
        the streamed tiles (Q + dO, or K + V) into a STAGES-deep PipelineTmaUmma ring, two tiles per slot.
      - warp 4, MMA issuer: S(0); then per step it: S(it+1) into the (single) S / dP buffer as soon as the
        compute warps have read S(it), then, once P(it) / dS(it) are in TMEM, the accumulating TS MMAs of
        step it. So the tensor core computes S(it+1) while the compute warps turn S(it) into P(it).
      - warps 0-3, compute + epilogue: thread t owns TMEM lane t (tcgen05.ld/st 32x32b), i.e. one key row
        (dK/dV) or one query row (dQ) of every tile; no shuffles. Epilogue: TMEM -> registers -> bf16 ->
        swizzled smem in 32-column pieces -> TMA store (clipped at S and at D).
  * Tensor memory (512 columns x 128 lanes):
        S | dP      columns   0..63, 64..127    fp32 scores and dO V^T (or V dO^T) of the current step
        P | dS      columns 128..159, 160..191  bf16 operands, two per 32-bit column (dQ uses only dS)
        acc         dK/dV: dV at 256..256+DP-1, dK at 384..384+DP-1 (512 columns allocated);
                    dQ: 256..383 at DP = 128 (512 allocated), 192..255 at DP = 64 (256 allocated)
  * Hand-offs (cutlass.pipeline, counts in threads):
        kv/q, rows  PipelineTmaUmma 1 / STAGES    loader -> MMA; the MMA releases a slot with tcgen05.commit
        s           PipelineUmmaAsync 1           MMA commit -> compute; 128 compute arrivals free S / dP
        p           PipelineAsyncUmma 1           compute -> MMA; the commit after the TS MMAs frees P / dS
        acc         PipelineUmmaAsync 1           commit after the last TS MMA -> epilogue
  * The same bytes serve both operand majors: a 64-row tile TMA-loaded with the K-major B layout of the SS MMA
    is read as the MN-major B operand [DP x 64] of the TS MMA through the same swizzled pointer with the
    transposed layout (checked at trace time by tasks/attn_bwd/verify/attn_bwd_cutedsl_blackwell_emulate.py).
  * Tails and masks: tensors are viewed per head [B*heads, S, D] and handed to TMA as (S, D, B*heads), so rows
    past S load as zeros and stores clip at S (and at D: for D = 96 the tile is DP = 128 wide, columns 96..127
    load as zeros and their pieces are never stored). dK/dV: the LSE of query rows >= S is staged as +inf, so
    their P^T is exactly 0; key rows >= S are never stored (each row of dK/dV depends on its own key only);
    causal zeroes P^T where key > query in the two query blocks that straddle the diagonal. dQ: P is zeroed
    where key >= S or (causal) key > row in the blocks that can hold such a key; rows >= S are never stored.
    Causal: the dK/dV CTA of keys [n0, n0+128) starts at query block n0/64; the dQ CTA of rows [m0, m0+128)
    stops after key m0+127; dQ CTAs run last block first.
  * One compile per (D, CAUSAL); B*heads and S are dynamic, H, HKV and the scales are runtime arguments.
"""

import math

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
import torch
from cuda.bindings import driver as cuda_driver
from cutlass._mlir.dialects import nvvm
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

CAUSAL = False

TILE = 128  # rows that stay per CTA (keys in dK/dV, queries in dQ) = MMA M = TMEM lanes
STEP = 64  # streamed rows per step (queries in dK/dV, keys in dQ) = N of S, K of the TS MMA
COMPUTE_WARPS = 4  # warps 0..3: warp w reads and writes TMEM lanes 32w..32w+31
MMA_WARP, LOAD_WARP = 4, 5
THREADS = 32 * 6
COMPUTE_THREADS = 32 * COMPUTE_WARPS
S_COL, DP_COL = 0, 64  # fp32 S (S^T) and dP (dP^T) of the current step
P_COL, DS_COL = 128, 160  # bf16 P^T and dS^T (dS in the dQ kernel at DS_COL)
ACC0_COL, ACC1_COL = 256, 384  # dV and dK (dK/dV kernel: 512 columns allocated)


def _dq_tmem(dp):
    """dQ kernel: (dQ column, columns to allocate). At DP = 64 dQ sits right after dS and 256 columns suffice,
    so two co-resident CTAs (96 KiB of smem each) never wait for each other's TMEM."""
    return (192, 256) if dp == 64 else (256, 512)


EPI_N = 32  # epilogue piece width (columns)
DELTA_ROWS = 8  # delta kernel: rows per CTA (one warp each)
AB = cutlass.BFloat16
ACC = cutlass.Float32
LOG2E = 1.4426950408889634
TMEM_BARRIER_ID = 1  # compute warps + MMA warp wait for the TMEM address
EPI_BARRIER_ID = 2  # the 4 compute warps, epilogue
STAGE_BARRIER_ID = 3  # the 4 compute warps, LSE / Delta staging of the dK/dV kernel


def _tile_config(D):
    """Padded head dim and ring depth. Shared memory at DP = 128: dK/dV K + V (64 KiB) + 2 x (Q + dO) (64 KiB)
    + dK, dV epilogue tiles (64 KiB) = 192 KiB; dQ Q + dO (64) + 2 x (K + V) (64) + dQ tile (32) = 160 KiB."""
    dp = 64 if D <= 64 else 128
    stages = 3 if dp == 64 else 2
    return dp, stages


@cute.jit
def _fence_after_sync():
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.AFTER_THREAD_SYNC)


@cute.jit
def _fence_before_sync():
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.BEFORE_THREAD_SYNC)


# The MMA helpers are plain Python, traced inline; they return the tiled MMA because setting its ACCUMULATE
# field makes a new value (the kernel rebinds its variable, as in the forward expert).
def _issue_ss(mma, acc, fA, fB, slot_a, slot_b):
    """acc = A B^T over the head dim (both from smem, K-major), 16 columns per tcgen05.mma; overwrites acc."""
    mma.set(tcgen05.Field.ACCUMULATE, False)
    for kb in range(cute.size(fA, mode=[2])):
        cute.gemm(mma, acc, fA[(None, None, kb, slot_a)], fB[(None, None, kb, slot_b)], acc)
        mma.set(tcgen05.Field.ACCUMULATE, True)
    return mma


def _issue_ts(mma, acc, fA, fB, slot, accumulate):
    """acc (+)= A B over the 64 streamed rows, A from TMEM, 16 rows per tcgen05.mma; step 0 overwrites acc."""
    mma.set(tcgen05.Field.ACCUMULATE, accumulate)
    for kb in range(cute.size(fA, mode=[2])):
        cute.gemm(mma, acc, fA[(None, None, kb)], fB[(None, None, kb, slot)], acc)
        mma.set(tcgen05.Field.ACCUMULATE, True)
    return mma


def _tmem_views(mma_s, tmem_ptr, tidx):
    """The compute warps' TMEM views (plain Python, traced inline): thread t reads lane t of a 128 x 64 fp32
    tile (S / dP) and writes its bf16 row, packed two per 32-bit column, into 32 columns (P / dS).
    Returns (S-shaped layout, load copy, its thread slice, (row, column) of each loaded value, bf16-operand
    view, store copy, its thread slice)."""
    ms = mma_s.get_slice(0)
    s_layout = ms.make_fragment_C(ms.partition_shape_C((TILE, STEP))).layout  # ((128,64),1,1) fp32
    ld = tcgen05.make_tmem_copy(
        cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), ACC),
        cute.make_tensor(tmem_ptr + S_COL, s_layout),
    )
    thr_ld = ld.get_slice(tidx)
    coord = thr_ld.partition_D(ms.partition_C(cute.make_identity_tensor((TILE, STEP))))
    op_view = cute.composition(s_layout, cute.make_layout((TILE, STEP // 2)))  # first 32 columns
    st = tcgen05.make_tmem_copy(
        cute.make_copy_atom(tcgen05.St32x32bOp(tcgen05.Repetition.x32), ACC),
        cute.make_tensor(tmem_ptr + P_COL, op_view),
    )
    thr_st = st.get_slice(tidx)
    return s_layout, ld, thr_ld, coord, op_view, st, thr_st


def _epilogue_to_smem(tmem_ptr, acc_layout, col, factor, s_out, tidx, dp, head_dim):
    """Accumulator at TMEM column col, times factor, -> bf16 -> the swizzled (128, 32, pieces) smem tile."""
    acc = cute.make_tensor(tmem_ptr + col, acc_layout)
    parts = cute.flat_divide(acc[((None, None), 0, 0)], (TILE, EPI_N))  # (128, 32, 1, pieces)
    ld = tcgen05.make_tmem_copy(
        cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x32), ACC), parts[(None, None, 0, 0)]
    )
    thr_ld = ld.get_slice(tidx)
    t_src = thr_ld.partition_S(parts)  # (T2R, M, N, 1, pieces)
    coords = cute.flat_divide(cute.make_identity_tensor((TILE, dp)), (TILE, EPI_N))
    r_acc = cute.make_rmem_tensor(thr_ld.partition_D(coords)[(None, None, None, 0, 0)].shape, ACC)
    r2s = cute.make_tiled_copy_D(sm100_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, AB, ACC, ld), ld)
    s_dst = r2s.get_slice(tidx).partition_D(s_out)  # (R2S, M, N, pieces)
    r_out = cute.make_rmem_tensor(r_acc.shape, AB)
    r_src = r2s.retile(r_out)
    for c in range(dp // EPI_N):
        if c * EPI_N < head_dim:  # plain Python: the piece exists only below D
            cute.copy(ld, t_src[(None, None, None, 0, c)], r_acc)
            cute.arch.fence_view_async_tmem_load()
            for i in range(cute.size(r_acc)):
                r_acc[i] = r_acc[i] * factor
            r_out.store(r_acc.load().to(AB))
            cute.copy(r2s, r_src, s_dst[(None, None, None, c)])


def _tma_store_pieces(tma, t_out, s_out, head, blk, dp, head_dim):
    """One TMA store per 32-column piece that starts below D (clipped at S by the tensor bounds)."""
    g = cute.local_tile(t_out[(None, None, head)], (TILE, EPI_N), (blk, None))  # (128, 32, pieces)
    src, dst = cpasync.tma_partition(
        tma, 0, cute.make_layout(1), cute.group_modes(s_out, 0, 2), cute.group_modes(g, 0, 2)
    )
    for c in range(dp // EPI_N):
        if c * EPI_N < head_dim:  # plain Python: the piece exists only below D
            cute.copy(tma, src[(None, c)], dst[(None, c)])


# ---------------------------------------------------------------------------------------------------- Delta
@cute.kernel
def _delta_kernel(mO: cute.Tensor, mdO: cute.Tensor, mDelta: cute.Tensor, seqlen: cutlass.Int32, d: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    blk, bh, _ = cute.arch.block_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    lane = tidx % 32
    row = blk * DELTA_ROWS + warp_id
    if row < seqlen:
        acc = cutlass.Float32(0.0)
        for c in cutlass.range_constexpr(d // 32):  # D in {64, 96, 128}: a multiple of 32
            col = c * 32 + lane
            acc = acc + mO[(bh, row, col)].to(ACC) * mdO[(bh, row, col)].to(ACC)
        for off in cutlass.range_constexpr(5):
            acc = acc + cute.arch.shuffle_sync_bfly(acc, offset=16 >> off)
        if lane == 0:
            mDelta[(bh, row)] = acc


# ---------------------------------------------------------------------------------------------------- dK, dV
@cute.kernel
def _dkdv_kernel(
    mma_s: cute.TiledMma,  # S^T = K Q^T and dP^T = V dO^T: 128 keys x 64 queries, K = DP, SS
    mma_acc: cute.TiledMma,  # dV += P^T dO, dK += dS^T Q: 128 keys x DP, K = 64 queries, A from TMEM
    tma_q: cute.CopyAtom,
    tQ: cute.Tensor,
    tma_do: cute.CopyAtom,
    tdO: cute.Tensor,
    tma_k: cute.CopyAtom,
    tK: cute.Tensor,
    tma_v: cute.CopyAtom,
    tV: cute.Tensor,
    tma_dk: cute.CopyAtom,
    tdK: cute.Tensor,
    tma_dv: cute.CopyAtom,
    tdV: cute.Tensor,
    mLSE: cute.Tensor,
    mDelta: cute.Tensor,
    key_lay: cute.ComposedLayout,  # 128-row tile, A of the SS MMA (K-major), 1 stage
    row_lay: cute.ComposedLayout,  # 64-row tile, B of the SS MMA (K-major), STAGES
    row_lay_t: cute.ComposedLayout,  # the same bytes as the MN-major B of the TS MMA
    op_lay: cute.ComposedLayout,  # A of the TS MMA (only its shape is used: the operand lives in TMEM)
    epi_lay: cute.ComposedLayout,  # (128, 32, pieces) epilogue tile
    seqlen: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale: cutlass.Float32,
    scale_log2: cutlass.Float32,
    head_dim: cutlass.Constexpr,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    n_blk, bkv, _ = cute.arch.block_idx()

    b = bkv // kv_heads
    kv = bkv - b * kv_heads
    group = heads // kv_heads
    n0 = n_blk * TILE
    n_qblk = (seqlen + STEP - 1) // STEP
    m_lo = 0
    if cutlass.const_expr(causal):
        m_lo = n0 // STEP  # earlier query blocks see none of these keys
    per_head = n_qblk - m_lo  # >= 1: n0 < S
    steps = group * per_head

    if warp_id == LOAD_WARP:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_do)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cpasync.prefetch_descriptor(tma_dk)
        cpasync.prefetch_descriptor(tma_dv)

    smem = cutlass.utils.SmemAllocator()
    bar_kv = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_row = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    bar_s = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_p = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_acc = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    tmem_slot = smem.allocate_array(cutlass.Int32, 1, byte_alignment=8)
    sLSE = smem.allocate_tensor(ACC, cute.make_layout((STEP, 2)), byte_alignment=16)  # double-buffered
    sDlt = smem.allocate_tensor(ACC, cute.make_layout((STEP, 2)), byte_alignment=16)
    sK = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)
    sV = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)
    sQ = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)
    sdO = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)
    sdK = smem.allocate_tensor(AB, epi_lay.outer, byte_alignment=1024, swizzle=epi_lay.inner)
    sdV = smem.allocate_tensor(AB, epi_lay.outer, byte_alignment=1024, swizzle=epi_lay.inner)
    # MN-major views of the Q and dO slots: same swizzled pointer, transposed layout
    sQt = cute.make_tensor(sQ.iterator, row_lay_t.outer)
    sdOt = cute.make_tensor(sdO.iterator, row_lay_t.outer)

    one = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    compute = pipeline.CooperativeGroup(pipeline.Agent.Thread, COMPUTE_THREADS)
    key_bytes = cute.size_in_bytes(AB, cute.select(key_lay, mode=[0, 1, 2]))
    row_bytes = cute.size_in_bytes(AB, cute.select(row_lay, mode=[0, 1, 2]))
    kv_pipe = pipeline.PipelineTmaUmma.create(
        num_stages=1,
        producer_group=one,
        consumer_group=one,
        tx_count=2 * key_bytes,
        barrier_storage=bar_kv,
    )
    row_pipe = pipeline.PipelineTmaUmma.create(
        num_stages=stages,
        producer_group=one,
        consumer_group=one,
        tx_count=2 * row_bytes,
        barrier_storage=bar_row,
    )
    s_pipe = pipeline.PipelineUmmaAsync.create(
        num_stages=1, producer_group=one, consumer_group=compute, barrier_storage=bar_s
    )
    p_pipe = pipeline.PipelineAsyncUmma.create(
        num_stages=1, producer_group=compute, consumer_group=one, barrier_storage=bar_p
    )
    acc_pipe = pipeline.PipelineUmmaAsync.create(
        num_stages=1, producer_group=one, consumer_group=compute, barrier_storage=bar_acc
    )
    tmem_sync = pipeline.NamedBarrier(barrier_id=TMEM_BARRIER_ID, num_threads=COMPUTE_THREADS + 32)
    epi_sync = pipeline.NamedBarrier(barrier_id=EPI_BARRIER_ID, num_threads=COMPUTE_THREADS)
    stage_sync = pipeline.NamedBarrier(barrier_id=STAGE_BARRIER_ID, num_threads=COMPUTE_THREADS)
    tmem = cutlass.memory.TmemAllocator(tmem_slot, barrier_for_retrieve=tmem_sync, allocator_warp_id=0)

    ms = mma_s.get_slice(0)
    ma = mma_acc.get_slice(0)

    if warp_id == LOAD_WARP:
        # ============================================================== TMA loader
        gK = cute.local_tile(tK[(None, None, bkv)], (TILE, dp), (None, 0))  # (128, dp, n_tiles)
        gV = cute.local_tile(tV[(None, None, bkv)], (TILE, dp), (None, 0))
        k_dst, k_src = cpasync.tma_partition(
            tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 3), cute.group_modes(ms.partition_A(gK), 0, 3)
        )
        v_dst, v_src = cpasync.tma_partition(
            tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 3), cute.group_modes(ms.partition_A(gV), 0, 3)
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
            gQ = cute.local_tile(tQ[(None, None, bh)], (STEP, dp), (None, 0))  # (64, dp, m_tiles)
            gdO = cute.local_tile(tdO[(None, None, bh)], (STEP, dp), (None, 0))
            q_dst, q_src = cpasync.tma_partition(
                tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 3), cute.group_modes(ms.partition_B(gQ), 0, 3)
            )
            do_dst, do_src = cpasync.tma_partition(
                tma_do,
                0,
                cute.make_layout(1),
                cute.group_modes(sdO, 0, 3),
                cute.group_modes(ms.partition_B(gdO), 0, 3),
            )
            row_pipe.producer_acquire(row_put)
            cute.copy(
                tma_q,
                q_src[(None, m)],
                q_dst[(None, row_put.index)],
                tma_bar_ptr=row_pipe.producer_get_barrier(row_put),
            )
            cute.copy(
                tma_do,
                do_src[(None, m)],
                do_dst[(None, row_put.index)],
                tma_bar_ptr=row_pipe.producer_get_barrier(row_put),
            )
            row_put.advance()
        row_pipe.producer_tail(row_put)

    if warp_id == MMA_WARP:
        # ============================================================== tcgen05 issuer
        fK = ms.make_fragment_A(sK)  # (MMA, 1, DP/16, 1) smem descriptors
        fV = ms.make_fragment_A(sV)
        fQ = ms.make_fragment_B(sQ)  # (MMA, 1, DP/16, stages)
        fdO = ms.make_fragment_B(sdO)
        fQt = ma.make_fragment_B(sQt)  # (MMA, 1, 4, stages): MN-major, K = 64 queries
        fdOt = ma.make_fragment_B(sdOt)
        tmem.wait_for_alloc()
        _fence_after_sync()
        tmem_ptr = tmem.retrieve_ptr(ACC)
        ms_layout = ms.make_fragment_C(ms.partition_shape_C((TILE, STEP))).layout
        ma_layout = ma.make_fragment_C(ma.partition_shape_C((TILE, dp))).layout
        acc_s = cute.make_tensor(tmem_ptr + S_COL, ms_layout)
        acc_dp = cute.make_tensor(tmem_ptr + DP_COL, ms_layout)
        acc_dv = cute.make_tensor(tmem_ptr + ACC0_COL, ma_layout)
        acc_dk = cute.make_tensor(tmem_ptr + ACC1_COL, ma_layout)
        op_frag = ma.make_fragment_A(cute.make_tensor(tmem_ptr, op_lay.outer))[(None, None, None, 0)].layout
        fP = cute.make_tensor(cute.recast_ptr(tmem_ptr + P_COL, dtype=AB), op_frag)
        fdS = cute.make_tensor(cute.recast_ptr(tmem_ptr + DS_COL, dtype=AB), op_frag)

        kv_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        row_mma = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)  # next S to issue
        row_rel = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)  # slot to release
        s_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        p_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        acc_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        kv_pipe.consumer_wait(kv_get)

        # S^T(0), dP^T(0); then per step it: S^T(it+1) once the compute warps read S^T(it), then dV, dK of it.
        # "S(it+1) if it+1 < steps" is a loop of 0 or 1 trips so that no pipeline state advances under a
        # data-dependent `if` (as in the forward expert).
        s_pipe.producer_acquire(s_put)
        row_pipe.consumer_wait(row_mma)
        _fence_after_sync()
        mma_s = _issue_ss(mma_s, acc_s, fK, fQ, 0, row_mma.index)
        mma_s = _issue_ss(mma_s, acc_dp, fV, fdO, 0, row_mma.index)
        s_pipe.producer_commit(s_put)
        s_put.advance()
        row_mma.advance()
        for it in cutlass.range(steps, unroll=1):
            for jj in cutlass.range(it + 1, cutlass.min(steps, it + 2), unroll=1):
                s_pipe.producer_acquire(s_put)  # the compute warps have read S^T(it), dP^T(it)
                row_pipe.consumer_wait(row_mma)
                _fence_after_sync()
                mma_s = _issue_ss(mma_s, acc_s, fK, fQ, 0, row_mma.index)
                mma_s = _issue_ss(mma_s, acc_dp, fV, fdO, 0, row_mma.index)
                s_pipe.producer_commit(s_put)
                s_put.advance()
                row_mma.advance()
            p_pipe.consumer_wait(p_get)  # P^T(it), dS^T(it) in TMEM
            _fence_after_sync()
            mma_acc = _issue_ts(mma_acc, acc_dv, fP, fdOt, row_rel.index, it > 0)
            mma_acc = _issue_ts(mma_acc, acc_dk, fdS, fQt, row_rel.index, it > 0)
            row_pipe.consumer_release(row_rel)  # tcgen05.commit -> Q / dO slot empty
            row_rel.advance()
            p_pipe.consumer_release(p_get)  # tcgen05.commit -> P^T / dS^T columns free
            p_get.advance()
        acc_pipe.producer_acquire(acc_put)
        acc_pipe.producer_commit(acc_put)  # every MMA of the CTA done -> epilogue
        acc_put.advance()
        s_pipe.producer_tail(s_put)
        acc_pipe.producer_tail(acc_put)

    if warp_id < COMPUTE_WARPS:
        # ============================================================== P^T, dS^T, epilogue
        tmem.allocate(512)  # warp 0 allocates all 512 columns
        _fence_before_sync()
        tmem.wait_for_alloc()
        _fence_after_sync()
        tmem_ptr = tmem.retrieve_ptr(ACC)
        s_layout, ld_s, thr_ld, coord, op_view, st_op, thr_st = _tmem_views(mma_s, tmem_ptr, tidx)
        acc_layout = ma.make_fragment_C(ma.partition_shape_C((TILE, dp))).layout
        op32_shape = thr_st.partition_S(cute.make_identity_tensor((TILE, STEP // 2))).shape
        r_s = cute.make_rmem_tensor(coord.shape, ACC)
        r_dp = cute.make_rmem_tensor(coord.shape, ACC)
        r_p32 = cute.make_rmem_tensor(op32_shape, ACC)
        r_ds32 = cute.make_rmem_tensor(op32_shape, ACC)
        r_p = cute.make_tensor(cute.recast_ptr(r_p32.iterator, dtype=AB), r_s.layout)  # bf16, column order
        r_ds = cute.make_tensor(cute.recast_ptr(r_ds32.iterator, dtype=AB), r_s.layout)
        n_v = cute.size(r_s)
        key = n0 + coord[0][0]  # = n0 + tidx: this thread's key (TMEM lane)

        s_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        p_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        acc_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)

        for it in cutlass.range(steps, unroll=1):
            g = it // per_head
            m = m_lo + (it - g * per_head)
            bh = b * heads + kv * group + g
            q0 = m * STEP
            buf = it % 2
            # ---------------- LSE * log2e (+inf past S: P^T = 0 there) and Delta (0 past S) of the 64 queries,
            # staged once per step (double-buffered: a thread writes buffer it%2 only after every thread
            # passed this barrier in step it-1, i.e. finished reading buffer it%2 in step it-2)
            if tidx < STEP:
                qrow = q0 + tidx
                lse = mLSE[(bh, cutlass.min(qrow, seqlen - 1))] * LOG2E
                sLSE[(tidx, buf)] = cutlass.Float32(cutlass.select_(qrow < seqlen, lse, math.inf))
            else:
                qrow = q0 + tidx - STEP
                dlt = mDelta[(bh, cutlass.min(qrow, seqlen - 1))]
                sDlt[(tidx - STEP, buf)] = cutlass.Float32(cutlass.select_(qrow < seqlen, dlt, 0.0))
            stage_sync.arrive_and_wait()

            # ---------------- S^T, dP^T rows of this key
            s_pipe.consumer_wait(s_get)
            _fence_after_sync()
            cute.copy(ld_s, thr_ld.partition_S(cute.make_tensor(tmem_ptr + S_COL, s_layout)), r_s)
            cute.copy(ld_s, thr_ld.partition_S(cute.make_tensor(tmem_ptr + DP_COL, s_layout)), r_dp)
            cute.arch.fence_view_async_tmem_load()
            _fence_before_sync()
            s_pipe.consumer_release(s_get)  # the MMA warp may compute S^T(it+1) now
            s_get.advance()

            # ---------------- P^T = exp2(S^T scale log2e - LSE log2e); causal: 0 where key > query
            for i in cutlass.range_constexpr(n_v):
                r_s[i] = cute.arch.exp2(r_s[i] * scale_log2 - sLSE[(coord[i][1], buf)])
            if cutlass.const_expr(causal):
                # column c is live when q0 + c >= key; no branch: in steps past the diagonal lo < 0 and the
                # selects keep every value (a dynamic `if` around them cost ~50 registers)
                lo = key - q0
                for i in cutlass.range_constexpr(n_v):
                    r_s[i] = cutlass.Float32(cutlass.select_(coord[i][1] >= lo, r_s[i], 0.0))
            # ---------------- dS^T = P^T (dP^T - Delta)
            for i in cutlass.range_constexpr(n_v):
                r_dp[i] = r_s[i] * (r_dp[i] - sDlt[(coord[i][1], buf)])
            r_p.store(r_s.load().to(AB))
            r_ds.store(r_dp.load().to(AB))

            # ---------------- P^T, dS^T -> TMEM (once the TS MMAs of step it-1 have read the previous ones)
            p_pipe.producer_acquire(p_put)
            _fence_after_sync()
            cute.copy(st_op, r_p32, thr_st.partition_D(cute.make_tensor(tmem_ptr + P_COL, op_view)))
            cute.copy(st_op, r_ds32, thr_st.partition_D(cute.make_tensor(tmem_ptr + DS_COL, op_view)))
            cute.arch.fence_view_async_tmem_store()
            _fence_before_sync()
            p_pipe.producer_commit(p_put)
            p_put.advance()

        # ---------------- epilogue: dK * scale, dV -> bf16 -> smem -> TMA store (clipped at S)
        acc_pipe.consumer_wait(acc_get)
        _fence_after_sync()
        _epilogue_to_smem(tmem_ptr, acc_layout, ACC1_COL, scale, sdK, tidx, dp, head_dim)
        _epilogue_to_smem(tmem_ptr, acc_layout, ACC0_COL, cutlass.Float32(1.0), sdV, tidx, dp, head_dim)
        acc_pipe.consumer_release(acc_get)
        cute.arch.fence_proxy("async.shared", space="cta")
        _fence_before_sync()
        epi_sync.arrive_and_wait()
        if warp_id == 0:
            _tma_store_pieces(tma_dk, tdK, sdK, bkv, n_blk, dp, head_dim)
            _tma_store_pieces(tma_dv, tdV, sdV, bkv, n_blk, dp, head_dim)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)
            _fence_after_sync()
            tmem.relinquish_alloc_permit()
            tmem.free(tmem_ptr)
        p_pipe.producer_tail(p_put)


# ---------------------------------------------------------------------------------------------------- dQ
@cute.kernel
def _dq_kernel(
    mma_s: cute.TiledMma,  # S = Q K^T and dP = dO V^T: 128 queries x 64 keys, K = DP, SS
    mma_acc: cute.TiledMma,  # dQ += dS K: 128 queries x DP, K = 64 keys, A from TMEM
    tma_q: cute.CopyAtom,
    tQ: cute.Tensor,
    tma_do: cute.CopyAtom,
    tdO: cute.Tensor,
    tma_k: cute.CopyAtom,
    tK: cute.Tensor,
    tma_v: cute.CopyAtom,
    tV: cute.Tensor,
    tma_dq: cute.CopyAtom,
    tdQ: cute.Tensor,
    mLSE: cute.Tensor,
    mDelta: cute.Tensor,
    row_lay: cute.ComposedLayout,  # 128-row tile, A of the SS MMA (K-major), 1 stage
    key_lay: cute.ComposedLayout,  # 64-row tile, B of the SS MMA (K-major), STAGES
    key_lay_t: cute.ComposedLayout,  # the same bytes as the MN-major B of the TS MMA
    op_lay: cute.ComposedLayout,
    epi_lay: cute.ComposedLayout,
    seqlen: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale: cutlass.Float32,
    scale_log2: cutlass.Float32,
    head_dim: cutlass.Constexpr,
    dp: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    causal: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    blk_x, bh, _ = cute.arch.block_idx()
    n_mblk, _, _ = cute.arch.grid_dim()

    m_blk = blk_x
    if cutlass.const_expr(causal):
        m_blk = n_mblk - 1 - blk_x  # longest causal rows first
    m0 = m_blk * TILE
    b = bh // heads
    h = bh - b * heads
    kv_row = b * kv_heads + h // (heads // kv_heads)
    kend = seqlen
    if cutlass.const_expr(causal):
        kend = cutlass.min(seqlen, m0 + TILE)  # keys past the tile's last row are invisible
    n_kblk = (kend + STEP - 1) // STEP  # >= 1

    if warp_id == LOAD_WARP:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_do)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cpasync.prefetch_descriptor(tma_dq)

    smem = cutlass.utils.SmemAllocator()
    bar_q = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_kv = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    bar_s = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_p = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_acc = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    tmem_slot = smem.allocate_array(cutlass.Int32, 1, byte_alignment=8)
    sQ = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)
    sdO = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)
    sK = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)
    sV = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)
    sdQ = smem.allocate_tensor(AB, epi_lay.outer, byte_alignment=1024, swizzle=epi_lay.inner)
    sKt = cute.make_tensor(sK.iterator, key_lay_t.outer)

    one = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    compute = pipeline.CooperativeGroup(pipeline.Agent.Thread, COMPUTE_THREADS)
    row_bytes = cute.size_in_bytes(AB, cute.select(row_lay, mode=[0, 1, 2]))
    key_bytes = cute.size_in_bytes(AB, cute.select(key_lay, mode=[0, 1, 2]))
    q_pipe = pipeline.PipelineTmaUmma.create(
        num_stages=1,
        producer_group=one,
        consumer_group=one,
        tx_count=2 * row_bytes,
        barrier_storage=bar_q,
    )
    kv_pipe = pipeline.PipelineTmaUmma.create(
        num_stages=stages,
        producer_group=one,
        consumer_group=one,
        tx_count=2 * key_bytes,
        barrier_storage=bar_kv,
    )
    s_pipe = pipeline.PipelineUmmaAsync.create(
        num_stages=1, producer_group=one, consumer_group=compute, barrier_storage=bar_s
    )
    p_pipe = pipeline.PipelineAsyncUmma.create(
        num_stages=1, producer_group=compute, consumer_group=one, barrier_storage=bar_p
    )
    acc_pipe = pipeline.PipelineUmmaAsync.create(
        num_stages=1, producer_group=one, consumer_group=compute, barrier_storage=bar_acc
    )
    tmem_sync = pipeline.NamedBarrier(barrier_id=TMEM_BARRIER_ID, num_threads=COMPUTE_THREADS + 32)
    epi_sync = pipeline.NamedBarrier(barrier_id=EPI_BARRIER_ID, num_threads=COMPUTE_THREADS)
    tmem = cutlass.memory.TmemAllocator(tmem_slot, barrier_for_retrieve=tmem_sync, allocator_warp_id=0)

    ms = mma_s.get_slice(0)
    ma = mma_acc.get_slice(0)

    if warp_id == LOAD_WARP:
        # ============================================================== TMA loader
        gQ = cute.local_tile(tQ[(None, None, bh)], (TILE, dp), (None, 0))
        gdO = cute.local_tile(tdO[(None, None, bh)], (TILE, dp), (None, 0))
        gK = cute.local_tile(tK[(None, None, kv_row)], (STEP, dp), (None, 0))
        gV = cute.local_tile(tV[(None, None, kv_row)], (STEP, dp), (None, 0))
        q_dst, q_src = cpasync.tma_partition(
            tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 3), cute.group_modes(ms.partition_A(gQ), 0, 3)
        )
        do_dst, do_src = cpasync.tma_partition(
            tma_do, 0, cute.make_layout(1), cute.group_modes(sdO, 0, 3), cute.group_modes(ms.partition_A(gdO), 0, 3)
        )
        k_dst, k_src = cpasync.tma_partition(
            tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 3), cute.group_modes(ms.partition_B(gK), 0, 3)
        )
        v_dst, v_src = cpasync.tma_partition(
            tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 3), cute.group_modes(ms.partition_B(gV), 0, 3)
        )
        q_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        q_pipe.producer_acquire(q_put)
        cute.copy(tma_q, q_src[(None, m_blk)], q_dst[(None, 0)], tma_bar_ptr=q_pipe.producer_get_barrier(q_put))
        cute.copy(tma_do, do_src[(None, m_blk)], do_dst[(None, 0)], tma_bar_ptr=q_pipe.producer_get_barrier(q_put))
        kv_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
        for n in cutlass.range(n_kblk, unroll=1):
            kv_pipe.producer_acquire(kv_put)
            cute.copy(
                tma_k, k_src[(None, n)], k_dst[(None, kv_put.index)], tma_bar_ptr=kv_pipe.producer_get_barrier(kv_put)
            )
            cute.copy(
                tma_v, v_src[(None, n)], v_dst[(None, kv_put.index)], tma_bar_ptr=kv_pipe.producer_get_barrier(kv_put)
            )
            kv_put.advance()
        kv_pipe.producer_tail(kv_put)

    if warp_id == MMA_WARP:
        # ============================================================== tcgen05 issuer
        fQ = ms.make_fragment_A(sQ)
        fdO = ms.make_fragment_A(sdO)
        fK = ms.make_fragment_B(sK)
        fV = ms.make_fragment_B(sV)
        fKt = ma.make_fragment_B(sKt)  # (MMA, 1, 4, stages): MN-major, K = 64 keys
        tmem.wait_for_alloc()
        _fence_after_sync()
        tmem_ptr = tmem.retrieve_ptr(ACC)
        ms_layout = ms.make_fragment_C(ms.partition_shape_C((TILE, STEP))).layout
        ma_layout = ma.make_fragment_C(ma.partition_shape_C((TILE, dp))).layout
        acc_s = cute.make_tensor(tmem_ptr + S_COL, ms_layout)
        acc_dp = cute.make_tensor(tmem_ptr + DP_COL, ms_layout)
        acc_dq = cute.make_tensor(tmem_ptr + _dq_tmem(dp)[0], ma_layout)
        op_frag = ma.make_fragment_A(cute.make_tensor(tmem_ptr, op_lay.outer))[(None, None, None, 0)].layout
        fdS = cute.make_tensor(cute.recast_ptr(tmem_ptr + DS_COL, dtype=AB), op_frag)

        q_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        kv_mma = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        kv_rel = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        s_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        p_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        acc_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        q_pipe.consumer_wait(q_get)

        s_pipe.producer_acquire(s_put)
        kv_pipe.consumer_wait(kv_mma)
        _fence_after_sync()
        mma_s = _issue_ss(mma_s, acc_s, fQ, fK, 0, kv_mma.index)
        mma_s = _issue_ss(mma_s, acc_dp, fdO, fV, 0, kv_mma.index)
        s_pipe.producer_commit(s_put)
        s_put.advance()
        kv_mma.advance()
        for n in cutlass.range(n_kblk, unroll=1):
            for jj in cutlass.range(n + 1, cutlass.min(n_kblk, n + 2), unroll=1):
                s_pipe.producer_acquire(s_put)
                kv_pipe.consumer_wait(kv_mma)
                _fence_after_sync()
                mma_s = _issue_ss(mma_s, acc_s, fQ, fK, 0, kv_mma.index)
                mma_s = _issue_ss(mma_s, acc_dp, fdO, fV, 0, kv_mma.index)
                s_pipe.producer_commit(s_put)
                s_put.advance()
                kv_mma.advance()
            p_pipe.consumer_wait(p_get)
            _fence_after_sync()
            mma_acc = _issue_ts(mma_acc, acc_dq, fdS, fKt, kv_rel.index, n > 0)
            kv_pipe.consumer_release(kv_rel)
            kv_rel.advance()
            p_pipe.consumer_release(p_get)
            p_get.advance()
        acc_pipe.producer_acquire(acc_put)
        acc_pipe.producer_commit(acc_put)
        acc_put.advance()
        s_pipe.producer_tail(s_put)
        acc_pipe.producer_tail(acc_put)

    if warp_id < COMPUTE_WARPS:
        # ============================================================== P, dS, epilogue
        tmem.allocate(_dq_tmem(dp)[1])
        _fence_before_sync()
        tmem.wait_for_alloc()
        _fence_after_sync()
        tmem_ptr = tmem.retrieve_ptr(ACC)
        s_layout, ld_s, thr_ld, coord, op_view, st_op, thr_st = _tmem_views(mma_s, tmem_ptr, tidx)
        acc_layout = ma.make_fragment_C(ma.partition_shape_C((TILE, dp))).layout
        op32_shape = thr_st.partition_S(cute.make_identity_tensor((TILE, STEP // 2))).shape
        r_s = cute.make_rmem_tensor(coord.shape, ACC)
        r_dp = cute.make_rmem_tensor(coord.shape, ACC)
        r_ds32 = cute.make_rmem_tensor(op32_shape, ACC)
        r_ds = cute.make_tensor(cute.recast_ptr(r_ds32.iterator, dtype=AB), r_s.layout)
        n_v = cute.size(r_s)
        row = m0 + coord[0][0]  # = m0 + tidx: this thread's query row (TMEM lane)
        qrow = cutlass.min(row, seqlen - 1)  # rows >= S: finite values, never stored
        lse2 = mLSE[(bh, qrow)] * LOG2E
        dlt = mDelta[(bh, qrow)]

        s_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        p_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        acc_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)

        for n in cutlass.range(n_kblk, unroll=1):
            k0 = n * STEP
            s_pipe.consumer_wait(s_get)
            _fence_after_sync()
            cute.copy(ld_s, thr_ld.partition_S(cute.make_tensor(tmem_ptr + S_COL, s_layout)), r_s)
            cute.copy(ld_s, thr_ld.partition_S(cute.make_tensor(tmem_ptr + DP_COL, s_layout)), r_dp)
            cute.arch.fence_view_async_tmem_load()
            _fence_before_sync()
            s_pipe.consumer_release(s_get)
            s_get.advance()

            for i in cutlass.range_constexpr(n_v):
                r_s[i] = cute.arch.exp2(r_s[i] * scale_log2 - lse2)
            needs_mask = k0 + STEP > seqlen
            if cutlass.const_expr(causal):
                needs_mask = needs_mask | (k0 + STEP > m0)
            if needs_mask:  # column c is live when c < limit
                limit = seqlen - k0
                if cutlass.const_expr(causal):
                    limit = cutlass.min(limit, row - k0 + 1)
                for i in cutlass.range_constexpr(n_v):
                    r_s[i] = cutlass.Float32(cutlass.select_(coord[i][1] < limit, r_s[i], 0.0))
            for i in cutlass.range_constexpr(n_v):
                r_dp[i] = r_s[i] * (r_dp[i] - dlt)
            r_ds.store(r_dp.load().to(AB))

            p_pipe.producer_acquire(p_put)
            _fence_after_sync()
            cute.copy(st_op, r_ds32, thr_st.partition_D(cute.make_tensor(tmem_ptr + DS_COL, op_view)))
            cute.arch.fence_view_async_tmem_store()
            _fence_before_sync()
            p_pipe.producer_commit(p_put)
            p_put.advance()

        acc_pipe.consumer_wait(acc_get)
        _fence_after_sync()
        _epilogue_to_smem(tmem_ptr, acc_layout, _dq_tmem(dp)[0], scale, sdQ, tidx, dp, head_dim)
        acc_pipe.consumer_release(acc_get)
        cute.arch.fence_proxy("async.shared", space="cta")
        _fence_before_sync()
        epi_sync.arrive_and_wait()
        if warp_id == 0:
            _tma_store_pieces(tma_dq, tdQ, sdQ, bh, m_blk, dp, head_dim)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)
            _fence_after_sync()
            tmem.relinquish_alloc_permit()
            tmem.free(tmem_ptr)
        p_pipe.producer_tail(p_put)


# ---------------------------------------------------------------------------------------------------- host
def _per_head(t):
    """(B*heads, S, D) -> the TMA view (S, D, B*heads)."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[1, 2, 0]))


def _make_mmas(dp):
    """The two tiled MMAs of both compute kernels (also used by the verify script)."""
    K_MAJ, MN_MAJ = OperandMajorMode.K, OperandMajorMode.MN
    # S = A B^T over the head dim, both K-major: M 128 (rows that stay) x N 64 (streamed rows)
    mma_s = sm100_utils.make_trivial_tiled_mma(AB, AB, K_MAJ, K_MAJ, ACC, tcgen05.CtaGroup.ONE, (TILE, STEP))
    # acc += A T: M 128 x N DP, K = 64 streamed rows; A (P^T, dS^T, dS) from TMEM, T read MN-major
    mma_acc = sm100_utils.make_trivial_tiled_mma(
        AB, AB, K_MAJ, MN_MAJ, ACC, tcgen05.CtaGroup.ONE, (TILE, dp), tcgen05.OperandSource.TMEM
    )
    return mma_s, mma_acc


def _make_layouts(mma_s, mma_acc, dp, stages):
    """Shared-memory layouts: the 128-row tile (A of the SS MMA), the 64-row tile (B of the SS MMA, K-major),
    its MN-major view as the B of the TS MMA (same bytes), the TS MMA's A shape, the epilogue pieces."""
    s_tiler = (TILE, STEP, dp)
    acc_tiler = (TILE, dp, STEP)
    lay128 = sm100_utils.make_smem_layout_a(mma_s, s_tiler, AB, 1)
    lay64 = sm100_utils.make_smem_layout_b(mma_s, s_tiler, AB, stages)
    lay64_t = sm100_utils.make_smem_layout_b(mma_acc, acc_tiler, AB, stages)
    op_lay = sm100_utils.make_smem_layout_a(mma_acc, acc_tiler, AB, 1)
    epi = sm100_utils.make_smem_layout_epi(AB, LayoutEnum.ROW_MAJOR, (TILE, EPI_N), dp // EPI_N)
    return lay128, lay64, lay64_t, op_lay, epi


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
    head_dim = cute.size(q, mode=[2])  # static
    mma_s, mma_acc = _make_mmas(dp)
    lay128, lay64, lay64_t, op_lay, epi = _make_layouts(mma_s, mma_acc, dp, stages)
    s_tiler = (TILE, STEP, dp)
    t128 = cute.select(lay128, mode=[0, 1, 2])
    t64 = cute.select(lay64, mode=[0, 1, 2])
    t_epi = cute.slice_(epi, (None, None, 0))

    load = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    store = cpasync.CopyBulkTensorTileS2GOp()
    tq, tdo, tk, tv = _per_head(q), _per_head(do), _per_head(k), _per_head(v)
    # dK/dV kernel: K, V are the 128-row A tiles, Q, dO the 64-row B tiles
    tma_k128, tK128 = cute.nvgpu.make_tiled_tma_atom_A(load, tk, t128, s_tiler, mma_s)
    tma_v128, tV128 = cute.nvgpu.make_tiled_tma_atom_A(load, tv, t128, s_tiler, mma_s)
    tma_q64, tQ64 = cute.nvgpu.make_tiled_tma_atom_B(load, tq, t64, s_tiler, mma_s)
    tma_do64, tdO64 = cute.nvgpu.make_tiled_tma_atom_B(load, tdo, t64, s_tiler, mma_s)
    # dQ kernel: Q, dO are the 128-row A tiles, K, V the 64-row B tiles
    tma_q128, tQ128 = cute.nvgpu.make_tiled_tma_atom_A(load, tq, t128, s_tiler, mma_s)
    tma_do128, tdO128 = cute.nvgpu.make_tiled_tma_atom_A(load, tdo, t128, s_tiler, mma_s)
    tma_k64, tK64 = cute.nvgpu.make_tiled_tma_atom_B(load, tk, t64, s_tiler, mma_s)
    tma_v64, tV64 = cute.nvgpu.make_tiled_tma_atom_B(load, tv, t64, s_tiler, mma_s)
    tma_dk, tdK = cpasync.make_tiled_tma_atom(store, _per_head(dk), t_epi, (TILE, EPI_N))
    tma_dv, tdV = cpasync.make_tiled_tma_atom(store, _per_head(dv), t_epi, (TILE, EPI_N))
    tma_dq, tdQ = cpasync.make_tiled_tma_atom(store, _per_head(dq), t_epi, (TILE, EPI_N))

    seqlen = cute.size(q, mode=[1])
    n_bh = cute.size(q, mode=[0])
    n_bkv = cute.size(k, mode=[0])

    _delta_kernel(o, do, delta, seqlen, head_dim).launch(
        grid=((seqlen + DELTA_ROWS - 1) // DELTA_ROWS, n_bh, 1), block=(DELTA_ROWS * 32, 1, 1), stream=stream
    )
    _dkdv_kernel(
        mma_s,
        mma_acc,
        tma_q64,
        tQ64,
        tma_do64,
        tdO64,
        tma_k128,
        tK128,
        tma_v128,
        tV128,
        tma_dk,
        tdK,
        tma_dv,
        tdV,
        lse,
        delta,
        lay128,
        lay64,
        lay64_t,
        op_lay,
        epi,
        seqlen,
        heads,
        kv_heads,
        scale,
        scale_log2,
        head_dim,
        dp,
        stages,
        causal,
    ).launch(grid=((seqlen + TILE - 1) // TILE, n_bkv, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream)
    _dq_kernel(
        mma_s,
        mma_acc,
        tma_q128,
        tQ128,
        tma_do128,
        tdO128,
        tma_k64,
        tK64,
        tma_v64,
        tV64,
        tma_dq,
        tdQ,
        lse,
        delta,
        lay128,
        lay64,
        lay64_t,
        op_lay,
        epi,
        seqlen,
        heads,
        kv_heads,
        scale,
        scale_log2,
        head_dim,
        dp,
        stages,
        causal,
    ).launch(grid=((seqlen + TILE - 1) // TILE, n_bh, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream)


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
    delta = torch.empty((B * H, S), dtype=torch.float32, device=Q.device)  # Delta scratch
    rows = B * H
    kv_rows = B * HKV
    args = (
        _wrap(dO.view(rows, S, D)),
        _wrap(Q.view(rows, S, D)),
        _wrap(K.view(kv_rows, S, D)),
        _wrap(V.view(kv_rows, S, D)),
        _wrap(O.view(rows, S, D)),
        _wrap(LSE.view(rows, S)),
        _wrap(delta),
        _wrap(dQ.view(rows, S, D)),
        _wrap(dK.view(kv_rows, S, D)),
        _wrap(dV.view(kv_rows, S, D)),
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
