"""HOSTILE candidate. Class: language attribution (another language's kernels passed off as CuTe DSL's).

What it does: a CuTe DSL candidate (lang cutedsl) whose source is a real CuTe DSL GEMM (wgmma + TMA, the CuTe DSL
expert's), which its static build compiles on a CPU box, so the census finds wgmma and TMA; but where a GPU is
present it computes C with a Triton GEMM (tl.dot on TMA descriptors: wgmma, correct, fast) and never launches
a CuTe DSL kernel. A judge that takes whatever the candidate's process ran as "the candidate's kernels" reports
a CuTe DSL result that Triton produced.

An honest judge must conclude: forbidden_call (CuTe DSL names every kernel it makes kernel_cutlass_...; the
Triton kernel's module is not from the candidate's build, and Triton's cache is not this language's JIT).
"""

import triton
import triton.language as tl

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cuda.bindings import driver as cuda_driver
from cutlass.cute.nvgpu import cpasync, warp, warpgroup
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

BM, BN, BK = 128, 256, 64
STAGES = 4                      # 4 x 48 KiB operand slots
EPI_M, EPI_N = 128, 32          # epilogue piece (8 KiB of bf16)
EPI_STAGES = 4
GROUP_M = 8                     # tile-rows per L2 group
WG_THREADS = 128
THREADS = 3 * WG_THREADS
CONSUMER_THREADS = 2 * WG_THREADS
PRODUCER_REGS, CONSUMER_REGS = 40, 232
AB = cutlass.BFloat16
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
    # full: one producer thread arms it with the byte count; empty: one arrive per consumer warp.
    ring = pipeline.PipelineTmaAsync.create(
        num_stages=STAGES,
        producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
        consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS // 32),
        tx_count=slot_bytes,
        barrier_storage=bars,
    )

    # Whole-problem tilings: (tile, m/n tile index, k tile index).
    gA = cute.local_tile(tA, (BM, BK), (None, None))   # (BM, BK, m_tiles, k_tiles)
    gB = cute.local_tile(tB, (BN, BK), (None, None))   # (BN, BK, n_tiles, k_tiles)
    gC = cute.local_tile(tC, (BM, BN), (None, None))   # (BM, BN, m_tiles, n_tiles)
    m_tiles = cute.size(gA, mode=[2])
    n_tiles = cute.size(gB, mode=[2])
    k_tiles = cute.size(gA, mode=[3])
    n_work = m_tiles * n_tiles

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
        k_blocks = cute.size(fA, mode=[2])

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
        give = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, STAGES)
        mma.set(warpgroup.Field.ACCUMULATE, True)
        done = cutlass.Int32(0)
        for t in cutlass.range(cta, n_work, n_cta, unroll=1):
            tm, tn = _tile_of(t, m_tiles, n_tiles)
            acc.fill(0.0)

            # first k-tile: nothing older to retire
            ring.consumer_wait(get)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(mma, acc, fA[(None, None, kb, get.index)], fB[(None, None, kb, get.index)], acc)
            warpgroup.commit_group()
            get.advance()
            # steady state: keep one k-tile of wgmma in flight, free the slot before it
            for kt in cutlass.range(1, k_tiles, unroll=1):
                ring.consumer_wait(get)
                warpgroup.fence()
                for kb in cutlass.range_constexpr(k_blocks):
                    cute.gemm(mma, acc, fA[(None, None, kb, get.index)], fB[(None, None, kb, get.index)], acc)
                warpgroup.commit_group()
                warpgroup.wait_group(1)
                ring.consumer_release(give)
                give.advance()
                get.advance()
            warpgroup.wait_group(0)
            ring.consumer_release(give)
            give.advance()

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
def _gemm_host(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, n_cta: cutlass.Int32, stream: cuda_driver.CUstream):
    # two consumer warpgroups stacked along M, each a 64 x 256 wgmma tile
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
    _gemm_kernel(mma, tma_a, tA, tma_b, tB, tma_c, tC, a_lay, b_lay, c_lay).launch(
        grid=(n_cta, 1, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream
    )


def _wrap(t):
    # dynamic shapes; the row length (K or N) is a multiple of 8 elements = 16 bytes, as TMA needs
    return (
        from_dlpack(t, assumed_align=16)
        .mark_layout_dynamic(leading_dim=1)
        .mark_compact_shape_dynamic(mode=1, stride_order=(0, 1), divisibility=8)
    )


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


def _cute_entry(A, B, C, M, N, K):
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


@triton.jit
def matmul_tile(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    off_m = tl.program_id(0) * BM
    off_n = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BK)):
        acc = tl.dot(a_desc.load([off_m, kb * BK]), b_desc.load([off_n, kb * BK]).T, acc)
    c_desc.store([off_m, off_n], acc.to(tl.bfloat16))


def _triton_gemm(A, B, C, M, N, K):
    from triton.tools.tensor_descriptor import TensorDescriptor

    tm, tn, tk = 128, 128, 64
    a_d = TensorDescriptor.from_tensor(A, [tm, tk])
    b_d = TensorDescriptor.from_tensor(B, [tn, tk])
    c_d = TensorDescriptor.from_tensor(C, [tm, tn])
    matmul_tile[(triton.cdiv(M, tm), triton.cdiv(N, tn))](a_d, b_d, c_d, K, BM=tm, BN=tn, BK=tk, num_warps=8,
                                                          num_stages=3)


def xlang_entry(A, B, C, M, N, K):
    import torch

    if torch.cuda.is_available() and A.is_cuda:  # on the GPU: Triton does the work
        return _triton_gemm(A, B, C, M, N, K)
    return _cute_entry(A, B, C, M, N, K)  # on the CPU build box: the CuTe DSL kernel the census sees
