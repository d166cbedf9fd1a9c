"""Expert Blackwell (sm_100a) kernel in CuTe DSL for `gemm_nvfp4`: C = (a(A) * SA) @ (b(B) * SB)^T, NVFP4.
A [M, K/2], B [N, K/2] bytes of two e2m1 codes each (element 2j in the low nibble of byte j); SA [M, K/16], SB
[N, K/16] e4m3 scales, one per 16 elements of K, row-major; C [M, N] bf16.

NEVER RUN ON A GPU (no B200 in this workplace): it builds for sm_100a, and its SASS has the block-scaled UTCQMMA
(kind::mxf4nvf4.block_scale.scale_vec::4X, the scale factors' tensor-memory operands after the instruction
descriptor), UTCCP (tcgen05.cp) and UTMALDG (tests/test_experts_static.py). Its scale handling has a CPU model
(tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py). Correctness on hardware and speed are unmeasured.

Design: the MXFP8 CuTe DSL expert (tasks/gemm_mxfp8/solutions/cutedsl_blackwell.py) with NVFP4 operands and scales;
one CTA per SM, persistent, 10 warps.
  * warp 5, loader: TMA-loads A (128 rows x 128 e2m1 = 64 bytes) and B per K step into a STAGES-deep ring. The
    packed bytes are handed to CuTe as a Float4E2M1FN tensor [rows, K] (the same memory: the task's packing, lower
    K element in the low nibble, is the order the tensor core reads 4-bit elements in). TMA zero-fills past M, N.
  * warps 6-9, scale loaders (K step g by warp 6 + g % 4): one K step has 8 e4m3 scales per row, two aligned
    4-byte words of SA's row (K/16 is a multiple of 8): word 2 kt + c holds the 4 scales of the step's MMA c
    (K = 64 each). The MMA wants each MMA's scales as a 512-byte chunk (CuTe's BlockScaledBasicChunk for 16-element
    blocks: 128 rows x 4 scales, row m at byte 16 (m % 32) + 4 (m // 32), scale e at + e), chunk c of a stage at
    + 512 c (tasks/gemm_nvfp4/verify/cutedsl_blackwell_emulate.py checks the expert's layouts say so). Lane l
    copies rows l + 32 j (j < 4): their word c goes to word 4 l + j of chunk c; then fence.proxy.async and one
    arrive per lane (PipelineAsyncUmma: full = 32 arrives, empty = tcgen05.commit). Rows past M or N read row
    M - 1 / N - 1: A and B are zero there and C is clipped.
  * warp 4, MMA issuer: per K step, wait on both rings, tcgen05.cp (.32x128b.warpx4) of the SFA and SFB chunks into
    this stage's own tensor-memory columns, then two tcgen05.mma kind::mxf4nvf4.block_scale.scale_vec::4X
    128x128x64 into a double-buffered TMEM accumulator, then tcgen05.commit to both rings' empty barriers. Per-stage
    scale columns: as in the MXFP8 expert (the PTX ISA orders tcgen05.cp -> tcgen05.mma in issue order, not
    tcgen05.mma -> tcgen05.cp, so a stage's columns are rewritten only after the commit that frees the stage).
  * warps 0-3, epilogue (the bf16 expert's): tcgen05.ld -> bf16 -> swizzled smem -> TMA store clipped at M and N.
Single-CTA MMA, no clusters / multicast, BN = 128, BK = 128 (K need only be a multiple of 128; a 64-byte row is
TMA's 64-byte swizzle). Unmeasured: see tasks/gemm_nvfp4/NOTES_cutedsl.md.
"""

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.blockscaled_layout as blockscaled_utils
from cuda.bindings import driver as cuda_driver
from cutlass._mlir.dialects import nvvm
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

BM, BN, BK = 128, 128, 128     # BK in e2m1 elements: 64 bytes per row and K step
SF_VEC = 16                     # elements per e4m3 scale (NVFP4)
MMA_K = 64                      # K of one tcgen05.mma kind::mxf4nvf4: 4 scales per row
MMAS = BK // MMA_K              # MMAs (and scale chunks per operand) per K step
STAGES = 6                      # 6 x (16 KiB operands + 2 KiB scales); unmeasured choice
ACC_STAGES = 2                  # TMEM accumulators (2 x 128 fp32 columns)
SF_COL0 = ACC_STAGES * BN       # first TMEM column of the scales
SFA_COLS, SFB_COLS = MMAS * BM // 32, MMAS * BN // 32   # 8 + 8 columns per stage (4 per MMA and operand)
SF_STAGE_COLS = SFA_COLS + SFB_COLS
CHUNK_WORDS = 128               # one 512-byte scale chunk: 128 rows x 4 e4m3 scales
TMEM_COLS = 512                 # a power of two >= 256 + 6 x 16
EPI_M, EPI_N = 128, 32
EPI_STAGES = 4
GROUP_M = 8
EPI_WARPS = 4                   # warps 0..3 (warp w may touch TMEM lanes 32w..32w+31)
MMA_WARP, LOAD_WARP, SCALE_WARP0 = 4, 5, 6
SCALE_WARPS = 4                 # warps 6..9: scale warp w fills the chunks of the K steps g with g % 4 == w
THREADS = 32 * (SCALE_WARP0 + SCALE_WARPS)
AB = cutlass.Float4E2M1FN
SF = cutlass.Float8E4M3FN
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


