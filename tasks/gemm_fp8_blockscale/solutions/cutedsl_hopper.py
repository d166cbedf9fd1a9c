"""Expert Hopper (sm_90a) kernel in CuTe DSL for `gemm_fp8_blockscale`: DeepGEMM's 1d2d block-scaled fp8 GEMM,
    C[m, n] = sum_k (A[m, k] * SA[m, k // 128]) * (B[n, k] * SB[n // 128, k // 128]),  C bf16, fp32 accumulation.
A [M, K], B [N, K] fp8 e4m3 (K contiguous), SA [M, K/128], SB [ceil(N/128), K/128] fp32 row-major, C [M, N] bf16.

NEVER RUN ON A GPU (no device this session): it builds for sm_90a with QGMMA (wgmma .e4m3) and UTMALDG in its
SASS (tests/test_experts_static.py); its scale handling has a CPU model (tasks/gemm_fp8_blockscale/verify/
cutedsl_hopper_emulate.py). Run-time correctness, memcheck and speed are unmeasured (NOTES_cutedsl.md).

Design (the bf16 expert tasks/gemm/solutions/cutedsl_hopper.py with fp8 operands and the promotion of DeepGEMM)
  * Persistent grid: min(#tiles, #SMs) CTAs walk the 128 x 128 output tiles with a fixed stride, grouped along M
    (GROUP_M tile-rows) for L2 reuse. BN = 128 = SB's row block, so a tile's columns share one SB value per K block.
  * One K step is one 128-wide scale block: 128 fp8 = 128 bytes, a single 128-byte-swizzled row of shared memory.
  * 3 warpgroups (384 threads). Warpgroup 0, the producer (setmaxnreg 40): one warp TMA-loads A (128 x 128) and
    B (128 x 128) into a STAGES-deep ring (full mbarrier = TMA bytes, empty mbarrier = one arrive per consumer warp).
    TMA zero-fills rows past M and N.
  * Warpgroups 1 and 2, the consumers (setmaxnreg 232), own 64 rows each. Per K block: four wgmma 64x128x32 e4m3
    (fp8 wgmma needs both operands K-major in shared memory, as A and B are) into a fresh register accumulator
    `part` (ACCUMULATE off for the first), wait for them, hand the slot back, then acc += part * SA[row, kb] *
    SB[tn, kb] on the CUDA cores. Promoting every 128-long partial sum into an fp32 accumulator is what the
    per-block scales need, and it also bounds the run of the tensor core's own fp8 accumulation, which keeps
    fewer bits than fp32 (DeepSeek-V3 report; DeepGEMM promotes at this interval).
  * The scales are read with plain loads (a column of SA is 4 bytes wide: no TMA box), one K block ahead, so
    their latency hides behind the previous block's wgmma. A thread's accumulator registers cover two rows of the
    tile (PTX ISA, wgmma register fragment of D: thread t, warp w = t // 32 of its warpgroup, lane l: rows
    16 w + l // 4 and that + 8; register i is on the second row when (i // 2) is odd: _first_row, _on_second_row),
    so each thread loads two SA values and one SB value per K block. Rows past M read row M - 1 (A's rows there are
    zero and C's are clipped).
  * Epilogue as the bf16 expert: registers -> bf16 -> stmatrix into swizzled shared memory in 128 x 32 pieces, one
    warp TMA-stores each piece; the TMA store clips at M and N.
Not done (unmeasured either way): a second partial accumulator so the next K block's wgmma runs during the
promotion (DeepGEMM relies on the other consumer warpgroup instead), clusters / TMA multicast.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cuda.bindings import driver as cuda_driver
from cutlass.cute.nvgpu import cpasync, warp, warpgroup
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

BM, BN, BK = 128, 128, 128      # BK: the scale block (SA per 1 x 128, SB per 128 x 128)
STAGES = 5                      # 5 x 32 KiB operand slots + 32 KiB epilogue pieces
EPI_M, EPI_N = 128, 32          # epilogue piece (8 KiB of bf16)
EPI_STAGES = 4
GROUP_M = 8                     # tile-rows per L2 group
WG_THREADS = 128
THREADS = 3 * WG_THREADS
CONSUMER_THREADS = 2 * WG_THREADS
PRODUCER_REGS, CONSUMER_REGS = 40, 232
AB = cutlass.Float8E4M3FN
ACC = cutlass.Float32
OUT = cutlass.BFloat16
H100_SMS = 132


@cute.jit
def _tile_of(t, m_tiles, n_tiles):
    """Linear work index -> (tile_m, tile_n), grouped along M for L2 reuse."""
    span = GROUP_M * n_tiles
    group = t // span
    first = group * GROUP_M
    rows = cutlass.min(m_tiles - first, GROUP_M)
    r = t - group * span
    return first + r % rows, r // rows


def _first_row(tidx):
    """The first of consumer thread tidx's two tile rows (PTX ISA wgmma D fragment): 64 per consumer warpgroup
    (warpgroups 1, 2), 16 per warp, lane // 4; its second row is 8 below."""
    return (tidx // WG_THREADS - 1) * 64 + ((tidx // 32) % 4) * 16 + (tidx % 32) // 4


def _on_second_row(i):
    """Whether accumulator register i of a thread lies on its second row."""
    return (i // 2) % 2 == 1


@cute.kernel
def _fp8_gemm_kernel(
    mma: cute.TiledMma,
    tma_a: cute.CopyAtom,
    tA: cute.Tensor,
    tma_b: cute.CopyAtom,
    tB: cute.Tensor,
    tma_c: cute.CopyAtom,
    tC: cute.Tensor,
    mSA: cute.Tensor,
    mSB: cute.Tensor,
    a_lay: cute.ComposedLayout,
    b_lay: cute.ComposedLayout,
    c_lay: cute.ComposedLayout,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    wg = warp_id // 4
    cta, _, _ = cute.arch.block_idx()
    n_cta, _, _ = cute.arch.grid_dim()

    if warp_id == 0:
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_b)
        cpasync.prefetch_descriptor(tma_c)

    smem = cutlass.utils.SmemAllocator()
    bars = smem.allocate_array(cutlass.Int64, 2 * STAGES, byte_alignment=8)
    sA = smem.allocate_tensor(AB, a_lay.outer, byte_alignment=1024, swizzle=a_lay.inner)
    sB = smem.allocate_tensor(AB, b_lay.outer, byte_alignment=1024, swizzle=b_lay.inner)
    sC = smem.allocate_tensor(OUT, c_lay.outer, byte_alignment=1024, swizzle=c_lay.inner)

    slot_bytes = cute.size_in_bytes(AB, cute.slice_(a_lay, (None, None, 0))) + cute.size_in_bytes(
        AB, cute.slice_(b_lay, (None, None, 0))
    )
    ring = pipeline.PipelineTmaAsync.create(
        num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS // 32),
        tx_count=slot_bytes,
        barrier_storage=bars,
    )

    gA = cute.local_tile(tA, (BM, BK), (None, None))   # (BM, BK, m_tiles, k_tiles)
    gB = cute.local_tile(tB, (BN, BK), (None, None))   # (BN, BK, n_tiles, k_tiles)
    gC = cute.local_tile(tC, (BM, BN), (None, None))   # (BM, BN, m_tiles, n_tiles)
    m_tiles = cute.size(gA, mode=[2])
    n_tiles = cute.size(gB, mode=[2])
    k_tiles = cute.size(gA, mode=[3])
    n_work = m_tiles * n_tiles
    M = cute.size(tA, mode=[0])

    if wg == 0:
        # ------------------------------------------------------------------ producer
        cute.arch.setmaxregister_decrease(PRODUCER_REGS)
        if warp_id == 0:
            a_dst, a_src = cpasync.tma_partition(
                tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
            )
            b_dst, b_src = cpasync.tma_partition(
                tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
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
    else:
        # ------------------------------------------------------------------ consumers
        cute.arch.setmaxregister_increase(CONSUMER_REGS)
        ctid = tidx - WG_THREADS
        wg_mma = mma.get_slice((wg - 1) * WG_THREADS)
        fA = mma.make_fragment_A(wg_mma.partition_A(sA))   # smem descriptors (.., kb, stage)
        fB = mma.make_fragment_B(wg_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(wg_mma.partition_C(gC[(None, None, 0, 0)]).shape, ACC)
        part = cute.make_rmem_tensor(acc.shape, ACC)     # one K block's wgmma result, before its scales
        k_blocks = cute.size(fA, mode=[2])
        acc_len = cute.size(acc)
        row_in_tile = _first_row(tidx)                     # and row_in_tile + 8

        # Epilogue plumbing: registers -> smem with stmatrix, smem -> gmem with TMA.
        r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, OUT, ACC)
        stm_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), OUT)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm_atom, mma))
        thr_r2s = r2s.get_slice(ctid)
        r2s_dst = thr_r2s.partition_D(sC)                 # (R2S, R2S_M, R2S_N, EPI_STAGES)
        acc_view = r2s.retile(acc)
        piece_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
        piece_f32 = cute.make_rmem_tensor(piece_shape, ACC)
        piece_out = cute.make_rmem_tensor(piece_shape, OUT)
        piece_len = cute.size(piece_f32)
        pieces = (BM // EPI_M) * (BN // EPI_N)
        epi_sync = pipeline.NamedBarrier(barrier_id=1, num_threads=CONSUMER_THREADS)
        stores = pipeline.PipelineTmaStore.create(
            num_stages=EPI_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS),
        )
        store_warp = warp_id == 4

        get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        done = cutlass.Int32(0)
        for t in cutlass.range(cta, n_work, n_cta, unroll=1):
            tm, tn = _tile_of(t, m_tiles, n_tiles)
            acc.fill(0.0)
            row0 = cutlass.min(tm * BM + row_in_tile, M - 1)      # rows past M: any real row (A is 0 there)
            row1 = cutlass.min(tm * BM + row_in_tile + 8, M - 1)
            # K block kt's scales were loaded during block kt - 1 (a global load's latency is about one block's
            # wgmma time: not measured); the last block loads its own again
            sb = mSB[(tn, 0)]
            sa0 = mSA[(row0, 0)]
            sa1 = mSA[(row1, 0)]
            for kt in cutlass.range(k_tiles, unroll=1):
                s0 = sa0 * sb
                s1 = sa1 * sb
                k_next = cutlass.min(kt + 1, k_tiles - 1)
                sb = mSB[(tn, k_next)]
                sa0 = mSA[(row0, k_next)]
                sa1 = mSA[(row1, k_next)]
                ring.consumer_wait(get)
                warpgroup.fence()
                mma.set(warpgroup.Field.ACCUMULATE, False)
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(mma, part, fA[(None, None, kb, get.index)], fB[(None, None, kb, get.index)], part)
                    mma.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.commit_group()
                warpgroup.wait_group(0)
                ring.consumer_release(get)
                get.advance()
                # promotion: each register with its row's scale
                for i in cutlass.range_constexpr(acc_len):
                    if cutlass.const_expr(_on_second_row(i)):
                        acc[i] = acc[i] + part[i] * s1
                    else:
                        acc[i] = acc[i] + part[i] * s0

            # epilogue: this tile in 128 x 32 pieces
            gC_pieces = cute.zipped_divide(gC[(None, None, tm, tn)], (EPI_M, EPI_N))
            s_part, g_part = cpasync.tma_partition(
                tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_pieces
            )
            for p in cutlass.range_constexpr(pieces):
                for v in cutlass.range_constexpr(piece_len):
                    piece_f32[v] = acc_view[p * piece_len + v]
                piece_out.store(piece_f32.load().to(OUT))
                buf = (done * pieces + p) % EPI_STAGES
                cute.copy(r2s, piece_out, r2s_dst[(None, None, None, buf)])
                cute.arch.fence_proxy("async.shared", space="cta")
                epi_sync.arrive_and_wait()
                if store_warp:
                    cute.copy(tma_c, s_part[(None, buf)], g_part[(None, (p // (BN // EPI_N), p % (BN // EPI_N)))])
                    stores.producer_commit()
                    stores.producer_acquire()
                epi_sync.arrive_and_wait()
            done += 1
        if store_warp:
            stores.producer_tail()


@cute.jit
def _fp8_gemm_host(a: cute.Tensor, sa: cute.Tensor, b: cute.Tensor, sb: cute.Tensor, c: cute.Tensor,
                   n_cta: cutlass.Int32, stream: cuda_driver.CUstream):
    # two consumer warpgroups stacked along M, each a 64 x 128 fp8 wgmma tile (K = 32 per instruction)
    mma = sm90_utils.make_trivial_tiled_mma(
        AB, AB, warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.K, ACC, (2, 1, 1), tiler_mn=(64, BN)
    )
    tile = (BM, BN, BK)
    a_lay = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, AB, STAGES)
    b_lay = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, tile, AB, STAGES)
    c_lay = sm90_utils.make_smem_layout_epi(OUT, LayoutEnum.ROW_MAJOR, (EPI_M, EPI_N), EPI_STAGES)

    tma_a, tA = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), a, cute.slice_(a_lay, (None, None, 0)), (BM, BK)
    )
    tma_b, tB = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), b, cute.slice_(b_lay, (None, None, 0)), (BN, BK)
    )
    tma_c, tC = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(c_lay, (None, None, 0)), (EPI_M, EPI_N)
    )
    _fp8_gemm_kernel(mma, tma_a, tA, tma_b, tB, tma_c, tC, sa, sb, a_lay, b_lay, c_lay).launch(
        grid=(n_cta, 1, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream
    )


def _wrap(t, divisibility):
    # dynamic shapes; `divisibility` elements of the row length (K of A and B: 16 fp8, N of C: 8 bf16) = 16 bytes,
    # as TMA needs for the row stride
    return (
        from_dlpack(t, assumed_align=16)
        .mark_layout_dynamic(leading_dim=1)
        .mark_compact_shape_dynamic(mode=1, stride_order=(0, 1), divisibility=divisibility)
    )


def _wrap_scales(t):
    # SA, SB: read element by element; K/128 may be 1, so no divisibility is promised
    return from_dlpack(t, assumed_align=4).mark_layout_dynamic(leading_dim=1)


_compiled = {}
_sms = {}


def _sm_count(t):
    if not t.is_cuda:
        return H100_SMS
    dev = t.device.index or 0
    if dev not in _sms:
        import torch

        _sms[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    return _sms[dev]


def xlang_entry(A, SA, B, SB, C, M, N, K):
    assert K % BK == 0, "K must be a multiple of 128 (the contract's scale block)"
    a, b, c = _wrap(A, 16), _wrap(B, 16), _wrap(C, 8)
    sa, sb = _wrap_scales(SA), _wrap_scales(SB)
    tiles = ((M + BM - 1) // BM) * ((N + BN - 1) // BN)
    n_cta = max(1, min(tiles, _sm_count(A)))
    fn = _compiled.get("gemm")
    if fn is None:
        fn = cute.compile(_fp8_gemm_host, a, sa, b, sb, c, cutlass.Int32(n_cta), make_fake_stream())
        _compiled["gemm"] = fn
    stream = None
    if A.is_cuda:
        import torch

        stream = cuda_driver.CUstream(torch.cuda.current_stream(A.device).cuda_stream)
    fn(a, sa, b, sb, c, cutlass.Int32(n_cta), stream)
