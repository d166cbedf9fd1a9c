"""Expert Blackwell (sm_100a) GEMM in CuTe DSL: C = A @ B^T, bf16 in / fp32 accumulate / bf16 out.

A [M, K], B [N, K], C [M, N], all row-major. Every M >= 1 and N, K multiples of 8 are handled:
TMA loads zero-fill whatever lies past M, N or K, and the TMA store clips each piece at the edge of C.

Design (one CTA per SM, persistent, 6 warps):
  * warp 5, loader: walks this CTA's 128 x 256 tiles (grouped along M for L2 reuse) and their
    64-wide k-tiles, and TMA-loads A (128 x 64) and B (256 x 64) into a STAGES-deep ring of
    swizzled shared-memory slots (full mbarrier = TMA bytes, empty mbarrier = tcgen05.commit).
  * warp 4, MMA issuer: the whole warp calls cute.gemm (warp-uniform, as the DSL 4.8.1 docstring
    requires; the compiler elects the one thread that issues tcgen05.mma 128x256x16, kind::f16)
    from the two smem descriptors into a tensor-memory accumulator. The accumulator is double-buffered in TMEM
    (2 x 256 columns = all 512), so the next tile's MMAs run while the epilogue drains the last.
    tcgen05.commit hands smem slots back to the loader and finished accumulators to the epilogue.
  * warps 0-3, epilogue: warp w owns TMEM lanes 32w..32w+31 (rows of the tile). Per 128 x 32
    piece: tcgen05.ld -> registers -> bf16 -> swizzled smem -> TMA store issued by warp 0, with
    EPI_STAGES pieces in flight. The TMEM buffer is released to the MMA warp after the last piece.
  * Warp 0 allocates the 512 TMEM columns at start and frees them at the end.
  * tcgen05 ordering follows arch_docs/b200/contracts.md: every wait that precedes tcgen05 work is
    followed by tcgen05.fence::after_thread_sync, every hand-off of TMEM is preceded by
    tcgen05.wait::ld and tcgen05.fence::before_thread_sync (the fences emit no SASS; they order).
Single-CTA MMA (no 2-CTA pairs, no clusters / multicast): see NOTES_cutedsl.md for what is left.
"""

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

BM, BN, BK = 128, 256, 64
STAGES = 4                      # 4 x 48 KiB operand slots
ACC_STAGES = 2                  # TMEM accumulators (2 x 256 fp32 columns)
TMEM_COLS = 512
EPI_M, EPI_N = 128, 32
EPI_STAGES = 4
GROUP_M = 8
EPI_WARPS = 4                   # warps 0..3 (warp w may touch TMEM lanes 32w..32w+31)
MMA_WARP, LOAD_WARP = 4, 5
THREADS = 32 * 6
AB = cutlass.BFloat16
ACC = cutlass.Float32
OUT = cutlass.BFloat16
B200_SMS = 148


@cute.jit
def _fence_after_sync():
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.AFTER_THREAD_SYNC)


@cute.jit
def _fence_before_sync():
    nvvm.tcgen05_fence(nvvm.Tcgen05FenceKind.BEFORE_THREAD_SYNC)


@cute.jit
def _tile_of(t, m_tiles, n_tiles):
    """Linear work index -> (tile_m, tile_n), grouped along M for L2 reuse."""
    span = GROUP_M * n_tiles
    group = t // span
    first = group * GROUP_M
    rows = cutlass.min(m_tiles - first, GROUP_M)
    r = t - group * span
    return first + r % rows, r // rows