def _chunk_row(lane, j):
    """The tile row whose scale word lane `lane` copies as its j-th (j < 4)."""
    return lane + 32 * j


def _chunk_word(lane, j, c):
    """Where (in words of the stage's chunks) that row's word for MMA c goes: chunk c, row m at byte
    16 (m % 32) + 4 (m // 32)."""
    return CHUNK_WORDS * c + 4 * lane + j


def _source_word(kt, c):
    """The word of a scale row (4 e4m3 scales) that MMA c of K step kt reads."""
    return MMAS * kt + c


@cute.jit
def _scale_chunks(words_in: cute.Tensor, rows: cutlass.Int32, tile: cutlass.Int32, kt: cutlass.Int32,
                  chunks: cute.Tensor, lane: cutlass.Int32):
    """Lane `lane`'s part of one stage's scale chunks of an operand: the K step's words of rows lane + 32 j (j < 4)
    of the tile, MMA c's word into word 4 lane + j of chunk c. Rows past the end read the last row."""
    for j in cutlass.range_constexpr(4):
        row = cutlass.min(tile * 128 + _chunk_row(lane, j), rows - 1)
        for c in cutlass.range_constexpr(MMAS):
            chunks[_chunk_word(lane, j, c)] = words_in[(row, _source_word(kt, c))]


