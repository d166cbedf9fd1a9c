# v3 (2026-12-01): the side kernels the cuda_ptx expert got the same day. The prep kernel reads dO and O with
# 16-byte loads and zeroes the dQ scratch with 16-byte stores; the convert kernel stores 16 bytes per lane after
# quad shuffles. The fused kernel is v2's, unchanged. Judged on the H200 under harness 4 (`xlang eval <file>
# --lang cutedsl --task attn_bwd[_causal] --arch h100`, full verdicts, memcheck clean): attn_bwd 7.541 ms against
# cuDNN 7.226 ms, 0.958x (v2 in the same device call, timing only: 0.949x); causal 0.946x (v2: 0.933x). Per call:
# prep 0.212 ms (v2 0.220), convert 0.141 ms (v2 0.191), fused 7.185 ms (the same).
# v2 under harness 3 (2026-11-30, reports/h200-reference): 0.891x cuDNN backward, causal 0.836x, D=96 0.840x;
# harness 3 counted ~0.6 ms of observer stall against it (README, "Timing"). Notes: tasks/attn_bwd/NOTES_cutedsl.md;
# CPU models: tasks/attn_bwd/verify/attn_bwd_cutedsl_ring_emulate.py (and attn_bwd_cutedsl_emulate.py, which it
# imports; `--side v3` there is this file's prep and convert).
# Second fused version ("v2", marked so below), from a SASS comparison with cuda_ptx_hopper.cu; against the first
# (0.760x):
#   1. the producer warp's 32 lanes stage LSE2 and Delta of the step's 64 query rows into the Q/dO ring slot and
#      publish them with their own arrivals on the slot's full barrier (count 32; one elected lane adds the TMA
#      bytes); the consumers read them from shared memory after the full-barrier wait (LSE2 right after the
#      S^T / dP^T issue, Delta after P^T), before the slot's release: no per-step global loads (were 32 LDG per
#      thread per step, the Delta ones exposed at L2 latency right before dS);
#   2. S^T, dP^T and dQ wgmmas start with ACCUMULATE = False on their first k-block instead of a register fill:
#      the 32-register zero fill of acc_dp between the S^T and dP^T groups made ptxas wait for S^T to complete
#      (WARPGROUP.DEPBAR.LE gsb0, 0x0) before issuing dP^T; now 16 HGMMAs go out back to back, as in cuda_ptx;
#   3. convert kernel: one 128-bit load per float4 and two bf16x2 32-bit stores (were 4 scalar loads, 4 u16
#      stores).
"""Fused Hopper (sm_90a) attention backward in CuTe DSL for xlang's `attn_bwd` (CAUSAL = False) and
`attn_bwd_causal` (this same file with CAUSAL = True). It replaced the split (FA2-style, 7-matmul)
CuTe DSL expert; the algorithm is that of tasks/attn_bwd/solutions/cuda_ptx_hopper.cu.

Given dO and the forward's Q, K, V, O, LSE (natural log of the scaled scores), scale = 1/sqrt(D), kv head =
h // (H // HKV):
    P  = exp(scale Q K^T - LSE)   dV = P^T dO   dP = dO V^T   Delta = rowsum(dO * O)
    dS = P * (dP - Delta)         dQ = scale dS K               dK = scale dS^T Q
dK and dV of a kv head sum the G = H // HKV query heads that share it. Any S >= 1, D in {64, 96, 128}.

Design, top-down: 5 matmuls per tile instead of the split design's 7 (S and dP are computed once)
  1. `_prep_kernel`: for every (b*H + h, row < S_pad = ceil(S/64)*64) writes Delta = rowsum(dO * O) (fp32,
     one warp per row) and LSE2 = LSE * log2(e) into two [B*H, S_pad] fp32 scratch tensors; rows >= S get
     LSE2 = +inf and Delta = 0, so P = exp2(-inf) = 0 and dS = 0 there without a mask or a clamp. It also
     zeroes the fp32 dQ accumulator scratch (each row's warp DP floats of it; torch.empty allocates it), so the
     call launches nothing before its Python is done (the harness times from the call's first GPU work).
  2. `_fused_kernel`: grid (ceil(S/128), B*HKV), 384 threads. CTA = 128 keys of one kv head.
     * Warpgroup 0, producer (setmaxnreg 24): warp 0 loads K, V (128 x DP) once through a one-slot
       PipelineTmaAsync, then for step it (query head g = it // per_head, 64-row query block
       m = m_lo + it % per_head) the Q and dO tiles (64 x DP) into a STAGES-deep PipelineTmaAsync ring
       (both tiles on the slot's barrier) and (v2) LSE2 / Delta of the block's 64 rows into the slot's
       sLse / sDlt (lane l: rows l, l + 32), each lane arriving on the slot's full barrier after its writes.
     * Warpgroups 1, 2, consumers (setmaxnreg 240), WG c in {0, 1} owning keys n0 + 64c .. +63; dK, dV in
       registers over all steps (GQA sum included). Per step (transposed orientation, keys = wgmma rows):
         S^T = K_c Q^T, dP^T = V_c dO^T    SS wgmma 64x64x16, two commit groups; wait(1) -> S^T
         (v2: LSE2 of the thread's 16 query columns from the slot's sLse; Delta from sDlt after P^T)
         P^T = exp2(S^T scale log2e - LSE2), masked where key >= S or (causal) key > query -> bf16 regs
         wait(0) -> dP^T;  dS^T = P^T (dP^T - Delta) -> bf16 regs (the RS wgmma's A, no shuffles)
         dS^T (bf16) -> stmatrix into the shared dS^T buffer it & 1 ([128 keys][64 queries], 128B swizzle)
         fence.proxy.async; dV += P^T dO, dK += dS^T Q  (RS wgmma 64xDPx16, B = the slot read MN-major) = G1
         thread 0 of the WG: cp.async.bulk.wait_group.read 0 (its previous dQ reduce has read the staging)
         -- named barrier 1 (256 consumer threads): both halves of dS^T are in shared memory --
         dQ_c = dS K[:, half c]   SS wgmma 64x(DP/2)x16 over all 128 keys: A = the dS^T buffer read MN-major
                                  (M = queries), B = the K tile read MN-major (N = columns of half c) = G2
         wait(1) -> G1 done -> release the Q/dO slot;  wait(0) -> G2 done
         dQ_c (fp32, 64 x DP/2) -> the WG's staging buffer in thread order (float4 v*128 + t)
         fence.proxy.async; named barrier 2 + c (the WG's 128 threads); thread 0 of the WG issues
         cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 of the 128*DP-byte staging buffer into
         the block (bh, m, c) of the fp32 scratch (same thread order: one contiguous block), commit.
       After the loop: thread 0 of each WG waits its bulk groups; barrier 1 (both WGs' last dQ wgmma no longer
       reads K); dK * scale, dK, dV -> bf16 -> stmatrix into the K and V tiles (reused) -> fence -> barrier 1
       -> warp 4 issues the two TMA stores (clipped at S and D).
  3. `_convert_kernel`: dQ = scale * scratch, un-permuted from thread order to [B*H, S, D] bf16, rows < S and
     columns < D only (v3: one thread per pair of float4s of the scratch, two 128-bit loads; the 4 lanes of a
     quad trade bf16 pairs with shuffles so that each stores 8 consecutive columns in 16 bytes).

Barrier protocol (the cuda_ptx fused kernel's, which ran correct on the H200)
  * Q/dO/LSE2/Delta ring: CuTe PipelineTmaAsync barriers (full barrier, v2: count 32 = the producer lanes'
    arrivals, each after the lane's sLse / sDlt writes (release), plus the TMA bytes set by one elected lane's
    expect_tx before the copies; empty barrier: one arrival per consumer warp via consumer_release). A slot is
    released only after G1 (its last reader) completed and after the thread's sLse / sDlt reads (program order
    before the release arrive): G1 is committed before G2, so wait_group(1) after G2's commit implies G1 is
    done.
  * dS^T buffers: dS(it) is written by both WGs (stmatrix), fence.proxy.async, barrier 1, only then G2 is
    issued. A WG writes dS(it + 2) into the same buffer after passing barrier 1 of step it + 1, which the other
    WG reaches only after waiting its G2 of step it: two buffers and one barrier per step suffice.
  * dQ staging (one per WG): written after G2 completed, fence.proxy.async, WG barrier, then the bulk reduce by
    the WG's thread 0, which waits bulk wait_group.read 0 before entering barrier 1 of the next step; the other
    threads of the WG write the staging again only after that barrier (the staging writes of step it + 1 come
    after barrier 1 of step it + 1). At the end, thread 0 waits wait_group 0 before the CTA goes on.
  * Epilogue: barrier 1 before the K/V tiles are overwritten with dK/dV (the other WG's last G2 reads all 128
    rows of K).
The dQ sum is fp32 and order-nondeterministic in its last bits (key blocks of a query block arrive in any
order), as in the cuda_ptx expert.

Reused from the split CuTe DSL expert (correct on the H200): the PipelineTmaAsync rings and producer, one smem
tile read in both operand majors (same swizzled pointer, transposed layout), accumulator-as-register-A, the
stmatrix + TMA-store epilogue, per-head [B*heads, S, D] TMA views (tails zero-filled per head). DP = 64 (D = 64)
or 128 (D = 96, 128; columns 96..127 load as zeros and are never stored). One compile per (DP, CAUSAL).
Shared memory, DP = 128: K + V 64 KiB, ring 2 x (Q + dO) 64 KiB, dS^T 2 x 16 KiB, dQ staging 2 x 16 KiB
= 192 KiB; DP = 64: 32 + 3 x 16 + 32 + 2 x 8 = 128 KiB; v2 adds STAGES x 512 B (sLse, sDlt).
"""

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
import torch
from cuda.bindings import driver as cuda_driver
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync, warp, warpgroup
from cutlass.cute.runtime import from_dlpack, make_fake_stream
from cutlass.cutlass_dsl import dsl_user_op
from cutlass.utils.layout import LayoutEnum

