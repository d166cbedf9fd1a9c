# Not yet run on a GPU (written 2026-12-02 without device time); see tasks/attn_prefill_ragged/NOTES_cutedsl.md
"""Expert Hopper (sm_90a) causal prefill over a ragged batch in CuTe DSL for xlang's `attn_prefill_ragged`.

q [T, H, D], k and v [T, HKV, D] (bf16, the sequences' tokens packed one after another), sequence b at rows
cu_seqlens[b] .. cu_seqlens[b+1] - 1, causal within it, nothing across sequences; kv head h // (H // HKV) (GQA);
scale 1/sqrt(D); D in {128, 256}. It is the CuTe DSL attention forward expert (tasks/attn_fwd/solutions/
cutedsl_hopper.py, `ok` on the H200 at D 64..128) moved onto packed sequences.

Design, top-down
  * Grid (ceil(T / 128) + B, H): an upper bound on the sum of the sequences' 128-row query tiles. Each CTA walks
    cu_seqlens (B scalar loads; no host read: cu_seqlens changes from call to call and a host copy would stall the
    stream) to its sequence and tile; within a sequence the tiles run last-first (the longest causal rows first).
    A CTA past the last tile skips the whole body (every thread of it alike, so no barrier is left waiting).
  * TMA over the packed tensors: q, k, v as (T, D, heads) (V as (D, T, heads), read MN-major), the coordinate
    tensor of one head offset by the sequence's first row (cute.domain_offset) and tiled from there. A box that
    runs past the sequence's end holds the next sequence's rows (or TMA's zero fill past T): those keys are masked
    for every row (key >= n) and those query rows are computed but never stored.
  * Warp specialisation as attn_fwd: warpgroup 0 the producer (setmaxnreg down; warp 0 issues the Q tile and the
    K / V tiles into two STAGES-deep mbarrier rings), warpgroups 1 and 2 the consumers, 64 query rows each:
    S = Q K^T (wgmma SS, K-major both), masks, online softmax in the exp2 domain, P to bf16 in registers, O += P V
    (wgmma RS: P from registers, V from shared memory MN-major).
  * Masks: the tile visits the key blocks 0 .. ceil(min(n, tile end) / BN) - 1; a block is masked (key > row,
    key >= n) when it reaches past the tile's first row or past n (attn_fwd masked only its last block, which is
    right only when BM == BN and nothing follows the sequence in memory).
  * Epilogue: O / l to bf16, stored from registers, element by element, for rows < n only (a TMA store would write
    the next sequence's rows). No shared-memory staging: unmeasured whether a staged, vectorised store pays.
  * D 128: BN = 128, 2 stages (Q 32 KiB + 2 x (K + V) 128 KiB = 160 KiB). D 256: BN = 64 keys per block, S by wgmma
    64 x 64 x 16 over 16 k-steps, O += P V by wgmma 64 x 256 x 16 (N = 256 is wgmma's widest), O 128 fp32 registers
    per consumer thread; Q 64 KiB + 2 x (K + V) 128 KiB = 192 KiB of the 227 KiB.
  * One compile per D; T, H, HKV and B are dynamic.

The index rules are small functions (_tiles, _tile_in_sequence, _key_blocks, _needs_mask, _key_dead, _row_stored,
_kv_head) that the kernel calls on DSL values and tasks/attn_prefill_ragged/verify/prefill_cutedsl_emulate.py (its
CPU model) calls on ints and torch tensors; the model also checks _make_mmas's register layouts at trace time.
"""

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cuda.bindings import driver as cuda_driver
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.utils.layout import LayoutEnum

BM = 128                        # query rows per CTA (2 consumer warpgroups x 64)
WG_THREADS = 128
THREADS = 3 * WG_THREADS
CONSUMER_THREADS = 2 * WG_THREADS
PRODUCER_REGS, CONSUMER_REGS = 40, 232
AB = cutlass.BFloat16
ACC = cutlass.Float32
LOG2E = 1.4426950408889634


def tile_config(D):
    """(tile width, keys per block, ring depth) for head dim D."""
    if D == 256:
        return 256, 64, 2
    return 128, 128, 2


# ---------------------------------------------------------------- index rules (on DSL values in the kernel, on ints
# in the CPU model)
def _tiles(n):
    """Query tiles of a sequence of n tokens."""
    return (n + BM - 1) // BM


def _tile_in_sequence(x, tiles):
    """The x-th CTA of a sequence takes tile tiles - 1 - x: the longest causal rows start first."""
    return tiles - 1 - x