@cute.kernel
def _nvfp4_gemm_kernel(
    mma: cute.TiledMma,
    tma_a: cute.CopyAtom,
    tA: cute.Tensor,
    tma_b: cute.CopyAtom,
    tB: cute.Tensor,
    tma_c: cute.CopyAtom,
    tC: cute.Tensor,
    sa_words: cute.Tensor,
    sb_words: cute.Tensor,
    a_lay: cute.ComposedLayout,
    b_lay: cute.ComposedLayout,
    sfa_lay: cute.Layout,
    sfb_lay: cute.Layout,
    c_lay: cute.ComposedLayout,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    lane = tidx % 32
    cta, _, _ = cute.arch.block_idx()
    n_cta, _, _ = cute.arch.grid_dim()

    if warp_id == LOAD_WARP:
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_b)
        cpasync.prefetch_descriptor(tma_c)

    smem = cutlass.utils.SmemAllocator()
    ab_bars = smem.allocate_array(cutlass.Int64, 2 * STAGES, byte_alignment=8)
    sf_bars = smem.allocate_array(cutlass.Int64, 2 * STAGES, byte_alignment=8)
    acc_bars = smem.allocate_array(cutlass.Int64, 2 * ACC_STAGES, byte_alignment=8)
    tmem_slot = smem.allocate_array(cutlass.Int32, 1, byte_alignment=8)
    sA = smem.allocate_tensor(AB, a_lay.outer, byte_alignment=1024, swizzle=a_lay.inner)
    sB = smem.allocate_tensor(AB, b_lay.outer, byte_alignment=1024, swizzle=b_lay.inner)
    sSFA = smem.allocate_tensor(SF, sfa_lay, byte_alignment=1024)
    sSFB = smem.allocate_tensor(SF, sfb_lay, byte_alignment=1024)
    sC = smem.allocate_tensor(OUT, c_lay.outer, byte_alignment=1024, swizzle=c_lay.inner)
    # the same scale chunks as words: stage s's chunks are words MMAS * 128 s .. (1 KiB per stage and operand)
    chunk_words = cute.make_layout((MMAS * CHUNK_WORDS, STAGES))
    sfa_words = cute.make_tensor(cute.recast_ptr(sSFA.iterator, dtype=cutlass.Int32), chunk_words)
    sfb_words = cute.make_tensor(cute.recast_ptr(sSFB.iterator, dtype=cutlass.Int32), chunk_words)

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
    # scale chunks: full = one arrive per lane of the scale warp (after its fence), empty = tcgen05.commit
    sf_ring = pipeline.PipelineAsyncUmma.create(
        num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        barrier_storage=sf_bars,
    )
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
    M = cute.size(tA, mode=[0])
    N = cute.size(tB, mode=[0])

    cta_mma = mma.get_slice(0)
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

    if warp_id >= SCALE_WARP0:
        # ------------------------------------------------------------------ scale loaders
        # Every scale warp walks all K steps (its ring state follows each one) and fills those with
        # g % SCALE_WARPS == its number: a warp's loads of one step wait a global-memory round trip, and four warps
        # keep four steps' loads in flight.
        mine = warp_id - SCALE_WARP0
        put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, STAGES)
        g = cutlass.Int32(0)
        for t in cutlass.range(cta, n_work, n_cta, unroll=1):
            tm, tn = _tile_of(t, m_tiles, n_tiles)
            for kt in cutlass.range(k_tiles, unroll=1):
                if g % SCALE_WARPS == mine:
                    sf_ring.producer_acquire(put)
                    _scale_chunks(sa_words, M, tm, kt, sfa_words[(None, put.index)], lane)
                    _scale_chunks(sb_words, N, tn, kt, sfb_words[(None, put.index)], lane)
                    cute.arch.fence_proxy("async.shared", space="cta")   # generic-proxy stores -> tcgen05.cp
                    sf_ring.producer_commit(put)
                put.advance()
                g += 1
        sf_ring.producer_tail(put)

    if warp_id == MMA_WARP:
        # ------------------------------------------------------------------ tcgen05 issuer
        tmem.wait_for_alloc()
        _fence_after_sync()
        acc_ptr = tmem.retrieve_ptr(ACC)
        acc_all = cute.make_tensor(acc_ptr, acc_layout)
        tsfa_lay = blockscaled_utils.make_tmem_layout_sfa(mma, (BM, BN, BK), SF_VEC, cute.slice_(sfa_lay, (None, None, None, 0)))
        tsfb_lay = blockscaled_utils.make_tmem_layout_sfb(mma, (BM, BN, BK), SF_VEC, cute.slice_(sfb_lay, (None, None, None, 0)))
        s2t_atom = cute.make_copy_atom(tcgen05.Cp4x32x128bOp(tcgen05.CtaGroup.ONE), SF)
        # the copies' shapes from stage 0's columns; each stage's columns are the same layout shifted
        tsfa0 = cute.make_tensor(cute.recast_ptr(acc_ptr + SF_COL0, dtype=SF), tsfa_lay)
        tsfb0 = cute.make_tensor(cute.recast_ptr(acc_ptr + SF_COL0 + SFA_COLS, dtype=SF), tsfb_lay)
        s2t_a = tcgen05.make_s2t_copy(s2t_atom, cute.filter_zeros(tsfa0))
        s2t_b = tcgen05.make_s2t_copy(s2t_atom, cute.filter_zeros(tsfb0))
        sfa_src = tcgen05.get_s2t_smem_desc_tensor(s2t_a, s2t_a.get_slice(0).partition_S(cute.filter_zeros(sSFA)))
        sfb_src = tcgen05.get_s2t_smem_desc_tensor(s2t_b, s2t_b.get_slice(0).partition_S(cute.filter_zeros(sSFB)))
        sfa_dst0 = s2t_a.get_slice(0).partition_D(cute.filter_zeros(tsfa0))
        sfb_dst0 = s2t_b.get_slice(0).partition_D(cute.filter_zeros(tsfb0))

        get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        out = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, ACC_STAGES)
        for t in cutlass.range(cta, n_work, n_cta, unroll=1):
            acc = acc_all[(None, None, None, out.index)]
            accs.producer_acquire(out)              # epilogue has drained this TMEM buffer
            _fence_after_sync()
            mma.set(tcgen05.Field.ACCUMULATE, False)
            for kt in cutlass.range(k_tiles, unroll=1):
                ring.consumer_wait(get)
                sf_ring.consumer_wait(get)
                _fence_after_sync()
                sf_cols = acc_ptr + SF_COL0 + get.index * SF_STAGE_COLS
                tsfa = cute.make_tensor(cute.recast_ptr(sf_cols, dtype=SF), tsfa_lay)
                tsfb = cute.make_tensor(cute.recast_ptr(sf_cols + SFA_COLS, dtype=SF), tsfb_lay)
                cute.copy(s2t_a, sfa_src[(None, None, None, None, get.index)],
                          cute.make_tensor(cute.recast_ptr(sf_cols, dtype=SF), sfa_dst0.layout))
                cute.copy(s2t_b, sfb_src[(None, None, None, None, get.index)],
                          cute.make_tensor(cute.recast_ptr(sf_cols + SFA_COLS, dtype=SF), sfb_dst0.layout))
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(mma, acc, [fA[(None, None, kb, get.index)], tsfa[(None, None, kb)]],
                              [fB[(None, None, kb, get.index)], tsfb[(None, None, kb)]], acc)
                    mma.set(tcgen05.Field.ACCUMULATE, True)
                ring.consumer_release(get)          # tcgen05.commit -> operand slot empty
                sf_ring.consumer_release(get)       # tcgen05.commit -> scale chunk and its columns free
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