CAUSAL = False

BN = 128                        # keys per CTA (2 consumer warpgroups x 64)
BM = 64                         # query rows per step
WG_THREADS = 128
THREADS = 3 * WG_THREADS
CONSUMER_THREADS = 2 * WG_THREADS
PRODUCER_REGS, CONSUMER_REGS = 24, 240
PREP_ROWS = 8                   # prep kernel: rows per CTA (one warp each)
CONVERT_THREADS = 256
AB = cutlass.BFloat16
ACC = cutlass.Float32
LOG2E = 1.4426950408889634
DS_BARRIER_ID = 1               # named barrier 0 is __syncthreads; 1: the 256 consumer threads
STAGE_BARRIER_ID = 2            # 2 + c: the 128 threads of consumer warpgroup c


def _tile_config(D):
    """Padded head dim and Q/dO ring depth (shared memory in the module docstring)."""
    dp = 64 if D <= 64 else 128
    stages = 3 if dp == 64 else 2
    return dp, stages


@dsl_user_op
def _bulk_reduce_add_f32(gmem_addr, smem_addr, nbytes, *, loc=None, ip=None):
    """gmem[0, nbytes) += smem[0, nbytes) (fp32), asynchronous, in the issuing thread's bulk group."""
    llvm.inline_asm(
        None,
        [cutlass.Int64(gmem_addr).ir_value(loc=loc, ip=ip), cutlass.Int32(smem_addr).ir_value(loc=loc, ip=ip),
         cutlass.Int32(nbytes).ir_value(loc=loc, ip=ip)],
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [$0], [$1], $2;",
        "l,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


@dsl_user_op
def _pack_bf16x2(lo, hi, *, loc=None, ip=None):
    """bf16(lo) in the low half, bf16(hi) in the high half of one 32-bit value (round to nearest even)."""
    return cutlass.Int32(llvm.inline_asm(
        cutlass.Int32.mlir_type,
        [cutlass.Float32(lo).ir_value(loc=loc, ip=ip), cutlass.Float32(hi).ir_value(loc=loc, ip=ip)],
        "cvt.rn.bf16x2.f32 $0, $2, $1;",
        "=r,f,f",
        has_side_effects=False,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    ))


@dsl_user_op
def _st_global_v4_b32(gmem_addr, a, b, c, d, *, loc=None, ip=None):
    """gmem[0..16) = a, b, c, d (one 16-byte store; the address is 16-byte aligned)."""
    llvm.inline_asm(
        None,
        [cutlass.Int64(gmem_addr).ir_value(loc=loc, ip=ip)]
        + [cutlass.Int32(x).ir_value(loc=loc, ip=ip) for x in (a, b, c, d)],
        "st.global.v4.b32 [$0], {$1, $2, $3, $4};",
        "l,r,r,r,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )


def _stmatrix(mma, frag, s_tile, ctid):
    """This consumer thread's bf16 fragment (accumulator flat order of `mma`'s C tile) -> stmatrix into the
    swizzled shared tile `s_tile` (the C tile's shape)."""
    r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, AB, ACC)
    stm_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), AB)
    r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm_atom, mma))
    thr_r2s = r2s.get_slice(ctid)
    piece_shape = cute.shape(thr_r2s.partition_S(s_tile))
    cute.copy(r2s, cute.make_tensor(frag.iterator, cute.make_layout(piece_shape)), thr_r2s.partition_D(s_tile))