@cute.kernel
def _gemm_kernel(
    mma: cute.TiledMma,
    tma_a: cute.CopyAtom,
    tA: cute.Tensor,
    tma_b: cute.CopyAtom,
    tB: cute.Tensor,
    tma_c: cute.CopyAtom,
    tC: cute.Tensor,
    a_lay: cute.ComposedLayout,
    b_lay: cute.ComposedLayout,
    c_lay: cute.ComposedLayout,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    cta, _, _ = cute.arch.block_idx()
    n_cta, _, _ = cute.arch.grid_dim()

    if warp_id == LOAD_WARP:
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_b)
        cpasync.prefetch_descriptor(tma_c)

    smem = cutlass.utils.SmemAllocator()
    ab_bars = smem.allocate_array(cutlass.Int64, 2 * STAGES, byte_alignment=8)
    acc_bars = smem.allocate_array(cutlass.Int64, 2 * ACC_STAGES, byte_alignment=8)
    tmem_slot = smem.allocate_array(cutlass.Int32, 1, byte_alignment=8)
    sA = smem.allocate_tensor(AB, a_lay.outer, byte_alignment=1024, swizzle=a_lay.inner)
    sB = smem.allocate_tensor(AB, b_lay.outer, byte_alignment=1024, swizzle=b_lay.inner)
    sC = smem.allocate_tensor(OUT, c_lay.outer, byte_alignment=1024, swizzle=c_lay.inner)

    slot_bytes = cute.size_in_bytes(AB, cute.select(a_lay, mode=[0, 1, 2])) + cute.size_in_bytes(
        AB, cute.select(b_lay, mode=[0, 1, 2])
    )
    ring = pipeline.PipelineTmaUmma.create(
        num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        tx_count=slot_bytes,
        barrier_storage=ab_bars,
    )
    # accumulator hand-off: full = tcgen05.commit of the MMA warp, empty = one arrive per epilogue warp
    accs = pipeline.PipelineUmmaAsync.create(
        num_stages=ACC_STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, EPI_WARPS),
        barrier_storage=acc_bars,
    )
    tmem_sync = pipeline.NamedBarrier(barrier_id=1, num_threads=32 * (EPI_WARPS + 1))
    epi_sync = pipeline.NamedBarrier(barrier_id=2, num_threads=32 * EPI_WARPS)
    tmem = cutlass.memory.TmemAllocator(tmem_slot, barrier_for_retrieve=tmem_sync, allocator_warp_id=0)

    gA = cute.local_tile(tA, (BM, BK), (None, None))   # (BM, BK, m_tiles, k_tiles)
    gB = cute.local_tile(tB, (BN, BK), (None, None))   # (BN, BK, n_tiles, k_tiles)
    gC = cute.local_tile(tC, (BM, BN), (None, None))   # (BM, BN, m_tiles, n_tiles)
    m_tiles = cute.size(gA, mode=[2])
    n_tiles = cute.size(gB, mode=[2])
    k_tiles = cute.size(gA, mode=[3])
    n_work = m_tiles * n_tiles

    cta_mma = mma.get_slice(0)          # a 1-CTA tcgen05 MMA is issued for the whole tile
    fA = mma.make_fragment_A(sA)        # smem descriptors (MMA, MMA_M, MMA_K, stage)
    fB = mma.make_fragment_B(sB)
    k_blocks = cute.size(fA, mode=[2])
    acc_layout = mma.make_fragment_C(cute.append(mma.partition_shape_C((BM, BN)), ACC_STAGES)).layout

    if warp_id == LOAD_WARP:
        # ------------------------------------------------------------------ TMA loader
        a_dst, a_src = cpasync.tma_partition(
            tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
            cute.group_modes(cta_mma.partition_A(gA), 0, 3),
        )
        b_dst, b_src = cpasync.tma_partition(
            tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
            cute.group_modes(cta_mma.partition_B(gB), 0, 3),
        )
        put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, STAGES)
        for t in cutlass.range(cta, n_work, n_cta, unroll=1):
            tm, tn = _tile_of(t, m_tiles, n_tiles)
            for kt in cutlass.range(k_tiles, unroll=1):
                ring.producer_acquire(put)
                full = ring.producer_get_barrier(put)
                cute.copy(tma_a, a_src[(None, tm, kt)], a_dst[(None, put.index)], tma_bar_ptr=full)
                cute.copy(tma_b, b_src[(None, tn, kt)], b_dst[(None, put.index)], tma_bar_ptr=full)
                put.advance()
        ring.producer_tail(put)

    if warp_id == MMA_WARP:
        # ------------------------------------------------------------------ tcgen05 issuer
        tmem.wait_for_alloc()
        _fence_after_sync()
        acc_all = cute.make_tensor(tmem.retrieve_ptr(ACC), acc_layout)
        get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        out = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, ACC_STAGES)
        for t in cutlass.range(cta, n_work, n_cta, unroll=1):
            acc = acc_all[(None, None, None, out.index)]
            accs.producer_acquire(out)              # epilogue has drained this TMEM buffer
            _fence_after_sync()
            mma.set(tcgen05.Field.ACCUMULATE, False)
            for kt in cutlass.range(k_tiles, unroll=1):
                ring.consumer_wait(get)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(mma, acc, fA[(None, None, kb, get.index)], fB[(None, None, kb, get.index)], acc)
                    mma.set(tcgen05.Field.ACCUMULATE, True)
                ring.consumer_release(get)          # tcgen05.commit -> slot empty
                get.advance()
            accs.producer_commit(out)               # tcgen05.commit -> accumulator full
            out.advance()
        accs.producer_tail(out)

    if warp_id < EPI_WARPS:
        # ------------------------------------------------------------------ epilogue
        tmem.allocate(TMEM_COLS)
        _fence_before_sync()
        tmem.wait_for_alloc()
        _fence_after_sync()
        acc_ptr = tmem.retrieve_ptr(ACC)
        acc_all = cute.make_tensor(acc_ptr, acc_layout)

        # TMEM -> registers: 32 lanes x 32 columns per warp per piece
        t2r_atom = sm100_utils.get_tmem_load_op(
            (BM, BN, BK), LayoutEnum.ROW_MAJOR, OUT, ACC, (EPI_M, EPI_N), False
        )
        acc_pieces = cute.flat_divide(acc_all[((None, None), 0, 0, None)], (EPI_M, EPI_N))  # (EM, EN, 1, P, S)
        t2r = tcgen05.make_tmem_copy(t2r_atom, acc_pieces[(None, None, 0, 0, 0)])
        thr_t2r = t2r.get_slice(tidx)
        t_src = thr_t2r.partition_S(acc_pieces)       # (T2R, T2R_M, T2R_N, 1, P, S)
        c_pieces_shape = cute.flat_divide(gC[(None, None, 0, 0)], (EPI_M, EPI_N))
        r_acc = cute.make_rmem_tensor(thr_t2r.partition_D(c_pieces_shape)[(None, None, None, 0, 0)].shape, ACC)
        r_out = cute.make_rmem_tensor(r_acc.shape, OUT)
        # registers -> swizzled smem
        r2s = cute.make_tiled_copy_D(sm100_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, OUT, ACC, t2r), t2r)
        s_dst = r2s.get_slice(tidx).partition_D(sC)   # (R2S, R2S_M, R2S_N, EPI_STAGES)
        r_src = r2s.retile(r_out)
        pieces = BN // EPI_N
        stores = pipeline.PipelineTmaStore.create(
            num_stages=EPI_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32 * EPI_WARPS),
        )

        take = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, ACC_STAGES)
        done = cutlass.Int32(0)
        for t in cutlass.range(cta, n_work, n_cta, unroll=1):
            tm, tn = _tile_of(t, m_tiles, n_tiles)
            c_tile = cute.flat_divide(gC[(None, None, tm, tn)], (EPI_M, EPI_N))   # (EM, EN, 1, P)
            s_part, g_part = cpasync.tma_partition(
                tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), cute.group_modes(c_tile, 0, 2)
            )
            accs.consumer_wait(take)
            _fence_after_sync()
            for p in cutlass.range_constexpr(pieces):
                cute.copy(t2r, t_src[(None, None, None, 0, p, take.index)], r_acc)   # tcgen05.ld
                r_out.store(r_acc.load().to(OUT))
                buf = (done * pieces + p) % EPI_STAGES
                cute.copy(r2s, r_src, s_dst[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")
                epi_sync.arrive_and_wait()
                if warp_id == 0:
                    cute.copy(tma_c, s_part[(None, buf)], g_part[(None, 0, p)])
                    stores.producer_commit()
                    stores.producer_acquire()
                epi_sync.arrive_and_wait()
            cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: this warp's loads are done
            _fence_before_sync()
            with cute.arch.elect_one():
                accs.consumer_release(take)        # TMEM buffer may be overwritten
            take.advance()
            done += 1
        stores.producer_tail()
        _fence_before_sync()
        epi_sync.arrive_and_wait()
        if warp_id == 0:
            _fence_after_sync()
            tmem.relinquish_alloc_permit()
            tmem.free(acc_ptr)


@cute.jit
def _gemm_host(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, n_cta: cutlass.Int32, stream: cuda_driver.CUstream):
    mma = sm100_utils.make_trivial_tiled_mma(
        AB, AB, OperandMajorMode.K, OperandMajorMode.K, ACC, tcgen05.CtaGroup.ONE, (BM, BN)
    )
    tiler = (BM, BN, BK)
    a_lay = sm100_utils.make_smem_layout_a(mma, tiler, AB, STAGES)
    b_lay = sm100_utils.make_smem_layout_b(mma, tiler, AB, STAGES)
    c_lay = sm100_utils.make_smem_layout_epi(OUT, LayoutEnum.ROW_MAJOR, (EPI_M, EPI_N), EPI_STAGES)

    load = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    tma_a, tA = cute.nvgpu.make_tiled_tma_atom_A(load, a, cute.select(a_lay, mode=[0, 1, 2]), tiler, mma)
    tma_b, tB = cute.nvgpu.make_tiled_tma_atom_B(load, b, cute.select(b_lay, mode=[0, 1, 2]), tiler, mma)
    tma_c, tC = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(c_lay, (None, None, 0)), (EPI_M, EPI_N)
    )
    _gemm_kernel(mma, tma_a, tA, tma_b, tB, tma_c, tC, a_lay, b_lay, c_lay).launch(
        grid=(n_cta, 1, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream
    )


def _wrap(t):
    return (
        from_dlpack(t, assumed_align=16)
        .mark_layout_dynamic(leading_dim=1)
        .mark_compact_shape_dynamic(mode=1, stride_order=(0, 1), divisibility=8)
    )


_compiled = {}
_sms = {}


def _sm_count(t):
    if not t.is_cuda:
        return B200_SMS
    dev = t.device.index or 0
    if dev not in _sms:
        import torch

        _sms[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    return _sms[dev]


def xlang_entry(A, B, C, M, N, K):
    a, b, c = _wrap(A), _wrap(B), _wrap(C)
    tiles = ((M + BM - 1) // BM) * ((N + BN - 1) // BN)
    n_cta = max(1, min(tiles, _sm_count(A)))
    fn = _compiled.get("gemm")
    if fn is None:
        fn = cute.compile(_gemm_host, a, b, c, cutlass.Int32(n_cta), make_fake_stream())
        _compiled["gemm"] = fn
    stream = None
    if A.is_cuda:
        import torch

        stream = cuda_driver.CUstream(torch.cuda.current_stream(A.device).cuda_stream)
    fn(a, b, c, cutlass.Int32(n_cta), stream)
