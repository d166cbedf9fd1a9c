# The 2026-12-02 version ran on the H200 (2026-12-04, harness 7) at 831 GB/s; this one (step-major warp sums, a split
# plan that counts resident CTAs) is not yet run: tasks/attn_decode_paged/NOTES_cutedsl.md, "Why it was slow"
"""Expert Hopper (sm_90a) paged GQA decode in CuTe DSL for xlang's `attn_decode_paged` (split-KV, "flash decoding").

out[b, h] = softmax(scale * q[b, h] . K_b^T) V_b over the seq_lens[b] tokens of sequence b, whose token t sits in
slot t % P of page block_table[b, t // P] of k_cache / v_cache [NP, P, HKV, D]; G = H // HKV query heads share a
key/value head; D in {64, 128, 256}, P in {1, 16, 64}.

Design, top-down
  * Two kernels. The split kernel runs one CTA (4 warps) per (sequence, key/value head, split of the sequence's
    tokens) and writes, for each of its G query heads, the split's output normalised by its own sum and its
    log2-sum-exp into fp32 scratch; the combine kernel merges the splits of each (sequence, query head) by those
    weights. The split count comes from the longest possible sequence (MAXP * P: the lengths stay on the device,
    a host copy would stall the stream): about two waves of CTAs at the CTAs per SM that shared memory allows,
    whole tiles per split, at most 64 splits; a split past a shorter sequence's end owns no token and writes
    weight 0. A heuristic, not tuned.
  * Pages are gathered into shared memory with cp.async (CuTe's cpasync.CopyG2SOp, 16 bytes a copy: SASS LDGSTS),
    double-buffered, BN tokens of K and V a tile: per (token, 16-byte chunk) one thread looks up the token's page in
    block_table and copies from k_cache[page, t % P, kvh, 8 c ..] (offsets in 64 bits: the caches can pass 2^31
    bytes). Tokens at or past the split's end are never copied and never read, so neither a last page's tail, nor
    a page the table's padding names, nor any garbage slot (NaN, +-2^100) is touched.
  * Arithmetic on the CUDA cores (FMA): decode does about G FLOP per byte of KV, far under the H200's ridge of about
    206 FLOP per byte (arch_docs/h100/params.md), so the tensor cores would wait on memory anyway; whether mma.sync
    would be faster at G = 8 is not measured. Each lane owns D / 32 columns; the G query rows (pre-scaled by
    scale * log2 e) sit in registers. A warp takes the tile's tokens w, w + 4, ...: per token and head a dot of the
    lane's columns, a butterfly sum over the warp (the G heads' shuffles step by step, interleaved: _warp_sums),
    then the online softmax (exp2 domain) and O += p v on the lane's columns. The 4 warps' (m, l, O) merge through
    shared memory at the end of the split.
  * One compile per (D, P, G); B, H, HKV, NP, MAXP and the split plan are dynamic.

The index rules are small functions (_split_range, _tiles, _page_slot, _token_live, _token_row, _first_head) that the
kernels call on DSL values and tasks/attn_decode_paged/verify/decode_cutedsl_emulate.py (its CPU model) calls on ints.
"""

import math

import cutlass
import cutlass.cute as cute
from cuda.bindings import driver as cuda_driver
from cutlass.cute.nvgpu import cpasync
from cutlass.cute.runtime import from_dlpack, make_fake_stream

THREADS = 128
WARPS = THREADS // 32
STAGES = 2
AB = cutlass.BFloat16
ACC = cutlass.Float32
LOG2E = 1.4426950408889634
MAX_SPLITS = 64


def tokens_per_tile(D):
    return 32 if D == 256 else 64       # 2 stages x (K + V) x BN x D bf16: 64 KiB at D 128 and 256, 32 KiB at D 64


# ---------------------------------------------------------------- index rules (on DSL values in the kernels, on ints
# in the CPU model)
def _split_range(split, chunk, n):
    """Tokens start .. end - 1 of a sequence of n tokens belong to split `split` (empty when start >= end)."""
    start = split * chunk
    return start, cutlass.min(start + chunk, n)


def _tiles(start, end, bn):
    return (cutlass.max(end - start, 0) + bn - 1) // bn


def _page_slot(t, p):
    """Token t of a sequence: (its entry in the sequence's row of block_table, its slot in that page)."""
    return t // p, t % p


def _token_live(t, end):
    return t < end


def _token_row(r, warp):
    """The tile row (token) warp `warp` takes in its r-th step."""
    return r * WARPS + warp


def _first_head(kvh, g):
    """Query heads kvh * G .. kvh * G + G - 1 read key/value head kvh."""
    return kvh * g