def _store_acc(mma, acc, s_tile, ctid):
    """fp32 accumulator -> bf16 -> stmatrix (the split expert's epilogue)."""
    r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, AB, ACC)
    stm_atom = cute.make_copy_atom(warp.StMatrix8x8x16bOp(False, 4), AB)
    r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stm_atom, mma))
    thr_r2s = r2s.get_slice(ctid)
    piece_shape = cute.shape(thr_r2s.partition_S(s_tile))
    piece = cute.make_rmem_tensor(piece_shape, AB)
    piece.store(cute.make_tensor(acc.iterator, cute.make_layout(piece_shape)).load().to(AB))
    cute.copy(r2s, piece, thr_r2s.partition_D(s_tile))


# ---------------------------------------------------------------------------------------------------- prep
@cute.kernel
def _prep_kernel(mO: cute.Tensor, mdO: cute.Tensor, mLSE: cute.Tensor, mDelta: cute.Tensor, mLse2: cute.Tensor,
                 mDqAcc: cute.Tensor, seqlen: cutlass.Int32, seq_pad: cutlass.Int32, d: cutlass.Constexpr,
                 dp: cutlass.Constexpr):
    """Delta and LSE2 of one row per warp, and the row's share (DP floats) of the fp32 dQ scratch zeroed: the
    scratch is [B*H, S_pad, DP] floats in size (its order inside a query block does not matter here), so the
    warps of all rows < S_pad together zero all of it. Zeroing here and not with torch.zeros keeps the call's
    first GPU work after all of its Python: nothing on the GPU waits for the host between launches."""
    tidx, _, _ = cute.arch.thread_idx()
    blk, bh, _ = cute.arch.block_idx()
    warp_id = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    lane = tidx % 32
    row = blk * PREP_ROWS + warp_id
    if row < seqlen:
        # v3: lanes < D/8 each read 8 contiguous bf16 of the row with one 16-byte load (flat views: tile k of 8
        # elements starts at byte 16k, so the alignment is known); the other lanes add 0.
        acc = cutlass.Float32(0.0)
        if lane < d // 8:
            flat_o = cute.make_tensor(mO.iterator, cute.make_layout(cute.size(mO)))
            flat_do = cute.make_tensor(mdO.iterator, cute.make_layout(cute.size(mdO)))
            k8 = (bh * seqlen + row) * (d // 8) + lane
            xo = cute.make_rmem_tensor((8,), AB)
            xd = cute.make_rmem_tensor((8,), AB)
            cute.autovec_copy(cute.local_tile(flat_o, (8,), (k8,)), xo)
            cute.autovec_copy(cute.local_tile(flat_do, (8,), (k8,)), xd)
            for e in cutlass.range_constexpr(8):
                acc = acc + xo[e].to(ACC) * xd[e].to(ACC)
        for off in cutlass.range_constexpr(5):
            acc = acc + cute.arch.shuffle_sync_bfly(acc, offset=16 >> off)
        if lane == 0:
            mDelta[(bh, row)] = acc
            mLse2[(bh, row)] = mLSE[(bh, row)] * LOG2E
    elif row < seq_pad:
        if lane == 0:
            mDelta[(bh, row)] = cutlass.Float32(0.0)
            mLse2[(bh, row)] = cutlass.Float32(math.inf)
    if row < seq_pad:
        # v3: one 16-byte store per lane (DP/4 lanes cover the row's DP floats), as cuDNN's prep does
        if lane < dp // 4:
            zero = cute.make_rmem_tensor((4,), ACC)
            zero.fill(0.0)
            cute.autovec_copy(zero, cute.local_tile(mDqAcc, (4,), ((bh * seq_pad + row) * (dp // 4) + lane,)))


# ---------------------------------------------------------------------------------------------------- fused
@cute.kernel
def _fused_kernel(
    mma_s: cute.TiledMma,        # S^T = K Q^T and dP^T = V dO^T: 128 keys x 64 query rows, K = DP (2 WGs)
    mma_acc: cute.TiledMma,      # dV += P^T dO, dK += dS^T Q: 128 keys x DP, K = 64 queries, A in registers
    mma_dq: cute.TiledMma,       # dQ_c = dS K_c: 64 queries x DP/2, K = 128 keys, A and B MN-major (1 WG)
    tma_q: cute.CopyAtom, tQ: cute.Tensor,
    tma_do: cute.CopyAtom, tdO: cute.Tensor,
    tma_k: cute.CopyAtom, tK: cute.Tensor,
    tma_v: cute.CopyAtom, tV: cute.Tensor,
    tma_dk: cute.CopyAtom, tdK: cute.Tensor,
    tma_dv: cute.CopyAtom, tdV: cute.Tensor,
    mLse2: cute.Tensor,              # [B*H, S_pad] LSE * log2(e), +inf past S
    mDelta: cute.Tensor,             # [B*H, S_pad], 0 past S
    mDqAcc: cute.Tensor,             # flat fp32 scratch, block (bh, m, c) of 32*DP floats in thread order
    key_lay: cute.ComposedLayout,    # (128, DP, 1) K-major: K, V (A operand), reused for the dK, dV stores
    key_lay_t: cute.ComposedLayout,  # (DP, 128, 1) MN-major view of the K tile (B of dQ)
    row_lay: cute.ComposedLayout,    # (64, DP, stages) K-major (B operand)
    row_lay_t: cute.ComposedLayout,  # (DP, 64, stages) MN-major (B operand): the same bytes
    ds_lay: cute.ComposedLayout,     # (128 keys, 64 queries, 2) K-major dS^T buffers
    ds_lay_t: cute.ComposedLayout,   # (64 queries, 128 keys, 2) MN-major view (A of dQ)
    seqlen: cutlass.Int32,
    heads: cutlass.Int32,
    kv_heads: cutlass.Int32,
    scale_log2: cutlass.Float32,
    scale: cutlass.Float32,
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
    n0 = n_blk * BN
    n_qblk = (seqlen + BM - 1) // BM
    m_lo = 0
    if cutlass.const_expr(causal):
        m_lo = n0 // BM                          # earlier query blocks see none of these keys
    per_head = n_qblk - m_lo
    steps = group * per_head

    if warp_id == 0:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_do)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cpasync.prefetch_descriptor(tma_dk)
        cpasync.prefetch_descriptor(tma_dv)

    n_vec = dp // 16                             # float4s per thread in one WG's dQ staging
    half_floats = 32 * dp                        # 64 rows x DP/2 fp32: one WG's staging / scratch block

    smem = cutlass.utils.SmemAllocator()
    bar_kv = smem.allocate_array(cutlass.Int64, 2, byte_alignment=8)
    bar_row = smem.allocate_array(cutlass.Int64, 2 * stages, byte_alignment=8)
    sK = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)    # (128, dp, 1)
    sV = smem.allocate_tensor(AB, key_lay.outer, byte_alignment=1024, swizzle=key_lay.inner)
    sQ = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)    # (64, dp, st)
    sdO = smem.allocate_tensor(AB, row_lay.outer, byte_alignment=1024, swizzle=row_lay.inner)
    sdS = smem.allocate_tensor(AB, ds_lay.outer, byte_alignment=1024, swizzle=ds_lay.inner)     # (128, 64, 2)
    # dQ staging, thread order: float v*512 + 4t + j of WG c's block holds register 4v + j of its thread t.
    sStage = smem.allocate_tensor(
        ACC, cute.make_layout((4, WG_THREADS, n_vec, 2), stride=(1, 4, 4 * WG_THREADS, half_floats)),
        byte_alignment=1024,
    )
    # LSE2 and Delta of the slot's 64 query rows, written by the producer warp's lanes (v2).
    sLse = smem.allocate_tensor(ACC, cute.make_layout((BM, stages)), byte_alignment=16)
    sDlt = smem.allocate_tensor(ACC, cute.make_layout((BM, stages)), byte_alignment=16)
    # MN-major views: same swizzled pointers, transposed layouts.
    sQt = cute.make_tensor(sQ.iterator, row_lay_t.outer)     # (dp, 64, st)
    sdOt = cute.make_tensor(sdO.iterator, row_lay_t.outer)
    sKt = cute.make_tensor(sK.iterator, key_lay_t.outer)     # (dp, 128, 1)
    sdSt = cute.make_tensor(sdS.iterator, ds_lay_t.outer)    # (64, 128, 2)

    key_bytes = cute.size_in_bytes(AB, cute.slice_(key_lay, (None, None, 0)))
    row_bytes = cute.size_in_bytes(AB, cute.slice_(row_lay, (None, None, 0)))
    producer = pipeline.CooperativeGroup(pipeline.Agent.Thread)
    row_producers = pipeline.CooperativeGroup(pipeline.Agent.Thread, 32)   # v2: the full barrier counts 32 lanes
    consumers = pipeline.CooperativeGroup(pipeline.Agent.Thread, CONSUMER_THREADS // 32)
    kv_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=1, producer_group=producer, consumer_group=consumers, tx_count=2 * key_bytes,
        barrier_storage=bar_kv,
    )
    row_pipe = pipeline.PipelineTmaAsync.create(
        num_stages=stages, producer_group=row_producers, consumer_group=consumers, tx_count=2 * row_bytes,
        barrier_storage=bar_row,
    )

    if wg == 0:
        # ================================================================== producer warpgroup
        cute.arch.setmaxregister_decrease(PRODUCER_REGS)
        if warp_id == 0:
            lane = tidx % 32
            gK = cute.local_tile(tK[(None, None, bkv)], (BN, dp), (None, 0))     # (128, dp, n_tiles)
            gV = cute.local_tile(tV[(None, None, bkv)], (BN, dp), (None, 0))
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
                gQ = cute.local_tile(tQ[(None, None, bh)], (BM, dp), (None, 0))    # (64, dp, m_tiles)
                gdO = cute.local_tile(tdO[(None, None, bh)], (BM, dp), (None, 0))
                q_dst, q_src = cpasync.tma_partition(
                    tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
                )
                do_dst, do_src = cpasync.tma_partition(
                    tma_do, 0, cute.make_layout(1), cute.group_modes(sdO, 0, 2), cute.group_modes(gdO, 0, 2)
                )
                # v2: every lane waits for the slot to be free; one elected lane sets the TMA byte count and
                # the elected TMA copies go out; then each lane copies LSE2 / Delta of rows lane and lane + 32
                # (the prep kernel's padded scratch: +inf / 0 past S) into the slot and arrives (release: the
                # full barrier's phase completes only after all 32 lanes' writes and the TMA bytes).
                row_pipe.sync_object_empty.wait(row_put.index, row_put.phase)
                full_bar = row_pipe.producer_get_barrier(row_put)
                with cute.arch.elect_one():
                    cute.arch.mbarrier_expect_tx(full_bar, 2 * row_bytes)
                cute.copy(tma_q, q_src[(None, m)], q_dst[(None, row_put.index)], tma_bar_ptr=full_bar)
                cute.copy(tma_do, do_src[(None, m)], do_dst[(None, row_put.index)], tma_bar_ptr=full_bar)
                for h2 in cutlass.range_constexpr(2):
                    r = lane + 32 * h2
                    sLse[(r, row_put.index)] = mLse2[(bh, m * BM + r)]
                    sDlt[(r, row_put.index)] = mDelta[(bh, m * BM + r)]
                cute.arch.mbarrier_arrive(full_bar)
                row_put.advance()
            row_pipe.producer_tail(row_put)
    else:
        # ================================================================== consumer warpgroups
        cute.arch.setmaxregister_increase(CONSUMER_REGS)
        ctid = tidx - WG_THREADS                 # 0..255
        cw = wg - 1                              # this WG owns keys n0 + 64 cw .. +63 and dQ columns half cw
        t = ctid - cw * WG_THREADS               # 0..127 inside the warpgroup
        key_hi = n0 + 64 * cw + 64               # one past this WG's last key

        thr_s = mma_s.get_slice(cw * WG_THREADS)
        fK = mma_s.make_fragment_A(thr_s.partition_A(sK))          # (.., MMA_M, MMA_K, 1)
        fV = mma_s.make_fragment_A(thr_s.partition_A(sV))
        fQ = mma_s.make_fragment_B(thr_s.partition_B(sQ))          # (.., MMA_N, MMA_K, stages)
        fdO = mma_s.make_fragment_B(thr_s.partition_B(sdO))
        acc_s = cute.make_rmem_tensor(thr_s.partition_C(cute.make_identity_tensor((BN, BM))).shape, ACC)
        acc_dp = cute.make_rmem_tensor(acc_s.shape, ACC)
        # (key, query) inside the 128 x 64 tile of each of this thread's S^T registers
        coord_s = mma_s.get_slice(ctid).partition_C(cute.make_identity_tensor((BN, BM)))
        s_kblocks = cute.size(fK, mode=[2])

        thr_a = mma_acc.get_slice(cw * WG_THREADS)
        fQt = mma_acc.make_fragment_B(thr_a.partition_B(sQt))       # (.., MMA_N, 4 k-blocks, stages)
        fdOt = mma_acc.make_fragment_B(thr_a.partition_B(sdOt))
        acc_dk = cute.make_rmem_tensor(thr_a.partition_C(cute.make_identity_tensor((BN, dp))).shape, ACC)
        acc_dv = cute.make_rmem_tensor(acc_dk.shape, ACC)
        a_kblocks = cute.size(fQt, mode=[2])

        # dQ_c = dS K[:, half cw]: A = dS^T buffers read MN-major (64 queries x 128 keys), B = the K tile's
        # columns of half cw read MN-major (DP/2 x 128 keys). mma_dq is one warpgroup: thread t.
        thr_q = mma_dq.get_slice(t)
        fdSt = mma_dq.make_fragment_A(thr_q.partition_A(sdSt))                  # (.., 1, 8 k-blocks, 2)
        sKt_half = cute.local_tile(sKt[(None, None, 0)], (dp // 2, BN), (cw, 0))  # (dp/2, 128)
        fKt = mma_dq.make_fragment_B(thr_q.partition_B(sKt_half))               # (.., 1, 8 k-blocks)
        acc_dq = cute.make_rmem_tensor(thr_q.partition_C(cute.make_identity_tensor((BM, dp // 2))).shape, ACC)
        q_kblocks = cute.size(fdSt, mode=[2])
        dq_vec = cute.make_tensor(acc_dq.iterator, cute.make_layout((4, n_vec)))  # flat 4v + j
        stage_mine = sStage[(None, t, None, cw)]                                   # (4, n_vec):(1, 512)
        vec_copy = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), ACC, num_bits_per_copy=128)

        # Accumulator flat index i = c + 2 r + 4 v (c column pair, r row +8, v 8-column group): the query
        # column depends on (c, v) only, so 2 * (BM / 8) LSE / Delta values per thread, j = c + 2 v.
        n_s = cute.size(acc_s)
        n_cols = n_s // 2
        lse2 = cute.make_rmem_tensor((n_cols,), ACC)
        dlt = cute.make_rmem_tensor((n_cols,), ACC)
        p_bf16 = cute.make_rmem_tensor(acc_s.shape, AB)
        ds_bf16 = cute.make_rmem_tensor(acc_s.shape, AB)
        frag_p = cute.make_tensor(p_bf16.iterator, cute.make_layout(((2, 2, 2), 1, BM // 16)))
        frag_ds = cute.make_tensor(ds_bf16.iterator, cute.make_layout(((2, 2, 2), 1, BM // 16)))

        acc_dk.fill(0.0)
        acc_dv.fill(0.0)
        mma_acc.set(warpgroup.Field.ACCUMULATE, True)

        kv_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        row_get = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)
        kv_pipe.consumer_wait(kv_get)

        for it in cutlass.range(steps, unroll=1):
            g = it // per_head
            m = m_lo + (it - g * per_head)
            bh = b * heads + kv * group + g
            q0 = m * BM
            buf = it % 2
            # ---------------- S^T = K_c Q^T (group 1), dP^T = V_c dO^T (group 2)
            row_pipe.consumer_wait(row_get)
            slot = row_get.index
            # v2: no register fill of acc_s / acc_dp: the first k-block overwrites (scale-d 0). The fill of
            # acc_dp between the two groups made ptxas wait for S^T to finish before issuing dP^T.
            warpgroup.fence()
            for kb in cutlass.range_constexpr(s_kblocks):
                mma_s.set(warpgroup.Field.ACCUMULATE, kb != 0)
                cute.gemm(mma_s, acc_s, fK[(None, None, kb, 0)], fQ[(None, None, kb, slot)], acc_s)
            warpgroup.commit_group()
            for kb in cutlass.range_constexpr(s_kblocks):
                mma_s.set(warpgroup.Field.ACCUMULATE, kb != 0)
                cute.gemm(mma_s, acc_dp, fV[(None, None, kb, 0)], fdO[(None, None, kb, slot)], acc_dp)
            warpgroup.commit_group()
            # v2: LSE * log2(e) of this thread's query columns from the slot (the producer staged them; read
            # only after the full-barrier wait, and before the slot's release below). Delta is read after P^T
            # (fewer live registers across the mask).
            for j in cutlass.range_constexpr(n_cols):
                lse2[j] = sLse[(coord_s[(j % 2) + 4 * (j // 2)][1], slot)]
            warpgroup.wait_group(1)              # S^T done; dP^T may still run

            # ---------------- P^T, masked only where this WG's keys hold a dead (key, query) pair
            for i in cutlass.range_constexpr(n_s):
                acc_s[i] = cute.arch.exp2(acc_s[i] * scale_log2 - lse2[(i % 2) + 2 * (i // 4)])
            needs_mask = key_hi > seqlen
            if cutlass.const_expr(causal):
                needs_mask = needs_mask | (q0 < key_hi)
            if needs_mask:
                for i in cutlass.range_constexpr(n_s):
                    key = n0 + coord_s[i][0]
                    dead = key >= seqlen
                    if cutlass.const_expr(causal):
                        dead = dead | (key > q0 + coord_s[i][1])
                    if dead:
                        acc_s[i] = 0.0
            p_bf16.store(acc_s.load().to(AB))
            for j in cutlass.range_constexpr(n_cols):
                dlt[j] = sDlt[(coord_s[(j % 2) + 4 * (j // 2)][1], slot)]     # 0 past S (v2: from the slot)
            warpgroup.wait_group(0)              # dP^T done
            # ---------------- dS^T = P^T (dP^T - Delta)
            for i in cutlass.range_constexpr(n_s):
                acc_dp[i] = acc_s[i] * (acc_dp[i] - dlt[(i % 2) + 2 * (i // 4)])
            ds_bf16.store(acc_dp.load().to(AB))
            # dS^T -> this WG's 64 rows of the shared buffer `buf`
            _stmatrix(mma_s, ds_bf16, sdS[(None, None, buf)], ctid)
            cute.arch.fence_proxy("async.shared", space="cta")

            # ---------------- G1: dV += P^T dO, dK += dS^T Q (A from registers, B MN-major views)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(a_kblocks):
                cute.gemm(mma_acc, acc_dv, frag_p[(None, None, kb)], fdOt[(None, None, kb, slot)], acc_dv)
            for kb in cutlass.range_constexpr(a_kblocks):
                cute.gemm(mma_acc, acc_dk, frag_ds[(None, None, kb)], fQt[(None, None, kb, slot)], acc_dk)
            warpgroup.commit_group()
            if t == 0:
                cute.arch.cp_async_bulk_wait_group(0, read=True)   # last step's staging has been read
            cute.arch.barrier(barrier_id=DS_BARRIER_ID, number_of_threads=CONSUMER_THREADS)

            # ---------------- G2: dQ_c = dS K[:, half cw] over the CTA's 128 keys
            warpgroup.fence()
            for kb in cutlass.range_constexpr(q_kblocks):
                mma_dq.set(warpgroup.Field.ACCUMULATE, kb != 0)
                cute.gemm(mma_dq, acc_dq, fdSt[(None, None, kb, buf)], fKt[(None, None, kb)], acc_dq)
            warpgroup.commit_group()
            warpgroup.wait_group(1)              # G1 done: the Q / dO slot is no longer read
            row_pipe.consumer_release(row_get)
            row_get.advance()
            warpgroup.wait_group(0)              # G2 done

            # ---------------- dQ_c -> staging (thread order) -> one bulk fp32 reduce-add by thread 0
            cute.copy(vec_copy, dq_vec, stage_mine)
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.barrier(barrier_id=STAGE_BARRIER_ID + cw, number_of_threads=WG_THREADS)
            if t == 0:
                blk_off = ((bh * n_qblk + m) * 2 + cw) * half_floats
                _bulk_reduce_add_f32(
                    (mDqAcc.iterator + blk_off).toint(), (sStage.iterator + cw * half_floats).toint(),
                    half_floats * 4,
                )
                cute.arch.cp_async_bulk_commit_group()

        if t == 0:
            cute.arch.cp_async_bulk_wait_group(0, read=False)

        # ---------------- epilogue: dK * scale, dV -> bf16 -> smem (the K / V tiles) -> TMA store (clipped)
        cute.arch.barrier(barrier_id=DS_BARRIER_ID, number_of_threads=CONSUMER_THREADS)   # K no longer read
        for i in cutlass.range_constexpr(cute.size(acc_dk)):
            acc_dk[i] = acc_dk[i] * scale
        _store_acc(mma_acc, acc_dk, sK[(None, None, 0)], ctid)
        _store_acc(mma_acc, acc_dv, sV[(None, None, 0)], ctid)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=DS_BARRIER_ID, number_of_threads=CONSUMER_THREADS)
        if warp_id == 4:
            gdK = cute.local_tile(tdK[(None, None, bkv)], (BN, dp), (None, 0))
            gdV = cute.local_tile(tdV[(None, None, bkv)], (BN, dp), (None, 0))
            dk_src, dk_dst = cpasync.tma_partition(
                tma_dk, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2), cute.group_modes(gdK, 0, 2)
            )
            dv_src, dv_dst = cpasync.tma_partition(
                tma_dv, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2), cute.group_modes(gdV, 0, 2)
            )
            cute.copy(tma_dk, dk_src[(None, 0)], dk_dst[(None, n_blk)])
            cute.copy(tma_dv, dv_src[(None, 0)], dv_dst[(None, n_blk)])
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)


# ---------------------------------------------------------------------------------------------------- convert
@cute.kernel
def _convert_kernel(mDqAcc: cute.Tensor, mdQ: cute.Tensor, n_pairs: cutlass.Int32, seqlen: cutlass.Int32,
                    scale: cutlass.Float32, d: cutlass.Constexpr, dp: cutlass.Constexpr):
    """Scratch block (bh, m, c) = 128 threads x DP/16 float4 in thread order: float4 v*128 + t holds registers
    4v..4v+3 of thread t = (row r, columns cc, cc+1), (row r+8, same columns), r = 16(t//32) + (t%32)//4,
    cc = c*DP/2 + 8v + 2(t%4). v3: a thread reads the float4s v and v+1 of its t (even v), and the 4 lanes of a
    quad (t%4 = 0..3, which hold 8 consecutive columns of rows r and r+8 for v and v+1 between them) trade
    bf16 pairs so that lane q stores 16 bytes: row r + 8(q%2), columns 8(v + q//2) .. +7. Two lanes fill each
    32-byte sector (v2's 4-byte stores left each sector half written)."""
    tidx, _, _ = cute.arch.thread_idx()
    blk, _, _ = cute.arch.block_idx()
    pair = blk * CONVERT_THREADS + tidx
    n_qblk = (seqlen + BM - 1) // BM
    # n_pairs = B*H*n_qblk * 2 halves * DP/32 pairs * 128 threads, a multiple of CONVERT_THREADS, and the grid
    # is exact: every quad is whole at the shuffles.
    if pair < n_pairs:
        bhm = pair // (8 * dp)
        rem = pair - bhm * (8 * dp)
        c = rem // (4 * dp)
        r2 = rem - c * (4 * dp)
        v = 2 * (r2 // WG_THREADS)
        t = r2 - (r2 // WG_THREADS) * WG_THREADS   # t % 32 is the lane: the terms above it are multiples of 128
        at = bhm * (16 * dp) + c * (8 * dp) + v * WG_THREADS + t
        x = cute.make_rmem_tensor((4,), ACC)
        y = cute.make_rmem_tensor((4,), ACC)
        cute.autovec_copy(cute.local_tile(mDqAcc, (4,), (at,)), x)
        cute.autovec_copy(cute.local_tile(mDqAcc, (4,), (at + WG_THREADS,)), y)
        # mine k: what lane k of the quad stores from this lane's two columns (k%2: row r+8; k//2: v+1)
        m0 = _pack_bf16x2(x[0] * scale, x[1] * scale)
        m1 = _pack_bf16x2(x[2] * scale, x[3] * scale)
        m2 = _pack_bf16x2(y[0] * scale, y[1] * scale)
        m3 = _pack_bf16x2(y[2] * scale, y[3] * scale)
        q = t % 4
        quad = tidx % 32 - q
        o0, o1, o2, o3 = m0, m1, m2, m3
        for j in cutlass.range_constexpr(4):
            # round j: lane q takes from lane (q + j) % 4 that lane's columns for q (it sends mine[(q - j) % 4])
            want = (q - j) & 3
            frm = (q + j) & 3
            send = cutlass.select_(want == 0, m0, cutlass.select_(want == 1, m1, cutlass.select_(want == 2, m2, m3)))
            got = send
            if j > 0:
                got = cute.arch.shuffle_sync(send, offset=quad + frm)
            o0 = cutlass.select_(frm == 0, got, o0)
            o1 = cutlass.select_(frm == 1, got, o1)
            o2 = cutlass.select_(frm == 2, got, o2)
            o3 = cutlass.select_(frm == 3, got, o3)
        bh = bhm // n_qblk
        m = bhm - bh * n_qblk
        row = m * BM + 16 * (t // 32) + (t % 32) // 4 + 8 * (q % 2)
        col = c * (dp // 2) + 8 * (v + q // 2)
        if row < seqlen:
            if col < d:   # col and D are multiples of 8: all 8 columns are inside D
                at_q = (cutlass.Int64(bh) * seqlen + row) * d + col
                _st_global_v4_b32((mdQ.iterator + at_q).toint(), o0, o1, o2, o3)


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
    lse2: cute.Tensor,
    dq_acc: cute.Tensor,
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
    # acc += A T: 128 rows x DP, A (P^T, dS^T) from registers, T a 64-row tile read MN-major.
    mma_acc = sm90_utils.make_trivial_tiled_mma(
        AB, AB, K_MAJ, MN_MAJ, ACC, (2, 1, 1), tiler_mn=(64, dp), a_source=warpgroup.OperandSource.RMEM
    )
    # dQ_c = dS K_c: one warpgroup, 64 queries x DP/2, both operands MN-major in shared memory.
    mma_dq = sm90_utils.make_trivial_tiled_mma(AB, AB, MN_MAJ, MN_MAJ, ACC, (1, 1, 1), tiler_mn=(64, dp // 2))
    key_lay = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BN, 64, dp), AB, 1)       # (128, dp, 1)
    key_lay_t = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (64, dp, BN), AB, 1)     # (dp, 128, 1)
    row_lay = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BN, BM, dp), AB, stages)  # (64, dp, st)
    row_lay_t = sm90_utils.make_smem_layout_b(LayoutEnum.COL_MAJOR, (BN, dp, BM), AB, stages)  # (dp, 64, st)
    ds_lay = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BN, 64, BM), AB, 2)        # (128, 64, 2)
    ds_lay_t = sm90_utils.make_smem_layout_a(LayoutEnum.COL_MAJOR, (BM, 64, BN), AB, 2)      # (64, 128, 2)
    t_key = cute.slice_(key_lay, (None, None, 0))
    t_row = cute.slice_(row_lay, (None, None, 0))

    g2s = cpasync.CopyBulkTensorTileG2SOp()
    s2g = cpasync.CopyBulkTensorTileS2GOp()
    tv = {name: _per_head(t) for name, t in (("q", q), ("do", do), ("k", k), ("v", v), ("dk", dk), ("dv", dv))}
    tma_k, tK = cpasync.make_tiled_tma_atom(g2s, tv["k"], t_key, (BN, dp))
    tma_v, tV = cpasync.make_tiled_tma_atom(g2s, tv["v"], t_key, (BN, dp))
    tma_q, tQ = cpasync.make_tiled_tma_atom(g2s, tv["q"], t_row, (BM, dp))
    tma_do, tdO = cpasync.make_tiled_tma_atom(g2s, tv["do"], t_row, (BM, dp))
    tma_dk, tdK = cpasync.make_tiled_tma_atom(s2g, tv["dk"], t_key, (BN, dp))
    tma_dv, tdV = cpasync.make_tiled_tma_atom(s2g, tv["dv"], t_key, (BN, dp))

    seqlen = cute.size(q, mode=[1])
    seq_pad = cute.size(delta, mode=[1])
    n_bh = cute.size(q, mode=[0])
    n_bkv = cute.size(k, mode=[0])
    n_pairs = cute.size(dq_acc) // 8

    _prep_kernel(o, do, lse, delta, lse2, dq_acc, seqlen, seq_pad, cute.size(q, mode=[2]), dp).launch(
        grid=((seq_pad + PREP_ROWS - 1) // PREP_ROWS, n_bh, 1), block=(PREP_ROWS * 32, 1, 1), stream=stream
    )
    _fused_kernel(
        mma_s, mma_acc, mma_dq, tma_q, tQ, tma_do, tdO, tma_k, tK, tma_v, tV, tma_dk, tdK, tma_dv, tdV,
        lse2, delta, dq_acc, key_lay, key_lay_t, row_lay, row_lay_t, ds_lay, ds_lay_t,
        seqlen, heads, kv_heads, scale_log2, scale, dp, stages, causal,
    ).launch(grid=((seqlen + BN - 1) // BN, n_bkv, 1), block=(THREADS, 1, 1), min_blocks_per_mp=1, stream=stream)
    _convert_kernel(dq_acc, dq, n_pairs, seqlen, scale, cute.size(q, mode=[2]), dp).launch(
        grid=((n_pairs + CONVERT_THREADS - 1) // CONVERT_THREADS, 1, 1), block=(CONVERT_THREADS, 1, 1),
        stream=stream,
    )


def _wrap(t):
    # [rows, S, D] or [rows, S] or [n]: every mode but the last static one dynamic (D static, 16-byte multiple)
    order = tuple(range(t.dim()))
    w = from_dlpack(t, assumed_align=16)
    for mode in range(min(t.dim(), 2) - 1, -1, -1):
        w = w.mark_compact_shape_dynamic(mode=mode, stride_order=order)
    return w


_compiled = {}


def xlang_entry(dO, Q, K, V, O, LSE, dQ, dK, dV, B, H, HKV, S, D):
    dp, stages = _tile_config(D)
    n_qblk = (S + BM - 1) // BM
    seq_pad = n_qblk * BM
    rows = B * H
    kv_rows = B * HKV
    delta = torch.empty((rows, seq_pad), dtype=torch.float32, device=Q.device)     # Delta, 0 past S
    lse2 = torch.empty((rows, seq_pad), dtype=torch.float32, device=Q.device)      # LSE log2(e), +inf past S
    dq_acc = torch.empty((rows * seq_pad * dp,), dtype=torch.float32, device=Q.device)   # fp32 dQ: prep zeroes it
    args = (
        _wrap(dO.view(rows, S, D)), _wrap(Q.view(rows, S, D)), _wrap(K.view(kv_rows, S, D)),
        _wrap(V.view(kv_rows, S, D)), _wrap(O.view(rows, S, D)), _wrap(LSE.view(rows, S)), _wrap(delta),
        _wrap(lse2), _wrap(dq_acc), _wrap(dQ.view(rows, S, D)), _wrap(dK.view(kv_rows, S, D)),
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