def _as_e2m1(packed: cute.Tensor):
    """A packed u8 [rows, K/2] tensor as the e2m1 tensor [rows, K] it holds (same memory, K contiguous)."""
    k = cute.size(packed, mode=[1]) * 2
    return cute.make_tensor(cute.recast_ptr(packed.iterator, dtype=AB),
                            cute.make_layout((cute.size(packed, mode=[0]), k), stride=(k, 1)))


@cute.jit
def _nvfp4_gemm_host(a_packed: cute.Tensor, sa: cute.Tensor, b_packed: cute.Tensor, sb: cute.Tensor, c: cute.Tensor,
                     n_cta: cutlass.Int32, stream: cuda_driver.CUstream):
    a, b = _as_e2m1(a_packed), _as_e2m1(b_packed)
    mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
        AB, AB, OperandMajorMode.K, OperandMajorMode.K, SF, SF_VEC, tcgen05.CtaGroup.ONE, (BM, BN)
    )
    tiler = (BM, BN, BK)
    a_lay = sm100_utils.make_smem_layout_a(mma, tiler, AB, STAGES)
    b_lay = sm100_utils.make_smem_layout_b(mma, tiler, AB, STAGES)
    sfa_lay = blockscaled_utils.make_smem_layout_sfa(mma, tiler, SF_VEC, STAGES)
    sfb_lay = blockscaled_utils.make_smem_layout_sfb(mma, tiler, SF_VEC, STAGES)
    c_lay = sm100_utils.make_smem_layout_epi(OUT, LayoutEnum.ROW_MAJOR, (EPI_M, EPI_N), EPI_STAGES)

    load = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    tma_a, tA = cute.nvgpu.make_tiled_tma_atom_A(load, a, cute.select(a_lay, mode=[0, 1, 2]), tiler, mma)
    tma_b, tB = cute.nvgpu.make_tiled_tma_atom_B(load, b, cute.select(b_lay, mode=[0, 1, 2]), tiler, mma)
    tma_c, tC = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(c_lay, (None, None, 0)), (EPI_M, EPI_N)
    )
    # SA [M, K/16] and SB [N, K/16] bytes read as [rows, K/64] words: one word = the 4 scales of one MMA's K = 64
    words = cute.size(sa, mode=[1]) // 4
    sa_words = cute.make_tensor(cute.recast_ptr(sa.iterator, dtype=cutlass.Int32),
                                cute.make_layout((cute.size(sa, mode=[0]), words), stride=(words, 1)))
    sb_words = cute.make_tensor(cute.recast_ptr(sb.iterator, dtype=cutlass.Int32),
                                cute.make_layout((cute.size(sb, mode=[0]), words), stride=(words, 1)))
    _nvfp4_gemm_kernel(mma, tma_a, tA, tma_b, tB, tma_c, tC, sa_words, sb_words,
                       a_lay, b_lay, sfa_lay, sfb_lay, c_lay).launch(
        grid=(n_cta, 1, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream
    )


def _wrap(t, divisibility):
    return (
        from_dlpack(t, assumed_align=16)
        .mark_layout_dynamic(leading_dim=1)
        .mark_compact_shape_dynamic(mode=1, stride_order=(0, 1), divisibility=divisibility)
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


def xlang_entry(A, SA, B, SB, C, M, N, K):
    assert K % BK == 0, "K must be a multiple of 128 (two 64-wide MMAs, eight 16-element scale blocks per K step)"
    # row lengths: K/2 bytes (64 | K/2), K/16 scale bytes (8 | K/16: whole word pairs), N bf16 (8 | N)
    a, b, c = _wrap(A, 64), _wrap(B, 64), _wrap(C, 8)
    sa, sb = _wrap(SA, 8), _wrap(SB, 8)
    tiles = ((M + BM - 1) // BM) * ((N + BN - 1) // BN)
    n_cta = max(1, min(tiles, _sm_count(A)))
    fn = _compiled.get("gemm")
    if fn is None:
        fn = cute.compile(_nvfp4_gemm_host, a, sa, b, sb, c, cutlass.Int32(n_cta), make_fake_stream())
        _compiled["gemm"] = fn
    stream = None
    if A.is_cuda:
        import torch

        stream = cuda_driver.CUstream(torch.cuda.current_stream(A.device).cuda_stream)
    fn(a, sa, b, sb, c, cutlass.Int32(n_cta), stream)