@cute.jit
def _warp_sums(x: cute.Tensor, g: cutlass.Constexpr):
    """x[gi] summed over the warp, for the G heads at once. Step-major order on purpose: a warp issues in order and
    the shuffles keep their source order in the SASS, so head-major (one head's 5 dependent shuffles, then the
    next's) leaves every shuffle's latency exposed, G x 5 in a row per token; step-major puts the G heads'
    independent shuffles of a step back to back, one latency per step (NOTES_cutedsl.md, "Why it was slow")."""
    for i in cutlass.range_constexpr(5):
        for gi in cutlass.range_constexpr(g):
            x[gi] = x[gi] + cute.arch.shuffle_sync_bfly(x[gi], offset=1 << i)


@cute.jit
def _gather_tile(atom: cute.CopyAtom, mK: cute.Tensor, mV: cute.Tensor, mTable: cute.Tensor, sK: cute.Tensor,
                 sV: cute.Tensor, b: cutlass.Int32, kvh: cutlass.Int32, t0: cutlass.Int32, end: cutlass.Int32,
                 stage: cutlass.Int32, tidx: cutlass.Int32, d: cutlass.Constexpr, p: cutlass.Constexpr,
                 bn: cutlass.Constexpr):
    """cp.async of the tile's live tokens t0 .. t0 + bn - 1 (< end) of K and V into stage `stage`."""
    chunks = d // 8
    for k in cutlass.range_constexpr(bn * chunks // THREADS):
        idx = tidx + THREADS * k
        r = idx // chunks
        c = idx - r * chunks
        t = t0 + r
        if _token_live(t, end):
            entry, slot = _page_slot(t, p)
            page = cutlass.Int64(mTable[(b, entry)])
            src_k = cute.local_tile(mK[(page, slot, kvh, None)], (8,), (c,))
            src_v = cute.local_tile(mV[(page, slot, kvh, None)], (8,), (c,))
            cute.copy(atom, src_k, cute.local_tile(sK[(r, None, stage)], (8,), (c,)))
            cute.copy(atom, src_v, cute.local_tile(sV[(r, None, stage)], (8,), (c,)))


@cute.kernel
def _split_kernel(
    atom: cute.CopyAtom,
    mQ: cute.Tensor,
    mK: cute.Tensor,
    mV: cute.Tensor,
    mTable: cute.Tensor,
    mLens: cute.Tensor,
    mOpart: cute.Tensor,
    mLse: cute.Tensor,
    chunk: cutlass.Int32,
    nsplit: cutlass.Int32,
    scale_log2: cutlass.Float32,
    g: cutlass.Constexpr,
    d: cutlass.Constexpr,
    p: cutlass.Constexpr,
    bn: cutlass.Constexpr,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    lane = tidx % 32
    b, kvh, split = cute.arch.block_idx()
    heads = cute.size(mQ, mode=[1])
    vpl = d // 32                                # columns per lane: lane * vpl .. lane * vpl + vpl - 1
    n = mLens[b]
    start, end = _split_range(split, chunk, n)
    n_tiles = _tiles(start, end, bn)
    head0 = _first_head(kvh, g)

    smem = cutlass.utils.SmemAllocator()
    tile_layout = cute.make_layout((bn, d, STAGES), stride=(d, 1, bn * d))
    sK = smem.allocate_tensor(AB, tile_layout, byte_alignment=128)
    sV = smem.allocate_tensor(AB, tile_layout, byte_alignment=128)
    sM = smem.allocate_tensor(ACC, cute.make_layout((WARPS, g), stride=(g, 1)), byte_alignment=16)
    sL = smem.allocate_tensor(ACC, cute.make_layout((WARPS, g), stride=(g, 1)), byte_alignment=16)
    sO = smem.allocate_tensor(ACC, cute.make_layout((WARPS, g, d), stride=(g * d, d, 1)), byte_alignment=16)

    # the G query rows of this lane's columns, pre-scaled into the exp2 domain
    rq = cute.make_rmem_tensor((g, vpl), ACC)
    for gi in cutlass.range_constexpr(g):
        for e in cutlass.range_constexpr(vpl):
            rq[gi, e] = mQ[(b, head0 + gi, lane * vpl + e)].to(ACC) * scale_log2
    rm = cute.make_rmem_tensor((g,), ACC)
    rl = cute.make_rmem_tensor((g,), ACC)
    ro = cute.make_rmem_tensor((g, vpl), ACC)
    rk = cute.make_rmem_tensor((vpl,), ACC)
    rv = cute.make_rmem_tensor((vpl,), ACC)
    rs = cute.make_rmem_tensor((g,), ACC)       # the token's score for each head
    rm.fill(-math.inf)
    rl.fill(0.0)
    ro.fill(0.0)

    _gather_tile(atom, mK, mV, mTable, sK, sV, b, kvh, start, end, 0, tidx, d, p, bn)
    cute.arch.cp_async_commit_group()
    for j in cutlass.range(n_tiles, unroll=1):
        if j + 1 < n_tiles:
            _gather_tile(atom, mK, mV, mTable, sK, sV, b, kvh, start + (j + 1) * bn, end, (j + 1) % STAGES, tidx,
                         d, p, bn)
        cute.arch.cp_async_commit_group()        # every step commits (an empty group too): wait_group 1 = tile j
        cute.arch.cp_async_wait_group(1)
        cute.arch.sync_threads()
        stage = j % STAGES
        t0 = start + j * bn
        for r in cutlass.range_constexpr(bn // WARPS):
            row = _token_row(r, warp)
            if _token_live(t0 + row, end):
                for e in cutlass.range_constexpr(vpl):
                    rk[e] = sK[(row, lane * vpl + e, stage)].to(ACC)
                    rv[e] = sV[(row, lane * vpl + e, stage)].to(ACC)
                for gi in cutlass.range_constexpr(g):
                    rs[gi] = rq[gi, 0] * rk[0]
                    for e in cutlass.range_constexpr(1, vpl):
                        rs[gi] = rs[gi] + rq[gi, e] * rk[e]
                _warp_sums(rs, g)
                for gi in cutlass.range_constexpr(g):
                    s = rs[gi]
                    m_new = cute.arch.fmax(rm[gi], s)
                    alpha = cute.arch.exp2(rm[gi] - m_new)
                    pr = cute.arch.exp2(s - m_new)
                    rm[gi] = m_new
                    rl[gi] = rl[gi] * alpha + pr
                    for e in cutlass.range_constexpr(vpl):
                        ro[gi, e] = ro[gi, e] * alpha + pr * rv[e]
        cute.arch.sync_threads()                 # the stage is refilled by the next step's gather

    # ------------------------------------------------------------------ merge the 4 warps, write the split
    for gi in cutlass.range_constexpr(g):
        if lane == 0:
            sM[warp, gi] = rm[gi]
            sL[warp, gi] = rl[gi]
        for e in cutlass.range_constexpr(vpl):
            sO[warp, gi, lane * vpl + e] = ro[gi, e]
    cute.arch.sync_threads()
    for gi in cutlass.range_constexpr(g):
        m_all = sM[0, gi]
        for w in cutlass.range_constexpr(1, WARPS):
            m_all = cute.arch.fmax(m_all, sM[w, gi])
        m_safe = m_all
        if m_all == -math.inf:                   # a split with no token: weight 0, output 0
            m_safe = cutlass.Float32(0.0)
        l_all = cutlass.Float32(0.0)
        for w in cutlass.range_constexpr(WARPS):
            l_all = l_all + sL[w, gi] * cute.arch.exp2(sM[w, gi] - m_safe)
        inv = cutlass.Float32(0.0)
        lse = cutlass.Float32(-math.inf)
        if l_all > 0.0:
            inv = cutlass.Float32(1.0) / l_all
            lse = m_safe + cute.math.log2(l_all)
        part = ((b * heads + head0 + gi) * nsplit + split)
        for cc in cutlass.range_constexpr((d + THREADS - 1) // THREADS):
            col = tidx + THREADS * cc
            if col < d:
                o = cutlass.Float32(0.0)
                for w in cutlass.range_constexpr(WARPS):
                    o = o + sO[w, gi, col] * cute.arch.exp2(sM[w, gi] - m_safe)
                mOpart[part, col] = o * inv
        if tidx == 0:
            mLse[part] = lse


@cute.kernel
def _combine_kernel(mOpart: cute.Tensor, mLse: cute.Tensor, mOut: cute.Tensor, nsplit: cutlass.Int32,
                    d: cutlass.Constexpr):
    """out[b, h] = sum_s w_s O_s with w_s = exp2(lse_s - max) / sum; split 0 always owns a token (seq_lens >= 1), so
    the max is finite."""
    tidx, _, _ = cute.arch.thread_idx()
    bh, _, _ = cute.arch.block_idx()
    m_all = cutlass.Float32(-math.inf)
    for s in cutlass.range(nsplit, unroll=1):
        m_all = cute.arch.fmax(m_all, mLse[bh * nsplit + s])
    w_sum = cutlass.Float32(0.0)
    for s in cutlass.range(nsplit, unroll=1):
        w_sum = w_sum + cute.arch.exp2(mLse[bh * nsplit + s] - m_all)
    for cc in cutlass.range_constexpr((d + THREADS - 1) // THREADS):
        col = tidx + THREADS * cc
        if col < d:
            o = cutlass.Float32(0.0)
            for s in cutlass.range(nsplit, unroll=1):
                o = o + mOpart[bh * nsplit + s, col] * cute.arch.exp2(mLse[bh * nsplit + s] - m_all)
            mOut[bh, col] = (o / w_sum).to(AB)


@cute.jit
def _decode_host(
    q: cute.Tensor,
    k_cache: cute.Tensor,
    v_cache: cute.Tensor,
    block_table: cute.Tensor,
    seq_lens: cute.Tensor,
    o_part: cute.Tensor,
    lse_part: cute.Tensor,
    out: cute.Tensor,
    chunk: cutlass.Int32,
    nsplit: cutlass.Int32,
    scale_log2: cutlass.Float32,
    g: cutlass.Constexpr,
    d: cutlass.Constexpr,
    p: cutlass.Constexpr,
    stream: cuda_driver.CUstream,
):
    bn = tokens_per_tile(d)
    atom = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), AB, num_bits_per_copy=128)
    batch = cute.size(q, mode=[0])
    heads = cute.size(q, mode=[1])
    kv_heads = cute.size(k_cache, mode=[2])
    _split_kernel(atom, q, k_cache, v_cache, block_table, seq_lens, o_part, lse_part, chunk, nsplit, scale_log2,
                  g, d, p, bn).launch(grid=(batch, kv_heads, nsplit), block=(THREADS, 1, 1), stream=stream)
    _combine_kernel(o_part, lse_part, out, nsplit, d).launch(grid=(batch * heads, 1, 1), block=(THREADS, 1, 1),
                                                             stream=stream)


SMEM_PER_SM = 228 * 1024          # arch_docs/h100/params.md: shared memory per SM, and 1 KB reserved per block
SMEM_RESERVED = 1024


def split_smem_bytes(D, G):
    """The split kernel's shared memory: the K and V stages, then the warps' (m, l, O) for the merge."""
    return 2 * STAGES * tokens_per_tile(D) * D * 2 + WARPS * G * (2 + D) * 4


def ctas_per_sm(D, G):
    """Resident split CTAs per SM as shared memory allows (the binding limit at D 128: 72 KiB a CTA, 3 an SM;
    registers, 84 at D 128 G 4, would allow 5). A wave is this many CTAs per SM, not one."""
    return max(1, min(SMEM_PER_SM // (split_smem_bytes(D, G) + SMEM_RESERVED), 2048 // THREADS))


def split_plan(B, HKV, D, P, MAXP, sms, G):
    """(tokens per split, splits): about two waves of split CTAs at the resident CTAs per SM, whole tiles per split,
    at most MAX_SPLITS. Counting a wave as one CTA per SM (as before) gave one split at the default shape (B 64 x
    HKV 8 = 512 CTAs >= 2 x 132), so the longest sequence (4096 tokens, 64 tiles) ran in one CTA and set the
    kernel's time while the average slot held 44 tiles; two splits halve that walk."""
    bn = tokens_per_tile(D)
    tokens = MAXP * P
    nsplit = max(1, min(-(-2 * sms * ctas_per_sm(D, G) // (B * HKV)), -(-tokens // bn), MAX_SPLITS))
    chunk = -(-(-(-tokens // nsplit)) // bn) * bn
    return chunk, -(-tokens // chunk)


def _wrap(t, dynamic_modes, align=16):
    order = tuple(range(t.dim()))
    w = from_dlpack(t, assumed_align=align)
    for mode in dynamic_modes:
        w = w.mark_compact_shape_dynamic(mode=mode, stride_order=order)
    return w


_compiled = {}


def xlang_entry(q, k_cache, v_cache, block_table, seq_lens, out, B, H, HKV, D, P, MAXP, NP):
    import torch

    G = H // HKV
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
    chunk, nsplit = split_plan(B, HKV, D, P, MAXP, sms, G)
    o_part = torch.empty(B * H * nsplit, D, dtype=torch.float32, device=q.device)
    lse_part = torch.empty(B * H * nsplit, dtype=torch.float32, device=q.device)
    args = (_wrap(q, (0, 1)), _wrap(k_cache, (0, 2)), _wrap(v_cache, (0, 2)), _wrap(block_table, (0, 1), 4),
            _wrap(seq_lens, (0,), 4), _wrap(o_part, (0,)), _wrap(lse_part, (0,), 4), _wrap(out.view(B * H, D), (0,)))
    scalars = (cutlass.Int32(chunk), cutlass.Int32(nsplit), cutlass.Float32(LOG2E / math.sqrt(D)))
    key = (D, P, G)
    fn = _compiled.get(key)
    if fn is None:
        fn = cute.compile(_decode_host, *args, *scalars, G, D, P, make_fake_stream())
        _compiled[key] = fn
    stream = None
    if q.is_cuda:
        stream = cuda_driver.CUstream(torch.cuda.current_stream(q.device).cuda_stream)
    fn(*args, *scalars, stream)