def _key_blocks(n, tile, bn):
    """Key blocks tile `tile` of a sequence of n tokens visits: keys 0 .. min(n, tile end) - 1."""
    return (cutlass.min(n, (tile + 1) * BM) + bn - 1) // bn


def _needs_mask(j, tile, n, bn):
    """Key block j holds a key above some row of the tile, or a key past the sequence's end."""
    return (j * bn + bn - 1 > tile * BM) | (j * bn + bn > n)


def _key_dead(key, row, n):
    """Key `key` is not seen by query `row` (both positions within the sequence of n tokens)."""
    return (key >= n) | (key > row)


def _row_stored(row, n):
    """Query row `row` (within the sequence) is stored: rows past the end belong to the next sequence."""
    return row < n


def _kv_head(h, heads, kv_heads):
    return h // (heads // kv_heads)     # GQA


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
def _prefill_kernel(
    mma_qk: cute.TiledMma,
    mma_pv: cute.TiledMma,
    tma_q: cute.CopyAtom,
    tQ: cute.Tensor,
    tma_k: cute.CopyAtom,
    tK: cute.Tensor,
    tma_v: cute.CopyAtom,
    tV: cute.Tensor,
    mO: cute.Tensor,
    mCu: cute.Tensor,
    q_lay: cute.ComposedLayout,
    k_lay: cute.ComposedLayout,
    v_lay: cute.ComposedLayout,
    n_seqs: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale_log2: cutlass.Float32,
    dp: cutlass.Constexpr,
    bn: cutlass.Constexpr,
    stages: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    wg = warp_id // 4
    blk_x, h, _ = cute.arch.block_idx()

    # ------------------------------------------------------------------ the cu_seqlens walk: sequence and tile
    seq_start = cutlass.Int32(0)
    n = cutlass.Int32(0)
    tile = cutlass.Int32(-1)
    x = cutlass.Int32(blk_x)
    for b in cutlass.range(n_seqs, unroll=1):
        lo = mCu[b]
        hi = mCu[b + 1]
        tiles = _tiles(hi - lo)
        if tile < 0:
            if x < tiles:
                tile = _tile_in_sequence(x, tiles)
                seq_start = lo
                n = hi - lo
            x = x - tiles

    if tile >= 0:
        kv_head = _kv_head(h, heads, kv_heads)
        n_blocks = _key_blocks(n, tile, bn)

        if warp_id == 0:
            cpasync.prefetch_descriptor(tma_q)
            cpasync.prefetch_descriptor(tma_k)
            cpasync.prefetch_descriptor(tma_v)

        # -------------------------------------------------------------- shared memory and mbarrier rings
        smem = cutlass.utils.SmemAllocator()
        bar_q = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
        bar_k = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
        bar_v = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
        sQ = smem.allocate_tensor(AB, q_lay.outer, byte_alignment=1024, swizzle=q_lay.inner)   # (BM, dp, 1)
        sK = smem.allocate_tensor(AB, k_lay.outer, byte_alignment=1024, swizzle=k_lay.inner)   # (bn, dp, stages)
        sV = smem.allocate_tensor(AB, v_lay.outer, byte_alignment=1024, swizzle=v_lay.inner)   # (dp, bn, stages)

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

        # -------------------------------------------------------------- this sequence's tiles, from its first row
        gQ = cute.local_tile(cute.domain_offset((seq_start, 0), tQ[(None, None, h)]), (BM, dp), (None, 0))
        gK = cute.local_tile(cute.domain_offset((seq_start, 0), tK[(None, None, kv_head)]), (bn, dp), (None, 0))
        gV = cute.local_tile(cute.domain_offset((0, seq_start), tV[(None, None, kv_head)]), (dp, bn), (0, None))

        if wg == 0:
            # ========================================================== producer warpgroup
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
                cute.copy(tma_q, q_src[(None, tile)], q_dst[(None, 0)], tma_bar_ptr=q_pipe.producer_get_barrier(q_put))
                k_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
                v_put = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, stages)
                for j in cutlass.range(n_blocks, unroll=1):
                    k_pipe.producer_acquire(k_put)
                    cute.copy(tma_k, k_src[(None, j)], k_dst[(None, k_put.index)],
                              tma_bar_ptr=k_pipe.producer_get_barrier(k_put))
                    k_put.advance()
                    v_pipe.producer_acquire(v_put)
                    cute.copy(tma_v, v_src[(None, j)], v_dst[(None, v_put.index)],
                              tma_bar_ptr=v_pipe.producer_get_barrier(v_put))
                    v_put.advance()
                k_pipe.producer_tail(k_put)
                v_pipe.producer_tail(v_put)
        else:
            # ========================================================== consumer warpgroups
            cute.arch.setmaxregister_increase(CONSUMER_REGS)
            ctid = tidx - WG_THREADS                 # 0..255; warpgroup wg-1 owns tile rows 64(wg-1)..+63

            wg_qk = mma_qk.get_slice((wg - 1) * WG_THREADS)
            fQ = mma_qk.make_fragment_A(wg_qk.partition_A(sQ))
            fK = mma_qk.make_fragment_B(wg_qk.partition_B(sK))
            acc_s = cute.make_rmem_tensor(wg_qk.partition_C(cute.make_identity_tensor((BM, bn))).shape, ACC)
            # (row, key) inside the 128 x bn tile of each of this thread's S registers, for the masks
            coord_s = mma_qk.get_slice(ctid).partition_C(cute.make_identity_tensor((BM, bn)))
            qk_kblocks = cute.size(fQ, mode=[2])

            wg_pv = mma_pv.get_slice((wg - 1) * WG_THREADS)
            fV = mma_pv.make_fragment_B(wg_pv.partition_B(sV))
            acc_o = cute.make_rmem_tensor(wg_pv.partition_C(cute.make_identity_tensor((BM, dp))).shape, ACC)
            coord_o = mma_pv.get_slice(ctid).partition_C(cute.make_identity_tensor((BM, dp)))
            pv_kblocks = cute.size(fV, mode=[2])

            # The accumulator of a 64 x N wgmma holds, per thread, flat values i = c + 2 r + 4 v (c: column pair,
            # r: row 0 / +8, v: group of 8 columns); the register A operand of a 64 x 16 k-slice holds
            # i = c + 2 r + 4 h (h: k half). So S values 8 kb .. 8 kb + 7 are the A fragment of k-block kb of P V:
            # P is S in bf16 re-viewed as ((2, 2, 2), 1, bn / 16) (attn_fwd's layout, printed at trace time there).
            n_s = cute.size(acc_s)
            n_o = cute.size(acc_o)
            p_bf16 = cute.make_rmem_tensor(acc_s.shape, AB)
            frag_p = cute.make_tensor(p_bf16.iterator, cute.make_layout(((2, 2, 2), 1, bn // 16)))
            row_max = cute.make_rmem_tensor((2,), ACC)
            row_sum = cute.make_rmem_tensor((2,), ACC)
            alpha = cute.make_rmem_tensor((2,), ACC)

            row_max.fill(-math.inf)
            row_sum.fill(0.0)
            acc_o.fill(0.0)
            mma_qk.set(warpgroup.Field.ACCUMULATE, True)
            mma_pv.set(warpgroup.Field.ACCUMULATE, True)
            q_row0 = tile * BM

            q_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
            k_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            v_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
            q_pipe.consumer_wait(q_get)

            for j in cutlass.range(n_blocks, unroll=1):
                # ------------ S = Q K^T
                acc_s.fill(0.0)
                k_pipe.consumer_wait(k_get)
                warpgroup.fence()
                for kb in cutlass.range_constexpr(qk_kblocks):
                    cute.gemm(mma_qk, acc_s, fQ[(None, None, kb, 0)], fK[(None, None, kb, k_get.index)], acc_s)
                warpgroup.commit_group()
                warpgroup.wait_group(0)
                k_pipe.consumer_release(k_get)
                k_get.advance()

                # ------------ masks: the causal band and the sequence's end. Block 0 always holds key 0, which
                # every row sees, so the running max is finite from the first block on.
                if _needs_mask(j, tile, n, bn):
                    key0 = j * bn
                    for i in cutlass.range_constexpr(n_s):
                        if _key_dead(key0 + coord_s[i][1], q_row0 + coord_s[i][0], n):
                            acc_s[i] = -math.inf

                # ------------ online softmax (exp2 domain)
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

                # ------------ O += P V
                v_pipe.consumer_wait(v_get)
                warpgroup.fence()
                for kb in cutlass.range_constexpr(pv_kblocks):
                    cute.gemm(mma_pv, acc_o, frag_p[(None, None, kb)], fV[(None, None, kb, v_get.index)], acc_o)
                warpgroup.commit_group()
                warpgroup.wait_group(0)
                v_pipe.consumer_release(v_get)
                v_get.advance()

            # ------------ normalise, bf16, store the rows of this sequence
            for r in cutlass.range_constexpr(2):
                alpha[r] = cutlass.Float32(1.0) / _quad_sum(row_sum[r])
            for i in cutlass.range_constexpr(n_o):
                acc_o[i] = acc_o[i] * alpha[(i // 2) % 2]
            o_bf16 = cute.make_rmem_tensor(acc_o.shape, AB)
            o_bf16.store(acc_o.load().to(AB))
            for i in cutlass.range_constexpr(n_o):
                row = q_row0 + coord_o[i][0]
                if _row_stored(row, n):
                    mO[(seq_start + row, h, coord_o[i][1])] = o_bf16[i]


def _packed(t, seq_mode, feat_mode):
    """[T, heads, D] -> the TMA view (T, D, heads) [or (D, T, heads) for V read MN-major]."""
    return cute.make_tensor(t.iterator, cute.select(t.layout, mode=[seq_mode, feat_mode, 1]))


def _make_mmas(dp, bn):
    """The two tiled wgmmas (2 consumer warpgroups along M). S = Q K^T: M = query rows, N = keys, K = head dim, both
    operands K-major (D contiguous). O = P V: M = query rows, N = head dim, K = keys; A (P) from registers, B (V)
    MN-major."""
    k_major, mn_major = warpgroup.OperandMajorMode.K, warpgroup.OperandMajorMode.MN
    mma_qk = sm90_utils.make_trivial_tiled_mma(AB, AB, k_major, k_major, ACC, (2, 1, 1), tiler_mn=(64, bn))
    mma_pv = sm90_utils.make_trivial_tiled_mma(AB, AB, k_major, mn_major, ACC, (2, 1, 1), tiler_mn=(64, dp),
                                               a_source=warpgroup.OperandSource.RMEM)
    return mma_qk, mma_pv


@cute.jit
def _prefill_host(
    q: cute.Tensor,
    k: cute.Tensor,
    v: cute.Tensor,
    out: cute.Tensor,
    cu: cute.Tensor,
    n_seqs: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale_log2: cutlass.Float32,
    dp: cutlass.Constexpr,
    bn: cutlass.Constexpr,
    stages: cutlass.Constexpr,
    stream: cuda_driver.CUstream,
):
    mma_qk, mma_pv = _make_mmas(dp, bn)
    q_lay = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, bn, dp), AB, 1)
    k_lay = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, bn, dp), AB, stages)
    v_lay = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BM, dp, bn), AB, stages)

    g2s = cpasync.CopyBulkTensorTileG2SOp()
    tma_q, tQ = cpasync.make_tiled_tma_atom(g2s, _packed(q, 0, 2), cute.slice_(q_lay, (None, None, 0)), (BM, dp))
    tma_k, tK = cpasync.make_tiled_tma_atom(g2s, _packed(k, 0, 2), cute.slice_(k_lay, (None, None, 0)), (bn, dp))
    tma_v, tV = cpasync.make_tiled_tma_atom(g2s, _packed(v, 2, 0), cute.slice_(v_lay, (None, None, 0)), (dp, bn))
    tokens = cute.size(q, mode=[0])
    _prefill_kernel(
        mma_qk, mma_pv, tma_q, tQ, tma_k, tK, tma_v, tV, out, cu, q_lay, k_lay, v_lay,
        n_seqs, heads, kv_heads, scale_log2, dp, bn, stages,
    ).launch(grid=((tokens + BM - 1) // BM + n_seqs, heads, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1,
             stream=stream)


def _wrap(t):
    # [T, heads, D] or [B + 1]: T and heads dynamic, D static (a 16-byte multiple, as TMA needs)
    order = tuple(range(t.dim()))
    w = from_dlpack(t, assumed_align=16 if t.dim() == 3 else 4).mark_compact_shape_dynamic(mode=0, stride_order=order)
    return w.mark_compact_shape_dynamic(mode=1, stride_order=order) if t.dim() == 3 else w


_compiled = {}


def xlang_entry(q, k, v, cu_seqlens, out, B, T, H, HKV, D):
    dp, bn, stages = tile_config(D)
    args = (_wrap(q), _wrap(k), _wrap(v), _wrap(out), _wrap(cu_seqlens))
    scalars = (cutlass.Int32(B), cutlass.Int32(H), cutlass.Int32(HKV), cutlass.Float32(LOG2E / math.sqrt(D)))
    fn = _compiled.get(D)
    if fn is None:
        fn = cute.compile(_prefill_host, *args, *scalars, dp, bn, stages, make_fake_stream())
        _compiled[D] = fn
    stream = None
    if q.is_cuda:
        import torch

        stream = cuda_driver.CUstream(torch.cuda.current_stream(q.device).cuda_stream)
    fn(*args, *scalars, stream)
